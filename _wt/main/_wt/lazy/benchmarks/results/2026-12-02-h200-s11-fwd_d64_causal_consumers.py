"""The causal Gluon forward at head dim 64 with three consumer warpgroups (192-row tiles)
against two (128-row tiles), the Triton forward (the dispatch's choice for causal D=64) and
SDPA's cuDNN, over N, to place the sequence length from which three consumers win (the tenth
set measured 0.84x of two at N=4096 and 1.09x at 16384). One process, alternately; each output
checked against the float64 reference on a ragged slice.

    PYTHONPATH=src python3 benchmarks/results/2026-12-02-h200-s11-fwd_d64_causal_consumers.py
"""
import statistics

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from tritonkit.gluon import attention_fwd as gf
from tritonkit.ops.attention import attention_fwd, attention_reference

CASES = [(4, 32, 8, 4096), (4, 32, 8, 8192), (2, 32, 8, 12288), (4, 32, 8, 16384), (1, 32, 8, 32768)]
CONFIG = gf.tile_config


def gluon(consumers, q, k, v):
    o, lse = torch.empty_like(q), torch.empty(q.shape[:3], device=q.device)
    gf.tile_config = lambda head_dim, causal: (*CONFIG(head_dim, False)[:2], consumers)
    try:
        grid, args, kwargs = gf.launch_args(q, k, v, o, lse, True, q.shape[-1] ** -0.5, 0.0)
    finally:
        gf.tile_config = CONFIG
    num_warps = kwargs.pop("num_warps")

    def run():
        gf._attn_fwd_kernel[grid](*args, **kwargs, num_warps=num_warps)
    run()
    return run, o


def main():
    print(f"torch {torch.__version__} triton {triton.__version__} {torch.cuda.get_device_name()}")
    print("B H/Hkv N (causal, D=64) | TFLOP/s gluon3 gluon2 triton cuDNN | gluon3/gluon2 gluon3/cuDNN "
          "best-of-tritonkit/cuDNN | max err vs f64: gluon3 gluon2")
    for B, H, Hkv, N in CASES:
        torch.manual_seed(0)
        q = torch.randn(B, H, N, 64, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, Hkv, N, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        flops = 2 * B * H * N * N * 64

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        fns = {"g3": gluon(3, q, k, v)[0], "g2": gluon(2, q, k, v)[0],
               "triton": lambda: attention_fwd(q, k, v, True, gluon=False), "cudnn": cudnn}
        t = {n: [] for n in fns}
        for _ in range(3):
            for n, f in fns.items():
                t[n].append(triton.testing.do_bench(f, warmup=10, rep=60, return_mode="median"))
        tf = {n: flops / statistics.median(x) / 1e9 for n, x in t.items()}
        qs, ks, vs = (x[:1, :, :1000].contiguous() for x in (q, k, v))
        ref = attention_reference(qs, ks, vs, True, 0.125)
        err = {c: (gluon(c, qs, ks, vs)[1].double() - ref).abs().max().item() for c in (3, 2)}
        best = max(tf["g3"], tf["g2"], tf["triton"])
        print(f"{B} {H}/{Hkv} {N} | {tf['g3']:.0f} {tf['g2']:.0f} {tf['triton']:.0f} {tf['cudnn']:.0f} | "
              f"{tf['g3'] / tf['g2']:.3f} {tf['g3'] / tf['cudnn']:.3f} {best / tf['cudnn']:.3f} | "
              f"{err[3]:.1e} {err[2]:.1e}", flush=True)


if __name__ == "__main__":
    main()
