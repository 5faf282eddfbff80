"""Softmax along any dim, forward and backward, with float32 arithmetic inside.

Forward:  y = exp(x - max(x)) / sum(exp(x - max(x)))          per row
Backward: dx = y * (dy - sum(y * dy))                          per row

A "row" is the 1-D slice along `dim`; the other dims (up to three after collapsing)
index rows through their strides, so no input is copied. Rows that fit on chip
(<= MAX_FUSED_COLS) take one pass: load, reduce, write. Longer rows are cut into chunks:
a stats item writes one chunk's (max, sum of exponentials) -- or, backward, sum(y * dy) --
and an apply item merges its row's chunk stats (the online-softmax merge) and writes its
chunk. Both kinds run in one launch, in a ticketed order that keeps the chunk an apply
re-reads in L2 (see _softmax_chunks_kernel). The same kernels serve forward and backward
through the BACKWARD flag.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from .._op import Op
from .._sharding import Replicate, Shard, only_shard
from .._checks import check_same_device, check_tensor
from .._launch import Launch, LaunchTemplate
from .._layout import cdiv, collapse_dims, next_power_of_2, pad_front
from .._templates import Templates, head_layout

MAX_FUSED_COLS = 32768     # longest row held on chip by one program (fp32: 128 KB)
CHUNK_COLS = 8192          # columns per chunk for long rows, when few (the H200 sweep's best: notes/add_softmax.md)
LAG_BYTES = 8 << 20        # how far the one-launch long-row schedule reads ahead (well inside L2)
PROGRAMS_PER_SM = 16       # programs the one-launch schedule starts per SM
RELOAD_COLS = 32768        # 16-bit rows from this long are read twice rather than held in float32
ROW_DIMS = 3               # collapsed dims that index rows inside the kernels


@triton.jit
def _row_offsets(rows, row_sizes, strides):
    """Element offset of each row's first element, for rows indexed by 3 collapsed dims:
    row_sizes (size1, size2), strides (s0, s1, s2, column)."""
    size1, size2 = row_sizes
    s0, s1, s2, _ = strides
    i2 = rows % size2
    rest = rows // size2
    i1 = rest % size1
    i0 = rest // size1
    return i0 * s0 + i1 * s1 + i2 * s2


@triton.jit
def _load_tile(a_ptr, b_ptr, a_off, b_off, mask, BACKWARD: tl.constexpr,
               KEEP_DTYPE: tl.constexpr, EVICTION: tl.constexpr):
    """A tile of the inputs: (y, dy) backward; (x, x) forward, -inf where masked. In float32,
    or (KEEP_DTYPE) in the inputs' own dtype."""
    if BACKWARD:
        first = tl.load(a_ptr + a_off, mask=mask, other=0.0, eviction_policy=EVICTION)
        second = tl.load(b_ptr + b_off, mask=mask, other=0.0, eviction_policy=EVICTION)
    else:
        first = tl.load(a_ptr + a_off, mask=mask, other=-float("inf"), eviction_policy=EVICTION)
        second = first
    if not KEEP_DTYPE:
        first = first.to(tl.float32)
        second = second.to(tl.float32)
    return first, second


@triton.jit
def _larger(a, b):
    return tl.where(a > b, a, b)


@triton.jit
def _row_max_16bit(x):
    """Row max (float32) of a 16-bit tile that the caller widens to float32 afterwards. tl.max
    would widen the tile with that very op, the two would merge, and the whole float32 tile
    would stay alive across the reduction (64 instead of 32 registers at 32768 columns). So
    bf16 is widened through its bits (exact), and fp16 compared in fp16 (exact; a select-
    reduce over bf16 compiled to 63 registers, over fp16 to 32)."""
    if x.dtype == tl.bfloat16:
        row_max = tl.max((x.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True), axis=1)
    else:
        row_max = tl.reduce(x, 1, _larger).to(tl.float32)
    return row_max


