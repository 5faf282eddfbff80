"""Packed sequences at head dim 256 (Gemma's): the backward with the Gluon dK/dV pass (beside the
Triton preprocess and dQ pass) against the Triton backward, in rounds in one process.

    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-03-h200-s16-gluon_varlen_d256.py
"""
import statistics

import torch

from tritonkit.bench.timing import time_ms
from tritonkit.ops.attention import attention_varlen_bwd, attention_varlen_fwd
from tritonkit.registry.attention_varlen import cu_seqlens, lognormal_lengths

ROUNDS = 7

for lengths, H, Hkv, window in [(lognormal_lengths(8, 2048), 16, 8, -1), (lognormal_lengths(16, 1024), 16, 8, -1),
                                (lognormal_lengths(8, 2048), 16, 8, 1024)]:
    torch.manual_seed(0)
    T = sum(lengths)
    cu = cu_seqlens(lengths, "cuda")
    q = torch.randn(T, H, 256, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(T, Hkv, 256, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    o, lse = attention_varlen_fwd(q, k, v, cu, cu, True, window_left=window)
    do = torch.randn_like(q)
    pairs = sum(sum(min(i, window if window >= 0 else i) + 1 for i in range(n)) for n in lengths)
    work = 2.5 * 4 * H * 256 * pairs
    fns = {g: (lambda g=g: attention_varlen_bwd(do, q, k, v, o, lse, cu, cu, True, window_left=window, gluon=g))
           for g in (True, False)}
    got, want = fns[True](), fns[False]()
    rates = {g: [] for g in fns}
    for _ in range(ROUNDS):
        for g, fn in fns.items():
            rates[g].append(work / time_ms(fn) / 1e9)
    ratios = [a / b for a, b in zip(rates[True], rates[False])]
    print(f"packed {len(lengths)} seqs mean {T // len(lengths)} H{H}/{Hkv} D256 causal window {window} bwd: "
          f"gluon dK/dV {statistics.median(rates[True]):6.1f}  triton {statistics.median(rates[False]):6.1f} "
          f"TFLOP/s; median {statistics.median(ratios):.3f}x ({min(ratios):.3f}-{max(ratios):.3f}); max |diff| "
          + ", ".join(f"{n} {(a.float() - b.float()).abs().max().item():.1e}" for n, a, b in zip("qkv", got, want)),
          flush=True)
