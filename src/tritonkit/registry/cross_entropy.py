"""Catalogue entry for `tritonkit.cross_entropy` (logits given): inspector passes and
benchmark cases against torch and Liger Kernel."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..ops.cross_entropy import cross_entropy, cross_entropy_bwd, cross_entropy_fwd, cross_entropy_reference
from . import BenchCase, InspectRequest, OpEntry
from ._inputs import offset_view, peer_compile
from ._peers import liger

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
    lse = torch.zeros(logits.shape[0], device=device)
    cross_entropy_bwd(torch.ones((), device=device, dtype=logits.dtype), logits, target, lse)


def eager_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """What a causal LM computes from bf16 logits: the loss in float32, as Hugging Face does."""
    return F.cross_entropy(logits.float(), target)


def _case(rows: int, classes: int, dtype: torch.dtype) -> BenchCase:
    element = dtype.itemsize

    def setup(device: torch.device):
        logits = torch.randn(rows, classes, device=device, dtype=dtype).requires_grad_()
        target = torch.randint(0, classes, (rows,), device=device)
        compiled = peer_compile(eager_cross_entropy)

        def fwd_bwd(loss_fn):
            return lambda: torch.autograd.grad(loss_fn(logits, target), logits)

        providers = {
            "tritonkit": fwd_bwd(cross_entropy),
            "eager": fwd_bwd(eager_cross_entropy),
            "torch.compile": fwd_bwd(compiled),
        }
        liger_loss = liger("transformers.cross_entropy", "LigerCrossEntropyLoss")
        if liger_loss is not None:
            # Liger writes the gradient over its input: give it a copy of the logits to wreck.
            own = logits.detach().clone().requires_grad_()
            loss_fn = liger_loss()
            providers["Liger"] = lambda: torch.autograd.grad(loss_fn(own, target), own)
        return providers

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


ENTRY = OpEntry(
    name="cross_entropy",
    summary="cross-entropy of given logits (label smoothing, softcap, ignore_index); forward and backward",
    passes={"fwd": _inspect_fwd, "bwd": _inspect_bwd},
    bench_cases=_bench_cases,
    peers=("eager", "torch.compile", "Liger"),
    op="cross_entropy",
    sample=_sample,
    reference=_reference,
)
