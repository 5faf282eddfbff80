"""CUDA graph capture's preparation, shared by the bench's graphed timing and the tests."""

from __future__ import annotations

from collections.abc import Callable

import torch


def warm_up(fn: Callable[[], object], calls: int) -> None:
    """Call `fn` `calls` times on a side stream, as torch asks before a capture: whatever a
    first call makes lazily (compiled kernels, bound launches, workspaces, the allocator's
    blocks) then exists before the capture starts. Returns once the current stream has
    queued a wait for that work."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(calls):
            fn()
    torch.cuda.current_stream().wait_stream(side)
