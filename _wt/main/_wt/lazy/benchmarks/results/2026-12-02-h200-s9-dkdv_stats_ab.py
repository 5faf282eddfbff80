"""A/B of the Gluon dK/dV kernel: lse and delta loaded by each consumer warpgroup from global
memory every query block and converted to the products' column layout through shared memory
(main at 7a56fdb, the "old" module: `git show 7a56fdb:src/tritonkit/gluon/attention_bwd/dkdv.py`
with `from ..common` made `from tritonkit.gluon.common`, saved as .ab/dkdv_old.py) against the
producer warp staging them in the ring beside Q and dO (the working tree). The same launch
arguments, alternately in one process, each kernel alone (do_bench median, us); the outputs
compared bitwise.

    PYTHONPATH=src:.ab python3 benchmarks/results/2026-12-02-h200-s9-dkdv_stats_ab.py
"""
import statistics

import dkdv_old
import torch
import triton

from tritonkit.gluon import attention_bwd as gluon_bwd
from tritonkit.ops.attention import attention_fwd

CASES = [  # B, H, Hkv, N, D, causal, softcap, window_left
    (4, 32, 32, 4096, 128, True, 0.0, -1), (4, 32, 32, 4096, 128, False, 0.0, -1),
    (4, 32, 32, 16384, 128, True, 0.0, -1), (1, 16, 8, 8192, 128, True, 0.0, -1),
    (4, 16, 8, 2048, 128, True, 0.0, -1), (4, 32, 8, 4096, 128, True, 50.0, -1),
    (1, 32, 8, 16384, 128, True, 0.0, 1024), (4, 32, 32, 4096, 64, False, 0.0, -1),
    (4, 32, 32, 4096, 64, True, 0.0, -1), (8, 16, 16, 1024, 64, True, 0.0, -1),
]


def main():
    print(f"torch {torch.__version__} triton {triton.__version__} {torch.cuda.get_device_name()}")
    print("B H/Hkv N D causal softcap window | old us | new us | old/new | bitwise equal")
    for B, H, Hkv, N, D, causal, softcap, window in CASES:
        torch.manual_seed(0)
        q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        do = torch.randn_like(q)
        o, lse = attention_fwd(q, k, v, causal, softcap=softcap, window_left=window)
        delta = (o.float() * do.float()).sum(-1)
        outs = {}
        fns = {}
        for name, kernel in (("old", dkdv_old._dkdv_kernel), ("new", gluon_bwd._dkdv_kernel)):
            dk, dv = torch.full_like(k, float("nan")), torch.full_like(v, float("nan"))
            grid, args, kwargs = gluon_bwd.dkdv_launch_args(do, q, k, v, dk, dv, lse, delta, causal, D ** -0.5,
                                                            softcap, window)
            fns[name] = lambda kernel=kernel, grid=grid, args=args, kwargs=kwargs: kernel[grid](*args, **kwargs)
            fns[name]()
            outs[name] = (dk, dv)
        torch.cuda.synchronize()
        same = all(torch.equal(a, b) for a, b in zip(outs["old"], outs["new"]))
        t = {"old": [], "new": []}
        for _ in range(3):
            for name in ("old", "new"):
                t[name].append(triton.testing.do_bench(fns[name], warmup=5, rep=40, return_mode="median"))
        us = {n: statistics.median(v) * 1e3 for n, v in t.items()}
        print(f"{B} {H}/{Hkv} {N} {D} {causal} {softcap:g} {window} | {us['old']:.1f} | {us['new']:.1f} | "
              f"{us['old'] / us['new']:.3f} | {same}", flush=True)


if __name__ == "__main__":
    main()
