"""Catalogue entry for `tritonkit.add`: inspector passes and benchmark cases."""

from __future__ import annotations

import torch

from ..ops.add import add, add_fwd
from . import BenchCase, InspectRequest, OpEntry
from ._inputs import offset_view, peer_compile


def _inspect_add(request: InspectRequest, device: torch.device) -> None:
    shape = request.shape or (4096, 4096)
    dtype = request.dtype or torch.float32
    x = offset_view(shape, dtype, device, request.offset)
    y = offset_view(shape, dtype, device, request.offset)
    add_fwd(x, y)


def _case(n: int, dtype: torch.dtype, offset: int, seed_table: bool = False) -> BenchCase:
    element = dtype.itemsize

    def setup(device: torch.device):
        x = offset_view((n,), dtype, device, offset)
        y = offset_view((n,), dtype, device, offset)
        out = torch.empty(n, dtype=dtype, device=device)
        compiled = peer_compile(lambda a, b: a + b)
        return {
            "tritonkit": lambda: add(x, y, out=out),
            "torch native": lambda: torch.add(x, y, out=out),
            "torch.compile": lambda: compiled(x, y),
        }

    name = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    return BenchCase(
        label=f"{n} {name}" + (f" offset {offset}" if offset else ""),
        group=f"add {name}" + (" offset" if offset else ""),
        unit="GB/s", work=3 * n * element, size=n, setup=setup,
        seed_table=seed_table, bytes_in_flight=3 * n * element,
    )


def _bench_cases(on_gpu: bool) -> list[BenchCase]:
    sizes = [1 << 20, 1 << 24, 1 << 28] if on_gpu else [1 << 12, 4099]
    cases = [_case(n, torch.float32, 0, seed_table=n == sizes[-1]) for n in sizes]
    cases.append(_case(sizes[-1], torch.float32, 1))
    cases += [_case(n, torch.bfloat16, 0) for n in sizes]
    return cases


def _sample(device: torch.device) -> tuple:
    # Broadcast over two dims, mixed dtypes (promotion), one operand a transposed view.
    x = torch.randn(9, 4, device=device).t().unsqueeze(1)
    y = torch.randn(3, 1, device=device, dtype=torch.float16)
    return x, y


ENTRY = OpEntry(
    name="add",
    summary="elementwise x + y with broadcasting and type promotion",
    passes={"fwd": _inspect_add},
    bench_cases=_bench_cases,
    peers=("torch native", "torch.compile"),
    op="add",
    sample=_sample,
)
