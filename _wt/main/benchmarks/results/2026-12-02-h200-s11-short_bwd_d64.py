"""Why the bench's backward at B=8, H=16, N=1024, D=64 read 0.66 / 0.86 ms (full / causal)
through the Gluon kernels when the two passes alone take 0.26 / 0.18 ms: each way of calling
the backward timed (do_bench with the L2 clear, median) beside its host time a call (20 calls
queued back to back), the Gluon and Triton kernels alternately, then through autograd.

    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-02-h200-s11-short_bwd_d64.py
"""
import cProfile
import pstats

import torch
import triton

import tritonkit
from tritonkit.bench.timing import host_ms, l2_clear_ms, time_ms
from tritonkit.ops.attention import attention_bwd, attention_fwd

print(f"torch {torch.__version__} triton {triton.__version__} {torch.cuda.get_device_name()}; "
      f"L2 clear {l2_clear_ms() * 1e3:.0f} us")
for causal in (False, True):
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(8, 16, 1024, 64, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    o, lse = attention_fwd(q, k, v, causal)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = tritonkit.attention(*leaves, causal=causal)
    fns = {
        "attention_bwd gluon": lambda: attention_bwd(do, q, k, v, o, lse, causal, gluon=True),
        "attention_bwd triton": lambda: attention_bwd(do, q, k, v, o, lse, causal, gluon=False),
        "autograd (dispatch)": lambda: torch.autograd.grad(out, leaves, do, retain_graph=True),
        "forward+backward (dispatch)": lambda: torch.autograd.grad(tritonkit.attention(*leaves, causal=causal),
                                                                   leaves, do),
    }
    for name, fn in fns.items():
        fn()
        torch.cuda.synchronize()
        ms = [time_ms(fn) for _ in range(2)]
        host = [host_ms(fn) for _ in range(2)]
        print(f"causal={causal} {name}: {min(ms) * 1e3:.0f} us timed ({max(ms) * 1e3:.0f}), "
              f"host {min(host) * 1e3:.0f} us a call ({max(host) * 1e3:.0f})", flush=True)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(50):
        fns["autograd (dispatch)"]()
    profile.disable()
    torch.cuda.synchronize()
    pstats.Stats(profile).sort_stats("tottime").print_stats(14)
