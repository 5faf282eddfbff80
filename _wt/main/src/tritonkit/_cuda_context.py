"""The CUDA context a launch needs in the thread that makes it.

A CUDA device's primary context is current in a thread only once something has made it so:
torch's runtime calls do it in passing (an allocation that reaches cudaMalloc, a kernel
launch), and Triton's launcher does it before it launches. But Triton encodes a launch's
tensor descriptors (cuTensorMapEncodeTiled) before its launcher runs, and the driver refuses
that without a current context ("Failed to create tensor map descriptor: invalid device
context"). A thread whose first CUDA work is such a launch has none: autograd's backward
thread, when the attention backward's first launch is the first thing it runs and every
allocation before it came from the caching allocator's pool. `make_current` makes it so,
once per thread and device.
"""

from __future__ import annotations

import ctypes
import threading

_made_current = threading.local()   # .device: the device whose context this thread made current
_libcuda: ctypes.CDLL | None = None


def _driver() -> ctypes.CDLL:
    global _libcuda
    if _libcuda is None:
        _libcuda = ctypes.CDLL("libcuda.so.1")
    return _libcuda


def _check(status: int, call: str) -> None:
    if status != 0:
        raise RuntimeError(f"CUDA driver call {call} failed with status {status}")


def make_current(device: int) -> None:
    """Make `device`'s primary context current in this thread unless a context already is
    (then it is the one torch's device guard chose for `device`, which launches need anyway).
    Costs a thread-local lookup after the first call of a thread for a device."""
    if getattr(_made_current, "device", None) == device:
        return
    lib = _driver()
    context = ctypes.c_void_p()
    _check(lib.cuCtxGetCurrent(ctypes.byref(context)), "cuCtxGetCurrent")
    if not context.value:
        handle = ctypes.c_int()
        _check(lib.cuDeviceGet(ctypes.byref(handle), ctypes.c_int(device)), "cuDeviceGet")
        _check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), handle), "cuDevicePrimaryCtxRetain")
        _check(lib.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    _made_current.device = device
