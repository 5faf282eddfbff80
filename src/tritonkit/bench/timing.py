"""Timers and the card's ceilings, measured in the same process as the cases."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from .. import _runtime


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


def host_ms(fn: Callable[[], object]) -> float | None:
    """Milliseconds of host (Python and launch) time one call takes, on a GPU: HOST_CALLS
    calls queued back to back without waiting for the GPU. When it comes near the timed
    GPU time, the case measures the host, not the kernel (do_bench's CUDA events then see
    the GPU waiting for work). None under the interpreter, whose calls are synchronous."""
    if _runtime.INTERPRETED:
        return None
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(HOST_CALLS):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / HOST_CALLS * 1e3


def host_bound_note(ms: float, host: float | None) -> str:
    """A note for a case whose host time a call is at least 70% of its timed GPU time."""
    if host is None or host < 0.7 * ms:
        return ""
    return (f"host-bound: {host * 1e3:.0f} us of host time a call against {ms * 1e3:.0f} us timed; "
            f"this figure measures the host more than the kernel")


def copy_ceiling_gbs(device: torch.device) -> float:
    """Device-to-device copy of 1 GiB fp32 (256 KiB on the CPU), bytes read + written."""
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
