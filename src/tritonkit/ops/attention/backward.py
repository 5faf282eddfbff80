"""The attention backward kernels, FlashAttention-2 style and deterministic (no atomics):

1. preprocess: delta_i = sum_d dO_id * O_id - dlse_i (d over v's head dim), the row term of dS = P * (dP - delta)
   (dlse: the gradient of the returned log-sum-exp, whose derivative by s_ij is P_ij).
2. dK, dV: one program per (key block, kv head, batch); it walks (query block, query head of
   its group) pairs in one pipelined loop per band, so dK and dV of grouped-query attention
   are summed over the group in a fixed order.
3. dQ: one program per (query block, head, batch), walking the key blocks.

Both 2 and 3 recompute P = 2^(s - lse log2(e)) tile by tile from the forward's lse, with s
the base-2 score of `forward.py` (softcapped where SOFTCAP is on; its dS then carries the
factor 1 - tanh^2). Masks and block ranges come from `mask.py`, as in the forward.
"""

import triton
import triton.language as tl

from .loads import _key_block, _key_sources, _load, _own_tiles, _tile_ptrs
from .mask import _diag, _program_tile, _query_range, _visible, _walk_keys
from .triton_score import _alibi_slope, _score2, _score_at


@triton.jit
def _attn_bwd_preprocess_kernel(
    # pointers (DLSE: None when the lse has no gradient)
    O, DO, DELTA, DLSE,
    # shapes (D: v's head dim, o's and dO's)
    Nq, D,
    # strides of (batch, head, seq, head_dim)
    stride_ob, stride_oh, stride_on, stride_od,
    stride_dob, stride_doh, stride_don, stride_dod,
    # meta
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, PAD_D: tl.constexpr,
):
    # delta_i = sum_d dO_id * O_id (- dlse_i), the row term of dS = P * (dP - delta).
    pid_m = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.program_id(2)
    H = tl.num_programs(1)
    b64 = b.to(tl.int64)
    h64 = h.to(tl.int64)
    start_m = pid_m * BLOCK_M
    rows_m = tl.arange(0, BLOCK_M)
    offs_m = start_m + rows_m
    offs_d = tl.arange(0, BLOCK_D)
    m_ok = offs_m[:, None] < Nq
    d_row = offs_d[None, :] < D
    m64 = tl.cast(start_m, tl.int64)
    o = _load(_tile_ptrs(O, (stride_ob, stride_oh, stride_on, stride_od), b64, h64, m64, rows_m, offs_d),
              m_ok, d_row, True, PAD_D)
    do = _load(_tile_ptrs(DO, (stride_dob, stride_doh, stride_don, stride_dod), b64, h64, m64, rows_m, offs_d),
               m_ok, d_row, True, PAD_D)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    if DLSE is not None:
        delta -= tl.load(DLSE + (b64 * H + h64) * Nq + offs_m, mask=offs_m < Nq, other=0.0)
    tl.store(DELTA + (b64 * H + h64) * Nq + offs_m, delta, mask=offs_m < Nq)


