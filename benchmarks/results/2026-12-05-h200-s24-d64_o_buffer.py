"""The Gluon forward at head dim 64 (three consumer warpgroups, 192-row tiles) with O in a
buffer of its own and Q released by a predicate in the block loops (`O_BUFFER=True`, which
compiles with 84 B of spills at 160 registers) against the launcher's (`O_BUFFER=False`), in one
process through the same direct launch (Triton's own, as `bench_gluon_attention.gluon_variant`), timed from CUDA
graphs (`bench.timing.graphed_ms`), three rounds alternating; outputs compared bit for bit.
    PYTHONPATH=src python3 benchmarks/results/2026-12-05-h200-s24-d64_o_buffer.py"""
import statistics

import torch

from tritonkit.bench.timing import graphed_ms, time_ms
from tritonkit.gluon import attention_fwd as gluon_fwd

dev = torch.device("cuda")
for B, H, N in ((8, 16, 1024), (4, 32, 4096)):
    q, k, v = (torch.randn(B, H, N, 64, dtype=torch.bfloat16, device=dev) for _ in range(3))
    outs, runs = {}, {}
    for flag in (False, True):
        outs[flag] = o, lse = torch.empty_like(q), torch.empty(B, H, N, device=dev)
        grid, args, kwargs = gluon_fwd.launch_args(q, k, v, o, lse, False, 64 ** -0.5)
        kwargs = dict(kwargs, O_BUFFER=flag)
        runs[flag] = lambda grid=grid, args=args, kwargs=kwargs: gluon_fwd._attn_fwd_kernel[grid](*args, **kwargs)
        runs[flag]()
    assert torch.equal(outs[False][0], outs[True][0]) and torch.equal(outs[False][1], outs[True][1])
    flops = 4 * B * H * N * N * 64
    rates = {flag: [] for flag in runs}
    for r in range(3):
        for flag in ((True, False) if r % 2 else (False, True)):
            rates[flag].append(flops / graphed_ms(runs[flag], time_ms(runs[flag])) / 1e9)
    med = {flag: statistics.median(x) for flag, x in rates.items()}
    print(f"B{B} H{H} N{N} D64 full: O in Q's buffer {med[False]:.1f}, O's own buffer {med[True]:.1f} "
          f"({med[True] / med[False]:.3f}x; rounds {rates})", flush=True)
