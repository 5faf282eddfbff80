"""The dQ pass of the Gluon attention backward (the package's docstring has the design): the
forward's structure, one program per 128 query rows of one (batch, head), or of one packed
sequence's head (VARLEN), K and V streamed through a ring, two 64-row consumer warpgroups
passing a turn. The kernel builds its program's bundles once (`Buffers`, `Globals`,
`common.Tiles`, `score.Scores`) and hands them to both partitions."""

# No `from __future__ import annotations`: an aggregate's field annotations are its types.
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from ..common import (
    Tiles, _box_buffers, _row_layouts, _store_rows, _store_tile, _tma_view, _walk, _wgmma_layout, _window_start,
    _zero_rows, bundle)
from ..score import Scores


@bundle
class Buffers:
    """A program's shared memory and mbarriers: each consumer warpgroup's Q, dO and O tiles
    (q_smem, do_smem, o_smem; Q's also stages dQ for its store) with their barrier q_ready, the
    ring of K and V blocks (k_bufs, v_bufs: STAGES slots) with ready / empty a slot, and turn,
    the two consumers' ping-pong."""
    q_smem: gl.shared_memory_descriptor
    do_smem: gl.shared_memory_descriptor
    o_smem: gl.shared_memory_descriptor
    k_bufs: gl.shared_memory_descriptor
    v_bufs: gl.shared_memory_descriptor
    q_ready: gl.shared_memory_descriptor
    ready: gl.shared_memory_descriptor
    empty: gl.shared_memory_descriptor
    turn: gl.shared_memory_descriptor


    @gluon.jit
    def allocate(q_desc, k_desc, STAGES: gl.constexpr):
        # The buffers of two 64-row warpgroups (Q's box rows) and a ring of STAGES key blocks
        # (K's box rows), their barriers initialised.
        q_smem = _box_buffers(q_desc, 2)
        do_smem = _box_buffers(q_desc, 2)
        o_smem = _box_buffers(q_desc, 2)
        k_bufs = _box_buffers(k_desc, STAGES)
        v_bufs = _box_buffers(k_desc, STAGES)
        q_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(2):
            mbarrier.init(q_ready.index(i), count=1)
            mbarrier.init(turn.index(i), count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=2)     # released by both consumer warpgroups
        return Buffers(q_smem, do_smem, o_smem, k_bufs, v_bufs, q_ready, ready, empty, turn)


@bundle
class Globals:
    """What a program reads and writes in global memory: descriptors of the whole (B, H, Nq, D)
    q, do, o, dq and (B, Hkv, Nk, D) k, v; for packed sequences DQ, dq's pointer, with its head
    and row strides, for the rows of a tile that reach past their sequence (dq's data and zeros
    otherwise); LSE, DELTA (written here) and DLSE (read with HAS_DLSE): (B, H, Nq) float32."""
    q_desc: gl.base_value
    do_desc: gl.base_value
    o_desc: gl.base_value
    k_desc: gl.base_value
    v_desc: gl.base_value
    dq_desc: gl.base_value
    DQ: gl.base_value
    stride_qh: gl.base_value
    stride_qn: gl.base_value
    LSE: gl.base_value
    DELTA: gl.base_value
    DLSE: gl.base_value
    HAS_DLSE: gl.constexpr