@triton.jit
def _softmax_rows_kernel(
    # pointers: forward reads a=x and writes out=y; backward reads a=y, b=dy, writes out=dx
    a_ptr, b_ptr, out_ptr,
    # shape: rows, columns; the rows collapsed into 3 dims, (size1, size2) (dim 0 implied)
    n_rows, n_cols, row_sizes,
    # strides in elements, per tensor: (row dims 0..2, column)
    a_strides, b_strides, o_strides,
    # meta
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr, BACKWARD: tl.constexpr,
    RELOAD: tl.constexpr,
):
    # BLOCK_M rows a program, each row one [BLOCK_M, BLOCK_N] tile held in registers.
    # RELOAD (16-bit inputs, long rows): the tile is held in its own dtype, half the
    # registers of float32, so two programs fit on an SM and one's loads overlap the other's
    # arithmetic; the row statistic is taken from it, then the tile is read again (from L2,
    # which the first read asked to keep it) for the output.
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    a_row = _row_offsets(rows, row_sizes, a_strides)[:, None]
    b_row = _row_offsets(rows, row_sizes, b_strides)[:, None]
    o_row = _row_offsets(rows, row_sizes, o_strides)[:, None]
    cols = tl.arange(0, BLOCK_N)
    mask = row_ok[:, None] & (cols[None, :] < n_cols) if not EVEN_N else row_ok[:, None]
    a_off = a_row + cols[None, :] * a_strides[3]
    b_off = b_row + cols[None, :] * b_strides[3]
    if RELOAD:
        x, dy = _load_tile(a_ptr, b_ptr, a_off, b_off, mask, BACKWARD, True, "evict_last")
        if BACKWARD:
            dot = tl.sum(x.to(tl.float32) * dy.to(tl.float32), axis=1)  # x holds y here
        else:
            row_max = _row_max_16bit(x)
            row_sum = tl.sum(tl.exp(x.to(tl.float32) - row_max[:, None]), axis=1)
        x, dy = _load_tile(a_ptr, b_ptr, a_off, b_off, mask, BACKWARD, False, "evict_first")
    else:
        x, dy = _load_tile(a_ptr, b_ptr, a_off, b_off, mask, BACKWARD, False, "")
        if BACKWARD:
            dot = tl.sum(x * dy, axis=1)
        else:
            row_max = tl.max(x, axis=1)
            row_sum = tl.sum(tl.exp(x - row_max[:, None]), axis=1)
    if BACKWARD:
        result = x * (dy - dot[:, None])
    else:
        # A row of all -inf gives max -inf and exp(nan): NaN, exactly as torch does.
        result = tl.exp(x - row_max[:, None]) * (1.0 / row_sum)[:, None]
    tl.store(out_ptr + o_row + cols[None, :] * o_strides[3], result.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _chunk_stats(
    item, a_ptr, b_ptr, stat1_ptr, stat2_ptr, n_cols, n_chunks, row_sizes, a_strides, b_strides,
    CHUNK: tl.constexpr, BACKWARD: tl.constexpr,
):
    # Chunk `item` (row item // n_chunks): its (max, sum of exp(x - max)), or sum(y * dy).
    row = item // n_chunks
    cols = (item % n_chunks) * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    a_off = _row_offsets(row, row_sizes, a_strides) + cols * a_strides[3]
    b_off = _row_offsets(row, row_sizes, b_strides) + cols * b_strides[3]
    x, dy = _load_tile(a_ptr, b_ptr, a_off, b_off, mask, BACKWARD, False, "")
    if BACKWARD:
        tl.store(stat1_ptr + item, tl.sum(x * dy, axis=0))  # x holds y here
    else:
        chunk_max = tl.max(x, axis=0)
        # An all -inf chunk contributes nothing (sum 0) rather than NaN to its row.
        shifted = tl.where(chunk_max == -float("inf"), -float("inf"), x - chunk_max)
        tl.store(stat1_ptr + item, chunk_max)
        tl.store(stat2_ptr + item, tl.sum(tl.exp(shifted), axis=0))


@triton.jit
def _chunk_apply(
    item, a_ptr, b_ptr, out_ptr, stat1_ptr, stat2_ptr, n_cols, n_chunks, row_sizes, a_strides, b_strides,
    o_strides, CHUNK: tl.constexpr, BLOCK_CHUNKS: tl.constexpr, BACKWARD: tl.constexpr,
):
    # Chunk `item` of the output, from its row's chunk stats. The stats are read past L1
    # (.cg): in the one-launch schedule an L1 line could hold a neighbouring row's stats
    # from before they were final.
    row = item // n_chunks
    stat_idx = row * n_chunks + tl.arange(0, BLOCK_CHUNKS)
    stat_mask = tl.arange(0, BLOCK_CHUNKS) < n_chunks
    cols = (item % n_chunks) * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    a_off = _row_offsets(row, row_sizes, a_strides) + cols * a_strides[3]
    b_off = _row_offsets(row, row_sizes, b_strides) + cols * b_strides[3]
    o_off = _row_offsets(row, row_sizes, o_strides) + cols * o_strides[3]
    # The row's stats first, then the chunk: the stats are few and the chunk's loads then
    # issue back to back (the order the schedule was tuned with, notes/add_softmax.md).
    if BACKWARD:
        dot = tl.sum(tl.load(stat1_ptr + stat_idx, mask=stat_mask, other=0.0, cache_modifier=".cg"), axis=0)
        y, dy = _load_tile(a_ptr, b_ptr, a_off, b_off, mask, BACKWARD, False, "")
        result = y * (dy - dot)
    else:
        # Online-softmax merge: sum_c s_c * exp(m_c - M), with M the row max.
        chunk_max = tl.load(stat1_ptr + stat_idx, mask=stat_mask, other=-float("inf"), cache_modifier=".cg")
        chunk_sum = tl.load(stat2_ptr + stat_idx, mask=stat_mask, other=0.0, cache_modifier=".cg")
        row_max = tl.max(chunk_max, axis=0)
        scale = tl.where(chunk_max == -float("inf"), 0.0, tl.exp(chunk_max - row_max))
        row_sum = tl.sum(chunk_sum * scale, axis=0)
        x, _ = _load_tile(a_ptr, b_ptr, a_off, b_off, mask, BACKWARD, False, "")
        result = tl.exp(x - row_max) * (1.0 / row_sum)
    tl.store(out_ptr + o_off, result.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_chunks_kernel(
    # pointers: inputs and output as in _softmax_rows_kernel; float32 stats [n_rows, n_chunks];
    # int32 sync [1 + n_rows], zeroed: a ticket counter, then chunks finished per row
    a_ptr, b_ptr, out_ptr, stat1_ptr, stat2_ptr, sync_ptr,
    # shape; lag: how many stats items the schedule runs ahead of the apply items
    n_rows, n_cols, n_chunks, lag, row_sizes,
    # strides in elements, per tensor: (row dims 0..2, column)
    a_strides, b_strides, o_strides,
    # meta
    CHUNK: tl.constexpr, BLOCK_CHUNKS: tl.constexpr, BACKWARD: tl.constexpr,
):
    # Rows too long for one program: each row is cut into CHUNK-column chunks. A stats item
    # reduces one chunk; an apply item merges its row's chunk stats and writes one chunk.
    # All 2T items (T chunks) run in one launch, in the order of tickets taken from
    # a counter: stats 0..lag-1, then stats lag+i and apply i alternately, then the last
    # applies. An apply waits until its row's stats are all finished; those items have
    # smaller tickets (lag >= n_chunks), so they were taken by running programs that never
    # wait themselves: the schedule cannot deadlock, however many programs are resident
    # (the interpreter, which runs one program at a time, runs it too). Running lag chunks
    # ahead keeps the chunk an apply re-reads in L2, so the input is read from memory once.
    total = n_rows * n_chunks
    ticket = tl.atomic_add(sync_ptr, 1, sem="relaxed")
    while ticket < 2 * total:
        k = ticket - lag
        middle = (k >= 0) & (ticket < 2 * total - lag)
        is_stats = (k < 0) | (middle & (k % 2 == 0))
        item = tl.where(k < 0, ticket, tl.where(middle, tl.where(k % 2 == 0, lag + k // 2, k // 2),
                                                ticket - total)).to(tl.int64)
        row_done = sync_ptr + 1 + item // n_chunks
        if is_stats:
            _chunk_stats(item, a_ptr, b_ptr, stat1_ptr, stat2_ptr, n_cols, n_chunks, row_sizes, a_strides, b_strides,
                         CHUNK, BACKWARD)
            tl.debug_barrier()  # every thread's stats stores happen before the release below
            tl.atomic_add(row_done, 1, sem="release")
        else:
            done = tl.atomic_add(row_done, 0, sem="acquire")
            while done < n_chunks:
                done = tl.atomic_add(row_done, 0, sem="acquire")
            _chunk_apply(item, a_ptr, b_ptr, out_ptr, stat1_ptr, stat2_ptr, n_cols, n_chunks, row_sizes, a_strides,
                         b_strides, o_strides, CHUNK, BLOCK_CHUNKS, BACKWARD)
        ticket = tl.atomic_add(sync_ptr, 1, sem="relaxed")


@functools.lru_cache(maxsize=1024)
def _row_config(n_rows: int, n_cols: int, element_bytes: int) -> tuple[int, int, int, bool]:
    """(BLOCK_M, BLOCK_N, num_warps, RELOAD) for rows held whole (up to MAX_FUSED_COLS):
    short rows packed several to a program so each moves at least 4096 elements, 16 elements
    a thread, then 128 bytes a thread, enough loads in flight a thread to cover memory latency
    with the whole row in registers (16-32 warps for 32768-column rows, 8 warps and 4 rows a
    program for 781 columns). Walking rows in steps inside one program instead was slower
    wherever it was tried. 16-bit rows of RELOAD_COLS or more are held in their own dtype and
    read twice (RELOAD): held in float32 they need so many registers that one program fits an
    SM. The sweeps behind these choices: notes/add_softmax.md."""
    block_n = next_power_of_2(n_cols)
    block_m = max(1, min(next_power_of_2(n_rows), 4096 // block_n))
    elements = block_m * block_n
    reload = element_bytes == 2 and block_n >= RELOAD_COLS
    # Held in float32: 128 bytes of input a thread; RELOAD: 32 elements (16 registers) a
    # thread, which compiles to 32 registers at 32768 columns, two 32-warp programs an SM.
    per_thread = 16 if elements <= 4096 else 32 if reload else 128 // element_bytes
    num_warps = min(32, max(4, elements // (32 * per_thread)))
    return block_m, block_n, num_warps, reload


def _row_layout(a, b, out, dim: int):
    """Row sizes (dims 1, 2 of the collapsed row index) and (s0, s1, s2, column stride) for
    each tensor; None when the rows need more than ROW_DIMS dims."""
    n_cols = a.shape[dim]
    if dim == a.dim() - 1 and a.is_contiguous() and b.is_contiguous() and out.is_contiguous():
        # The common case, kept short: launch overhead matters for small tensors.
        return (1, 1), ((n_cols, 0, 0, 1),) * 3
    moved = [t.movedim(dim, -1) for t in (a, b, out)]
    sizes, strides = collapse_dims(moved[0].shape[:-1], *(m.stride()[:-1] for m in moved))
    if len(sizes) > ROW_DIMS:
        return None
    row_sizes = tuple(pad_front(sizes, ROW_DIMS, 1)[1:])
    return row_sizes, [(*pad_front(s, ROW_DIMS, 0), m.stride(-1)) for s, m in zip(strides, moved)]


def _launch_rows(a, b, out, dim: int, backward: bool) -> None:
    n_cols = a.shape[dim]
    n_rows = a.numel() // n_cols
    layout = _row_layout(a, b, out, dim)
    if layout is None:
        # More than three row dims that no stride pattern merges: run on contiguous copies.
        staging = torch.empty(a.shape, dtype=out.dtype, device=out.device)
        _launch_rows(a.contiguous(), b.contiguous(), staging, dim, backward)
        out.copy_(staging)
        return
    row_sizes, (a_strides, b_strides, o_strides) = layout
    name = "softmax_bwd" if backward else "softmax_fwd"
    if n_cols <= MAX_FUSED_COLS:
        # The tail (sizes, strides) and the pass key the plan; the head's dtypes and
        # alignment the rest of what Triton compiles for (out may be the caller's).
        tail = (n_rows, n_cols, row_sizes, tuple(a_strides), tuple(b_strides), tuple(o_strides))
        head = (a, b, out)
        _TEMPLATES.get((backward, tail, a.device, head_layout(head)), _rows_template, name, tail,
                       a.element_size(), backward)(*head)
        return
    n_chunks = cdiv(n_cols, CHUNK_COLS)
    total = n_rows * n_chunks
    stat1, stat2 = torch.empty((2, n_rows, n_chunks), dtype=torch.float32, device=a.device)
    sync = torch.zeros(1 + n_rows, dtype=torch.int32, device=a.device)
    lag = min(total, max(n_chunks, LAG_BYTES // (CHUNK_COLS * a.element_size())))
    args = (a, b, out, stat1, stat2, sync, n_rows, n_cols, n_chunks, lag, row_sizes, a_strides, b_strides,
            o_strides)
    meta = dict(CHUNK=CHUNK_COLS, BLOCK_CHUNKS=next_power_of_2(n_chunks), BACKWARD=backward)
    programs = min(2 * total, _resident_programs(a.device))
    Launch(name + "_chunks", _softmax_chunks_kernel, (programs,), args, meta, num_warps=4, num_stages=1)()


def _rows_template(name: str, tail: tuple, element_bytes: int, backward: bool) -> LaunchTemplate:
    block_m, block_n, num_warps, reload = _row_config(*tail[:2], element_bytes)
    return LaunchTemplate(name, _softmax_rows_kernel, (cdiv(tail[0], block_m),), tail,
                          dict(BLOCK_M=block_m, BLOCK_N=block_n, EVEN_N=block_n == tail[1], BACKWARD=backward,
                               RELOAD=reload),
                          num_warps, 1)


_TEMPLATES = Templates()


@functools.lru_cache(maxsize=16)
def _resident_programs(device: torch.device) -> int:
    """Programs of the chunk kernel to launch for the one-launch schedule: about as many
    as the GPU holds at once; the ones that do not fit start as others finish."""
    if device.type != "cuda":
        return 2  # the interpreter runs programs one after the other; the first takes every ticket
    return PROGRAMS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count


def _normalize_dim(name: str, x: torch.Tensor, dim: int) -> int:
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"{name} must be an int, got {type(dim).__name__}")
    ndim = max(x.dim(), 1)
    if not -ndim <= dim < ndim:
        raise ValueError(f"{name}={dim} is out of range for a tensor of {x.dim()} dims")
    return dim % ndim


def softmax_reference(x: torch.Tensor, dim: int = -1, upcast: bool = True) -> torch.Tensor:
    """torch.softmax in float64 (upcast=True) or in x's dtype."""
    return torch.softmax(x.double() if upcast else x, dim)


def softmax_fwd(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Launcher for the forward pass: returns softmax(x, dim) in x's dtype."""
    check_tensor("x", x)
    dim = _normalize_dim("dim", x, dim)
    if x.dim() == 0:
        return softmax_fwd(x.reshape(1), 0).reshape(())
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    _launch_rows(x, x, out, dim, backward=False)
    return out


def softmax_bwd(grad_out: torch.Tensor, y: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Launcher for the backward pass: the gradient wrt x given y = softmax(x) and dL/dy."""
    check_tensor("grad_out", grad_out)
    check_tensor("y", y)
    check_same_device(y=y, grad_out=grad_out)
    if grad_out.shape != y.shape:
        raise ValueError(f"grad_out has shape {tuple(grad_out.shape)} but y has {tuple(y.shape)}")
    dim = _normalize_dim("dim", y, dim)
    if y.dim() == 0:
        return softmax_bwd(grad_out.reshape(1), y.reshape(1), 0).reshape(())
    grad_in = torch.empty_like(y)
    if y.numel() == 0:
        return grad_in
    _launch_rows(y, grad_out, grad_in, dim, backward=True)
    return grad_in


def _softmax_setup_context(ctx, inputs, output):
    ctx.save_for_backward(output)
    ctx.dim = inputs[1]


def _softmax_backward(bwd, ctx, grad_out):
    (y,) = ctx.saved_tensors
    return bwd(grad_out, y, ctx.dim), None


def _softmax_check(x, dim):
    check_tensor("x", x)
    return x, _normalize_dim("dim", x, dim)


def _sharding(op: str, names: tuple[str, ...], *args):
    """DTensor may shard any dim but the softmax dim (rows are independent): `args` are the
    tensors named `names`, then dim."""
    *specs, dim = args
    ndim = specs[0].ndim
    dim %= ndim
    for name, spec in zip(names, specs):
        only_shard(op, name, spec, [d for d in range(ndim) if d != dim],
                   f"softmax normalises along dim {dim}, so its rows must stay whole on each rank")
    return [([p], [p] * len(specs) + [None]) for p in [Replicate()] + [Shard(d) for d in range(ndim) if d != dim]]


_SOFTMAX = Op("softmax", forward=softmax_fwd, forward_schema="(Tensor x, int dim) -> Tensor",
              forward_fake=lambda x, dim: torch.empty_like(x),
              setup_context=_softmax_setup_context, backward=_softmax_backward,
              backward_launcher=softmax_bwd, backward_schema="(Tensor grad_out, Tensor y, int dim) -> Tensor",
              backward_fake=lambda grad_out, y, dim: torch.empty_like(y), check=_softmax_check,
              forward_sharding=functools.partial(_sharding, "softmax", ("x",)),
              backward_sharding=functools.partial(_sharding, "softmax backward", ("grad_out", "y")))


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``torch.softmax(x, dim)`` computed by Triton kernels, differentiable in x.

    x: float32, float16 or bfloat16, any shape, strides and view offset. The result has
    x's dtype (float32 arithmetic inside). Rows of any length: up to 32768 columns in
    one pass, longer rows split across programs. ``-inf`` entries behave as in torch,
    a row of all ``-inf`` gives NaN. Raises TypeError for non-tensors or other dtypes,
    ValueError for an out-of-range ``dim``.
    """
    return _SOFTMAX(x, dim)  # the launchers validate x and dim on the eager roads
