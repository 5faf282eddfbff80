"""Catalogue entry for `tritonkit.linear_cross_entropy`: inspector passes (the row kernel as
the chunk loop launches it) and benchmark cases, forward+backward, against torch and Liger
Kernel, with each provider's peak memory; sample and fuzz."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..ops.cross_entropy import linear_cross_entropy, linear_cross_entropy_reference
from ..ops.cross_entropy.kernel import launch_rows, valid_count
from . import BenchCase, InspectRequest, two_pass_entry
from ._accuracy import Comparison, condition
from ._fuzz import FLOATS, FuzzInputs, describe
from .cross_entropy import describe_options, fuzz_target
from ._inputs import offset_view
from ._peers import fwd_bwd_providers, liger

# One chunk of logits at a Llama-3 vocabulary (the default 2048 tokens of 128256 bf16 classes).
INSPECT_SHAPE = (2048, 128256)


def _inspect_inputs(request: InspectRequest, device: torch.device):
    rows, classes = request.shape or INSPECT_SHAPE
    logits = offset_view((rows, classes), request.dtype or torch.bfloat16, device, request.offset)
    target = torch.randint(0, classes, (rows,), device=device)
    return logits, target, torch.empty(rows, device=device)


def _inspect_fwd(request: InspectRequest, device: torch.device) -> None:
    # mean: loss of each row, then the gradient written over the chunk's logits
    logits, target, loss = _inspect_inputs(request, device)
    launch_rows(logits, target, -100, 0.0, None, loss=loss, grad=logits, count=valid_count(target, -100),
                name="linear_cross_entropy")


def _inspect_bwd(request: InspectRequest, device: torch.device) -> None:
    # reduction="none": the recomputed chunk's gradient from the saved lse, scaled per row
    logits, target, loss = _inspect_inputs(request, device)
    lse = torch.empty(logits.shape[0], dtype=torch.float64, device=device)   # as the forward saves it
    launch_rows(logits, target, -100, 0.0, None, lse=lse, compute_lse=False, grad=logits,
                upstream=torch.ones_like(loss), name="linear_cross_entropy")


def eager_linear_cross_entropy(hidden, weight, target):
    """The reference composition a causal-LM head runs: bf16 logits, the loss in float32."""
    return F.cross_entropy(F.linear(hidden, weight).float(), target)


def _case(tokens: int, hidden: int, vocab: int, dtype: torch.dtype) -> BenchCase:
    def setup(device: torch.device):
        h = (torch.randn(tokens, hidden, device=device, dtype=dtype)).requires_grad_()
        w = (torch.randn(vocab, hidden, device=device, dtype=dtype) / hidden ** 0.5).requires_grad_()
        target = torch.randint(0, vocab, (tokens,), device=device)
        target[::16] = -100

        def fwd_bwd(loss_fn):
            return lambda: torch.autograd.grad(loss_fn(h, w, target), (h, w))

        liger_loss = liger("transformers.fused_linear_cross_entropy", "LigerFusedLinearCrossEntropyLoss")
        liger_call = None
        if liger_loss is not None:
            loss_fn = liger_loss()
            liger_call = fwd_bwd(lambda h_, w_, t_: loss_fn(w_, h_, t_))
        return fwd_bwd_providers(fwd_bwd, linear_cross_entropy, eager_linear_cross_entropy, liger_call)

    name = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    element = dtype.itemsize
    return BenchCase(
        label=f"{tokens}x{hidden}x{vocab} {name}", group=f"linear_cross_entropy {name}", unit="TFLOP/s",
        # the three products: logits, grad_hidden and grad_weight, 2*T*H*V flops each
        work=3 * 2 * tokens * hidden * vocab, size=tokens * vocab, setup=setup,
        # eager holds bf16 logits, their float32 copy, log-softmax and its gradient
        bytes_in_flight=(tokens * vocab * (element + 12) + 2 * (tokens + vocab) * hidden * element),
        memory=True,
    )


def _bench_cases(on_gpu: bool) -> list[BenchCase]:
    shapes = [(8192, 4096, 128256), (4096, 2048, 32000)] if on_gpu else [(9, 64, 1000)]
    return [_case(t, h, v, torch.bfloat16) for t, h, v in shapes]


def _sample(device: torch.device) -> tuple:
    # hidden at an odd element offset, a transposed weight, ignored targets, smoothing, softcap,
    # reduction="none" (the backward recomputes the chunks), chunks of 3 tokens over 7.
    hidden = torch.randn(7 * 24 + 1, device=device)[1:].view(7, 24)
    weight = torch.randn(24, 301, device=device).t()
    target = torch.randint(0, 301, (7,), device=device)
    target[::3] = -100
    return (hidden, weight, target, torch.randn(301, device=device), -100, 0.1, "none", 5.0,
            True, True, True, 3)


def _reference(hidden, weight, target, bias, ignore_index, label_smoothing, reduction, softcap,
               grad_hidden, grad_weight, grad_bias, chunk_tokens, upcast=True):
    """linear_cross_entropy_reference on the op's positional arguments (OpEntry.reference)."""
    return linear_cross_entropy_reference(hidden, weight, target, bias=bias, ignore_index=ignore_index,
                                          label_smoothing=label_smoothing, reduction=reduction, softcap=softcap,
                                          upcast=upcast)


