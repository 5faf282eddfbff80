"""Input validation shared by the launchers: every error names the argument at fault."""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable, Iterable

import torch

from ._runtime import check_device_of

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def is_finite(value: float) -> bool:
    """math.isfinite by comparisons (NaN and the infinities compare False), which torch.compile
    traces when `value` is symbolic: under dynamic shapes dynamo does not specialize a float it
    reads from a module attribute or a default argument (an eps, a scale), and math.isfinite of
    one breaks the graph."""
    return -math.inf < value < math.inf


def _got(value: object) -> str:
    """How an error names a value of the wrong type: its type, and the value when short."""
    shown = repr(value)
    return type(value).__name__ + (f" {shown}" if len(shown) <= 40 else "")


# Scalar arguments: each public function checks its options with these, so that a wrong type
# is a TypeError naming the argument (as torch's own functions give) instead of a value that
# passes silently (causal="no" is truthy) or fails deep inside a kernel. Symbolic ints and
# floats (torch.compile with dynamic shapes) pass as the numbers they stand for; bool is not
# an int or a float here, as in torch.

def check_bool(name: str, value: object) -> bool:
    """`value` itself if it is True or False; TypeError naming `name` for anything else
    (ints and strings too: torch refuses `is_causal=1`)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True or False), got {_got(value)}")
    return value


def check_int(name: str, value: object, *, optional: bool = False) -> object:
    """`value` itself if it is an int (a Python or numpy integer, or a symbolic int), or
    None where `optional`; TypeError naming `name` otherwise (bools and floats included)."""
    if value is None and optional:
        return value
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, torch.SymInt)):
        raise TypeError(f"{name} must be an int{' or None' if optional else ''}, got {_got(value)}")
    return value


def check_float(name: str, value: object, *, optional: bool = False) -> object:
    """`value` itself if it is a real number (int or float, Python or numpy, or symbolic), or
    None where `optional`; TypeError naming `name` otherwise (bools, strings and tensors
    included). Range checks stay with the caller (see `is_finite`)."""
    if value is None and optional:
        return value
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, torch.SymInt, torch.SymFloat)):
        raise TypeError(f"{name} must be a float{' or None' if optional else ''}, got {_got(value)}")
    return value


def check_choice(name: str, value: object, choices: Iterable[str]) -> str:
    """`value` itself if it is one of the strings `choices`: TypeError naming `name` for a
    non-string, ValueError listing the choices for another string."""
    if isinstance(value, str) and value in choices:
        return value
    listed = ", ".join(repr(c) for c in choices)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {listed}, got {_got(value)}")
    raise ValueError(f"{name} must be one of {listed}, got {value!r}")


def optional_tensor(name: str, value: object) -> object:
    """check_tensor, with None allowed (an optional bias, say)."""
    return value if value is None else check_tensor(name, value)


def optional_float(name: str, value: object) -> object:
    return check_float(name, value, optional=True)


def optional_int(name: str, value: object) -> object:
    return check_int(name, value, optional=True)


def choice_of(*choices: str) -> Callable[[str, object], str]:
    """A check(name, value) for one of these strings, for `checked_arguments`."""
    return functools.partial(check_choice, choices=choices)


def checked_arguments(**checks: Callable[[str, object], object]):
    """Decorator: before each call, every argument named in `checks`, passed by position or by
    keyword, goes through its check(name, value) (check_bool, optional_float, choice_of(...),
    ...), so that a function with many options types each of them in one place. Arguments left
    at their defaults are not checked (the defaults are right)."""
    def decorate(fn):
        positions = [(i, name) for i, name in enumerate(inspect.signature(fn).parameters) if name in checks]

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            for i, name in positions:
                if i < len(args):
                    checks[name](name, args[i])
            for name, value in kwargs.items():
                check = checks.get(name)
                if check is not None:
                    check(name, value)
            return fn(*args, **kwargs)
        return checked
    return decorate


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


def check_out_without_grad(function: str, out: object, *inputs: object) -> None:
    """Refuse `out=` while autograd would record the call, as torch refuses it: the result
    written into `out` would carry no gradient back to the inputs (or to what was in out)."""
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in (out, *inputs)):
        raise RuntimeError(f"{function}(): functions with out=... arguments don't support automatic "
                           "differentiation, but one of the arguments requires grad.")


def check_same_device(**tensors: torch.Tensor) -> None:
    items = list(tensors.items())
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device != first.device:
            raise ValueError(f"{name} is on {t.device} but {first_name} is on {first.device}")
