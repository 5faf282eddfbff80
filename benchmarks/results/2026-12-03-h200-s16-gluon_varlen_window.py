"""Packed sequences with a causal left window (one cu_seqlens for queries and keys) on the Gluon
kernels against the Triton kernels, forward and backward, in rounds in one process.

    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-03-h200-s16-gluon_varlen_window.py
"""
import statistics

import torch

from tritonkit.bench.timing import time_ms
from tritonkit.ops.attention import attention_varlen_bwd, attention_varlen_fwd
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


def packed_window(lengths, H, Hkv, D, window):
    torch.manual_seed(0)
    T = sum(lengths)
    cu = cu_seqlens(lengths, "cuda")
    q = torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(T, Hkv, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    pairs = sum(sum(min(i, window) + 1 for i in range(n)) for n in lengths)
    label = f"packed {len(lengths)} seqs mean {T // len(lengths)} H{H}/{Hkv} D{D} causal window {window}"
    fwd = {g: attention_varlen_fwd(q, k, v, cu, cu, True, window_left=window, gluon=g) for g in (True, False)}
    print(f"{label}: max |o gluon - o triton| {(fwd[True][0].float() - fwd[False][0].float()).abs().max().item():.2e}")
    rounds(f"{label} fwd", 4 * H * D * pairs, {
        "gluon": lambda: attention_varlen_fwd(q, k, v, cu, cu, True, window_left=window, gluon=True),
        "triton": lambda: attention_varlen_fwd(q, k, v, cu, cu, True, window_left=window, gluon=False)})
    o, lse = fwd[False]
    do = torch.randn_like(q)
    rounds(f"{label} bwd", 2.5 * 4 * H * D * pairs, {
        "gluon": lambda: attention_varlen_bwd(do, q, k, v, o, lse, cu, cu, True, window_left=window, gluon=True),
        "triton": lambda: attention_varlen_bwd(do, q, k, v, o, lse, cu, cu, True, window_left=window,
                                               gluon=False)})


for window in (256, 512):
    packed_window(lognormal_lengths(16, 1024), 32, 8, 128, window)
packed_window([4096] * 4, 32, 8, 128, 1024)
