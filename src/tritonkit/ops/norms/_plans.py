"""The norms' launches kept per input layout, as bound `LaunchTemplate`s.

A plain `Launch` builds Triton's specialisation key on every call; a template, once bound
to its compiled kernel, launches it straight (`_launch.LaunchTemplate`). Its contract is
that every call's head (tensor) arguments have the types, dtypes, None-ness and 16-byte
alignment of the call that bound it, and its tail (the scalars) is fixed. So the key of a
template here holds everything that decides the launch:
- the pass and the device;
- the scalar tail, exact values (Triton specialises ints on == 1 and % 16; the kernels'
  strides, shapes, eps and weight_offset are all in it), and the sign of weight_offset (a
  key compares floats as Python does, and 0.0 == -0.0, but w + -0.0 keeps a weight's -0.0);
- each input tensor's presence, dtype and whether its data starts on a 16-byte boundary
  (`head_layout`). The outputs (and the backward's partial sums and counters) are fresh
  allocations, which torch's allocators align to 64 bytes or more, of the dtypes and
  presence that the inputs decide (and the bias's dtype, which the backward's dB takes):
  keying them again would only cost time on every call;
- what the launcher adds of its own (the backward's program count, which sets its grid and
  partial-sum rows).
Grid, constexprs and warps follow from those (`_rows.fwd_plan`, `_rows.bwd_plan`).

Inside `record_launches()` a template makes a plain recorded Launch, so the inspector sees
the launches as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..._launch import LaunchTemplate

MAX_TEMPLATES = 1024  # layouts kept; keys hold exact shapes, so past this many start afresh
_TEMPLATES: dict[tuple, LaunchTemplate] = {}


def clear() -> None:
    """Forget every template (tests that change what a plan holds call this)."""
    _TEMPLATES.clear()


def head_layout(head: tuple) -> tuple:
    """Each head argument's part of a key: None, or (dtype, 16-byte aligned)."""
    # A list comprehension, not a generator: this runs on every launch.
    return tuple([t if t is None else (t.dtype, t.data_ptr() % 16 == 0) for t in head])


def template(key: tuple, build: Callable[..., LaunchTemplate], *args: Any) -> LaunchTemplate:
    """The template kept under `key`, else `build(*args)`, kept."""
    found = _TEMPLATES.get(key)
    if found is None:
        if len(_TEMPLATES) >= MAX_TEMPLATES:
            _TEMPLATES.clear()
        found = _TEMPLATES[key] = build(*args)
    return found
