"""Attention backward for Hopper (sm_90) in Gluon, FlashAttention-3 style, deterministic.

Same contract as the Triton launcher `tritonkit.ops.attention.attention_bwd`:
(dq, dk, dv) from the upstream gradient do, the inputs q, k, v and the forward's o and lse
(B, H, Nq) float32 in natural-log units, as both forwards store it. With
P = exp(scale * Q K^T - lse) (causal: zero above the top-left diagonal), delta = rowsum(dO * O):
  dV = P^T dO,  dP = dO V^T,  dS = P * (dP - delta),  dK = scale * dS^T Q,  dQ = scale * dS K,
dK and dV summed over the query heads of each kv head (GQA) in a fixed order. What happens to a
score is one constexpr, the `ops.attention.score.Score` (SCORE), applied by `gluon.score.Scores`.
With a softcap c the scores are c tanh(t), t = scale * Q K^T / c, recomputed
from the raw Q K^T with the forward's `tanh.approx.f32`: P = exp(c tanh(t) - lse), and dS carries
the capped score's derivative, dS = P (1 - tanh(t)^2) (dP - delta), folded into P once P has gone
to dV's product.

Two launches, none with atomics, so the same inputs give bitwise the same gradients:
1. dQ (`_dq_kernel`): one program per 128 query rows of one (batch, head), the forward's
   structure: Q and dO in shared memory, K and V streamed through a ring, two 64-row consumer
   warpgroups passing a turn so one's elementwise work runs under the other's products, and
   within a warpgroup S(j) and dP(j) issued beside dQ += dS(j-1) K(j-1). Each warpgroup also
   loads its O tile and forms its rows' delta = rowsum(dO * O) (less lse's upstream gradient)
   in its prologue, and stores it for the dK/dV pass: no launch of its own for delta.
2. dK/dV (`_dkdv_kernel`), after dQ (it reads every row's delta): one program per 128-key block of
   one (batch, kv head). K and V stay in shared memory (at D=64 each warpgroup also holds its
   halves in registers, see `kv_in_registers`); a producer warp streams the (Q, dO) blocks of
   every query head of the group through a ring by TMA, with each block's lse (base 2) and delta
   beside them, which the consumers read in their products' layout; two consumer warpgroups each
   own 64 of the keys (their dK and dV accumulators in registers, 240 registers each through
   setmaxnreg) and per query block issue S^T = K Q^T and dP^T = V dO^T together, form P^T while
   dP^T is still running, issue dV += P^T dO, form dS^T while dV's product runs, then dK += dS^T Q
   (P^T and dS^T are register operands: S^T's accumulator layout is theirs). The two warpgroups
   share the tensor cores: one's exponentials run under the other's products.

Why a separate dQ pass rather than dQ partials per key block reduced afterwards: a partial per
key block is Nq x D float32 per (key block, head), Nk / 128 times the size of dQ (128 GiB at
B=4, H=32, N=16384, D=128), and an ordered in-place accumulation across programs serialises
them; the dQ pass recomputes S and dP (7 products instead of 5) but reads only Q, dO, K, V.

A causal mask may carry a left window (the Score's window_left = L, -1 for none: query i sees
keys i - L .. i): each pass walks only the blocks its tile sees, whole blocks unmasked, the
two edges (the diagonal, the window's start) masked; the dispatch sends it here only where
every query sees a key. Query rows past Nq load as zeros with lse = delta = 0, which adds
exactly nothing to dK and dV; keys past Nk produce rows of dK and dV that the TMA store drops,
and are masked (P = 0) in the dQ pass, where they would multiply zeros of K.

Only for what `supported` accepts (D = 64 or 128 for both passes; at D = 256 the dK/dV pass
alone, `split_head_dim`, beside the Triton preprocess and dQ pass); everything else takes the
Triton path.
"""

from __future__ import annotations

import functools

import torch

from ....._launch import LaunchTemplate
from ....._layout import cdiv
from ...score import Score, kernel_qk_scale
from ...order import longest_first_span, num_sms
from ..host import CONSUMER_REGS, PRODUCER_REGS, ROWS_PER_WARPGROUP, descriptor, kernel_score, tma_refusal
from .dkdv import _dkdv_kernel
from .dq import _dq_kernel

