"""Catalogue entry for `tritonkit.linear_logprobs`: inspector passes (the log-probability row
kernel as the chunk loop launches it), benchmark cases (per-token log-probabilities and entropy
under a policy-gradient objective, and DPO, which is built on them) against eager torch,
torch.compile, TRL's way and Liger Kernel, with each provider's peak memory; sample and fuzz."""

from __future__ import annotations

import torch

from ..ops.cross_entropy import linear_logprobs, linear_logprobs_reference
from ..ops.cross_entropy.logprob_kernel import launch_logprob_rows
from ..ops.post_training import dpo_loss, grpo_loss
from . import BenchCase, InspectRequest, two_pass_entry
from ._accuracy import Comparison
from ._fuzz import FLOATS, FuzzInputs, compare_gradients, describe
from ._inputs import offset_view, peer_compile
from ._post_training import (blockwise_logprobs, eager_dpo, eager_logprobs, liger_dpo, loss_providers, pg_objective,
                             reference_sums, trl_logprobs)
from .cross_entropy import fuzz_target

# One chunk of logits at Qwen's vocabulary (the default 512 MiB of bf16 logits: 1664 tokens).
INSPECT_SHAPE = (1664, 151936)


def _inspect_inputs(request: InspectRequest, device: torch.device):
    rows, classes = request.shape or INSPECT_SHAPE
    logits = offset_view((rows, classes), request.dtype or torch.bfloat16, device, request.offset)
    target = torch.randint(0, classes, (rows,), device=device)
    f32 = dict(dtype=torch.float32, device=device)
    return logits, target, torch.empty(rows, dtype=torch.float64, device=device), torch.empty(rows, **f32), \
        torch.empty(rows, **f32)


def inspect_stats(request: InspectRequest, device: torch.device) -> None:
    # the forward's pass: logp, entropy and lse of each row of a chunk
    logits, target, lse, logp, entropy = _inspect_inputs(request, device)
    launch_logprob_rows(logits, target, -100, 1.0, None, lse, logp=logp, entropy=entropy)


def inspect_grad(request: InspectRequest, device: torch.device) -> None:
    # the backward's pass: dlogits over the recomputed chunk, for upstream gradients of both
    logits, target, lse, grad_logp, grad_entropy = _inspect_inputs(request, device)
    launch_logprob_rows(logits, target, -100, 1.0, None, lse, entropy=grad_entropy, grad_logp=grad_logp,
                        grad_entropy=grad_entropy, grad=True)


def _tritonkit_logprobs(hidden, weight, target, temperature=1.0):
    return linear_logprobs(hidden, weight, target, temperature=temperature, return_entropy=True)


def _logprob_case(tokens: int, hidden: int, vocab: int, dtype: torch.dtype) -> BenchCase:
    def setup(device: torch.device):
        h = torch.randn(tokens, hidden, device=device, dtype=dtype).requires_grad_()
        w = (torch.randn(vocab, hidden, device=device, dtype=dtype) / hidden ** 0.5).requires_grad_()
        target = torch.randint(0, vocab, (tokens,), device=device)
        target[::16] = -100

        def fwd_bwd(logprobs):
            return lambda: torch.autograd.grad(pg_objective(*logprobs(h, w, target), target), (h, w))

        def fused():
            # The same objective through the fused loss (cispo on policy is -A * logp): its
            # gradients made in the forward, three products instead of four.
            advantage = (target % 7 - 3).float().unsqueeze(0) / 3
            loss = grpo_loss(h.unsqueeze(0), w, target.unsqueeze(0), advantage, loss_type="cispo",
                             epsilon_high=1e9, entropy_coef=0.01)
            return torch.autograd.grad(loss, (h, w))

        providers = {"tritonkit": fwd_bwd(_tritonkit_logprobs), "tritonkit fused": fused,
                     "eager": fwd_bwd(eager_logprobs),
                     "torch.compile": fwd_bwd(peer_compile(eager_logprobs)),
                     "TRL-style blocks": fwd_bwd(blockwise_logprobs)}
        trl = trl_logprobs()
        if trl is not None:
            providers["TRL"] = fwd_bwd(trl)
        return providers

    return BenchCase(
        label=f"{tokens}x{hidden}x{vocab} {_name(dtype)}", group=f"linear_logprobs+entropy {_name(dtype)}",
        unit="TFLOP/s", work=3 * 2 * tokens * hidden * vocab, size=tokens * vocab, setup=setup,
        # eager holds the logits, their float32 log-softmax, its exp and the gradient
        bytes_in_flight=tokens * vocab * (dtype.itemsize + 12) + 2 * (tokens + vocab) * hidden * dtype.itemsize,
        memory=True)


