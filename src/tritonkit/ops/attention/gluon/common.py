"""Pieces the Gluon attention kernels (`attention_fwd`, `attention_bwd`) share: the wgmma
accumulator layout, the view of a shared buffer as a descriptor's box, the tiles a kernel's
programs take (`Tiles`: the query tile or key block a program index stands for, dense or in
packed sequences) and the key blocks a query tile walks under the mask, the masked store of a
tile's rows. What happens to the scores themselves is `score.Scores`."""

# No `from __future__ import annotations`: an aggregate's field annotations are its types.
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, tma
from triton.language.core import _aggregate as aggregate


def bundle(cls):
    """`cls` as a Gluon aggregate (`triton.language.core._aggregate`, which later Tritons call
    `gl.aggregate`): values that one @gluon.jit function hands another as one argument (a
    kernel to its partitions), constexprs included, with @gluon.jit methods. Its constructor
    takes the fields in the order they are declared: a field annotated gl.constexpr as a
    constexpr, any other as `_value` has it. The order is the kernel's too: a worker
    partition's bundles are flattened, field after field, into the values the partitions
    capture (Triton drops those none reads and repeats), and their order lays out the captures
    the workers load, so reordering fields changes the compiled kernel (not its results)."""
    cls.__init__ = _init_fields
    made = aggregate(cls)
    made.FIELDS = tuple((name, kind is gl.constexpr) for name, kind in cls.__annotations__.items())
    return made


@gluon.constexpr_function
def _init_fields(self, *values):
    # Every bundle's constructor (`bundle`).
    fields = type(self).FIELDS
    assert len(values) == len(fields), f"{type(self).__name__} takes {len(fields)} fields, got {len(values)}"
    for field, value in zip(fields, values):
        name, is_constexpr = field
        setattr(self, name, gl.constexpr(value) if is_constexpr else _value(value))


@gluon.constexpr_function
def _value(x):
    # A bundle field's value: a runtime value as it is; a Python value (an int argument Triton
    # specialised to 1, a None pointer, a 0 standing for a dense batch's offset) as the
    # constexpr it stands for.
    return x if isinstance(x, gl.base_value) else gl.constexpr(x)


@gluon.constexpr_function
def _wgmma_layout(num_warps, n):
    # one warpgroup, 16 rows per warp; instr N = the tile's width; K = 16 for 16-bit inputs
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, n, 16])


@bundle
class RowLayouts:
    """A consumer warpgroup's register layouts over its rows of a query tile (`_row_layouts`):
    s, the accumulator of S = Q K^T (and of dP), a key block wide; acc, the head-dim-wide
    accumulator that P V (dS K) sums into; a, P's (dS's) layout as that product's register A
    operand."""
    s: gl.constexpr
    acc: gl.constexpr
    a: gl.constexpr


@gluon.constexpr_function
def _row_layouts(num_warps, block_n, head_dim):
    # The `RowLayouts` of a warpgroup of num_warps warps over key blocks of block_n and a head
    # dim of head_dim.
    acc = _wgmma_layout(num_warps, head_dim)
    a = gl.DotOperandLayout(operand_index=0, parent=acc, k_width=2)
    return RowLayouts(_wgmma_layout(num_warps, block_n), acc, a)


@gluon.jit
def _box_buffers(desc, COUNT: gl.constexpr):
    # COUNT shared buffers of one box of `desc` (its rows by its columns) each, in the layout
    # the descriptor's copies and the tensor cores read.
    ROWS: gl.constexpr = desc.block_type.shape[2]
    COLS: gl.constexpr = desc.block_type.shape[3]
    layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, COLS], desc.dtype)
    return gl.allocate_shared_memory(desc.dtype, [COUNT, ROWS, COLS], layout)


@gluon.jit
def _tma_view(buf, desc):
    # A 2-d (rows, D) shared buffer seen as the (1, 1, rows, D) box of a 4-d descriptor: the
    # same bytes and swizzle, the two leading dims of extent one.
    return buf._reinterpret(buf.dtype, desc.block_type.shape, desc.layout)


