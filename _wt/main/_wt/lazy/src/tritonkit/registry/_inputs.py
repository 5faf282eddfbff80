"""Input builders shared by the catalogue entries."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def offset_view(shape: Sequence[int], dtype: torch.dtype, device: torch.device, offset: int,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """A random contiguous tensor of `shape` that starts `offset` elements into its buffer.

    offset=1 gives the seed's crashing pointer: a view 2 or 4 bytes past a 16-byte boundary.
    """
    numel = 1
    for s in shape:
        numel *= s
    buffer = torch.randn(numel + offset, dtype=dtype, device=device, generator=generator)
    return buffer[offset:].view(tuple(shape))


def peer_compile(fn: Callable) -> Callable:
    """torch.compile of a peer, built lazily so a case that never runs never compiles."""
    compiled = None

    def call(*args, **kwargs):
        nonlocal compiled
        if compiled is None:
            # Every case compiles the same function for a new shape; past dynamo's recompile
            # limit (8 by default) it would silently run the peer eagerly.
            for limit in ("recompile_limit", "cache_size_limit"):
                if hasattr(torch._dynamo.config, limit):
                    setattr(torch._dynamo.config, limit, max(getattr(torch._dynamo.config, limit), 256))
            compiled = torch.compile(fn, dynamic=False)
        return compiled(*args, **kwargs)

    return call
