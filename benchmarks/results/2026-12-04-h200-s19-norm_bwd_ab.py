"""The norms' backward launchers alone (dx, dW, LayerNorm's dB), one tree a process (PYTHONPATH),
at the rule's own tile: GB/s (dy and x read, dx written) at several widths, bf16 and fp32, with
each result checked against torch's native backward.
    PYTHONPATH=<tree>/src python3 benchmarks/results/2026-12-04-h200-s19-norm_bwd_ab.py"""
import torch
import torch.nn.functional as F
from tritonkit.bench.timing import time_ms
from tritonkit.ops.norms.layer_norm import _layer_norm_bwd, _layer_norm_fwd
from tritonkit.ops.norms.rms_norm import _rms_norm_bwd, _rms_norm_fwd

dev = torch.device("cuda")
for dtype in (torch.bfloat16, torch.float32):
    for shape in ((8192, 4096), (8192, 8192), (16384, 2048), (2048, 4096), (8192, 1024)):
        x = torch.randn(shape, dtype=dtype, device=dev)
        w = torch.randn(shape[-1], dtype=dtype, device=dev)
        b = torch.randn(shape[-1], dtype=dtype, device=dev)
        dy = torch.randn_like(x)
        _, _, rstd = _rms_norm_fwd(x, w, None, 1e-6, 0.0)
        _, _, mean, lrstd = _layer_norm_fwd(x, w, b, None, 1e-5)
        moved = 3 * x.numel() * x.element_size()
        xs, ws, bs = (t.detach().requires_grad_() for t in (x, w, b))
        ref_rms = torch.autograd.grad(F.rms_norm(xs, (shape[-1],), ws, 1e-6), (xs, ws), dy)
        ref_ln = torch.autograd.grad(F.layer_norm(xs, (shape[-1],), ws, bs, 1e-5), (xs, ws, bs), dy)
        line = []
        for name, fn, ref in (("rms", lambda: _rms_norm_bwd(dy, None, x, w, rstd, 0.0), ref_rms),
                              ("layer", lambda: _layer_norm_bwd(dy, None, x, w, b, mean, lrstd), ref_ln)):
            got = fn()
            err = max(((g.float() - r.float()).abs().max() / r.float().abs().max()).item() for g, r in zip(got, ref))
            ms = time_ms(fn)
            line.append(f"{name} {moved / ms / 1e6:6.0f} GB/s ({ms * 1e3:6.1f} us, err {err:.1e})")
        print(f"{str(dtype)[6:]:9s} {shape[0]:5d}x{shape[1]:<5d} " + "  ".join(line))