@gluon.jit
def _ordered_tile(t, n_blocks, HEAD_SPAN, LONGEST_FIRST: gl.constexpr):
    # Tile t -> (head index, k): the k-th of a head's n_blocks blocks, in the order the kernel
    # walks them (longest first under a causal mask). Head after head, so that the programs
    # running together share the head's K and V (or Q and dO) in L2; or with LONGEST_FIRST, in
    # spans of HEAD_SPAN heads (a divisor of the heads), every head's k-th block before anyone's
    # (k+1)-th within a span, which balances a causal mask's unequal tiles over the SMs
    # (`ops.attention.order` chooses). The Triton kernels' twin is in `mask._program_tile`
    # (Gluon kernels cannot call triton.jit functions).
    if LONGEST_FIRST:
        per_span = HEAD_SPAN * n_blocks
        span = t // per_span
        r = t - span * per_span
        hb = span * HEAD_SPAN + r % HEAD_SPAN
        k = r // HEAD_SPAN
    else:
        hb = t // n_blocks
        k = t % n_blocks
    return hb, k


@gluon.jit
def _dense_tile(t, n_m, HEAD_SPAN, LONGEST_FIRST: gl.constexpr, H, Nk, SCORE: gl.constexpr, ROWS: gl.constexpr,
                BLOCK_N: gl.constexpr):
    # Tile t of ROWS query rows -> (b, h, first row m0, key blocks n_kv, unmasked key blocks
    # n_full), in `_ordered_tile`'s order; causal tiles go longest first within a head.
    hb, pid_m = _ordered_tile(t, n_m, HEAD_SPAN, LONGEST_FIRST)
    if SCORE.causal:
        pid_m = n_m - 1 - pid_m
    m0 = pid_m * ROWS
    # Key blocks [0, n_full) are visible to every row of the tile; [n_full, n_kv) need masks.
    if SCORE.causal:
        n_kv = gl.cdiv(gl.minimum(Nk, m0 + ROWS), BLOCK_N)
        n_full = gl.minimum(m0 + 1, Nk) // BLOCK_N
    else:
        n_kv = gl.cdiv(Nk, BLOCK_N)
        n_full = Nk // BLOCK_N
    return hb // H, hb % H, m0, n_kv, n_full


