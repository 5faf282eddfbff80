"""Python cost of the cached launch path (tritonkit._launch) for the launches of one norm
forward + backward, measured without a GPU (developer tool):
    PYTHONPATH=src python3 benchmarks/launch_cost.py [rms rms+res layer layer+res]

The ops' launches are recorded on CPU tensors, then each is replayed through Launch._run
against a stand-in driver and a stand-in compiled kernel whose run() does nothing: what is
timed is the key, the cache lookup and the argument marshalling in Python, the part of a
launch that `host_profile.py --cpu` (launches recorded, not run) leaves out. The compiled
launcher's own C cost comes on top on a GPU. Kernels must be JIT functions here, so the
interpreter is kept off and the device checks, which refuse CPU tensors then, are bypassed.
"""
import os
import sys
import time

os.environ["TRITON_INTERPRET"] = "0"
import torch  # noqa: E402
import tritonkit  # noqa: E402
from tritonkit import _checks, _launch  # noqa: E402


class _Driver:
    @staticmethod
    def get_current_device():
        return 0

    @staticmethod
    def get_current_stream(device):
        return 0


class _Compiled:
    function = packed_metadata = None

    def run(self, *args):
        pass


def recorded(case):
    x, r, dy = (torch.randn(64, 256, requires_grad=i < 2) for i in range(3))
    w, b = (torch.randn(256, requires_grad=True) for _ in range(2))
    calls = {
        "rms": lambda: torch.autograd.grad(tritonkit.rms_norm(x, w), (x, w), dy),
        "rms+res": lambda: torch.autograd.grad(tritonkit.rms_norm(x, w, residual=r), (x, w, r), (dy, dy)),
        "layer": lambda: torch.autograd.grad(tritonkit.layer_norm(x, w, b), (x, w, b), dy),
        "layer+res": lambda: torch.autograd.grad(tritonkit.layer_norm(x, w, b, residual=r), (x, w, b, r), (dy, dy)),
    }
    with _launch.record_launches(execute=False) as launches:
        calls[case]()
    return launches


def least_time(fn, calls=200, rounds=30):
    best = float("inf")
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.thread_time() - start) / calls * 1e6)
    return best


def main():
    _checks.check_device_of = lambda name, device: None
    cases = sys.argv[1:] or ["rms", "rms+res", "layer", "layer+res"]
    launches = {case: recorded(case) for case in cases}
    _launch.INTERPRETED = False
    _launch._driver = lambda: _Driver
    for case, recording in launches.items():
        total = 0.0
        for launch in recording:  # every key cached, so each launch takes the fast path
            key = _launch._specialization_key(launch, 0)
            _launch._cache_of(launch.kernel).compiled[key] = _Compiled()
            spent = least_time(lambda: launch._run(0))
            tensors = sum(isinstance(a, torch.Tensor) for a in launch.args)
            print(f"  {launch.name}: {spent:.2f} us ({len(launch.args)} arguments, {tensors} tensors)")
            total += spent
        print(f"{case}: {len(recording)} launches, {total:.2f} us of Python a call")


if __name__ == "__main__":
    main()
