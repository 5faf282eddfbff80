"""Catalogue entry for `tritonkit.cross_entropy` (logits given): inspector passes, benchmark
cases against torch and Liger Kernel, sample and fuzz."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..ops.cross_entropy import cross_entropy, cross_entropy_bwd, cross_entropy_fwd, cross_entropy_reference
from ..ops.cross_entropy.kernel import MAX_BLOCK, REDUCTIONS
from . import BenchCase, InspectRequest, two_pass_entry
from ._accuracy import Comparison
from ._fuzz import FLOATS, FuzzInputs, describe
from ._inputs import offset_view
from ._peers import fwd_bwd_providers, liger

# The kernel does not depend on the number of rows: a few rows of a Llama-3 vocabulary.
INSPECT_SHAPE = (16, 128256)


def _inspect_inputs(request: InspectRequest, device: torch.device):
    rows, classes = request.shape or INSPECT_SHAPE
    logits = offset_view((rows, classes), request.dtype or torch.bfloat16, device, request.offset)
    return logits, torch.randint(0, classes, (rows,), device=device)


def _inspect_fwd(request: InspectRequest, device: torch.device) -> None:
    cross_entropy_fwd(*_inspect_inputs(request, device))


def _inspect_bwd(request: InspectRequest, device: torch.device) -> None:
    logits, target = _inspect_inputs(request, device)
    lse = torch.zeros(logits.shape[0], dtype=torch.float64, device=device)   # as the forward saves it
    cross_entropy_bwd(torch.ones((), device=device, dtype=logits.dtype), logits, target, lse)


def eager_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """What a causal LM computes from bf16 logits: the loss in float32, as Hugging Face does."""
    return F.cross_entropy(logits.float(), target)


def _case(rows: int, classes: int, dtype: torch.dtype) -> BenchCase:
    element = dtype.itemsize

    def setup(device: torch.device):
        logits = torch.randn(rows, classes, device=device, dtype=dtype).requires_grad_()
        target = torch.randint(0, classes, (rows,), device=device)

        def fwd_bwd(loss_fn):
            return lambda: torch.autograd.grad(loss_fn(logits, target), logits)

        liger_loss = liger("transformers.cross_entropy", "LigerCrossEntropyLoss")
        liger_call = None
        if liger_loss is not None:
            # Liger writes the gradient over its input: give it a copy of the logits to wreck.
            own = logits.detach().clone().requires_grad_()
            loss_fn = liger_loss()
            liger_call = lambda: torch.autograd.grad(loss_fn(own, target), own)  # noqa: E731
        return fwd_bwd_providers(fwd_bwd, cross_entropy, eager_cross_entropy, liger_call)

    name = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    return BenchCase(
        label=f"{rows}x{classes} {name} fwd+bwd", group=f"cross_entropy {name}", unit="GB/s",
        # the logits read forward, read and the gradient written backward
        work=3 * rows * classes * element, size=rows * classes, setup=setup,
        bytes_in_flight=8 * rows * classes * element, memory=True,
    )


def _bench_cases(on_gpu: bool) -> list[BenchCase]:
    shapes = [(8192, 128256), (4096, 32000)] if on_gpu else [(7, 1000)]
    return [_case(r, c, torch.bfloat16) for r, c in shapes]


def _sample(device: torch.device) -> tuple:
    # Transposed logits (columns strided), some targets ignored, smoothing and softcap.
    logits = torch.randn(300, 9, device=device).t()
    target = torch.randint(0, 300, (9,), device=device)
    target[::4] = -100
    return logits, target, -100, 0.1, "none", 5.0, False


def _reference(logits, target, ignore_index, label_smoothing, reduction, softcap, inplace_backward,
               upcast=True):
    """cross_entropy_reference on the op's positional arguments (OpEntry.reference)."""
    return cross_entropy_reference(logits, target, ignore_index=ignore_index, label_smoothing=label_smoothing,
                                   reduction=reduction, softcap=softcap, upcast=upcast)


LONG_ROW = MAX_BLOCK + 1     # the first class count a program walks in two steps


