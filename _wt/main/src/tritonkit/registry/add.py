"""Catalogue entry for `tritonkit.add`: inspector passes, benchmark cases, sample and fuzz."""

from __future__ import annotations

import torch

from ..ops.add import add, add_fwd, add_reference
from . import BenchCase, InspectRequest, OpEntry
from ._accuracy import Comparison
from ._fuzz import FLOATS, FuzzCase, FuzzInputs, describe
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


def _fuzz(inputs: FuzzInputs) -> list[Comparison]:
    draw = inputs.draw
    shape = inputs.shape(3)
    x_dtype = draw.choice(FLOATS)
    y_dtype = draw.choice((x_dtype, x_dtype) + FLOATS)            # mostly the same dtype
    # y may broadcast: some dims of size 1, or fewer leading dims.
    y_shape = [1 if draw.boolean() and draw.boolean() else s for s in shape]
    y_shape = y_shape[draw.integer(0, len(y_shape) - 1):]
    x = inputs.view(shape, x_dtype)
    y = inputs.view(y_shape, y_dtype)
    expected_dtype = torch.result_type(x, y)
    if draw.boolean():
        out = add(x, y)
    else:
        target = inputs.view(shape, expected_dtype).fill_(float("nan"))   # poison
        out = add(x, y, out=target)
        assert out.data_ptr() == target.data_ptr(), "add(out=) returned another tensor"
    assert out.dtype == expected_dtype and list(out.shape) == shape, f"add: {out.dtype} {tuple(out.shape)}"
    # float64 and torch's own x + y: add rounds once from float32 exactly as torch does.
    return [Comparison(f"add: x {describe(x)}, y {describe(y)}", out, add_reference(x, y),
                       add_reference(x, y, upcast=False))]


ENTRY = OpEntry(
    name="add",
    summary="elementwise x + y with broadcasting and type promotion",
    passes={"fwd": _inspect_add},
    bench_cases=_bench_cases,
    peers=("torch native", "torch.compile"),
    op="add",
    sample=_sample,
    reference=add_reference,
    fuzz=(FuzzCase("forward", 150, _fuzz),),
)
