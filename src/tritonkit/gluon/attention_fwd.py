"""Attention forward for Hopper (sm_90) in Gluon, FlashAttention-3 style.

Same contract as the Triton launcher `tritonkit.ops.attention.attention_fwd`:
o[b, h, i] = sum_j softmax_j(scale * q[b, h, i] . k[b, hk, j]) v[b, hk, j],  hk = h // (H // Hkv),
causal top-left aligned (query i sees keys j <= i, as SDPA's is_causal), and
lse[b, h, i] = log sum_j exp(scale * s_ij) in natural-log units, float32, which the Triton
backward reads.

One program owns 128 query rows of one (batch, head) and runs three partitions:
- a producer warp (24 registers) that loads the two 64-row Q tiles once and then streams K and
  V blocks through a ring of STAGES shared-memory buffers by TMA, each buffer guarded by a
  "ready" mbarrier (TMA bytes landed) and an "empty" one (both consumers done with it);
- two consumer warpgroups of 64 rows each (the default partition and a worker, 240 registers
  each through setmaxnreg), each running the online softmax over all key blocks.
Two overlaps keep the tensor cores busy:
- inter-warpgroup ping-pong: a pair of mbarriers passes a turn between the consumers, and a
  warpgroup issues its products for a block only on its turn, so one warpgroup's products run
  while the other does its softmax (exp2 and row reductions on the multi-function units);
- intra-warpgroup: in iteration j a warpgroup issues S(j) = Q K(j)^T and then O += P(j-1) V(j-1),
  waits for S(j) alone (wgmma wait with one group still pending), and computes block j's
  softmax while P(j-1) V(j-1) still runs.
K and V have separate barriers: a K buffer is released as soon as S(j) is done, a V buffer
after P(j) V(j), so the producer refills K one softmax earlier.

Masks are applied only on key blocks that need them: the blocks crossing the causal diagonal
and the ragged last block (keys past Nk). TMA reads of rows past N come back as zeros and never
from the next head (descriptors span the whole (B, H, N, D) tensor), and the TMA store of O
drops rows past Nq. Every query row sees key 0 (top-left causal, Nk >= 1), so a row's running
maximum is finite after block 0 and a fully masked later block adds exactly zero.

Only for what `supported` accepts; everything else takes the Triton path.
"""

from __future__ import annotations

import functools
import math

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from .._layout import cdiv

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
ROWS_PER_WARPGROUP = 64      # wgmma's M per warpgroup: 4 warps x 16 rows
ROWS_PER_PROGRAM = 2 * ROWS_PER_WARPGROUP
HEAD_DIMS = (64, 128, 256)
MAX_GRID_YZ = 65535
# Registers per thread: 64K per SM over (4 + 4 + 4) warps' threads, the producer's warp
# padded to a warpgroup by setmaxnreg: (240 + 240 + 24) * 128 = 64,512 <= 65,536.
CONSUMER_REGS = 240
PRODUCER_REGS = 24


@functools.lru_cache(maxsize=None)
def tile_config(head_dim: int) -> tuple[int, int]:
    """(BLOCK_N, STAGES) for a head dim. Shared memory holds Q (128 x D, reused for O) and
    STAGES buffers of K and V (BLOCK_N x D each), within Hopper's 227 KB:
    D=64: 16 KB + 3 x 32 KB; D=128: 32 KB + 2 x 64 KB; D=256: 64 KB + 2 x 64 KB (64-key blocks,
    so that S (32 registers) beside O (128) and P fit the 240-register budget)."""
    return {64: (128, 3), 128: (128, 2), 256: (64, 2)}[head_dim]


# ---------------------------------------------------------------------------------------
# Kernel
# ---------------------------------------------------------------------------------------

@gluon.constexpr_function
def _wgmma_layout(num_warps, n):
    # one warpgroup, 16 rows per warp; instr N = the tile's width; K = 16 for 16-bit inputs
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, n, 16])


