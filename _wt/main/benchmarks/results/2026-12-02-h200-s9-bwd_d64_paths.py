"""The whole attention backward at D=64 through the Gluon kernels (gluon=True) and the Triton
kernels (gluon=False), each through `attention_bwd` as the dispatch would launch it (dQ on the
side stream where the plans choose it), alternately in one process, beside cuDNN's backward
through autograd; TFLOP/s (10 B H N^2 D, halved causal; do_bench median). Run after the dK/dV
kernel's lse and delta moved into its ring, to decide the dispatch's head dims.

    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-02-h200-s9-bwd_d64_paths.py
"""
import statistics

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from tritonkit.ops.attention import attention_bwd, attention_fwd

CASES = [(4, 32, 4096, 64, False), (4, 32, 4096, 64, True), (4, 32, 16384, 64, True),
         (8, 16, 1024, 64, False), (8, 16, 1024, 64, True), (4, 32, 4096, 128, True)]

print(f"torch {torch.__version__} triton {triton.__version__} {torch.cuda.get_device_name()}")
print("B H N D causal | gluon | triton | gluon/triton | cuDNN | gluon/cuDNN | max|d(gluon) - d(triton)|")
for B, H, N, D, causal in CASES:
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    o, lse = attention_fwd(q, k, v, causal)
    flops = 10 * B * H * N * N * D * (0.5 if causal else 1.0)
    fns = {"gluon": lambda: attention_bwd(do, q, k, v, o, lse, causal, gluon=True),
           "triton": lambda: attention_bwd(do, q, k, v, o, lse, causal, gluon=False)}
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    fns["cudnn"] = lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)
    diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(fns["gluon"](), fns["triton"]()))
    t = {n: [] for n in fns}
    for _ in range(3):
        for n, f in fns.items():
            t[n].append(triton.testing.do_bench(f, warmup=5, rep=40, return_mode="median"))
    tf = {n: flops / statistics.median(v) / 1e9 for n, v in t.items()}
    print(f"{B} {H} {N} {D} {causal} | {tf['gluon']:.1f} | {tf['triton']:.1f} | {tf['gluon'] / tf['triton']:.3f} | "
          f"{tf['cudnn']:.1f} | {tf['gluon'] / tf['cudnn']:.3f} | {diff:.1e}", flush=True)
