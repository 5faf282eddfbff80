"""Host time per call of tritonkit's ops on a GPU, with a cProfile of each (developer tool):
    PYTHONPATH=src python3 benchmarks/host_profile.py [add softmax attention autotuned]
Host time here is the time Python takes to issue a call, with the GPU left to run behind it
(the figures print before any synchronisation), so it is what bounds small inputs."""
import cProfile
import os
import pstats
import sys
import time

os.environ.setdefault("TRITONKIT_AUTOTUNE", "0")
import torch  # noqa: E402
import tritonkit  # noqa: E402
from tritonkit import _launch  # noqa: E402
from tritonkit.ops import attention as A  # noqa: E402


def cases(groups):
    if "add" in groups:
        x, y = torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")
        out = torch.empty_like(x)
        yield "add out", lambda: tritonkit.add(x, y, out=out)
        yield "add", lambda: tritonkit.add(x, y)
    if "softmax" in groups:
        m = torch.randn(1823, 781, device="cuda")
        yield "softmax", lambda: tritonkit.softmax(m, -1)
    if "attention" in groups:
        q, k, v = (torch.randn(4, 32, 1024, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        o, lse = A.attention_fwd(q, k, v, True)
        do = torch.randn_like(o)
        yield "attention (public, no grad)", lambda: tritonkit.attention(q, k, v, causal=True)
        yield "attention_fwd, descriptors", lambda: A.attention_fwd(q, k, v, True)
        yield "attention_fwd, pointers", lambda: A.attention_fwd(q, k, v, True, tma=False)
        yield "attention_bwd, descriptors", lambda: A.attention_bwd(do, q, k, v, o, lse, True)
        yield "attention_bwd, pointers", lambda: A.attention_bwd(do, q, k, v, o, lse, True, tma=False)
    if "autotuned" in groups:  # the forward as users run it by default: autotuned (tunes first)
        q, k, v = (torch.randn(4, 32, 1024, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        os.environ["TRITONKIT_AUTOTUNE"] = "1"
        start = time.perf_counter()
        A.attention_fwd(q, k, v, True)
        torch.cuda.synchronize()
        print(f"autotuning the forward took {time.perf_counter() - start:.1f} s")
        yield "attention_fwd, autotuned", lambda: A.attention_fwd(q, k, v, True)


def main():
    groups = sys.argv[1:] or ["add", "softmax", "attention"]
    print("launch hooks set:", _launch._launch_hooks_set())
    for name, fn in cases(groups):
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(5):  # the least of five rounds of 100 calls: the host's own noise is large
            start = time.perf_counter()
            for _ in range(100):
                fn()
            best = min(best, (time.perf_counter() - start) / 100 * 1e6)
            torch.cuda.synchronize()
        print(f"{name}: {best:.1f} us/call host")
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(200):
            fn()
        profile.disable()
        torch.cuda.synchronize()
        pstats.Stats(profile).sort_stats("tottime").print_stats(8)


if __name__ == "__main__":
    main()
