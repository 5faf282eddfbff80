"""The Gluon causal forward: tiles one a program (main's launcher) against the dynamic schedule
(a persistent grid, each tile to the first program to ask), both through tritonkit's cached
launch path, alternately in one process. Run on the branch gluon-fwd-dynamic-schedule, whose
kernel has DYNAMIC (as run, the module was a copy of that branch's attention_fwd.py)."""
import torch, triton.testing
from tritonkit.gluon import attention_fwd as G
from tritonkit._launch import Launch
for B, H, N, D in ((4, 32, 4096, 128), (4, 32, 16384, 128), (4, 16, 4096, 256), (4, 16, 16384, 256), (4, 32, 1024, 128)):
    q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    o, lse = torch.empty_like(q), torch.empty(B, H, N, device="cuda")
    grid, args, kw = G.launch_args(q, k, v, o, lse, True, D ** -0.5)
    kw = dict(kw); nw = kw.pop("num_warps")
    static_args = (*args[:5], lse, *args[6:])
    runs = {"tile a program": lambda: Launch("fwd", G._attn_fwd_kernel, (args[-1],), static_args, dict(kw, DYNAMIC=False), num_warps=nw, num_stages=None)(),
            "dynamic": lambda: Launch("fwd", G._attn_fwd_kernel, grid, args, kw, num_warps=nw, num_stages=None)()}
    outs = {}
    for n, f in runs.items():
        f(); torch.cuda.synchronize(); outs[n] = o.clone()
    flops = 4 * B * H * N * N * D / 2
    t = {n: [] for n in runs}
    for _ in range(3):
        for n, f in runs.items():
            t[n].append(flops / triton.testing.do_bench(f, warmup=25, rep=100, return_mode="median") / 1e9)
    print(f"B{B} H{H} N{N} D{D} causal: " + "  ".join(f"{n} {' / '.join(f'{x:.0f}' for x in v)} TFLOP/s" for n, v in t.items())
          + f"  ratio {sum(t['dynamic']) / sum(t['tile a program']):.3f}  bitwise {torch.equal(*outs.values())}", flush=True)
    del q, k, v, o
