"""Fused scaled-dot-product attention, forward and backward (FlashAttention-2 style).

o[b, h, i] = sum_j softmax_j(scale * q[b, h, i] . k[b, hk, j]) v[b, hk, j],  hk = h // (H // Hkv)

with, when causal, query i seeing keys j <= i (top-left aligned, as SDPA's is_causal=True;
every row sees key 0, so no row is empty). No N x N matrix is ever stored: the forward
streams key blocks through an online softmax and keeps, per query row, the log-sum-exp
lse_i = log sum_j exp(s_ij); the backward recomputes p_ij = exp(s_ij - lse_i) tile by tile.

Passes:
- forward: one program per (query block, head, batch).
- backward, FlashAttention-2 style, deterministic (no atomics):
  1. preprocess: delta_i = sum_d dO_id * O_id.
  2. dK, dV: one program per (key block, kv head, batch); it walks (query block, query head
     of its group) pairs in one pipelined loop per band, so dK and dV of grouped-query
     attention are summed over the group in a fixed order.
  3. dQ: one program per (query block, head, batch), walking the key blocks; launched on a
     side stream beside 2 (CONCURRENT_DQ).
  Recomputing P in both 2 and 3 costs 7 block matrix products per tile instead of the 5 of
  a single pass with atomic dQ updates; that mode was built twice, was slower on the H200
  both times, and is not kept (notes/attention.md).

Exponentials use exp2, with log2(e) folded into the scale. Causal tiles are split into
blocks that need no mask (strictly below the diagonal) and the diagonal band (masked).
Loads are plain pointer loads, right for any strides and element offset, except on Hopper
and later, where the tiles each kernel streams (q, k, v in the forward; q, dO in dK/dV; k,
v in dQ) are read through tensor descriptors (TMA) when `_tma_ok` has checked on the host
that their bases and strides allow it (USE_TMA), and otherwise, silently, through pointers.
(Triton 3.6's Hopper warp specialization was tried on the forward and gave wrong results
on the H200: notes/attention_tma.md. A rotated key loop, block j's softmax under block j-1's
P V, was built, timed slower on the H200 and removed: notes/attention_overlap.md.)

Tile sizes: on a GPU, `triton.autotune` per (head-dim block, causal, GROUP, a power-of-two
bucket of the length, USE_TMA, dtypes), results cached on disk; TRITONKIT_AUTOTUNE=0 (set by
the GPU script), an explicit `config`, or the interpreter use one fixed config per pass and
path instead (`fixed_configs`).
"""

import contextlib
import functools
import math
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from .._op import Op
from .._checks import check_same_device, check_tensor, dtype_name
from .. import _launch
from .._launch import Launch
from .._layout import cdiv, next_power_of_2
from .._runtime import INTERPRETED

LOG2E = 1.4426950408889634
HALF_DTYPES = (torch.float16, torch.bfloat16)
MAX_GRID_YZ = 65535  # CUDA's limit on grid dims 1 and 2 (heads, batch)
# The dQ pass needs only the preprocess's delta, not dK and dV: launched on a second stream
# it can fill the SMs that the dK/dV pass's last, uneven programs leave idle (and the other
# way round), instead of waiting for that pass to drain (+1-4.5% on the H200, same bits).
CONCURRENT_DQ = True


# ---------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------

@triton.jit
def _mm(a, b, DOT_FP32: tl.constexpr):
    # Triton 3.6's interpreter multiplies two bf16 operands wrongly; the launcher sets
    # DOT_FP32 there (and only there) so that those operands go through float32 instead.
    if DOT_FP32:
        c = tl.dot(a.to(tl.float32), b.to(tl.float32))
    else:
        c = tl.dot(a, b)
    return c


@triton.jit
def _mma(a, b, acc, DOT_FP32: tl.constexpr):
    if DOT_FP32:
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
    else:
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def _load(ptrs, rows_ok, d_ok, CHECK_ROWS: tl.constexpr, CHECK_D: tl.constexpr):
    # A tile load that masks only what may fall outside: ragged rows, a padded head dim.
    if CHECK_ROWS:
        if CHECK_D:
            x = tl.load(ptrs, mask=rows_ok & d_ok, other=0.0)
        else:
            x = tl.load(ptrs, mask=rows_ok, other=0.0)
    else:
        if CHECK_D:
            x = tl.load(ptrs, mask=d_ok, other=0.0)
        else:
            x = tl.load(ptrs)
    return x


@triton.jit
def _head_sources(A, B, b64, h64, stride_ab, stride_ah, stride_bb, stride_bh, USE_TMA: tl.constexpr):
    # What the tile loops read two streamed operands from: the (b, h) head's base pointers,
    # or (USE_TMA) the descriptors of the whole tensors, which the loops index by [b, h, row, 0].
    if USE_TMA:
        a_src = A
        b_src = B
    else:
        a_src = A + b64 * stride_ab + h64 * stride_ah
        b_src = B + b64 * stride_bb + h64 * stride_bh
    return a_src, b_src


