"""The norms' forward under four launch rules in one process, three rounds in alternating order:
old (4096 elements a program, up to 32 warps), tile 2048 (short rows two 1024-wide rows a
program), cap 8 (at most 8 warps a program: 32 a thread at 8192 columns), new (both). GB/s count
x read and y written; every rule's output checked against the float64 reference first.
    PYTHONPATH=src:benchmarks python3 benchmarks/results/2026-12-04-h200-s20-norm_fwd_ab.py"""
import statistics

import torch

import tritonkit
from sweep_rope import norm_elements_per_thread
from tritonkit.bench.timing import time_ms
from tritonkit.ops.norms import _rows
from tritonkit.ops.norms.layer_norm import layer_norm_reference
from tritonkit.ops.norms.rms_norm import rms_norm_reference
from tritonkit.registry._accuracy import relative_error

RULES = {"old": (16, 4096, None, 32), "tile 2048": (16, 2048, None, 32), "cap 8": (16, 4096, None, 8),
         "new": (16, 2048, None, 8)}
SHAPES = {torch.bfloat16: ((8192, 1024), (32768, 1024), (8192, 2048), (8192, 4096), (8192, 8192), (4096, 16384),
                           (16384, 512)),
          torch.float32: ((8192, 1024), (8192, 4096), (8192, 8192), (4096, 16384))}
dev = torch.device("cuda")
for dtype, shapes in SHAPES.items():
    for shape in shapes:
        x = torch.randn(shape, dtype=dtype, device=dev)
        w = torch.randn(shape[-1], dtype=dtype, device=dev)
        b = torch.randn(shape[-1], dtype=dtype, device=dev)
        moved = 2 * x.numel() * x.element_size()
        line = f"{str(dtype)[6:]:9s} {shape[0]:5d}x{shape[1]:<5d}"
        for name, fn, ref in (("rms", lambda: tritonkit.rms_norm(x, w), lambda u: rms_norm_reference(x, w, upcast=u)),
                              ("layer", lambda: tritonkit.layer_norm(x, w, b),
                               lambda u: layer_norm_reference(x, w, b, upcast=u))):
            reference = ref(True)
            theirs = relative_error(ref(False), reference)
            rates = {r: [] for r in RULES}
            configs = {}
            with torch.no_grad():
                for rule, v in RULES.items():
                    with norm_elements_per_thread(*v):
                        configs[rule] = _rows.row_config(*shape, "fwd")
                        err = relative_error(fn(), reference)
                    assert err <= 2 * theirs + 1e-3, (rule, shape, err, theirs)
                for round_ in range(3):
                    for rule in (list(RULES)[::-1] if round_ % 2 else list(RULES)):
                        with norm_elements_per_thread(*RULES[rule]):
                            rates[rule].append(moved / time_ms(fn) / 1e6)
            med = {r: statistics.median(v) for r, v in rates.items()}
            line += f"  {name}: " + " ".join(f"{r} {med[r]:4.0f}" for r in RULES)
            line += f" (new {configs['new'][0]}x{configs['new'][1]} {configs['new'][3]}w)"
        print(line, flush=True)