@gluon.jit
def _varlen_tile(t, n_m, H, Na, Nb, CU_A, CU_B, SEQS, ROWS: gl.constexpr, ASCENDING: gl.constexpr):
    # Packed sequences: tile t of ROWS rows -> (h, m0, a0, na, b0, nb): rows [m0, m0 + ROWS)
    # (local to the sequence) of head h, the sequence's first row a0 and length na along the
    # tiled operand, b0 and nb along the other. As the Triton kernels' `mask._program_tile`:
    # sequence s owns tiles [cu_a[s] // ROWS + s, ...) of each head, n_m = cdiv(Na, ROWS) + SEQS
    # of them, found by a binary search; tiles past a sequence's rows get m0 >= na. Heads vary
    # fastest; the last tiles go first (causal query tiles: a sequence's longest rows), or with
    # ASCENDING the first (causal key blocks: those the most queries see). Bounds are clamped to
    # [0, Na] and [0, Nb], so bad cu_seqlens cannot send a tile out of bounds.
    h = t % H
    if ASCENDING:
        pid = t // H
    else:
        pid = n_m - 1 - t // H
    lo = 0
    hi = SEQS
    while hi - lo > 1:
        mid = (lo + hi) // 2
        before = gl.load(CU_A + mid) // ROWS + mid <= pid
        lo = gl.where(before, mid, lo)
        hi = gl.where(before, hi, mid)
    a_first = gl.load(CU_A + lo)
    a0 = gl.minimum(gl.maximum(a_first, 0), Na)
    na = gl.maximum(gl.minimum(gl.load(CU_A + lo + 1), Na) - a0, 0)
    b0 = gl.minimum(gl.maximum(gl.load(CU_B + lo), 0), Nb)
    nb = gl.maximum(gl.minimum(gl.load(CU_B + lo + 1), Nb) - b0, 0)
    m0 = (pid - (a_first // ROWS + lo)) * ROWS
    m0 = gl.where(m0 < 0, na, m0)           # only with cu_seqlens[0] > 0
    return h, m0, a0, na, b0, nb


@bundle
class Tiles:
    """The tiles a kernel's programs take and where each lies: `blocks` tiles a head of the
    tiled operand (query row blocks, or the dK/dV pass's key blocks; packed: cdiv(N, rows) +
    SEQS, `_varlen_tile`), of `heads` heads (H, or the dK/dV pass's Hkv), in `_ordered_tile`'s
    order (HEAD_SPAN, LONGEST_FIRST); GROUP query heads a kv head; sequences of Nq queries and
    Nk keys, or packed (VARLEN, B = 1, N the totals) with CU_Q, CU_K their int32 cumulative
    lengths (SEQS + 1 each)."""
    blocks: gl.base_value
    HEAD_SPAN: gl.base_value
    heads: gl.base_value
    GROUP: gl.base_value
    Nq: gl.base_value
    Nk: gl.base_value
    CU_Q: gl.base_value
    CU_K: gl.base_value
    SEQS: gl.base_value
    LONGEST_FIRST: gl.constexpr
    VARLEN: gl.constexpr


    @gluon.jit
    def query_tile(self, t, SCORE: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr):
        # Tile t of ROWS query rows -> (b, h, m0, n_kv, n_full, q0, nq, k0, nk): rows [m0, m0 +
        # ROWS) of a sequence of nq queries and nk keys whose first rows are q0 and k0 of (b, h);
        # key blocks [0, n_full) every row of the tile sees whole, [n_full, n_kv) masked. Dense:
        # the batch's (q0 = k0 = 0), in `_ordered_tile`'s order. Packed: `_varlen_tile`'s
        # sequence, m0 >= nq for a tile past its rows; a block only rows of the next sequence
        # would see is not walked.
        if self.VARLEN:
            h, m0, q0, nq, k0, nk = _varlen_tile(t, self.blocks, self.heads, self.Nq, self.Nk, self.CU_Q, self.CU_K,
                                                 self.SEQS, ROWS, False)
            if SCORE.causal:
                n_kv = gl.cdiv(gl.minimum(nk, gl.minimum(m0 + ROWS, nq)), BLOCK_N)
                n_full = gl.minimum(m0 + 1, nk) // BLOCK_N
            else:
                n_kv = gl.cdiv(nk, BLOCK_N)
                n_full = nk // BLOCK_N
            b = 0
        else:
            b, h, m0, n_kv, n_full = _dense_tile(t, self.blocks, self.HEAD_SPAN, self.LONGEST_FIRST, self.heads,
                                                 self.Nk, SCORE, ROWS, BLOCK_N)
            q0 = 0
            nq = self.Nq
            k0 = 0
            nk = self.Nk
        return b, h, m0, n_kv, n_full, q0, nq, k0, nk

    @gluon.jit
    def key_tile(self, t, SCORE: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
        # The dK/dV pass's program t -> (b, hk, first key n0, q0, nq, k0, nk, query blocks [lo,
        # end) that see its keys, of which [lo, band) straddle the causal diagonal and [mid,
        # end) the left window's edge (masked), [band, mid) see all of them): keys and query
        # rows local to a sequence of nq queries and nk keys whose first rows are q0 and k0 of
        # (b, heads). Dense: the batch's (q0 = k0 = 0), in `_ordered_tile`'s order (a head's key
        # blocks together, which share Q and dO in L2, or with LONGEST_FIRST every head's
        # longest first), a head's longest (first) key blocks first. Packed: `_varlen_tile`'s
        # sequence, heads fastest, a sequence's first key blocks first; n0 >= nk for a block
        # past its keys.
        if self.VARLEN:
            hk, n0, k0, nk, q0, nq = _varlen_tile(t, self.blocks, self.heads, self.Nk, self.Nq, self.CU_K, self.CU_Q,
                                                  self.SEQS, BLOCK_N, True)
            b = 0
        else:
            hb, kb = _ordered_tile(t, self.blocks, self.HEAD_SPAN, self.LONGEST_FIRST)
            b = hb // self.heads
            hk = hb % self.heads
            n0 = kb * BLOCK_N
            q0 = 0
            nq = self.Nq
            k0 = 0
            nk = self.Nk
        end = gl.cdiv(nq, BLOCK_M)
        if SCORE.causal:
            lo = n0 // BLOCK_M            # query rows before n0 see none of these keys
            band = gl.minimum(gl.cdiv(n0 + BLOCK_N, BLOCK_M), end)
        else:
            lo = 0
            band = 0
        if SCORE.window_left >= 0:
            # Row i sees key j >= i - window_left: rows past n0 + BLOCK_N - 1 + window_left see
            # none of these keys, and a block sees all of them while its last row does.
            end = gl.minimum(end, gl.cdiv(n0 + BLOCK_N + SCORE.window_left, BLOCK_M))
            mid = gl.maximum(gl.minimum((n0 + SCORE.window_left + 1) // BLOCK_M, end), band)
        else:
            mid = end
        return b, hk, n0, q0, nq, k0, nk, lo, band, mid, end


@gluon.jit
def _store_tile(buf, desc, vals, b, h, row, col):
    # vals through the shared buffer buf (free once every product that read it has retired)
    # and a TMA store to rows [row, row + rows of buf) of (b, h) from column col, which drops
    # rows past the tensor's end; the caller waits for it (tma.store_wait) before buf is
    # written again.
    buf.store(vals.to(buf.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(desc, [b, h, row, col], _tma_view(buf, desc))


@gluon.jit
def _store_rows(O, vals, head_offset, row, n_rows, stride_on):
    # vals' first n_rows rows (any layout) to rows [row, row + n_rows) of O at head_offset.
    layout: gl.constexpr = vals.type.layout
    rows = gl.arange(0, vals.shape[0], layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, vals.shape[1], layout=gl.SliceLayout(0, layout))
    ptrs = O + head_offset + gl.expand_dims((row + rows).to(gl.int64) * stride_on, 1) + gl.expand_dims(cols, 0)
    gl.store(ptrs, vals, mask=gl.expand_dims(rows < n_rows, 1))


@gluon.jit
def _zero_rows(O, head_offset, row, n_rows, stride_on, ROWS: gl.constexpr, COLS: gl.constexpr,
               dtype: gl.constexpr):
    # Zeros to rows [row, row + min(n_rows, ROWS)) of O at head_offset (COLS columns): the
    # rows of a packed sequence without keys, which see none.
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0])
    _store_rows(O, gl.zeros([ROWS, COLS], dtype, layout), head_offset, row, n_rows, stride_on)


@gluon.jit
def _window_start(m0, SCORE: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr):
    # Rows [m0, m0 + ROWS) with a left window: the first key block any of them sees, and the
    # first that all of them see whole (keys j >= i - window_left). Without a window both are
    # the constant 0, so that the walks (the forward's, the dQ pass's) compile to the kernels
    # without one.
    if SCORE.window_left >= 0:
        lo = gl.maximum(m0 - SCORE.window_left, 0) // BLOCK_N
        full_lo = gl.cdiv(gl.maximum(m0 + (ROWS - 1 - SCORE.window_left), 0), BLOCK_N)
    else:
        lo: gl.constexpr = 0
        full_lo: gl.constexpr = 0
    return lo, full_lo


@gluon.jit
def _walk(m0, n_kv, n_full, SCORE: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr):
    # The key blocks rows [m0, m0 + ROWS) walk, [lo, n_kv), counted from lo: [0, edge) hold
    # the left window's edge, [edge, band) are whole for every row, [band, count) hold the
    # diagonal and the ragged tail; and whether the first is whole.
    if SCORE.window_left >= 0:
        lo, full_lo = _window_start(m0, SCORE, ROWS, BLOCK_N)
        edge = gl.minimum(gl.maximum(full_lo, lo), n_kv) - lo
        band = gl.maximum(n_full - lo, edge)
        first_whole = (edge == 0) & (band > 0)
        count = n_kv - lo
    else:
        lo: gl.constexpr = 0
        edge: gl.constexpr = 0
        band = n_full
        first_whole = n_full > 0
        count = n_kv
    return lo, edge, band, first_whole, count