@triton.jit
def _key_block(
    src, stride_n, offs, b, hk, start_n, offs_n0, d_ok, Nk,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, MASKED: tl.constexpr,
    PAD_D: tl.constexpr, USE_TMA: tl.constexpr, TRANSPOSED: tl.constexpr,
):
    # The K or V tile of the key block at start_n: [BLOCK_N, BLOCK_D], or (TRANSPOSED)
    # [BLOCK_D, BLOCK_N]. src: the kv head's base pointer, with `offs` the tile's element
    # offsets in that orientation and `d_ok` its head-dim mask; or (USE_TMA) the descriptor
    # of the whole tensor, read at [b, hk, key, 0], which fills keys past Nk and columns
    # past D with zeros.
    if USE_TMA:
        tile = src.load([b, hk, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
        if TRANSPOSED:
            tile = tl.trans(tile)
    else:
        n64 = tl.cast(start_n, tl.int64)
        if TRANSPOSED:
            keys_ok = (start_n + offs_n0)[None, :] < Nk
        else:
            keys_ok = (start_n + offs_n0)[:, None] < Nk
        tile = _load(src + n64 * stride_n + offs, keys_ok, d_ok, MASKED, PAD_D)
    return tile


@triton.jit
def _attn_fwd_qk(
    q, k_src, stride_kn, kt_offs, b, hk, start_n, offs_n0, d_col, Nk,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, MASKED: tl.constexpr,
    PAD_D: tl.constexpr, DOT_FP32: tl.constexpr, USE_TMA: tl.constexpr,
):
    # Raw scores Q K^T of the key block at start_n (unscaled, unmasked).
    kT = _key_block(k_src, stride_kn, kt_offs, b, hk, start_n, offs_n0, d_col, Nk,
                    BLOCK_N, BLOCK_D, MASKED, PAD_D, USE_TMA, True)
    return _mm(q, kT, DOT_FP32)


@triton.jit
def _attn_fwd_softmax(
    qk, l_i, m_i, start_n, offs_m, offs_n0, Nk, qk_scale,
    MASKED: tl.constexpr, CAUSAL: tl.constexpr, SCALE_POS: tl.constexpr,
):
    # The online-softmax step of the key block at start_n, in base 2 (qk_scale = scale * log2(e)):
    #   m' = max(m, rowmax(s)),  p = 2^(s - m'),  alpha = 2^(m - m'),  l' = l alpha + rowsum(p).
    # MASKED blocks hide keys past Nk and, when CAUSAL, keys after the query.
    if MASKED:
        offs_n = start_n + offs_n0
        ok = offs_n[None, :] < Nk
        if CAUSAL:
            ok = ok & (offs_n[None, :] <= offs_m[:, None])
        qk = tl.where(ok, qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        qk = qk - m_new[:, None]
    elif SCALE_POS:
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        qk = qk * qk_scale - m_new[:, None]
    else:
        qk = qk * qk_scale
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        qk = qk - m_new[:, None]
    p = tl.math.exp2(qk)
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    return p, alpha, l_i, m_new


@triton.jit
def _attn_fwd_pv(
    acc, alpha, p, v_src, stride_vn, v_offs, b, hk, start_n, offs_n0, d_row, Nk,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, MASKED: tl.constexpr,
    PAD_D: tl.constexpr, DOT_FP32: tl.constexpr, USE_TMA: tl.constexpr,
):
    # acc' = acc alpha + P V, with V the key block at start_n.
    acc = acc * alpha[:, None]
    v = _key_block(v_src, stride_vn, v_offs, b, hk, start_n, offs_n0, d_row, Nk,
                   BLOCK_N, BLOCK_D, MASKED, PAD_D, USE_TMA, False)
    return _mma(p.to(v.dtype), v, acc, DOT_FP32)


@triton.jit
def _attn_fwd_tiles(
    acc, l_i, m_i, q,
    k_src, v_src, stride_kn, stride_vn, kt_offs, v_offs, b, hk,
    offs_m, offs_n0, d_row, d_col,
    lo, hi, Nk, qk_scale,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
    SCALE_POS: tl.constexpr, PAD_D: tl.constexpr, DOT_FP32: tl.constexpr,
    USE_TMA: tl.constexpr,
):
    # The key blocks [lo, hi): per block S = Q K^T, the softmax step, acc = acc alpha + P V.
    # The first block a program visits holds key 0, which every row sees, so m is finite
    # after it. k_src, v_src: the kv head's base pointers, or (USE_TMA) descriptors of all of
    # K and V, read at [b, hk, key, 0]; TMA fills keys past Nk and columns past D with zeros.
    for start_n in tl.range(lo, hi, BLOCK_N):
        qk = _attn_fwd_qk(q, k_src, stride_kn, kt_offs, b, hk, start_n, offs_n0, d_col, Nk,
                          BLOCK_N, BLOCK_D, MASKED, PAD_D, DOT_FP32, USE_TMA)
        p, alpha, l_i, m_i = _attn_fwd_softmax(qk, l_i, m_i, start_n, offs_m, offs_n0, Nk, qk_scale,
                                               MASKED, CAUSAL, SCALE_POS)
        acc = _attn_fwd_pv(acc, alpha, p, v_src, stride_vn, v_offs, b, hk, start_n,
                           offs_n0, d_row, Nk, BLOCK_N, BLOCK_D, MASKED, PAD_D, DOT_FP32, USE_TMA)
    return acc, l_i, m_i


@triton.jit
def _attn_fwd_kernel(
    # pointers; with USE_TMA, Q, K and V are tensor descriptors of the whole (B, H, N, D) tensors
    Q, K, V, O, LSE,
    # shapes and scale (GROUP = query heads per kv head; N_BUCKET only keys the autotuner)
    Nq, Nk, D, GROUP, qk_scale, N_BUCKET,
    # strides, in elements, of (batch, head, seq, head_dim)
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_on, stride_od,
    # meta
    CAUSAL: tl.constexpr, SCALE_POS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PAD_D: tl.constexpr, DOT_FP32: tl.constexpr,
    USE_TMA: tl.constexpr,
):
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m  # the longest rows start first
    h = tl.program_id(1)
    b = tl.program_id(2)
    H = tl.num_programs(1)
    hk = h // GROUP
    b64 = b.to(tl.int64)
    h64 = h.to(tl.int64)
    hk64 = hk.to(tl.int64)
    start_m = pid_m * BLOCK_M

    # Offsets inside a tile stay int32; batch, head and block offsets go through int64.
    rows_m = tl.arange(0, BLOCK_M)
    offs_m = start_m + rows_m
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_row = offs_d[None, :] < D
    d_col = offs_d[:, None] < D
    m_ok = offs_m[:, None] < Nq

    if USE_TMA:
        q = Q.load([b, h, start_m, 0]).reshape(BLOCK_M, BLOCK_D)
    else:
        q_ptrs = (Q + b64 * stride_qb + h64 * stride_qh + start_m.to(tl.int64) * stride_qn
                  + rows_m[:, None] * stride_qn + offs_d[None, :] * stride_qd)
        q = _load(q_ptrs, m_ok, d_row, True, PAD_D)
    k_src, v_src = _head_sources(K, V, b64, hk64, stride_kb, stride_kh, stride_vb, stride_vh, USE_TMA)
    kt_offs = offs_d[:, None] * stride_kd + offs_n0[None, :] * stride_kn
    v_offs = offs_n0[:, None] * stride_vn + offs_d[None, :] * stride_vd

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    # Keys [0, lo) need no mask; [lo, hi) are the causal diagonal band and the ragged tail.
    if CAUSAL:
        hi = tl.minimum(Nk, start_m + BLOCK_M)
        lo = tl.minimum(start_m, Nk) // BLOCK_N * BLOCK_N
    else:
        hi = Nk
        lo = Nk // BLOCK_N * BLOCK_N
    acc, l_i, m_i = _attn_fwd_tiles(
        acc, l_i, m_i, q, k_src, v_src, stride_kn, stride_vn, kt_offs, v_offs, b, hk,
        offs_m, offs_n0, d_row, d_col, 0, lo, Nk, qk_scale,
        BLOCK_N, BLOCK_D, False, CAUSAL, SCALE_POS, PAD_D, DOT_FP32, USE_TMA)
    acc, l_i, m_i = _attn_fwd_tiles(
        acc, l_i, m_i, q, k_src, v_src, stride_kn, stride_vn, kt_offs, v_offs, b, hk,
        offs_m, offs_n0, d_row, d_col, lo, hi, Nk, qk_scale,
        BLOCK_N, BLOCK_D, True, CAUSAL, SCALE_POS, PAD_D, DOT_FP32, USE_TMA)

    o = acc / l_i[:, None]
    o_ptrs = (O + b64 * stride_ob + h64 * stride_oh + start_m.to(tl.int64) * stride_on
              + rows_m[:, None] * stride_on + offs_d[None, :] * stride_od)
    if PAD_D:
        tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=m_ok & d_row)
    else:
        tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=m_ok)
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453  # natural-log units
    tl.store(LSE + (b64 * H + h64) * Nq + offs_m, lse, mask=offs_m < Nq)


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
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, MASKED: tl.constexpr, CHECK_M: tl.constexpr,
    PAD_D: tl.constexpr, DOT_FP32: tl.constexpr, USE_TMA: tl.constexpr,
):
    # For query blocks [lo, hi) of each of the group's query heads, with the key block's K, V
    # loaded once by the caller:
    #   P^T = 2^(K Q^T qk_scale - lse2),  dV += P^T dO,
    #   dP^T = V dO^T,  dS^T = P^T * (dP^T - delta),  dK += dS^T Q  (times scale at the end).
    # Rows past Nq load as zeros with lse = delta = 0, so they add exactly nothing; keys past
    # Nk give rows of dK, dV that are never stored. Only the causal band needs a mask.
    # One pipelined loop over (query block, head of the group), heads innermost, with the
    # head counted along rather than divided out of the loop index. (Session 3's kernel ran
    # a loop over the group's heads around two pipelined loops over query blocks: its causal
    # backward was 0.95-0.96x FlexAttention's on the H200, this one 1.05-1.10x, measured
    # beside Flex in each session's runs; full attention did not move.) Q and DO: pointers,
    # or (USE_TMA) tensor descriptors of the whole tensors, read at [b, h, row, 0] (zeros past
    # Nq and D).
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
        qkT = _mm(k, tl.trans(q), DOT_FP32)
        pT = tl.math.exp2(qkT * qk_scale - lse2[None, :])
        if MASKED:
            pT = tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)
        dv = _mma(pT.to(do.dtype), do, dv, DOT_FP32)
        dpT = _mm(v, tl.trans(do), DOT_FP32)
        dsT = pT * (dpT - delta[None, :])
        dk = _mma(dsT.to(q.dtype), q, dk, DOT_FP32)
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
    Nq, Nk, D, GROUP, qk_scale, sm_scale, N_BUCKET,
    # strides of (batch, head, seq, head_dim)
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_don, stride_dod,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd,
    stride_dvb, stride_dvh, stride_dvn, stride_dvd,
    # meta
    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    CHECK_M: tl.constexpr, PAD_D: tl.constexpr, DOT_FP32: tl.constexpr, USE_TMA: tl.constexpr,
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

    # Causal: queries before this key block see none of it; queries in [lo, band) straddle
    # the diagonal (masked); queries from band on see the whole block (no mask).
    if CAUSAL:
        lo = start_n // BLOCK_M * BLOCK_M
        band = tl.minimum(tl.cdiv(start_n + BLOCK_N, BLOCK_M) * BLOCK_M, Nq)
    else:
        lo = 0
        band = 0
    # The group's query heads are summed in a fixed order: deterministic.
    if CAUSAL:
        dk, dv = _attn_bwd_dkdv_tiles(
            dk, dv, k, v, Q, DO, LSE, DELTA, b, b64, hk64, GROUP, H,
            stride_qb, stride_qh, stride_qn, stride_dob, stride_doh, stride_don, q_offs, do_offs,
            offs_n, offs_m0, d_row, lo, band, Nq, qk_scale,
            BLOCK_M, BLOCK_D, True, CHECK_M, PAD_D, DOT_FP32, USE_TMA)
    dk, dv = _attn_bwd_dkdv_tiles(
        dk, dv, k, v, Q, DO, LSE, DELTA, b, b64, hk64, GROUP, H,
        stride_qb, stride_qh, stride_qn, stride_dob, stride_doh, stride_don, q_offs, do_offs,
        offs_n, offs_m0, d_row, band, Nq, Nq, qk_scale,
        BLOCK_M, BLOCK_D, False, CHECK_M, PAD_D, DOT_FP32, USE_TMA)

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
    PAD_D: tl.constexpr, DOT_FP32: tl.constexpr, USE_TMA: tl.constexpr,
):
    # For key blocks [lo, hi):  P = 2^(Q K^T qk_scale - lse2),  dP = dO V^T,
    #   dS = P * (dP - delta),  dQ += dS K  (times scale at the end).
    # MASKED blocks zero P past Nk (K loads as 0 there, but 2^(-lse2) could overflow) and,
    # when CAUSAL, after the query. k_src, v_src: the kv head's base pointers, or (USE_TMA)
    # descriptors of all of K and V, read at [b, hk, key, 0].
    for start_n in tl.range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        kT = _key_block(k_src, stride_kn, kt_offs, b, hk, start_n, offs_n0, d_col, Nk,
                        BLOCK_N, BLOCK_D, MASKED, PAD_D, USE_TMA, True)
        vT = _key_block(v_src, stride_vn, vt_offs, b, hk, start_n, offs_n0, d_col, Nk,
                        BLOCK_N, BLOCK_D, MASKED, PAD_D, USE_TMA, True)
        qk = _mm(q, kT, DOT_FP32)
        p = tl.math.exp2(qk * qk_scale - lse2[:, None])
        if MASKED:
            ok = offs_n[None, :] < Nk
            if CAUSAL:
                ok = ok & (offs_n[None, :] <= offs_m[:, None])
            p = tl.where(ok, p, 0.0)
        dp = _mm(do, vT, DOT_FP32)
        ds = p * (dp - delta[:, None])
        dq = _mma(ds.to(kT.dtype), tl.trans(kT), dq, DOT_FP32)
    return dq


