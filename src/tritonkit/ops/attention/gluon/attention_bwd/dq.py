"""The dQ pass of the Gluon attention backward (the package's docstring has the design): the
forward's structure, one program per 128 query rows of one (batch, head), or of one packed
sequence's head (VARLEN), K and V streamed through a ring, two 64-row consumer warpgroups
passing a turn."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

from ..common import (
    _query_tile, _softcap_tanh, _store_rows, _store_tile, _tma_view, _walk, _wgmma_layout, _window_start,
    _zero_rows)


@gluon.jit
def _dq_loads(q_desc, do_desc, o_desc, k_desc, v_desc, q_smem, do_smem, o_smem, k_bufs, v_bufs, q_ready, ready,
              empty, b, h, hk, q_row, k_row, count):
    # The tile's Q, dO and O from row q_row of (b, h), then `count` key blocks from row k_row
    # of (b, hk) through the ring.
    STAGES: gl.constexpr = k_bufs.shape[0]
    BLOCK_N: gl.constexpr = k_bufs.shape[1]
    BLOCK_M: gl.constexpr = q_smem.shape[1]
    for w in gl.static_range(2):
        mbarrier.expect(q_ready.index(w), 3 * q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [b, h, q_row + w * BLOCK_M, 0], q_ready.index(w),
                                        _tma_view(q_smem.index(w), q_desc))
        tma.async_copy_global_to_shared(do_desc, [b, h, q_row + w * BLOCK_M, 0], q_ready.index(w),
                                        _tma_view(do_smem.index(w), do_desc))
        tma.async_copy_global_to_shared(o_desc, [b, h, q_row + w * BLOCK_M, 0], q_ready.index(w),
                                        _tma_view(o_smem.index(w), o_desc))
    for t in range(count):
        s = t % STAGES
        mbarrier.wait(empty.index(s), ((t // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(s), 2 * k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [b, hk, k_row + t * BLOCK_N, 0], ready.index(s),
                                        _tma_view(k_bufs.index(s), k_desc))
        tma.async_copy_global_to_shared(v_desc, [b, hk, k_row + t * BLOCK_N, 0], ready.index(s),
                                        _tma_view(v_bufs.index(s), v_desc))


@gluon.jit
def _dq_producer(q_desc, do_desc, o_desc, k_desc, v_desc, q_smem, do_smem, o_smem, k_bufs, v_bufs, q_ready, ready,
                 empty, n_m, HEAD_SPAN, LONGEST_FIRST: gl.constexpr, H, GROUP, Nq, Nk, CU_Q, CU_K, SEQS,
                 CAUSAL: gl.constexpr, WINDOW_LEFT: gl.constexpr, VARLEN: gl.constexpr):
    BLOCK_N: gl.constexpr = k_bufs.shape[1]
    BLOCK_M: gl.constexpr = q_smem.shape[1]
    b, h, m0, n_kv, n_full, q0, nq, k0, nk = _query_tile(gl.program_id(0), n_m, HEAD_SPAN, LONGEST_FIRST, H,
                                                         Nq, Nk, CU_Q, CU_K, SEQS, CAUSAL, 2 * BLOCK_M, BLOCK_N, VARLEN)
    lo, _ = _window_start(m0, WINDOW_LEFT, 2 * BLOCK_M, BLOCK_N)
    if VARLEN:
        # A tile past its sequence's rows, or of a sequence without keys, loads nothing.
        if (m0 < nq) & (n_kv > 0):
            _dq_loads(q_desc, do_desc, o_desc, k_desc, v_desc, q_smem, do_smem, o_smem, k_bufs, v_bufs, q_ready,
                      ready, empty, b, h, h // GROUP, q0 + m0, k0 + lo * BLOCK_N, n_kv - lo)
    else:
        _dq_loads(q_desc, do_desc, o_desc, k_desc, v_desc, q_smem, do_smem, o_smem, k_bufs, v_bufs, q_ready, ready,
                  empty, b, h, h // GROUP, m0, lo * BLOCK_N, n_kv - lo)


@gluon.jit
def _dq_scores(j, q, do, k_bufs, v_bufs, ready, my_turn, other_turn, WG: gl.constexpr, dq, dsb,
               PREV: gl.constexpr):
    # Issue S(j) = Q K(j)^T and dP(j) = dO V(j)^T on this warpgroup's turn, and with PREV
    # (j >= 1) dQ += dS(j-1) K(j-1) behind them.
    STAGES: gl.constexpr = k_bufs.shape[0]
    BLOCK_N: gl.constexpr = k_bufs.shape[1]
    BLOCK_M: gl.constexpr = q.shape[0]
    s_layout: gl.constexpr = _wgmma_layout(gl.num_warps(), BLOCK_N)
    s = j % STAGES
    mbarrier.wait(ready.index(s), (j // STAGES) & 1)
    # The turn alternates strictly, so its parity is the issue count's: warpgroup 0 finds its
    # first turn free, warpgroup 1 waits for it.
    mbarrier.wait(my_turn, (j & 1) ^ (1 - WG))
    zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    st = warpgroup_mma(q, k_bufs.index(s).permute((1, 0)), zero, use_acc=False, is_async=True)
    dp = warpgroup_mma(do, v_bufs.index(s).permute((1, 0)), zero, use_acc=False, is_async=True)
    if PREV:
        dq = warpgroup_mma(dsb, k_bufs.index((j - 1) % STAGES), dq, is_async=True)
    mbarrier.arrive(other_turn, count=1)
    return st, dp, dq


@gluon.jit
def _dq_ds(st, dp, lse2, delta, row0, col0, Nk, qk_scale, a_layout: gl.constexpr, dtype: gl.constexpr,
           MASKED: gl.constexpr, CAUSAL: gl.constexpr, SOFTCAP: gl.constexpr, WINDOW_LEFT: gl.constexpr):
    # dS = P * (dP - delta) with P = 2^(S qk_scale - lse2) (softcap: P = 2^(tanh(S qk_scale) c
    # log2 e - lse2), times 1 - tanh^2); masked blocks zero P for keys past Nk (the sequence's
    # keys: past them K's rows are zeros, or a packed batch's next sequence's; 2^(-lse2) could
    # overflow) and, causal, after the query (and with a left window before its first key).
    s_layout: gl.constexpr = st.type.layout
    if SOFTCAP > 0:
        th = _softcap_tanh(st, qk_scale)
        p = gl.exp2(th * (SOFTCAP * 1.4426950408889634) - gl.expand_dims(lse2, 1))
    else:
        p = gl.exp2(st * qk_scale - gl.expand_dims(lse2, 1))
    if MASKED:
        cols = col0 + gl.arange(0, st.shape[1], layout=gl.SliceLayout(0, s_layout))
        keep = gl.expand_dims(cols < Nk, 0)
        if CAUSAL:
            rows = row0 + gl.arange(0, st.shape[0], layout=gl.SliceLayout(1, s_layout))
            keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1))
            if WINDOW_LEFT >= 0:
                keep = keep & (gl.expand_dims(cols, 0) >= gl.expand_dims(rows - WINDOW_LEFT, 1))
        p = gl.where(keep, p, 0.0)
    if SOFTCAP > 0:
        p = p * (1.0 - th * th)
    ds = p * (dp - gl.expand_dims(delta, 1))
    return gl.convert_layout(ds.to(dtype), a_layout)


@gluon.jit
def _dq_block(j, lo, dq, dsb, lse2, delta, q, do, k_bufs, v_bufs, ready, empty, my_turn, other_turn,
              WG: gl.constexpr, row0, Nk, qk_scale, MASKED: gl.constexpr, CAUSAL: gl.constexpr, SOFTCAP: gl.constexpr,
              WINDOW_LEFT: gl.constexpr):
    # Block j >= 1 of the program's walk (key block lo + j, ring slot j % STAGES): S(j), dP(j)
    # and dS(j-1) K(j-1) in flight together; dS(j) formed under the last of them.
    STAGES: gl.constexpr = k_bufs.shape[0]
    BLOCK_N: gl.constexpr = k_bufs.shape[1]
    a_layout: gl.constexpr = dsb.type.layout
    st, dp, dq = _dq_scores(j, q, do, k_bufs, v_bufs, ready, my_turn, other_turn, WG, dq, dsb, True)
    st, dp = warpgroup_mma_wait(num_outstanding=1, deps=(st, dp))
    dsb_next = _dq_ds(st, dp, lse2, delta, row0, (lo + j) * BLOCK_N, Nk, qk_scale, a_layout, q.dtype,
                      MASKED, CAUSAL, SOFTCAP, WINDOW_LEFT)
    # dsb is the register operand of the product in flight: a dependency of the wait that
    # retires it, so its registers are not reused before the tensor cores have read them.
    dq, dsb = warpgroup_mma_wait(num_outstanding=0, deps=(dq, dsb))
    mbarrier.arrive(empty.index((j - 1) % STAGES), count=1)
    return dq, dsb_next


@gluon.jit
def _dq_delta(do, o, DELTA, DLSE, row_base, row0, Nq, s_layout: gl.constexpr, HAS_DLSE: gl.constexpr):
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
    if HAS_DLSE:
        delta -= gl.load(DLSE + row_base + rows, mask=rows < Nq, other=0.0)
    gl.store(DELTA + row_base + rows, delta, mask=rows < Nq)
    return gl.convert_layout(delta, gl.SliceLayout(1, s_layout))


@gluon.jit
def _dq_rows(WG: gl.constexpr, b, h, m0, n_kv, n_full, q0, nq, nk, q_smem, do_smem, o_smem, k_bufs, v_bufs, q_ready,
             ready, empty, turn, dq_desc, DQ, stride_qh, stride_qn, LSE, DELTA, DLSE, H, Nq, qk_scale, sm_scale,
             CAUSAL: gl.constexpr, SOFTCAP: gl.constexpr, WINDOW_LEFT: gl.constexpr, HAS_DLSE: gl.constexpr,
             VARLEN: gl.constexpr):
    # This warpgroup's 64 of rows [m0, m0 + 128) of a sequence of nq queries and nk keys (q0:
    # its first row in the (b, h) rows of dq, LSE and DELTA; rows local to the sequence), over
    # key blocks [0, n_kv), of which [0, n_full) are whole for every row.
    BLOCK_M: gl.constexpr = q_smem.shape[1]
    HEAD_DIM: gl.constexpr = q_smem.shape[2]
    STAGES: gl.constexpr = k_bufs.shape[0]
    BLOCK_N: gl.constexpr = k_bufs.shape[1]
    NW: gl.constexpr = gl.num_warps()
    s_layout: gl.constexpr = _wgmma_layout(NW, BLOCK_N)
    acc_layout: gl.constexpr = _wgmma_layout(NW, HEAD_DIM)
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    row0 = m0 + WG * BLOCK_M
    q = q_smem.index(WG)
    do = do_smem.index(WG)
    my_turn = turn.index(WG)
    other_turn = turn.index(1 - WG)
    rows = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    row_base = (b * H + h).to(gl.int64) * Nq + q0
    lse2 = gl.load(LSE + row_base + rows, mask=rows < nq, other=0.0) * 1.4426950408889634
    mbarrier.wait(q_ready.index(WG), 0)
    delta = _dq_delta(do, o_smem.index(WG), DELTA, DLSE, row_base, row0, nq, s_layout, HAS_DLSE)

    # The walk: key blocks [lo, n_kv), of which [lo, edge) hold the left window's edge,
    # [edge, band) are whole for every row and [band, n_kv) hold the diagonal and the ragged
    # tail (edge and band counted from lo); block lo alone first (masked unless whole).
    lo, edge, band, first_whole, count = _walk(m0, n_kv, n_full, WINDOW_LEFT, 2 * BLOCK_M, BLOCK_N)
    dq = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, acc_layout)
    st, dp, dq = _dq_scores(0, q, do, k_bufs, v_bufs, ready, my_turn, other_turn, WG, dq, dq, False)
    st, dp = warpgroup_mma_wait(num_outstanding=0, deps=(st, dp))
    if first_whole:
        dsb = _dq_ds(st, dp, lse2, delta, row0, lo * BLOCK_N, nk, qk_scale, a_layout, q.dtype, False, CAUSAL, SOFTCAP,
                     WINDOW_LEFT)
    else:
        dsb = _dq_ds(st, dp, lse2, delta, row0, lo * BLOCK_N, nk, qk_scale, a_layout, q.dtype, True, CAUSAL, SOFTCAP,
                     WINDOW_LEFT)
    for j in range(1, edge):
        dq, dsb = _dq_block(j, lo, dq, dsb, lse2, delta, q, do, k_bufs, v_bufs, ready, empty, my_turn, other_turn,
                            WG, row0, nk, qk_scale, True, CAUSAL, SOFTCAP, WINDOW_LEFT)
    for j in range(gl.maximum(edge, 1), band):
        dq, dsb = _dq_block(j, lo, dq, dsb, lse2, delta, q, do, k_bufs, v_bufs, ready, empty, my_turn, other_turn,
                            WG, row0, nk, qk_scale, False, CAUSAL, SOFTCAP, WINDOW_LEFT)
    for j in range(gl.maximum(band, 1), count):
        dq, dsb = _dq_block(j, lo, dq, dsb, lse2, delta, q, do, k_bufs, v_bufs, ready, empty, my_turn, other_turn,
                            WG, row0, nk, qk_scale, True, CAUSAL, SOFTCAP, WINDOW_LEFT)
    last = (count - 1) % STAGES
    dq = warpgroup_mma(dsb, k_bufs.index(last), dq, is_async=True)
    dq, dsb = warpgroup_mma_wait(num_outstanding=0, deps=(dq, dsb))
    mbarrier.arrive(empty.index(last), count=1)
    # dQ through Q's buffer and a TMA store; in a packed batch, a warpgroup's rows that reach
    # past their sequence (into the next one's) go through masked pointers instead.
    if VARLEN:
        if row0 + BLOCK_M <= nq:
            _store_tile(q, dq_desc, dq * sm_scale, b, h, q0 + row0, 0)
        else:
            _store_rows(DQ, (dq * sm_scale).to(q.dtype), h * stride_qh, q0 + row0, nq - row0, stride_qn)
    else:
        _store_tile(q, dq_desc, dq * sm_scale, b, h, row0, 0)
    tma.store_wait(pendings=0)


@gluon.jit
def _dq_consumer(WG: gl.constexpr, q_smem, do_smem, o_smem, k_bufs, v_bufs, q_ready, ready, empty, turn, dq_desc, DQ,
                 stride_qh, stride_qn, LSE, DELTA, DLSE, n_m, HEAD_SPAN, LONGEST_FIRST: gl.constexpr, H, Nq, Nk, CU_Q,
                 CU_K, SEQS, qk_scale, sm_scale, CAUSAL: gl.constexpr, SOFTCAP: gl.constexpr, WINDOW_LEFT: gl.constexpr,
                 HAS_DLSE: gl.constexpr, VARLEN: gl.constexpr):
    BLOCK_M: gl.constexpr = q_smem.shape[1]
    HEAD_DIM: gl.constexpr = q_smem.shape[2]
    BLOCK_N: gl.constexpr = k_bufs.shape[1]
    b, h, m0, n_kv, n_full, q0, nq, k0, nk = _query_tile(gl.program_id(0), n_m, HEAD_SPAN, LONGEST_FIRST, H,
                                                         Nq, Nk, CU_Q, CU_K, SEQS, CAUSAL, 2 * BLOCK_M, BLOCK_N, VARLEN)
    if VARLEN:
        if m0 < nq:
            if n_kv > 0:
                _dq_rows(WG, b, h, m0, n_kv, n_full, q0, nq, nk, q_smem, do_smem, o_smem, k_bufs, v_bufs, q_ready,
                         ready, empty, turn, dq_desc, DQ, stride_qh, stride_qn, LSE, DELTA, DLSE, H, Nq, qk_scale,
                         sm_scale, CAUSAL, SOFTCAP, WINDOW_LEFT, HAS_DLSE, VARLEN)
            else:
                # A sequence without keys: its rows see none, and their gradient is zero.
                row0 = m0 + WG * BLOCK_M
                _zero_rows(DQ, h * stride_qh, q0 + row0, nq - row0, stride_qn, BLOCK_M, HEAD_DIM, q_smem.dtype)
    else:
        _dq_rows(WG, b, h, m0, n_kv, n_full, q0, nq, nk, q_smem, do_smem, o_smem, k_bufs, v_bufs, q_ready, ready,
                 empty, turn, dq_desc, DQ, stride_qh, stride_qn, LSE, DELTA, DLSE, H, Nq, qk_scale, sm_scale, CAUSAL,
                 SOFTCAP, WINDOW_LEFT, HAS_DLSE, VARLEN)


@gluon.jit
def _dq_kernel(
    # descriptors of the whole (B, H, Nq, D) q, do, o, dq and (B, Hkv, Nk, D) k, v; LSE, DELTA
    # (written here), DLSE (read with HAS_DLSE): (B, H, Nq) float32; packed sequences (VARLEN,
    # B = 1, N the totals): CU_Q, CU_K their int32 cumulative lengths (SEQS + 1 each), DQ dq's
    # pointer for the rows of a tile that reach past their sequence (None, None, dq otherwise)
    q_desc, do_desc, o_desc, k_desc, v_desc, dq_desc, LSE, DELTA, DLSE, CU_Q, CU_K, DQ,
    # shapes and scales (qk_scale = scale * log2 e, or with a softcap c scale / c; sm_scale =
    # scale); n_m: row blocks of 128 per head (packed: cdiv(Nq, 128) + SEQS, `_varlen_tile`);
    # HEAD_SPAN: the heads LONGEST_FIRST orders together (`common._ordered_tile`); dq's head and
    # row strides
    Nq, Nk, H, GROUP, qk_scale, sm_scale, n_m, HEAD_SPAN, SEQS, stride_qh, stride_qn,
    CAUSAL: gl.constexpr, SOFTCAP: gl.constexpr, WINDOW_LEFT: gl.constexpr, STAGES: gl.constexpr,
    HAS_DLSE: gl.constexpr, CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr, VARLEN: gl.constexpr,
    LONGEST_FIRST: gl.constexpr,
):
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[3]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    dtype: gl.constexpr = q_desc.dtype
    gl.static_assert(gl.num_warps() == 4)
    q_2d: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, HEAD_DIM], dtype)
    k_2d: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_DIM], dtype)
    q_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, HEAD_DIM], q_2d)
    do_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, HEAD_DIM], q_2d)
    o_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, HEAD_DIM], q_2d)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_2d)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_2d)
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
    gl.warp_specialize([
        (_dq_consumer, (0, q_smem, do_smem, o_smem, k_bufs, v_bufs, q_ready, ready, empty, turn, dq_desc, DQ,
                         stride_qh, stride_qn, LSE, DELTA, DLSE, n_m, HEAD_SPAN, LONGEST_FIRST, H, Nq, Nk, CU_Q, CU_K,
                         SEQS, qk_scale, sm_scale, CAUSAL, SOFTCAP, WINDOW_LEFT, HAS_DLSE, VARLEN)),
        (_dq_consumer, (1, q_smem, do_smem, o_smem, k_bufs, v_bufs, q_ready, ready, empty, turn, dq_desc, DQ,
                         stride_qh, stride_qn, LSE, DELTA, DLSE, n_m, HEAD_SPAN, LONGEST_FIRST, H, Nq, Nk, CU_Q, CU_K,
                         SEQS, qk_scale, sm_scale, CAUSAL, SOFTCAP, WINDOW_LEFT, HAS_DLSE, VARLEN)),
        (_dq_producer, (q_desc, do_desc, o_desc, k_desc, v_desc, q_smem, do_smem, o_smem, k_bufs, v_bufs, q_ready,
                        ready, empty, n_m, HEAD_SPAN, LONGEST_FIRST, H, GROUP, Nq, Nk, CU_Q, CU_K, SEQS, CAUSAL,
                        WINDOW_LEFT, VARLEN)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
