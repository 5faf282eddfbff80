"""The head dims of an attention call: which ones the kernels take, and the head-dim tiles they
are compiled for.

q and k share one head dim, Dqk; v has its own, Dv, which o, dO and dV share (DeepSeek-V3's
multi-head latent attention trains with Dqk = 192 and Dv = 128; most models have Dv = Dqk).
Each may be any size from 1 to 512 (Gemma 4's global layers: 512). A kernel holds each in a tile
of the next power of two, at least 16 (tl.dot's smallest inner dim); columns past the head dim
load as zeros, which add nothing to q.k or to P V, and are not stored.

The cap: at 512 columns the forward's fp32 accumulator of a 64-row tile is already 128 registers
a thread over two warpgroups, half the register file of an SM, and the dK/dV pass holds two such
(`configs.py`); a wider head would leave no tile that fits.
"""

from __future__ import annotations

from typing import NamedTuple

from ..._layout import next_power_of_2

MAX_HEAD_DIM = 512


class HeadTiles(NamedTuple):
    """The head-dim tiles a kernel is compiled for: one constexpr (`HEAD`), so that the kernels
    stay under 25 parameters and the autotuner keys on it whole.

    qk, pad_qk: q's and k's tile (the next power of two of Dqk, at least 16), and whether it is
    wider than Dqk (columns past it masked, bounded by the kernels' runtime dims[0]).
    v, pad_v: the same for v, o, dO, dV.
    v_dim: Dv where it differs from Dqk, as a compile-time bound of v's columns; 0 where they
    are equal, and the runtime Dqk bounds v's columns too (so that the kernels of equal head
    dims compile as they did before v had its own)."""
    qk: int
    pad_qk: bool
    v: int
    pad_v: bool
    v_dim: int = 0


def _block_d(head_dim: int) -> int:
    """The tile of a head dim: its next power of two, at least 16."""
    return max(16, next_power_of_2(head_dim))


def head_tiles(dqk: int, dv: int) -> HeadTiles:
    """The tiles of q, k (Dqk) and v (Dv)."""
    qk, v = _block_d(dqk), _block_d(dv)
    return HeadTiles(qk, qk != dqk, v, v != dv, 0 if dv == dqk else dv)


def check_head_dim(name: str, head_dim: int) -> None:
    """A ValueError naming `name` (the tensor) for a head dim the kernels do not take."""
    if not 1 <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"{name} has head_dim {head_dim}; supported: 1 to {MAX_HEAD_DIM}")
