"""Packed sequences on the Gluon backward against the Triton backward, in rounds in one process,
with the dense causal backward rate the packed bar compares with (issue 15: 0.9x of the dense
causal rate at N=4096, counted on the work actually needed); then the Gluon forward against
the Triton one at mean lengths around the dispatch's threshold.

    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-03-h200-s16-gluon_varlen_bwd.py
"""
import statistics

import torch

from tritonkit.bench.timing import time_ms
from tritonkit.ops.attention import attention_bwd, attention_fwd, attention_varlen_bwd, attention_varlen_fwd
from tritonkit.registry.attention_varlen import cu_seqlens, lognormal_lengths

ROUNDS = 7


def rounds(label, work, fns):
    rates = {name: [] for name in fns}
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            rates[name].append(work / time_ms(fn) / 1e9)
    names = list(fns)
    ratios = [a / b for a, b in zip(rates[names[0]], rates[names[1]])]
    print(f"{label}: " + "  ".join(f"{n} {statistics.median(r):6.1f}" for n, r in rates.items())
          + f" TFLOP/s; {names[0]}/{names[1]} median {statistics.median(ratios):.3f}x "
          f"({min(ratios):.3f}-{max(ratios):.3f}, {ROUNDS} rounds)", flush=True)
    return {n: statistics.median(r) for n, r in rates.items()}


def dense_bwd(B, H, Hkv, N, D):
    torch.manual_seed(0)
    q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    o, lse = attention_fwd(q, k, v, True)
    do = torch.randn_like(q)
    return rounds(f"dense bwd B{B} H{H}/{Hkv} N{N} D{D} causal", 2.5 * 2 * B * H * N * N * D, {
        "gluon": lambda: attention_bwd(do, q, k, v, o, lse, True, gluon=True),
        "triton": lambda: attention_bwd(do, q, k, v, o, lse, True, gluon=False)})


def packed(lengths, H, Hkv, D, causal, backward=True):
    torch.manual_seed(0)
    T = sum(lengths)
    cu = cu_seqlens(lengths, "cuda")
    q = torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(T, Hkv, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    pairs = sum(n * (n + 1) // 2 if causal else n * n for n in lengths)
    label = (f"packed {len(lengths)} seqs mean {T // len(lengths)} (total {T}) H{H}/{Hkv} D{D}"
             f"{' causal' if causal else ''}")
    if not backward:
        return rounds(f"{label} fwd", 4 * H * D * pairs, {
            "gluon": lambda: attention_varlen_fwd(q, k, v, cu, cu, causal, gluon=True),
            "triton": lambda: attention_varlen_fwd(q, k, v, cu, cu, causal, gluon=False)})
    o, lse = attention_varlen_fwd(q, k, v, cu, cu, causal)
    do = torch.randn_like(q)
    g = attention_varlen_bwd(do, q, k, v, o, lse, cu, cu, causal, gluon=True)
    t = attention_varlen_bwd(do, q, k, v, o, lse, cu, cu, causal, gluon=False)
    print(f"{label}: max |d gluon - d triton| " + ", ".join(
        f"{n} {(a.float() - b.float()).abs().max().item():.2e}" for n, a, b in zip(("dq", "dk", "dv"), g, t)))
    return rounds(f"{label} bwd", 2.5 * 4 * H * D * pairs, {
        "gluon": lambda: attention_varlen_bwd(do, q, k, v, o, lse, cu, cu, causal, gluon=True),
        "triton": lambda: attention_varlen_bwd(do, q, k, v, o, lse, cu, cu, causal, gluon=False)})


base = dense_bwd(4, 32, 8, 4096, 128)["gluon"]
short = dense_bwd(16, 32, 8, 1024, 128)["gluon"]
bench = packed(lognormal_lengths(16, 1024), 32, 8, 128, True)
print(f"issue 15's batch, backward, against dense causal N=4096 ({base:.1f}): gluon {bench['gluon'] / base:.3f}x, "
      f"triton {bench['triton'] / base:.3f}x (bar 0.9x); dense N=1024 itself {short / base:.3f}x")
packed([1024] * 16, 32, 8, 128, True)
packed([4096] * 4, 32, 8, 128, True)
packed(lognormal_lengths(64, 256), 32, 8, 128, True)
packed(lognormal_lengths(16, 1024), 32, 8, 128, False)
packed(lognormal_lengths(16, 1024), 32, 8, 64, True)
packed(lognormal_lengths(16, 1024), 32, 8, 64, False)
for mean in (384, 512, 768):
    packed(lognormal_lengths(16384 // mean, mean), 32, 8, 128, True, backward=False)
