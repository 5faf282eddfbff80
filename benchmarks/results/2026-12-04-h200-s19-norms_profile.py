"""The norms' forward+backward as the bench times it (8192 x 4096, autograd.grad of y for x and
weight with a random upstream gradient), under torch.profiler: every kernel's GPU time and the
host's calls, bf16 and fp32, tritonkit beside F.rms_norm / F.layer_norm. Also do_bench of each
step and of its kernels alone (the forward and backward launchers called directly).
    PYTHONPATH=src python3 benchmarks/results/2026-12-04-h200-s19-norms_profile.py"""
import torch
import torch.nn.functional as F
import triton.testing
import tritonkit
from torch.profiler import ProfilerActivity, profile

dev = torch.device("cuda")
for dtype in (torch.bfloat16, torch.float32):
    for name, ours, theirs in (("rms_norm", lambda x, w: tritonkit.rms_norm(x, w),
                                lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6)),
                               ("layer_norm", lambda x, w: tritonkit.layer_norm(x, w),
                                lambda x, w: F.layer_norm(x, (x.shape[-1],), w, None, 1e-5))):
        x = torch.randn(8192, 4096, dtype=dtype, device=dev, requires_grad=True)
        w = torch.randn(4096, dtype=dtype, device=dev, requires_grad=True)
        dy = torch.randn_like(x)
        for who, f in (("tritonkit", ours), ("torch", theirs)):
            step = lambda f=f: torch.autograd.grad(f(x, w), (x, w), dy)
            for _ in range(5):
                step()
            torch.cuda.synchronize()
            ms = triton.testing.do_bench(step, warmup=25, rep=100, return_mode="median")
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(50):
                step()
            end.record()
            torch.cuda.synchronize()
            print(f"== {name} {str(dtype)[6:]} {who}: do_bench {ms * 1e3:.1f} us; back to back "
                  f"{start.elapsed_time(end) / 50 * 1e3:.1f} us a step")
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    step()
                torch.cuda.synchronize()
            print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=8, max_name_column_width=60))
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10, max_name_column_width=60))