def fuzz_target(inputs: FuzzInputs, rows: int, classes: int) -> tuple[torch.Tensor, dict]:
    """Class indices for `rows` rows (int64 or int32, a step-sliced view), none, some or all
    of them ignore_index (-100, -1, or class 0 itself), and the loss options beside them:
    every reduction, label smoothing and softcap on or off."""
    draw = inputs.draw
    ignore_index = draw.choice((-100, -1, 0))
    step = draw.choice((1, 1, 2))
    target = torch.randint(0, classes, (rows * step,), device=inputs.device, generator=inputs.generator)
    target = target.to(draw.choice((torch.int64, torch.int32)))[::step]
    ignored = torch.rand(rows, device=inputs.device, generator=inputs.generator) < draw.choice((0.0, 0.3, 1.0))
    target[ignored] = ignore_index
    options = dict(ignore_index=ignore_index, label_smoothing=draw.choice((0.0, 0.1)),
                   reduction=draw.choice(REDUCTIONS), softcap=draw.choice((None, 5.0, 30.0)))
    return target, options


def describe_options(target: torch.Tensor, options: dict) -> str:
    ignored = int((target == options["ignore_index"]).sum())
    return ", ".join(f"{k}={v}" for k, v in options.items()) + f", {ignored}/{target.numel()} ignored"


def _fuzz_inputs(inputs: FuzzInputs) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Logits (rows, classes) at a drawn layout (the class dim innermost in memory or not), a
    target and the options."""
    draw = inputs.draw
    classes = draw.choice(inputs.edge + inputs.block_edge + (LONG_ROW,))
    rows = max(1, min(draw.choice(inputs.edge), inputs.max_elements // classes))
    logits = inputs.view((rows, classes), draw.choice(FLOATS), scale=4.0)
    return (logits, *fuzz_target(inputs, rows, classes))


def _fuzz_forward(inputs: FuzzInputs) -> list[Comparison]:
    logits, target, options = _fuzz_inputs(inputs)
    loss = cross_entropy(logits, target, **options)
    assert loss.dtype == logits.dtype, f"cross_entropy: loss {loss.dtype}"
    return [Comparison(f"cross_entropy {describe_options(target, options)}: logits {describe(logits)}", loss,
                       cross_entropy_reference(logits, target, **options),
                       cross_entropy_reference(logits, target, **options, upcast=False))]


def _fuzz_backward(inputs: FuzzInputs) -> list[Comparison]:
    # The launchers on their own: an upstream gradient at its own layout (one value a row for
    # reduction="none"), and sometimes the gradient written over the logits view itself.
    logits, target, options = _fuzz_inputs(inputs)
    dtype = logits.dtype
    loss, lse, count = cross_entropy_fwd(logits, target, **options)
    grad_loss = inputs.view(loss.shape, dtype) if loss.dim() else inputs.randn((), dtype)
    wide, same = logits.detach().double().requires_grad_(), logits.detach().clone().requires_grad_()
    (reference,) = torch.autograd.grad(cross_entropy_reference(wide, target, **options), wide, grad_loss.double())
    (torch_same,) = torch.autograd.grad(cross_entropy_reference(same, target, **options, upcast=False), same,
                                        grad_loss)
    note = f"cross_entropy backward {describe_options(target, options)}: logits {describe(logits)}"
    inplace = inputs.draw.boolean()
    grad = cross_entropy_bwd(grad_loss, logits, target, lse, **options, inplace=inplace, count=count)
    assert not inplace or grad is logits, "cross_entropy_bwd(inplace=True) did not return the logits"
    return [Comparison(f"{note}, grad_loss {describe(grad_loss)}, inplace={inplace}", grad, reference, torch_same,
                       gradient=True)]


ENTRY = two_pass_entry(
    "cross_entropy", "cross-entropy of given logits (label smoothing, softcap, ignore_index); forward and backward",
    inspect=(_inspect_fwd, _inspect_bwd), fuzz=((25, _fuzz_forward), (25, _fuzz_backward)),
    bench_cases=_bench_cases, peers=("eager", "torch.compile", "Liger"),
    sample=_sample, reference=_reference)
