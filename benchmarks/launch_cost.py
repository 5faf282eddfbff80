"""Python cost of the cached launch path (tritonkit._launch) for the launches of one norm
or attention forward + backward, measured without a GPU (developer tool):
    PYTHONPATH=src python3 benchmarks/launch_cost.py [rms rms+res layer layer+res attention]

The ops' launches are recorded on CPU tensors, then each is replayed through Launch._run
against a stand-in driver and a stand-in compiled kernel whose run() does nothing: what is
timed is the key, the cache lookup and the argument marshalling in Python, the part of a
launch that `host_profile.py --cpu` (launches recorded, not run) leaves out. The compiled
launcher's own C cost comes on top on a GPU. Kernels must be JIT functions here, so the
interpreter is kept off and the device checks, which refuse CPU tensors then, are bypassed.

With every launch's compiled stand-in in place, each case is then timed whole, as the
model calls it (forward with a gradient recorded, forward + backward through autograd),
launches included: the nearest this machine gets to a GPU host's time a call. `attention`
is examples/train_lm.py's layer (B=64, H=4 over Hkv=2, N=256, D=64, causal, bf16, q, k, v
views of one packed projection; the gradients stop at them).
"""
import os
import sys
import time

os.environ["TRITON_INTERPRET"] = "0"
os.environ.setdefault("TRITONKIT_AUTOTUNE", "0")  # the fixed tiles, as examples/train_lm.py runs
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


def calls():
    """case -> (its forward with a gradient recorded, its forward + backward)."""
    x, r, dy = (torch.randn(64, 256, requires_grad=i < 2) for i in range(3))
    w, b = (torch.randn(256, requires_grad=True) for _ in range(2))
    B, H, Hkv, N, D = 64, 4, 2, 256, 64
    qkv = torch.randn(B, N, (H + 2 * Hkv) * D, dtype=torch.bfloat16, requires_grad=True)
    q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
    q, k, v = (t.unflatten(-1, (n, D)).transpose(1, 2) for t, n in ((q, H), (k, Hkv), (v, Hkv)))
    do = torch.randn(B, H, N, D, dtype=torch.bfloat16)

    def attention():
        return tritonkit.attention(q, k, v, causal=True)
    return {
        "rms": (lambda: tritonkit.rms_norm(x, w),
                lambda: torch.autograd.grad(tritonkit.rms_norm(x, w), (x, w), dy)),
        "rms+res": (lambda: tritonkit.rms_norm(x, w, residual=r),
                    lambda: torch.autograd.grad(tritonkit.rms_norm(x, w, residual=r), (x, w, r), (dy, dy))),
        "layer": (lambda: tritonkit.layer_norm(x, w, b),
                  lambda: torch.autograd.grad(tritonkit.layer_norm(x, w, b), (x, w, b), dy)),
        "layer+res": (lambda: tritonkit.layer_norm(x, w, b, residual=r),
                      lambda: torch.autograd.grad(tritonkit.layer_norm(x, w, b, residual=r), (x, w, b, r), (dy, dy))),
        "attention": (attention, lambda: torch.autograd.grad(attention(), (q, k, v), do)),
    }


def recorded(step):
    with _launch.record_launches(execute=False) as launches:
        step()
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
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(print(__doc__))
    _checks.check_device_of = lambda name, device: None
    steps = calls()
    cases = sys.argv[1:] or list(steps)
    launches = {case: recorded(steps[case][1]) for case in cases}
    _launch.INTERPRETED = False
    _launch._driver = lambda: _Driver
    _launch.make_current = lambda device: None  # no CUDA context to make current here
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
        forward, step = steps[case]
        for name, fn in (("forward, gradient recorded", forward), ("forward + backward", step)):
            fn()  # builds what a first call builds, outside the recording
            print(f"  whole {name}, launches stubbed: {least_time(fn, calls=50):.1f} us")


if __name__ == "__main__":
    main()
