"""Input validation shared by the launchers: every error names the argument at fault."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ._runtime import check_device

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def check_tensor(name: str, t: object, dtypes: Iterable[torch.dtype] = FLOAT_DTYPES) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    dtypes = tuple(dtypes)
    if t.dtype not in dtypes:
        allowed = ", ".join(dtype_name(d) for d in dtypes)
        raise TypeError(f"{name} has dtype {dtype_name(t.dtype)}; supported: {allowed}")
    check_device(name, t)
    return t


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
