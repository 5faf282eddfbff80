"""Launches on a side stream beside the current one (the attention backward's dQ pass beside
its dK/dV pass).

A fork and a join are two event records and two stream waits. torch's `Stream.wait_stream`
makes a new event each time and `torch.cuda.stream(...)` re-reads and checks the current
stream and device on entry and exit; on a slow host the two forks and the stream context cost
more than the launch they wrap. Here each thread keeps, per device, one side stream and two
events, reused by every fork: an event may be recorded again once its waits are queued, since
a stream wait takes the record the event holds when the wait is queued, not a later one. Per
thread, so that two threads forking at once never wait on each other's records.
"""

from __future__ import annotations

import contextlib
import threading

import torch


class _Fork:
    __slots__ = ("stream", "forked", "joined")

    def __init__(self, device: torch.device):
        self.stream = torch.cuda.Stream(device)
        self.forked = torch.cuda.Event()   # no timing: the cheapest event to record and wait on
        self.joined = torch.cuda.Event()


_local = threading.local()


def _fork_of(device: torch.device) -> _Fork:
    forks = getattr(_local, "forks", None)
    if forks is None:
        forks = _local.forks = {}
    fork = forks.get(device)
    if fork is None:
        fork = forks[device] = _Fork(device)
    return fork


@contextlib.contextmanager
def beside_the_current_stream(device: torch.device):
    """Run the block's launches on a side stream that starts after everything queued so far
    on `device`'s current stream, and make that stream wait for them before anything queued
    after the block. Tensors made on the current stream stay safe: the caching allocator hands
    their memory out again only to work on that stream, which now waits for the side stream.
    Inside CUDA graph capture the records and waits become the graph's fork and join. CUDA only."""
    if device.index is not None and device.index != torch.cuda.current_device():
        # set_stream makes its stream's device the current one: keep the caller's.
        with torch.cuda.device(device), beside_the_current_stream(device):
            yield
        return
    fork = _fork_of(device)
    main = torch.cuda.current_stream(device)
    fork.forked.record(main)
    fork.stream.wait_event(fork.forked)
    torch.cuda.set_stream(fork.stream)
    try:
        yield
    finally:
        torch.cuda.set_stream(main)
        fork.joined.record(fork.stream)
        main.wait_event(fork.joined)