@triton.jit
def _attn_bwd_dkdv_tiles(
    dk, dv, k, v,
    Q, DO, LSE, DELTA, ALIBI, head, loads, tile,
    lo, hi, lengths, qk_scale, diag,
    BLOCK_M: tl.constexpr, HEAD: tl.constexpr, MASKED: tl.constexpr, SCORE: tl.constexpr,
    CHECK_M: tl.constexpr, USE_TMA: tl.constexpr, VARLEN: tl.constexpr,
):
    # For query blocks [lo, hi) of each of the group's query heads, with the key block's K, V
    # loaded once by the caller:
    #   P^T = 2^(s^T - lse2),  dV += P^T dO,
    #   dP^T = V dO^T,  dS^T = P^T [(1 - tanh^2)] * (dP^T - delta),  dK += dS^T Q
    # (times scale at the end). In a dense batch rows past Nq load as zeros with lse = delta
    # = 0, so they add exactly nothing; keys past Nk give rows of dK, dV that are never
    # stored. MASKED blocks apply `_visible` (with packed sequences, also to rows of the next
    # sequence). One pipelined loop over (query block, head of the group), heads innermost,
    # with the head counted along rather than divided out of the loop index (a loop over the
    # heads around two loops over query blocks was slower on the H200: notes/attention.md).
    # Q and DO: pointers, or (USE_TMA) tensor descriptors of the whole tensors, read at
    # [b, h, q0 + row, 0] (zeros past the tensor's rows and D).
    # head = (b, b64, hk64, GROUP, H, q0, seq): the batch entry, kv head, query heads a kv head,
    # all query heads, the sequence's first query row and its index; loads = ((batch, head, seq)
    # strides of Q, of DO), their tile offsets); tile = (offs_n, offs_m0, d_row, dv_row), the
    # head-dim masks of q's and of dO's columns; HEAD: `head.HeadTiles`; lengths = (Nq,
    # NqTotal, Nk), NqTotal the row count of LSE and DELTA per head (Nq itself in a dense batch);
    # diag: `mask._diag`.
    b, b64, hk64, GROUP, H, q0, seq = head
    # (Flat unpacking: Triton's dependency finder, which keys compiled kernels, cannot read nested
    # tuple targets.)
    stride_q, stride_do, q_offs, do_offs = loads
    stride_qb, stride_qh, stride_qn = stride_q
    stride_dob, stride_doh, stride_don = stride_do
    offs_n, offs_m0, d_row, dv_row = tile
    Nq, NqTotal, Nk = lengths
    BLOCK_D: tl.constexpr = HEAD.qk
    BLOCK_DV: tl.constexpr = HEAD.v
    PAD_D: tl.constexpr = HEAD.pad_qk
    PAD_DV: tl.constexpr = HEAD.pad_v
    SOFTCAP: tl.constexpr = SCORE.softcap
    start_m = lo
    g = 0
    for _ in tl.range(0, tl.cdiv(hi - lo, BLOCK_M) * GROUP):
        h64 = hk64 * GROUP + g
        offs_m = start_m + offs_m0
        if VARLEN:
            row_m = q0 + start_m
        else:
            row_m = start_m
        if USE_TMA:
            h = h64.to(tl.int32)
            q = Q.load([b, h, row_m, 0]).reshape(BLOCK_M, BLOCK_D)
            do = DO.load([b, h, row_m, 0]).reshape(BLOCK_M, BLOCK_DV)
        else:
            m64 = tl.cast(row_m, tl.int64)
            m_ok = offs_m[:, None] < Nq
            q = _load(Q + b64 * stride_qb + h64 * stride_qh + m64 * stride_qn + q_offs,
                      m_ok, d_row, CHECK_M, PAD_D)
            do = _load(DO + b64 * stride_dob + h64 * stride_doh + m64 * stride_don + do_offs,
                       m_ok, dv_row, CHECK_M, PAD_DV)
        row_base = (b64 * H + h64) * NqTotal
        if VARLEN:
            row_base += q0
        if CHECK_M:
            lse2 = tl.load(LSE + row_base + offs_m, mask=offs_m < Nq, other=0.0) * 1.4426950408889634
            delta = tl.load(DELTA + row_base + offs_m, mask=offs_m < Nq, other=0.0)
        else:
            lse2 = tl.load(LSE + row_base + offs_m) * 1.4426950408889634
            delta = tl.load(DELTA + row_base + offs_m)
        qkT = tl.dot(k, tl.trans(q))
        slope2 = _alibi_slope(ALIBI, seq, h64, H, SCORE)
        s2T, thT = _score2(qkT, qk_scale, offs_m[None, :], offs_n[:, None], diag, slope2, SCORE)
        pT = tl.math.exp2(s2T - lse2[None, :])
        if MASKED:
            # Keys past Nk: their rows are never stored, but where a row may see no key at all
            # (lse = -inf) its P there would be inf, and inf * 0 = NaN in those rows' sums.
            ok = _visible(offs_m[None, :], offs_n[:, None], Nq, Nk, diag, SCORE, SCORE.empty_rows(VARLEN), VARLEN)
            pT = tl.where(ok, pT, 0.0)
        pT_in = pT.to(do.dtype)
        if SOFTCAP > 0:
            pT = pT * (1.0 - thT * thT)  # folded in now, so that tanh's tile is not live across two dots
        dv = tl.dot(pT_in, do, dv)
        dpT = tl.dot(v, tl.trans(do))
        dsT = pT * (dpT - delta[None, :])
        dk = tl.dot(dsT.to(q.dtype), q, dk)
        g += 1
        next_block = g == GROUP  # selects, not an if: an if in the body stops the pipelining
        g = tl.where(next_block, 0, g)
        start_m = tl.where(next_block, start_m + BLOCK_M, start_m)
    return dk, dv


