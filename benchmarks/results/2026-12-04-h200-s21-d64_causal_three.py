"""The causal forward at head dim 64 on the Gluon kernel's three-warpgroup tile below the rows
it is chosen from (gluon.attention_fwd.THREE_CONSUMERS_CAUSAL_ROWS, 8192; the Triton kernels
run below it), with the tile order of the seventeenth set, beside SDPA's cuDNN and FA2, in one
process. argv[1]: the threshold to run with (8192 = main's rule; 1 = three consumers at every
length). Every output checked against SDPA's math backend in float32 first.
    PYTHONPATH=src python3 benchmarks/results/2026-12-04-h200-s21-d64_causal_three.py 1"""
import statistics
import sys

import torch
import torch.nn.functional as F

from tritonkit.bench.timing import time_ms
from tritonkit.gluon import attention_fwd
from tritonkit.registry.attention import _providers

attention_fwd.THREE_CONSUMERS_CAUSAL_ROWS = int(sys.argv[1])
dev = torch.device("cuda")
for B, H, N in ((8, 16, 1024), (4, 32, 2048), (4, 32, 4096), (2, 32, 8192)):
    q, k, v = (torch.randn(B, H, N, 64, dtype=torch.bfloat16, device=dev) for _ in range(3))
    providers = {n: f for n, f in _providers(dev, True, N, N, 1 << 62, with_flex=False).items()
                 if n in ("tritonkit", "SDPA cuDNN", "SDPA FA2")}
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    err = (providers["tritonkit"](q, k, v, True).float() - ref).abs().max().item()
    assert err < 2e-2, err
    flops = 2 * B * H * N * N * 64
    rates = {n: [] for n in providers}
    for r in range(3):
        for n in (list(providers)[::-1] if r % 2 else list(providers)):
            f = providers[n]
            rates[n].append(flops / time_ms(lambda: f(q, k, v, True)) / 1e9)
    med = {n: statistics.median(x) for n, x in rates.items()}
    print(f"threshold {sys.argv[1]:>5s} B{B} H{H} N{N} D64 causal fwd: "
          + "  ".join(f"{n} {med[n]:.1f}" for n in med) + f"  (max err {err:.1e})", flush=True)
