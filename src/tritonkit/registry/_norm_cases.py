"""Benchmark cases, inspector passes and fuzz cases shared by the RMSNorm and LayerNorm entries.

GB/s count each tensor read or written once: forward x and y (plus residual and h with a
residual); backward h, dy and dx (plus dh); the (hidden,) weight and bias are negligible.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .._runtime import INTERPRETED
from . import BenchCase, InspectRequest, OpEntry
from ._accuracy import Comparison
from ._fuzz import FLOATS, FuzzCase, FuzzInputs, compare_gradients, compare_outputs, describe, numel
from ._inputs import offset_view, peer_compile

# A provider: f(x, weight, residual) -> y, or (y, h) with a residual.
Provider = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], object]


def unfused(norm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Provider:
    """A peer without a fused residual: h = x + residual in eager torch, then the norm."""
    def run(x, w, r):
        if r is None:
            return norm(x, w)
        h = x + r
        return norm(h, w), h
    return run


def liger(import_function: Callable[[], Callable]) -> Provider | None:
    """Liger Kernel's norm when it imports (None otherwise: the provider is left out)."""
    try:
        function = import_function()
    except ImportError:
        return None
    return unfused(function)


def inspect_inputs(request: InspectRequest, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    shape = request.shape or (8192, 4096)
    dtype = request.dtype or torch.bfloat16
    return offset_view(shape, dtype, device, request.offset), torch.empty(shape[-1], dtype=dtype, device=device)


def norm_case(op: str, shape: tuple[int, ...], dtype: torch.dtype, backward: bool, residual: bool,
              providers: Callable[[], dict[str, Provider | None]]) -> BenchCase:
    numel = math.prod(shape)
    tensors = (4 if residual else 2) + ((4 if residual else 3) if backward else 0)
    name = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]
    pass_name = "fwd+bwd" if backward else "fwd"
    label = f"{pass_name} {'x'.join(map(str, shape))} {name}{' +res' if residual else ''}"

    def setup(device: torch.device):
        x = torch.randn(shape, dtype=dtype, device=device)
        w = torch.randn(shape[-1], dtype=dtype, device=device)
        r = torch.randn(shape, dtype=dtype, device=device) if residual else None
        found = {k: f for k, f in providers().items() if f is not None}
        if not backward:
            return {k: (lambda f=f: f(x, w, r)) for k, f in found.items()}
        # Forward and backward together: every input requires a gradient; random upstream
        # gradients for y (and h).
        leaves = [t.detach().requires_grad_() for t in (x, w, r) if t is not None]
        ups = [torch.randn_like(x) for _ in range(2 if residual else 1)]

        def step(f):
            outs = f(*leaves, None) if not residual else f(*leaves)
            return torch.autograd.grad(outs, leaves, ups[0] if not residual else ups)
        return {k: (lambda f=f: step(f)) for k, f in found.items()}

    return BenchCase(label=label, group=f"{op} {pass_name}", unit="GB/s",
                     work=tensors * numel * dtype.itemsize, size=numel, setup=setup,
                     bytes_in_flight=(tensors + 2) * numel * dtype.itemsize)


def bench_cases(op: str, on_gpu: bool, providers: Callable[[], dict[str, Provider | None]]) -> list[BenchCase]:
    """The headline 8192 x 4096 bf16 (Llama-3-8B widths), a wider row, the pre-norm block's
    fused residual, and fp32; forward, and forward + backward."""
    if on_gpu:
        sizes = [((8192, 4096), torch.bfloat16, False), ((8192, 8192), torch.bfloat16, False),
                 ((4, 2048, 4096), torch.bfloat16, True), ((8192, 4096), torch.float32, False),
                 ((32768, 1024), torch.bfloat16, False)]
    else:
        sizes = [((64, 256), torch.float32, False), ((2, 16, 96), torch.float32, True)]
    return [norm_case(op, shape, dtype, backward, residual, providers)
            for backward in (False, True) for shape, dtype, residual in sizes]


def compiled(fn: Provider) -> Provider:
    """torch.compile of an eager composition, taking residual as an argument."""
    with_residual, without = peer_compile(fn), peer_compile(lambda x, w: fn(x, w, None))
    return lambda x, w, r: with_residual(x, w, r) if r is not None else without(x, w)


# A norm for the fuzz: f(x, weight, bias, residual, weight_offset) -> y, or (y, h) with a
# residual; the reference takes upcast= besides. Each ignores what its norm does not have.
FuzzNorm = Callable[..., object]


def _fuzz_norm(norm: Callable, eps: float, with_bias: bool, with_offset: bool) -> FuzzNorm:
    """The public norm (or its reference), `norm(x, weight[, bias], eps, *, residual[,
    weight_offset][, upcast])`, as a FuzzNorm."""
    def call(x, weight, bias, residual, weight_offset, **upcast):
        offset = {"weight_offset": weight_offset} if with_offset else {}
        return norm(x, weight, *((bias,) if with_bias else ()), eps, residual=residual, **offset, **upcast)
    return call