@triton.jit
def _attn_bwd_dq_kernel(
    # pointers
    Q, K, V, DO, DQ, LSE, DELTA,
    # shapes and scales (qk_scale = scale * log2(e))
    Nq, Nk, D, GROUP, qk_scale, sm_scale, N_BUCKET,
    # strides of (batch, head, seq, head_dim)
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_don, stride_dod,
    stride_dqb, stride_dqh, stride_dqn, stride_dqd,
    # meta
    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PAD_D: tl.constexpr, DOT_FP32: tl.constexpr, USE_TMA: tl.constexpr,
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

    if CAUSAL:
        hi = tl.minimum(Nk, start_m + BLOCK_M)
        lo = tl.minimum(start_m, Nk) // BLOCK_N * BLOCK_N
    else:
        hi = Nk
        lo = Nk // BLOCK_N * BLOCK_N
    dq = _attn_bwd_dq_tiles(
        dq, q, do, lse2, delta, k_src, v_src, stride_kn, stride_vn, kt_offs, vt_offs, b, hk,
        offs_m, offs_n0, d_col, 0, lo, Nk, qk_scale, BLOCK_N, BLOCK_D, False, CAUSAL, PAD_D, DOT_FP32, USE_TMA)
    dq = _attn_bwd_dq_tiles(
        dq, q, do, lse2, delta, k_src, v_src, stride_kn, stride_vn, kt_offs, vt_offs, b, hk,
        offs_m, offs_n0, d_col, lo, hi, Nk, qk_scale, BLOCK_N, BLOCK_D, True, CAUSAL, PAD_D, DOT_FP32, USE_TMA)

    dq = dq * sm_scale
    if PAD_D:
        store_ok = m_ok & d_row
    else:
        store_ok = m_ok
    tl.store(DQ + b64 * stride_dqb + h64 * stride_dqh + m64 * stride_dqn
             + rows_m[:, None] * stride_dqn + offs_d[None, :] * stride_dqd,
             dq.to(DQ.dtype.element_ty), mask=store_ok)


# ---------------------------------------------------------------------------------------
# Tile configurations: one fixed config per pass (tests, interpreter), autotuning on a GPU
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TileConfig:
    """Block sizes and launch options of one pass. For the dK/dV pass, block_n is the key
    block a program owns and block_m the query block it streams."""
    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2

    def meta(self) -> dict[str, int]:
        """The kernel's tile constexprs."""
        return {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n}

    def triton_config(self) -> triton.Config:
        return triton.Config(self.meta(), num_warps=self.num_warps, num_stages=self.num_stages)


def _interpreting() -> bool:
    """Kernels will run through the interpreter. Not so inside record_launches(execute=False),
    where `tritonkit inspect` compiles the launches for the GPU: they must be the GPU's."""
    return INTERPRETED and _launch.launches_execute()


def fixed_configs(block_d: int, row_keys: int | None = None) -> dict[str, TileConfig]:
    """The one config per pass used under the interpreter, under tests and when autotuning is
    off (TRITONKIT_AUTOTUNE=0). Interpreter blocks are small, so that test shapes of ~100 rows
    still cross several blocks and the causal band spans more than one key block. row_keys
    (about how many keys a query row sees: `_row_keys`; None: many) picks the forward's tile
    where the best one depends on it. The dict is shared between calls: read it, do not change it."""
    return _fixed_configs(block_d, _interpreting(), row_keys is not None and row_keys <= SHORT_ROWS)


# At D=128 the TMA forward's 64-row tiles of one warpgroup (two CTAs an SM) beat the 128-row,
# two-warpgroup tile where rows see few keys, and lose to it where they see many (H200, bf16,
# three runs of `attention_tune.py --tma`, fifth session: full N=2048 +3..9%, causal N=4096
# +2..6%; full N=4096 -4..+3%; full N=8192 and 16384, causal N=16384 -2..-7%).
SHORT_ROWS = 2048


def _row_keys(Nq: int, Nk: int, causal: bool) -> int:
    """About how many keys a query row sees: the longer length, halved under a causal mask."""
    return max(Nq, Nk) // 2 if causal else max(Nq, Nk)


@functools.lru_cache(maxsize=None)
def _fixed_configs(block_d: int, interpreting: bool, short: bool = False) -> dict[str, TileConfig]:
    if interpreting:
        return {"fwd": TileConfig(32, 16), "fwd_tma": TileConfig(32, 16), "dkdv": TileConfig(16, 32),
                "dkdv_tma": TileConfig(16, 32), "dq": TileConfig(32, 16), "dq_tma": TileConfig(32, 16)}
    # The fastest of each pass on the H200, bf16 (notes/attention.md, notes/attention_tma.md);
    # "_tma": the pass with its streamed tiles read through tensor descriptors.
    if block_d <= 64:
        return {"fwd": TileConfig(128, 64, 8, 3), "fwd_tma": TileConfig(64, 128, 4, 2),
                "dkdv": TileConfig(64, 64, 4, 3), "dkdv_tma": TileConfig(64, 64, 4, 3),
                "dq": TileConfig(128, 64, 8, 3), "dq_tma": TileConfig(64, 64, 4, 3)}
    if block_d <= 128:
        return {"fwd": TileConfig(128, 128, 8, 3),
                "fwd_tma": TileConfig(64, 64, 4, 3) if short else TileConfig(128, 128, 8, 3),
                "dkdv": TileConfig(64, 128, 8, 3), "dkdv_tma": TileConfig(64, 64, 4, 2),
                "dq": TileConfig(128, 32, 8, 3), "dq_tma": TileConfig(128, 64, 8, 3)}
    return {"fwd": TileConfig(128, 64, 8, 2), "fwd_tma": TileConfig(128, 64, 8, 2),
            "dkdv": TileConfig(64, 64, 8, 2), "dkdv_tma": TileConfig(64, 64, 8, 2),
            "dq": TileConfig(128, 32, 8, 3), "dq_tma": TileConfig(128, 32, 8, 3)}


def _shared_bytes(block_m: int, block_n: int, block_d: int, stages: int, resident: int, streamed: int) -> int:
    """Rough shared memory of a pass: `resident` tiles of one block kept, `streamed` tiles of
    the other block pipelined `stages` deep, 2 bytes an element."""
    return 2 * block_d * (resident * block_m + stages * streamed * block_n)


SMEM_LIMIT = 227 * 1024  # the H100/H200 per-block maximum


def _fp32_regs(c: triton.Config, *tiles: int) -> float:
    """fp32 registers a thread needs for the given accumulator/score tiles (in elements)."""
    return sum(tiles) / (32 * c.num_warps)


def _fixed_first(configs: list, kind: str, block_d: int, row_keys: int | None = None) -> list:
    """The fixed config first: it is what `tritonkit inspect` shows for an untuned run."""
    fixed = fixed_configs(block_d, row_keys)[kind].triton_config()
    same = [c for c in configs if c.kwargs == fixed.kwargs and
            (c.num_warps, c.num_stages) == (fixed.num_warps, fixed.num_stages)]
    return same + [c for c in configs if c not in same]


def _fits(kind: str, c: triton.Config, block_d: int) -> bool:
    """Whether a config fits shared memory and a register budget. The budgets: above them
    ptxas spilled in sm_90 builds (ptxas -v, triton 3.6); 255 registers a thread hold the
    fp32 tiles counted here plus operands, pointers and masks."""
    m, n, s = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_stages
    if kind == "fwd":     # Q resident; K, V streamed; acc and the score tile in registers
        smem, regs, budget = _shared_bytes(m, n, block_d, s, 1, 2), _fp32_regs(c, m * block_d, m * n), 160
    elif kind == "dkdv":  # K, V resident; Q, dO streamed; dK, dV, P^T, dP^T in registers
        smem, regs, budget = _shared_bytes(n, m, block_d, s, 2, 2), _fp32_regs(c, 2 * n * block_d, 2 * n * m), 192
    else:                 # Q, dO resident; K, V streamed; dQ, P, dP in registers
        smem, regs, budget = _shared_bytes(m, n, block_d, s, 2, 2), _fp32_regs(c, m * block_d, 2 * m * n), 160
    return smem <= SMEM_LIMIT and regs <= budget and not (block_d > 128 and kind != "dkdv" and n > 64)


def _pruner(kind: str):
    def prune(configs, named_args, **kwargs):
        block_d = kwargs["BLOCK_D"]
        fixed_kind = kind + "_tma" if kwargs.get("USE_TMA") else kind
        return _fixed_first([c for c in configs if _fits(kind, c, block_d)], fixed_kind, block_d) or configs[:1]
    return prune


_prune_dkdv, _prune_dq = _pruner("dkdv"), _pruner("dq")


def _prune_fwd(configs, named_args, **kwargs):
    """The forward keeps the configs of the path the launcher chose (USE_TMA: "fwd_tma",
    else "fwd"), then prunes them as the other passes are pruned."""
    kind = "fwd_tma" if kwargs.get("USE_TMA") else "fwd"
    block_d = kwargs["BLOCK_D"]
    mine = [c for c in configs if c in _FWD_SPACES[kind]]
    n_bucket = named_args.get("N_BUCKET")  # a runtime argument; CAUSAL is a constexpr
    row_keys = None if n_bucket is None else _row_keys(n_bucket, n_bucket, kwargs.get("CAUSAL", False))
    return _fixed_first([c for c in mine if _fits("fwd", c, block_d)], kind, block_d, row_keys) or mine[:1]


def autotune_configs(kind: str) -> list[TileConfig]:
    """Every config the autotuner may try for a pass (before pruning by head dim)."""
    if kind == "fwd":
        space = [(m, n, w, s) for m in (64, 128) for n in (32, 64, 128) for w in (4, 8) for s in (2, 3, 4)]
        # 8 warps on 64 rows leave a warpgroup without wgmma rows
        return [TileConfig(*c) for c in space if not (c[0] == 64 and c[2] == 8)]
    if kind == "fwd_tma":  # the forward through tensor descriptors
        # 128-row query tiles; and 64-row tiles of one warpgroup, small enough at D=128 (64x64:
        # 138 registers, 116 KB shared at 3 stages, compiled for sm_90) for two CTAs an SM,
        # whose warpgroups, unlike the two of one 128-row CTA, need not keep in step (that one's
        # loop has three CTA-wide barriers an iteration). They win at D=64 and at D=128 up to
        # N=2048 on the H200 (fixed configs above; notes/attention_tma.md).
        return ([TileConfig(128, n, w, s) for n in (64, 128) for w in (4, 8) for s in (2, 3, 4)]
                + [TileConfig(64, n, 4, s) for n in (64, 128) for s in (2, 3, 4)])
    if kind == "dkdv":
        space = [(m, n, w, s) for m in (32, 64) for n in (64, 128) for w in (4, 8) for s in (2, 3)]
        return [TileConfig(*c) for c in space]
    space = [(m, n, w, s) for m in (64, 128) for n in (32, 64) for w in (4, 8) for s in (2, 3)]
    return [TileConfig(*c) for c in space if not (c[0] == 64 and c[2] == 8)]


def _autotuned(kernel, kinds: str | tuple[str, ...], prune, key: list[str]):
    configs = []
    for kind in (kinds,) if isinstance(kinds, str) else kinds:
        configs += [c for c in map(TileConfig.triton_config, autotune_configs(kind)) if c not in configs]
    return triton.autotune(
        configs=configs,
        key=key,  # the autotuner adds the dtypes of the tensor arguments itself
        prune_configs_by={"early_config_prune": prune},
        cache_results=True,  # on disk, under TRITON_CACHE_DIR: a second process does not tune again
    )(kernel)


_FWD_SPACES = {kind: [c.triton_config() for c in autotune_configs(kind)] for kind in ("fwd", "fwd_tma")}
# USE_TMA keys the forward: with descriptors, O and LSE are the tensors whose dtypes it adds.
_attn_fwd_tuned = _autotuned(_attn_fwd_kernel, ("fwd", "fwd_tma"), _prune_fwd,
                             ["BLOCK_D", "CAUSAL", "N_BUCKET", "GROUP", "USE_TMA"])
_attn_bwd_dkdv_tuned = _autotuned(_attn_bwd_dkdv_kernel, "dkdv", _prune_dkdv,
                                  ["BLOCK_D", "CAUSAL", "N_BUCKET", "GROUP", "USE_TMA"])
_attn_bwd_dq_tuned = _autotuned(_attn_bwd_dq_kernel, "dq", _prune_dq,
                                ["BLOCK_D", "CAUSAL", "N_BUCKET", "GROUP", "USE_TMA"])


def _autotune_enabled() -> bool:
    return not _interpreting() and os.environ.get("TRITONKIT_AUTOTUNE", "1") != "0"


def _n_bucket(n: int) -> int:
    return min(max(next_power_of_2(n), 256), 16384)


# ---------------------------------------------------------------------------------------
# Launchers
# ---------------------------------------------------------------------------------------

def _check_qkv(q: object, k: object, v: object) -> tuple[int, int, int, int, int, int]:
    """Validate q, k, v; returns (B, H, Nq, D, Hkv, Nk)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, HALF_DTYPES)
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-d (batch, heads, seq_len, head_dim), got shape {tuple(t.shape)}")
    check_same_device(q=q, k=k, v=v)
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {dtype_name(t.dtype)} but q has {dtype_name(q.dtype)}")
    B, H, Nq, D = q.shape
    Bk, Hkv, Nk, Dk = k.shape
    if Bk != B:
        raise ValueError(f"k has batch {Bk} but q has batch {B}")
    if tuple(v.shape[:3]) != (Bk, Hkv, Nk):
        raise ValueError(f"v has (batch, heads, seq_len) {tuple(v.shape[:3])} but k has {(Bk, Hkv, Nk)}")
    if Dk != D:
        raise ValueError(f"k has head_dim {Dk} but q has head_dim {D}")
    if v.shape[3] != D:
        raise ValueError(f"v has head_dim {v.shape[3]} but q has head_dim {D}")
    if H < 1 or Hkv < 1:
        raise ValueError(f"q and k need at least one head, got q heads {H}, k heads {Hkv}")
    if H % Hkv != 0:
        raise ValueError(f"q has {H} heads, which k's {Hkv} heads do not divide")
    if D % 8 != 0 or not 16 <= D <= 256:
        raise ValueError(f"q has head_dim {D}; supported: multiples of 8 from 16 to 256")
    if Nk < 1:
        raise ValueError("k has sequence length 0: attention needs at least one key")
    if H > MAX_GRID_YZ or B > MAX_GRID_YZ:
        raise ValueError(f"q has batch {B} and {H} heads; at most {MAX_GRID_YZ} of each are supported")
    return B, H, Nq, D, Hkv, Nk


def _resolve_scale(scale: object, head_dim: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return float(scale)


def _empty_like_order(like: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An empty (B, H, N, D) tensor laid out as `like` is: (B, N, H, D) in memory when like's
    head stride is below its sequence stride (as for projected, packed qkv), else (B, H, N, D).
    The fake (meta) implementations use it too, so compiled graphs see the same strides."""
    B, H, N, D = shape
    if like.shape[1] > 1 and like.shape[2] > 1 and like.stride(1) < like.stride(2):
        return torch.empty((B, N, H, D), dtype=dtype, device=like.device).transpose(1, 2)
    return torch.empty((B, H, N, D), dtype=dtype, device=like.device)


def _dot_fp32(dtype: torch.dtype) -> bool:
    return _interpreting() and dtype == torch.bfloat16


def _block_d(head_dim: int) -> int:
    return max(16, next_power_of_2(head_dim))


def _head_dim_innermost(t: torch.Tensor) -> torch.Tensor:
    """`t` itself when its head dim is innermost (unit stride), else a contiguous copy.

    On the H200 with Triton 3.6 the compiled kernels gave wrong results (relative error
    ~1, no fault) for K stored transposed (sequence stride 1, head-dim stride 130), while
    the interpreter was right: found by the alignment fuzz, reproduced by
    scripts/repro_attention_strides.py on 2026-11-29, cause inside the compiler not yet
    isolated. A query with head-dim stride 2 was right. Until that is understood, any
    operand whose head dim is not innermost, or whose rows overlap (an expanded sequence
    dim), is copied; every layout a model produces ((B,H,N,D), (B,N,H,D), packed qkv) has
    a unit head-dim stride and rows apart, and is never copied.
    """
    rows_apart = t.shape[-2] == 1 or t.stride(-2) >= t.shape[-1]  # not expanded or overlapping
    return t if t.stride(-1) == 1 and rows_apart else t.contiguous()


@functools.lru_cache(maxsize=None)
def _has_tma(device: torch.device) -> bool:
    """Whether `device` has TMA: a CUDA GPU of compute capability 9.0 (Hopper) or later. CPU
    tensors reach a launcher in two ways: under Triton's interpreter, which reads tensor
    descriptors (zero-filling out of bounds as TMA does), or recorded for `tritonkit inspect`,
    which compiles for sm_90 by default."""
    if device.type != "cuda":
        return True
    return torch.cuda.get_device_capability(device)[0] >= 9


def _tma_ok(*tensors: torch.Tensor) -> bool:
    """Whether these (B, H, N, D) operands can be read through tensor descriptors (TMA).

    TMA addresses a tensor by its base and a byte stride per dimension, and refuses on the
    host (an AssertionError in TensorDescriptor, or an error when the driver encodes the
    descriptor) a base that is not 16-byte aligned or a stride that is not a multiple of 16
    bytes; the innermost stride must be 1. Views that start inside a buffer (packed qkv at an
    odd offset) and rows of, say, 131 elements fail here, and take the pointer path instead,
    silently. Also refused, to stay inside the hardware's documented range: strides of 0
    (broadcast dims), of 2^40 bytes or more, and dims of 2^32 or more.
    """
    for t in tensors:
        if not _has_tma(t.device) or t.data_ptr() % 16:
            return False
        size = t.element_size()
        *outer, inner = t.stride()
        if inner != 1:
            return False
        for n in t.shape:
            if n >= 2**32:
                return False
        for s in outer:
            if s <= 0 or s * size % 16 or s * size >= 2**40:
                return False
    return True


def _use_tma(tma: bool | None, *tensors: torch.Tensor) -> bool:
    """The launchers' `tma` argument: None reads these operands through tensor descriptors
    where `_tma_ok` allows it, False never, True always (a ValueError where it cannot)."""
    use = tma is not False and _tma_ok(*tensors)
    if tma and not use:
        raise ValueError("tma=True, but the operands cannot be read through tensor descriptors: each needs "
                         "a 16-byte aligned start and strides that are multiples of 16 bytes")
    return use


def _descriptor(t: torch.Tensor, rows: int, block_d: int) -> TensorDescriptor:
    """A descriptor of the whole (B, H, N, D) tensor with its own strides, read a tile of
    `rows` x block_d of one (batch, head) at a time. Reads past N or D come back as zeros,
    and never from the next head. The kernel's pre-run hook (`_descriptor_fitter`) resets the
    tile shape to the config that launches.

    Built without TensorDescriptor's own checks (its __post_init__), which repeat what
    `_tma_ok` has checked on every operand that reaches here (aligned base, 16-byte strides,
    unit innermost stride; dims are positive and tiles powers of two by construction): they
    cost ~2 us of host time a descriptor, and a forward and backward build seven. A test
    holds the result equal to the checked constructor's."""
    desc = object.__new__(TensorDescriptor)
    desc.base, desc.shape, desc.strides = t, list(t.shape), list(t.stride())
    desc.block_shape, desc.padding = [1, 1, rows, block_d], "zero"
    return desc


def _descriptor_fitter(rows_of: dict[int, str]):
    """A pre-run hook that gives a kernel's descriptors (argument position -> the meta-parameter
    counting their tile's rows) the tile shape of the config being launched. The autotuner
    picks BLOCK_M and BLOCK_N after the launcher built them, and Triton compiles a descriptor
    for the block shape it carries. A config pre_hook, as in Triton's tutorial, would do the
    same, but Triton's on-disk tuning cache skips configs that have one."""
    def fit_descriptors(*args, **meta) -> None:
        if meta.get("USE_TMA"):
            for position, rows in rows_of.items():
                args[position].block_shape = [1, 1, meta[rows], meta["BLOCK_D"]]
    return fit_descriptors


_fit_descriptors = _descriptor_fitter({0: "BLOCK_M", 1: "BLOCK_N", 2: "BLOCK_N"})   # forward: Q; K, V
_fit_dkdv_descriptors = _descriptor_fitter({0: "BLOCK_M", 3: "BLOCK_M"})           # dK/dV: Q, dO
_fit_dq_descriptors = _descriptor_fitter({1: "BLOCK_N", 2: "BLOCK_N"})             # dQ: K, V
_attn_bwd_dkdv_kernel.add_pre_run_hook(_fit_dkdv_descriptors)
_attn_bwd_dq_kernel.add_pre_run_hook(_fit_dq_descriptors)
_attn_fwd_kernel.add_pre_run_hook(_fit_descriptors)


def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  scale: float | None = None, *, config: TileConfig | None = None,
                  tma: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Launcher of the forward pass. Returns (o, lse): o like q (B, H, Nq, D) in q's dtype,
    lse (B, H, Nq) float32, the natural-log sum of exp(scores) per query row.

    config: a TileConfig to launch with; None autotunes on a GPU (unless TRITONKIT_AUTOTUNE=0)
    and uses `fixed_configs` otherwise.
    tma: None reads q, k, v through tensor descriptors (TMA) wherever `_tma_ok` allows it and
    through pointers elsewhere; False always through pointers; True through descriptors, or a
    ValueError if the inputs do not allow them. (Benchmarks and tests compare the paths.)
    """
    B, H, Nq, D, Hkv, Nk = _check_qkv(q, k, v)
    q, k, v = (_head_dim_innermost(t) for t in (q, k, v))
    scale = _resolve_scale(scale, D)
    causal = bool(causal)
    o = _empty_like_order(q, (B, H, Nq, D), q.dtype)
    lse = torch.empty((B, H, Nq), dtype=torch.float32, device=q.device)
    if B == 0 or Nq == 0:
        return o, lse
    block_d = _block_d(D)
    use_tma = _use_tma(tma, q, k, v)
    n_bucket = _n_bucket(max(Nq, Nk))
    fixed = fixed_configs(block_d, _row_keys(Nq, Nk, causal))["fwd_tma" if use_tma else "fwd"]
    tile = config or fixed
    q_in, k_in, v_in = q, k, v
    if use_tma:
        q_in = _descriptor(q, tile.block_m, block_d)
        k_in, v_in = (_descriptor(t, tile.block_n, block_d) for t in (k, v))
    args = (q_in, k_in, v_in, o, lse, Nq, Nk, D, H // Hkv, scale * LOG2E, n_bucket,
            *q.stride(), *k.stride(), *v.stride(), *o.stride())
    constexprs = dict(CAUSAL=causal, SCALE_POS=scale > 0, BLOCK_D=block_d, PAD_D=block_d != D,
                      DOT_FP32=_dot_fp32(q.dtype), USE_TMA=use_tma)
    if config is None and _autotune_enabled():
        Launch("attention_fwd", _attn_fwd_tuned,
               lambda meta: (cdiv(Nq, meta["BLOCK_M"]), H, B),
               args, constexprs, num_warps=None, num_stages=None)()
    else:
        Launch("attention_fwd", _attn_fwd_kernel, (cdiv(Nq, tile.block_m), H, B), args,
               dict(constexprs, **tile.meta()), num_warps=tile.num_warps, num_stages=tile.num_stages)()
    return o, lse


def attention_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  o: torch.Tensor, lse: torch.Tensor, causal: bool = False, scale: float | None = None,
                  *, dkdv_config: TileConfig | None = None, dq_config: TileConfig | None = None,
                  tma: bool | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launcher of the backward pass: (dq, dk, dv) from the upstream gradient `do` and the
    forward's `o` and `lse`. Deterministic: the same inputs give bitwise the same gradients.

    tma: as in `attention_fwd`. Through descriptors go the tiles each kernel streams: Q and
    dO in the dK/dV pass (when both allow it), K and V in the dQ pass (when both allow it);
    the rest through pointers."""
    B, H, Nq, D, Hkv, Nk = _check_qkv(q, k, v)
    for name, t in (("do", do), ("o", o)):
        check_tensor(name, t, HALF_DTYPES)
        if t.shape != q.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)} but q has {tuple(q.shape)}")
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {dtype_name(t.dtype)} but q has {dtype_name(q.dtype)}")
    check_tensor("lse", lse, (torch.float32,))
    if lse.shape != (B, H, Nq):
        raise ValueError(f"lse has shape {tuple(lse.shape)}; expected {(B, H, Nq)}")
    check_same_device(q=q, do=do, o=o, lse=lse)
    return _attention_bwd_checked(do, q, k, v, o, lse, causal, scale, dkdv_config=dkdv_config,
                                  dq_config=dq_config, tma=tma)