HEAD_DIMS = (64, 128)
# The dK/dV pass also has a kernel at head dim 256 (`split_head_dim`), run beside the Triton
# preprocess and dQ pass; a Gluon dQ pass at D=256 measured slower than the Triton one
# (notes/gluon_attention.md).
DKDV_HEAD_DIMS = HEAD_DIMS + (256, )
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
    D=128: 64 + 3 x 32 = 160 KB and 64 + 4 x 32 = 192 KB. D=256: the dK/dV pass only (two
    stages, `split_head_dim`); no dQ kernel (0, 0)."""
    return {64: (64, 4, 64, 4), 128: (64, 3, 64, 4), 256: (64, 2, 0, 0)}[head_dim]


def split_head_dim(head_dim: int) -> bool:
    """Whether the dK/dV pass splits the head dim between its two consumer warpgroups rather
    than the keys: at D=256, where a warpgroup's dK and dV for 64 keys in float32 would take
    256 registers a thread. Each then holds them for 128 columns (as at D=128), a program takes
    64 keys, every tensor goes through 128-column boxes, and one warpgroup forms S^T and P^T,
    the other dP^T and dS^T, handing them over through shared memory (dkdv.py). Shared memory:
    K, V 64 KB, two stages of Q and dO 128 KB, the hand-over 32 KB (P^T and dS^T in q's dtype,
    P^T in float32): 225 KB of the 227 a block may take."""
    return head_dim > 128


def kv_in_registers(head_dim: int) -> int:
    """How many of K and V (in that order, 0 to 2) the dK/dV consumers hold in registers as the
    A operand of S^T's and dP^T's products instead of reading them from shared memory every
    block. Those products are m64n64: with both operands in shared memory they read 128 bytes a
    clock, all that shared memory gives, beside the TMA stores into the ring and dV's and dK's
    B operands. At D=64 K and V take 16 registers each and fit (no spills); at D=128 they take
    32 each next to dK and dV's 128, and even K alone spills 200-570 bytes and runs slower
    (BENCHMARKS.md has both)."""
    return 2 if head_dim == 64 else 0


def _meta(score: Score, stages: int, varlen: bool, span: int) -> dict:
    """The constexprs both passes take (span: the tiles' order, `ops.attention.order`)."""
    return dict(SCORE=kernel_score(score), STAGES=stages, CONSUMER_REGS=CONSUMER_REGS, PRODUCER_REGS=PRODUCER_REGS,
                VARLEN=varlen, LONGEST_FIRST=span > 0)


class _Pass:
    """One pass of the backward for one plan: its launch template and the box rows (and
    columns, None for the head dim) of each descriptor it reads (q, do, k, v) and writes."""

    __slots__ = ("template", "q_rows", "kv_rows", "cols")

    def __init__(self, name: str, kernel, grid: tuple, tail: tuple, constexprs: dict, q_rows: int, kv_rows: int,
                 cols: int | None = None):
        self.template = LaunchTemplate(name, kernel, grid, tail, constexprs, num_warps=4, num_stages=None)
        self.q_rows, self.kv_rows, self.cols = q_rows, kv_rows, cols


class BackwardLaunches:
    """The dQ and dK/dV launches of one attention plan (one layout of do, q, k, v, o: shapes,
    dtypes, alignment, device): grids, scalar arguments and constexprs worked out once, each
    compiled kernel bound after its first call (`_launch.LaunchTemplate`), so that a call makes
    only its descriptors, one per tensor and box (the passes read q, do, k and v in the same
    boxes at D = 64 and 128). score: the call's `Score` (a left window only with a causal
    mask, no right one: the dispatch's conditions)."""

    __slots__ = ("dkdv", "dq")

    def __init__(self, q: torch.Tensor, k: torch.Tensor, scale: float, score: Score, seqs: int | None = None,
                 dq_stride: tuple | None = None, dk_stride: tuple | None = None):
        B, H, Nq, D = q.shape
        Hkv, Nk = k.shape[1], k.shape[2]
        varlen = seqs is not None
        block_m, dkdv_stages, block_n, dq_stages = tile_config(D)
        scales = (kernel_qk_scale(scale, score.softcap), scale)
        split = split_head_dim(D)
        # Packed sequences (seqs of them, on (1, heads, total, D) views): a sequence's last
        # block goes through pointers of these strides (dk's also dv's), and each sequence
        # may start a block of its own (`common._varlen_tile`).
        n_kb = cdiv(Nk, ROWS_PER_WARPGROUP if split else KEYS_PER_PROGRAM) + (seqs if varlen else 0)
        sms = num_sms(q.device)
        dkdv_span = longest_first_span(score.causal, score.window, varlen, B * Hkv, n_kb, sms)
        # each kernel's sizes, scales, tiling and packed
        self.dkdv = _Pass("attention_bwd_dkdv_gluon", _dkdv_kernel, (n_kb * Hkv * B,),
                          ((Nq, Nk, H, Hkv, H // Hkv), scales, (n_kb, max(dkdv_span, 1)), _packed(seqs, dk_stride)),
                          dict(_meta(score, dkdv_stages, varlen, dkdv_span), KV_REGS=kv_in_registers(D),
                               SPLIT_D=split),
                          block_m, ROWS_PER_WARPGROUP, D // 2 if split else None)
        if D not in HEAD_DIMS:          # a dK/dV kernel alone (DKDV_HEAD_DIMS)
            self.dq = None
            return
        n_m = cdiv(Nq, QUERIES_PER_PROGRAM) + (seqs if varlen else 0)
        dq_span = longest_first_span(score.causal, score.window, varlen, B * H, n_m, sms)
        # keyed by whether lse has an upstream gradient to take from delta (HAS_DLSE)
        self.dq = {has_dlse: _Pass("attention_bwd_dq_gluon", _dq_kernel, (n_m * H * B,),
                                   ((Nq, Nk, H, H // Hkv), scales, (n_m, max(dq_span, 1)), _packed(seqs, dq_stride)),
                                   dict(_meta(score, dq_stages, varlen, dq_span), HAS_DLSE=has_dlse),
                                   ROWS_PER_WARPGROUP, block_n)
                   for has_dlse in (False, True)}

    def dkdv_head(self, do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lse: torch.Tensor,
                  delta: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cu_q: torch.Tensor | None = None,
                  cu_k: torch.Tensor | None = None) -> tuple:
        """The dK/dV pass's own leading arguments for a call: its descriptors, lse, delta, and
        for packed sequences cu_seqlens and dk, dv themselves (None, None, dk, dv otherwise)."""
        a = self.dkdv
        boxes = ((q, a.q_rows), (do, a.q_rows), (k, a.kv_rows), (v, a.kv_rows), (dk, a.kv_rows), (dv, a.kv_rows))
        return (*(descriptor(t, rows, a.cols) for t, rows in boxes), lse, delta, cu_q, cu_k, dk, dv)

    def run_dkdv(self, do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lse: torch.Tensor,
                 delta: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cu_q: torch.Tensor | None = None,
                 cu_k: torch.Tensor | None = None) -> None:
        """The dK/dV pass alone, from a delta formed elsewhere (head dim 256: the Triton
        preprocess's; `dq` is None there), writing dk and dv."""
        self.dkdv.template(*self.dkdv_head(do, q, k, v, lse, delta, dk, dv, cu_q, cu_k))

    def heads(self, do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
              lse: torch.Tensor, delta: torch.Tensor, dlse: torch.Tensor | None, dq: torch.Tensor,
              dk: torch.Tensor, dv: torch.Tensor, cu_q: torch.Tensor | None = None,
              cu_k: torch.Tensor | None = None) -> tuple[tuple, tuple]:
        """Each pass's own leading arguments for a call, dQ's first: its descriptors, then lse,
        delta (written by dQ, read by dK/dV) and (dQ) dlse, delta where there is none (unread),
        then cu_seqlens and the gradients' pointers (`dkdv_head`)."""
        a, b = self.dkdv, self.dq[False]
        dkdv = self.dkdv_head(do, q, k, v, lse, delta, dk, dv, cu_q, cu_k)
        if (b.q_rows, b.kv_rows, b.cols) == (a.q_rows, a.kv_rows, a.cols):
            q_dq, do_dq, k_dq, v_dq = dkdv[:4]      # the same boxes (D = 64 and 128): the same descriptors
        else:
            q_dq, do_dq, k_dq, v_dq = (descriptor(q, b.q_rows), descriptor(do, b.q_rows), descriptor(k, b.kv_rows),
                                       descriptor(v, b.kv_rows))
        return ((q_dq, do_dq, descriptor(o, b.q_rows), k_dq, v_dq, descriptor(dq, b.q_rows), lse, delta,
                 delta if dlse is None else dlse, cu_q, cu_k, dq), dkdv)

    def __call__(self, do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                 lse: torch.Tensor, dlse: torch.Tensor | None, dq: torch.Tensor, dk: torch.Tensor,
                 dv: torch.Tensor, cu_q: torch.Tensor | None = None, cu_k: torch.Tensor | None = None
                 ) -> torch.Tensor:
        """The dQ pass, then the dK/dV pass, on Hopper, writing dq, dk, dv (allocated like q,
        k, v by the Triton launcher), deterministic, from the forward's o and lse and lse's
        upstream gradient dlse (None: none), lse and dlse (B, H, Nq) float32 contiguous; packed
        sequences as `attention_varlen_bwd` (on its (1, heads, total, D) views, with cu_q,
        cu_k). Made by the attention dispatch (`tritonkit.ops.attention.paths`) only where
        `supported(...)` is true; inputs are not validated again here. Returns delta (lse's
        shape, float32: rowsum(dO O) less dlse, every row's), which sinks' gradient reads."""
        delta = torch.empty(lse.shape, dtype=torch.float32, device=lse.device)
        dq_, dkdv = self.heads(do, q, k, v, o, lse, delta, dlse, dq, dk, dv, cu_q, cu_k)
        self.dq[dlse is not None].template(*dq_)
        self.dkdv.template(*dkdv)
        return delta


def _packed(seqs: int | None, grad_stride: tuple | None) -> tuple:
    """A pass's `packed`: SEQS, the head and row strides of its gradient; zeros when dense."""
    if seqs is None:
        return 0, 0, 0
    return seqs, grad_stride[1], grad_stride[2]


def _launch_args(which: _Pass, head: tuple) -> tuple[tuple, tuple, dict]:
    launch = which.template.as_launch(head)
    return launch.grid, launch.args, {**launch.constexprs, "num_warps": launch.num_warps}


def dkdv_launch_args(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dk: torch.Tensor,
                     dv: torch.Tensor, lse: torch.Tensor, delta: torch.Tensor, scale: float, score: Score = Score(),
                     cu_q: torch.Tensor | None = None, cu_k: torch.Tensor | None = None) -> tuple[tuple, tuple, dict]:
    """(grid, positional args, keyword args with num_warps) of the dK/dV launch, as
    `BackwardLaunches` makes it: what `compile_sm90` takes. delta as the dQ pass leaves it.
    Packed sequences: the (1, heads, total, D) views, cu_q and cu_k their offsets."""
    seqs = None if cu_q is None else cu_q.numel() - 1
    plan = BackwardLaunches(q, k, scale, score, seqs, q.stride(), dk.stride())
    return _launch_args(plan.dkdv, plan.dkdv_head(do, q, k, v, lse, delta, dk, dv, cu_q, cu_k))


def dq_launch_args(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                   dq: torch.Tensor, lse: torch.Tensor, delta: torch.Tensor, dlse: torch.Tensor | None,
                   scale: float, score: Score = Score(), cu_q: torch.Tensor | None = None,
                   cu_k: torch.Tensor | None = None) -> tuple[tuple, tuple, dict]:
    """(grid, positional args, keyword args with num_warps) of the dQ launch, as
    `BackwardLaunches` makes it: what `compile_sm90` takes. It writes delta (from do and o,
    less dlse where given) for the dK/dV pass. Packed sequences as `dkdv_launch_args`."""
    seqs = None if cu_q is None else cu_q.numel() - 1
    plan = BackwardLaunches(q, k, scale, score, seqs, dq.stride(), k.stride())
    return _launch_args(plan.dq[dlse is not None],
                        plan.heads(do, q, k, v, o, lse, delta, dlse, dq, k, v, cu_q, cu_k)[0])


def refusal(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
            lse: torch.Tensor, score: Score = Score(), scale: float | None = None) -> str | None:
    """Why `BackwardLaunches` cannot take these inputs (already validated by the Triton
    launcher's checks), or None where it can: the forward's conditions (`attention_fwd.refusal`:
    a Hopper GPU, float16/bfloat16, q, k, v that TMA can read in place) with head dim 64 or
    128 (both passes) or 256 (the dK/dV pass, the Triton dQ pass beside it), and do and o that
    TMA can read too (lse is made contiguous). Nothing here launches or synchronises."""
    from ..attention_fwd import refusal as forward_refusal

    if not isinstance(do, torch.Tensor) or not isinstance(q, torch.Tensor) or q.dim() != 4:
        return "do and q must be 4-d tensors"
    if q.shape[-1] not in DKDV_HEAD_DIMS:
        return f"head dim {q.shape[-1]}: the Gluon backward has kernels for {', '.join(map(str, DKDV_HEAD_DIMS))}"
    if do.shape != q.shape or do.dtype != q.dtype:
        return "do must have q's shape and dtype"
    return forward_refusal(q, k, v, score, scale) or tma_refusal(do=do, o=o)


def supported(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
              lse: torch.Tensor, score: Score = Score(), scale: float | None = None) -> bool:
    """Whether `BackwardLaunches` takes these inputs (see `refusal`)."""
    return refusal(do, q, k, v, o, lse, score, scale) is None
