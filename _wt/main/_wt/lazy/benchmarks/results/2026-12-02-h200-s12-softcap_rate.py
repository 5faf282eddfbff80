"""The softcapped forward and backward against the same calls without the cap (issue 15's bar:
at least 0.9x tritonkit's own rate without softcap, D=128 N=4096 causal, 32/8 heads), through
the launchers with the dispatch's path, TFLOP/s counted on the causal pairs (same work both).

    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-02-h200-s12-softcap_rate.py
"""
import torch

from tritonkit.bench.timing import time_ms
from tritonkit.ops.attention import attention_bwd, attention_fwd

for B, H, Hkv, N, D, causal in [(4, 32, 8, 4096, 128, True), (4, 32, 8, 4096, 128, False),
                                (4, 32, 8, 4096, 64, True)]:
    torch.manual_seed(0)
    q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    work = 4 * B * H * N * N * D / (2 if causal else 1)
    rates = {}
    for cap in (0.0, 50.0):
        fwd = lambda: attention_fwd(q, k, v, causal, softcap=cap)
        o, lse = fwd()
        bwd = lambda: attention_bwd(do, q, k, v, o, lse, causal, softcap=cap)
        rates[cap] = (work / min(time_ms(fwd) for _ in range(3)) / 1e9,
                      2.5 * work / min(time_ms(bwd) for _ in range(3)) / 1e9)
    print(f"B{B} H{H}/{Hkv} N{N} D{D}{' causal' if causal else ''}: fwd plain {rates[0.0][0]:6.1f} "
          f"softcap {rates[50.0][0]:6.1f} ({rates[50.0][0] / rates[0.0][0]:.3f}x) | bwd plain "
          f"{rates[0.0][1]:6.1f} softcap {rates[50.0][1]:6.1f} ({rates[50.0][1] / rates[0.0][1]:.3f}x)", flush=True)
