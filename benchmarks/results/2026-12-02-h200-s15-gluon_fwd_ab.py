"""Run on the tree with 2026-12-02-s15-q_double_buffer.patch applied (the Q_BUFFERS constexpr it measured
was then removed: no gain).

The Gluon forward with two Q buffers a consumer against one (each tile's Q loaded under the
tile before, against after it), alternating in rounds in one process; then packed sequences
(issue 15's batch: 16 lognormal lengths of mean 1024, 32/8 heads, D=128, causal) on the Gluon
forward against the Triton one, and the dense causal N=4096 rate the bar compares with.

    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-02-h200-s15-gluon_fwd_ab.py
"""
import statistics

import torch

from tritonkit._launch import LaunchTemplate
from tritonkit.bench.timing import time_ms
from tritonkit.gluon.attention_fwd import ForwardLaunch
from tritonkit.ops.attention import attention_fwd, attention_varlen_fwd
from tritonkit.registry.attention_varlen import cu_seqlens, lognormal_lengths

ROUNDS = 7


def one_q_buffer(plan: ForwardLaunch) -> ForwardLaunch:
    t = plan.template
    plan.template = LaunchTemplate(t.name, t.kernel, t.grid, t.tail, dict(t.constexprs, Q_BUFFERS=1), t.num_warps,
                                   t.num_stages)
    return plan


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


dense = {}
for B, H, Hkv, N, D, causal in [(16, 32, 8, 1024, 128, True), (8, 32, 8, 2048, 128, True), (4, 16, 8, 2048, 128, True),
                                (4, 32, 8, 4096, 128, True), (4, 32, 8, 4096, 128, False),
                                (1, 16, 8, 8192, 128, True), (16, 32, 8, 1024, 128, False),
                                (8, 16, 16, 1024, 64, False), (4, 32, 8, 4096, 64, False)]:
    torch.manual_seed(0)
    q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    o, lse = torch.empty_like(q), torch.empty(B, H, N, device="cuda")
    two = ForwardLaunch(q, k, causal, D ** -0.5)
    one = one_q_buffer(ForwardLaunch(q, k, causal, D ** -0.5))
    two(q, k, v, o, lse)
    ref = o.clone()
    one(q, k, v, o, lse)
    assert torch.equal(o, ref), "one and two Q buffers differ"
    work = 4 * B * H * N * N * D / (2 if causal else 1)
    dense[(B, H, N, D, causal)] = rounds(f"B{B} H{H}/{Hkv} N{N} D{D}{' causal' if causal else ''}", work,
                                         {"two": lambda: two(q, k, v, o, lse), "one": lambda: one(q, k, v, o, lse)})

lengths = lognormal_lengths(16, 1024)
T = sum(lengths)
cu = cu_seqlens(lengths, "cuda")
q = torch.randn(T, 32, 128, device="cuda", dtype=torch.bfloat16)
k, v = (torch.randn(T, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
og, lg = attention_varlen_fwd(q, k, v, cu, cu, True, gluon=True)
ot, lt = attention_varlen_fwd(q, k, v, cu, cu, True, gluon=False)
print(f"packed: total {T}, max |o gluon - o triton| {(og.float() - ot.float()).abs().max().item():.2e}, "
      f"max |lse diff| {(lg - lt).abs().max().item():.2e}")
work = 4 * 32 * 128 * sum(n * (n + 1) // 2 for n in lengths)
packed = rounds(f"packed 16 seqs mean 1024 (total {T}) H32/8 D128 causal", work,
                {"gluon": lambda: attention_varlen_fwd(q, k, v, cu, cu, True, gluon=True),
                 "triton": lambda: attention_varlen_fwd(q, k, v, cu, cu, True, gluon=False)})
base = dense[(4, 32, 4096, 128, True)]["two"]
print(f"packed against dense causal N=4096 (two Q buffers, {base:.1f}): gluon {packed['gluon'] / base:.3f}x, "
      f"triton {packed['triton'] / base:.3f}x (issue 15's bar: 0.9x)")
