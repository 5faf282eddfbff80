"""Catalogue entry for `tritonkit.swiglu` (and the builder `registry/geglu.py` shares):
inspector passes and benchmark cases, forward and forward+backward, separate and packed."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..ops.gated import SILU, gated_bwd, gated_fwd, swiglu, swiglu_reference
from . import BenchCase, InspectRequest, OpEntry
from ._inputs import peer_compile


def _empty_view(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, offset: int) -> torch.Tensor:
    """An unfilled tensor `offset` elements into its buffer (the inspector compiles, never runs)."""
    numel = 1
    for s in shape:
        numel *= s
    return torch.empty(numel + offset, dtype=dtype, device=device)[offset:].view(shape)


def inspect_passes(activation: int) -> dict[str, Callable[[InspectRequest, torch.device], None]]:
    """fwd and bwd on separate (T, I) gate and up, by default Llama-3-8B's 8192 x 14336 bf16."""
    def inputs(request: InspectRequest, device: torch.device):
        shape = request.shape or (8192, 14336)
        dtype = request.dtype or torch.bfloat16
        return [_empty_view(shape, dtype, device, request.offset) for _ in range(3)]

    def fwd(request: InspectRequest, device: torch.device) -> None:
        gate, up, _ = inputs(request, device)
        gated_fwd(gate, up, activation)

    def bwd(request: InspectRequest, device: torch.device) -> None:
        gate, up, grad = inputs(request, device)
        gated_bwd(grad, gate, up, activation)

    return {"fwd": fwd, "bwd": bwd}


def _liger(name: str) -> Callable | None:
    """Liger Kernel's function for this op, when Liger imports (it is a peer, not a dependency)."""
    try:
        if name == "swiglu":
            from liger_kernel.ops.swiglu import LigerSiLUMulFunction as function
        else:
            from liger_kernel.ops.geglu import LigerGELUMulFunction as function
    except Exception:  # not installed, or its own imports fail on this machine
        return None
    return function.apply


def bench_case(name: str, ours: Callable, eager: Callable, tokens: int, width: int, dtype: torch.dtype,
               packed: bool, backward: bool, seed_table: bool = False) -> BenchCase:
    """One case: `ours` and the peers on (tokens, width) gate and up, separate or packed in one
    (tokens, 2 * width) tensor; forward, or forward and backward. GB/s count each tensor read
    or written once: 3 * T * I elements forward, 5 more backward (read gate, up, dout; write
    both gradients)."""
    element = dtype.itemsize
    elements = tokens * width * (8 if backward else 3)

    def setup(device: torch.device):
        x = torch.randn(tokens, 2 * width, device=device, dtype=dtype)
        args = [x] if packed else [t.contiguous() for t in x.chunk(2, dim=-1)]
        providers = {"tritonkit": ours, "eager": eager, "torch.compile": peer_compile(eager)}
        liger = _liger(name)
        if liger is not None and not packed:
            providers["Liger"] = liger
        if not backward:
            return {p: (lambda f=f: f(*args)) for p, f in providers.items()}
        leaves = [a.detach().requires_grad_() for a in args]
        grad = torch.randn(tokens, width, device=device, dtype=dtype)
        return {p: (lambda f=f: torch.autograd.grad(f(*leaves), leaves, grad)) for p, f in providers.items()}

    dtype_name = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    layout = " packed" if packed else ""
    pass_name = "fwd+bwd" if backward else "fwd"
    return BenchCase(
        label=f"{pass_name} {tokens}x{width}{layout} {dtype_name}", group=f"{name} {pass_name}{layout}",
        unit="GB/s", work=elements * element, size=tokens * width, setup=setup, seed_table=seed_table,
        bytes_in_flight=(12 if backward else 6) * tokens * width * element,
    )


def bench_cases(name: str, ours: Callable, eager: Callable, on_gpu: bool) -> list[BenchCase]:
    shapes = [(8192, 14336), (4096, 11008)] if on_gpu else [(64, 96), (37, 130)]
    cases = []
    for backward in (False, True):
        for packed in (False, True):
            cases += [bench_case(name, ours, eager, t, w, torch.bfloat16, packed, backward,
                                 seed_table=(t, w, packed, backward) == (*shapes[0], False, False))
                      for t, w in shapes]
    return cases


def sample(device: torch.device) -> tuple:
    # A packed (tokens, 2 * I) input at an odd element offset, I odd.
    return (torch.randn(3 * 2 * 9 + 1, device=device, dtype=torch.float16)[1:].view(3, 18), None)


ENTRY = OpEntry(
    name="swiglu",
    summary="silu(gate) * up, separate or packed [gate, up]; forward and backward",
    passes=inspect_passes(SILU),
    bench_cases=lambda on_gpu: bench_cases("swiglu", swiglu, lambda g, u=None: swiglu_reference(g, u, upcast=False),
                                           on_gpu),
    peers=("eager", "torch.compile", "Liger"),
    op="swiglu",
    sample=sample,
    reference=swiglu_reference,
)
