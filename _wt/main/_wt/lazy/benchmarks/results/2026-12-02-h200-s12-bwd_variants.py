"""The attention backward of whatever tritonkit is on PYTHONPATH (main, or a branch exported
beside it), timed at the bench's shapes: the launcher alone (`attention_bwd`, the dispatch's
path) and through autograd, with cuDNN's backward through autograd in the same process.
Prints TFLOP/s (backward work: 2.5x the forward's 4 B H Nq Nk D, halved when causal) and host
time a call; also whether the gradients equal those of the Triton kernels within bf16 noise.

    PYTHONPATH=<variant>/src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-02-h200-s12-bwd_variants.py NAME
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tritonkit
from tritonkit.bench.timing import host_ms, time_ms
from tritonkit.ops.attention import attention_bwd, attention_fwd

NAME = sys.argv[1] if len(sys.argv) > 1 else "?"
SHAPES = [(4, 32, 4096, 128, False), (4, 32, 4096, 128, True), (4, 32, 16384, 128, False),
          (4, 32, 16384, 128, True), (4, 32, 4096, 64, False), (4, 32, 4096, 64, True),
          (8, 16, 1024, 64, False), (8, 16, 1024, 64, True), (4, 32, 1024, 128, True)]
for B, H, N, D, causal in SHAPES:
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    o, lse = attention_fwd(q, k, v, causal)
    work = 2.5 * 4 * B * H * N * N * D / (2 if causal else 1)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = tritonkit.attention(*leaves, causal=causal)
    sd_leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        sd_out = F.scaled_dot_product_attention(*sd_leaves, is_causal=causal)
    fns = {
        "launcher": lambda: attention_bwd(do, q, k, v, o, lse, causal),
        "autograd": lambda: torch.autograd.grad(out, leaves, do, retain_graph=True),
        "cudnn autograd": lambda: torch.autograd.grad(sd_out, sd_leaves, do, retain_graph=True),
    }
    got = fns["launcher"]()
    ref = attention_bwd(do, q, k, v, o, lse, causal, gluon=False)
    err = max(((a.float() - b.float()).abs().max() / b.float().abs().max()).item() for a, b in zip(got, ref))
    cells = []
    for name, fn in fns.items():
        fn()
        torch.cuda.synchronize()
        ms = min(time_ms(fn) for _ in range(2))
        host = min(host_ms(fn) for _ in range(2))
        cells.append(f"{name} {work / ms / 1e9:6.1f} ({ms * 1e3:7.0f} us, host {host * 1e3:4.0f})")
    print(f"{NAME:<10} B{B} H{H} N{N} D{D}{' causal' if causal else '       '} | " + " | ".join(cells)
          + f" | vs Triton kernels max rel {err:.1e}", flush=True)
    del q, k, v, do, o, lse, out, sd_out, leaves, sd_leaves, got, ref
