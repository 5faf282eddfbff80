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


def check_same_device(**tensors: torch.Tensor) -> None:
    items = list(tensors.items())
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device != first.device:
            raise ValueError(f"{name} is on {t.device} but {first_name} is on {first.device}")
