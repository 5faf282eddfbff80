"""The causal tile order of the Gluon kernels (`gluon.host.head_run`): each pass launched alone
with RUN = 0 (head after head, the order before) and RUN = 1, 2, 4 (every head's longest tiles
first), alternating in rounds in one process; outputs compared bitwise between orders.

    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-03-h200-s17-head_run.py

It ran (call 1) on the change's first form, where the kernels took RUN, how many of a head's
tiles go out together (0: all of them), set through `host.CAUSAL_HEAD_RUN`. What was kept is
longest first within spans of heads (the kernels' LONGEST_FIRST and HEAD_SPAN, chosen by
`host.longest_first_span`; `-s17-head_span.py` measured the spans).
"""
import statistics

import torch

from tritonkit.bench.timing import time_ms
from tritonkit.gluon import attention_bwd as gbwd
from tritonkit.gluon import attention_fwd as gfwd
from tritonkit.gluon import host

ROUNDS = 5
RUNS = (0, 1, 2, 4)


def plans(q, k, run):
    host.CAUSAL_HEAD_RUN = run
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
    for run in RUNS:
        fwd, bwd = plans(q, k, run)
        fwd(q, k, v, o, lse)
        if bwd.dq is not None:
            bwd(do, q, k, v, o, lse, None, dq, dk, dv)
            dq_args, dkdv_args = bwd.heads(do, q, k, v, o, lse, delta, None, dq, dk, dv)
            fns[("dq", run)] = (lambda b=bwd, a=dq_args: b.dq[False].template(*a))
            fns[("bwd", run)] = (lambda b=bwd: b(do, q, k, v, o, lse, None, dq, dk, dv))
        else:
            delta.copy_((o.float() * do.float()).sum(-1))
            dkdv_args = bwd.dkdv_head(do, q, k, v, lse, delta, dk, dv)
            bwd.run_dkdv(do, q, k, v, lse, delta, dk, dv)
        outs[run] = [t.clone() for t in (o, lse, dq, dk, dv)]
        fns[("fwd", run)] = (lambda f=fwd: f(q, k, v, o, lse))
        fns[("dkdv", run)] = (lambda b=bwd, a=dkdv_args: b.dkdv.template(*a))
    same = all(torch.equal(a, b) for run in RUNS[1:] for a, b in zip(outs[0], outs[run]))
    label = f"B{B} H{H}/{Hkv} N{N} D{D} causal"
    flops = {"fwd": 2, "dq": 3, "dkdv": 4, "bwd": 7 if D != 256 else 4}
    for p in passes:
        if (p, 0) not in fns:
            continue
        work = 2 * B * H * N * N * D / 2 * flops[p]
        rates = {run: [] for run in RUNS}
        for _ in range(ROUNDS):
            for run in RUNS:
                rates[run].append(work / time_ms(fns[(p, run)]) / 1e9)
        med = {run: statistics.median(r) for run, r in rates.items()}
        print(f"{label} {p:5s}: " + "  ".join(f"RUN={run} {med[run]:6.1f}" for run in RUNS)
              + f" TFLOP/s (products counted: {flops[p]}); RUN=1/RUN=0 {med[1] / med[0]:.3f}x, "
              f"RUN=2/0 {med[2] / med[0]:.3f}x; outputs bitwise equal across orders: {same}", flush=True)


case(4, 16, 8, 2048, 128)       # config A's layer
case(1, 16, 8, 8192, 128)       # config B's layer
case(4, 32, 32, 4096, 128)
case(4, 32, 8, 4096, 128)
case(8, 16, 16, 1024, 128)
case(4, 32, 32, 16384, 128)
case(4, 32, 32, 4096, 64, passes=("dq", "dkdv", "bwd"))
case(8, 16, 16, 1024, 64, passes=("dq", "dkdv", "bwd"))
case(2, 32, 32, 16384, 64, passes=("fwd",))     # three consumers from 8192 rows
case(4, 16, 16, 4096, 256, passes=("fwd", "dkdv"))