@triton.jit
def _attn_bwd_dkdv_kernel(
    # pointers (CU_Q, CU_K: packed sequences' cumulative lengths, or None; see forward.py)
    Q, K, V, DO, DK, DV, LSE, DELTA, CU_Q, CU_K, ALIBI,
    # shapes and scales (dims = (D, GROUP) as in the forward; scales = (qk_scale as in the
    # forward, sm_scale = scale))
    Nq, Nk, dims, scales, SEQS,
    # strides of (batch, head, seq, head_dim): q's, k's, v's, do's, dk's, dv's
    strides,
    # meta (SCORE: `score.Score`; HEAD: `head.HeadTiles`, v's, dO's and dV's head dim as in the
    # forward)
    SCORE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD: tl.constexpr,
    CHECK_M: tl.constexpr, USE_TMA: tl.constexpr, HEAD_SPAN: tl.constexpr,
):
    # With USE_TMA, Q and DO are tensor descriptors of the whole (B, H, Nq, D) tensors.
    D, GROUP = dims
    BLOCK_D: tl.constexpr = HEAD.qk
    BLOCK_DV: tl.constexpr = HEAD.v
    PAD_D: tl.constexpr = HEAD.pad_qk
    PAD_DV: tl.constexpr = HEAD.pad_v
    qk_scale, sm_scale = scales
    stride_qb, stride_qh, stride_qn, stride_qd = strides[0]
    stride_dob, stride_doh, stride_don, stride_dod = strides[3]
    CAUSAL: tl.constexpr = SCORE.causal
    WINDOW_LEFT: tl.constexpr = SCORE.window_left
    WINDOW_RIGHT: tl.constexpr = SCORE.window_right
    VARLEN: tl.constexpr = CU_Q is not None
    b, hk, start_n, k0, nk, q0, nq, seq, row_n = _program_tile(CU_K, CU_Q, SEQS, Nk, Nq, BLOCK_N, False, HEAD_SPAN)
    if VARLEN and start_n >= nk:
        return
    H = tl.num_programs(1) * GROUP
    b64 = tl.cast(b, tl.int64)
    hk64 = hk.to(tl.int64)

    own, offs_m0, cols, k, v = _own_tiles(K, V, strides[1], strides[2], b64, hk64, row_n, start_n, nk, D, BLOCK_N,
                                          BLOCK_M, HEAD)
    rows_n, offs_n, n_ok, n64 = own
    offs_d, offs_dv, d_row, _, dv_row, _ = cols
    q_offs = offs_m0[:, None] * stride_qn + offs_d[None, :] * stride_qd
    do_offs = offs_m0[:, None] * stride_don + offs_dv[None, :] * stride_dod
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], tl.float32)

    # The group's query heads are summed in a fixed order: deterministic.
    diag = _diag(nq, nk, SCORE)
    head = (b, b64, hk64, GROUP, H, q0, seq)
    loads = ((stride_qb, stride_qh, stride_qn), (stride_dob, stride_doh, stride_don), q_offs, do_offs)
    tile = (offs_n, offs_m0, d_row, dv_row)
    lengths = (nq, Nq, nk)
    lo, full_lo, full_hi, hi = _query_range(start_n, nq, diag, BLOCK_M, BLOCK_N, SCORE, VARLEN)
    if CAUSAL or WINDOW_RIGHT >= 0:
        dk, dv = _attn_bwd_dkdv_tiles(
            dk, dv, k, v, Q, DO, LSE, DELTA, ALIBI, head, loads, tile, lo, full_lo, lengths, qk_scale, diag,
            BLOCK_M, HEAD, True, SCORE, CHECK_M, USE_TMA, VARLEN)
    # Packed sequences: the unmasked query blocks end at the sequence's last full block
    # (`_query_range`), so only the masked ones can hold rows past it (CHECK_M there only).
    CHECK_FULL_M: tl.constexpr = CHECK_M and not VARLEN
    dk, dv = _attn_bwd_dkdv_tiles(
        dk, dv, k, v, Q, DO, LSE, DELTA, ALIBI, head, loads, tile, full_lo, full_hi, lengths, qk_scale, diag,
        BLOCK_M, HEAD, False, SCORE, CHECK_FULL_M, USE_TMA, VARLEN)
    if WINDOW_LEFT >= 0 or VARLEN:
        dk, dv = _attn_bwd_dkdv_tiles(
            dk, dv, k, v, Q, DO, LSE, DELTA, ALIBI, head, loads, tile, full_hi, hi, lengths, qk_scale, diag,
            BLOCK_M, HEAD, True, SCORE, CHECK_M, USE_TMA, VARLEN)

    dk = dk * sm_scale
    if PAD_D:
        dk_ok = n_ok & d_row
    else:
        dk_ok = n_ok
    if PAD_DV:
        dv_ok = n_ok & dv_row
    else:
        dv_ok = n_ok
    tl.store(_tile_ptrs(DK, strides[4], b64, hk64, n64, rows_n, offs_d), dk.to(DK.dtype.element_ty), mask=dk_ok)
    tl.store(_tile_ptrs(DV, strides[5], b64, hk64, n64, rows_n, offs_dv), dv.to(DV.dtype.element_ty), mask=dv_ok)


