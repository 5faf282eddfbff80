"""The softcapped forward against the plain one, alternating in rounds in one process (issue 15's
softcap bar: at least 0.9x tritonkit's own rate without softcap, D=128 N=4096 causal, 32/8 heads):
single processes read the ratio between 0.88x and 0.92x, the plain forward's rate moving by up to
6% from one process to the next. Each round times both (do_bench medians); the median of the
rounds' ratios is printed, with the spread.

    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-02-h200-s14-softcap_rounds.py
"""
import statistics

import torch

from tritonkit.bench.timing import time_ms
from tritonkit.ops.attention import attention_fwd

ROUNDS = 9
for B, H, Hkv, N, D, causal in [(4, 32, 8, 4096, 128, True), (4, 32, 8, 4096, 128, False),
                                (1, 32, 8, 16384, 128, True)]:
    torch.manual_seed(0)
    q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    work = 4 * B * H * N * N * D / (2 if causal else 1)
    ratios, plain, capped = [], [], []
    for _ in range(ROUNDS):
        t0 = time_ms(lambda: attention_fwd(q, k, v, causal))
        t1 = time_ms(lambda: attention_fwd(q, k, v, causal, softcap=50.0))
        plain.append(work / t0 / 1e9)
        capped.append(work / t1 / 1e9)
        ratios.append(t0 / t1)
    print(f"B{B} H{H}/{Hkv} N{N} D{D}{' causal' if causal else ''}: plain {statistics.median(plain):6.1f} "
          f"softcap {statistics.median(capped):6.1f} TFLOP/s; ratio median {statistics.median(ratios):.3f}x "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {ROUNDS} rounds)", flush=True)
