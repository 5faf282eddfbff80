"""Attention backward for Hopper (sm_90) in Gluon, FlashAttention-3 style, deterministic.

Same contract as the Triton launcher `tritonkit.ops.attention.attention_bwd`:
(dq, dk, dv) from the upstream gradient do, the inputs q, k, v and the forward's o and lse
(B, H, Nq) float32 in natural-log units, as both forwards store it. With
P = exp(scale * Q K^T - lse) (causal: zero above the top-left diagonal), delta = rowsum(dO * O):
  dV = P^T dO,  dP = dO V^T,  dS = P * (dP - delta),  dK = scale * dS^T Q,  dQ = scale * dS K,
dK and dV summed over the query heads of each kv head (GQA) in a fixed order. With a softcap c
(SOFTCAP = c, a constexpr, 0 for none) the scores are c tanh(t), t = scale * Q K^T / c, recomputed
from the raw Q K^T with the forward's `tanh.approx.f32`: P = exp(c tanh(t) - lse), and dS carries
the capped score's derivative, dS = P (1 - tanh(t)^2) (dP - delta), folded into P once P has gone
to dV's product.

Three launches, none with atomics, so the same inputs give bitwise the same gradients:
1. delta: the Triton path's preprocess kernel.
2. dK/dV (`_dkdv_kernel`): one program per 128-key block of one (batch, kv head). K and V stay
   in shared memory; a producer warp streams the (Q, dO) blocks of every query head of the
   group through a ring by TMA; two consumer warpgroups each own 64 of the keys (their dK and
   dV accumulators in registers, 240 registers each through setmaxnreg) and per query block
   issue S^T = K Q^T and dP^T = V dO^T together, form P^T while dP^T is still running,
   issue dV += P^T dO, form dS^T while dV's product runs, then dK += dS^T Q (P^T and dS^T are
   register operands: S^T's accumulator layout is theirs). The two warpgroups share the
   tensor cores: one's exponentials run under the other's products.
3. dQ (`_dq_kernel`): one program per 128 query rows of one (batch, head), the forward's
   structure: Q and dO in shared memory, K and V streamed through a ring, two 64-row consumer
   warpgroups passing a turn so one's elementwise work runs under the other's products, and
   within a warpgroup S(j) and dP(j) issued beside dQ += dS(j-1) K(j-1).

Why a separate dQ pass rather than dQ partials per key block reduced afterwards: a partial per
key block is Nq x D float32 per (key block, head), Nk / 128 times the size of dQ (128 GiB at
B=4, H=32, N=16384, D=128), and an ordered in-place accumulation across programs serialises
them; the dQ pass recomputes S and dP (7 products instead of 5) but reads only Q, dO, K, V.

A causal mask may carry a left window (WINDOW_LEFT = L, a constexpr, -1 for none: query i sees
keys i - L .. i): each pass walks only the blocks its tile sees, whole blocks unmasked, the
two edges (the diagonal, the window's start) masked; the dispatch sends it here only where
every query sees a key. Query rows past Nq load as zeros with lse = delta = 0, which adds
exactly nothing to dK and dV; keys past Nk produce rows of dK and dV that the TMA store drops,
and are masked (P = 0) in the dQ pass, where they would multiply zeros of K.

Only for what `supported` accepts (D = 64 or 128; D = 256's dK and dV accumulators do not fit
the registers of a 64-key warpgroup); everything else takes the Triton path.
"""

from __future__ import annotations

import contextlib

import functools
import math

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_init, warpgroup_mma_wait)

from .._launch import Launch
from .._layout import cdiv
from ..ops.attention.scores import kernel_qk_scale
from .attention_fwd import (
    _GL_DTYPES, CONSUMER_REGS, PRODUCER_REGS, ROWS_PER_WARPGROUP, _descriptor, _softcap_tanh, _tile, _tma_view,
    _walk, _wgmma_layout, _window_start, tma_refusal)

HEAD_DIMS = (64, 128)
KEYS_PER_PROGRAM = 2 * ROWS_PER_WARPGROUP      # dK/dV pass: 64 keys per consumer warpgroup
QUERIES_PER_PROGRAM = 2 * ROWS_PER_WARPGROUP   # dQ pass: 64 query rows per consumer warpgroup


