"""The gated activations' tiles (swiglu's forward and backward, gate and up separate or packed in
one [gate, up] tensor) beside torch.compile of the eager expression and a copy of the same
bytes, in one process on a GPU (developer tool, not a test; about a minute on an H200).

  PYTHONPATH=src python3 benchmarks/sweep_gated.py [--shape T,I] [--cpu]

(--cpu: tiny shapes through Triton's interpreter, to try the script itself; its timings mean
nothing; SWEEP_GATED_DEFAULT_ONLY=1 times only the op's own rule beside the peers.)

Each variant is a tile rule, `ops.gated._tile_config` replaced for its timings: a program moves
`elements` of each tensor, as one row's columns up to `max_cols` (halved while padding a row to
whole blocks would add more than an eighth of it: the op's own rule, `ops.gated.tile_for`), with
`warps` warps. Every variant's
result is checked against the float64 reference before it is timed; the cases run in ROUNDS
rounds, alternately forwards and backwards through the list, and the medians are printed. GB/s
count each tensor read or written once (3 T I elements forward; 8 T I forward+backward through
autograd: the forward's 3, then gate, up and dout read, dgate and dup written).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time

import torch

import tritonkit
from tritonkit.bench.timing import copy_ceiling_gbs, time_ms
from tritonkit.ops import gated
from tritonkit.registry._accuracy import relative_error

# (elements a program, most columns a block, warps); None: the op's own rule
VARIANTS = [None, (2048, 2048, 4), (4096, 2048, 4), (4096, 1024, 4), (8192, 8192, 8), (8192, 4096, 8),
            (8192, 2048, 8), (8192, 8192, 4), (4096, 4096, 8), (16384, 8192, 8), (2048, 1024, 2), (8192, 1024, 8),
            # one row's 1024 columns a program, for widths that 2048-wide blocks pad (11008: 2.3% against 11.6%)
            (1024, 1024, 2), (1024, 1024, 4), (2048, 1024, 4)]
SHAPE, CPU_SHAPE = (8192, 14336), (6, 40)
ROUNDS = 3
TOLERANCE = 1e-3


@contextlib.contextmanager
def variant(v):
    saved = gated._tile_config
    if v is not None:
        gated._tile_config = lambda n_rows, n_cols: gated.tile_for(n_rows, n_cols, *v)
    gated._plan.cache_clear()
    try:
        yield
    finally:
        gated._tile_config = saved
        gated._plan.cache_clear()


def label(v) -> str:
    if v is None:
        return "the op's rule"
    return f"{v[0]} a program, <= {v[1]} cols, {v[2]} warps"


def main(device: torch.device, shape: tuple[int, int]) -> None:
    tokens, width = shape
    packed_input = torch.randn(tokens, 2 * width, device=device, dtype=torch.bfloat16)
    separate = [t.contiguous() for t in packed_input.chunk(2, dim=-1)]
    dout = torch.randn(tokens, width, device=device, dtype=torch.bfloat16)
    eager = lambda g, u=None: gated.swiglu_reference(g, u, upcast=False)
    compiled = torch.compile(eager, dynamic=False)
    element = packed_input.element_size()
    for packed in (False, True):
        args = (packed_input, None) if packed else tuple(separate)
        ref = gated.swiglu_reference(*args)
        theirs = relative_error(eager(*args), ref)
        leaves = [a.detach().requires_grad_() for a in args if a is not None]
        ref_grads = torch.autograd.grad(gated.swiglu_reference(*leaves), leaves, dout)
        for backward in (False, True):
            moved = tokens * width * element * (8 if backward else 3)
            what = f"swiglu {'fwd+bwd' if backward else 'fwd'} {tokens}x{width}{' packed' if packed else ''} bf16"
            cases = []
            for v in VARIANTS[:1] if os.environ.get("SWEEP_GATED_DEFAULT_ONLY") else VARIANTS:
                with variant(v):
                    if backward:
                        fn = lambda: torch.autograd.grad(tritonkit.swiglu(*leaves), leaves, dout)
                        error = max(relative_error(a, b) for a, b in zip(fn(), ref_grads))
                    else:
                        error = relative_error(gated.gated_fwd(*args, gated.SILU), ref)
                        fn = lambda: gated.gated_fwd(*args, gated.SILU)
                if error > 2 * theirs + TOLERANCE:
                    print(f"   {label(v)}: relative error {error:.2e}, NOT timed")
                    continue
                cases.append((label(v), v, fn))
            peer = (lambda: torch.autograd.grad(compiled(*leaves), leaves, dout)) if backward else \
                (lambda: compiled(*args))
            rates = {name: [] for name, _, _ in cases}
            rates["torch.compile"] = []
            copies = []
            for round_ in range(ROUNDS):
                copies.append(copy_ceiling_gbs(device, moved))
                for name, v, fn in cases[::-1] if round_ % 2 else cases:
                    with variant(v):
                        rates[name].append(moved / time_ms(fn) / 1e6)
                rates["torch.compile"].append(moved / time_ms(peer) / 1e6)
            copy = statistics.median(copies)
            print(f"{what}: {moved:,} bytes; same-bytes copy {copy:.0f} GB/s")
            for name, values in rates.items():
                value = statistics.median(values)
                print(f"   {value:6.0f} GB/s {100 * value / copy:5.1f}% of copy  {name}  "
                      f"(rounds: {', '.join(f'{x:.0f}' for x in values)})")


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(print(__doc__))
    cpu = "--cpu" in sys.argv
    if not cpu and not torch.cuda.is_available():
        sys.exit("sweep_gated.py times kernels on a GPU; none here (--cpu tries the script on tiny shapes)")
    shape = CPU_SHAPE if cpu else SHAPE
    if "--shape" in sys.argv:  # tokens,intermediate, e.g. 4096,11008
        shape = tuple(int(n) for n in sys.argv[sys.argv.index("--shape") + 1].split(","))
    from tritonkit import _runtime

    start = time.perf_counter()
    print(_runtime.describe())
    main(_runtime.default_device(), shape)
    print(f"took {time.perf_counter() - start:.0f} s")
