"""The causal tile order in spans of heads (`gluon.host.longest_first_span`): each pass launched
alone head after head (span 0) and longest first within spans of 8, 16, 32 heads and over all of
them, alternating in rounds in one process; outputs compared bitwise between orders.

    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-03-h200-s17-head_span.py
"""
import statistics

import torch

from tritonkit.bench.timing import time_ms
from tritonkit.gluon import attention_bwd as gbwd
from tritonkit.gluon import attention_fwd as gfwd

ROUNDS = 5
SPANS = ("0", "8", "16", "32", "all")


def plans(q, k, span):
    def chosen(causal, window_left, varlen, heads, blocks, sms):
        return {"0": 0, "all": heads}.get(span) or min(int(span), heads)
    gfwd.longest_first_span = gbwd.longest_first_span = chosen
    return gfwd.ForwardLaunch(q, k, True, q.shape[-1] ** -0.5), gbwd.BackwardLaunches(q, k, True, q.shape[-1] ** -0.5)


def case(B, H, Hkv, N, D, passes=("fwd", "dq", "dkdv", "bwd")):
    torch.manual_seed(0)
    q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    o, lse = torch.empty_like(q), torch.empty(B, H, N, device="cuda")
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty_like(lse)
    fns, outs = {}, {}
    for span in SPANS:
        fwd, bwd = plans(q, k, span)
        fwd(q, k, v, o, lse)
        if bwd.dq is not None:
            bwd(do, q, k, v, o, lse, None, dq, dk, dv)
            dq_args, dkdv_args = bwd.heads(do, q, k, v, o, lse, delta, None, dq, dk, dv)
            fns[("dq", span)] = (lambda b=bwd, a=dq_args: b.dq[False].template(*a))
            fns[("bwd", span)] = (lambda b=bwd: b(do, q, k, v, o, lse, None, dq, dk, dv))
        else:
            delta.copy_((o.float() * do.float()).sum(-1))
            dkdv_args = bwd.dkdv_head(do, q, k, v, lse, delta, dk, dv)
            bwd.run_dkdv(do, q, k, v, lse, delta, dk, dv)
        outs[span] = [t.clone() for t in (o, lse, dq, dk, dv)]
        fns[("fwd", span)] = (lambda f=fwd: f(q, k, v, o, lse))
        fns[("dkdv", span)] = (lambda b=bwd, a=dkdv_args: b.dkdv.template(*a))
    same = all(torch.equal(a, b) for span in SPANS[1:] for a, b in zip(outs["0"], outs[span]))
    label = f"B{B} H{H}/{Hkv} N{N} D{D} causal"
    flops = {"fwd": 2, "dq": 3, "dkdv": 4, "bwd": 7}
    for p in passes:
        if (p, "0") not in fns:
            continue
        work = 2 * B * H * N * N * D / 2 * flops[p]
        rates = {span: [] for span in SPANS}
        for _ in range(ROUNDS):
            for span in SPANS:
                rates[span].append(work / time_ms(fns[(p, span)]) / 1e9)
        med = {span: statistics.median(r) for span, r in rates.items()}
        print(f"{label} {p:5s}: " + "  ".join(f"{span} {med[span]:6.1f}" for span in SPANS)
              + " TFLOP/s; against span 0: " + " ".join(f"{span} {med[span] / med['0']:.3f}x" for span in SPANS[1:])
              + f"; bitwise equal: {same}", flush=True)


case(4, 32, 32, 4096, 128)
case(4, 32, 8, 4096, 128)
case(4, 32, 32, 16384, 128, passes=("fwd", "bwd"))
case(8, 16, 16, 1024, 128)
case(4, 16, 8, 2048, 128, passes=("fwd", "bwd"))
case(1, 16, 8, 8192, 128, passes=("fwd", "bwd"))
case(4, 32, 32, 4096, 64, passes=("bwd",))
case(2, 32, 32, 16384, 64, passes=("fwd",))
case(4, 16, 16, 4096, 256, passes=("fwd", "dkdv"))
