"""Where the RMSNorm forward+backward's GPU time goes at 8192x4096, bf16 against fp32 (the bench
read bf16 at 0.62 ms and fp32 at 0.30 ms, against 0.21 ms for F.rms_norm): each CUDA kernel's time
from torch.profiler, and the whole call timed back to back without L2 clears.

    PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/results/2026-12-02-h200-s14-norms_kernels.py
"""
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import tritonkit

for dtype in (torch.bfloat16, torch.float32):
    x = torch.randn(8192, 4096, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(4096, device="cuda", dtype=dtype, requires_grad=True)
    dy = torch.randn_like(x)
    for name, fn in (("tritonkit", lambda: tritonkit.rms_norm(x, w)),
                     ("F.rms_norm", lambda: F.rms_norm(x, (4096,), w, 1e-6))):
        def step():
            return torch.autograd.grad(fn(), (x, w), dy)
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            step()
        end.record()
        torch.cuda.synchronize()
        print(f"{name} {dtype}: {start.elapsed_time(end) / 20 * 1e3:.1f} us a fwd+bwd, back to back", flush=True)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step()
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8, max_name_column_width=60), flush=True)
