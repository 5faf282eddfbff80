"""The Gluon attention forward's kernel and its partitions (the design, the contract and the
launch are in the package's `__init__`). The kernel builds its program's bundles once (`Buffers`,
`Globals`, `Schedule`, `common.Tiles`, `score.Scores`) and hands them to every partition."""

# No `from __future__ import annotations`: an aggregate's field annotations are its types.
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

from ..common import (
    Tiles, _box_buffers, _row_layouts, _store_rows, _store_tile, _tma_view, _walk, _wgmma_layout, _window_start,
    _zero_rows, bundle)
from ..score import Scores


@bundle
class Buffers:
    """A program's shared memory and mbarriers: each consumer warpgroup's Q tile (q_smem) and O
    staging buffer (o_smem: q_smem itself unless O_BUFFER), the rings of K and V blocks
    (k_bufs, v_bufs: STAGES slots); barriers q_ready / q_empty a consumer, k_ready / v_ready /
    k_empty / v_empty a ring slot, turn the consumers' ping-pong; tile_ids: with a dynamic
    schedule, each consumer's next tile as the producer posts it (one value, 32 copies)."""
    q_smem: gl.shared_memory_descriptor
    o_smem: gl.shared_memory_descriptor
    k_bufs: gl.shared_memory_descriptor
    v_bufs: gl.shared_memory_descriptor
    q_ready: gl.shared_memory_descriptor
    q_empty: gl.shared_memory_descriptor
    k_ready: gl.shared_memory_descriptor
    v_ready: gl.shared_memory_descriptor
    k_empty: gl.shared_memory_descriptor
    v_empty: gl.shared_memory_descriptor
    turn: gl.shared_memory_descriptor
    tile_ids: gl.shared_memory_descriptor
    O_BUFFER: gl.constexpr


    @gluon.jit
    def allocate(q_desc, k_desc, STAGES: gl.constexpr, CONSUMERS: gl.constexpr, O_BUFFER: gl.constexpr):
        # The buffers of CONSUMERS 64-row warpgroups (Q's box rows: 64) and a ring of STAGES
        # key blocks (K's box rows), their barriers initialised.
        q_smem = _box_buffers(q_desc, CONSUMERS)
        if O_BUFFER:
            o_smem = _box_buffers(q_desc, CONSUMERS)
        else:
            o_smem = q_smem
        k_bufs = _box_buffers(k_desc, STAGES)
        v_bufs = _box_buffers(k_desc, STAGES)
        q_ready = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
        q_empty = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        turn = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
        tile_ids = gl.allocate_shared_memory(gl.int32, [CONSUMERS, 32], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        for i in gl.static_range(CONSUMERS):
            mbarrier.init(q_ready.index(i), count=1)
            mbarrier.init(q_empty.index(i), count=1)
            mbarrier.init(turn.index(i), count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(k_empty.index(i), count=CONSUMERS)   # released by every consumer warpgroup
            mbarrier.init(v_empty.index(i), count=CONSUMERS)
        return Buffers(q_smem, o_smem, k_bufs, v_bufs, q_ready, q_empty, k_ready, v_ready, k_empty, v_empty, turn,
                       tile_ids, O_BUFFER)


@bundle
class Globals:
    """What a program reads and writes in global memory: descriptors of the whole (B, H, N, D)
    q, k, v, o; LSE (B, H, Nq) float32; for packed sequences O, o's pointer, with its head
    and row strides, for the rows of a tile that reach past their sequence (None and zeros
    otherwise); SINKS, a learnable sink logit a head (None without)."""
    q_desc: gl.base_value
    k_desc: gl.base_value
    v_desc: gl.base_value
    o_desc: gl.base_value
    LSE: gl.base_value
    O: gl.base_value
    stride_oh: gl.base_value
    stride_on: gl.base_value
    SINKS: gl.base_value


@bundle
class Schedule:
    """How the persistent programs share the n_tiles tiles: round-robin, or with DYNAMIC each
    to the first program to ask, through SCHED's two int32 counters (tiles handed out, programs
    done), zero at launch and left at zero."""
    SCHED: gl.base_value
    n_tiles: gl.base_value
    DYNAMIC: gl.constexpr


@gluon.jit
def _load_kv(desc, ring, ready, empty, c, b, hk, row):
    # The key block from row `row` of (b, hk) into ring slot c % STAGES (c counts blocks over the
    # program's tiles). A fresh mbarrier is in phase 0, so waiting for parity 1 passes: the
    # first lap is free.
    STAGES: gl.constexpr = ring.shape[0]
    s = c % STAGES
    mbarrier.wait(empty.index(s), ((c // STAGES) & 1) ^ 1)
    mbarrier.expect(ready.index(s), desc.block_type.nbytes)
    tma.async_copy_global_to_shared(desc, [b, hk, row, 0], ready.index(s), _tma_view(ring.index(s), desc))


@gluon.jit
def _warp_increment(counter):
    # counter += 1 by one lane of the (1-warp) producer; the warp's reduction gives every lane
    # the value before the add. The dynamic schedule's two counters: sched[0] the tiles handed
    # out (the next tile is its old value), sched[1] the programs done.
    lanes: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    lane = gl.arange(0, 32, layout=lanes)
    old = gl.atomic_add(counter + lane * 0, gl.full([32], 1, gl.int32, lanes), mask=lane == 0)
    return gl.max(gl.where(lane == 0, old, 0), axis=0)


@gluon.jit
def _post_tile(tile_ids, w, t):
    # Tell consumer warpgroup w its next tile t (t >= n_tiles: none left). Its slot was read
    # before w released its Q buffer (q_empty), which the caller waited for. Every lane's store
    # is ordered before the arrive (the partition's barrier), and the arrive releases them to
    # the consumers, whose wait on q_ready acquires them.
    lanes: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    tile_ids.index(w).store(gl.full([32], t, gl.int32, lanes))
    gl.thread_barrier()


@gluon.jit
def _produce_tile(t, c, ti, io, bufs, sched, tiles, SCORE: gl.constexpr):
    # Tile t's loads (c: K/V blocks loaded before it, ti: tiles before it); returns (c, ti)
    # after it. A packed batch's tiles past their sequence's rows are skipped: no consumer
    # hears of them.
    BLOCK_N: gl.constexpr = bufs.k_bufs.shape[1]
    CONSUMERS: gl.constexpr = bufs.tile_ids.shape[0]
    BLOCK_M: gl.constexpr = bufs.q_smem.shape[1]
    b, h, m0, n_kv, n_full, q0, nq, k0, nk = tiles.query_tile(t, SCORE, CONSUMERS * BLOCK_M, BLOCK_N)
    lo, _ = _window_start(m0, SCORE, CONSUMERS * BLOCK_M, BLOCK_N)
    if tiles.VARLEN:
        if m0 < nq:
            c = _load_tile(t, c, ti, b, h // tiles.GROUP, h, q0 + m0, k0, lo, n_kv - lo, io, bufs, sched.DYNAMIC)
            ti += 1
    else:
        c = _load_tile(t, c, ti, b, h // tiles.GROUP, h, m0, k0, lo, n_kv - lo, io, bufs, sched.DYNAMIC)
        ti += 1
    return c, ti


@gluon.jit
def _load_tile(t, c, ti, b, hk, h, q_row, k0, lo, count, io, bufs, DYNAMIC: gl.constexpr):
    # Tile t: its Q tiles from row q_row of (b, h), its key blocks lo .. lo + count of the
    # keys from row k0 of (b, hk); returns c after them.
    STAGES: gl.constexpr = bufs.k_bufs.shape[0]
    BLOCK_N: gl.constexpr = bufs.k_bufs.shape[1]
    CONSUMERS: gl.constexpr = bufs.tile_ids.shape[0]
    BLOCK_M: gl.constexpr = bufs.q_smem.shape[1]
    # The tile's first K/V blocks go before its Q, whose buffer the previous tile holds until
    # its last S product has retired (or, with O staged in Q's buffer, until O's store has
    # read it): they load while the consumers finish that tile.
    n_pre = gl.minimum(count, STAGES)
    for j in range(n_pre):
        _load_kv(io.k_desc, bufs.k_bufs, bufs.k_ready, bufs.k_empty, c + j, b, hk, k0 + (lo + j) * BLOCK_N)
        _load_kv(io.v_desc, bufs.v_bufs, bufs.v_ready, bufs.v_empty, c + j, b, hk, k0 + (lo + j) * BLOCK_N)
    for w in gl.static_range(CONSUMERS):
        mbarrier.wait(bufs.q_empty.index(w), (ti & 1) ^ 1)
        if DYNAMIC:
            _post_tile(bufs.tile_ids, w, t)
        mbarrier.expect(bufs.q_ready.index(w), io.q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(io.q_desc, [b, h, q_row + w * BLOCK_M, 0], bufs.q_ready.index(w),
                                        _tma_view(bufs.q_smem.index(w), io.q_desc))
    for j in range(n_pre, count):
        _load_kv(io.k_desc, bufs.k_bufs, bufs.k_ready, bufs.k_empty, c + j, b, hk, k0 + (lo + j) * BLOCK_N)
        _load_kv(io.v_desc, bufs.v_bufs, bufs.v_ready, bufs.v_empty, c + j, b, hk, k0 + (lo + j) * BLOCK_N)
    return c + count


@gluon.jit
def _producer(io, bufs, sched, tiles, SCORE: gl.constexpr):
    c = 0
    ti = 0
    if sched.DYNAMIC:
        # Tiles in order, each to the program whose producer asks first: the longest go first
        # and the programs that finish early take the short ones (greedy longest-first).
        t = _warp_increment(sched.SCHED)
        while t < sched.n_tiles:
            c, ti = _produce_tile(t, c, ti, io, bufs, sched, tiles, SCORE)
            t = _warp_increment(sched.SCHED)
        CONSUMERS: gl.constexpr = bufs.tile_ids.shape[0]
        for w in gl.static_range(CONSUMERS):    # no tile left: each consumer gets t >= n_tiles and stops
            mbarrier.wait(bufs.q_empty.index(w), (ti & 1) ^ 1)
            _post_tile(bufs.tile_ids, w, t)
            mbarrier.arrive(bufs.q_ready.index(w), count=1)
        # The last program to finish puts the schedule back to zero, so that the same
        # arguments launch again (a benchmark's repeats, a CUDA graph's replays).
        last = _warp_increment(sched.SCHED + 1) == gl.num_programs(0) - 1
        lanes: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
        lane = gl.arange(0, 32, layout=lanes)
        gl.atomic_xchg(sched.SCHED + lane, gl.zeros([32], gl.int32, lanes), mask=(lane < 2) & last)
    else:
        for t in range(gl.program_id(0), sched.n_tiles, gl.num_programs(0)):
            c, ti = _produce_tile(t, c, ti, io, bufs, sched, tiles, SCORE)


@gluon.jit
def _softmax_step(qk, m_i, l_i, row0, col0, Nk, scores, MASKED: gl.constexpr, FIXED_MAX: gl.constexpr):
    # Online softmax of one key block in base 2 (`scores.base2`: without a softcap, times
    # qk_scale = scale * log2 e):
    #   m' = max(m, max_j base2(s_j)),  p_j = 2^(base2(s_j) - m'),
    #   alpha = 2^(m - m'),  l' = alpha * l + sum_j p_j.
    # With a positive scale the row maximum is taken on the raw scores and scaled once, and
    # base2(s) - m' is one fused multiply-add per score. With a softcap the base-2 score is
    # tanh(qk qk_scale) c log2 e (`scores.capped`): the row maximum is taken on tanh (c > 0
    # keeps the order) and scaled once the same way.
    # With FIXED_MAX (a softcap's bound reference, `fixed_reference`), m stays FIXED_MAX: every
    # base-2 score lies in [-C, C], C = c log2 e, so p = 2^(score - FIXED_MAX) is normal and
    # bounded without a running maximum; alpha is 1 and nothing is rescaled.
    SCORE: gl.constexpr = scores.SCORE
    MAX_SCALED: gl.constexpr = SCORE.scale_positive or SCORE.softcap > 0
    qk = scores.capped(qk)
    if not MAX_SCALED:
        qk = scores.base2(qk)
    if MASKED:
        qk = scores.mask(qk, float("-inf"), row0, col0, Nk)
    if FIXED_MAX > 0:
        p = gl.exp2(scores.base2(qk) - FIXED_MAX)
        m_new = m_i
        alpha = m_i                                       # unused: nothing to rescale
        l_new = l_i + gl.sum(p, axis=1)
    else:
        if MAX_SCALED:
            m_new = gl.maximum(m_i, scores.base2(gl.max(qk, axis=1)))
        else:
            m_new = gl.maximum(m_i, gl.max(qk, axis=1))
        # A window's first blocks may hold none of a row's keys yet (its window starts further
        # on): its max is still -inf, and 2^(-inf - -inf) would be NaN; measured from 0 instead,
        # its p and alpha are 0. Every row sees a key by its last block (the dispatch's condition).
        m_base = m_new
        if MASKED and SCORE.window_left >= 0:
            m_base = gl.where(m_new == float("-inf"), 0.0, m_new)
        if MAX_SCALED:
            p = gl.exp2(scores.base2(qk) - gl.expand_dims(m_base, 1))
        else:
            p = gl.exp2(qk - gl.expand_dims(m_base, 1))
        alpha = gl.exp2(m_i - m_base)
        l_new = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_new


@gluon.jit
def _wait_turn(my_turn, c, WG: gl.constexpr):
    # The turn goes round the consumer warpgroups in order, each wait needing the previous
    # one's arrive, so its parity is the issue count's: warpgroup 0 finds its first turn free,
    # the others wait for theirs.
    if WG == 0:
        mbarrier.wait(my_turn, (c & 1) ^ 1)
    else:
        mbarrier.wait(my_turn, c & 1)


@gluon.jit
def _consumer_block(c, j, acc, pb, m_i, l_i, q, q_free, last, my_turn, next_turn, WG: gl.constexpr, row0, Nk, bufs,
                    scores, MASKED: gl.constexpr, FIXED_MAX: gl.constexpr):
    # Key block j of a tile, not its first (c: this block counted over the program's tiles):
    # S(j) and P(j-1) V(j-1) in flight together, softmax(j) under the latter. With O staged in
    # a buffer of its own (O_BUFFER) the tile's last block (last) releases Q's buffer once its
    # S, the last product to read Q, has retired (`_consumer_tile`).
    STAGES: gl.constexpr = bufs.k_bufs.shape[0]
    BLOCK_N: gl.constexpr = bufs.k_bufs.shape[1]
    BLOCK_M: gl.constexpr = q.shape[0]
    NW: gl.constexpr = gl.num_warps()
    s_layout: gl.constexpr = _wgmma_layout(NW, BLOCK_N)
    o_layout: gl.constexpr = acc.type.layout
    p_layout: gl.constexpr = pb.type.layout
    s = c % STAGES
    sp = (c - 1) % STAGES
    mbarrier.wait(bufs.k_ready.index(s), (c // STAGES) & 1)
    mbarrier.wait(bufs.v_ready.index(sp), ((c - 1) // STAGES) & 1)
    _wait_turn(my_turn, c, WG)
    qk = warpgroup_mma(q, bufs.k_bufs.index(s).permute((1, 0)), gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout),
                       use_acc=False, is_async=True)
    acc = warpgroup_mma(pb, bufs.v_bufs.index(sp), acc, is_async=True)
    mbarrier.arrive(next_turn, count=1)
    qk = warpgroup_mma_wait(num_outstanding=1, deps=(qk, ))
    mbarrier.arrive(bufs.k_empty.index(s), count=1)
    if bufs.O_BUFFER:
        mbarrier.arrive(q_free, count=1, pred=last)
    p, alpha, m_i, l_i = _softmax_step(qk, m_i, l_i, row0, j * BLOCK_N, Nk, scores, MASKED, FIXED_MAX)
    pb_next = gl.convert_layout(p.to(q.dtype), p_layout)
    # pb is the register operand of the product in flight: a dependency of the wait that
    # retires it, so its registers are not reused before the tensor cores have read them.
    acc, pb = warpgroup_mma_wait(num_outstanding=0, deps=(acc, pb))
    mbarrier.arrive(bufs.v_empty.index(sp), count=1)
    if FIXED_MAX == 0:
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
    return acc, pb_next, m_i, l_i


@gluon.jit
def _consumer_tile(WG: gl.constexpr, ROWS: gl.constexpr, c, tile, q, q_free, o_buf, my_turn, next_turn, bufs, io,
                   tiles, scores, FIXED_MAX: gl.constexpr):
    # Rows [m0, m0 + ROWS) of a sequence of nq queries and nk keys (q0: its first row in the
    # (b, h) rows of o and LSE; rows local to the sequence); this warpgroup's 64 of them.
    # Q's buffer is released (q_free) as soon as nothing reads it again: with O staged in a
    # buffer of its own (O_BUFFER; o_buf), once the tile's last S product has retired, so that
    # the next tile's Q lands under this one's last softmax, last P V and epilogue; with O
    # staged in Q's buffer (o_buf is q), once O's store has read it.
    b, h, m0, n_kv, n_full, q0, nq, nk = tile
    BLOCK_M: gl.constexpr = q.shape[0]
    HEAD_DIM: gl.constexpr = q.shape[1]
    STAGES: gl.constexpr = bufs.k_bufs.shape[0]
    BLOCK_N: gl.constexpr = bufs.k_bufs.shape[1]
    lay = _row_layouts(gl.num_warps(), BLOCK_N, HEAD_DIM)
    row0 = m0 + WG * BLOCK_M
    # The walk: key blocks [lo, n_kv), of which [lo, edge) hold the left window's edge,
    # [edge, band) are whole for every row and [band, n_kv) hold the diagonal and the ragged
    # tail (edge and band counted from lo).
    lo, edge, band, first_whole, count = _walk(m0, n_kv, n_full, scores.SCORE, ROWS, BLOCK_N)

    # Block lo: S alone, then its softmax (masked unless whole).
    s0 = c % STAGES
    mbarrier.wait(bufs.k_ready.index(s0), (c // STAGES) & 1)
    _wait_turn(my_turn, c, WG)
    qk = warpgroup_mma(q, bufs.k_bufs.index(s0).permute((1, 0)), gl.zeros([BLOCK_M, BLOCK_N], gl.float32, lay.s),
                       use_acc=False, is_async=True)
    mbarrier.arrive(next_turn, count=1)
    qk = warpgroup_mma_wait(num_outstanding=0, deps=(qk, ))
    mbarrier.arrive(bufs.k_empty.index(s0), count=1)
    m_i = gl.full([BLOCK_M], FIXED_MAX if FIXED_MAX > 0 else float("-inf"), gl.float32, gl.SliceLayout(1, lay.s))
    l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, lay.s))
    if first_whole:
        p, alpha, m_i, l_i = _softmax_step(qk, m_i, l_i, row0, lo * BLOCK_N, nk, scores, False, FIXED_MAX)
    else:
        p, alpha, m_i, l_i = _softmax_step(qk, m_i, l_i, row0, lo * BLOCK_N, nk, scores, True, FIXED_MAX)
    pb = gl.convert_layout(p.to(q.dtype), lay.a)
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, lay.acc)

    for j in range(1, edge):
        acc, pb, m_i, l_i = _consumer_block(c + j, lo + j, acc, pb, m_i, l_i, q, q_free, j + 1 == count, my_turn,
                                            next_turn, WG, row0, nk, bufs, scores, True, FIXED_MAX)
    for j in range(gl.maximum(edge, 1), band):
        acc, pb, m_i, l_i = _consumer_block(c + j, lo + j, acc, pb, m_i, l_i, q, q_free, j + 1 == count, my_turn,
                                            next_turn, WG, row0, nk, bufs, scores, False, FIXED_MAX)
    for j in range(gl.maximum(band, 1), count):
        acc, pb, m_i, l_i = _consumer_block(c + j, lo + j, acc, pb, m_i, l_i, q, q_free, j + 1 == count, my_turn,
                                            next_turn, WG, row0, nk, bufs, scores, True, FIXED_MAX)

    # The last block's P V, then O = acc / l through shared memory (o_buf) and a TMA store
    # that drops rows past Nq; in a packed batch a warpgroup's rows that reach past their
    # sequence (into the next one's rows) are stored through masked pointers instead.
    c_last = c + count - 1
    s_last = c_last % STAGES
    mbarrier.wait(bufs.v_ready.index(s_last), (c_last // STAGES) & 1)
    acc = warpgroup_mma(pb, bufs.v_bufs.index(s_last), acc, is_async=True)
    acc, pb = warpgroup_mma_wait(num_outstanding=0, deps=(acc, pb))
    mbarrier.arrive(bufs.v_empty.index(s_last), count=1)
    if bufs.O_BUFFER:
        mbarrier.arrive(q_free, count=1, pred=count == 1)     # a walk of one block: its S was the last
    if scores.SCORE.sinks:
        m_i, l_i, o_scale = scores.with_sink(m_i, l_i, io.SINKS, h)
        acc = acc * gl.expand_dims(gl.convert_layout(o_scale, gl.SliceLayout(1, lay.acc)), 1)
    else:
        acc = acc / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, lay.acc)), 1)
    if bufs.O_BUFFER:
        tma.store_wait(pendings=0)          # the previous tile's O has left o_buf
    if tiles.VARLEN:
        if row0 + BLOCK_M <= nq:
            _store_tile(o_buf, io.o_desc, acc, b, h, q0 + row0, 0)
        else:
            _store_rows(io.O, acc.to(q.dtype), h * io.stride_oh, q0 + row0, nq - row0, io.stride_on)
    else:
        _store_tile(o_buf, io.o_desc, acc, b, h, row0, 0)

    rows = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, lay.s))
    lse = (m_i + gl.log2(l_i)) * 0.6931471805599453          # natural-log units
    gl.store(io.LSE + (b * tiles.heads + h).to(gl.int64) * tiles.Nq + q0 + rows, lse, mask=rows < nq)
    if not bufs.O_BUFFER:
        tma.store_wait(pendings=0)          # O has left Q's buffer: a next Q may land
        mbarrier.arrive(q_free, count=1)


@gluon.jit
def _empty_rows(WG: gl.constexpr, q, h, m0, q0, nq, io, tiles, scores):
    # A packed sequence with no keys: its rows see none, so o = 0 and lse = -inf, or with
    # learnable sinks the head's sink, their softmax's only term (this warpgroup's 64 rows of
    # the tile from m0).
    BLOCK_M: gl.constexpr = q.shape[0]
    HEAD_DIM: gl.constexpr = q.shape[1]
    row0 = m0 + WG * BLOCK_M
    _zero_rows(io.O, h * io.stride_oh, q0 + row0, nq - row0, io.stride_on, BLOCK_M, HEAD_DIM, q.dtype)
    rows_layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    rows = row0 + gl.arange(0, BLOCK_M, layout=rows_layout)
    lse = gl.full([BLOCK_M], float("-inf"), gl.float32, rows_layout)
    if scores.SCORE.sinks:
        lse = scores.sink_logit(io.SINKS, h, lse)
    gl.store(io.LSE + h.to(gl.int64) * tiles.Nq + q0 + rows, lse, mask=rows < nq)


@gluon.jit
def _consume_tile(WG: gl.constexpr, CONSUMERS: gl.constexpr, t, c, q, q_free, o_buf, bufs, io, tiles, scores,
                  FIXED_MAX: gl.constexpr):
    # Tile t, its Q landed (c: K/V blocks consumed before it); returns c after it, with Q's
    # buffer released (q_free).
    BLOCK_M: gl.constexpr = q.shape[0]
    BLOCK_N: gl.constexpr = bufs.k_bufs.shape[1]
    SCORE: gl.constexpr = scores.SCORE
    b, h, m0, n_kv, n_full, q0, nq, k0, nk = tiles.query_tile(t, SCORE, CONSUMERS * BLOCK_M, BLOCK_N)
    lo, _ = _window_start(m0, SCORE, CONSUMERS * BLOCK_M, BLOCK_N)
    if tiles.VARLEN:
        if n_kv > lo:
            _consumer_tile(WG, CONSUMERS * BLOCK_M, c, (b, h, m0, n_kv, n_full, q0, nq, nk), q, q_free, o_buf,
                           bufs.turn.index(WG), bufs.turn.index((WG + 1) % CONSUMERS), bufs, io, tiles, scores,
                           FIXED_MAX)
        else:
            _empty_rows(WG, q, h, m0, q0, nq, io, tiles, scores)
            mbarrier.arrive(q_free, count=1)
    else:
        _consumer_tile(WG, CONSUMERS * BLOCK_M, c, (b, h, m0, n_kv, n_full, q0, nq, nk), q, q_free, o_buf,
                       bufs.turn.index(WG), bufs.turn.index((WG + 1) % CONSUMERS), bufs, io, tiles, scores, FIXED_MAX)
    return c + n_kv - lo


@gluon.jit
def _posted_tile(tile_ids, WG: gl.constexpr):
    # The tile the producer posted for this warpgroup (`_post_tile`), read after q_ready.
    lanes: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    return gl.max(tile_ids.index(WG).load(lanes), axis=0)


@gluon.jit
def _consumer(WG: gl.constexpr, bufs, io, sched, tiles, scores, FIXED_MAX: gl.constexpr):
    CONSUMERS: gl.constexpr = bufs.turn.shape[0]
    q = bufs.q_smem.index(WG)
    o_buf = bufs.o_smem.index(WG)
    c = 0
    ti = 0
    if sched.DYNAMIC:
        mbarrier.wait(bufs.q_ready.index(WG), 0)
        t = _posted_tile(bufs.tile_ids, WG)
        while t < sched.n_tiles:
            c = _consume_tile(WG, CONSUMERS, t, c, q, bufs.q_empty.index(WG), o_buf, bufs, io, tiles, scores,
                              FIXED_MAX)
            ti += 1
            mbarrier.wait(bufs.q_ready.index(WG), ti & 1)
            t = _posted_tile(bufs.tile_ids, WG)
    else:
        for t in range(gl.program_id(0), sched.n_tiles, gl.num_programs(0)):
            mbarrier.wait(bufs.q_ready.index(WG), ti & 1)
            c = _consume_tile(WG, CONSUMERS, t, c, q, bufs.q_empty.index(WG), o_buf, bufs, io, tiles, scores,
                              FIXED_MAX)
            ti += 1
    if bufs.O_BUFFER:
        tma.store_wait(pendings=0)          # the last O stored before the program ends


@gluon.jit
def _attn_fwd_kernel(
    # tensor descriptors of the whole (B, H, N, D) q, k, v, o; LSE: (B, H, Nq) float32;
    # SCHED: DYNAMIC's two int32 counters (tiles handed out, programs done), zero at launch and
    # left at zero (unused otherwise); packed sequences (VARLEN, B = 1, N the totals): CU_Q,
    # CU_K their int32 cumulative lengths (SEQS + 1 each), O the output's pointer for the rows of
    # a tile that reach past their sequence (None, None and o's data otherwise); SINKS: a
    # learnable sink logit a head, in its own dtype (None without)
    q_desc, k_desc, v_desc, o_desc, LSE, SCHED, CU_Q, CU_K, O, SINKS,
    # sizes: (Nq, Nk, H, GROUP), GROUP = query heads per kv head; qk_scale: what Q K^T is
    # multiplied by (`score.kernel_qk_scale`); tiling: (n_m, n_tiles, HEAD_SPAN), n_m row blocks
    # of CONSUMERS x 64 per head, n_tiles = n_m * H * B, taken round-robin by the programs, or
    # with DYNAMIC each by the first program to ask; packed: n_m = cdiv(Nq, CONSUMERS x 64) +
    # SEQS a head (`common._varlen_tile`), n_tiles = n_m * H; HEAD_SPAN: the heads LONGEST_FIRST
    # orders together (`common._ordered_tile`); packed: (SEQS, o's head and row strides), zeros
    # when dense
    sizes, qk_scale, tiling, packed,
    # meta (SCORE: the `score.Score`, `score.Scores` applies it; CONSUMERS: 64-row consumer
    # warpgroups, 2 or 3, with CONSUMER_REGS registers each; FIXED_MAX: the softcap's fixed
    # base-2 reference for p, 0 for a running row maximum; VARLEN: packed sequences;
    # LONGEST_FIRST: the tiles' order, `common._ordered_tile`; O_BUFFER: O staged in shared
    # memory of its own rather than in Q's, so that a tile's Q buffer is free for the next
    # tile's Q before this tile's epilogue, `_consumer_tile`)
    SCORE: gl.constexpr, DYNAMIC: gl.constexpr, STAGES: gl.constexpr, CONSUMERS: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr, FIXED_MAX: gl.constexpr, VARLEN: gl.constexpr,
    LONGEST_FIRST: gl.constexpr, O_BUFFER: gl.constexpr,
):
    gl.static_assert(gl.num_warps() == 4)
    Nq, Nk, H, GROUP = sizes
    n_m, n_tiles, HEAD_SPAN = tiling
    SEQS, stride_oh, stride_on = packed
    bufs = Buffers.allocate(q_desc, k_desc, STAGES, CONSUMERS, O_BUFFER)
    io = Globals(q_desc, k_desc, v_desc, o_desc, LSE, O, stride_oh, stride_on, SINKS)
    sched = Schedule(SCHED, n_tiles, DYNAMIC)
    tiles = Tiles(n_m, HEAD_SPAN, H, GROUP, Nq, Nk, CU_Q, CU_K, SEQS, LONGEST_FIRST, VARLEN)
    scores = Scores(qk_scale, SCORE)
    scores.check()
    if CONSUMERS == 3:
        gl.warp_specialize([
            (_consumer, (0, bufs, io, sched, tiles, scores, FIXED_MAX)),
            (_consumer, (1, bufs, io, sched, tiles, scores, FIXED_MAX)),
            (_consumer, (2, bufs, io, sched, tiles, scores, FIXED_MAX)),
            (_producer, (io, bufs, sched, tiles, SCORE)),
        ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, PRODUCER_REGS])
    else:
        gl.static_assert(CONSUMERS == 2)
        gl.warp_specialize([
            (_consumer, (0, bufs, io, sched, tiles, scores, FIXED_MAX)),
            (_consumer, (1, bufs, io, sched, tiles, scores, FIXED_MAX)),
            (_producer, (io, bufs, sched, tiles, SCORE)),
        ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
