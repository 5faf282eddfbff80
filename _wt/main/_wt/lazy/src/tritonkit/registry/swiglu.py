"""Catalogue entry for `tritonkit.swiglu` (and the builders `registry/geglu.py` shares):
inspector passes and benchmark cases, forward and forward+backward, separate and packed;
sample and fuzz."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..ops.gated import SILU, gated_bwd, gated_fwd, swiglu, swiglu_reference
from . import BenchCase, InspectRequest, OpEntry
from ._accuracy import Comparison
from ._fuzz import FLOATS, FuzzCase, FuzzInputs, compare_gradients, compare_outputs, describe, numel
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


def _fuzz_inputs(inputs: FuzzInputs) -> dict[str, torch.Tensor]:
    """gate and up, each at its own layout, or one packed (..., 2 * I) [gate, up] tensor at a
    random layout (so the two halves can sit in any memory order relative to each other)."""
    draw = inputs.draw
    shape = inputs.shape(3)
    dtype = draw.choice(FLOATS)
    if draw.boolean():
        shape[-1] = min(shape[-1], max(1, inputs.max_elements // (2 * numel(shape[:-1]))))
        return {"gate": inputs.view([*shape[:-1], 2 * shape[-1]], dtype, scale=3.0)}
    return {"gate": inputs.view(shape, dtype, scale=3.0), "up": inputs.view(shape, dtype)}


def fuzz_cases(ours: Callable, reference: Callable, activations: tuple[tuple, ...],
               examples: tuple[int, int]) -> tuple[FuzzCase, FuzzCase]:
    """Forward and backward fuzz cases of a gated activation: ours(gate, up, *activation) and
    reference(gate, up, *activation, upcast=...), the activation drawn from `activations`
    (each a tuple of the op's extra arguments)."""
    def drawn(inputs: FuzzInputs):
        tensors = _fuzz_inputs(inputs)
        activation = inputs.draw.choice(activations)

        def bind(f):
            return lambda gate, up=None, **upcast: f(gate, up, *activation, **upcast)

        note = " ".join([*map(str, activation)] + [f"{name} {describe(t)}" for name, t in tensors.items()])
        return tensors, bind(ours), bind(reference), note

    def forward(inputs: FuzzInputs) -> list[Comparison]:
        tensors, ours_, reference_, note = drawn(inputs)
        out = ours_(**tensors)
        gate = tensors["gate"]
        assert out.dtype == gate.dtype and out.is_contiguous(), f"out: {out.dtype} {out.stride()}"
        return compare_outputs(note, ("out",), out, reference_(**tensors, upcast=True),
                               reference_(**tensors, upcast=False))

    def backward(inputs: FuzzInputs) -> list[Comparison]:
        tensors, ours_, reference_, note = drawn(inputs)
        gate = tensors["gate"]
        shape = gate.shape if "up" in tensors else (*gate.shape[:-1], gate.shape[-1] // 2)
        upstream = inputs.view(shape, gate.dtype)
        return compare_gradients(f"{note}, upstream {describe(upstream)}", tensors, ours_, reference_, [upstream])

    return FuzzCase("forward", examples[0], forward), FuzzCase("backward", examples[1], backward)


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
    fuzz=fuzz_cases(swiglu, swiglu_reference, ((),), examples=(40, 40)),
)
