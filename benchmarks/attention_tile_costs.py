"""Where a short attention forward's time goes, from the outside: a fixed cost a query tile
(its prologue and epilogue: Q's load, the ring's first fill, O normalised and stored) and a
cost a key block walked, for tritonkit's forward and SDPA's cuDNN alike (developer tool, not a
test; no kernel variant needed).

The query side stays fixed (B, H, Nq: the same tiles and grid), the keys grow, and each
forward is timed from a CUDA graph (the GPU's time alone). Full attention walks Nk / 128 key
blocks a tile, so the times lie on t(Nk) = fixed + per_block * Nk / 128; a least-squares line
through them gives both costs, the share of the time at Nk = Nq that the fixed cost takes, and
the rate the forward would reach at Nk = Nq with no fixed cost (the floor that the schedule sets
when nothing of a tile's prologue and epilogue overlaps another tile's products). Issue 16's
short shape is the default: B=8 H=16 Nq=1024 D=64.

  PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/attention_tile_costs.py [--batch 8 --heads 16
      --nq 1024 --head-dim 64 --nk 256 --nk 512 ...]
  python3 benchmarks/attention_tile_costs.py --cpu      # the script itself, tiny, interpreted
"""
from __future__ import annotations

import argparse
import os
import sys

DEFAULT_NK = (256, 512, 1024, 2048, 4096)


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through (xs, ys)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--nq", type=int, default=1024)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--nk", type=int, action="append", help=f"key lengths (default {DEFAULT_NK})")
    parser.add_argument("--cpu", action="store_true", help="tiny shapes through the interpreter")
    args = parser.parse_args(argv)
    if args.cpu:
        os.environ["TRITON_INTERPRET"] = "1"
        args.batch, args.heads, args.nq, args.head_dim = 1, 2, 64, 16
        args.nk = args.nk or [32, 64, 128]

    import torch
    import torch.nn.functional as F

    from tritonkit import default_device
    from tritonkit.bench.timing import graphed_ms, time_ms
    from tritonkit.ops.attention import attention_fwd

    device = default_device()
    dtype = torch.float16 if args.cpu else torch.bfloat16
    B, H, Nq, D = args.batch, args.heads, args.nq, args.head_dim
    lengths = sorted(args.nk or DEFAULT_NK)
    if len(lengths) < 2:
        parser.error("give at least two --nk")
    q = torch.randn(B, H, Nq, D, device=device, dtype=dtype)

    def cudnn(q, k, v):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v)

    providers = {"tritonkit": lambda q, k, v: attention_fwd(q, k, v)[0]}
    if device.type == "cuda":
        providers["cuDNN"] = cudnn
    times: dict[str, list[float]] = {name: [] for name in providers}
    print(f"B={B} H={H} Nq={Nq} D={D}, full attention, {str(dtype).split('.')[-1]}; ms a forward "
          f"({'graphed' if device.type == 'cuda' else 'interpreted, meaningless as a speed'})")
    for nk in lengths:
        k, v = (torch.randn(B, H, nk, D, device=device, dtype=dtype) for _ in range(2))
        want = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
        row = []
        for name, fn in providers.items():
            err = (fn(q, k, v).float() - want).abs().max().item()
            if not err < 2e-2:
                sys.exit(f"{name} at Nk={nk}: max |error| {err:.2e} against SDPA in float32")
            call = lambda fn=fn: fn(q, k, v)  # noqa: E731
            ms = graphed_ms(call, time_ms(call)) if device.type == "cuda" else time_ms(call)
            times[name].append(ms)
            row.append(f"{name} {ms:8.4f}")
        print(f"  Nk={nk:6d}  " + "  ".join(row))

    blocks = [nk / 128 for nk in lengths]
    tiles_note = "(per 128-key block; the fixed part is the time at zero blocks)"
    print(f"\nfit t = fixed + per_block * Nk/128 {tiles_note}")
    flops = 4 * B * H * Nq * Nq * D
    for name, ys in times.items():
        fixed, per_block = fit_line(blocks, ys)
        at_nq = fixed + per_block * Nq / 128
        worst = max(abs(fixed + per_block * x - y) / y for x, y in zip(blocks, ys))
        print(f"  {name:10s} fixed {fixed * 1e3:8.2f} us, per block {per_block * 1e3:8.2f} us; at Nk=Nq "
              f"{at_nq * 1e3:8.1f} us ({flops / at_nq / 1e9:6.1f} TFLOP/s), the fixed part "
              f"{fixed / at_nq:6.1%} of it; without it {flops / (at_nq - fixed) / 1e9:6.1f} TFLOP/s; "
              f"the line's largest miss {worst:.1%}")


if __name__ == "__main__":
    main()
