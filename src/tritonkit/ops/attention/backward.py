"""The attention backward kernels, FlashAttention-2 style and deterministic (no atomics):

1. preprocess: delta_i = sum_d dO_id * O_id, the row term of dS = P * (dP - delta).
2. dK, dV: one program per (key block, kv head, batch); it walks (query block, query head of
   its group) pairs in one pipelined loop per band, so dK and dV of grouped-query attention
   are summed over the group in a fixed order.
3. dQ: one program per (query block, head, batch), walking the key blocks.

Both 2 and 3 recompute P = 2^(S qk_scale - lse log2(e)) tile by tile from the forward's lse.
"""

import triton
import triton.language as tl

from .loads import _head_sources, _key_block, _load
from .mask import _key_range, _query_range, _visible


@triton.jit
def _attn_bwd_preprocess_kernel(
    # pointers
    O, DO, DELTA,
    # shapes
    Nq, D,
    # strides of (batch, head, seq, head_dim)
    stride_ob, stride_oh, stride_on, stride_od,
    stride_dob, stride_doh, stride_don, stride_dod,
    # meta
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, PAD_D: tl.constexpr,
):
    # delta_i = sum_d dO_id * O_id, the row term of dS = P * (dP - delta).
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
    o = _load(O + b64 * stride_ob + h64 * stride_oh + m64 * stride_on
              + rows_m[:, None] * stride_on + offs_d[None, :] * stride_od, m_ok, d_row, True, PAD_D)
    do = _load(DO + b64 * stride_dob + h64 * stride_doh + m64 * stride_don
               + rows_m[:, None] * stride_don + offs_d[None, :] * stride_dod, m_ok, d_row, True, PAD_D)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(DELTA + (b64 * H + h64) * Nq + offs_m, delta, mask=offs_m < Nq)