def _attention_bwd_checked(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           o: torch.Tensor, lse: torch.Tensor, causal: bool = False,
                           scale: float | None = None, *, dkdv_config: TileConfig | None = None,
                           dq_config: TileConfig | None = None,
                           tma: bool | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`attention_bwd` after its checks, for callers whose arguments are known good: the
    eager autograd road, whose q, k, v, o, lse are what the checked forward saved and whose
    do autograd has already matched to o's shape, dtype and device."""
    B, H, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    scale = _resolve_scale(scale, D)
    causal = bool(causal)
    lse = lse.contiguous()
    q, k, v, do, o = (_head_dim_innermost(t) for t in (q, k, v, do, o))

    dq = _empty_like_order(q, (B, H, Nq, D), q.dtype)
    dk = _empty_like_order(k, (B, Hkv, Nk, D), k.dtype)
    dv = _empty_like_order(v, (B, Hkv, Nk, D), v.dtype)
    if B == 0:
        return dq, dk, dv
    if Nq == 0:
        return dq, dk.zero_(), dv.zero_()
    block_d = _block_d(D)
    pad_d = block_d != D
    dot_fp32 = _dot_fp32(q.dtype)
    group = H // Hkv
    n_bucket = _n_bucket(max(Nq, Nk))
    tuned = _autotune_enabled()
    fixed = fixed_configs(block_d)

    delta = torch.empty((B, H, Nq), dtype=torch.float32, device=q.device)
    pre_block = 32 if _interpreting() else 64
    Launch("attention_bwd_preprocess", _attn_bwd_preprocess_kernel, (cdiv(Nq, pre_block), H, B),
           (o, do, delta, Nq, D, *o.stride(), *do.stride()),
           dict(BLOCK_M=pre_block, BLOCK_D=block_d, PAD_D=pad_d), num_warps=4, num_stages=1)()

    common = dict(CAUSAL=causal, BLOCK_D=block_d, PAD_D=pad_d, DOT_FP32=dot_fp32)
    tma_dkdv, tma_dq = _use_tma(tma, q, do), _use_tma(tma, k, v)
    dkdv_cfg = dkdv_config or fixed["dkdv_tma" if tma_dkdv else "dkdv"]
    q_in, do_in = (_descriptor(t, dkdv_cfg.block_m, block_d) if tma_dkdv else t for t in (q, do))
    dkdv_args = (q_in, k, v, do_in, dk, dv, lse, delta, Nq, Nk, D, group, scale * LOG2E, scale, n_bucket,
                 *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dk.stride(), *dv.stride())
    if dkdv_config is None and tuned:
        # CHECK_M must not depend on the tuned BLOCK_M: mask query rows unless every block is full.
        Launch("attention_bwd_dkdv", _attn_bwd_dkdv_tuned,
               lambda meta: (cdiv(Nk, meta["BLOCK_N"]), Hkv, B), dkdv_args,
               dict(common, CHECK_M=Nq % 128 != 0, USE_TMA=tma_dkdv), num_warps=None, num_stages=None)()
    else:
        Launch("attention_bwd_dkdv", _attn_bwd_dkdv_kernel, (cdiv(Nk, dkdv_cfg.block_n), Hkv, B), dkdv_args,
               dict(common, CHECK_M=Nq % dkdv_cfg.block_m != 0, USE_TMA=tma_dkdv, **dkdv_cfg.meta()),
               num_warps=dkdv_cfg.num_warps, num_stages=dkdv_cfg.num_stages)()

    dq_cfg = dq_config or fixed["dq_tma" if tma_dq else "dq"]
    k_in, v_in = (_descriptor(t, dq_cfg.block_n, block_d) if tma_dq else t for t in (k, v))
    dq_args = (q, k_in, v_in, do, dq, lse, delta, Nq, Nk, D, group, scale * LOG2E, scale, n_bucket,
               *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dq.stride())
    with _beside_the_current_stream(q.device, CONCURRENT_DQ and _launch.launches_execute()):
        if dq_config is None and tuned:
            Launch("attention_bwd_dq", _attn_bwd_dq_tuned,
                   lambda meta: (cdiv(Nq, meta["BLOCK_M"]), H, B), dq_args, dict(common, USE_TMA=tma_dq),
                   num_warps=None, num_stages=None)()
        else:
            Launch("attention_bwd_dq", _attn_bwd_dq_kernel, (cdiv(Nq, dq_cfg.block_m), H, B), dq_args,
                   dict(common, USE_TMA=tma_dq, **dq_cfg.meta()),
                   num_warps=dq_cfg.num_warps, num_stages=dq_cfg.num_stages)()
    return dq, dk, dv


@functools.lru_cache(maxsize=None)
def _side_stream(device: torch.device) -> "torch.cuda.Stream":
    return torch.cuda.Stream(device)


@contextlib.contextmanager
def _beside_the_current_stream(device: torch.device, enabled: bool):
    """Run the block's launches on a side stream that starts after everything queued so far
    on the current stream, and make the current stream wait for them before anything queued
    after the block. Tensors made on the current stream stay safe: the caching allocator hands
    their memory out again only to work on that stream, which now waits for the side stream.
    CUDA only (the interpreter, a CPU tensor, or enabled=False: the current stream)."""
    if not enabled or device.type != "cuda":
        yield
        return
    main = torch.cuda.current_stream(device)
    side = _side_stream(device)
    side.wait_stream(main)
    try:
        with torch.cuda.stream(side):
            yield
    finally:
        main.wait_stream(side)


# ---------------------------------------------------------------------------------------
# Torch custom ops: opaque to torch.compile, with fake (meta) and autograd registrations
# ---------------------------------------------------------------------------------------

def _attention_fwd_fake(q, k, v, causal, scale):
    B, H, Nq, D = q.shape
    return _empty_like_order(q, (B, H, Nq, D), q.dtype), q.new_empty((B, H, Nq), dtype=torch.float32)


def _attention_bwd_fake(do, q, k, v, o, lse, causal, scale):
    return (_empty_like_order(q, tuple(q.shape), q.dtype), _empty_like_order(k, tuple(k.shape), k.dtype),
            _empty_like_order(v, tuple(v.shape), v.dtype))


def _attention_setup_context(ctx, inputs, output):
    q, k, v, causal, scale = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.causal = causal
    ctx.scale = scale
    ctx.mark_non_differentiable(lse)


def _attention_backward(bwd, ctx, do, dlse):
    # lse is marked non-differentiable, so only o's gradient flows back.
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = bwd(do, q, k, v, o, lse, ctx.causal, ctx.scale)
    return dq, dk, dv, None, None


def _attention_check(q, k, v, causal, scale):
    B, H, Nq, D, Hkv, Nk = _check_qkv(q, k, v)
    return q, k, v, bool(causal), _resolve_scale(scale, D)


_ATTENTION = Op(
    "attention", forward=attention_fwd,
    forward_schema="(Tensor q, Tensor k, Tensor v, bool causal, float scale) -> (Tensor, Tensor)",
    forward_fake=_attention_fwd_fake, setup_context=_attention_setup_context, backward=_attention_backward,
    backward_launcher=attention_bwd,
    backward_schema=("(Tensor do, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, bool causal, "
                     "float scale) -> (Tensor, Tensor, Tensor)"),
    backward_fake=_attention_bwd_fake, eager_backward_launcher=_attention_bwd_checked, check=_attention_check)


# ---------------------------------------------------------------------------------------
# Public function and reference
# ---------------------------------------------------------------------------------------

def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              scale: float | None = None) -> torch.Tensor:
    """Scaled dot-product attention, fused: softmax(scale * q k^T [+ causal mask]) v.

    Same result as ``torch.nn.functional.scaled_dot_product_attention(q, k, v,
    is_causal=causal, scale=scale, enable_gqa=True)``, differentiable in q, k and v.

    q: (B, H, Nq, D); k and v: (B, Hkv, Nk, D) with H a multiple of Hkv (grouped-query and
    multi-query attention: query head h reads kv head h // (H // Hkv)). Nq, Nk >= 1 (Nq may
    be 0 for an empty result) and may differ. D: a multiple of 8 from 16 to 256. float16
    or bfloat16, all three the same; the output has q's dtype and shape. Any strides, e.g.
    views into a packed (B, N, 3, H, D) projection at any element offset.

    causal: query i sees keys j <= i (top-left aligned, as SDPA's is_causal=True, also
    when Nq != Nk). scale: defaults to 1 / sqrt(D).

    Raises TypeError for non-tensors, dtypes other than float16/bfloat16 or mixed dtypes,
    and ValueError for wrong ranks, mismatched batch, head counts that do not divide,
    different head dims, unsupported D, an empty k, or tensors on different devices.
    Memory: O(B * H * N) beyond inputs and output; the backward is deterministic.
    """
    # The launchers validate q, k, v and scale on the eager roads (scale=None means 1/sqrt(D)).
    return _ATTENTION(q, k, v, bool(causal), scale)[0]


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        scale: float | None = None, upcast: bool = True) -> torch.Tensor:
    """Plain attention in float64 (upcast=True) or in the inputs' dtype: scores, mask,
    softmax, weighted sum, with kv heads repeated for grouped-query attention."""
    D = q.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    if upcast:
        q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        Nq, Nk = q.shape[2], k.shape[2]
        seen = torch.ones(Nq, Nk, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~seen, float("-inf"))
    return torch.softmax(s, dim=-1) @ v