@triton.jit
def _attn_bwd_dq_tiles(
    dq, query_rows, walk, lo, hi,
    BLOCK_N: tl.constexpr, HEAD: tl.constexpr, MASKED: tl.constexpr, SCORE: tl.constexpr,
    USE_TMA: tl.constexpr, VARLEN: tl.constexpr,
):
    # For key blocks [lo, hi), with query_rows = (q, do, lse2, delta) of the tile's rows:
    #   P = 2^(s - lse2),  dP = dO V^T,  dS = P [(1 - tanh^2)] * (dP - delta),  dQ += dS K
    # (times scale at the end).
    # MASKED blocks zero P where `_visible` hides a key (past Nk K loads as 0, but 2^(-lse2)
    # could overflow, and a row that sees no key has lse2 = -inf). walk = (keys, rows, score_at,
    # Nk, qk_scale) as `mask._walk_keys` hands it: keys, `loads._key_sources`'s (V^T's tile
    # offsets); rows = (offs_m, offs_n0, d_col, dv_col), the head-dim masks of K^T's and V^T's
    # rows; score_at = (diag, ALiBi slope); HEAD: `head.HeadTiles`.
    q, do, lse2, delta = query_rows
    keys, rows, score_at, Nk, qk_scale = walk
    k_src, v_src, stride_kn, stride_vn, kt_offs, vt_offs, b, hk, key0 = keys
    offs_m, offs_n0, d_col, dv_col = rows
    diag, slope2 = score_at
    SOFTCAP: tl.constexpr = SCORE.softcap
    for start_n in tl.range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        kT = _key_block(k_src, stride_kn, kt_offs, b, hk, key0, start_n, offs_n0, d_col, Nk,
                        BLOCK_N, HEAD, False, MASKED, USE_TMA, True, VARLEN)
        vT = _key_block(v_src, stride_vn, vt_offs, b, hk, key0, start_n, offs_n0, dv_col, Nk,
                        BLOCK_N, HEAD, True, MASKED, USE_TMA, True, VARLEN)
        qk = tl.dot(q, kT)
        s2, th = _score2(qk, qk_scale, offs_m[:, None], offs_n[None, :], diag, slope2, SCORE)
        p = tl.math.exp2(s2 - lse2[:, None])
        if MASKED:
            ok = _visible(offs_m[:, None], offs_n[None, :], 0, Nk, diag, SCORE, True, False)
            p = tl.where(ok, p, 0.0)
        if SOFTCAP > 0:
            p = p * (1.0 - th * th)
        dp = tl.dot(do, vT)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(kT.dtype), tl.trans(kT), dq)
    return dq


