"""The attention forward kernel: one program per (query block, head, batch), streaming key
blocks through an online softmax (FlashAttention-2).

Per key block, in base 2 (s = the base-2 score of `triton_score._score2`: Q K^T qk_scale with
qk_scale = scale * log2(e), or with a softcap tanh(scale Q K^T / c) c log2(e); ALiBi's bias):
    m' = max(m, rowmax(s)),  p = 2^(s - m'),  alpha = 2^(m - m'),
    l' = l alpha + rowsum(p),  acc' = acc alpha + p V,
from m = -inf, l = 0 (or a learnable sink's logit and 1: `triton_score._row_start`), and at the
end o = acc / l, lse = (m + log2 l) ln 2 (natural-log units, for the backward and for callers
that merge partial attentions).
"""

import triton
import triton.language as tl

from .loads import _head_columns, _key_block, _key_sources, _load, _tile_ptrs
from .mask import _program_tile, _row_base, _rows_lse, _rows_out, _visible, _walk_keys
from .triton_score import _row_start, _score2, _score_at, _softcap_tanh


@triton.jit
def _attn_fwd_qk(
    q, k_src, stride_kn, kt_offs, b, hk, key0, start_n, offs_n0, d_col, Nk,
    BLOCK_N: tl.constexpr, HEAD: tl.constexpr, MASKED: tl.constexpr, USE_TMA: tl.constexpr, VARLEN: tl.constexpr,
):
    # Raw scores Q K^T of the key block at start_n (unscaled, unmasked).
    kT = _key_block(k_src, stride_kn, kt_offs, b, hk, key0, start_n, offs_n0, d_col, Nk,
                    BLOCK_N, HEAD, False, MASKED, USE_TMA, True, VARLEN)
    return tl.dot(q, kT)