def _fuzz_inputs(inputs: FuzzInputs, with_bias: bool, with_offset: bool,
                 left_out: int | None = None) -> tuple[dict[str, torch.Tensor], float]:
    """x (..., hidden) at a random layout, the hidden dim innermost in memory or not (hidden an
    edge size, not `left_out`); a residual at its own layout or none; weight (and bias) None or
    (hidden,) views, in x's dtype mostly; Gemma's weight offset 1 or none."""
    draw = inputs.draw
    hidden = draw.choice([n for n in inputs.edge + inputs.block_edge if n != left_out])
    lead = [draw.choice(inputs.edge) for _ in range(draw.integer(0, 2))]
    while lead and numel(lead) * hidden > inputs.max_elements:
        lead.pop(0)
    shape = [*lead, hidden]
    dtype = draw.choice(FLOATS)
    param_dtype = draw.choice((dtype, dtype) + FLOATS)

    def layout():
        drawn = inputs.layout(len(shape))
        return drawn.innermost(len(shape) - 1) if draw.boolean() else drawn

    tensors = {"x": inputs.view(shape, dtype, layout(), scale=2.0).add_(0.5)}
    if draw.boolean():
        tensors["residual"] = inputs.view(shape, dtype, layout())
    if draw.boolean():
        tensors["weight"] = inputs.view([hidden], param_dtype)
    if with_bias and draw.boolean():
        tensors["bias"] = inputs.view([hidden], param_dtype)
    weight_offset = draw.choice((0.0, 1.0)) if with_offset and "weight" in tensors else 0.0
    return tensors, weight_offset


def _keywords(norm: FuzzNorm, weight_offset: float) -> Callable:
    """The norm taking its tensors by name (the fuzz passes the ones drawn)."""
    def call(x, weight=None, bias=None, residual=None, **upcast):
        return norm(x, weight, bias, residual, weight_offset, **upcast)
    return call


def _note(tensors: dict[str, torch.Tensor], weight_offset: float) -> str:
    return ", ".join([f"{name} {describe(t)}" for name, t in tensors.items()] +
                     ([f"weight_offset {weight_offset:g}"] if weight_offset else []))


def _at_h(reference: FuzzNorm, h: torch.Tensor) -> FuzzNorm:
    """The fused-residual reference with h = x + residual taken as the given h: h's values,
    and the gradient of x + residual in x and residual."""
    def norm(x, weight, bias, residual, weight_offset, upcast=True):
        fixed = h.to(x.dtype) + ((x - x.detach()) + (residual - residual.detach()))
        return reference(fixed, weight, bias, None, weight_offset, upcast=upcast), fixed
    return norm


def norm_fuzz(norm: Callable, reference: Callable, eps: float, with_bias: bool, with_offset: bool, flat_row: int,
              examples: tuple[int, int]) -> tuple[FuzzCase, FuzzCase]:
    """The forward and backward fuzz cases of a public norm and its reference, at `eps`
    (`examples` of each).

    `flat_row` is the row length whose normalised output is constant but for eps (RMSNorm's
    1: y = h / sqrt(h^2 + eps); LayerNorm's 2: y = +-d / sqrt(d^2 + eps)): there dx is of
    size |g| * eps / var, left after g - xhat * mean(g * xhat) cancels terms of size |g|, so
    each float32 roundoff of those terms is a relative error of u * var / eps in dx (a few
    of them, ours or torch's, whichever lands worse): not comparable with torch's. The
    backward case leaves that length out (the forward keeps it); tests/test_norms.py checks
    RMSNorm's with that roundoff allowed.
    """
    ours, reference = (_fuzz_norm(f, eps, with_bias, with_offset) for f in (norm, reference))

    def forward(inputs: FuzzInputs) -> list[Comparison]:
        tensors, weight_offset = _fuzz_inputs(inputs, with_bias, with_offset)
        x = tensors["x"]
        outs = _keywords(ours, weight_offset)(**tensors)
        y = outs[0] if isinstance(outs, tuple) else outs
        assert y.dtype == x.dtype and y.shape == x.shape, f"y: {y.dtype} {tuple(y.shape)}"
        wide, same = (_keywords(reference, weight_offset)(**tensors, upcast=u) for u in (True, False))
        return compare_outputs(_note(tensors, weight_offset), ("y", "h"), outs, wide, same)

    def backward(inputs: FuzzInputs) -> list[Comparison]:
        tensors, weight_offset = _fuzz_inputs(inputs, with_bias, with_offset, left_out=flat_row)
        x = tensors["x"]
        # random upstream gradients for y (and h), each at its own layout
        upstream = [inputs.view(x.shape, x.dtype) for _ in range(2 if "residual" in tensors else 1)]
        note = _note(tensors, weight_offset) + "".join(f", upstream {describe(u)}" for u in upstream)
        norm = reference
        if INTERPRETED and "residual" in tensors and x.dtype != torch.float32:
            # The interpreter truncates h = x + residual to x's dtype where torch rounds it
            # (GPU.md), so ours and torch's would normalise different h, and a short row's
            # backward amplifies that difference past twice torch's error (a 3-long bf16 row:
            # 4.4e-2 against torch's 1.2e-2). Here both references take our forward's h, so that
            # the backward kernel is what is compared; the forward case compares h itself.
            with torch.no_grad():
                h = _keywords(ours, weight_offset)(**tensors)[1]
            norm = _at_h(reference, h)
        return compare_gradients(note, tensors, _keywords(ours, weight_offset), _keywords(norm, weight_offset),
                                 upstream)

    return FuzzCase("forward", examples[0], forward), FuzzCase("backward", examples[1], backward)


def norm_entry(name: str, summary: str, inspect_fwd: Callable, inspect_bwd: Callable,
               providers: Callable[[], dict[str, Provider | None]], sample: Callable,
               reference: Callable | None = None, fuzz: tuple[FuzzCase, ...] = ()) -> OpEntry:
    return OpEntry(name=name, summary=summary, passes={"fwd": inspect_fwd, "bwd": inspect_bwd},
                   bench_cases=lambda on_gpu: bench_cases(name, on_gpu, providers),
                   peers=("eager", "torch native", "torch.compile", "Liger"), op=name, sample=sample,
                   reference=reference, fuzz=fuzz)
