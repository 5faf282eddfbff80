"""The Triton attention kernels' causal tile order (HEAD_SPAN, `ops.attention.order`): head after
head against longest first in spans of 8 heads, through the launchers with gluon=False, in
alternating rounds in one process.

    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-03-h200-s17-triton_span.py
"""
import statistics

import torch

from tritonkit.bench.timing import time_ms
from tritonkit.ops.attention import attention_bwd, attention_fwd, order, plans

ROUNDS = 3


def case(B, H, Hkv, N, D, backward=True):
    q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    rates = {}
    for _ in range(ROUNDS):
        for longest in (False, True):
            order.LONGEST_FIRST_MAX_TILES_PER_SM = 32 if longest else -1
            plans.clear()
            o, lse = attention_fwd(q, k, v, True, gluon=False)
            fns = {"fwd": lambda: attention_fwd(q, k, v, True, gluon=False)}
            if backward:
                fns["bwd"] = lambda: attention_bwd(do, q, k, v, o, lse, True, gluon=False)
            for p, fn in fns.items():
                work = 2 * B * H * N * N * D / 2 * (2 if p == "fwd" else 7)
                rates.setdefault((p, longest), []).append(work / time_ms(fn) / 1e9)
    for p in ("fwd", "bwd"):
        if (p, False) in rates:
            a, b = statistics.median(rates[(p, False)]), statistics.median(rates[(p, True)])
            print(f"Triton B{B} H{H}/{Hkv} N{N} D{D} causal {p}: head after head {a:.1f}, spans of 8 {b:.1f} "
                  f"TFLOP/s ({b / a:.3f}x)", flush=True)


case(4, 16, 8, 2048, 64)
case(4, 32, 32, 4096, 128, backward=False)
