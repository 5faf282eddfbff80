"""Catalogue entry for `tritonkit.distill_loss`: inspector passes (the distillation row kernel
as the chunk loop launches it), benchmark cases against eager torch, torch.compile and Liger
Kernel's fused JSD, with each provider's peak memory; sample and fuzz."""

from __future__ import annotations

import functools

import torch

from ..ops.post_training import distill_loss, distill_loss_reference
from ..ops.post_training.distill_kernel import JSD, launch_distill_rows
from . import BenchCase, InspectRequest
from ._fuzz import FLOATS, FuzzInputs
from ._inputs import offset_view
from ._post_training import eager_distill, liger_distill, loss_entry, loss_providers

INSPECT_SHAPE = (1664, 151936)   # a chunk at Qwen's vocabulary
BETA = 0.5


def _inspect_inputs(request: InspectRequest, device: torch.device):
    rows, classes = request.shape or INSPECT_SHAPE
    dtype = request.dtype or torch.bfloat16
    student = offset_view((rows, classes), dtype, device, request.offset)
    teacher = torch.randn(rows, classes, device=device, dtype=dtype)
    stats = dict(lse=torch.empty(rows, dtype=torch.float64, device=device),
                 teacher_lse=torch.empty(rows, dtype=torch.float64, device=device),
                 aux=torch.empty(rows, device=device))
    return student, teacher, torch.zeros(rows, dtype=torch.int64, device=device), stats


def _inspect_fwd(request: InspectRequest, device: torch.device) -> None:
    # mean: the loss and statistics of each row, then the gradient over the student's chunk
    student, teacher, target, stats = _inspect_inputs(request, device)
    launch_distill_rows(student, teacher, target, -100, JSD, BETA, 1.0, **stats,
                        loss=torch.empty(target.shape[0], device=device), scale=torch.ones((), device=device))


def _inspect_bwd(request: InspectRequest, device: torch.device) -> None:
    # reduction="none": the recomputed chunk's gradient from the saved statistics, one scale a row
    student, teacher, target, stats = _inspect_inputs(request, device)
    launch_distill_rows(student, teacher, target, -100, JSD, BETA, 1.0, **stats,
                        scale=torch.ones(target.shape[0], device=device))


def _case(tokens: int, hidden: int, teacher_hidden: int, vocab: int, dtype: torch.dtype) -> BenchCase:
    def setup(device: torch.device):
        h = torch.randn(tokens, hidden, device=device, dtype=dtype).requires_grad_()
        w = (torch.randn(vocab, hidden, device=device, dtype=dtype) / hidden ** 0.5).requires_grad_()
        th = torch.randn(tokens, teacher_hidden, device=device, dtype=dtype)
        tw = torch.randn(vocab, teacher_hidden, device=device, dtype=dtype) / teacher_hidden ** 0.5
        target = torch.randint(0, vocab, (tokens,), device=device)
        target[::16] = -100

        def ours(h_, w_, th_, tw_, t_):
            return distill_loss(h_, w_, th_, tw_, target=t_, kind="jsd", beta=BETA)

        def fwd_bwd(loss_fn):
            return lambda: torch.autograd.grad(loss_fn(h, w, th, tw, target), (h, w))

        return loss_providers(fwd_bwd, ours, functools.partial(eager_distill, beta=BETA), liger_distill(BETA))

    name = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    return BenchCase(
        label=f"{tokens}x{hidden}x{teacher_hidden}x{vocab} {name}", group=f"distill_loss jsd {name}", unit="TFLOP/s",
        # the student's three products and the teacher's forward
        work=2 * tokens * vocab * (3 * hidden + teacher_hidden), size=tokens * vocab, setup=setup,
        bytes_in_flight=tokens * vocab * 2 * (dtype.itemsize + 12) + 2 * (tokens + vocab) * (hidden + teacher_hidden)
        * dtype.itemsize, memory=True)


def _bench_cases(on_gpu: bool) -> list[BenchCase]:
    if on_gpu:   # a 4096-wide student of an 8192-wide teacher, Qwen's vocabulary
        return [_case(8192, 4096, 8192, 151936, torch.bfloat16)]
    return [_case(9, 64, 96, 1000, torch.bfloat16)]


def _sample(device: torch.device) -> tuple:
    # hidden at an odd element offset, a transposed weight, a narrower teacher, biases,
    # unscored tokens, the JSD with reduction "none" (recomputed in the backward), chunks of 3.
    hidden = torch.randn(7 * 24 + 1, device=device)[1:].view(7, 24)
    weight = torch.randn(24, 301, device=device).t()
    target = torch.randint(0, 301, (7,), device=device)
    target[::3] = -100
    return (hidden, weight, target, torch.randn(301, device=device), torch.randn(7, 16, device=device),
            torch.randn(301, 16, device=device) / 4, torch.randn(301, device=device), "jsd", 0.3, 0.9, -100, "none",
            True, True, True, 3)


def _reference(hidden, weight, target, bias, teacher_hidden, teacher_weight, teacher_bias, kind, beta, temperature,
               ignore_index, reduction, want_hidden, want_weight, want_bias, chunk_tokens, upcast=True):
    """distill_loss_reference on the op's positional arguments (OpEntry.reference)."""
    return distill_loss_reference(hidden, weight, teacher_hidden, teacher_weight, target=target, bias=bias,
                                  teacher_bias=teacher_bias, kind=kind, beta=beta, temperature=temperature,
                                  ignore_index=ignore_index, reduction=reduction, upcast=upcast)


def _fuzz_inputs(inputs: FuzzInputs):
    draw = inputs.draw
    small = tuple(s for s in inputs.edge if s <= 31)
    tokens, width, teacher_width = draw.choice(small), draw.choice(small), draw.choice(small)
    vocab = draw.choice(inputs.edge + (1000,))
    dtype = draw.choice(FLOATS)
    tensors = dict(hidden=inputs.view((tokens, width), dtype),
                   weight=inputs.view((vocab, width), dtype, scale=3.0 / width ** 0.5))
    target = torch.randint(0, vocab, (tokens,), device=inputs.device, generator=inputs.generator)
    target[torch.rand(tokens, device=inputs.device, generator=inputs.generator) < draw.choice((0.0, 0.3, 1.0))] = -100
    options = dict(teacher_hidden=inputs.view((tokens, teacher_width), dtype),
                   teacher_weight=inputs.view((vocab, teacher_width), dtype, scale=3.0 / teacher_width ** 0.5),
                   target=target, kind=draw.choice(("forward_kl", "reverse_kl", "jsd")),
                   beta=draw.choice((0.5, 0.1, 1.0)), temperature=draw.choice((1.0, 0.7)),
                   reduction=draw.choice(("mean", "sum", "none")))
    return tensors, options


def _loss_shape(tensors, options):
    return tensors["hidden"].shape[:-1] if options["reduction"] == "none" else ()


ENTRY = loss_entry(
    "distill_loss",
    "forward/reverse KL and generalized JSD between a student's and a teacher's head without the logits",
    passes={"fwd": _inspect_fwd, "bwd": _inspect_bwd}, op="linear_distill_loss", bench_cases=_bench_cases,
    sample=_sample, reference=_reference, fuzz=(_fuzz_inputs, distill_loss, distill_loss_reference, _loss_shape))
