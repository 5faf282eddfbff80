"""The share of a causal attention pass's tile work that the mask needs, for packed sequences of the
bench's lengths and for dense batches, at several tile shapes (arithmetic, no GPU: the bound that
tiles put on issue 15's packed bar before any kernel runs).

  PYTHONPATH=src python3 benchmarks/varlen_work.py [--count 16] [--mean 1024]

A pass computes whole BLOCK_M x BLOCK_N tiles of scores: each query block of a sequence walks the
key blocks up to its last row's diagonal (the forward's and dQ pass's order; the dK/dV pass walks
the same tiles transposed), the last query block padded to BLOCK_M rows. Needed work is the
(query, key) pairs the causal mask keeps, n (n + 1) / 2 a sequence. The bar compares the packed
rate, counted on needed work, with the dense N=4096 rate, counted the same way: at the same speed
per computed tile the packed rate can be at most (needed / computed, packed) / (needed / computed,
dense) of the dense one, before the shorter walks' per-tile prologue and epilogue are counted.
"""
from __future__ import annotations

import argparse

from tritonkit.registry.attention_varlen import lognormal_lengths

TILES = ((128, 128), (128, 64), (64, 128), (64, 64), (192, 128))


def work(lengths: list[int], block_m: int, block_n: int) -> tuple[float, int, float]:
    """(needed / computed pairs, query tiles, key blocks a tile on average)."""
    needed = computed = tiles = blocks = 0
    for n in lengths:
        needed += n * (n + 1) // 2
        for start in range(0, n, block_m):
            walk = -(-min(start + block_m, n) // block_n)
            computed += block_m * walk * block_n
            tiles += 1
            blocks += walk
    return needed / computed, tiles, blocks / tiles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=16)
    parser.add_argument("--mean", type=int, default=1024)
    args = parser.parse_args()
    lengths = lognormal_lengths(args.count, args.mean)
    print(f"{args.count} lognormal lengths, mean about {args.mean} (the bench's): {sorted(lengths)}, "
          f"{sum(lengths)} tokens")
    batches = {"packed": lengths, "dense 1 x 4096": [4096],
               f"dense {args.count} x {args.mean}": [args.mean] * args.count}
    print(f"{'tile':>9s}  " + "  ".join(f"{name:>26s}" for name in batches) + "  packed / dense 4096")
    for block_m, block_n in TILES:
        cells = {name: work(ls, block_m, block_n) for name, ls in batches.items()}
        text = "  ".join(f"{share:6.3f} ({tiles:4d} tiles, {walk:4.1f})" for share, tiles, walk in cells.values())
        print(f"{block_m:4d}x{block_n:<4d}  {text}  {cells['packed'][0] / cells['dense 1 x 4096'][0]:.3f}")
    print("each cell: needed / computed pairs (query tiles, key blocks a tile)")


if __name__ == "__main__":
    main()
