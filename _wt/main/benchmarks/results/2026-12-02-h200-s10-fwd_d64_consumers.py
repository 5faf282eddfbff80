"""The Gluon forward at head dim 64 with three consumer warpgroups (192-row tiles, the
`tile_config` now) against two (128-row tiles, `tile_config` patched back for the call), the
Triton forward (the dispatch's choice at D=64 before) and SDPA's cuDNN and FA2, one process;
each Gluon output checked against the float64 reference (max abs error) beside the Triton one's.

    PYTHONPATH=src python3 benchmarks/results/2026-12-02-h200-s10-fwd_d64_consumers.py
"""
import statistics

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from tritonkit.gluon import attention_fwd as gf
from tritonkit.ops.attention import attention_fwd, attention_reference

CASES = [  # B, H, Hkv, N, causal, softcap
    (4, 32, 8, 4096, True, 0.0), (4, 32, 8, 4096, False, 0.0),
    (4, 32, 8, 16384, True, 0.0), (4, 32, 8, 16384, False, 0.0),
    (8, 16, 16, 1024, True, 0.0), (8, 16, 16, 1024, False, 0.0),
    (4, 32, 8, 4096, True, 50.0),
]
THREE = gf.tile_config


def two(head_dim):
    block_n, stages, _ = THREE(head_dim)
    return block_n, stages, 2


def gluon(consumers, q, k, v, causal, softcap):
    o, lse = torch.empty_like(q), torch.empty(q.shape[:3], device=q.device)
    gf.tile_config = THREE if consumers == 3 else two
    try:
        grid, args, kwargs = gf.launch_args(q, k, v, o, lse, causal, q.shape[-1] ** -0.5, softcap)
    finally:
        gf.tile_config = THREE
    num_warps = kwargs.pop("num_warps")
    kernel = gf._attn_fwd_kernel

    def run():
        kernel[grid](*args, **kwargs, num_warps=num_warps)
    run()
    return run, o


def main():
    print(f"torch {torch.__version__} triton {triton.__version__} {torch.cuda.get_device_name()}")
    print("B H/Hkv N causal softcap | TFLOP/s gluon3 gluon2 triton cuDNN FA2 | gluon3/cuDNN gluon3/gluon2 | "
          "max err vs f64 (1024 rows): gluon3 gluon2 triton")
    for B, H, Hkv, N, causal, softcap in CASES:
        torch.manual_seed(0)
        D = 64
        q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        flops = 4 * B * H * N * N * D * (0.5 if causal else 1.0)
        fns = {"gluon3": gluon(3, q, k, v, causal, softcap)[0], "gluon2": gluon(2, q, k, v, causal, softcap)[0],
               "triton": lambda: attention_fwd(q, k, v, causal, None, softcap=softcap, gluon=False)}
        if not softcap:
            for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
                def peer(backend=backend):
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=H != Hkv)
                fns[name] = peer
        t = {n: [] for n in fns}
        for _ in range(3):
            for name, fn in fns.items():
                t[name].append(triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median"))
        tf = {n: flops / statistics.median(v) / 1e9 for n, v in t.items()}
        # accuracy on a ragged slice: 1 x H x 1000 rows
        qs, ks, vs = q[:1, :, :1000], k[:1, :, :1000], v[:1, :, :1000]
        ref = attention_reference(qs, ks, vs, causal, D ** -0.5, softcap=softcap or None)
        err = {n: (gluon(c, qs.contiguous(), ks.contiguous(), vs.contiguous(), causal, softcap)[1].double() - ref)
               .abs().max().item() for n, c in (("gluon3", 3), ("gluon2", 2))}
        err["triton"] = (attention_fwd(qs, ks, vs, causal, None, softcap=softcap, gluon=False)[0].double()
                         - ref).abs().max().item()
        peers = f"{tf['cudnn']:.0f} {tf['fa2']:.0f}" if "cudnn" in tf else "- -"
        vs_cudnn = f"{tf['gluon3'] / tf['cudnn']:.3f}" if "cudnn" in tf else "-"
        print(f"{B} {H}/{Hkv} {N} {causal} {softcap:g} | {tf['gluon3']:.0f} {tf['gluon2']:.0f} {tf['triton']:.0f} "
              f"{peers} | {vs_cudnn} {tf['gluon3'] / tf['gluon2']:.3f} | "
              f"{err['gluon3']:.2e} {err['gluon2']:.2e} {err['triton']:.2e}", flush=True)


if __name__ == "__main__":
    main()
