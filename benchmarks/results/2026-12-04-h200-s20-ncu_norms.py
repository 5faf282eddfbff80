"""One RMSNorm or LayerNorm forward (no gradient) of 8192 x 4096 float32 by tritonkit or by
torch.compile of the reference, after three warm-up calls, for Nsight Compute to profile the
fourth (`--launch-skip 3 --launch-count 1` on the kernel's name).
    PYTHONPATH=src python3 benchmarks/results/2026-12-04-h200-s20-ncu_norms.py ours|compile rms|layer"""
import sys

import torch

import tritonkit
from tritonkit.ops.norms.layer_norm import layer_norm_reference
from tritonkit.ops.norms.rms_norm import rms_norm_reference

who, norm = sys.argv[1], sys.argv[2]
x = torch.randn(8192, 4096, device="cuda")
w, b = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
if norm == "rms":
    fn = (lambda: tritonkit.rms_norm(x, w)) if who == "ours" else torch.compile(
        lambda: rms_norm_reference(x, w, upcast=False), dynamic=False)
else:
    fn = (lambda: tritonkit.layer_norm(x, w, b)) if who == "ours" else torch.compile(
        lambda: layer_norm_reference(x, w, b, upcast=False), dynamic=False)
with torch.no_grad():
    for _ in range(4):
        fn()
torch.cuda.synchronize()
