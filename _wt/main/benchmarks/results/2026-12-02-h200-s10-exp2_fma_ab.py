"""A/B of the Gluon forward as patched by `2026-12-02-h200-s10-exp2_fma.patch` (not kept): half
of the softmax's exponentials on the FMA units (EXP2_ON_FMA, `tritonkit.gluon.common._exp2_half_on_fma`) against all of them on the MUFU, one
kernel, the flag flipped in the launch's keyword arguments; SDPA's cuDNN and FA2 in the same
process on the cases without a softcap. Accuracy: each output against the float64 reference
(max abs error), and torch's bf16 SDPA's own error beside it.

    PYTHONPATH=src python3 benchmarks/results/2026-12-02-h200-s10-exp2_fma_ab.py
"""
import statistics

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from tritonkit._launch import Launch
from tritonkit.gluon import attention_fwd as gf
from tritonkit.ops.attention import attention_reference

CASES = [  # B, H, Hkv, N, D, causal, softcap
    (4, 32, 8, 4096, 64, True, 0.0), (4, 32, 8, 4096, 64, False, 0.0),
    (4, 32, 8, 16384, 64, True, 0.0), (4, 32, 8, 16384, 64, False, 0.0),
    (8, 16, 16, 1024, 64, True, 0.0), (8, 16, 16, 1024, 64, False, 0.0),
    (4, 32, 8, 4096, 128, True, 50.0), (4, 32, 8, 4096, 128, False, 50.0),
    (4, 32, 8, 16384, 128, True, 50.0),
    (4, 32, 8, 4096, 128, True, 0.0), (4, 32, 8, 4096, 128, False, 0.0),
    (4, 16, 16, 4096, 256, True, 50.0), (4, 16, 16, 4096, 256, True, 0.0),
]


def gluon(q, k, v, causal, softcap, on_fma):
    o, lse = torch.empty_like(q), torch.empty(q.shape[:3], device=q.device)
    grid, args, kwargs = gf.launch_args(q, k, v, o, lse, causal, q.shape[-1] ** -0.5, softcap)
    kwargs["EXP2_ON_FMA"] = on_fma
    num_warps = kwargs.pop("num_warps")
    launch = Launch("attention_fwd_gluon", gf._attn_fwd_kernel, grid, args, kwargs, num_warps=num_warps,
                    num_stages=None)
    launch()
    return launch, o


def sdpa(backend):
    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])
    return run


def small_error(B, H, Hkv, D, causal, softcap):
    # float64 reference on a 1024-row slice of the same kind of case
    torch.manual_seed(1)
    q = torch.randn(1, H, 1024, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, Hkv, 1024, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    ref = attention_reference(q, k, v, causal, D ** -0.5, softcap=softcap or None)
    errs = {}
    for flag in (False, True):
        _, o = gluon(q, k, v, causal, softcap, flag)
        errs[flag] = (o.double() - ref).abs().max().item()
    return errs


def main():
    print(f"torch {torch.__version__} triton {triton.__version__} {torch.cuda.get_device_name()}")
    print("B H/Hkv N D causal softcap | TFLOP/s MUFU, half-FMA, ratio | cuDNN FA2 | half-FMA/cuDNN | "
          "max err vs f64 (1024 rows): MUFU half-FMA | max|o_fma - o_mufu|")
    for B, H, Hkv, N, D, causal, softcap in CASES:
        torch.manual_seed(0)
        q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        flops = 4 * B * H * N * N * D * (0.5 if causal else 1.0)
        fns = {}
        fns["mufu"], o0 = gluon(q, k, v, causal, softcap, False)
        fns["fma"], o1 = gluon(q, k, v, causal, softcap, True)
        if not softcap:
            for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
                f = sdpa(backend)
                fns[name] = (lambda f=f: f(q, k, v, causal))
        torch.cuda.synchronize()
        diff = (o1.float() - o0.float()).abs().max().item()
        t = {n: [] for n in fns}
        for _ in range(3):
            for name, fn in fns.items():
                t[name].append(triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median"))
        tf = {n: flops / statistics.median(v) / 1e9 for n, v in t.items()}
        err = small_error(B, H, Hkv, D, causal, softcap)
        peers = f"{tf['cudnn']:.0f} {tf['fa2']:.0f} | {tf['fma'] / tf['cudnn']:.3f}" if "cudnn" in tf else "- - | -"
        print(f"{B} {H}/{Hkv} {N} {D} {causal} {softcap:g} | {tf['mufu']:.0f} {tf['fma']:.0f} "
              f"{tf['fma'] / tf['mufu']:.3f} | {peers} | {err[False]:.2e} {err[True]:.2e} | {diff:.1e}", flush=True)


if __name__ == "__main__":
    main()
