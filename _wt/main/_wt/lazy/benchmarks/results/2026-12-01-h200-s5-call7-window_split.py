"""Each Gluon backward pass alone at the window case and at dense causal shapes (ms, do_bench)."""
import torch, triton.testing
from tritonkit.ops.attention import attention_fwd
from tritonkit.gluon import attention_bwd as gb
from tritonkit._launch import Launch

def run(name, kernel, launch_args):
    grid, args, kwargs = launch_args
    kwargs = dict(kwargs); nw = kwargs.pop("num_warps")
    return lambda: Launch(name, kernel, grid, args, kwargs, num_warps=nw, num_stages=None)()

for (B, H, Hkv, N, W) in [(1, 32, 8, 16384, 1024), (1, 32, 8, 16384, -1), (4, 32, 8, 2048, -1), (1, 16, 8, 8192, -1)]:
    q = torch.randn(B, H, N, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, N, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    o, lse = attention_fwd(q, k, v, True, None, W)
    delta = (do.float() * o.float()).sum(-1)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    s = 128 ** -0.5
    dkdv = run("dkdv", gb._dkdv_kernel, gb.dkdv_launch_args(do, q, k, v, dk, dv, lse, delta, True, s, 0.0, W))
    dqp = run("dq", gb._dq_kernel, gb.dq_launch_args(do, q, k, v, dq, lse, delta, True, s, 0.0, W))
    both = lambda: gb.attention_bwd_gluon(do, q, k, v, lse, delta, dq, dk, dv, True, s, 0.0, W)
    pairs = sum(min(i, W if W >= 0 else N) + 1 for i in range(N))
    unit = 2 * B * H * pairs * 128 / 1e9   # GFLOP of one product over the kept pairs (per ms: TFLOP/s)
    t1 = triton.testing.do_bench(dkdv, warmup=20, rep=200)
    t2 = triton.testing.do_bench(dqp, warmup=20, rep=200)
    t3 = triton.testing.do_bench(both, warmup=20, rep=200)
    print(f"B{B} H{H}/{Hkv} N{N} window {W}: dK/dV {t1:.3f} ms ({4 * unit / t1:.0f} TFLOP/s of its 4 products), "
          f"dQ {t2:.3f} ms ({3 * unit / t2:.0f} of 3), both on one stream {t3:.3f} ms; sum {t1 + t2:.3f}", flush=True)
