"""Packed sequences at head dim 64, causal, below the dense rule's 2^34 multiply-adds of Q K^T
(`paths.GLUON_BACKWARD_MIN_WORK`): the Gluon backward against the Triton backward, whole calls
(host time included, as a training step sees them), 7 alternating rounds in one process.

    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-03-h200-s16-gluon_varlen_d64_small.py
"""
import math
import statistics

import torch

from tritonkit.bench.timing import time_ms
from tritonkit.ops.attention import attention_varlen_bwd, attention_varlen_fwd
from tritonkit.registry.attention_varlen import cu_seqlens, lognormal_lengths

ROUNDS = 7

for count, mean, H, Hkv in [(4, 1024, 16, 16), (8, 1024, 16, 16), (16, 1024, 16, 8), (8, 512, 16, 8),
                            (32, 256, 16, 16), (16, 1024, 32, 8)]:
    torch.manual_seed(0)
    lengths = lognormal_lengths(count, mean)
    T = sum(lengths)
    cu = cu_seqlens(lengths, "cuda")
    q = torch.randn(T, H, 64, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(T, Hkv, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    o, lse = attention_varlen_fwd(q, k, v, cu, cu, True)
    do = torch.randn_like(q)
    work = H * T * (T // count // 2) * 64            # the dispatch's estimate of the Q K^T multiply-adds
    times = {g: [] for g in (True, False)}
    for _ in range(ROUNDS):
        for g in times:
            times[g].append(time_ms(lambda g=g: attention_varlen_bwd(do, q, k, v, o, lse, cu, cu, True, gluon=g)))
    ratio = [b / a for a, b in zip(times[True], times[False])]
    print(f"packed {count} seqs mean {T // count} H{H}/{Hkv} D64 causal (2^{math.log2(work):.1f}): gluon "
          f"{statistics.median(times[True]) * 1e3:7.1f} us  triton {statistics.median(times[False]) * 1e3:7.1f} us; "
          f"gluon faster by {statistics.median(ratio):.3f}x ({min(ratio):.3f}-{max(ratio):.3f})", flush=True)
