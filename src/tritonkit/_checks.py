"""Input validation shared by the launchers: every error names the argument at fault."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from ._runtime import check_device_of

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def is_finite(value: float) -> bool:
    """math.isfinite by comparisons (NaN and the infinities compare False), which torch.compile
    traces when `value` is symbolic: under dynamic shapes dynamo does not specialize a float it
    reads from a module attribute or a default argument (an eps, a scale), and math.isfinite of
    one breaks the graph."""
    return -math.inf < value < math.inf


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def check_tensor(name: str, t: object, dtypes: Iterable[torch.dtype] = FLOAT_DTYPES) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    check_meta(name, t.dtype, t.device, dtypes)
    return t


def meta_of(t: torch.Tensor) -> tuple:
    """(shape, strides, dtype, device): what launchers validate and plan a tensor by, and cache
    both under (a tensor of the same metadata passes the same checks and takes the same plan)."""
    return t.shape, t.stride(), t.dtype, t.device


def check_meta(name: str, dtype: torch.dtype, device: torch.device,
               dtypes: Iterable[torch.dtype] = FLOAT_DTYPES) -> None:
    """check_tensor for a tensor known by its dtype and device: validators that launchers
    cache by (shape, strides, dtype, device) run on those rather than on tensors."""
    dtypes = tuple(dtypes)
    if dtype not in dtypes:
        allowed = ", ".join(dtype_name(d) for d in dtypes)
        raise TypeError(f"{name} has dtype {dtype_name(dtype)}; supported: {allowed}")
    check_device_of(name, device)


def check_writable_output(name: str, out: torch.Tensor, **inputs: torch.Tensor) -> None:
    """Refuse an output that torch would refuse: one whose elements share memory with each
    other (an expanded view), or that partly overlaps an input (in-place onto the very same
    elements is fine). As torch does, overlap is judged only between dense tensors; for
    other layouts torch does not decide, and neither does this."""
    if torch._debug_has_internal_overlap(out) == 1:
        raise ValueError(f"{name} has elements that share memory (an expanded view?); "
                         f"an output needs one memory location per element")
    if not out.is_contiguous():
        return
    start, end = out.data_ptr(), out.data_ptr() + out.numel() * out.element_size()
    for input_name, t in inputs.items():
        if t is out or not t.is_contiguous() or t.numel() == 0 or out.numel() == 0:
            continue
        t_start, t_end = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
        if t_start < end and start < t_end and (t_start, t_end) != (start, end):
            raise ValueError(f"{name} partly overlaps {input_name} in memory; write to a separate "
                             f"tensor or to {input_name} itself")


def check_same_device(**tensors: torch.Tensor) -> None:
    items = list(tensors.items())
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device != first.device:
            raise ValueError(f"{name} is on {t.device} but {first_name} is on {first.device}")
