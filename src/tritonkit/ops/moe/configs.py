"""Tile sizes and dot precision of the MoE kernels.

The row-tile height BLOCK_M is shared by every pass over the expert-sorted rows (the gate/up
product, the down product, their backward counterparts): the routing's tile map is built for
it once in the forward and reused by the backward. The other block sizes are per pass.

The GPU configs are starting points for sm_90 written from the shapes of the products (a
wgmma row block of 64 or 128, two accumulators in the gate/up pass); they have not been
tuned on a GPU (docs/moe.md says what is unmeasured). Under the interpreter the blocks are
16 to 32, so that test shapes of a few dozen rows and columns cross several blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ... import _launch
from ..._runtime import INTERPRETED


@dataclass(frozen=True)
class Tile:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 3

    def meta(self) -> dict[str, int]:
        return {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "BLOCK_K": self.block_k}


def interpreting() -> bool:
    """Kernels will run through the interpreter. Not so inside record_launches(execute=False),
    where `tritonkit inspect` compiles the launches for a GPU: they must be the GPU's."""
    return INTERPRETED and _launch.launches_execute()


# The interpreter's cost is per program and per operation, nearly whatever the block size:
# few, wide blocks, with 16-row tiles so that test routings still split experts into tiles.
_INTERPRETER_TILE = Tile(16, 32, 32, 4, 1)
_INTERPRETER_WEIGHT_TILE = Tile(32, 32, 16, 4, 1)


def _ieee(dtype: torch.dtype) -> bool:
    """float32 products in IEEE float32: no tensor cores, the accumulators and both operands in
    registers (the FMA path), so smaller tiles."""
    return dtype == torch.float32 and dot_precision(dtype) == "ieee"


def row_block(rows: int, num_experts: int, dtype: torch.dtype) -> int:
    """BLOCK_M of the passes over expert-sorted rows: 128 where the experts average at least
    128 rows, else 64 (wgmma's smallest row block), so that few rows an expert do not leave
    most of each tile masked; 64 for float32 (its IEEE products hold the operands in
    registers). It must not depend on anything but the shapes and dtype: the forward's
    routing is built for it and the backward reuses that routing."""
    if interpreting():
        return _INTERPRETER_TILE.block_m
    return 128 if rows >= 128 * num_experts and dtype != torch.float32 else 64


def row_tiles(block_m: int, dtype: torch.dtype) -> dict[str, Tile]:
    """The tiles of the passes over expert-sorted rows: "gate_up" (two accumulators of
    BLOCK_M x BLOCK_N, gate and up), "down" (the down product, and the input gradient's
    product with the gate/up weight), "gate_up_bwd" (dY times the down weight, the
    activation's backward in its epilogue). The gate/up backward's epilogue holds the
    product, gate, up, h and both gradients of its tile: at BLOCK_N 64 and 8 warps it takes
    239 registers a thread for SwiGLU and spills 16 bytes for interleaved gate/up (the pairs'
    split and join), which all the same measured faster than 32 columns, whose narrower tiles
    read each row tile's gathered dY once more per column block (notes/moe.md)."""
    if interpreting():
        return {"gate_up": _INTERPRETER_TILE, "down": _INTERPRETER_TILE, "gate_up_bwd": _INTERPRETER_TILE}
    if _ieee(dtype):
        tile = Tile(block_m, 64, 32, 4, 2)
        return {"gate_up": Tile(block_m, 32, 32, 4, 2), "down": tile, "gate_up_bwd": Tile(block_m, 32, 32, 4, 2)}
    wide = dtype.itemsize == 2
    k, stages = (64, 3) if wide else (32, 2)
    warps = 8 if block_m == 128 else 4
    return {"gate_up": Tile(block_m, 64, k, warps, stages),
            "down": Tile(block_m, 128, k, warps, stages),
            "gate_up_bwd": Tile(block_m, 64, k, warps, stages)}


def weight_grad_tile(dtype: torch.dtype) -> Tile:
    """The tile of the per-expert weight gradients: BLOCK_M x BLOCK_N of the gradient,
    BLOCK_K sorted rows of the expert a step."""
    if interpreting():
        return _INTERPRETER_WEIGHT_TILE
    if _ieee(dtype):
        return Tile(64, 64, 16, 4, 2)
    wide = dtype.itemsize == 2
    return Tile(128, 128, 64 if wide else 32, 8, 3 if wide else 2)


def bias_grad_block() -> tuple[int, int]:
    """(BLOCK_R, BLOCK_M) of the biases' gradients: sorted rows a step, and the bias's columns a
    program (256 of 16-bit elements: 16-byte accesses at 4 warps; 16 rows keep the float32
    accumulator without spills)."""
    if interpreting():
        return 16, 32
    return 16, 256


def combine_block(n: int) -> tuple[int, int]:
    """(BLOCK_T, BLOCK_N) of the pass that sums each token's k rows: a row's columns in
    blocks of at most 1024 (16-byte accesses at 4 warps), tokens filling 4096 elements."""
    if interpreting():
        return 16, 64
    block_n = min(1024, max(16, 1 << (n - 1).bit_length()))
    return max(1, 4096 // block_n), block_n


def dot_precision(dtype: torch.dtype) -> str:
    """The PRECISION constexpr of the kernels' products: "upcast" for bfloat16 under the
    interpreter (Triton 3.6's interpreter computes tl.dot of two bfloat16 operands wrongly);
    for float32, IEEE products unless torch allows TF32 for float32 matmuls
    (torch.set_float32_matmul_precision), as torch's own matmul follows that setting; 16-bit
    operands ignore it."""
    if dtype == torch.bfloat16 and interpreting():
        return "upcast"
    if dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest":
        return "ieee"
    return "tf32"