@triton.jit
def _attn_bwd_dkdv_tiles(
    dk, dv, k, v,
    Q, DO, LSE, DELTA, b, b64, hk64, GROUP, H,
    stride_qb, stride_qh, stride_qn, stride_dob, stride_doh, stride_don, q_offs, do_offs,
    offs_n, offs_m0, d_row,
    lo, hi, Nq, qk_scale,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
    CHECK_M: tl.constexpr, PAD_D: tl.constexpr, USE_TMA: tl.constexpr,
):
    # For query blocks [lo, hi) of each of the group's query heads, with the key block's K, V
    # loaded once by the caller:
    #   P^T = 2^(K Q^T qk_scale - lse2),  dV += P^T dO,
    #   dP^T = V dO^T,  dS^T = P^T * (dP^T - delta),  dK += dS^T Q  (times scale at the end).
    # Rows past Nq load as zeros with lse = delta = 0, so they add exactly nothing; keys past
    # Nk give rows of dK, dV that are never stored. Only MASKED blocks apply `_visible`.
    # One pipelined loop over (query block, head of the group), heads innermost, with the
    # head counted along rather than divided out of the loop index (a loop over the heads
    # around two loops over query blocks was slower on the H200: notes/attention.md). Q and
    # DO: pointers, or (USE_TMA) tensor descriptors of the whole tensors, read at
    # [b, h, row, 0] (zeros past Nq and D).
    start_m = lo
    g = 0
    for _ in tl.range(0, tl.cdiv(hi - lo, BLOCK_M) * GROUP):
        h64 = hk64 * GROUP + g
        offs_m = start_m + offs_m0
        if USE_TMA:
            h = h64.to(tl.int32)
            q = Q.load([b, h, start_m, 0]).reshape(BLOCK_M, BLOCK_D)
            do = DO.load([b, h, start_m, 0]).reshape(BLOCK_M, BLOCK_D)
        else:
            m64 = tl.cast(start_m, tl.int64)
            m_ok = offs_m[:, None] < Nq
            q = _load(Q + b64 * stride_qb + h64 * stride_qh + m64 * stride_qn + q_offs,
                      m_ok, d_row, CHECK_M, PAD_D)
            do = _load(DO + b64 * stride_dob + h64 * stride_doh + m64 * stride_don + do_offs,
                       m_ok, d_row, CHECK_M, PAD_D)
        row_base = (b64 * H + h64) * Nq
        if CHECK_M:
            lse2 = tl.load(LSE + row_base + offs_m, mask=offs_m < Nq, other=0.0) * 1.4426950408889634
            delta = tl.load(DELTA + row_base + offs_m, mask=offs_m < Nq, other=0.0)
        else:
            lse2 = tl.load(LSE + row_base + offs_m) * 1.4426950408889634
            delta = tl.load(DELTA + row_base + offs_m)
        qkT = tl.dot(k, tl.trans(q))
        pT = tl.math.exp2(qkT * qk_scale - lse2[None, :])
        if MASKED:
            pT = tl.where(_visible(offs_m[None, :], offs_n[:, None], 0, CAUSAL, False), pT, 0.0)
        dv = tl.dot(pT.to(do.dtype), do, dv)
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
    # pointers
    Q, K, V, DO, DK, DV, LSE, DELTA,
    # shapes and scales (qk_scale = scale * log2(e))
    Nq, Nk, D, GROUP, qk_scale, sm_scale,
    # strides of (batch, head, seq, head_dim)
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_don, stride_dod,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd,
    stride_dvb, stride_dvh, stride_dvn, stride_dvd,
    # meta
    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    CHECK_M: tl.constexpr, PAD_D: tl.constexpr, USE_TMA: tl.constexpr,
):
    # With USE_TMA, Q and DO are tensor descriptors of the whole (B, H, Nq, D) tensors.
    pid_n = tl.program_id(0)
    hk = tl.program_id(1)
    b = tl.program_id(2)
    H = tl.num_programs(1) * GROUP
    b64 = b.to(tl.int64)
    hk64 = hk.to(tl.int64)
    start_n = pid_n * BLOCK_N
    n64 = tl.cast(start_n, tl.int64)

    rows_n = tl.arange(0, BLOCK_N)
    offs_n = start_n + rows_n
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_row = offs_d[None, :] < D
    n_ok = offs_n[:, None] < Nk

    k = _load(K + b64 * stride_kb + hk64 * stride_kh + n64 * stride_kn
              + rows_n[:, None] * stride_kn + offs_d[None, :] * stride_kd, n_ok, d_row, True, PAD_D)
    v = _load(V + b64 * stride_vb + hk64 * stride_vh + n64 * stride_vn
              + rows_n[:, None] * stride_vn + offs_d[None, :] * stride_vd, n_ok, d_row, True, PAD_D)
    q_offs = offs_m0[:, None] * stride_qn + offs_d[None, :] * stride_qd
    do_offs = offs_m0[:, None] * stride_don + offs_d[None, :] * stride_dod
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)

    # The group's query heads are summed in a fixed order: deterministic.
    lo, band = _query_range(start_n, Nq, BLOCK_M, BLOCK_N, CAUSAL)
    if CAUSAL:
        dk, dv = _attn_bwd_dkdv_tiles(
            dk, dv, k, v, Q, DO, LSE, DELTA, b, b64, hk64, GROUP, H,
            stride_qb, stride_qh, stride_qn, stride_dob, stride_doh, stride_don, q_offs, do_offs,
            offs_n, offs_m0, d_row, lo, band, Nq, qk_scale,
            BLOCK_M, BLOCK_D, True, CAUSAL, CHECK_M, PAD_D, USE_TMA)
    dk, dv = _attn_bwd_dkdv_tiles(
        dk, dv, k, v, Q, DO, LSE, DELTA, b, b64, hk64, GROUP, H,
        stride_qb, stride_qh, stride_qn, stride_dob, stride_doh, stride_don, q_offs, do_offs,
        offs_n, offs_m0, d_row, band, Nq, Nq, qk_scale,
        BLOCK_M, BLOCK_D, False, CAUSAL, CHECK_M, PAD_D, USE_TMA)

    dk = dk * sm_scale
    if PAD_D:
        store_ok = n_ok & d_row
    else:
        store_ok = n_ok
    tl.store(DK + b64 * stride_dkb + hk64 * stride_dkh + n64 * stride_dkn
             + rows_n[:, None] * stride_dkn + offs_d[None, :] * stride_dkd,
             dk.to(DK.dtype.element_ty), mask=store_ok)
    tl.store(DV + b64 * stride_dvb + hk64 * stride_dvh + n64 * stride_dvn
             + rows_n[:, None] * stride_dvn + offs_d[None, :] * stride_dvd,
             dv.to(DV.dtype.element_ty), mask=store_ok)


