"""(Written in the twelfth set for the branch `gluon-bwd-d256`, to run on its first GPU call.)
The backward at head dim 256 (issue 16's bar: 0.9x cuDNN, B=4 H=16 N=4096 and 16384, full and
causal): the Triton backward (the dispatch's default), the Gluon dK/dV pass with the Triton dQ
pass (gluon=True), and cuDNN's backward through autograd, in one process; then each dK/dV
kernel alone. TFLOP/s counted as the bench counts (2.5 x 4 B H N^2 D, halved causal).

    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-02-h200-s12-d256_bwd.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tritonkit.bench.timing import time_ms
from tritonkit.gluon import attention_bwd as gluon_bwd
from tritonkit.ops.attention import attention_bwd, attention_fwd

for N, causal in [(4096, False), (4096, True), (16384, False), (16384, True)]:
    B, H, D = 4, 16, 256
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    o, lse = attention_fwd(q, k, v, causal)
    work = 2.5 * 4 * B * H * N * N * D / (2 if causal else 1)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    ref = attention_bwd(do, q, k, v, o, lse, causal, gluon=False)
    got = attention_bwd(do, q, k, v, o, lse, causal, gluon=True)
    err = max(((a.float() - b.float()).abs().max() / b.float().abs().max()).item() for a, b in zip(got, ref))
    fns = {"triton": lambda: attention_bwd(do, q, k, v, o, lse, causal, gluon=False),
           "gluon dK/dV + triton dQ": lambda: attention_bwd(do, q, k, v, o, lse, causal, gluon=True),
           "cudnn": lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)}
    cells = [f"{name} {work / min(time_ms(fn) for _ in range(2)) / 1e9:6.1f}" for name, fn in fns.items()]
    # the dK/dV passes alone (dK/dV's share of the work: 4 of the 7 products)
    delta = (do.float() * o.float()).sum(-1)
    plan = gluon_bwd.BackwardLaunches(q, k, causal, D ** -0.5)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    gluon_dkdv = lambda: plan.dkdv.template(*plan.dkdv_head(do, q, k, v, lse, delta, dk, dv))
    dkdv_work = work / 2.5 * 2
    cells.append(f"gluon dK/dV alone {dkdv_work / min(time_ms(gluon_dkdv) for _ in range(2)) / 1e9:6.1f}")
    print(f"B{B} H{H} N{N} D{D}{' causal' if causal else ''} | " + " | ".join(cells) + f" | max rel vs triton {err:.1e}",
          flush=True)
    del q, k, v, do, o, lse, out, leaves, ref, got
