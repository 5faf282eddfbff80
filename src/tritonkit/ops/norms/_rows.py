"""The kernels and launch machinery that RMSNorm and LayerNorm share.

One kernel family serves both norms through constexpr flags (IS_RMS, HAS_WEIGHT, HAS_BIAS,
HAS_RESIDUAL / HAS_DH). A "row" is the last dim of x; the leading dims index rows through
their strides (up to two dims after collapsing), so views are read in place.

Forward, per row (statistics in float32; RMSNorm is LayerNorm with the mean fixed at 0):
    h    = x (+ residual, rounded to x's dtype exactly as torch's eager `x + residual`)
    mean = sum(h) / H                      (LayerNorm; 0 for RMSNorm)
    rstd = 1 / sqrt(sum((h - mean)^2) / H + eps)
    y    = (h - mean) * rstd * (weight_offset + w) + b
Backward, per row, with xhat = (h - mean) * rstd and g = dy * (weight_offset + w):
    dh_total = rstd * (g - mean(g) [LayerNorm only] - xhat * mean(g * xhat)) + dh
    dW = sum over rows of dy * xhat,  dB = sum over rows of dy
dW and dB are summed deterministically, in the backward's one launch: each program walks a
fixed set of rows and writes its own float32 partial row; programs are grouped (G of them,
G about sqrt(programs)), the last of a group to finish sums its group's partial rows into a
group row, and the last group to finish sums the group rows into dW and dB. "Last" is told
by atomic tickets on counters that the last taker resets (`_counters`: no memset launch).
The backward's programs are persistent, one an SM, so each loads its next row block's dy and
h while it reduces and stores the current one: its own loads are all that hide the latency.
Every sum runs in a fixed order whichever program does it, so the result does not depend on
scheduling; the two levels keep the work left after the last program's rows (G + programs/G
partial rows) small next to one program summing them all.

Rows up to MAX_FUSED_COLS (16384 forward, 8192 backward) are held whole in registers, one
row (or several short rows) per program: one read of each input, one write of each output.
Longer rows are walked in CHUNK_COLS chunks, twice (statistics, then output; the second
read mostly hits L2); LayerNorm merges the chunks' means and squared deviations with Chan's
formula, so no E[x^2] - E[x]^2 cancellation.

Memory floor at 8192 x 4096 bf16 (64 MiB a tensor), at the H200's measured copy rate of
4.2 TB/s: forward 2 tensors = 134 MB -> 32 us (with residual 4 tensors, 64 us); backward
reads h and dy and writes dx, 3 tensors -> 48 us; forward + backward 80 us.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from ..._checks import check_same_device, check_tensor, dtype_name
from ..._counters import MAX_COUNTERS, zeroed_counters
from ..._launch import LaunchTemplate
from ..._layout import cdiv, collapse_dims, next_power_of_2
from ._plans import head_layout, template

MAX_FUSED_COLS = {"fwd": 16384, "bwd": 8192}  # longest row held whole by one program
CHUNK_COLS = 4096          # columns a program handles at a time in longer rows
# Short rows are packed several to a program up to this many elements: the forward's
# programs are many and short (two 1024-wide rows on 4 warps), the backward's persistent (one
# an SM), each holding more, so that one program's loads keep enough bytes in flight to cover
# memory latency.
MIN_TILE = {"fwd": 2048, "bwd": 8192}
# Elements a thread holds per tensor: 16 (two 16-byte loads of a 16-bit row): the forward at
# 8 warps a 4096-wide row, the backward at 16 warps over 8192 elements, with h, dy, w and the
# dW (and dB) sums in registers at once.
PER_THREAD = {"fwd": 16, "bwd": 16}
# Warps a program at most. A forward program's row reductions (LayerNorm's two) cross its
# warps through shared memory, each with a barrier: past 8 warps they cost more than the
# extra loads in flight bring, so wider rows hold more elements a thread instead.
MAX_WARPS = {"fwd": 8, "bwd": 32}
WARPS_PER_SM = 16          # backward: persistent programs launched per SM = this / num_warps
SUM_PER_THREAD = 16        # partial-sum elements a thread loads at a time (16 fp32: four 16-byte loads)


# ---------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------

@triton.jit
def _row_starts(rows, size1, s0, s1):
    """Element offset of each row's first element; rows index two collapsed dims."""
    return (rows // size1) * s0 + (rows % size1) * s1


@triton.jit
def _load_h(x_ptr, r_ptr, h_ptr, x_off, r_off, h_off, mask, STORE_H: tl.constexpr, HAS_RESIDUAL: tl.constexpr):
    """The tile the norm is taken over, in float32: x, or h = x + residual added in float32
    and rounded to x's dtype (what torch's eager add of two tensors of x's dtype gives), which
    STORE_H also writes out."""
    h = tl.load(x_ptr + x_off, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        h = (h + tl.load(r_ptr + r_off, mask=mask, other=0.0).to(tl.float32)).to(h_ptr.dtype.element_ty)
        if STORE_H:
            tl.store(h_ptr + h_off, h, mask=mask)
        h = h.to(tl.float32)
    return h


@triton.jit
def _moments(h, mask, n, IS_RMS: tl.constexpr):
    """Per row of the tile: (mean, sum of squared deviations) over its n valid columns;
    RMSNorm: (0, sum of squares)."""
    if IS_RMS:
        mean = tl.zeros([h.shape[0]], dtype=tl.float32)
        sq = h * h
    else:
        mean = tl.sum(h, axis=1) / n
        d = tl.where(mask, h - mean[:, None], 0.0)
        sq = d * d
    return mean, tl.sum(sq, axis=1)


@triton.jit
def _rstd(m2, n, eps, row_ok):
    # Rows past the end get 1 rather than 1/sqrt(eps), which is inf for eps = 0.
    # Correctly rounded sqrt and division (one per row, free next to the row's memory
    # traffic) rather than the GPU's approximate rsqrt (about 2 ulp): the backward's
    # g - xhat * mean(g * xhat) cancels when g lies along xhat (a row of one element:
    # 1 - xhat^2 = eps * rstd^2), and there an error in rstd is amplified by
    # mean(h^2) / eps.
    return 1.0 / tl.sqrt_rn(tl.where(row_ok, m2 / n + eps, 1.0))


@triton.jit
def _scale(w_ptr, cols, col_ok, w_offset, HAS_WEIGHT: tl.constexpr):
    """(w_offset + w) in float32 over a chunk of columns, or 1 without a weight."""
    if HAS_WEIGHT:
        return tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32) + w_offset
    return tl.full(cols.shape, 1.0, tl.float32)


@triton.jit
def _store_y(y_ptr, b_ptr, h, mean, rstd, w, y_off, cols, col_ok, mask, HAS_BIAS: tl.constexpr):
    y = (h - mean[:, None]) * rstd[:, None] * w[None, :]
    if HAS_BIAS:
        y += tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + y_off, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _norm_fwd_kernel(
    # pointers: inputs x, residual, weight, bias; outputs y and h (contiguous rows), then
    # mean and rstd (float32, one per row). Pointers a flag leaves unused are None (Triton
    # compiles a None in as a constant: no cost to the launch).
    x_ptr, r_ptr, w_ptr, b_ptr, y_ptr, h_ptr, mean_ptr, rstd_ptr,
    # shape: rows (row = i0 * size1 + i1), columns
    n_rows, n_cols, size1,
    # strides in elements of x and residual: dim 0, dim 1, column
    xs0, xs1, x_col, rs0, rs1, r_col,
    eps, w_offset,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ONE_CHUNK: tl.constexpr, IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    x_row = _row_starts(rows, size1, xs0, xs1)[:, None]
    r_row = _row_starts(rows, size1, rs0, rs1)[:, None]
    o_row = (rows * n_cols)[:, None]
    if ONE_CHUNK:
        # The whole row in registers: read once, reduce, write once.
        cols = tl.arange(0, BLOCK_N)
        col_ok = cols < n_cols
        mask = row_ok[:, None] & col_ok[None, :]
        h = _load_h(x_ptr, r_ptr, h_ptr, x_row + cols[None, :] * x_col, r_row + cols[None, :] * r_col,
                    o_row + cols[None, :], mask, True, HAS_RESIDUAL)
        mean, m2 = _moments(h, mask, n_cols, IS_RMS)
        rstd = _rstd(m2, n_cols, eps, row_ok)
        _store_y(y_ptr, b_ptr, h, mean, rstd, _scale(w_ptr, cols, col_ok, w_offset, HAS_WEIGHT),
                 o_row + cols[None, :], cols, col_ok, mask, HAS_BIAS)
    else:
        # Long rows (BLOCK_M = 1): chunk statistics merged as they come (Chan et al.: with
        # `start` columns seen, mean += delta * n / (start + n) and
        # m2 += m2_chunk + delta^2 * start * n / (start + n)); then a second pass writes y.
        mean = tl.zeros([BLOCK_M], dtype=tl.float32)
        m2 = tl.zeros([BLOCK_M], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = row_ok[:, None] & (cols < n_cols)[None, :]
            h = _load_h(x_ptr, r_ptr, h_ptr, x_row + cols[None, :] * x_col, r_row + cols[None, :] * r_col,
                        o_row + cols[None, :], mask, True, HAS_RESIDUAL)
            n = tl.minimum(n_cols - start, BLOCK_N).to(tl.float32)
            chunk_mean, chunk_m2 = _moments(h, mask, n, IS_RMS)
            seen = start * 1.0
            delta = chunk_mean - mean
            mean += delta * (n / (seen + n))
            m2 += chunk_m2 + delta * delta * (seen * n / (seen + n))
        rstd = _rstd(m2, n_cols, eps, row_ok)
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            col_ok = cols < n_cols
            mask = row_ok[:, None] & col_ok[None, :]
            # h again from x and residual (not from the h just written by other threads).
            h = _load_h(x_ptr, r_ptr, h_ptr, x_row + cols[None, :] * x_col, r_row + cols[None, :] * r_col,
                        o_row + cols[None, :], mask, False, HAS_RESIDUAL)
            _store_y(y_ptr, b_ptr, h, mean, rstd, _scale(w_ptr, cols, col_ok, w_offset, HAS_WEIGHT),
                     o_row + cols[None, :], cols, col_ok, mask, HAS_BIAS)
    if not IS_RMS:
        tl.store(mean_ptr + rows, mean, mask=row_ok)
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)


@triton.jit
def _bwd_tile(dy_ptr, h_ptr, dy_off, h_off, mean, rstd, w, mask):
    """(dy, xhat, g = dy * (w_offset + w)) of one tile, in float32."""
    dy = tl.load(dy_ptr + dy_off, mask=mask, other=0.0)
    h = tl.load(h_ptr + h_off, mask=mask, other=0.0)
    return _bwd_terms(dy, h, mean, rstd, w, mask)


@triton.jit
def _bwd_terms(dy, h, mean, rstd, w, mask):
    """(dy, xhat, g = dy * (w_offset + w)) in float32 from a tile's loaded dy and h."""
    dy = dy.to(tl.float32)
    xhat = tl.where(mask, (h.to(tl.float32) - mean[:, None]) * rstd[:, None], 0.0)
    return dy, xhat, dy * w[None, :]


@triton.jit
def _bwd_rows(dy_ptr, h_ptr, mean_ptr, rstd_ptr, block, n_rows, size1, dys0, dys1, dy_col, hs0, hs1, h_col, cols,
              col_ok, BLOCK_M: tl.constexpr, IS_RMS: tl.constexpr):
    """Row block `block`'s dy and h tiles (in their own dtype) and its mean and rstd; zeros
    for rows past n_rows (a block past the last loads nothing)."""
    rows = (block * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    row_ok = rows < n_rows
    mask = row_ok[:, None] & col_ok[None, :]
    rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
    mean = rstd * 0.0 if IS_RMS else tl.load(mean_ptr + rows, mask=row_ok, other=0.0)
    dy = tl.load(dy_ptr + _row_starts(rows, size1, dys0, dys1)[:, None] + cols[None, :] * dy_col, mask=mask, other=0.0)
    h = tl.load(h_ptr + _row_starts(rows, size1, hs0, hs1)[:, None] + cols[None, :] * h_col, mask=mask, other=0.0)
    return dy, h, mean, rstd


@triton.jit
def _store_dx(dx_ptr, dh_ptr, g, xhat, c_g, c_gx, rstd, dx_off, dh_off, mask, HAS_DH: tl.constexpr):
    dx = (g - c_g[:, None] - xhat * c_gx[:, None]) * rstd[:, None]
    if HAS_DH:
        dx += tl.load(dh_ptr + dh_off, mask=mask, other=0.0).to(tl.float32)
    tl.store(dx_ptr + dx_off, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _norm_bwd_kernel(
    # pointers: dy; dh, the gradient reaching the h output (HAS_DH); h, the tensor the norm
    # was taken over (x, or x + residual); weight; mean (LayerNorm) and rstd per row;
    # outputs dx (contiguous rows), dW and dB; float32 partial sums [n_sums, n_programs +
    # n_groups, n_cols] contiguous: dW's (HAS_WEIGHT), then dB's (HAS_BIAS), a row for each
    # program, then one for each group; int32 counters left at zero (`_finish_sums`).
    # Pointers a flag leaves unused are None, as in the forward.
    dy_ptr, dh_ptr, h_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_ptr, db_ptr, part_ptr, count_ptr,
    # shape: rows (row = i0 * size1 + i1), columns
    n_rows, n_cols, size1,
    # strides in elements of dy, dh and h: dim 0, dim 1, column
    dys0, dys1, dy_col, dhs0, dhs1, dh_col, hs0, hs1, h_col,
    w_offset,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ONE_CHUNK: tl.constexpr, IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_DH: tl.constexpr,
    GROUP: tl.constexpr, SUM_COLS: tl.constexpr,
):
    # Persistent: program p takes row blocks p, p + P, p + 2P, ... (a fixed set, so the
    # dW/dB partial sums, and their total, do not depend on scheduling).
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    n_blocks = tl.cdiv(n_rows, BLOCK_M)
    if HAS_WEIGHT or HAS_BIAS:
        part_rows = n_programs + tl.cdiv(n_programs, GROUP)
        db_part = part_ptr + (part_rows.to(tl.int64) * n_cols if HAS_WEIGHT else 0)
        dw_row = part_ptr + pid.to(tl.int64) * n_cols
        db_row = db_part + pid.to(tl.int64) * n_cols
    if ONE_CHUNK:
        cols = tl.arange(0, BLOCK_N)
        col_ok = cols < n_cols
        w = _scale(w_ptr, cols, col_ok, w_offset, HAS_WEIGHT)
        dw = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        db = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        # Each row block's dy, h and statistics are loaded one iteration ahead, so that they
        # are in flight while the block before is reduced and stored (one program an SM: its
        # own loads are all that cover the memory latency).
        dy_n, h_n, mean_n, rstd_n = _bwd_rows(dy_ptr, h_ptr, mean_ptr, rstd_ptr, pid, n_rows, size1, dys0, dys1,
                                              dy_col, hs0, hs1, h_col, cols, col_ok, BLOCK_M, IS_RMS)
        for block in range(pid, n_blocks, n_programs):
            rows = (block * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)  # rows < 2^31; offsets int64
            row_ok = rows < n_rows
            mask = row_ok[:, None] & col_ok[None, :]
            dy_t, h_t, mean, rstd = dy_n, h_n, mean_n, rstd_n
            dy_n, h_n, mean_n, rstd_n = _bwd_rows(dy_ptr, h_ptr, mean_ptr, rstd_ptr, block + n_programs, n_rows, size1,
                                                  dys0, dys1, dy_col, hs0, hs1, h_col, cols, col_ok, BLOCK_M, IS_RMS)
            dy, xhat, g = _bwd_terms(dy_t, h_t, mean, rstd, w, mask)
            c_gx = tl.sum(g * xhat, axis=1) / n_cols
            c_g = c_gx * 0.0 if IS_RMS else tl.sum(g, axis=1) / n_cols
            _store_dx(dx_ptr, dh_ptr, g, xhat, c_g, c_gx, rstd, (rows * n_cols)[:, None] + cols[None, :],
                      _row_starts(rows, size1, dhs0, dhs1)[:, None] + cols[None, :] * dh_col, mask, HAS_DH)
            dw += dy * xhat
            db += dy
        if HAS_WEIGHT:
            tl.store(dw_row + cols, tl.sum(dw, axis=0), mask=col_ok)
        if HAS_BIAS:
            tl.store(db_row + cols, tl.sum(db, axis=0), mask=col_ok)
    else:
        # Long rows (BLOCK_M = 1), two passes a row: the row sums c_g, c_gx, then dx. The
        # partial rows are this program's own: its first row block writes them, the later
        # ones read-add-write (so the launcher need not zero them).
        for block in range(pid, n_blocks, n_programs):
            rows = (block + tl.arange(0, 1)).to(tl.int64)
            row_ok = rows < n_rows
            rstd = tl.load(rstd_ptr + rows)
            mean = rstd * 0.0 if IS_RMS else tl.load(mean_ptr + rows)
            dy_row = _row_starts(rows, size1, dys0, dys1)[:, None]
            h_row = _row_starts(rows, size1, hs0, hs1)[:, None]
            dh_row = _row_starts(rows, size1, dhs0, dhs1)[:, None]
            c_gx = tl.zeros([1], dtype=tl.float32)
            c_g = tl.zeros([1], dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                col_ok = cols < n_cols
                mask = row_ok[:, None] & col_ok[None, :]
                dy, xhat, g = _bwd_tile(dy_ptr, h_ptr, dy_row + cols[None, :] * dy_col, h_row + cols[None, :] * h_col,
                                        mean, rstd, _scale(w_ptr, cols, col_ok, w_offset, HAS_WEIGHT), mask)
                c_gx += tl.sum(g * xhat, axis=1)
                if not IS_RMS:
                    c_g += tl.sum(g, axis=1)
            c_gx = c_gx / n_cols
            c_g = c_g / n_cols
            for start in range(0, n_cols, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                col_ok = cols < n_cols
                mask = row_ok[:, None] & col_ok[None, :]
                dy, xhat, g = _bwd_tile(dy_ptr, h_ptr, dy_row + cols[None, :] * dy_col, h_row + cols[None, :] * h_col,
                                        mean, rstd, _scale(w_ptr, cols, col_ok, w_offset, HAS_WEIGHT), mask)
                _store_dx(dx_ptr, dh_ptr, g, xhat, c_g, c_gx, rstd, (rows * n_cols)[:, None] + cols[None, :],
                          dh_row + cols[None, :] * dh_col, mask, HAS_DH)
                seen = col_ok & (block != pid)
                if HAS_WEIGHT:
                    part = dw_row + cols
                    tl.store(part, tl.load(part, mask=seen, other=0.0) + tl.sum(dy * xhat, axis=0), mask=col_ok)
                if HAS_BIAS:
                    part = db_row + cols
                    tl.store(part, tl.load(part, mask=seen, other=0.0) + tl.sum(dy, axis=0), mask=col_ok)
    if HAS_WEIGHT or HAS_BIAS:
        _finish_sums(part_ptr, db_part, dw_ptr, db_ptr, count_ptr, pid, n_programs, n_cols,
                     HAS_WEIGHT, HAS_BIAS, GROUP, SUM_COLS)


@triton.jit
def _sum_rows(src_ptr, dst_ptr, first, n, n_cols, SUM_ROWS: tl.constexpr, SUM_COLS: tl.constexpr):
    """dst[c] = sum of src[first + i, c] over i < n (src float32, rows n_cols apart), cast to
    dst's dtype. The order of the additions depends on n and the tile only, never on which
    program sums. Loads go to L2 (.cg): other programs wrote these rows, and a line this SM's
    L1 holds from its own partial row may hold a neighbouring row's stale head."""
    for start in range(0, n_cols, SUM_COLS):
        cols = start + tl.arange(0, SUM_COLS)
        col_ok = cols < n_cols
        acc = tl.zeros([SUM_ROWS, SUM_COLS], dtype=tl.float32)
        for r in range(0, n, SUM_ROWS):
            rows = r + tl.arange(0, SUM_ROWS)
            mask = (rows < n)[:, None] & col_ok[None, :]
            offsets = (first + rows).to(tl.int64)[:, None] * n_cols + cols[None, :]
            acc += tl.load(src_ptr + offsets, mask=mask, other=0.0, cache_modifier=".cg")
        tl.store(dst_ptr + cols, tl.sum(acc, axis=0).to(dst_ptr.dtype.element_ty), mask=col_ok)


@triton.jit
def _finish_sums(dw_part, db_part, dw_ptr, db_ptr, count_ptr, pid, n_programs, n_cols,
                 HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, GROUP: tl.constexpr, SUM_COLS: tl.constexpr):
    """After this program wrote its partial rows (row pid of dw_part and db_part): the last of
    its group (programs GROUP * g to GROUP * g + GROUP - 1) to get here sums the group's rows
    into the group row (row n_programs + g), and the last group to finish sums the group rows
    into dW and dB.
    count_ptr: counter 0 counts finished groups, counter 1 + g group g's finished programs;
    each is reset by its last taker, so the next launch finds them at zero. Stores before a
    ticket are released by it (a barrier first: every thread's stores), and the taker of the
    last ticket acquires them all (the atomics on one counter form one release sequence)."""
    n_groups = tl.cdiv(n_programs, GROUP)
    group = pid // GROUP
    first = group * GROUP
    members = tl.minimum(GROUP, n_programs - first)
    group_row = (n_programs + group).to(tl.int64) * n_cols
    tl.debug_barrier()
    if tl.atomic_add(count_ptr + 1 + group, 1, sem="acq_rel") == members - 1:
        tl.atomic_xchg(count_ptr + 1 + group, 0, sem="relaxed")
        if HAS_WEIGHT:
            _sum_rows(dw_part, dw_part + group_row, first, members, n_cols, GROUP, SUM_COLS)
        if HAS_BIAS:
            _sum_rows(db_part, db_part + group_row, first, members, n_cols, GROUP, SUM_COLS)
        tl.debug_barrier()
        if tl.atomic_add(count_ptr, 1, sem="acq_rel") == n_groups - 1:
            tl.atomic_xchg(count_ptr, 0, sem="relaxed")
            if HAS_WEIGHT:
                _sum_rows(dw_part, dw_ptr, n_programs, n_groups, n_cols, GROUP, SUM_COLS)
            if HAS_BIAS:
                _sum_rows(db_part, db_ptr, n_programs, n_groups, n_cols, GROUP, SUM_COLS)


# ---------------------------------------------------------------------------------------
# Launch helpers
# ---------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1024)
def row_config(n_rows: int, n_cols: int, direction: str) -> tuple[int, int, bool, int]:
    """(BLOCK_M, BLOCK_N, ONE_CHUNK, num_warps) for a pass ("fwd" or "bwd"): rows up to
    MAX_FUSED_COLS whole, short ones packed to MIN_TILE[direction] elements a program; longer rows in
    CHUNK_COLS chunks. PER_THREAD elements a thread set the warps (4 to MAX_WARPS)."""
    one_chunk = n_cols <= MAX_FUSED_COLS[direction]
    block_n = next_power_of_2(n_cols) if one_chunk else CHUNK_COLS
    block_m = max(1, min(next_power_of_2(n_rows), MIN_TILE[direction] // block_n)) if one_chunk else 1
    num_warps = min(MAX_WARPS[direction], max(4, block_m * block_n // (32 * PER_THREAD[direction])))
    return block_m, block_n, one_chunk, num_warps


@functools.lru_cache(maxsize=16)
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def backward_programs(device: torch.device, n_blocks: int, num_warps: int) -> int:
    """Persistent backward programs: about WARPS_PER_SM warps' worth an SM, enough rows in
    flight to cover memory latency while every program stays resident (a program that
    waits for a slot would finish its equal share of rows a whole turn late). The
    interpreter gets 2, so each walks several row blocks as on the GPU."""
    per_device = 2 if device.type != "cuda" else _sm_count(device) * max(1, WARPS_PER_SM // num_warps)
    return max(1, min(n_blocks, per_device))


def row_layout(shape: torch.Size, *tensors: torch.Tensor) -> tuple[int, list[list[int]]] | None:
    """(size1, [[s0, s1, column stride] per tensor]) addressing rows of `tensors` (all of
    `shape`) through two collapsed leading dims; None when the leading dims need more."""
    sizes, strides = collapse_dims(shape[:-1], *(t.stride()[:-1] for t in tensors))
    if len(sizes) > 2:
        return None
    if len(sizes) == 1:
        return 1, [[s[0], 0, t.stride(-1)] for s, t in zip(strides, tensors)]
    return sizes[1], [[s[0], s[1], t.stride(-1)] for s, t in zip(strides, tensors)]


def rows_of(shape: torch.Size, *tensors: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], int, list[list[int]]]:
    """The tensors (contiguous copies when their leading dims do not collapse to two, a
    layout the kernels do not address), size1 and their strides for the kernels."""
    for t in tensors:
        if not t.is_contiguous():
            break
    else:  # the common case, kept short (host time)
        return tensors, 1, [[shape[-1], 0, 1]] * len(tensors)
    layout = row_layout(shape, *tensors)
    if layout is None:
        tensors = tuple(t.contiguous() for t in tensors)
        layout = row_layout(shape, *tensors)
    return tensors, *layout


@functools.lru_cache(maxsize=1024)
def fwd_plan(n_rows: int, n_cols: int, is_rms: bool, has_weight: bool, has_bias: bool,
             has_residual: bool) -> tuple[tuple[int], dict, int]:
    """(grid, constexprs, num_warps) of the forward launch, worked out once per shape and
    flags (the constexprs dict is shared by the launches: nothing may change it)."""
    block_m, block_n, one_chunk, num_warps = row_config(n_rows, n_cols, "fwd")
    return ((cdiv(n_rows, block_m),), dict(BLOCK_M=block_m, BLOCK_N=block_n, ONE_CHUNK=one_chunk, IS_RMS=is_rms,
                                            HAS_WEIGHT=has_weight, HAS_BIAS=has_bias, HAS_RESIDUAL=has_residual),
            num_warps)


def _fwd_template(is_rms: bool, tail: tuple, inputs: tuple) -> LaunchTemplate:
    """The forward's template for a key's first call (inputs: x, residual, weight, bias;
    tail: n_rows and n_cols first)."""
    grid, constexprs, num_warps = fwd_plan(tail[0], tail[1], is_rms, inputs[2] is not None, inputs[3] is not None,
                                           inputs[1] is not None)
    return LaunchTemplate("rms_norm_fwd" if is_rms else "layer_norm_fwd", _norm_fwd_kernel, grid, tail,
                          constexprs, num_warps, 1)


@functools.lru_cache(maxsize=1024)
def bwd_plan(device: torch.device, n_rows: int, n_cols: int, is_rms: bool, has_weight: bool, has_bias: bool,
             has_dh: bool) -> tuple[int, int, dict, int]:
    """(programs, partial-sum rows per sum, constexprs, num_warps) of the backward launch,
    worked out once per device, shape and flags (the dict is shared, as in fwd_plan)."""
    block_m, block_n, one_chunk, num_warps = row_config(n_rows, n_cols, "bwd")
    programs = backward_programs(device, cdiv(n_rows, block_m), num_warps)
    group, sum_cols = sum_plan(programs, n_cols, num_warps)
    return (programs, programs + cdiv(programs, group),
            dict(BLOCK_M=block_m, BLOCK_N=block_n, ONE_CHUNK=one_chunk, IS_RMS=is_rms, HAS_WEIGHT=has_weight,
                 HAS_BIAS=has_bias, HAS_DH=has_dh, GROUP=group, SUM_COLS=sum_cols),
            num_warps)


@functools.lru_cache(maxsize=1024)
def sum_plan(programs: int, n_cols: int, num_warps: int) -> tuple[int, int]:
    """(GROUP, SUM_COLS) for summing `programs` partial rows in two levels. GROUP, programs a
    group: the power of two (about sqrt(programs)) that leaves the last program to finish
    the fewest rows to sum (its group's, then the group rows), with at most MAX_COUNTERS - 1
    groups. Rows are summed in tiles of GROUP rows by SUM_COLS columns, SUM_PER_THREAD
    elements a thread (more would raise the kernel's registers past two programs an SM)."""
    group = min((1 << i for i in range(programs.bit_length() + 1) if cdiv(programs, 1 << i) < MAX_COUNTERS),
                key=lambda g: g + cdiv(programs, g))
    sum_cols = max(1, min(next_power_of_2(n_cols), SUM_PER_THREAD * 32 * num_warps // group))
    return group, sum_cols


# ---------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------

def check_eps(eps: object) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"eps must be a float, got {type(eps).__name__}")
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be finite and >= 0, got {eps}")
    return float(eps)


def check_weight_offset(weight_offset: object, weight: torch.Tensor | None) -> float:
    if isinstance(weight_offset, bool) or not isinstance(weight_offset, (int, float)):
        raise TypeError(f"weight_offset must be a float, got {type(weight_offset).__name__}")
    if not math.isfinite(weight_offset):
        raise ValueError(f"weight_offset must be finite, got {weight_offset}")
    if weight is None and weight_offset != 0:
        raise ValueError("weight_offset scales (weight_offset + weight); it needs a weight (got weight=None)")
    return float(weight_offset)


def check_inputs(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor | None,
                 bias: torch.Tensor | None = None) -> None:
    """x: a float tensor of at least one dim; residual: x's shape and dtype; weight and
    bias: None or a float tensor of shape (hidden,) on x's device. (Runs on every forward
    call: plain comparisons, no per-call containers.)"""
    check_tensor("x", x)
    if x.dim() == 0:
        raise ValueError("x must have at least one dim (the normalised last dim); got a 0-d tensor")
    shape = x.shape
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        check_tensor(name, t)
        if t.device != x.device:
            check_same_device(x=x, **{name: t})  # raises, naming the argument
        if t.dim() != 1 or t.shape[0] != shape[-1]:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected ({shape[-1]},): x's last dim")
    if residual is not None:
        check_tensor("residual", residual)
        if residual.device != x.device:
            check_same_device(x=x, residual=residual)
        if residual.shape != shape:
            raise ValueError(f"residual has shape {tuple(residual.shape)} but x has {tuple(shape)}")
        if residual.dtype != x.dtype:
            raise TypeError(f"residual has dtype {dtype_name(residual.dtype)} but x has "
                            f"{dtype_name(x.dtype)}; h = x + residual is kept in x's dtype")


# ---------------------------------------------------------------------------------------
# Launchers shared by both norms
# ---------------------------------------------------------------------------------------

def norm_fwd(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
             residual: torch.Tensor | None, eps: float, weight_offset: float, is_rms: bool):
    """(y, h, mean, rstd): y in x's dtype (contiguous, x's shape); h = x + residual (None
    without residual); mean (None for RMSNorm) and rstd in float32, one per row, flat (the
    custom ops' launchers view them as x.shape[:-1]). Inputs already checked. Runs on every
    call: the common case (contiguous x) allocates only the outputs and does no layout work."""
    shape = x.shape
    n_cols = shape[-1]
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    h = torch.empty_like(y) if residual is not None else None
    n_rows = y.numel() // n_cols if n_cols else math.prod(shape[:-1])
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    mean = None if is_rms else torch.empty(n_rows, dtype=torch.float32, device=x.device)
    if n_rows == 0 or n_cols == 0:
        return y, h, mean, rstd
    (x, residual), size1, (x_strides, r_strides) = rows_of(shape, x, residual if h is not None else x)
    # A strided 1-D weight or bias is copied: (hidden,) elements, next to (rows, hidden).
    inputs = (x, residual if h is not None else None, weight.contiguous() if weight is not None else None,
              bias.contiguous() if bias is not None else None)
    tail = (n_rows, n_cols, size1, *x_strides, *r_strides, eps, weight_offset)
    # y, h, mean and rstd are fresh, aligned, and of the dtypes and presence that x, the
    # residual and is_rms decide: the inputs' layouts key them.
    key = (is_rms, x.device, tail, math.copysign(1.0, weight_offset), head_layout(inputs))
    template(key, _fwd_template, is_rms, tail, inputs)(*inputs, y, h, mean, rstd)
    return y, h, mean, rstd


def norm_bwd(dy: torch.Tensor, dh: torch.Tensor | None, h: torch.Tensor, weight: torch.Tensor | None,
             bias: torch.Tensor | None, mean: torch.Tensor | None, rstd: torch.Tensor, weight_offset: float,
             is_rms: bool):
    """(dx, dW, dB): dx in h's dtype (contiguous; with a residual, also the residual's
    gradient), dW and dB in weight's and bias's dtypes (None where that tensor is None;
    bias is read for its dtype only). Inputs already checked. One launch; allocates dx, dW,
    dB and the partial sums."""
    n_cols = h.shape[-1]
    n_rows = rstd.numel()
    dx = torch.empty_like(h, memory_format=torch.contiguous_format)
    dw = torch.empty_like(weight, memory_format=torch.contiguous_format) if weight is not None else None
    db = torch.empty_like(bias, memory_format=torch.contiguous_format) if bias is not None else None
    n_sums = (weight is not None) + (bias is not None)
    if n_rows == 0 or n_cols == 0:
        for t in (dw, db):
            if t is not None:
                t.zero_()
        return dx, dw, db
    has_dh = dh is not None
    (dy, dh, h), size1, strides = rows_of(h.shape, dy, dh if has_dh else dy, h)
    programs, part_rows, constexprs, num_warps = bwd_plan(h.device, n_rows, n_cols, is_rms, weight is not None,
                                                          bias is not None, has_dh)
    # A row a program, then a row a group: every element written before it is read.
    partials = torch.empty((n_sums, part_rows, n_cols), dtype=torch.float32, device=h.device) if n_sums else None
    inputs = (dy, dh if has_dh else None, h, weight.contiguous() if weight is not None else None, mean, rstd)
    tail = (n_rows, n_cols, size1, *strides[0], *strides[1], *strides[2], weight_offset)
    # dx, dW, dB and the partial sums are fresh and aligned, the counters too (zeroed once);
    # their dtypes and presence follow h's, weight's and bias's.
    key = (is_rms, h.device, programs, tail, math.copysign(1.0, weight_offset),
           bias.dtype if bias is not None else None, head_layout(inputs))
    template(key, LaunchTemplate, "rms_norm_bwd" if is_rms else "layer_norm_bwd", _norm_bwd_kernel, (programs,),
             tail, constexprs, num_warps, 1)(*inputs, dx, dw, db, partials,
                                             zeroed_counters(h.device) if n_sums else None)
    return dx, dw, db
