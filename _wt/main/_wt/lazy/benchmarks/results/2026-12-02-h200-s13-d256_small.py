"""Where the D=256 backward's Gluon dK/dV pass (with the Triton dQ pass) starts to beat the
Triton backward: smaller calls than the bench's (B=4 H=16 N=4096 causal, 2^37 multiply-adds of
Q K^T, is the smallest measured faster). gluon=True against gluon=False through the launcher,
cuDNN's backward through autograd beside; TFLOP/s counted as the bench counts.

    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-02-h200-s13-d256_small.py
"""
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tritonkit.bench.timing import time_ms
from tritonkit.ops.attention import attention_bwd, attention_fwd

D = 256
for B, H, Hkv, N, causal in [(2, 8, 4, 2048, True), (8, 16, 16, 1024, True), (8, 16, 16, 1024, False),
                             (4, 16, 16, 2048, True), (4, 16, 16, 2048, False), (1, 8, 4, 8192, True)]:
    torch.manual_seed(0)
    q, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    o, lse = attention_fwd(q, k, v, causal)
    work = 2.5 * 4 * B * H * N * N * D / (2 if causal else 1)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=H != Hkv)
    fns = {"triton": lambda: attention_bwd(do, q, k, v, o, lse, causal, gluon=False),
           "gluon dK/dV": lambda: attention_bwd(do, q, k, v, o, lse, causal, gluon=True),
           "cudnn": lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)}
    rates = {name: work / min(time_ms(fn) for _ in range(3)) / 1e9 for name, fn in fns.items()}
    cells = " | ".join(f"{name} {rate:6.1f}" for name, rate in rates.items())
    print(f"B{B} H{H}/{Hkv} N{N} D{D}{' causal' if causal else ''} (2^{math.log2(work / 10):.1f} multiply-adds) | "
          f"{cells} | gluon/triton {rates['gluon dK/dV'] / rates['triton']:.3f}", flush=True)
    del q, k, v, do, o, lse, out, leaves