@gluon.jit
def _dq_loads(io, bufs, b, h, hk, q_row, k_row, count):
    # The tile's Q, dO and O from row q_row of (b, h), then `count` key blocks from row k_row
    # of (b, hk) through the ring.
    STAGES: gl.constexpr = bufs.k_bufs.shape[0]
    BLOCK_N: gl.constexpr = bufs.k_bufs.shape[1]
    BLOCK_M: gl.constexpr = bufs.q_smem.shape[1]
    for w in gl.static_range(2):
        mbarrier.expect(bufs.q_ready.index(w), 3 * io.q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(io.q_desc, [b, h, q_row + w * BLOCK_M, 0], bufs.q_ready.index(w),
                                        _tma_view(bufs.q_smem.index(w), io.q_desc))
        tma.async_copy_global_to_shared(io.do_desc, [b, h, q_row + w * BLOCK_M, 0], bufs.q_ready.index(w),
                                        _tma_view(bufs.do_smem.index(w), io.do_desc))
        tma.async_copy_global_to_shared(io.o_desc, [b, h, q_row + w * BLOCK_M, 0], bufs.q_ready.index(w),
                                        _tma_view(bufs.o_smem.index(w), io.o_desc))
    for t in range(count):
        s = t % STAGES
        mbarrier.wait(bufs.empty.index(s), ((t // STAGES) & 1) ^ 1)
        mbarrier.expect(bufs.ready.index(s), 2 * io.k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(io.k_desc, [b, hk, k_row + t * BLOCK_N, 0], bufs.ready.index(s),
                                        _tma_view(bufs.k_bufs.index(s), io.k_desc))
        tma.async_copy_global_to_shared(io.v_desc, [b, hk, k_row + t * BLOCK_N, 0], bufs.ready.index(s),
                                        _tma_view(bufs.v_bufs.index(s), io.v_desc))


@gluon.jit
def _dq_producer(io, bufs, tiles, SCORE: gl.constexpr):
    BLOCK_N: gl.constexpr = bufs.k_bufs.shape[1]
    BLOCK_M: gl.constexpr = bufs.q_smem.shape[1]
    b, h, m0, n_kv, n_full, q0, nq, k0, nk = tiles.query_tile(gl.program_id(0), SCORE, 2 * BLOCK_M, BLOCK_N)
    lo, _ = _window_start(m0, SCORE, 2 * BLOCK_M, BLOCK_N)
    if tiles.VARLEN:
        # A tile past its sequence's rows, or of a sequence without keys, loads nothing.
        if (m0 < nq) & (n_kv > 0):
            _dq_loads(io, bufs, b, h, h // tiles.GROUP, q0 + m0, k0 + lo * BLOCK_N, n_kv - lo)
    else:
        _dq_loads(io, bufs, b, h, h // tiles.GROUP, m0, lo * BLOCK_N, n_kv - lo)


@gluon.jit
def _dq_scores(j, q, do, bufs, my_turn, other_turn, WG: gl.constexpr, dq, dsb, PREV: gl.constexpr):
    # Issue S(j) = Q K(j)^T and dP(j) = dO V(j)^T on this warpgroup's turn, and with PREV
    # (j >= 1) dQ += dS(j-1) K(j-1) behind them.
    STAGES: gl.constexpr = bufs.k_bufs.shape[0]
    BLOCK_N: gl.constexpr = bufs.k_bufs.shape[1]
    BLOCK_M: gl.constexpr = q.shape[0]
    s_layout: gl.constexpr = _wgmma_layout(gl.num_warps(), BLOCK_N)
    s = j % STAGES
    mbarrier.wait(bufs.ready.index(s), (j // STAGES) & 1)
    # The turn alternates strictly, so its parity is the issue count's: warpgroup 0 finds its
    # first turn free, warpgroup 1 waits for it.
    mbarrier.wait(my_turn, (j & 1) ^ (1 - WG))
    zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    st = warpgroup_mma(q, bufs.k_bufs.index(s).permute((1, 0)), zero, use_acc=False, is_async=True)
    dp = warpgroup_mma(do, bufs.v_bufs.index(s).permute((1, 0)), zero, use_acc=False, is_async=True)
    if PREV:
        dq = warpgroup_mma(dsb, bufs.k_bufs.index((j - 1) % STAGES), dq, is_async=True)
    mbarrier.arrive(other_turn, count=1)
    return st, dp, dq


@gluon.jit
def _dq_ds(st, dp, lse2, delta, row0, col0, Nk, scores, a_layout: gl.constexpr, dtype: gl.constexpr,
           MASKED: gl.constexpr):
    # dS = P * (dP - delta), P = 2^(base2(capped(S)) - lse2) (`scores`), with the softcap's
    # factor 1 - tanh^2; masked blocks zero P for keys past Nk (the sequence's keys: past them
    # K's rows are zeros, or a packed batch's next sequence's; 2^(-lse2) could overflow) and
    # for keys the Score hides from the query.
    th = scores.capped(st)
    p = gl.exp2(scores.base2(th) - gl.expand_dims(lse2, 1))
    if MASKED:
        p = scores.mask(p, 0.0, row0, col0, Nk)
    p = scores.capped_grad(p, th)
    ds = p * (dp - gl.expand_dims(delta, 1))
    return gl.convert_layout(ds.to(dtype), a_layout)


@gluon.jit
def _dq_block(j, lo, dq, dsb, lse2, delta, q, do, my_turn, other_turn, WG: gl.constexpr, row0, Nk, bufs, scores,
              MASKED: gl.constexpr):
    # Block j >= 1 of the program's walk (key block lo + j, ring slot j % STAGES): S(j), dP(j)
    # and dS(j-1) K(j-1) in flight together; dS(j) formed under the last of them.
    STAGES: gl.constexpr = bufs.k_bufs.shape[0]
    BLOCK_N: gl.constexpr = bufs.k_bufs.shape[1]
    a_layout: gl.constexpr = dsb.type.layout
    st, dp, dq = _dq_scores(j, q, do, bufs, my_turn, other_turn, WG, dq, dsb, True)
    st, dp = warpgroup_mma_wait(num_outstanding=1, deps=(st, dp))
    dsb_next = _dq_ds(st, dp, lse2, delta, row0, (lo + j) * BLOCK_N, Nk, scores, a_layout, q.dtype, MASKED)
    # dsb is the register operand of the product in flight: a dependency of the wait that
    # retires it, so its registers are not reused before the tensor cores have read them.
    dq, dsb = warpgroup_mma_wait(num_outstanding=0, deps=(dq, dsb))
    mbarrier.arrive(bufs.empty.index((j - 1) % STAGES), count=1)
    return dq, dsb_next


@gluon.jit
def _dq_delta(do, o, io, row_base, row0, Nq, s_layout: gl.constexpr):
    # delta_i = sum_d dO_id O_id (less lse's upstream gradient), the row term of dS = P (dP -
    # delta), formed here from the warpgroup's dO and O tiles instead of by a launch of its own
    # before both passes; stored for the dK/dV pass, which runs after this one. Rows past Nq
    # (the sequence's rows) are not stored.
    BLOCK_M: gl.constexpr = do.shape[0]
    HEAD_DIM: gl.constexpr = do.shape[1]
    rows_layout: gl.constexpr = gl.BlockedLayout([1, HEAD_DIM // 32], [4, 8], [gl.num_warps(), 1], [1, 0])
    products = do.load(rows_layout).to(gl.float32) * o.load(rows_layout).to(gl.float32)
    delta = gl.sum(products, axis=1)
    rows = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, rows_layout))
    delta = _store_delta(io, row_base, rows, delta, Nq)
    return gl.convert_layout(delta, gl.SliceLayout(1, s_layout))


@gluon.jit
def _store_delta(io, row_base, rows, delta, Nq):
    # delta less lse's upstream gradient (with HAS_DLSE), stored for rows < Nq; returned.
    if io.HAS_DLSE:
        delta -= gl.load(io.DLSE + row_base + rows, mask=rows < Nq, other=0.0)
    gl.store(io.DELTA + row_base + rows, delta, mask=rows < Nq)
    return delta


@gluon.jit
def _empty_delta(io, row_base, row0, Nq, BLOCK_M: gl.constexpr):
    # delta of a warpgroup's 64 rows that see no key (a packed sequence without keys): their o
    # is zero, so delta is -dlse, or 0 without an upstream gradient of lse.
    rows_layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    rows = row0 + gl.arange(0, BLOCK_M, layout=rows_layout)
    _store_delta(io, row_base, rows, gl.zeros([BLOCK_M], gl.float32, rows_layout), Nq)


@gluon.jit
def _dq_rows(WG: gl.constexpr, tile, bufs, io, tiles, scores, sm_scale):
    # This warpgroup's 64 of rows [m0, m0 + 128) of a sequence of nq queries and nk keys (q0:
    # its first row in the (b, h) rows of dq, LSE and DELTA; rows local to the sequence), over
    # key blocks [0, n_kv), of which [0, n_full) are whole for every row.
    b, h, m0, n_kv, n_full, q0, nq, nk = tile
    BLOCK_M: gl.constexpr = bufs.q_smem.shape[1]
    HEAD_DIM: gl.constexpr = bufs.q_smem.shape[2]
    STAGES: gl.constexpr = bufs.k_bufs.shape[0]
    BLOCK_N: gl.constexpr = bufs.k_bufs.shape[1]
    lay = _row_layouts(gl.num_warps(), BLOCK_N, HEAD_DIM)
    row0 = m0 + WG * BLOCK_M
    q = bufs.q_smem.index(WG)
    do = bufs.do_smem.index(WG)
    my_turn = bufs.turn.index(WG)
    other_turn = bufs.turn.index(1 - WG)
    rows = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, lay.s))
    row_base = (b * tiles.heads + h).to(gl.int64) * tiles.Nq + q0
    lse2 = gl.load(io.LSE + row_base + rows, mask=rows < nq, other=0.0) * 1.4426950408889634
    mbarrier.wait(bufs.q_ready.index(WG), 0)
    delta = _dq_delta(do, bufs.o_smem.index(WG), io, row_base, row0, nq, lay.s)

    # The walk: key blocks [lo, n_kv), of which [lo, edge) hold the left window's edge,
    # [edge, band) are whole for every row and [band, n_kv) hold the diagonal and the ragged
    # tail (edge and band counted from lo); block lo alone first (masked unless whole).
    lo, edge, band, first_whole, count = _walk(m0, n_kv, n_full, scores.SCORE, 2 * BLOCK_M, BLOCK_N)
    dq = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, lay.acc)
    st, dp, dq = _dq_scores(0, q, do, bufs, my_turn, other_turn, WG, dq, dq, False)
    st, dp = warpgroup_mma_wait(num_outstanding=0, deps=(st, dp))
    if first_whole:
        dsb = _dq_ds(st, dp, lse2, delta, row0, lo * BLOCK_N, nk, scores, lay.a, q.dtype, False)
    else:
        dsb = _dq_ds(st, dp, lse2, delta, row0, lo * BLOCK_N, nk, scores, lay.a, q.dtype, True)
    for j in range(1, edge):
        dq, dsb = _dq_block(j, lo, dq, dsb, lse2, delta, q, do, my_turn, other_turn, WG, row0, nk, bufs, scores, True)
    for j in range(gl.maximum(edge, 1), band):
        dq, dsb = _dq_block(j, lo, dq, dsb, lse2, delta, q, do, my_turn, other_turn, WG, row0, nk, bufs, scores, False)
    for j in range(gl.maximum(band, 1), count):
        dq, dsb = _dq_block(j, lo, dq, dsb, lse2, delta, q, do, my_turn, other_turn, WG, row0, nk, bufs, scores, True)
    last = (count - 1) % STAGES
    dq = warpgroup_mma(dsb, bufs.k_bufs.index(last), dq, is_async=True)
    dq, dsb = warpgroup_mma_wait(num_outstanding=0, deps=(dq, dsb))
    mbarrier.arrive(bufs.empty.index(last), count=1)
    # dQ through Q's buffer and a TMA store; in a packed batch, a warpgroup's rows that reach
    # past their sequence (into the next one's) go through masked pointers instead.
    if tiles.VARLEN:
        if row0 + BLOCK_M <= nq:
            _store_tile(q, io.dq_desc, dq * sm_scale, b, h, q0 + row0, 0)
        else:
            _store_rows(io.DQ, (dq * sm_scale).to(q.dtype), h * io.stride_qh, q0 + row0, nq - row0, io.stride_qn)
    else:
        _store_tile(q, io.dq_desc, dq * sm_scale, b, h, row0, 0)
    tma.store_wait(pendings=0)


@gluon.jit
def _dq_consumer(WG: gl.constexpr, bufs, io, tiles, scores, sm_scale):
    BLOCK_M: gl.constexpr = bufs.q_smem.shape[1]
    HEAD_DIM: gl.constexpr = bufs.q_smem.shape[2]
    BLOCK_N: gl.constexpr = bufs.k_bufs.shape[1]
    b, h, m0, n_kv, n_full, q0, nq, k0, nk = tiles.query_tile(gl.program_id(0), scores.SCORE, 2 * BLOCK_M, BLOCK_N)
    if tiles.VARLEN:
        if m0 < nq:
            if n_kv > 0:
                _dq_rows(WG, (b, h, m0, n_kv, n_full, q0, nq, nk), bufs, io, tiles, scores, sm_scale)
            else:
                # A sequence without keys: its rows see none, and their gradient is zero. Their
                # o is zero, so delta is -dlse (0 without), which a sink's gradient reads.
                row0 = m0 + WG * BLOCK_M
                _zero_rows(io.DQ, h * io.stride_qh, q0 + row0, nq - row0, io.stride_qn, BLOCK_M, HEAD_DIM,
                           bufs.q_smem.dtype)
                _empty_delta(io, (b * tiles.heads + h).to(gl.int64) * tiles.Nq + q0, row0, nq, BLOCK_M)
    else:
        _dq_rows(WG, (b, h, m0, n_kv, n_full, q0, nq, nk), bufs, io, tiles, scores, sm_scale)


@gluon.jit
def _dq_kernel(
    # descriptors of the whole (B, H, Nq, D) q, do, o, dq and (B, Hkv, Nk, D) k, v; LSE, DELTA
    # (written here), DLSE (read with HAS_DLSE): (B, H, Nq) float32; packed sequences (VARLEN,
    # B = 1, N the totals): CU_Q, CU_K their int32 cumulative lengths (SEQS + 1 each), DQ dq's
    # pointer for the rows of a tile that reach past their sequence (None, None, dq otherwise)
    q_desc, do_desc, o_desc, k_desc, v_desc, dq_desc, LSE, DELTA, DLSE, CU_Q, CU_K, DQ,
    # sizes: (Nq, Nk, H, GROUP); scales: (qk_scale, what Q K^T is multiplied by
    # (`score.kernel_qk_scale`), sm_scale = scale); tiling: (n_m, HEAD_SPAN), n_m row blocks of
    # 128 per head (packed: cdiv(Nq, 128) + SEQS, `common._varlen_tile`), HEAD_SPAN the heads
    # LONGEST_FIRST orders together (`common._ordered_tile`); packed: (SEQS, dq's head and row
    # strides), zeros when dense
    sizes, scales, tiling, packed,
    # meta (SCORE: the `score.Score`, `score.Scores` applies it)
    SCORE: gl.constexpr, STAGES: gl.constexpr, HAS_DLSE: gl.constexpr, CONSUMER_REGS: gl.constexpr,
    PRODUCER_REGS: gl.constexpr, VARLEN: gl.constexpr, LONGEST_FIRST: gl.constexpr,
):
    gl.static_assert(gl.num_warps() == 4)
    Nq, Nk, H, GROUP = sizes
    qk_scale, sm_scale = scales
    n_m, HEAD_SPAN = tiling
    SEQS, stride_qh, stride_qn = packed
    bufs = Buffers.allocate(q_desc, k_desc, STAGES)
    io = Globals(q_desc, do_desc, o_desc, k_desc, v_desc, dq_desc, DQ, stride_qh, stride_qn, LSE, DELTA, DLSE, HAS_DLSE)
    tiles = Tiles(n_m, HEAD_SPAN, H, GROUP, Nq, Nk, CU_Q, CU_K, SEQS, LONGEST_FIRST, VARLEN)
    scores = Scores(qk_scale, SCORE)
    scores.check()
    gl.warp_specialize([
        (_dq_consumer, (0, bufs, io, tiles, scores, sm_scale)),
        (_dq_consumer, (1, bufs, io, tiles, scores, sm_scale)),
        (_dq_producer, (io, bufs, tiles, SCORE)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
