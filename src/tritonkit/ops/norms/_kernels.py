"""The kernels RMSNorm and LayerNorm share (their launch rules and launchers: `_rows.py`).

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

Rows up to `_rows.MAX_FUSED_COLS` (16384 forward, 8192 backward) are held whole in registers, one
row (or several short rows) per program: one read of each input, one write of each output.
Longer rows are walked in `_rows.CHUNK_COLS` chunks, twice (statistics, then output; the second
read mostly hits L2); LayerNorm merges the chunks' means and squared deviations with Chan's
formula, so no E[x^2] - E[x]^2 cancellation.
"""

import triton
import triton.language as tl


@triton.jit
def _row_starts(rows, size1, strides):
    """Element offset of each row's first element; rows index two collapsed dims, strides
    (s0, s1, column)."""
    s0, s1, _ = strides
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
    # shape: (rows, columns, size1), row = i0 * size1 + i1
    shape,
    # strides in elements of x and residual: (dim 0, dim 1, column)
    x_strides, r_strides,
    eps, w_offset,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ONE_CHUNK: tl.constexpr, IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
):
    n_rows, n_cols, size1 = shape
    x_col, r_col = x_strides[2], r_strides[2]
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    x_row = _row_starts(rows, size1, x_strides)[:, None]
    r_row = _row_starts(rows, size1, r_strides)[:, None]
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
def _bwd_chunk(dy_ptr, h_ptr, w_ptr, dy_row, h_row, start, row_ok, mean, rstd, n_cols, w_offset, dy_col, h_col,
               BLOCK_N: tl.constexpr, HAS_WEIGHT: tl.constexpr):
    """Columns [start, start + BLOCK_N) of a long row: (cols, col_ok, mask) and their (dy,
    xhat, g = dy * (w_offset + w)) in float32."""
    cols = start + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    mask = row_ok[:, None] & col_ok[None, :]
    dy_off = dy_row + cols[None, :] * dy_col
    h_off = h_row + cols[None, :] * h_col
    w = _scale(w_ptr, cols, col_ok, w_offset, HAS_WEIGHT)
    dy = tl.load(dy_ptr + dy_off, mask=mask, other=0.0)
    h = tl.load(h_ptr + h_off, mask=mask, other=0.0)
    dy, xhat, g = _bwd_terms(dy, h, mean, rstd, w, mask)
    return cols, col_ok, mask, dy, xhat, g


@triton.jit
def _bwd_terms(dy, h, mean, rstd, w, mask):
    """(dy, xhat, g = dy * (w_offset + w)) in float32 from a tile's loaded dy and h."""
    dy = dy.to(tl.float32)
    xhat = tl.where(mask, (h.to(tl.float32) - mean[:, None]) * rstd[:, None], 0.0)
    return dy, xhat, dy * w[None, :]


@triton.jit
def _bwd_rows(dy_ptr, h_ptr, mean_ptr, rstd_ptr, block, n_rows, size1, dy_strides, h_strides, cols, col_ok,
              BLOCK_M: tl.constexpr, IS_RMS: tl.constexpr):
    """Row block `block`'s dy and h tiles (in their own dtype) and its mean and rstd; zeros
    for rows past n_rows (a block past the last loads nothing)."""
    rows = (block * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    row_ok = rows < n_rows
    mask = row_ok[:, None] & col_ok[None, :]
    rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
    mean = rstd * 0.0 if IS_RMS else tl.load(mean_ptr + rows, mask=row_ok, other=0.0)
    dy = tl.load(dy_ptr + _row_starts(rows, size1, dy_strides)[:, None] + cols[None, :] * dy_strides[2], mask=mask,
                 other=0.0)
    h = tl.load(h_ptr + _row_starts(rows, size1, h_strides)[:, None] + cols[None, :] * h_strides[2], mask=mask,
                other=0.0)
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
    # shape: (rows, columns, size1), row = i0 * size1 + i1
    shape,
    # strides in elements of dy, dh and h: (dim 0, dim 1, column)
    dy_strides, dh_strides, h_strides,
    w_offset,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ONE_CHUNK: tl.constexpr, IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_DH: tl.constexpr,
    GROUP: tl.constexpr, SUM_COLS: tl.constexpr,
):
    # Persistent: program p takes row blocks p, p + P, p + 2P, ... (a fixed set, so the
    # dW/dB partial sums, and their total, do not depend on scheduling).
    n_rows, n_cols, size1 = shape
    dy_col, dh_col, h_col = dy_strides[2], dh_strides[2], h_strides[2]
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
        dy_n, h_n, mean_n, rstd_n = _bwd_rows(dy_ptr, h_ptr, mean_ptr, rstd_ptr, pid, n_rows, size1, dy_strides,
                                              h_strides, cols, col_ok, BLOCK_M, IS_RMS)
        for block in range(pid, n_blocks, n_programs):
            rows = (block * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)  # rows < 2^31; offsets int64
            row_ok = rows < n_rows
            mask = row_ok[:, None] & col_ok[None, :]
            dy_t, h_t, mean, rstd = dy_n, h_n, mean_n, rstd_n
            dy_n, h_n, mean_n, rstd_n = _bwd_rows(dy_ptr, h_ptr, mean_ptr, rstd_ptr, block + n_programs, n_rows, size1,
                                                  dy_strides, h_strides, cols, col_ok, BLOCK_M, IS_RMS)
            dy, xhat, g = _bwd_terms(dy_t, h_t, mean, rstd, w, mask)
            c_gx = tl.sum(g * xhat, axis=1) / n_cols
            c_g = c_gx * 0.0 if IS_RMS else tl.sum(g, axis=1) / n_cols
            _store_dx(dx_ptr, dh_ptr, g, xhat, c_g, c_gx, rstd, (rows * n_cols)[:, None] + cols[None, :],
                      _row_starts(rows, size1, dh_strides)[:, None] + cols[None, :] * dh_col, mask, HAS_DH)
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
            dy_row = _row_starts(rows, size1, dy_strides)[:, None]
            h_row = _row_starts(rows, size1, h_strides)[:, None]
            dh_row = _row_starts(rows, size1, dh_strides)[:, None]
            c_gx = tl.zeros([1], dtype=tl.float32)
            c_g = tl.zeros([1], dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                cols, col_ok, mask, dy, xhat, g = _bwd_chunk(dy_ptr, h_ptr, w_ptr, dy_row, h_row, start, row_ok, mean,
                                                             rstd, n_cols, w_offset, dy_col, h_col, BLOCK_N,
                                                             HAS_WEIGHT)
                c_gx += tl.sum(g * xhat, axis=1)
                if not IS_RMS:
                    c_g += tl.sum(g, axis=1)
            c_gx = c_gx / n_cols
            c_g = c_g / n_cols
            for start in range(0, n_cols, BLOCK_N):
                cols, col_ok, mask, dy, xhat, g = _bwd_chunk(dy_ptr, h_ptr, w_ptr, dy_row, h_row, start, row_ok, mean,
                                                             rstd, n_cols, w_offset, dy_col, h_col, BLOCK_N,
                                                             HAS_WEIGHT)
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
