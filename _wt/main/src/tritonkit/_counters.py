"""Zeroed int32 counters that kernels leave at zero, so that a launch needs no memset first.

A kernel that counts its finished programs with atomics (the last one to arrive does the
final step) needs counters at zero when it starts. Zeroing them costs a launch a call; the
counters here are zeroed once, and each kernel that uses them returns them to zero before it
ends (the last program to take a counter's ticket resets it). Launches on one stream run one
after another, so a launch finds the counters as the previous one left them: at zero.

Counters are kept per (device, stream): kernels on two streams may run at once and must not
share them. While a CUDA graph is being captured, fresh counters are made instead, zeroed
inside the graph (the zeroing is replayed with it), so a replay never depends on what eager
launches did to a cached set, nor they on it.
"""

from __future__ import annotations

import torch

MAX_COUNTERS = 64         # counters one launch may use
_MAX_STREAMS = 256        # cached sets before the cache starts afresh (see _for_stream)
_CACHE: dict[tuple, torch.Tensor] = {}


def zeroed_counters(device: torch.device) -> torch.Tensor:
    """MAX_COUNTERS int32 zeros on `device` for one launch on the current stream, which the
    launch must leave at zero."""
    if device.type != "cuda":
        key = (device, None)  # the interpreter runs launches one at a time
    else:
        index = device.index if device.index is not None else torch.cuda.current_device()
        if torch.cuda.is_current_stream_capturing():
            return torch.zeros(MAX_COUNTERS, dtype=torch.int32, device=device)
        key = (index, torch._C._cuda_getCurrentRawStream(index))
    counters = _CACHE.get(key)
    if counters is None:
        counters = _for_stream(key, device)
    return counters


def _for_stream(key: tuple, device: torch.device) -> torch.Tensor:
    # torch.zeros zeroes on the current stream, the one every launch given these counters
    # runs on. Dropping the cache is safe with launches still in flight: the caching
    # allocator hands a freed block out again only to work ordered after them on its stream.
    if len(_CACHE) >= _MAX_STREAMS:
        _CACHE.clear()
    counters = _CACHE[key] = torch.zeros(MAX_COUNTERS, dtype=torch.int32, device=device)
    return counters