@gluon.jit
def _tma_view(buf, desc):
    # A 2-d (rows, D) shared buffer seen as the (1, 1, rows, D) box of a 4-d descriptor: the
    # same bytes and swizzle, the two leading dims of extent one.
    return buf._reinterpret(buf.dtype, desc.block_type.shape, desc.layout)


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, k_empty, v_empty,
              b, h, hk, m0, n_kv):
    STAGES: gl.constexpr = k_bufs.shape[0]
    BLOCK_N: gl.constexpr = k_bufs.shape[1]
    BLOCK_M: gl.constexpr = q_smem.shape[1]
    mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [b, h, m0, 0], q_bar, _tma_view(q_smem.index(0), q_desc))
    tma.async_copy_global_to_shared(q_desc, [b, h, m0 + BLOCK_M, 0], q_bar, _tma_view(q_smem.index(1), q_desc))
    for j in range(n_kv):
        s = j % STAGES
        phase = (j // STAGES) & 1
        # A fresh mbarrier is in phase 0, so waiting for parity 1 passes: the first lap is free.
        mbarrier.wait(k_empty.index(s), phase ^ 1)
        mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [b, hk, j * BLOCK_N, 0], k_ready.index(s),
                                        _tma_view(k_bufs.index(s), k_desc))
        mbarrier.wait(v_empty.index(s), phase ^ 1)
        mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [b, hk, j * BLOCK_N, 0], v_ready.index(s),
                                        _tma_view(v_bufs.index(s), v_desc))


@gluon.jit
def _softmax_step(qk, m_i, l_i, row0, col0, Nk, qk_scale,
                  MASKED: gl.constexpr, CAUSAL: gl.constexpr, SCALE_POS: gl.constexpr):
    # Online softmax of one key block in base 2 (qk_scale = scale * log2 e):
    #   m' = max(m, max_j s_j * qk_scale),  p_j = 2^(s_j * qk_scale - m'),
    #   alpha = 2^(m - m'),  l' = alpha * l + sum_j p_j.
    # With a positive scale the row maximum is taken on the raw scores and scaled once, and
    # s * qk_scale - m' is one fused multiply-add per score.
    BLOCK_M: gl.constexpr = qk.shape[0]
    BLOCK_N: gl.constexpr = qk.shape[1]
    s_layout: gl.constexpr = qk.type.layout
    if not SCALE_POS:
        qk = qk * qk_scale
    if MASKED:
        cols = col0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        keep = gl.expand_dims(cols < Nk, 0)
        if CAUSAL:
            rows = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
            keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1))
        qk = gl.where(keep, qk, float("-inf"))
    if SCALE_POS:
        m_new = gl.maximum(m_i, gl.max(qk, axis=1) * qk_scale)
        p = gl.exp2(qk * qk_scale - gl.expand_dims(m_new, 1))
    else:
        m_new = gl.maximum(m_i, gl.max(qk, axis=1))
        p = gl.exp2(qk - gl.expand_dims(m_new, 1))
    alpha = gl.exp2(m_i - m_new)
    l_new = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_new


