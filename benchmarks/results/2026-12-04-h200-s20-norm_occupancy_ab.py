"""The float32 norm forwards at 8192 x 4096 (and bf16 beside), whose registers (35 rms, 42 layer at
8 warps) hold them to 6 or 5 blocks an SM where torch.compile's 16-warp, 32-register kernel fills
the SM (Nsight Compute, call 8): the rule's launch, the same with at most 32 registers a thread
(Triton's maxnreg), and 8 elements a thread on 16 warps; do_bench (three rounds) and graphed.
    PYTHONPATH=src:benchmarks python3 benchmarks/results/2026-12-04-h200-s20-norm_occupancy_ab.py"""
import statistics

import torch

import tritonkit
from sweep_rope import _forget_norm_plans, norm_elements_per_thread
from tritonkit import _launch
from tritonkit.bench.timing import graphed_ms, time_ms
from tritonkit.ops.norms._rows import _norm_fwd_kernel
from tritonkit.ops.norms.layer_norm import layer_norm_reference
from tritonkit.ops.norms.rms_norm import rms_norm_reference
from tritonkit.registry._accuracy import relative_error

MAXNREG = {"value": None}
options = _launch.Launch.launch_options


def capped(self):
    extra = {"maxnreg": MAXNREG["value"]} if MAXNREG["value"] and self.name.endswith("norm_fwd") else {}
    return {**options(self), **extra}


_launch.Launch.launch_options = capped
VARIANTS = {"rule": ((16, 2048, None, 8), None), "maxnreg 32": ((16, 2048, None, 8), 32),
            "16 warps": ((8, 2048, None, 16), None)}
for dtype, shape in ((torch.float32, (8192, 4096)), (torch.float32, (8192, 8192)), (torch.bfloat16, (8192, 4096))):
    x = torch.randn(shape, dtype=dtype, device="cuda")
    w, b = torch.randn(shape[1], dtype=dtype, device="cuda"), torch.randn(shape[1], dtype=dtype, device="cuda")
    moved = 2 * x.numel() * x.element_size()
    for name, fn, ref in (("rms", lambda: tritonkit.rms_norm(x, w), lambda u: rms_norm_reference(x, w, upcast=u)),
                          ("layer", lambda: tritonkit.layer_norm(x, w, b),
                           lambda u: layer_norm_reference(x, w, b, upcast=u))):
        reference, theirs = ref(True), None
        theirs = relative_error(ref(False), reference)
        rates, graphed = {v: [] for v in VARIANTS}, {}
        with torch.no_grad():
            for round_ in range(3):
                for v in (list(VARIANTS)[::-1] if round_ % 2 else list(VARIANTS)):
                    tile, MAXNREG["value"] = VARIANTS[v]
                    # tritonkit's launch cache keys compiled kernels by warps and stages, not
                    # maxnreg: emptied, each variant's first call compiles through Triton's path.
                    _norm_fwd_kernel.__dict__.pop("_tritonkit_launch_cache", None)
                    with norm_elements_per_thread(*tile):
                        if round_ == 0:
                            err = relative_error(fn(), reference)
                            assert err <= 2 * theirs + 1e-3, (v, err, theirs)
                        rates[v].append(moved / time_ms(fn) / 1e6)
                        if round_ == 2:
                            graphed[v] = moved / graphed_ms(fn, 0.07) / 1e6
                    MAXNREG["value"] = None
                    _forget_norm_plans()
        print(f"{str(dtype)[6:]:8s} {shape[0]}x{shape[1]} {name:5s} " + "  ".join(
            f"{v} {statistics.median(rates[v]):4.0f} (graphed {graphed[v]:4.0f})" for v in VARIANTS), flush=True)
