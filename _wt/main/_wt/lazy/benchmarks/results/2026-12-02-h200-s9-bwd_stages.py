"""The Gluon backward's ring depths after the dK/dV kernel's lse and delta moved into its
ring: each pass alone at its shipped STAGES and at others that fit shared memory, the same
launch arguments otherwise, alternately in one process (do_bench median, us), every variant's
output compared bitwise with the shipped depth's (the depth changes buffering, not arithmetic).

    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-02-h200-s9-bwd_stages.py
"""
import statistics

import torch
import triton

from tritonkit.gluon import attention_bwd as gluon_bwd
from tritonkit.ops.attention import attention_fwd

CASES = [(4, 32, 32, 4096, 128, True), (4, 32, 32, 4096, 128, False), (1, 16, 8, 8192, 128, True),
         (4, 32, 32, 4096, 64, False)]
VARIANTS = {("dkdv", 128): (3, 4), ("dq", 128): (4, 5), ("dkdv", 64): (4, 5), ("dq", 64): (4, 5)}

print(f"torch {torch.__version__} triton {triton.__version__} {torch.cuda.get_device_name()}")
for B, H, Hkv, N, D, causal in CASES:
    torch.manual_seed(0)
    q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    o, lse = attention_fwd(q, k, v, causal)
    delta = (o.float() * do.float()).sum(-1)
    for kind in ("dkdv", "dq"):
        stages = VARIANTS[(kind, D)]
        fns, outs = {}, {}
        for st in stages:
            if kind == "dkdv":
                out = (torch.empty_like(k), torch.empty_like(v))
                grid, args, kw = gluon_bwd.dkdv_launch_args(do, q, k, v, *out, lse, delta, causal, D ** -0.5)
                kernel = gluon_bwd._dkdv_kernel
            else:
                out = (torch.empty_like(q),)
                grid, args, kw = gluon_bwd.dq_launch_args(do, q, k, v, *out, lse, delta, causal, D ** -0.5)
                kernel = gluon_bwd._dq_kernel
            kw = dict(kw, STAGES=st)
            fns[st] = lambda kernel=kernel, grid=grid, args=args, kw=kw: kernel[grid](*args, **kw)
            try:
                fns[st]()
                outs[st] = out
            except Exception as e:  # does not fit shared memory, say
                print(f"  {kind} D={D} STAGES={st}: {type(e).__name__}: {str(e)[:100]}")
                del fns[st]
        torch.cuda.synchronize()
        t = {st: [] for st in fns}
        for _ in range(3):
            for st, f in fns.items():
                t[st].append(triton.testing.do_bench(f, warmup=5, rep=40, return_mode="median"))
        base = stages[0]
        line = " | ".join(f"STAGES={st} {statistics.median(t[st]) * 1e3:.1f} us "
                          f"({statistics.median(t[base]) / statistics.median(t[st]):.3f}x, "
                          f"{'same' if all(torch.equal(a, b) for a, b in zip(outs[st], outs[base])) else 'DIFFERENT'})"
                          for st in fns)
        print(f"{B} {H}/{Hkv} {N} {D} {'causal' if causal else 'full'} {kind}: {line}", flush=True)