@gluon.jit
def _consumer_block(j, acc, pb, m_i, l_i, q, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty,
                    my_turn, other_turn, WG: gl.constexpr, row0, Nk, qk_scale,
                    MASKED: gl.constexpr, CAUSAL: gl.constexpr, SCALE_POS: gl.constexpr):
    # Iteration j >= 1: S(j) and P(j-1) V(j-1) in flight together, softmax(j) under the latter.
    STAGES: gl.constexpr = k_bufs.shape[0]
    BLOCK_N: gl.constexpr = k_bufs.shape[1]
    BLOCK_M: gl.constexpr = q.shape[0]
    NW: gl.constexpr = gl.num_warps()
    s_layout: gl.constexpr = _wgmma_layout(NW, BLOCK_N)
    o_layout: gl.constexpr = acc.type.layout
    p_layout: gl.constexpr = pb.type.layout
    s = j % STAGES
    sp = (j - 1) % STAGES
    mbarrier.wait(k_ready.index(s), (j // STAGES) & 1)
    mbarrier.wait(v_ready.index(sp), ((j - 1) // STAGES) & 1)
    # The turn alternates strictly (each wait needs the other warpgroup's arrive), so its
    # parity is the issue count's: warpgroup 0 finds its first turn free, warpgroup 1 waits.
    mbarrier.wait(my_turn, (j & 1) ^ (1 - WG))
    qk = warpgroup_mma(q, k_bufs.index(s).permute((1, 0)), gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout),
                       use_acc=False, is_async=True)
    acc = warpgroup_mma(pb, v_bufs.index(sp), acc, is_async=True)
    mbarrier.arrive(other_turn, count=1)
    qk = warpgroup_mma_wait(num_outstanding=1, deps=(qk, ))
    mbarrier.arrive(k_empty.index(s), count=1)
    p, alpha, m_i, l_i = _softmax_step(qk, m_i, l_i, row0, j * BLOCK_N, Nk, qk_scale, MASKED, CAUSAL, SCALE_POS)
    pb_next = gl.convert_layout(p.to(q.dtype), p_layout)
    # pb is the register operand of the product in flight: a dependency of the wait that
    # retires it, so its registers are not reused before the tensor cores have read them.
    acc, pb = warpgroup_mma_wait(num_outstanding=0, deps=(acc, pb))
    mbarrier.arrive(v_empty.index(sp), count=1)
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
    return acc, pb_next, m_i, l_i


@gluon.jit
def _consumer(WG: gl.constexpr, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, k_empty, v_empty, turn,
              o_desc, LSE, b, h, H, m0, Nq, Nk, n_kv, n_full, qk_scale,
              CAUSAL: gl.constexpr, SCALE_POS: gl.constexpr):
    BLOCK_M: gl.constexpr = q_smem.shape[1]
    HEAD_DIM: gl.constexpr = q_smem.shape[2]
    STAGES: gl.constexpr = k_bufs.shape[0]
    BLOCK_N: gl.constexpr = k_bufs.shape[1]
    NW: gl.constexpr = gl.num_warps()
    s_layout: gl.constexpr = _wgmma_layout(NW, BLOCK_N)
    o_layout: gl.constexpr = _wgmma_layout(NW, HEAD_DIM)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    q = q_smem.index(WG)
    my_turn = turn.index(WG)
    other_turn = turn.index(1 - WG)
    row0 = m0 + WG * BLOCK_M

    # Block 0: S(0) alone, then its softmax (masked when it is the diagonal or ragged block).
    mbarrier.wait(q_bar, 0)
    mbarrier.wait(k_ready.index(0), 0)
    mbarrier.wait(my_turn, 1 - WG)
    qk = warpgroup_mma(q, k_bufs.index(0).permute((1, 0)), gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout),
                       use_acc=False, is_async=True)
    mbarrier.arrive(other_turn, count=1)
    qk = warpgroup_mma_wait(num_outstanding=0, deps=(qk, ))
    mbarrier.arrive(k_empty.index(0), count=1)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_layout))
    if n_full > 0:
        p, alpha, m_i, l_i = _softmax_step(qk, m_i, l_i, row0, 0, Nk, qk_scale, False, CAUSAL, SCALE_POS)
    else:
        p, alpha, m_i, l_i = _softmax_step(qk, m_i, l_i, row0, 0, Nk, qk_scale, True, CAUSAL, SCALE_POS)
    pb = gl.convert_layout(p.to(q.dtype), p_layout)
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)

    # Blocks 1 .. n_full-1 need no mask; n_full .. n_kv-1 are the diagonal band and ragged tail.
    for j in range(1, n_full):
        acc, pb, m_i, l_i = _consumer_block(j, acc, pb, m_i, l_i, q, k_bufs, v_bufs, k_ready, v_ready, k_empty,
                                            v_empty, my_turn, other_turn, WG, row0, Nk, qk_scale,
                                            False, CAUSAL, SCALE_POS)
    for j in range(gl.maximum(n_full, 1), n_kv):
        acc, pb, m_i, l_i = _consumer_block(j, acc, pb, m_i, l_i, q, k_bufs, v_bufs, k_ready, v_ready, k_empty,
                                            v_empty, my_turn, other_turn, WG, row0, Nk, qk_scale,
                                            True, CAUSAL, SCALE_POS)

    # The last block's P V, then O = acc / l through shared memory (Q's buffer, free now that
    # every S product has retired) and a TMA store that drops rows past Nq.
    s_last = (n_kv - 1) % STAGES
    mbarrier.wait(v_ready.index(s_last), ((n_kv - 1) // STAGES) & 1)
    acc = warpgroup_mma(pb, v_bufs.index(s_last), acc, is_async=True)
    acc, pb = warpgroup_mma_wait(num_outstanding=0, deps=(acc, pb))
    mbarrier.arrive(v_empty.index(s_last), count=1)
    acc = acc / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)), 1)
    q.store(acc.to(q.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [b, h, row0, 0], _tma_view(q, o_desc))

    rows = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    lse = (m_i + gl.log2(l_i)) * 0.6931471805599453          # natural-log units
    gl.store(LSE + (b.to(gl.int64) * H + h) * Nq + rows, lse, mask=rows < Nq)
    tma.store_wait(pendings=0)


@gluon.jit
def _consumer0(q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, k_empty, v_empty, turn, o_desc, LSE,
               b, h, H, m0, Nq, Nk, n_kv, n_full, qk_scale, CAUSAL: gl.constexpr, SCALE_POS: gl.constexpr):
    _consumer(0, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, k_empty, v_empty, turn, o_desc, LSE,
              b, h, H, m0, Nq, Nk, n_kv, n_full, qk_scale, CAUSAL, SCALE_POS)


@gluon.jit
def _consumer1(q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, k_empty, v_empty, turn, o_desc, LSE,
               b, h, H, m0, Nq, Nk, n_kv, n_full, qk_scale, CAUSAL: gl.constexpr, SCALE_POS: gl.constexpr):
    _consumer(1, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, k_empty, v_empty, turn, o_desc, LSE,
              b, h, H, m0, Nq, Nk, n_kv, n_full, qk_scale, CAUSAL, SCALE_POS)


@gluon.jit
def _attn_fwd_kernel(
    # tensor descriptors of the whole (B, H, N, D) q, k, v, o; LSE: (B, H, Nq) float32
    q_desc, k_desc, v_desc, o_desc, LSE,
    # shapes and scale (GROUP = query heads per kv head; qk_scale = scale * log2 e)
    Nq, Nk, GROUP, qk_scale,
    # meta
    CAUSAL: gl.constexpr, SCALE_POS: gl.constexpr, STAGES: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
):
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[3]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    dtype: gl.constexpr = q_desc.dtype
    gl.static_assert(gl.num_warps() == 4)

    pid_m = gl.program_id(0)
    if CAUSAL:
        pid_m = gl.num_programs(0) - 1 - pid_m     # the longest rows start first
    h = gl.program_id(1)
    b = gl.program_id(2)
    H = gl.num_programs(1)
    hk = h // GROUP
    m0 = pid_m * (2 * BLOCK_M)
    # Key blocks: [0, n_full) are visible to every row of the program; [n_full, n_kv) need masks.
    if CAUSAL:
        n_kv = gl.cdiv(gl.minimum(Nk, m0 + 2 * BLOCK_M), BLOCK_N)
        n_full = gl.minimum(m0 + 1, Nk) // BLOCK_N
    else:
        n_kv = gl.cdiv(Nk, BLOCK_N)
        n_full = Nk // BLOCK_N

    smem_2d: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, HEAD_DIM], dtype)
    kv_2d: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_DIM], dtype)
    q_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, HEAD_DIM], smem_2d)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], kv_2d)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], kv_2d)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)   # released by both consumer warpgroups
        mbarrier.init(v_empty.index(i), count=2)
    mbarrier.init(turn.index(0), count=1)
    mbarrier.init(turn.index(1), count=1)

    gl.warp_specialize([
        (_consumer0, (q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, k_empty, v_empty, turn, o_desc, LSE,
                      b, h, H, m0, Nq, Nk, n_kv, n_full, qk_scale, CAUSAL, SCALE_POS)),
        (_consumer1, (q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, k_empty, v_empty, turn, o_desc, LSE,
                      b, h, H, m0, Nq, Nk, n_kv, n_full, qk_scale, CAUSAL, SCALE_POS)),
        (_producer, (q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, k_empty, v_empty,
                     b, h, hk, m0, n_kv)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


# ---------------------------------------------------------------------------------------
# Launcher
# ---------------------------------------------------------------------------------------

_GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}


def _descriptor(t: torch.Tensor, rows: int) -> TensorDescriptor:
    """A descriptor of the whole (B, H, N, D) tensor read (or written) as (1, 1, rows, D) boxes."""
    block = [1, 1, rows, t.shape[-1]]
    layout = gl.NVMMASharedLayout.get_default_for(block, _GL_DTYPES[t.dtype])
    return TensorDescriptor(t, list(t.shape), list(t.stride()), block, layout)


def _tma_ready(t: torch.Tensor) -> bool:
    """TMA's rules: 16-byte aligned base, unit innermost stride, other strides positive multiples
    of 16 bytes below 2^40, dims below 2^32."""
    if t.data_ptr() % 16 or t.stride(-1) != 1 or any(n >= 2**32 for n in t.shape):
        return False
    size = t.element_size()
    return all(0 < s and s * size % 16 == 0 and s * size < 2**40 for s in t.stride()[:-1])


def supported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None) -> bool:
    """Whether `attention_fwd_gluon` takes these inputs (already validated by the Triton
    launcher's checks): CUDA tensors on a compute-capability 9.0 GPU (Hopper; the kernel uses
    wgmma and setmaxnreg, which sm_100 does not have), float16/bfloat16, head dim 64, 128 or
    256, and q, k, v that TMA can read in place (see `_tma_ready`) with a positive-length key
    sequence and grid dims within CUDA's limits. Nothing here launches or synchronises."""
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        return False
    if q.device.type != "cuda" or not torch.cuda.is_available():
        return False
    if torch.cuda.get_device_capability(q.device) != (9, 0):
        return False
    if q.dtype not in _GL_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return False
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return False
    B, H, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    if D not in HEAD_DIMS or k.shape[3] != D or v.shape[3] != D:
        return False
    if Hkv < 1 or H % Hkv or Nk < 1 or B < 1 or Nq < 1 or H > MAX_GRID_YZ or B > MAX_GRID_YZ:
        return False
    if scale is not None and not math.isfinite(scale):
        return False
    return all(_tma_ready(t) for t in (q, k, v))


def launch_args(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                causal: bool, scale: float) -> tuple[tuple, tuple, dict]:
    """(grid, positional args, keyword args) of one forward launch: the launcher's, and what
    `tritonkit.gluon.compile` compiles for sm_90 without a GPU."""
    B, H, Nq, D = q.shape
    block_n, stages = tile_config(D)
    args = (_descriptor(q, ROWS_PER_WARPGROUP), _descriptor(k, block_n), _descriptor(v, block_n),
            _descriptor(o, ROWS_PER_WARPGROUP), lse, Nq, k.shape[2], H // k.shape[1], scale * LOG2E)
    kwargs = dict(CAUSAL=bool(causal), SCALE_POS=scale > 0, STAGES=stages, CONSUMER_REGS=CONSUMER_REGS,
                  PRODUCER_REGS=PRODUCER_REGS, num_warps=4)
    grid = (cdiv(Nq, ROWS_PER_PROGRAM), H, B)
    return grid, args, kwargs


def attention_fwd_gluon(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward on Hopper: (o, lse) exactly as `tritonkit.ops.attention.attention_fwd`
    returns them (o like q in q's dtype and memory order, lse (B, H, Nq) float32, natural
    log). Call only where `supported(q, k, v, causal, scale)` is true; inputs are not
    validated again here."""
    from ..ops.attention import _empty_like_order   # the Triton launcher's output layout

    B, H, Nq, D = q.shape
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    o = _empty_like_order(q, (B, H, Nq, D), q.dtype)
    lse = torch.empty((B, H, Nq), dtype=torch.float32, device=q.device)
    grid, args, kwargs = launch_args(q, k, v, o, lse, causal, scale)
    _attn_fwd_kernel[grid](*args, **kwargs)
    return o, lse