@triton.jit
def _attn_fwd_softmax(
    qk, l_i, m_i, start_n, offs_m, offs_n0, Nk, qk_scale, score_at,
    MASKED: tl.constexpr, SCORE: tl.constexpr, EMPTY_ROWS: tl.constexpr,
):
    # The online-softmax step of the key block at start_n (see the module docstring).
    # MASKED blocks hide the keys `_visible` hides; only they can leave a row with no key
    # seen yet (EMPTY_ROWS), which `_row_base` keeps finite. score_at: the tile's (diag,
    # ALiBi slope) (`mask._diag`, `triton_score._alibi_slope`).
    diag, slope2 = score_at
    SOFTCAP: tl.constexpr = SCORE.softcap
    if SCORE.alibi > 0:
        # The bias differs by key: the scores in full first, then their row max.
        offs_n = start_n + offs_n0
        s2, _ = _score2(qk, qk_scale, offs_m[:, None], offs_n[None, :], diag, slope2, SCORE)
        if MASKED:
            ok = _visible(offs_m[:, None], offs_n[None, :], 0, Nk, diag, SCORE, True, False)
            s2 = tl.where(ok, s2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s2, 1))
        base = _row_base(m_new, EMPTY_ROWS and MASKED)
        qk = s2 - base[:, None]
    elif SOFTCAP > 0:
        # The row max is taken on tanh (c log2(e) > 0 keeps the order), so that the score
        # th c log2(e) - base is one FMA an element.
        th = _softcap_tanh(qk, qk_scale, SCORE.tanh_approx)
        if MASKED:
            offs_n = start_n + offs_n0
            ok = _visible(offs_m[:, None], offs_n[None, :], 0, Nk, diag, SCORE, True, False)
            th = tl.where(ok, th, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(th, 1) * (SOFTCAP * 1.4426950408889634))
        base = _row_base(m_new, EMPTY_ROWS and MASKED)
        qk = th * (SOFTCAP * 1.4426950408889634) - base[:, None]
    elif MASKED:
        offs_n = start_n + offs_n0
        ok = _visible(offs_m[:, None], offs_n[None, :], 0, Nk, diag, SCORE, True, False)
        qk = tl.where(ok, qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        base = _row_base(m_new, EMPTY_ROWS)
        qk = qk - base[:, None]
    elif SCORE.scale_positive:
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        base = m_new
        qk = qk * qk_scale - m_new[:, None]
    else:
        qk = qk * qk_scale
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        base = m_new
        qk = qk - m_new[:, None]
    p = tl.math.exp2(qk)
    alpha = tl.math.exp2(m_i - base)
    l_i = l_i * alpha + tl.sum(p, 1)
    return p, alpha, l_i, m_new


@triton.jit
def _attn_fwd_pv(
    acc, alpha, p, v_src, stride_vn, v_offs, b, hk, key0, start_n, offs_n0, d_row, Nk,
    BLOCK_N: tl.constexpr, HEAD: tl.constexpr, MASKED: tl.constexpr, USE_TMA: tl.constexpr, VARLEN: tl.constexpr,
):
    # acc' = acc alpha + P V, with V the key block at start_n.
    acc = acc * alpha[:, None]
    v = _key_block(v_src, stride_vn, v_offs, b, hk, key0, start_n, offs_n0, d_row, Nk,
                   BLOCK_N, HEAD, True, MASKED, USE_TMA, False, VARLEN)
    return tl.dot(p.to(v.dtype), v, acc)


@triton.jit
def _attn_fwd_tiles(
    state, q, walk, lo, hi,
    BLOCK_N: tl.constexpr, HEAD: tl.constexpr, MASKED: tl.constexpr, SCORE: tl.constexpr,
    USE_TMA: tl.constexpr, VARLEN: tl.constexpr,
):
    # The key blocks [lo, hi): per block S = Q K^T, the softmax step, acc = acc alpha + P V;
    # state = (acc, l_i, m_i), as `mask._walk_keys` carries it, and walk = (keys, rows,
    # score_at, Nk, qk_scale) as it hands it. keys: `loads._key_sources`'s; rows = (offs_m,
    # offs_n0, dv_row, d_col): the tile's query rows, key columns and head-dim masks (v's, k's);
    # score_at: as `_attn_fwd_softmax` takes it. HEAD: `head.HeadTiles`.
    acc, l_i, m_i = state
    EMPTY_ROWS: tl.constexpr = SCORE.empty_rows(VARLEN)
    keys, rows, score_at, Nk, qk_scale = walk
    k_src, v_src, stride_kn, stride_vn, kt_offs, v_offs, b, hk, key0 = keys
    offs_m, offs_n0, dv_row, d_col = rows
    for start_n in tl.range(lo, hi, BLOCK_N):
        qk = _attn_fwd_qk(q, k_src, stride_kn, kt_offs, b, hk, key0, start_n, offs_n0, d_col, Nk,
                          BLOCK_N, HEAD, MASKED, USE_TMA, VARLEN)
        p, alpha, l_i, m_i = _attn_fwd_softmax(qk, l_i, m_i, start_n, offs_m, offs_n0, Nk, qk_scale, score_at,
                                               MASKED, SCORE, EMPTY_ROWS)
        acc = _attn_fwd_pv(acc, alpha, p, v_src, stride_vn, v_offs, b, hk, key0, start_n,
                           offs_n0, dv_row, Nk, BLOCK_N, HEAD, MASKED, USE_TMA, VARLEN)
    return acc, l_i, m_i


@triton.jit
def _attn_fwd_kernel(
    # pointers; with USE_TMA, Q, K and V are tensor descriptors of the whole (B, H, N, D)
    # tensors. Packed sequences: B = 1, N the total, and CU_Q, CU_K their int32 cumulative
    # lengths (SEQS + 1 each); None for a dense batch. ALIBI: float32 slopes, (H,) or (B, H)
    # (per sequence when packed), SINKS: a logit a head; None without them (`score.Score`).
    Q, K, V, O, LSE, CU_Q, CU_K, ALIBI, SINKS,
    # shapes and scale: dims = (D, GROUP), D = q's and k's head dim, GROUP = query heads per kv
    # head; qk_scale = scale * log2(e), or with a softcap c > 0 the tanh's input factor scale / c
    # (`score.kernel_qk_scale`)
    Nq, Nk, dims, qk_scale, SEQS,
    # strides, in elements, of (batch, head, seq, head_dim): q's, k's, v's, o's
    strides,
    # meta: what happens to a score (`score.Score`: the mask of `mask.py`, the softcap, ALiBi,
    # sinks), tiles (HEAD: the head-dim tiles, `head.HeadTiles`; v's and o's head dim is
    # HEAD.v_dim, or D where that is 0)
    SCORE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD: tl.constexpr, USE_TMA: tl.constexpr,
    HEAD_SPAN: tl.constexpr,
):
    D, GROUP = dims
    BLOCK_D: tl.constexpr = HEAD.qk
    BLOCK_DV: tl.constexpr = HEAD.v
    PAD_D: tl.constexpr = HEAD.pad_qk
    PAD_DV: tl.constexpr = HEAD.pad_v
    CAUSAL: tl.constexpr = SCORE.causal
    VARLEN: tl.constexpr = CU_Q is not None
    EMPTY_ROWS: tl.constexpr = SCORE.empty_rows(VARLEN)
    b, h, start_m, q0, nq, k0, nk, seq, row_m = _program_tile(CU_Q, CU_K, SEQS, Nq, Nk, BLOCK_M, CAUSAL, HEAD_SPAN)
    if VARLEN and start_m >= nq:
        return
    H = tl.num_programs(1)
    hk = h // GROUP
    b64 = tl.cast(b, tl.int64)
    h64 = h.to(tl.int64)
    hk64 = hk.to(tl.int64)

    # Offsets inside a tile stay int32; batch, head and block offsets go through int64.
    rows_m = tl.arange(0, BLOCK_M)
    offs_m = start_m + rows_m
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_d, offs_dv, d_row, d_col, dv_row, _ = _head_columns(D, HEAD)
    m_ok = offs_m[:, None] < nq

    if USE_TMA:
        q = Q.load([b, h, row_m, 0]).reshape(BLOCK_M, BLOCK_D)
    else:
        q = _load(_tile_ptrs(Q, strides[0], b64, h64, row_m.to(tl.int64), rows_m, offs_d), m_ok, d_row, True, PAD_D)
    keys = _key_sources(K, V, strides[1], strides[2], b, b64, hk, hk64, k0, offs_n0, offs_d, offs_dv, False,
                        USE_TMA, VARLEN)

    m_i, l_i = _row_start(SINKS, h, BLOCK_M, SCORE)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    score_at = _score_at(ALIBI, seq, h, H, nq, nk, SCORE)
    acc, l_i, m_i = _walk_keys(_attn_fwd_tiles, (acc, l_i, m_i), q, keys, (offs_m, offs_n0, dv_row, d_col), score_at,
                               (start_m, nq, nk), qk_scale, BLOCK_M, BLOCK_N, HEAD, SCORE, USE_TMA, VARLEN)

    o = _rows_out(acc, l_i, EMPTY_ROWS)
    o_ptrs = _tile_ptrs(O, strides[3], b64, h64, row_m.to(tl.int64), rows_m, offs_dv)
    if PAD_DV:
        tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=m_ok & dv_row)
    else:
        tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=m_ok)
    lse = _rows_lse(l_i, m_i, EMPTY_ROWS)
    row_base = (b64 * H + h64) * Nq
    if VARLEN:
        row_base += q0
    tl.store(LSE + row_base + offs_m, lse, mask=offs_m < nq)
