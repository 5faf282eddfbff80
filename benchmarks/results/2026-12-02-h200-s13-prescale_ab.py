"""The softcap forward with Q scaled by scale / c once a tile (branch gluon-fwd-softcap-prescale)
against the plain forward in the same process, and its error against the float64 reference
beside the Triton path's (issue 15's softcap bar: 0.9x of the plain forward).

    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-02-h200-s13-prescale_ab.py
"""
import torch

from tritonkit.bench.timing import time_ms
from tritonkit.ops.attention import attention_fwd


def reference(q, k, v, causal, cap):
    qd, kd, vd = (t.double() for t in (q, k, v))
    kd, vd = (t.repeat_interleave(q.shape[1] // k.shape[1], 1) for t in (kd, vd))
    s = qd @ kd.transpose(-1, -2) * q.shape[-1] ** -0.5
    s = cap * torch.tanh(s / cap)
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ vd


torch.manual_seed(0)
small = [torch.randn(1, 4, 512, 128, device="cuda", dtype=torch.bfloat16) * 3 for _ in range(3)]
for causal in (True, False):
    ref = reference(*small, causal, 50.0)
    errs = [(attention_fwd(*small, causal, softcap=50.0, gluon=g)[0].double() - ref).abs().max().item()
            for g in (True, False)]
    print(f"softcap 50 {'causal' if causal else 'full'}: max error gluon {errs[0]:.2e}  triton {errs[1]:.2e}")
for B, H, Hkv, N, D, causal in [(4, 32, 8, 4096, 128, True), (4, 32, 8, 4096, 128, False)]:
    q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    work = 4 * B * H * N * N * D / (2 if causal else 1)
    rate = {cap: work / min(time_ms(lambda: attention_fwd(q, k, v, causal, softcap=cap)) for _ in range(3)) / 1e9
            for cap in (0.0, 50.0)}
    print(f"B{B} H{H}/{Hkv} N{N} D{D}{' causal' if causal else ''}: fwd plain {rate[0.0]:6.1f} softcap {rate[50.0]:6.1f}"
          f" ({rate[50.0] / rate[0.0]:.3f}x)", flush=True)
