"""Launches kept per input layout, as bound `_launch.LaunchTemplate`s.

A plain `Launch` builds Triton's specialisation key on every call (a few microseconds of
Python); a template, once bound to its compiled kernel, launches it straight. Its contract
is that every call's head (tensor) arguments have the types, dtypes, None-ness and 16-byte
alignment of the call that bound it, and that its tail (the scalars) is fixed. So a
launcher keeps its templates under a key that holds everything deciding the launch: what
its plan is keyed by (shapes, strides, flags: the tail, grid and constexprs follow from
them), the device where the plan does not hold it, and each head tensor's presence, dtype
and alignment (`head_layout`). Outputs allocated by the launcher are fresh, and torch's
allocators align them to 64 bytes or more; they go into `head_layout` all the same where a
caller may pass its own.

Inside `record_launches()` a template makes a plain recorded Launch, so the inspector sees
the launches as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._launch import LaunchTemplate


def head_layout(head: tuple) -> tuple:
    """Each head argument's part of a key: None, or (dtype, 16-byte aligned)."""
    # A list comprehension, not a generator: this runs on every launch.
    return tuple([t if t is None else (t.dtype, t.data_ptr() % 16 == 0) for t in head])


class Templates:
    """Templates by key, at most `limit` of them: keys hold exact shapes, so past that many
    the store starts afresh (a plan's store lives and dies with its plan)."""

    __slots__ = ("_kept", "limit")

    def __init__(self, limit: int = 1024):
        self._kept: dict[Any, LaunchTemplate] = {}
        self.limit = limit

    def get(self, key: Any, build: Callable[..., LaunchTemplate], *args: Any) -> LaunchTemplate:
        """The template kept under `key`, else `build(*args)`, kept."""
        found = self._kept.get(key)
        if found is None:
            if len(self._kept) >= self.limit:
                self._kept.clear()
            found = self._kept[key] = build(*args)
        return found

    def clear(self) -> None:
        self._kept.clear()

    def __len__(self) -> int:
        return len(self._kept)
