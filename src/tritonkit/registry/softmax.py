"""Catalogue entry for `tritonkit.softmax`: inspector passes, benchmark cases, sample and fuzz."""

from __future__ import annotations

import torch

from ..ops.softmax import MAX_FUSED_COLS, softmax, softmax_bwd, softmax_fwd, softmax_reference
from . import BenchCase, InspectRequest, two_pass_entry
from ._accuracy import Comparison
from ._fuzz import FLOATS, FuzzInputs, describe, numel
from ._inputs import offset_view, peer_compile


def naive_softmax(x: torch.Tensor) -> torch.Tensor:
    """The seed's eager baseline: five separate ops, each a full pass over memory."""
    row_max = x.max(dim=-1, keepdim=True).values
    e = torch.exp(x - row_max)
    return e / e.sum(dim=-1, keepdim=True)


def _inspect_inputs(request: InspectRequest, device: torch.device) -> torch.Tensor:
    return offset_view(request.shape or (4096, 4096), request.dtype or torch.float32, device, request.offset)


def _inspect_fwd(request: InspectRequest, device: torch.device) -> None:
    softmax_fwd(_inspect_inputs(request, device), -1)


def _inspect_bwd(request: InspectRequest, device: torch.device) -> None:
    y = _inspect_inputs(request, device)
    softmax_bwd(torch.empty_like(y), y, -1)


def _case(rows: int, cols: int, dtype: torch.dtype) -> BenchCase:
    element = dtype.itemsize
    name = "fp32" if dtype == torch.float32 else "bf16"

    def setup(device: torch.device):
        x = torch.randn(rows, cols, device=device, dtype=dtype)
        compiled = peer_compile(naive_softmax)
        return {
            "tritonkit": lambda: softmax(x, -1),
            "naive eager": lambda: naive_softmax(x),
            "torch native": lambda: torch.softmax(x, -1),
            "torch.compile": lambda: compiled(x),
        }

    return BenchCase(
        label=f"{rows}x{cols} {name}", group=f"softmax {name}", unit="GB/s",
        work=2 * rows * cols * element, size=rows * cols, setup=setup,
        seed_table=(rows, cols, dtype) == (4096, 4096, torch.float32),
        bytes_in_flight=6 * rows * cols * element,
    )


def _bench_cases(on_gpu: bool) -> list[BenchCase]:
    shapes = ([(4096, 4096), (4096, 32768), (32768, 4096), (1823, 781), (16, 1048576)]
              if on_gpu else [(64, 64), (31, 781), (2, 40000)])
    return [_case(r, c, dt) for dt in (torch.float32, torch.bfloat16) for r, c in shapes]


def _sample(device: torch.device) -> tuple:
    # A strided view, softmax over a middle dim.
    return torch.randn(5, 3, 77, device=device)[:, 1:], 1


LONG_ROW = MAX_FUSED_COLS + 1      # the first row length that takes the split path


def _fuzz_shape(inputs: FuzzInputs) -> tuple[list[int], int, torch.dtype]:
    shape = inputs.shape(3, last_sizes=inputs.edge + inputs.block_edge + (LONG_ROW,))
    dim = inputs.draw.integer(-len(shape), len(shape) - 1)
    if shape[dim] == LONG_ROW or numel(shape) > inputs.max_elements:
        # keep the split path cheap: a long row, and at most a couple of them
        shape = [min(s, 2) if i != dim % len(shape) else s for i, s in enumerate(shape)]
    return shape, dim, inputs.draw.choice(FLOATS)


def _fuzz_forward(inputs: FuzzInputs) -> list[Comparison]:
    shape, dim, dtype = _fuzz_shape(inputs)
    x = inputs.view(shape, dtype, scale=3.0)
    out = softmax(x, dim)
    assert out.dtype == dtype and out.shape == x.shape, f"softmax: {out.dtype} {tuple(out.shape)}"
    return [Comparison(f"softmax dim={dim}: x {describe(x)}", out, softmax_reference(x, dim),
                       softmax_reference(x, dim, upcast=False))]


def _fuzz_backward(inputs: FuzzInputs) -> list[Comparison]:
    shape, dim, dtype = _fuzz_shape(inputs)
    # y = softmax(x) by torch, copied into a view with its own layout; so is the gradient.
    x = inputs.randn(shape, dtype, scale=3.0)
    y = inputs.view(shape, dtype).copy_(torch.softmax(x, dim))
    grad = inputs.view(shape, dtype)
    dx = softmax_bwd(grad, y, dim)
    y64, g64 = y.double(), grad.double()
    reference = y64 * (g64 - (y64 * g64).sum(dim, keepdim=True))
    torch_same = torch._softmax_backward_data(grad.contiguous(), y.contiguous(), dim, dtype)
    return [Comparison(f"softmax backward dim={dim}: y {describe(y)}, grad {describe(grad)}",
                       dx, reference, torch_same, gradient=True)]


ENTRY = two_pass_entry(
    "softmax", "softmax along a dim, fused rows or split long rows; forward and backward",
    inspect=(_inspect_fwd, _inspect_bwd), fuzz=((100, _fuzz_forward), (100, _fuzz_backward)),
    bench_cases=_bench_cases, peers=("naive eager", "torch native", "torch.compile"),
    sample=_sample, reference=softmax_reference)
