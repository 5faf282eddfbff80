"""The dynamic causal schedule at short causal shapes (notes/gluon_attention.md): is the launcher
slower than the kernel, and why? For each shape, GPU time (do_bench) and host time a call of:
the launcher (`attention_fwd(..., gluon=True)`: plan, the stream's cached counters, cached launch
path); the kernel through the cached path with a fresh pair of counters a call; the same with
one pair reused (the kernel resets them); and one tile a program.
    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/dynamic_schedule_diag.py"""
import torch
import triton.testing

from tritonkit._launch import Launch
from tritonkit.bench.timing import host_ms
from tritonkit.ops.attention.gluon import attention_fwd as G
from tritonkit.ops.attention import attention_fwd


def host_us(f):
    for _ in range(5):
        f()
    return host_ms(f) * 1e3


for B, H, N, D in ((8, 16, 1024, 64), (8, 16, 1024, 128), (4, 16, 2048, 128), (4, 32, 4096, 128)):
    q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o, lse = torch.empty_like(q), torch.empty(B, H, N, device="cuda")
    grid, args, kw = G.launch_args(q, k, v, o, lse, True, D ** -0.5)
    kw = dict(kw)
    nw = kw.pop("num_warps")

    def kernel(sched=None, dynamic=True, grid=grid):
        a = args if sched is None else (*args[:5], sched(), *args[6:])
        Launch("fwd", G._attn_fwd_kernel, grid, a, dict(kw, DYNAMIC=dynamic), num_warps=nw, num_stages=None)()

    runs = {
        "launcher": lambda: attention_fwd(q, k, v, True, gluon=True),
        "kernel, fresh counters": lambda: kernel(lambda: torch.zeros(2, dtype=torch.int32, device="cuda")),
        "kernel, counters reused": lambda: kernel(),
        "kernel, one tile a program": lambda: kernel(dynamic=False, grid=(args[-1],)),
    }
    flops = 4 * B * H * N * N * D / 2
    for name, f in runs.items():
        ms = triton.testing.do_bench(f, warmup=25, rep=100, return_mode="median")
        print(f"B{B} H{H} N{N} D{D} causal, {name}: {flops / ms / 1e9:.0f} TFLOP/s ({ms * 1e3:.1f} us), "
              f"host {host_us(f):.0f} us a call", flush=True)
    del q, k, v, o