@triton.jit
def _attn_bwd_dq_kernel(
    # pointers (CU_Q, CU_K: packed sequences' cumulative lengths, or None; see forward.py)
    Q, K, V, DO, DQ, LSE, DELTA, CU_Q, CU_K, ALIBI,
    # shapes and scales (dims = (D, GROUP) as in the forward; scales = (qk_scale as in the
    # forward, sm_scale = scale))
    Nq, Nk, dims, scales, SEQS,
    # strides of (batch, head, seq, head_dim): q's, k's, v's, do's, dq's
    strides,
    # meta (SCORE: `score.Score`; HEAD: `head.HeadTiles`)
    SCORE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD: tl.constexpr,
    USE_TMA: tl.constexpr, HEAD_SPAN: tl.constexpr,
):
    # With USE_TMA, K and V are tensor descriptors of the whole (B, Hkv, Nk, D) tensors.
    D, GROUP = dims
    BLOCK_D: tl.constexpr = HEAD.qk
    PAD_D: tl.constexpr = HEAD.pad_qk
    qk_scale, sm_scale = scales
    CAUSAL: tl.constexpr = SCORE.causal
    VARLEN: tl.constexpr = CU_Q is not None
    b, h, start_m, q0, nq, k0, nk, seq, row_m = _program_tile(CU_Q, CU_K, SEQS, Nq, Nk, BLOCK_M, CAUSAL, HEAD_SPAN)
    if VARLEN and start_m >= nq:
        return
    H = tl.num_programs(1)
    b64 = tl.cast(b, tl.int64)
    h64 = h.to(tl.int64)
    hk = h // GROUP
    hk64 = hk.to(tl.int64)

    own, offs_n0, cols, q, do = _own_tiles(Q, DO, strides[0], strides[3], b64, h64, row_m, start_m, nq, D, BLOCK_M,
                                           BLOCK_N, HEAD)
    rows_m, offs_m, m_ok, m64 = own
    offs_d, offs_dv, d_row, d_col, dv_row, dv_col = cols
    row_base = (b64 * H + h64) * Nq
    if VARLEN:
        row_base += q0
    lse2 = tl.load(LSE + row_base + offs_m, mask=offs_m < nq, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + row_base + offs_m, mask=offs_m < nq, other=0.0)
    keys = _key_sources(K, V, strides[1], strides[2], b, b64, hk, hk64, k0, offs_n0, offs_d, offs_dv, True,
                        USE_TMA, VARLEN)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    score_at = _score_at(ALIBI, seq, h, H, nq, nk, SCORE)
    dq = _walk_keys(_attn_bwd_dq_tiles, dq, (q, do, lse2, delta), keys, (offs_m, offs_n0, d_col, dv_col), score_at,
                    (start_m, nq, nk), qk_scale, BLOCK_M, BLOCK_N, HEAD, SCORE, USE_TMA, VARLEN)

    dq = dq * sm_scale
    if PAD_D:
        store_ok = m_ok & d_row
    else:
        store_ok = m_ok
    tl.store(_tile_ptrs(DQ, strides[4], b64, h64, m64, rows_m, offs_d), dq.to(DQ.dtype.element_ty), mask=store_ok)
