"""Kernel arguments as Triton saw them: the specialisation of each, as `ArgInfo`."""

from __future__ import annotations

from typing import Any

import torch

from .report import ArgInfo


def _describe_args(jit, bound: dict[str, Any], specialization: list) -> list[ArgInfo]:
    infos = []
    for param, (name, value), (ty, attr) in zip(jit.params, bound.items(), specialization):
        infos += _describe(name, value, ty, attr, param.is_constexpr)
    return infos


def _describe(name: str, value: Any, ty: Any, attr: Any, declared_constexpr: bool) -> list[ArgInfo]:
    """One ArgInfo, or for a tuple argument (a tensor's strides, say), which Triton
    specialises element by element, one for each element, named name[i]."""
    if isinstance(value, tuple) and isinstance(ty, tuple) and not declared_constexpr:
        return [info for i, (v, t, a) in enumerate(zip(value, ty, attr))
                for info in _describe(f"{name}[{i}]", v, t, a, False)]
    return [_describe_arg(name, value, ty, attr, declared_constexpr)]


def _describe_arg(name: str, value: Any, ty: Any, attr: Any, declared_constexpr: bool) -> ArgInfo:
    if isinstance(value, torch.Tensor):
        return ArgInfo(name, "pointer", str(ty), _tensor_text(value),
                       divisible_by_16=attr == "D", bytes_past_16=value.data_ptr() % 16,
                       element_size=value.element_size())
    if hasattr(value, "base") and hasattr(value, "block_shape"):          # TensorDescriptor
        base = value.base
        return ArgInfo(name, "tensor descriptor", str(ty),
                       f"{_tensor_text(base)} block {list(value.block_shape)}",
                       bytes_past_16=base.data_ptr() % 16, element_size=base.element_size())
    if declared_constexpr:
        return ArgInfo(name, "constexpr", "constexpr", _value_text(value))
    if ty == "constexpr":                    # an int equal to 1, or None
        return ArgInfo(name, "int" if value is not None else "none", "constexpr", _value_text(value),
                       equal_to_1=value == 1)
    if isinstance(value, bool):
        return ArgInfo(name, "bool", str(ty), str(value))
    if isinstance(value, int):
        return ArgInfo(name, "int", str(ty), str(value), divisible_by_16=attr == "D")
    if isinstance(value, float):
        return ArgInfo(name, "float", str(ty), repr(value))
    return ArgInfo(name, type(value).__name__, str(ty), _value_text(value))


def _tensor_text(t: torch.Tensor) -> str:
    return (f"{str(t.dtype).removeprefix('torch.')} {tuple(t.shape)} strides {tuple(t.stride())}"
            + (f" offset {t.storage_offset()}" if t.storage_offset() else ""))


def _value_text(value: Any) -> str:
    name = getattr(value, "name", None)
    if name is not None and type(value).__name__ == "dtype":
        return str(name)
    return str(getattr(value, "value", value))
