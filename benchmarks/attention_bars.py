"""Issue 16's bar shapes: tritonkit's attention forward and backward (through the dispatch, as users
call it) beside SDPA's cuDNN and FlashAttention-2 backends, in one process on a GPU, without the
FlexAttention peer that `tritonkit bench attention` compiles anew for every shape (developer
tool, not a test; about two minutes on an H200).

  PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/attention_bars.py [--rounds R] [--filter TEXT]

Providers and timing are the bench's own (`registry.attention._providers`, `_timed`: the forward,
or autograd.grad through a graph built once; `bench.timing.time_ms`); the rounds alternate the
providers' order and the medians are printed with each round's figure. TFLOP/s count
4 B H N^2 D, halved for causal, x2.5 for the backward.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tritonkit import _runtime
from tritonkit.bench.timing import time_ms
from tritonkit.registry.attention import _providers, _timed

# (B, H, N, D) x causal, forward and backward: the bars
SHAPES = [(4, 32, 4096, 64), (4, 32, 16384, 64), (4, 32, 4096, 128), (4, 32, 16384, 128),
          (4, 16, 4096, 256), (4, 16, 16384, 256), (8, 16, 1024, 64)]
PEERS = ("SDPA cuDNN", "SDPA FA2")


def run(label: str, shape, causal: bool, backward: bool, rounds: int, device: torch.device) -> str:
    B, H, N, D = shape
    q, k, v = (torch.randn(B, H, N, D, dtype=torch.bfloat16, device=device) for _ in range(3))
    providers = {name: f for name, f in _providers(device, causal, N, N, B * H * N * N * 4, with_flex=False).items()
                 if name == "tritonkit" or name in PEERS}
    timed = _timed(providers, (q, k, v), causal, backward)
    flops = 4 * B * H * N * N * D * (0.5 if causal else 1.0) * (2.5 if backward else 1.0)
    rates = {name: [] for name in timed}
    for round_ in range(rounds):
        names = list(timed)[::-1] if round_ % 2 else list(timed)
        for name in names:
            rates[name].append(flops / time_ms(timed[name]) / 1e9)
    median = {name: statistics.median(values) for name, values in rates.items()}
    best = max((n for n in median if n != "tritonkit"), key=median.get)
    cells = "  ".join(f"{name} {median[name]:6.1f} ({', '.join(f'{x:.0f}' for x in rates[name])})"
                      for name in timed)
    return f"{label:30s} {median['tritonkit'] / median[best]:.3f}x {best}   {cells}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--filter", default="", help="only rows whose label contains this")
    args = parser.parse_args()
    device = _runtime.default_device()
    print(_runtime.describe())
    start = time.perf_counter()
    for backward in (False, True):
        for shape in SHAPES:
            for causal in (False, True):
                B, H, N, D = shape
                label = f"{'bwd' if backward else 'fwd'} B{B} H{H} N={N} D={D}{' causal' if causal else ''}"
                if args.filter and args.filter not in label:
                    continue
                print(run(label, shape, causal, backward, args.rounds, device), flush=True)
                torch.cuda.empty_cache()
    print(f"took {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
