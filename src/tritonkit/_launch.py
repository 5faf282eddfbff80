"""A launch as data, so that `tritonkit inspect` sees exactly what a launcher would run.

Launchers build `Launch` objects and call them. Inside `record_launches()` each call is
also appended to a list (and, with execute=False, not run), which lets the inspector
compile the very kernel, arguments and meta-parameters the op would launch, without a GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

_recorders: list[tuple[list["Launch"], bool]] = []


@dataclass
class Launch:
    name: str                      # which pass: "add", "softmax_fwd", "attention_bwd_dkdv", ...
    kernel: Any                    # a triton JITFunction (or InterpretedFunction)
    grid: tuple[int, ...]
    args: tuple[Any, ...]          # positional runtime arguments
    constexprs: dict[str, Any] = field(default_factory=dict)
    num_warps: int | None = 4      # None for an autotuned kernel, whose config sets them
    num_stages: int | None = 3

    def __call__(self) -> None:
        execute = True
        for launches, run in _recorders:
            launches.append(self)
            execute = execute and run
        if execute:
            self.kernel[self.grid](*self.args, **self.constexprs, **self.launch_options())

    def launch_options(self) -> dict[str, int]:
        return {k: v for k, v in (("num_warps", self.num_warps), ("num_stages", self.num_stages))
                if v is not None}


def launches_execute() -> bool:
    """False inside record_launches(execute=False), where launches are only recorded (the
    inspector compiles them for a GPU, so launchers should pick their GPU configs)."""
    return all(run for _, run in _recorders)


@contextlib.contextmanager
def record_launches(execute: bool = True) -> Iterator[list[Launch]]:
    """Collect every Launch made in this block; with execute=False the kernels do not run."""
    launches: list[Launch] = []
    _recorders.append((launches, execute))
    try:
        yield launches
    finally:
        _recorders.pop()  # recorders nest, so the innermost is last
