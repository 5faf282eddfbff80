"""The Gluon forward with one exponential in n on the FMA units (EXP2_FMA = 0, 2, 4), the
kernel launched alone, at the shapes where the multi-function units bound it: softcap at D=128
and D=64, and plain D=64 (three consumers). Each variant's output is checked against the
variant with none on the FMA units (max abs difference of o, of lse) before it is timed.
Runs on main with `2026-12-02-h200-s12-exp2_fma.patch` applied (the feature was measured slower
everywhere and not kept; BENCHMARKS.md, twelfth set).

    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-02-h200-s12-exp2_fma_ab.py
"""
import torch

from tritonkit.bench.timing import time_ms
from tritonkit.gluon import attention_fwd as gluon_fwd

CASES = [  # B, H, Hkv, N, D, causal, softcap
    (4, 32, 8, 4096, 128, True, 50.0), (4, 32, 8, 4096, 128, False, 50.0),
    (4, 32, 8, 4096, 64, True, 50.0), (4, 32, 32, 4096, 64, False, 0.0), (4, 32, 32, 16384, 64, True, 0.0),
    (4, 32, 8, 4096, 128, True, 0.0),
]
for B, H, Hkv, N, D, causal, cap in CASES:
    torch.manual_seed(0)
    q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    work = 4 * B * H * N * N * D / (2 if causal else 1)
    cells, base = [], None
    for share in (0, 2, 4):
        o = torch.empty_like(q)
        lse = torch.empty(B, H, N, device="cuda", dtype=torch.float32)
        grid, args, kwargs = gluon_fwd.launch_args(q, k, v, o, lse, causal, D ** -0.5, cap)
        kwargs["EXP2_FMA"] = share
        run = lambda: gluon_fwd._attn_fwd_kernel[grid](*args, **kwargs)
        run()
        torch.cuda.synchronize()
        if base is None:
            base = (o.clone(), lse.clone())
            diff = ""
        else:
            diff = (f" (o {(o.float() - base[0].float()).abs().max().item():.1e},"
                    f" lse {(lse - base[1]).abs().max().item():.1e})")
        rate = work / min(time_ms(run) for _ in range(3)) / 1e9
        cells.append(f"{share}: {rate:6.1f}{diff}")
    print(f"B{B} H{H}/{Hkv} N{N} D{D}{' causal' if causal else ''} softcap {cap:g} | " + " | ".join(cells),
          flush=True)
