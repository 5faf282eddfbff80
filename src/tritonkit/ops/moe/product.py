"""What every grouped product of the MoE kernels shares: a row tile's place in the routing,
and the K loop of one tile of A[rows, :] @ B[:, cols].

A's rows are given as element offsets, so one loop serves rows gathered from the tokens
(hidden, dY: the row of sorted row r is token order[r] // k) and rows of a buffer kept in
expert-sorted order (h, dgu). B is an expert's weight seen through strides, so the gate/up
weight, the down weight and their transposed layouts (gpt-oss keeps both transposed) are one
code path; which layout is contiguous along K only changes the loads' vector width.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def program_tile(tiles_ptr, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """This program's part of a grouped product over N columns, one program a (row tile,
    BLOCK_N columns) pair, column blocks fastest: (expert, rows, row_mask, empty, n0), as
    `row_tile` gives them for its row tile, and its first column."""
    pid = tl.program_id(0)
    n_blocks = tl.cdiv(N, BLOCK_N)
    expert, rows, row_mask, empty = row_tile(tiles_ptr, pid // n_blocks, BLOCK_M)
    return expert, rows, row_mask, empty, (pid % n_blocks) * BLOCK_N


@triton.jit
def row_tile(tiles_ptr, tile, BLOCK_M: tl.constexpr):
    """(expert, rows, row_mask, empty) of row tile `tile` (routing.py): its BLOCK_M sorted
    rows, the ones inside the expert's segment, and whether the tile has no rows at all (a
    tile past the last one)."""
    expert = tl.load(tiles_ptr + 3 * tile)
    start = tl.load(tiles_ptr + 3 * tile + 1)
    end = tl.load(tiles_ptr + 3 * tile + 2)
    rows = start + tl.arange(0, BLOCK_M)
    return expert, rows, rows < end, end <= start


@triton.jit
def dot(a, b, acc, PRECISION: tl.constexpr):
    """acc + a @ b. PRECISION "upcast": float32 operands (bfloat16 under Triton 3.6's
    interpreter, whose bfloat16 dot is wrong); else the input precision of float32 operands
    ("ieee" or "tf32", configs.dot_precision)."""
    if PRECISION == "upcast":
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
    else:
        return tl.dot(a, b, acc, input_precision=PRECISION)


@triton.jit
def tile_product(a_ptr, a_rows, a_k, row_mask, b_ptr, b_k, b_cols, b2_cols, col_mask, K, v_ptr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 TWO_B: tl.constexpr, ROW_DOT: tl.constexpr, PRECISION: tl.constexpr):
    """(acc, acc2, row_dot) for one tile, in float32:
        acc[m, n]  = sum_k A[m, k] B[k, n]     A[m, k] at a_ptr + a_rows[m] + k * a_k,
                                               B[k, n] at b_ptr + k * b_k + b_cols[n]
        acc2[m, n] = the same with b2_cols     (TWO_B: gate and up from one load of A)
        row_dot[m] = sum_k A[m, k] v[k]        (ROW_DOT: v contiguous at v_ptr)
    Masked rows and columns read zeros. acc2 is acc and row_dot zeros where not asked for."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    acc2 = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    row_dot = tl.zeros((BLOCK_M,), tl.float32)
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + a_rows[:, None] + ks[None, :] * a_k
    b_ptrs = b_ptr + ks[:, None] * b_k + b_cols[None, :]
    b2_ptrs = b_ptr + ks[:, None] * b_k + b2_cols[None, :]
    v_ptrs = v_ptr + ks if ROW_DOT else ks  # v_ptr is None without ROW_DOT
    a_step = BLOCK_K * a_k
    b_step = BLOCK_K * b_k
    for k0 in range(0, K, BLOCK_K):
        k_mask = ks < K - k0
        a = tl.load(a_ptrs, mask=row_mask[:, None] & k_mask[None, :], other=0.0)
        b_mask = k_mask[:, None] & col_mask[None, :]
        acc = dot(a, tl.load(b_ptrs, mask=b_mask, other=0.0), acc, PRECISION)
        if TWO_B:
            acc2 = dot(a, tl.load(b2_ptrs, mask=b_mask, other=0.0), acc2, PRECISION)
            b2_ptrs += b_step
        if ROW_DOT:
            v = tl.load(v_ptrs, mask=k_mask, other=0.0)
            row_dot += tl.sum(a.to(tl.float32) * v.to(tl.float32)[None, :], 1)
            v_ptrs += BLOCK_K
        a_ptrs += a_step
        b_ptrs += b_step
    if not TWO_B:
        acc2 = acc
    return acc, acc2, row_dot