@functools.lru_cache(maxsize=None)
def tile_config(head_dim: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, STAGES) of the dK/dV pass, (BLOCK_N, STAGES) of the dQ pass.

    dK/dV: a warpgroup holds dK and dV (64 x D float32 each: 64 registers a thread at D=128),
    S^T, dP^T (64 x BLOCK_M: 32 each at BLOCK_M = 64) and the P^T, dS^T operands, so 64-row
    query blocks; shared memory: K, V (128 x D), STAGES x (Q, dO) blocks (a fourth stage
    measured no faster). dQ: dQ (64 x D), S, dP (64 x BLOCK_N) and dS's operand per warpgroup,
    so 64-key blocks; shared memory Q and dO (128 x D) + STAGES x (K, V) blocks.
    D=128: 64 + 3 x 32 = 160 KB and 64 + 4 x 32 = 192 KB."""
    return {64: (64, 4, 64, 4), 128: (64, 3, 64, 4)}[head_dim]


# ---------------------------------------------------------------------------------------
# dK/dV pass
# ---------------------------------------------------------------------------------------

@gluon.jit
def _key_tile(t, n_kb, Hkv, Nq, CAUSAL: gl.constexpr, WINDOW_LEFT: gl.constexpr, BLOCK_M: gl.constexpr,
              BLOCK_N: gl.constexpr):
    # Program t -> (b, hk, first key n0, query blocks [lo, end) that see its keys, of which
    # [lo, band) straddle the causal diagonal and [mid, end) the left window's edge (masked),
    # [band, mid) see all of them). Key blocks of one head are consecutive programs (they
    # share Q and dO in L2), the longest (first) key blocks first.
    hb = t // n_kb
    n0 = (t % n_kb) * BLOCK_N
    end = gl.cdiv(Nq, BLOCK_M)
    if CAUSAL:
        lo = n0 // BLOCK_M            # query rows before n0 see none of these keys
        band = gl.minimum(gl.cdiv(n0 + BLOCK_N, BLOCK_M), end)
    else:
        lo = 0
        band = 0
    if WINDOW_LEFT >= 0:
        # Row i sees key j >= i - WINDOW_LEFT: rows past n0 + BLOCK_N - 1 + WINDOW_LEFT see
        # none of these keys, and a block sees all of them while its last row does.
        end = gl.minimum(end, gl.cdiv(n0 + BLOCK_N + WINDOW_LEFT, BLOCK_M))
        mid = gl.maximum(gl.minimum((n0 + WINDOW_LEFT + 1) // BLOCK_M, end), band)
    else:
        mid = end
    return hb // Hkv, hb % Hkv, n0, lo, band, mid, end


@gluon.jit
def _dkdv_producer(q_desc, do_desc, k_desc, v_desc, k_smem, v_smem, q_bufs, do_bufs, kv_ready, ready, empty,
                   n_kb, Hkv, GROUP, Nq, CAUSAL: gl.constexpr, WINDOW_LEFT: gl.constexpr):
    STAGES: gl.constexpr = q_bufs.shape[0]
    BLOCK_M: gl.constexpr = q_bufs.shape[1]
    HALF: gl.constexpr = k_smem.shape[1]
    b, hk, n0, lo, band, mid, end = _key_tile(gl.program_id(0), n_kb, Hkv, Nq, CAUSAL, WINDOW_LEFT, BLOCK_M, 2 * HALF)
    mbarrier.expect(kv_ready, 4 * k_desc.block_type.nbytes)
    for w in gl.static_range(2):
        tma.async_copy_global_to_shared(k_desc, [b, hk, n0 + w * HALF, 0], kv_ready, _tma_view(k_smem.index(w), k_desc))
        tma.async_copy_global_to_shared(v_desc, [b, hk, n0 + w * HALF, 0], kv_ready, _tma_view(v_smem.index(w), v_desc))
    c = 0
    for g in range(GROUP):
        h = hk * GROUP + g
        for i in range(lo, end):
            s = c % STAGES
            # A fresh mbarrier is in phase 0: waiting for parity 1 passes, the first lap is free.
            mbarrier.wait(empty.index(s), ((c // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), 2 * q_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(q_desc, [b, h, i * BLOCK_M, 0], ready.index(s),
                                            _tma_view(q_bufs.index(s), q_desc))
            tma.async_copy_global_to_shared(do_desc, [b, h, i * BLOCK_M, 0], ready.index(s),
                                            _tma_view(do_bufs.index(s), do_desc))
            c += 1


@gluon.jit
def _dkdv_step(c, m0, row_base, dk, dv, k_half, v_half, q_bufs, do_bufs, ready, empty,
               LSE, DELTA, Nq, qk_scale, key0, MASKED: gl.constexpr, SOFTCAP: gl.constexpr,
               WINDOW_LEFT: gl.constexpr):
    # One query block (ring slot c % STAGES) for this warpgroup's 64 keys: P^T under dP^T's
    # product, dS^T under dV's; everything retires before the slot is released, the other
    # warpgroup's products covering this one's last wait.
    STAGES: gl.constexpr = q_bufs.shape[0]
    BLOCK_M: gl.constexpr = q_bufs.shape[1]
    KEYS: gl.constexpr = k_half.shape[0]
    NW: gl.constexpr = gl.num_warps()
    s_layout: gl.constexpr = _wgmma_layout(NW, BLOCK_M)
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    # lse and delta are loaded before the wait on the ring, so they land while the barrier
    # and the products run, one value a thread: in the products' column layout every thread
    # would hold 16 of each, registers the accumulators need. Converted where they are used.
    flat: gl.constexpr = gl.BlockedLayout([1], [32], [NW], [0])
    rows = m0 + gl.arange(0, BLOCK_M, layout=flat)
    lse2 = gl.load(LSE + row_base + rows, mask=rows < Nq, other=0.0) * 1.4426950408889634
    delta = gl.load(DELTA + row_base + rows, mask=rows < Nq, other=0.0)
    s = c % STAGES
    mbarrier.wait(ready.index(s), (c // STAGES) & 1)
    q = q_bufs.index(s)
    do = do_bufs.index(s)
    st = warpgroup_mma(k_half, q.permute((1, 0)), gl.zeros([KEYS, BLOCK_M], gl.float32, s_layout),
                       use_acc=False, is_async=True)
    dpt = warpgroup_mma(v_half, do.permute((1, 0)), gl.zeros([KEYS, BLOCK_M], gl.float32, s_layout),
                        use_acc=False, is_async=True)
    st = warpgroup_mma_wait(num_outstanding=1, deps=(st, ))
    if SOFTCAP > 0:
        tht = _softcap_tanh(st, qk_scale)
        pt = gl.exp2(tht * (SOFTCAP * 1.4426950408889634) - gl.expand_dims(gl.convert_layout(lse2, col_layout), 0))
    else:
        pt = gl.exp2(st * qk_scale - gl.expand_dims(gl.convert_layout(lse2, col_layout), 0))
    if MASKED:
        cols = m0 + gl.arange(0, BLOCK_M, layout=col_layout)
        keys = key0 + gl.arange(0, KEYS, layout=gl.SliceLayout(1, s_layout))
        keep = gl.expand_dims(cols, 0) >= gl.expand_dims(keys, 1)
        if WINDOW_LEFT >= 0:
            keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(keys + WINDOW_LEFT, 1))
        pt = gl.where(keep, pt, 0.0)
    # P^T and dS^T reach the tensor cores as register operands (16 registers each in bf16):
    # the accumulator layout of S^T is the A operand's, so no shared-memory round trip and
    # fence stands between forming them and issuing dV's and dK's products.
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=_wgmma_layout(NW, q_bufs.shape[2]),
                                                 k_width=2)
    pa = gl.convert_layout(pt.to(q.dtype), a_layout)
    if SOFTCAP > 0:
        # dS's factor 1 - tanh^2, folded in before dV's product is issued: tanh's tile is dead
        # while that product and dP^T's hold their registers.
        pt = pt * (1.0 - tht * tht)
    dv = warpgroup_mma(pa, do, dv, is_async=True)
    dpt = warpgroup_mma_wait(num_outstanding=1, deps=(dpt, ))
    dsa = gl.convert_layout((pt * (dpt - gl.expand_dims(gl.convert_layout(delta, col_layout), 0))).to(q.dtype),
                            a_layout)
    dk = warpgroup_mma(dsa, q, dk, is_async=True)
    # The register operands are dependencies of the wait that retires their products, so
    # their registers are not reused before the tensor cores have read them.
    dv, dk, pa, dsa = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dk, pa, dsa))
    mbarrier.arrive(empty.index(s), count=1)
    return dk, dv


@gluon.jit
def _dkdv_consumer(WG: gl.constexpr, k_smem, v_smem, q_bufs, do_bufs, kv_ready, ready, empty,
                   dk_desc, dv_desc, LSE, DELTA, n_kb, H, Hkv, GROUP, Nq, qk_scale, sm_scale, CAUSAL: gl.constexpr,
                   SOFTCAP: gl.constexpr, WINDOW_LEFT: gl.constexpr):
    BLOCK_M: gl.constexpr = q_bufs.shape[1]
    HEAD_DIM: gl.constexpr = q_bufs.shape[2]
    KEYS: gl.constexpr = k_smem.shape[1]
    NW: gl.constexpr = gl.num_warps()
    acc_layout: gl.constexpr = _wgmma_layout(NW, HEAD_DIM)
    dtype: gl.constexpr = q_bufs.dtype
    b, hk, n0, lo, band, mid, end = _key_tile(gl.program_id(0), n_kb, Hkv, Nq, CAUSAL, WINDOW_LEFT, BLOCK_M, 2 * KEYS)
    key0 = n0 + WG * KEYS
    k_half = k_smem.index(WG)
    v_half = v_smem.index(WG)
    # Accumulators loop-carried while their products run (initialised as such).
    dk = gl.zeros([KEYS, HEAD_DIM], gl.float32, acc_layout)
    dv = gl.zeros([KEYS, HEAD_DIM], gl.float32, acc_layout)
    mbarrier.wait(kv_ready, 0)
    c = 0
    # The group's query heads in a fixed order, each over its query blocks: deterministic.
    for g in range(GROUP):
        row_base = (b.to(gl.int64) * H + hk * GROUP + g) * Nq
        for i in range(lo, band):
            dk, dv = _dkdv_step(c, i * BLOCK_M, row_base, dk, dv, k_half, v_half, q_bufs, do_bufs,
                                ready, empty, LSE, DELTA, Nq, qk_scale, key0, True, SOFTCAP, WINDOW_LEFT)
            c += 1
        for i in range(band, mid):
            dk, dv = _dkdv_step(c, i * BLOCK_M, row_base, dk, dv, k_half, v_half, q_bufs, do_bufs,
                                ready, empty, LSE, DELTA, Nq, qk_scale, key0, False, SOFTCAP, WINDOW_LEFT)
            c += 1
        for i in range(mid, end):
            dk, dv = _dkdv_step(c, i * BLOCK_M, row_base, dk, dv, k_half, v_half, q_bufs, do_bufs,
                                ready, empty, LSE, DELTA, Nq, qk_scale, key0, True, SOFTCAP, WINDOW_LEFT)
            c += 1
    dv, dk = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dk))
    # dK, dV through this warpgroup's own halves of K and V (no product reads them any more)
    # and TMA stores, which drop rows past Nk.
    k_half.store((dk * sm_scale).to(dtype))
    v_half.store(dv.to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dk_desc, [b, hk, key0, 0], _tma_view(k_half, dk_desc))
    tma.async_copy_shared_to_global(dv_desc, [b, hk, key0, 0], _tma_view(v_half, dv_desc))
    tma.store_wait(pendings=0)


@gluon.jit
def _dkdv_consumer0(k_smem, v_smem, q_bufs, do_bufs, kv_ready, ready, empty, dk_desc, dv_desc, LSE, DELTA,
                    n_kb, H, Hkv, GROUP, Nq, qk_scale, sm_scale, CAUSAL: gl.constexpr, SOFTCAP: gl.constexpr,
                    WINDOW_LEFT: gl.constexpr):
    _dkdv_consumer(0, k_smem, v_smem, q_bufs, do_bufs, kv_ready, ready, empty, dk_desc, dv_desc, LSE, DELTA,
                   n_kb, H, Hkv, GROUP, Nq, qk_scale, sm_scale, CAUSAL, SOFTCAP, WINDOW_LEFT)


@gluon.jit
def _dkdv_consumer1(k_smem, v_smem, q_bufs, do_bufs, kv_ready, ready, empty, dk_desc, dv_desc, LSE, DELTA,
                    n_kb, H, Hkv, GROUP, Nq, qk_scale, sm_scale, CAUSAL: gl.constexpr, SOFTCAP: gl.constexpr,
                    WINDOW_LEFT: gl.constexpr):
    _dkdv_consumer(1, k_smem, v_smem, q_bufs, do_bufs, kv_ready, ready, empty, dk_desc, dv_desc, LSE, DELTA,
                   n_kb, H, Hkv, GROUP, Nq, qk_scale, sm_scale, CAUSAL, SOFTCAP, WINDOW_LEFT)


@gluon.jit
def _dkdv_kernel(
    # descriptors of the whole (B, H, Nq, D) q, do and (B, Hkv, Nk, D) k, v, dk, dv; LSE, DELTA:
    # (B, H, Nq) float32
    q_desc, do_desc, k_desc, v_desc, dk_desc, dv_desc, LSE, DELTA,
    # shapes and scales (qk_scale = scale * log2 e, or with a softcap c scale / c; sm_scale =
    # scale); n_kb: key blocks of 128 per kv head
    Nq, H, Hkv, GROUP, qk_scale, sm_scale, n_kb,
    CAUSAL: gl.constexpr, SOFTCAP: gl.constexpr, WINDOW_LEFT: gl.constexpr, STAGES: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
):
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[3]
    KEYS: gl.constexpr = k_desc.block_type.shape[2]
    dtype: gl.constexpr = q_desc.dtype
    gl.static_assert(gl.num_warps() == 4)
    q_2d: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, HEAD_DIM], dtype)
    k_2d: gl.constexpr = gl.NVMMASharedLayout.get_default_for([KEYS, HEAD_DIM], dtype)
    k_smem = gl.allocate_shared_memory(dtype, [2, KEYS, HEAD_DIM], k_2d)
    v_smem = gl.allocate_shared_memory(dtype, [2, KEYS, HEAD_DIM], k_2d)
    q_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], q_2d)
    do_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], q_2d)
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_ready, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)     # released by both consumer warpgroups
    gl.warp_specialize([
        (_dkdv_consumer0, (k_smem, v_smem, q_bufs, do_bufs, kv_ready, ready, empty, dk_desc, dv_desc, LSE, DELTA,
                           n_kb, H, Hkv, GROUP, Nq, qk_scale, sm_scale, CAUSAL, SOFTCAP, WINDOW_LEFT)),
        (_dkdv_consumer1, (k_smem, v_smem, q_bufs, do_bufs, kv_ready, ready, empty, dk_desc, dv_desc, LSE, DELTA,
                           n_kb, H, Hkv, GROUP, Nq, qk_scale, sm_scale, CAUSAL, SOFTCAP, WINDOW_LEFT)),
        (_dkdv_producer, (q_desc, do_desc, k_desc, v_desc, k_smem, v_smem, q_bufs, do_bufs, kv_ready, ready, empty,
                          n_kb, Hkv, GROUP, Nq, CAUSAL, WINDOW_LEFT)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


# ---------------------------------------------------------------------------------------
# dQ pass
# ---------------------------------------------------------------------------------------

@gluon.jit
def _dq_producer(q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_bufs, v_bufs, q_ready, ready, empty,
                 n_m, H, GROUP, Nk, CAUSAL: gl.constexpr, WINDOW_LEFT: gl.constexpr):
    STAGES: gl.constexpr = k_bufs.shape[0]
    BLOCK_N: gl.constexpr = k_bufs.shape[1]
    BLOCK_M: gl.constexpr = q_smem.shape[1]
    b, h, m0, n_kv, n_full = _tile(gl.program_id(0), n_m, H, Nk, CAUSAL, BLOCK_M, BLOCK_N)
    lo, _ = _window_start(m0, WINDOW_LEFT, 2 * BLOCK_M, BLOCK_N)
    hk = h // GROUP
    for w in gl.static_range(2):
        mbarrier.expect(q_ready.index(w), 2 * q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [b, h, m0 + w * BLOCK_M, 0], q_ready.index(w),
                                        _tma_view(q_smem.index(w), q_desc))
        tma.async_copy_global_to_shared(do_desc, [b, h, m0 + w * BLOCK_M, 0], q_ready.index(w),
                                        _tma_view(do_smem.index(w), do_desc))
    for t in range(n_kv - lo):
        s = t % STAGES
        mbarrier.wait(empty.index(s), ((t // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(s), 2 * k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [b, hk, (lo + t) * BLOCK_N, 0], ready.index(s),
                                        _tma_view(k_bufs.index(s), k_desc))
        tma.async_copy_global_to_shared(v_desc, [b, hk, (lo + t) * BLOCK_N, 0], ready.index(s),
                                        _tma_view(v_bufs.index(s), v_desc))


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
    # log2 e - lse2), times 1 - tanh^2); masked blocks zero P for keys past Nk (their K rows are
    # zeros, but 2^(-lse2) could overflow) and, causal, after the query (and with a left
    # window before its first key).
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
def _dq_consumer(WG: gl.constexpr, q_smem, do_smem, k_bufs, v_bufs, q_ready, ready, empty, turn, dq_desc, LSE,
                 DELTA, n_m, H, Nq, Nk, qk_scale, sm_scale, CAUSAL: gl.constexpr, SOFTCAP: gl.constexpr,
                 WINDOW_LEFT: gl.constexpr):
    BLOCK_M: gl.constexpr = q_smem.shape[1]
    HEAD_DIM: gl.constexpr = q_smem.shape[2]
    STAGES: gl.constexpr = k_bufs.shape[0]
    BLOCK_N: gl.constexpr = k_bufs.shape[1]
    NW: gl.constexpr = gl.num_warps()
    s_layout: gl.constexpr = _wgmma_layout(NW, BLOCK_N)
    acc_layout: gl.constexpr = _wgmma_layout(NW, HEAD_DIM)
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    b, h, m0, n_kv, n_full = _tile(gl.program_id(0), n_m, H, Nk, CAUSAL, BLOCK_M, BLOCK_N)
    row0 = m0 + WG * BLOCK_M
    q = q_smem.index(WG)
    do = do_smem.index(WG)
    my_turn = turn.index(WG)
    other_turn = turn.index(1 - WG)
    rows = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    row_base = (b.to(gl.int64) * H + h) * Nq
    lse2 = gl.load(LSE + row_base + rows, mask=rows < Nq, other=0.0) * 1.4426950408889634
    delta = gl.load(DELTA + row_base + rows, mask=rows < Nq, other=0.0)
    mbarrier.wait(q_ready.index(WG), 0)

    # The walk: key blocks [lo, n_kv), of which [lo, edge) hold the left window's edge,
    # [edge, band) are whole for every row and [band, n_kv) hold the diagonal and the ragged
    # tail (edge and band counted from lo); block lo alone first (masked unless whole).
    lo, edge, band, first_whole, count = _walk(m0, n_kv, n_full, WINDOW_LEFT, 2 * BLOCK_M, BLOCK_N)
    dq = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, acc_layout)
    st, dp, dq = _dq_scores(0, q, do, k_bufs, v_bufs, ready, my_turn, other_turn, WG, dq, dq, False)
    st, dp = warpgroup_mma_wait(num_outstanding=0, deps=(st, dp))
    if first_whole:
        dsb = _dq_ds(st, dp, lse2, delta, row0, lo * BLOCK_N, Nk, qk_scale, a_layout, q.dtype, False, CAUSAL, SOFTCAP,
                     WINDOW_LEFT)
    else:
        dsb = _dq_ds(st, dp, lse2, delta, row0, lo * BLOCK_N, Nk, qk_scale, a_layout, q.dtype, True, CAUSAL, SOFTCAP,
                     WINDOW_LEFT)
    for j in range(1, edge):
        dq, dsb = _dq_block(j, lo, dq, dsb, lse2, delta, q, do, k_bufs, v_bufs, ready, empty, my_turn, other_turn,
                            WG, row0, Nk, qk_scale, True, CAUSAL, SOFTCAP, WINDOW_LEFT)
    for j in range(gl.maximum(edge, 1), band):
        dq, dsb = _dq_block(j, lo, dq, dsb, lse2, delta, q, do, k_bufs, v_bufs, ready, empty, my_turn, other_turn,
                            WG, row0, Nk, qk_scale, False, CAUSAL, SOFTCAP, WINDOW_LEFT)
    for j in range(gl.maximum(band, 1), count):
        dq, dsb = _dq_block(j, lo, dq, dsb, lse2, delta, q, do, k_bufs, v_bufs, ready, empty, my_turn, other_turn,
                            WG, row0, Nk, qk_scale, True, CAUSAL, SOFTCAP, WINDOW_LEFT)
    last = (count - 1) % STAGES
    dq = warpgroup_mma(dsb, k_bufs.index(last), dq, is_async=True)
    dq, dsb = warpgroup_mma_wait(num_outstanding=0, deps=(dq, dsb))
    mbarrier.arrive(empty.index(last), count=1)
    # dQ through Q's buffer (every product that read it has retired) and a TMA store that
    # drops rows past Nq.
    q.store((dq * sm_scale).to(q.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dq_desc, [b, h, row0, 0], _tma_view(q, dq_desc))
    tma.store_wait(pendings=0)


@gluon.jit
def _dq_consumer0(q_smem, do_smem, k_bufs, v_bufs, q_ready, ready, empty, turn, dq_desc, LSE, DELTA, n_m, H, Nq,
                  Nk, qk_scale, sm_scale, CAUSAL: gl.constexpr, SOFTCAP: gl.constexpr, WINDOW_LEFT: gl.constexpr):
    _dq_consumer(0, q_smem, do_smem, k_bufs, v_bufs, q_ready, ready, empty, turn, dq_desc, LSE, DELTA, n_m, H, Nq,
                 Nk, qk_scale, sm_scale, CAUSAL, SOFTCAP, WINDOW_LEFT)


@gluon.jit
def _dq_consumer1(q_smem, do_smem, k_bufs, v_bufs, q_ready, ready, empty, turn, dq_desc, LSE, DELTA, n_m, H, Nq,
                  Nk, qk_scale, sm_scale, CAUSAL: gl.constexpr, SOFTCAP: gl.constexpr, WINDOW_LEFT: gl.constexpr):
    _dq_consumer(1, q_smem, do_smem, k_bufs, v_bufs, q_ready, ready, empty, turn, dq_desc, LSE, DELTA, n_m, H, Nq,
                 Nk, qk_scale, sm_scale, CAUSAL, SOFTCAP, WINDOW_LEFT)


@gluon.jit
def _dq_kernel(
    # descriptors of the whole (B, H, Nq, D) q, do, dq and (B, Hkv, Nk, D) k, v; LSE, DELTA:
    # (B, H, Nq) float32
    q_desc, do_desc, k_desc, v_desc, dq_desc, LSE, DELTA,
    # shapes and scales (qk_scale = scale * log2 e, or with a softcap c scale / c; sm_scale =
    # scale); n_m: row blocks of 128 per head
    Nq, Nk, H, GROUP, qk_scale, sm_scale, n_m,
    CAUSAL: gl.constexpr, SOFTCAP: gl.constexpr, WINDOW_LEFT: gl.constexpr, STAGES: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
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
        (_dq_consumer0, (q_smem, do_smem, k_bufs, v_bufs, q_ready, ready, empty, turn, dq_desc, LSE, DELTA, n_m, H,
                         Nq, Nk, qk_scale, sm_scale, CAUSAL, SOFTCAP, WINDOW_LEFT)),
        (_dq_consumer1, (q_smem, do_smem, k_bufs, v_bufs, q_ready, ready, empty, turn, dq_desc, LSE, DELTA, n_m, H,
                         Nq, Nk, qk_scale, sm_scale, CAUSAL, SOFTCAP, WINDOW_LEFT)),
        (_dq_producer, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_bufs, v_bufs, q_ready, ready, empty,
                        n_m, H, GROUP, Nk, CAUSAL, WINDOW_LEFT)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


# ---------------------------------------------------------------------------------------
# Launchers
# ---------------------------------------------------------------------------------------

def dkdv_launch_args(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dk: torch.Tensor,
                     dv: torch.Tensor, lse: torch.Tensor, delta: torch.Tensor, causal: bool,
                     scale: float, softcap: float = 0.0, window_left: int = -1) -> tuple[tuple, tuple, dict]:
    """(grid, positional args, keyword args) of the dK/dV launch (also what `compile_sm90` takes);
    softcap: the cap c, 0 for none; window_left: causal only, keys j >= i - window_left (-1: none)."""
    B, H, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    block_m, stages, _, _ = tile_config(D)
    n_kb = cdiv(Nk, KEYS_PER_PROGRAM)
    args = (_descriptor(q, block_m), _descriptor(do, block_m), _descriptor(k, ROWS_PER_WARPGROUP),
            _descriptor(v, ROWS_PER_WARPGROUP), _descriptor(dk, ROWS_PER_WARPGROUP),
            _descriptor(dv, ROWS_PER_WARPGROUP), lse, delta, Nq, H, Hkv, H // Hkv, kernel_qk_scale(scale, softcap),
            scale, n_kb)
    kwargs = dict(CAUSAL=bool(causal), SOFTCAP=float(softcap), WINDOW_LEFT=int(window_left), STAGES=stages,
                  CONSUMER_REGS=CONSUMER_REGS, PRODUCER_REGS=PRODUCER_REGS, num_warps=4)
    return (n_kb * Hkv * B, ), args, kwargs


def dq_launch_args(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dq: torch.Tensor,
                   lse: torch.Tensor, delta: torch.Tensor, causal: bool, scale: float,
                   softcap: float = 0.0, window_left: int = -1) -> tuple[tuple, tuple, dict]:
    """(grid, positional args, keyword args) of the dQ launch (also what `compile_sm90` takes);
    softcap: the cap c, 0 for none; window_left: causal only, keys j >= i - window_left (-1: none)."""
    B, H, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    _, _, block_n, stages = tile_config(D)
    n_m = cdiv(Nq, QUERIES_PER_PROGRAM)
    args = (_descriptor(q, ROWS_PER_WARPGROUP), _descriptor(do, ROWS_PER_WARPGROUP), _descriptor(k, block_n),
            _descriptor(v, block_n), _descriptor(dq, ROWS_PER_WARPGROUP), lse, delta, Nq, Nk, H, H // Hkv,
            kernel_qk_scale(scale, softcap), scale, n_m)
    kwargs = dict(CAUSAL=bool(causal), SOFTCAP=float(softcap), WINDOW_LEFT=int(window_left), STAGES=stages,
                  CONSUMER_REGS=CONSUMER_REGS, PRODUCER_REGS=PRODUCER_REGS, num_warps=4)
    return (n_m * H * B, ), args, kwargs


def refusal(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
            lse: torch.Tensor, causal: bool = False, scale: float | None = None) -> str | None:
    """Why `attention_bwd_gluon` cannot take these inputs (already validated by the Triton
    launcher's checks), or None where it can: the forward's conditions (`attention_fwd.refusal`:
    a Hopper GPU, float16/bfloat16, q, k, v that TMA can read in place) with head dim 64 or
    128, and do that TMA can read too (o is read by the pointer-path preprocess; lse is made
    contiguous). Nothing here launches or synchronises."""
    from .attention_fwd import refusal as forward_refusal

    if not isinstance(do, torch.Tensor) or not isinstance(q, torch.Tensor) or q.dim() != 4:
        return "do and q must be 4-d tensors"
    if q.shape[-1] not in HEAD_DIMS:
        return f"head dim {q.shape[-1]}: the Gluon backward has kernels for {', '.join(map(str, HEAD_DIMS))}"
    if do.shape != q.shape or do.dtype != q.dtype:
        return "do must have q's shape and dtype"
    return forward_refusal(q, k, v, causal, scale) or tma_refusal(do=do)


def supported(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
              lse: torch.Tensor, causal: bool = False, scale: float | None = None) -> bool:
    """Whether `attention_bwd_gluon` takes these inputs (see `refusal`)."""
    return refusal(do, q, k, v, o, lse, causal, scale) is None


def attention_bwd_gluon(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lse: torch.Tensor,
                        delta: torch.Tensor, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, causal: bool,
                        scale: float, softcap: float = 0.0, window_left: int = -1,
                        dq_beside: contextlib.AbstractContextManager | None = None) -> None:
    """The dK/dV and dQ passes on Hopper, writing dq, dk, dv (allocated like q, k, v by the
    Triton launcher), deterministic, from the Triton preprocess's delta (B, H, Nq) float32
    (rowsum(dO * O), less lse's upstream gradient) and the forward's lse (softcap: the cap c the
    forward used, 0 for none; window_left: a causal mask's left window, -1 for none). Called by the
    attention dispatch (`tritonkit.ops.attention.paths`) only where `supported(...)` is true;
    inputs are not validated again here. dq_beside: a context to launch the dQ pass in (a side
    stream beside the dK/dV pass, whose last, uneven programs it fills; the plans' choice), or
    None for the current stream."""
    for name, kernel, (grid, args, kwargs), context in (
            ("attention_bwd_dkdv_gluon", _dkdv_kernel,
             dkdv_launch_args(do, q, k, v, dk, dv, lse, delta, causal, scale, softcap, window_left), None),
            ("attention_bwd_dq_gluon", _dq_kernel,
             dq_launch_args(do, q, k, v, dq, lse, delta, causal, scale, softcap, window_left), dq_beside)):
        num_warps = kwargs.pop("num_warps")
        with context or contextlib.nullcontext():
            Launch(name, kernel, grid, args, kwargs, num_warps=num_warps, num_stages=None)()