@triton.jit
def _attn_bwd_dq_tiles(
    dq, q, do, lse2, delta,
    k_src, v_src, stride_kn, stride_vn, kt_offs, vt_offs, b, hk,
    offs_m, offs_n0, d_col,
    lo, hi, Nk, qk_scale,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
    PAD_D: tl.constexpr, USE_TMA: tl.constexpr,
):
    # For key blocks [lo, hi):  P = 2^(Q K^T qk_scale - lse2),  dP = dO V^T,
    #   dS = P * (dP - delta),  dQ += dS K  (times scale at the end).
    # MASKED blocks zero P where `_visible` hides a key (past Nk K loads as 0, but 2^(-lse2)
    # could overflow). k_src, v_src: the kv head's base pointers, or (USE_TMA) descriptors of
    # all of K and V, read at [b, hk, key, 0].
    for start_n in tl.range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        kT = _key_block(k_src, stride_kn, kt_offs, b, hk, start_n, offs_n0, d_col, Nk,
                        BLOCK_N, BLOCK_D, MASKED, PAD_D, USE_TMA, True)
        vT = _key_block(v_src, stride_vn, vt_offs, b, hk, start_n, offs_n0, d_col, Nk,
                        BLOCK_N, BLOCK_D, MASKED, PAD_D, USE_TMA, True)
        qk = tl.dot(q, kT)
        p = tl.math.exp2(qk * qk_scale - lse2[:, None])
        if MASKED:
            p = tl.where(_visible(offs_m[:, None], offs_n[None, :], Nk, CAUSAL, True), p, 0.0)
        dp = tl.dot(do, vT)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(kT.dtype), tl.trans(kT), dq)
    return dq


@triton.jit
def _attn_bwd_dq_kernel(
    # pointers
    Q, K, V, DO, DQ, LSE, DELTA,
    # shapes and scales (qk_scale = scale * log2(e))
    Nq, Nk, D, GROUP, qk_scale, sm_scale,
    # strides of (batch, head, seq, head_dim)
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_don, stride_dod,
    stride_dqb, stride_dqh, stride_dqn, stride_dqd,
    # meta
    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PAD_D: tl.constexpr, USE_TMA: tl.constexpr,
):
    # With USE_TMA, K and V are tensor descriptors of the whole (B, Hkv, Nk, D) tensors.
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m
    h = tl.program_id(1)
    b = tl.program_id(2)
    H = tl.num_programs(1)
    b64 = b.to(tl.int64)
    h64 = h.to(tl.int64)
    hk = h // GROUP
    hk64 = hk.to(tl.int64)
    start_m = pid_m * BLOCK_M
    m64 = tl.cast(start_m, tl.int64)

    rows_m = tl.arange(0, BLOCK_M)
    offs_m = start_m + rows_m
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_row = offs_d[None, :] < D
    d_col = offs_d[:, None] < D
    m_ok = offs_m[:, None] < Nq

    q = _load(Q + b64 * stride_qb + h64 * stride_qh + m64 * stride_qn
              + rows_m[:, None] * stride_qn + offs_d[None, :] * stride_qd, m_ok, d_row, True, PAD_D)
    do = _load(DO + b64 * stride_dob + h64 * stride_doh + m64 * stride_don
               + rows_m[:, None] * stride_don + offs_d[None, :] * stride_dod, m_ok, d_row, True, PAD_D)
    row_base = (b64 * H + h64) * Nq
    lse2 = tl.load(LSE + row_base + offs_m, mask=offs_m < Nq, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + row_base + offs_m, mask=offs_m < Nq, other=0.0)
    k_src, v_src = _head_sources(K, V, b64, hk64, stride_kb, stride_kh, stride_vb, stride_vh, USE_TMA)
    kt_offs = offs_d[:, None] * stride_kd + offs_n0[None, :] * stride_kn
    vt_offs = offs_d[:, None] * stride_vd + offs_n0[None, :] * stride_vn
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    full, hi = _key_range(start_m, Nk, BLOCK_M, BLOCK_N, CAUSAL)
    dq = _attn_bwd_dq_tiles(
        dq, q, do, lse2, delta, k_src, v_src, stride_kn, stride_vn, kt_offs, vt_offs, b, hk,
        offs_m, offs_n0, d_col, 0, full, Nk, qk_scale, BLOCK_N, BLOCK_D, False, CAUSAL, PAD_D, USE_TMA)
    dq = _attn_bwd_dq_tiles(
        dq, q, do, lse2, delta, k_src, v_src, stride_kn, stride_vn, kt_offs, vt_offs, b, hk,
        offs_m, offs_n0, d_col, full, hi, Nk, qk_scale, BLOCK_N, BLOCK_D, True, CAUSAL, PAD_D, USE_TMA)

    dq = dq * sm_scale
    if PAD_D:
        store_ok = m_ok & d_row
    else:
        store_ok = m_ok
    tl.store(DQ + b64 * stride_dqb + h64 * stride_dqh + m64 * stride_dqn
             + rows_m[:, None] * stride_dqn + offs_d[None, :] * stride_dqd,
             dq.to(DQ.dtype.element_ty), mask=store_ok)