def _fuzz_inputs(inputs: FuzzInputs) -> tuple[list, torch.Tensor, dict, int | None]:
    """[hidden (T, H), weight (V, H), bias (V,) or None], each at its own layout; a target with
    its options; chunk_tokens (None, or a few tokens so that several chunks run)."""
    draw = inputs.draw
    small = tuple(s for s in inputs.edge if s <= 31)
    tokens, width, vocab = draw.choice(small), draw.choice(small), draw.choice(inputs.edge)
    dtype = draw.choice(FLOATS)
    tensors = [inputs.view((tokens, width), dtype), inputs.view((vocab, width), dtype, scale=3.0 / width ** 0.5)]
    tensors.append(inputs.view((vocab,), dtype) if draw.boolean() else None)
    target, options = fuzz_target(inputs, tokens, vocab)
    return tensors, target, options, draw.choice((None, 1, 2, 3, 5))


def _note(tensors: list, target: torch.Tensor, options: dict, chunk_tokens: int | None) -> str:
    names = ("hidden", "weight", "bias")
    return (f"linear_cross_entropy {describe_options(target, options)}, chunk_tokens={chunk_tokens}: "
            + ", ".join(f"{n} {describe(t)}" for n, t in zip(names, tensors) if t is not None))


def _loss(function, tensors, target, options, **kwargs):
    hidden, weight, bias = tensors
    return function(hidden, weight, target, bias=bias, **options, **kwargs)


def _fuzz_forward(inputs: FuzzInputs) -> list[Comparison]:
    tensors, target, options, chunk_tokens = _fuzz_inputs(inputs)
    loss = _loss(linear_cross_entropy, tensors, target, options, chunk_tokens=chunk_tokens)
    assert loss.dtype == torch.float32, f"linear_cross_entropy: loss {loss.dtype}"
    return [Comparison(_note(tensors, target, options, chunk_tokens), loss,
                       _loss(linear_cross_entropy_reference, tensors, target, options),
                       _loss(linear_cross_entropy_reference, tensors, target, options, upcast=False))]


def _fuzz_backward(inputs: FuzzInputs) -> list[Comparison]:
    # Gradients of a drawn subset of hidden, weight and bias (the forward makes only those).
    tensors, target, options, chunk_tokens = _fuzz_inputs(inputs)
    present = [i for i, t in enumerate(tensors) if t is not None]
    wanted = [i for i in present if inputs.draw.boolean()] or [inputs.draw.choice(present)]

    def grads(function, cast, upstream, **kwargs):
        leaves = [None if t is None else t.detach().to(cast(t)).requires_grad_(i in wanted)
                  for i, t in enumerate(tensors)]
        loss = _loss(function, leaves, target, options, **kwargs)
        return torch.autograd.grad(loss, [leaves[i] for i in wanted], upstream.to(loss.dtype))

    none = options["reduction"] == "none"
    upstream = inputs.view(target.shape, torch.float32) if none else inputs.randn((), torch.float32)
    ours = grads(linear_cross_entropy, lambda t: t.dtype, upstream, chunk_tokens=chunk_tokens)
    reference = grads(linear_cross_entropy_reference, lambda t: torch.float64, upstream)
    torch_same = grads(linear_cross_entropy_reference, lambda t: t.dtype, upstream, upcast=False)
    note = _note(tensors, target, options, chunk_tokens)
    names = ("hidden", "weight", "bias")
    # Each gradient sums the logits' gradients, each rounded to the inputs' dtype first (as
    # torch's are): their cancellation amplifies those roundings (a vocabulary of 2 sums
    # p - y of nearly opposite signs), so the tolerance carries the sums' condition number.
    magnitudes = _gradient_magnitudes(tensors, target, options, upstream)
    return [Comparison(f"grad {names[i]} of {note}", o, r, t, gradient=True,
                       roundings=1.0 + condition(magnitudes[i], r))
            for i, o, r, t in zip(wanted, ours, reference, torch_same)]


def _gradient_magnitudes(tensors, target, options, upstream) -> tuple:
    """The sums of absolute terms behind grad hidden, grad weight and grad bias: |dz| |W|,
    |dz|^T |h| and the column sums of |dz|, dz the float64 reference's logits' gradient."""
    hidden, weight, bias = (None if t is None else t.double() for t in tensors)
    z = F.linear(hidden, weight, bias).detach().requires_grad_()
    # the reference applied to the logits themselves: an identity head over z
    identity = torch.eye(z.shape[1], dtype=z.dtype, device=z.device)
    (dz,) = torch.autograd.grad(_loss(linear_cross_entropy_reference, [z, identity, None], target, options), (z,),
                                upstream.double())
    dz = dz.abs()
    return dz @ weight.abs(), dz.t() @ hidden.abs(), dz.sum(0)


ENTRY = two_pass_entry(
    "linear_cross_entropy",
    "linear head + cross-entropy without the logits: chunked cuBLAS products, one row kernel a chunk",
    inspect=(_inspect_fwd, _inspect_bwd), fuzz=((30, _fuzz_forward), (20, _fuzz_backward)),
    bench_cases=_bench_cases, peers=("eager", "torch.compile", "Liger"),
    sample=_sample, reference=_reference)
