"""The routing of tokens to experts: each (token, slot) pair as a row, sorted by expert.

The T x k routing decisions are S = T * k slots; slot s = t * k + j is token t's j-th expert.
Sorting the slots by expert (stably, so an expert's rows keep token order) gives

- `order` (S,) int32: the slot of each sorted row; the rows of expert e are
  offsets[e] <= r < offsets[e + 1];
- `offsets` (E + 1,) int32: where each expert's rows start, and offsets[E] the rows routed
  to an expert at all: slots whose index lies outside [0, E) (an expert-parallel sentinel,
  an expert of another rank) sort past them and are computed by no pass;
- `tiles` (max_tiles, 3) int32: the row tiles of BLOCK_M rows the products run over, each
  inside one expert: (expert, first row, end of the expert's rows); tiles past the last are
  (E, 0, 0) and their programs return at once.

All of it is computed on the device with torch's stable sort and binary searches, without
reading a count back to the host: the grids are sized from the bounds S and E alone
(max_tiles = cdiv(S, BLOCK_M) + E, since expert e needs at most count_e / BLOCK_M + 1
tiles), which also keeps a step capturable in a CUDA graph.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..._layout import cdiv


class Routing(NamedTuple):
    order: torch.Tensor     # (S,) int32: the slot of each expert-sorted row
    offsets: torch.Tensor   # (E + 1,) int32: the first sorted row of each expert; [E]: rows routed
    tiles: torch.Tensor     # (max_tiles, 3) int32: (expert, first row, end row) of each row tile


def max_tiles(slots: int, num_experts: int, block_m: int) -> int:
    """How many row tiles of block_m rows the slots can need at most, whatever the routing."""
    return cdiv(slots, block_m) + num_experts


def route(expert_indices: torch.Tensor, num_experts: int, block_m: int) -> Routing:
    """The routing of `expert_indices` (T, k), integer, on its device, for row tiles of
    block_m rows."""
    device = expert_indices.device
    flat = expert_indices.reshape(-1)
    valid = (flat >= 0) & (flat < num_experts)
    expert_of_slot = torch.where(valid, flat, num_experts).to(torch.int32)
    sorted_experts, order = torch.sort(expert_of_slot, stable=True)
    offsets = torch.searchsorted(sorted_experts, torch.arange(num_experts + 1, dtype=torch.int32, device=device),
                                 out_int32=True)
    counts = offsets[1:] - offsets[:-1]
    tiles_of = (counts + (block_m - 1)) // block_m
    tile_end = torch.cumsum(tiles_of, 0, dtype=torch.int32)
    tile = torch.arange(max_tiles(flat.numel(), num_experts, block_m), dtype=torch.int32, device=device)
    expert = torch.searchsorted(tile_end, tile, right=True, out_int32=True)
    last = expert.clamp(max=num_experts - 1).long()   # tiles past the end: any expert, then emptied
    used = expert < num_experts
    start = torch.where(used, offsets[last] + (tile - (tile_end - tiles_of)[last]) * block_m, 0)
    end = torch.where(used, offsets[last + 1], 0)
    tiles = torch.stack((expert, start, end), dim=1).to(torch.int32)
    return Routing(order.to(torch.int32), offsets, tiles)