def _dpo_case(pairs: int, length: int, hidden: int, vocab: int, dtype: torch.dtype) -> BenchCase:
    def setup(device: torch.device):
        shape = (2 * pairs, length, hidden)
        h = torch.randn(shape, device=device, dtype=dtype).requires_grad_()
        w = (torch.randn(vocab, hidden, device=device, dtype=dtype) / hidden ** 0.5).requires_grad_()
        ref_h = torch.randn(shape, device=device, dtype=dtype)
        ref_w = torch.randn(vocab, hidden, device=device, dtype=dtype) / hidden ** 0.5
        target = torch.randint(0, vocab, shape[:2], device=device)
        target[:, : length // 4] = -100   # the prompt

        def ours(h_, w_, ref_h_, ref_w_, t_):
            return dpo_loss(h_, w_, t_, *reference_sums(_tritonkit_logprobs, ref_h_, ref_w_, t_))

        def fwd_bwd(loss_fn):
            return lambda: torch.autograd.grad(loss_fn(h, w, ref_h, ref_w, target), (h, w))

        return loss_providers(fwd_bwd, ours, eager_dpo, liger_dpo())

    tokens = 2 * pairs * length
    return BenchCase(
        label=f"{2 * pairs}x{length}x{hidden}x{vocab} {_name(dtype)}", group=f"dpo_loss {_name(dtype)}",
        unit="TFLOP/s", work=4 * 2 * tokens * hidden * vocab,   # with the reference model's forward
        size=tokens * vocab, setup=setup,
        bytes_in_flight=tokens * vocab * (dtype.itemsize + 12) + 4 * (tokens + vocab) * hidden * dtype.itemsize,
        memory=True)


def _name(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]


def _bench_cases(on_gpu: bool) -> list[BenchCase]:
    if on_gpu:   # the shape: 8192 tokens, Qwen's hidden 4096 and vocabulary 151936
        return [_logprob_case(8192, 4096, 151936, torch.bfloat16), _dpo_case(4, 1024, 4096, 151936, torch.bfloat16)]
    return [_logprob_case(9, 64, 1000, torch.bfloat16), _dpo_case(1, 5, 32, 500, torch.bfloat16)]


def _sample(device: torch.device) -> tuple:
    # hidden at an odd element offset, a transposed weight, ignored targets, a bias, softcap
    # and temperature, the entropy, chunks of 3 tokens over 7.
    hidden = torch.randn(7 * 24 + 1, device=device)[1:].view(7, 24)
    weight = torch.randn(24, 301, device=device).t()
    target = torch.randint(0, 301, (7,), device=device)
    target[::3] = -100
    return hidden, weight, target, torch.randn(301, device=device), 0.8, 20.0, -100, True, 3


def _reference(hidden, weight, target, bias, temperature, softcap, ignore_index, entropy, chunk_tokens, upcast=True):
    """linear_logprobs_reference on the op's positional arguments (OpEntry.reference)."""
    return linear_logprobs_reference(hidden, weight, target, bias=bias, temperature=temperature, softcap=softcap,
                                     ignore_index=ignore_index, return_entropy=entropy, upcast=upcast)


def _fuzz_inputs(inputs: FuzzInputs):
    draw = inputs.draw
    small = tuple(s for s in inputs.edge if s <= 31)
    tokens, width, vocab = draw.choice(small), draw.choice(small), draw.choice(inputs.edge + (1000, 1025))
    dtype = draw.choice(FLOATS)
    tensors = dict(hidden=inputs.view((tokens, width), dtype),
                   weight=inputs.view((vocab, width), dtype, scale=3.0 / width ** 0.5))
    if draw.boolean():
        tensors["bias"] = inputs.view((vocab,), dtype)
    target, ce_options = fuzz_target(inputs, tokens, vocab)
    options = dict(ignore_index=ce_options["ignore_index"], softcap=ce_options["softcap"],
                   temperature=draw.choice((1.0, 0.6, 1.7)), return_entropy=True)
    return tensors, target, options, draw.choice((None, 1, 2, 5))


def _note(tensors, target, options, chunk_tokens) -> str:
    return (f"linear_logprobs {options}, chunk_tokens={chunk_tokens}, {int((target == options['ignore_index']).sum())}"
            f"/{target.numel()} ignored: " + ", ".join(f"{n} {describe(t)}" for n, t in tensors.items()))


def _fuzz_forward(inputs: FuzzInputs) -> list[Comparison]:
    tensors, target, options, chunk_tokens = _fuzz_inputs(inputs)
    ours = linear_logprobs(**tensors, target=target, **options, chunk_tokens=chunk_tokens)
    reference = linear_logprobs_reference(**tensors, target=target, **options)
    same = linear_logprobs_reference(**tensors, target=target, **options, upcast=False)
    note = _note(tensors, target, options, chunk_tokens)
    return [Comparison(f"{name} of {note}", o, r, t) for name, o, r, t in zip(("logp", "entropy"), ours, reference, same)]


def _fuzz_backward(inputs: FuzzInputs) -> list[Comparison]:
    tensors, target, options, chunk_tokens = _fuzz_inputs(inputs)
    upstream = [inputs.randn(target.shape, torch.float32) for _ in range(2)]
    return compare_gradients(
        _note(tensors, target, options, chunk_tokens), tensors,
        lambda **t: linear_logprobs(**t, target=target, **options, chunk_tokens=chunk_tokens),
        lambda upcast, **t: linear_logprobs_reference(**t, target=target, **options, upcast=upcast), upstream)


ENTRY = two_pass_entry(
    "linear_logprobs", "per-token log-probabilities and entropy of a linear head without the logits (RL, DPO)",
    inspect=(inspect_stats, inspect_grad), fuzz=((10, _fuzz_forward), (8, _fuzz_backward)),
    bench_cases=_bench_cases, peers=("tritonkit fused", "eager", "torch.compile", "TRL-style blocks", "TRL", "Liger"),
    sample=_sample, reference=_reference)
