"""Attention forward for Hopper (sm_90) in Gluon, FlashAttention-3 style.

Same contract as the Triton launcher `tritonkit.ops.attention.attention_fwd`:
o[b, h, i] = sum_j softmax_j(s_ij) v[b, hk, j],  s_ij = scale * q[b, h, i] . k[b, hk, j],
hk = h // (H // Hkv), causal top-left aligned (query i sees keys j <= i, as SDPA's is_causal), and
lse[b, h, i] = log sum_j exp(s_ij) in natural-log units, float32, which both backwards read;
with learnable sinks (gpt-oss) a head's sink logit joins every row's sum as a key with no value
(`score.Scores.with_sink`).
What happens to a score (causal, a left window, a softcap, the scale's sign) is one constexpr,
the `ops.attention.score.Score` the Triton kernels take too, applied by `gluon.score.Scores`.
With a softcap c (Gemma 2) the scores are c tanh(s_ij / c), in the softmax and in lse alike; tanh
is the GPU's `tanh.approx.f32`, as in the Triton kernels (`tritonkit.ops.attention.triton_score`
has the formula and its accuracy). In bfloat16, for caps up
to FIXED_REFERENCE_MAX_CAP, the softcap kernel measures p from a fixed reference instead of a
running row maximum (`fixed_reference`): the softcap's scores are bounded, and the score loop,
which the softcap makes issue-bound, loses the row maximum and the rescaling.

A tile is 128 query rows of one (batch, head), 192 at head dim 64 for full attention and long
causal rows (`consumer_count`). The grid is persistent, one program per SM taking tile after tile:
round-robin for full attention, and under a causal mask each tile to the first program to ask
(a counter in global memory), longest first (within a head, or every head's longest tiles
before anyone's shorter ones where few tiles make a long tail, `ops.attention.order`).
Each program runs its partitions:
- a producer warp (24 registers) that loads each tile's 64-row Q tiles and streams its K
  and V blocks through a ring of STAGES shared-memory buffers by TMA, each buffer guarded by a
  "ready" mbarrier (TMA bytes landed) and an "empty" one (every consumer done with it);
- two consumer warpgroups of 64 rows each (the default partition and a worker, 240 registers
  each through setmaxnreg), three for those 192-row tiles (160 registers each), each running
  the online softmax over all key blocks.
Two overlaps keep the tensor cores busy:
- inter-warpgroup ping-pong: one mbarrier a consumer passes a turn round them in order, and a
  warpgroup issues its products for a block only on its turn, so one warpgroup's products run
  while the others do their softmax (exp2 and row reductions on the multi-function units);
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
from ....._counters import zeroed_counters
from ....._launch import LaunchTemplate, target_capability
from ....._layout import cdiv
from ...score import LOG2E, Score, kernel_qk_scale
from ...order import longest_first_span, num_sms
from ..host import GL_DTYPES, PRODUCER_REGS, ROWS_PER_WARPGROUP, consumer_regs, descriptor, kernel_score, tma_refusal
from .kernel import _attn_fwd_kernel

HEAD_DIMS = (64, 128, 256)


# From this many query rows the causal forward at head dim 64 takes three consumers too: below
# it they measured slower than two (BENCHMARKS.md), most likely because the diagonal's masked
# blocks, which spill at 160 registers, are a larger share of a shorter walk.
THREE_CONSUMERS_CAUSAL_ROWS = 8192


def consumer_count(head_dim: int, score: Score, n_rows: int) -> int:
    """Consumer warpgroups of a tile (64 query rows each). At head dim 64 a 128-key block's two
    products take about as many tensor-core cycles as its softmax takes issue cycles, so with
    two warpgroups one's softmax does not fit under the other's products; with three, each
    softmax runs under the other two's (160 registers each: S 64, O 32, P twice 32). Three for
    full attention and for causal from THREE_CONSUMERS_CAUSAL_ROWS rows; two at D = 128 and 256,
    with a softcap (measured slower with three) and with a window (not measured with three; the
    masked blocks spill at 160 registers)."""
    if head_dim != 64 or score.softcap or score.window_left >= 0:
        return 2
    return 3 if not score.causal or n_rows >= THREE_CONSUMERS_CAUSAL_ROWS else 2


@functools.lru_cache(maxsize=None)
def tile_config(head_dim: int) -> tuple[int, int, bool]:
    """(BLOCK_N, STAGES, O_BUFFER): keys a block, ring stages, and whether O is staged for its
    store in a buffer of its own (else in Q's). Shared memory holds Q (64 rows a consumer),
    STAGES buffers of K and V (BLOCK_N x D each) and with O_BUFFER as much again as Q, within
    Hopper's 227 KB: D=128: 32 + 2 x 64 + 32 KB; D=256: 64 KB + 2 x 64 KB (64-key blocks, so
    that S (32 registers) beside O (128) and P fit the 240-register budget), which leaves no
    room for O's own 64 KB; D=64 with three consumers 24 KB + 2 x 32 KB. With its own buffer a
    tile's Q is released once its last S product retires, so that the next tile's Q loads
    under this one's last block and epilogue rather than after O's store (measured faster at
    D=128; at D=64 slower, with the three-warpgroup tile's registers too tight for the release:
    BENCHMARKS.md, notes/gluon_attention.md)."""
    return {64: (128, 2, False), 128: (128, 2, True), 256: (64, 2, False)}[head_dim]


# The largest cap whose scores the softmax measures from a fixed reference (`fixed_reference`):
# C = c log2 e <= 75 keeps p within [2^-120, 2^30].
FIXED_REFERENCE_MAX_CAP = 75 / LOG2E


def fixed_reference(softcap: float, dtype: torch.dtype) -> float:
    """The base-2 reference R the softmax measures every p = 2^(score - R) from, in place of a
    running row maximum, or 0.0 for a running maximum. With a softcap c every base-2 score lies
    in [-C, C], C = c log2 e, so p lies in [2^(-C-R), 2^(C-R)]; R = min(C, 120 - C) keeps that
    within [2^-120, 2^30] for C <= 75 (c up to 75 / log2 e, about 51.99; Gemma 2's 50
    included): every p normal, none flushed (a running maximum flushes p below 2^-126 of the
    row's largest), and no row maximum, correction factor or rescaling of the output a block.
    In bfloat16 only: P is rounded to the tile's dtype for the P V product, and float16's range
    (2^-24 to 2^16) would flush or overflow such p. The prices: a row's largest p is rounded
    too (from a running maximum it is exactly 1), so a row dominated by one key carries
    bfloat16's rounding of its weight, 2^-9 relative, as large as the rounding of the output
    itself; and with p up to 2^30 the float32 sums overflow when |v| Nk > 2^98, against 2^128
    with a running maximum."""
    if not softcap or dtype != torch.bfloat16 or softcap > FIXED_REFERENCE_MAX_CAP:
        return 0.0
    c = softcap * LOG2E
    return min(c, 120.0 - c)


def refusal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, score: Score = Score(),
            scale: float | None = None) -> str | None:
    """Why `ForwardLaunch` cannot take these inputs (already validated by the Triton
    launcher's checks), or None where it can: the GPU that launches on q's device would run on
    must be Hopper (compute capability 9.0: the kernel uses wgmma and setmaxnreg, which sm_100
    does not have), the tensors float16/bfloat16 with head dim 64, 128 or 256, readable by TMA
    in place (see `tma_refusal`), with a positive-length key sequence and fewer than 2^31 tiles
    of 128 rows. The Score's options the kernels lack (a right window, bottom-right
    alignment, ALiBi: `score.Scores.check`) are refused by the dispatch before
    (`paths`). The GPU is `_launch.target_capability`'s: the device's own, or the target the
    inspector records for (so it can show which path an input takes on an H100 from a CPU).
    Nothing here launches or synchronises."""
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        return "q, k and v must be tensors"
    capability = target_capability(q.device)
    if capability != 90:
        return (f"{q.device.type} tensors run no compiled GPU kernel" if capability is None
                else f"the GPU is sm_{capability}, not Hopper (sm_90)")
    if q.dtype not in GL_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return f"dtype {str(q.dtype).removeprefix('torch.')}: the Gluon kernels take float16 and bfloat16"
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return "q, k, v must be 4-d (B, H, N, D)"
    B, H, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    if D not in HEAD_DIMS or k.shape[3] != D or v.shape[3] != D:
        return f"head dim {D}: the Gluon forward has kernels for {', '.join(map(str, HEAD_DIMS))}"
    if Hkv < 1 or H % Hkv or Nk < 1 or B < 1 or Nq < 1 or cdiv(Nq, 2 * ROWS_PER_WARPGROUP) * H * B >= 2**31:
        return "empty sequences, a head count not a multiple of the kv heads', or 2^31 tiles or more"
    if scale is not None and not math.isfinite(scale):
        return f"scale {scale} is not finite"
    return tma_refusal(q=q, k=k, v=v)


def supported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, score: Score = Score(),
              scale: float | None = None) -> bool:
    """Whether `ForwardLaunch` takes these inputs (see `refusal`)."""
    return refusal(q, k, v, score, scale) is None


class ForwardLaunch:
    """The forward launch of one attention plan (one layout of q, k, v: shapes, dtypes,
    alignment, device): grid, scalar arguments and constexprs worked out once, the compiled
    kernel bound after the first call (`_launch.LaunchTemplate`), so that a call makes only its
    descriptors (and takes its stream's schedule counters). score: the call's `Score` (a left
    window only with a causal mask, no right one: the dispatch's conditions). Packed sequences:
    seqs, their number, on (1, H, total, D) views, with o_stride the strides of the o each call
    writes (a sequence's last rows go through pointers: a TMA store would reach into the next
    one's)."""

    __slots__ = ("template", "block_n", "dynamic")

    def __init__(self, q: torch.Tensor, k: torch.Tensor, scale: float, score: Score, seqs: int | None = None,
                 o_stride: tuple | None = None):
        B, H, Nq, D = q.shape
        varlen = seqs is not None
        # A packed batch's rows are its sequences' (the mean length stands for a row's walk).
        row_keys = Nq // max(seqs, 1) if varlen else Nq
        consumers = consumer_count(D, score, row_keys)
        self.block_n, stages, o_buffer = tile_config(D)
        rows = consumers * ROWS_PER_WARPGROUP
        n_m = cdiv(Nq, rows) + (seqs if varlen else 0)
        n_tiles = n_m * H * B
        # One program per SM (one fits: `host`'s register budgets sum to 64,512), each taking
        # tile after tile, so a program's next K/V blocks load under its last tile's epilogue.
        # Full attention: round-robin, its tiles being of one length. Causal or packed: tiles of
        # unequal length, handed out longest first (dense: a head's, or where that leaves a long
        # tail every head's at once, `ops.attention.order`; packed: a sequence's, heads together)
        # to whichever program asks first (DYNAMIC; notes/gluon_attention.md has the schedules
        # measured), through two of `_counters`' int32 counters, which start at zero and which
        # the kernel leaves at zero.
        self.dynamic = score.causal or varlen
        packed = (seqs, o_stride[1], o_stride[2]) if varlen else (0, 0, 0)
        span = longest_first_span(score.causal, score.window, varlen, B * H, n_m, num_sms(q.device))
        # the kernel's sizes, qk_scale, tiling and packed
        tail = ((Nq, k.shape[2], H, H // k.shape[1]), kernel_qk_scale(scale, score.softcap),
                (n_m, n_tiles, max(span, 1)), packed)
        constexprs = dict(SCORE=kernel_score(score), DYNAMIC=self.dynamic, STAGES=stages, CONSUMERS=consumers,
                          CONSUMER_REGS=consumer_regs(consumers), PRODUCER_REGS=PRODUCER_REGS,
                          FIXED_MAX=fixed_reference(score.softcap, q.dtype), VARLEN=varlen,
                          LONGEST_FIRST=span > 0, O_BUFFER=o_buffer)
        self.template = LaunchTemplate("attention_fwd_gluon", _attn_fwd_kernel, (min(n_tiles, num_sms(q.device)),),
                                       tail, constexprs, num_warps=4, num_stages=None)

    def head(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
             cu_q: torch.Tensor | None = None, cu_k: torch.Tensor | None = None,
             sinks: torch.Tensor | None = None) -> tuple:
        """The call's own leading arguments: descriptors of q, k, v, o; lse; the counters; for
        packed sequences cu_seqlens and o itself; the sinks (contiguous, a logit a head)."""
        sched = zeroed_counters(q.device) if self.dynamic else lse
        return (descriptor(q, ROWS_PER_WARPGROUP), descriptor(k, self.block_n), descriptor(v, self.block_n),
                descriptor(o, ROWS_PER_WARPGROUP), lse, sched, cu_q, cu_k, None if cu_q is None else o, sinks)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                 cu_q: torch.Tensor | None = None, cu_k: torch.Tensor | None = None,
                 sinks: torch.Tensor | None = None) -> None:
        """Writes o (like q, as the Triton launcher allocates it) and lse (B, H, Nq) float32,
        natural log, exactly as `tritonkit.ops.attention.attention_fwd` defines them, for
        inputs of the plan's layout; packed sequences as `attention_varlen_fwd` (on its
        (1, H, total, D) views, lse (1, H, Tq)). Made by the attention dispatch
        (`tritonkit.ops.attention.paths`) only where `supported(q, k, v, score, scale)` is
        true (and with a window, where every row sees a key); inputs are not validated again.
        sinks: given exactly when the plan's Score has them."""
        self.template(*self.head(q, k, v, o, lse, cu_q, cu_k, sinks))


def launch_args(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                scale: float, score: Score = Score(), cu_q: torch.Tensor | None = None,
                cu_k: torch.Tensor | None = None, sinks: torch.Tensor | None = None) -> tuple[tuple, tuple, dict]:
    """(grid, positional args, keyword args with num_warps) of one forward launch, as
    `ForwardLaunch` makes it: what `tritonkit.inspector.gluon.compile_sm90` compiles for sm_90 without a GPU.
    Packed sequences: q, k, v, o the (1, H, total, D) views, cu_q and cu_k their offsets."""
    seqs = None if cu_q is None else cu_q.numel() - 1
    plan = ForwardLaunch(q, k, scale, score, seqs, None if cu_q is None else o.stride())
    launch = plan.template.as_launch(plan.head(q, k, v, o, lse, cu_q, cu_k, sinks))
    return launch.grid, launch.args, {**launch.constexprs, "num_warps": launch.num_warps}
