"""Timers and the card's ceilings, measured in the same process as the cases."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from .. import _runtime
from .._graphs import warm_up


def time_ms(fn: Callable[[], object]) -> float:
    """Median milliseconds of one call.

    On a GPU: triton's do_bench, which times with CUDA events and clears the L2 cache
    before every repetition (so no case is timed from a warm cache). Under the
    interpreter: a wall clock over a couple of calls, meaningful only relative to itself.
    """
    if _runtime.INTERPRETED:
        fn()
        samples = []
        for _ in range(2):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e3)
        return statistics.median(samples)
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


HOST_CHECK_BELOW_MS = 0.5   # cases timed under this also get their host time measured
HOST_CALLS = 20
HOST_WAIT_NOTED = 0.1       # note a figure up to this fraction of which may be the GPU waiting


def host_ms(fn: Callable[[], object]) -> float | None:
    """Milliseconds of host (Python and launch) time one call takes, on a GPU: HOST_CALLS
    calls queued back to back without waiting for the GPU. None under the interpreter,
    whose calls are synchronous."""
    if _runtime.INTERPRETED:
        return None
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(HOST_CALLS):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / HOST_CALLS * 1e3


def l2_clear_ms() -> float | None:
    """GPU milliseconds of the L2 clear that `time_ms` (do_bench) queues before every timed
    call (median of 20; None under the interpreter). The host issues the timed call while
    the GPU clears, so host time up to this long never reaches a figure."""
    if _runtime.INTERPRETED:
        return None
    from triton import runtime

    driver = runtime.driver.active
    cache = driver.get_empty_cache_for_benchmark()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(20)]
    driver.clear_cache(cache)
    for start, end in pairs:
        start.record()
        driver.clear_cache(cache)
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in pairs)


def host_bound_note(ms: float, host: float | None, clear: float | None) -> str:
    """A note for a figure that may hold GPU time spent waiting for the host. Each timed call
    follows an L2 clear of `clear` ms on the GPU; by the time the clear ends, the host has had
    that long to issue the call, so the GPU can wait at most host - clear ms inside the
    timed window (clear None: unknown, taken as 0). Noted when that could be more than
    HOST_WAIT_NOTED of the figure."""
    if host is None:
        return ""
    wait = host - (clear or 0.0)
    if wait <= HOST_WAIT_NOTED * ms:
        return ""
    return (f"host-bound: {host * 1e3:.0f} us of host time a call, {wait * 1e3:.0f} us more than the "
            f"L2 clear before each timed call; up to that much of the {ms * 1e3:.0f} us timed may be "
            "the GPU waiting for the host")


GRAPH_SPAN_MS = 10.0    # GPU time one captured graph spans: its launch and the events are noise
GRAPH_CALLS = (3, 200)  # fewest and most calls one graph holds
GRAPH_REPLAYS = 5


def graphed_ms(fn: Callable[[], object], estimate_ms: float) -> float | None:
    """GPU milliseconds of one call with the host's time taken out, on a GPU: `fn` captured
    in a CUDA graph n times (n calls of about `estimate_ms` filling GRAPH_SPAN_MS), each call
    after the L2 clear that `time_ms` runs before it, the graph replayed, less a graph of the
    n clears alone, over n. This is what a call costs in a step whose host runs ahead of its
    GPU (a training step's large matrix products let it) or that is captured whole. None
    under the interpreter. Raises what capture raises: a call that waits for the GPU or
    works outside the capturing stream cannot be captured."""
    if _runtime.INTERPRETED:
        return None
    from triton import runtime

    driver = runtime.driver.active
    cache = driver.get_empty_cache_for_benchmark()
    calls = max(GRAPH_CALLS[0], min(GRAPH_CALLS[1], int(GRAPH_SPAN_MS / max(estimate_ms, 1e-3))))
    warm_up(fn, 3)
    torch.cuda.synchronize()
    generators = torch.cuda.default_generators
    clean = [generator.clone_state() for generator in generators]
    graphs = []
    try:
        for with_call in (True, False):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(calls):
                    driver.clear_cache(cache)
                    if with_call:
                        fn()
            graphs.append(graph)
    except Exception:
        # A capture that fails ends without its epilogue, leaving each CUDA generator marked
        # as capturing, so that every later random draw on the device would refuse: put clean
        # copies of their states back before the error goes on.
        for generator, state in zip(generators, clean):
            generator.graphsafe_set_state(state)
        raise
    samples: list[list[float]] = [[], []]
    for _ in range(GRAPH_REPLAYS):  # the two graphs in turn, so that drift reaches both alike
        for graph, times in zip(graphs, samples):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    with_calls, clears_only = (statistics.median(t) for t in samples)
    return max(0.0, with_calls - clears_only) / calls


def peak_extra_bytes(fn: Callable[[], object]) -> int | None:
    """Peak bytes one call allocates beyond what was allocated before it (its outputs and
    gradients included, as long as they live), from the caching allocator's statistics on a
    GPU; None under the interpreter. Run after the timed calls, so one-time allocations
    (compilation, cuBLAS workspaces) are already made and not counted."""
    if _runtime.INTERPRETED:
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def held_bytes(fn: Callable[[], object]) -> int | None:
    """Bytes one call's result keeps allocated once the call has returned, beyond what was
    allocated before it: for a forward with autograd recording, its output and every tensor
    its graph saved for the backward (None under the interpreter)."""
    if _runtime.INTERPRETED:
        return None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    result = fn()
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - base
    del result
    return held


def copy_ceiling_gbs(device: torch.device, moved_bytes: float | None = None) -> float:
    """Device-to-device copy rate, bytes read + written: of 1 GiB fp32 (256 KiB on the CPU),
    or of a copy that moves `moved_bytes` in all (read + written), since small copies reach
    less of the bandwidth than large ones and a kernel's ceiling must match its size."""
    if moved_bytes is not None:
        numel = max(1, int(moved_bytes) // 8)
    else:
        numel = (1 << 28) if device.type == "cuda" else (1 << 16)
    src = torch.randn(numel, device=device)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / (ms * 1e-3) / 1e9


def matmul_ceiling_tflops(device: torch.device) -> float:
    """bf16 GEMM through torch at 8192^3 on a GPU (256^3 fp32 on the CPU)."""
    n, dtype = (8192, torch.bfloat16) if device.type == "cuda" else (256, torch.float32)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    ms = time_ms(lambda: a @ b)
    return 2 * n**3 / (ms * 1e-3) / 1e12
