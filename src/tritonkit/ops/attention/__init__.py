"""Fused scaled-dot-product attention, forward and backward (FlashAttention-2 style), for dense
batches and packed variable-length sequences, with causal and sliding-window masks, a logit
softcap and a differentiable log-sum-exp.

o[b, h, i] = sum_j softmax_j(s_ij) v[b, hk, j],  s_ij = scale * q[b, h, i] . k[b, hk, j]
(or c tanh(s_ij / c) with a softcap), hk = h // (H // Hkv), over the keys j that query i sees.
No N x N matrix is ever stored: the forward streams key blocks through an online softmax and
keeps, per query row, the log-sum-exp lse_i = log sum_j exp(s_ij); the backward recomputes
p_ij = exp(s_ij - lse_i) tile by tile, deterministically (no atomics). docs/attention.md
says how to use it.

The package, one concept a module:
- mask: which key blocks a query block visits, which query blocks see a key block, the
  per-element mask and where a program's tile lies in packed sequences, shared by the passes;
- score: what happens to a score (the one description every pass and backend is compiled for);
  triton_score: its Triton helpers (the softcap's tanh); loads: tile loads through pointers or tensor descriptors (TMA);
- forward, backward: the @triton.jit kernels;
- configs: tile configs, autotune spaces and pruners; order: the order a causal pass hands out
  its tiles (head after head, or longest first in spans of heads), for both kernel families;
- checks, descriptors: input checks and layouts, TMA descriptors;
- plans, launch: the launch plan of each call layout (checks, choices, tiles, grids, made
  once), and the launchers, which find their call's plan and run it;
- reference: the float64 references;
- this module: the ops' declarations to tritonkit's scaffold and the public functions.
What was tried and measured (atomic dQ, a rotated key loop, warp specialization, tile sweeps)
is in notes/attention*.md.
"""

import torch

from ..._autocast import autocast_inputs
from ..._op import Op, not_computed
from .backward import _attn_bwd_dkdv_kernel, _attn_bwd_dq_kernel
from .checks import (_alibi_arg, _alignment_arg, _check_max_seqlen, _check_qkv, _check_score_tensors, _check_varlen,
                     _empty_like_order, _flag_arg, _head_dim_innermost, _resolve_scale, _softcap_arg, _window_arg)
from .configs import (TileConfig, _attn_bwd_dkdv_tuned, _attn_bwd_dq_tuned, _attn_fwd_tuned, _prune_dkdv,
                      _prune_dq, _prune_fwd, _row_keys, autotune_configs, fixed_configs)
from .descriptors import (_descriptor, _descriptor_maker, _fit_descriptors, _fit_dkdv_descriptors,
                          _fit_dq_descriptors, _has_tma, _tma_ok)
from .forward import _attn_fwd_kernel
from .head import HeadTiles, _block_d, head_tiles
from .launch import attention_bwd, attention_fwd, attention_fwd_eager, attention_varlen_bwd, attention_varlen_fwd
from .reference import attention_reference, attention_varlen_reference
from .score import score_of
from . import sharding

__all__ = ["attention", "attention_varlen", "attention_reference", "attention_varlen_reference",
           "attention_fwd", "attention_bwd", "attention_varlen_fwd", "attention_varlen_bwd", "TileConfig",
           "fixed_configs", "autotune_configs"]


# ---------------------------------------------------------------------------------------
# The ops' declarations: custom ops for torch.compile, fake (meta) and autograd registrations
# ---------------------------------------------------------------------------------------

def _context_saver(n_tensors: int):
    """The ops' setup_context, for ops whose first n_tensors arguments are tensors (q, k, v,
    and for packed sequences cu_seqlens_q and cu_seqlens_k), then the score's flags (causal,
    scale, window, softcap, alignment), which go along as they came, and last its tensors
    (alibi_slopes, sinks: None or tensors). Gradients are not materialized: a None dlse (lse
    unused) skips its term, a None do (only lse used) stands for zeros. The dense op's eager
    forward gives a third output, the backward launcher of its plan (`attention_fwd_eager`);
    other roads' backwards take the op's backward launcher."""
    def setup_context(ctx, inputs, output):
        # The schema's defaults for the trailing arguments a call may leave out.
        *flags, alibi, sinks = (*inputs[n_tensors:], *_SCORE_DEFAULTS[len(inputs) - n_tensors:])
        ctx.save_for_backward(*inputs[:n_tensors], output[0], output[1], alibi, sinks)
        ctx.flags = tuple(flags)
        ctx.launcher = output[2] if len(output) > 2 else None
        ctx.set_materialize_grads(False)
    return setup_context


def _backward(bwd, ctx, do, dlse):
    *inputs, o, lse, alibi, sinks = ctx.saved_tensors
    if do is None:
        do = torch.zeros_like(o)
    *flags, bottom_right = ctx.flags
    dq, dk, dv, dsinks = (ctx.launcher or bwd)(do, *inputs[:3], o, lse, *inputs[3:], *flags, dlse, bottom_right,
                                               alibi, sinks)
    # none for cu_seqlens, the flags and alibi_slopes
    return dq, dk, dv, *(None,) * (len(inputs) - 3 + len(ctx.flags) + 1), None if sinks is None else dsinks


def _grads_of(grads: tuple) -> tuple:
    """A backward launcher's gradients as the custom op's four outputs: d(sinks) a 0-element
    placeholder where there are no sinks (a custom op's outputs are fixed)."""
    return grads if len(grads) == 4 else (*grads, not_computed(grads[0]))


def _attention_bwd_op(*args):
    return _grads_of(attention_bwd(*args))


def _varlen_bwd_op(*args):
    return _grads_of(attention_varlen_bwd(*args))


def _attention_fwd_fake(q, k, v, causal, scale, window_left=-1, window_right=-1, softcap=0.0, bottom_right=False,
                        alibi_slopes=None, sinks=None):
    B, H, Nq, _ = q.shape
    return _empty_like_order(q, (B, H, Nq, v.shape[-1]), q.dtype), q.new_empty((B, H, Nq), dtype=torch.float32)


def _attention_bwd_fake(do, q, k, v, o, lse, causal, scale, window_left=-1, window_right=-1, softcap=0.0,
                        dlse=None, bottom_right=False, alibi_slopes=None, sinks=None):
    return (_empty_like_order(q, tuple(q.shape), q.dtype), _empty_like_order(k, tuple(k.shape), k.dtype),
            _empty_like_order(v, tuple(v.shape), v.dtype), q.new_empty((0,)) if sinks is None else torch.empty_like(sinks))


def _check_score(score_args, alibi_slopes, sinks, Nq, Nk, batch, heads, device):
    """The custom-op road's validation of the score's arguments (the launchers' plans validate
    them on the other roads)."""
    causal, scale, window_left, window_right, softcap, bottom_right = score_args
    alibi = _check_score_tensors(alibi_slopes, sinks, batch, heads, device)
    score_of(causal, window_left, window_right, softcap, Nq, Nk, bottom_right=bottom_right, alibi=alibi,
             sinks=sinks is not None)


def _attention_check(q, k, v, causal, scale, window_left=-1, window_right=-1, softcap=0.0, bottom_right=False,
                     alibi_slopes=None, sinks=None):
    B, H, Nq, D, Hkv, Nk, _ = _check_qkv(q, k, v)
    _check_score((causal, scale, window_left, window_right, softcap, bottom_right), alibi_slopes, sinks, Nq, Nk,
                 B, H, q.device)
    return (q, k, v, bool(causal), _resolve_scale(scale, D), window_left, window_right, float(softcap), bottom_right,
            alibi_slopes, sinks)


_FLAGS_SCHEMA = ("bool causal, float scale, int window_left=-1, int window_right=-1, float softcap=0.0")
# The defaults of the score's arguments after q, k, v (and cu_seqlens), as the schemas give them.
_SCORE_DEFAULTS = (False, None, -1, -1, 0.0, False, None, None)
_SCORE_SCHEMA = "bool bottom_right=False, Tensor? alibi_slopes=None, Tensor? sinks=None"

_ATTENTION = Op(
    "attention", forward=attention_fwd,
    forward_schema=f"(Tensor q, Tensor k, Tensor v, {_FLAGS_SCHEMA}, {_SCORE_SCHEMA}) -> (Tensor, Tensor)",
    forward_fake=_attention_fwd_fake, setup_context=_context_saver(3), backward=_backward,
    backward_launcher=_attention_bwd_op,
    backward_schema=(f"(Tensor do, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, {_FLAGS_SCHEMA}, "
                     f"Tensor? dlse=None, {_SCORE_SCHEMA}) -> (Tensor, Tensor, Tensor, Tensor)"),
    backward_fake=_attention_bwd_fake, check=_attention_check, returns=lambda *args: 2,
    eager_forward=attention_fwd_eager, forward_sharding=sharding.attention_fwd_sharding,
    backward_sharding=sharding.attention_bwd_sharding)


def _varlen_fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, window_left=-1, window_right=-1,
                     softcap=0.0, bottom_right=False, alibi_slopes=None, sinks=None):
    Tq, H, _ = q.shape
    return q.new_empty((Tq, H, v.shape[-1])), q.new_empty((H, Tq), dtype=torch.float32)


def _varlen_bwd_fake(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, causal, scale, window_left=-1,
                     window_right=-1, softcap=0.0, dlse=None, bottom_right=False, alibi_slopes=None, sinks=None):
    return (*(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v)),
            q.new_empty((0,)) if sinks is None else torch.empty_like(sinks))


def _varlen_check(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, window_left=-1, window_right=-1,
                  softcap=0.0, bottom_right=False, alibi_slopes=None, sinks=None):
    Tq, H, D, Tk, Hkv, S, _ = _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k)
    _check_score((causal, scale, window_left, window_right, softcap, bottom_right), alibi_slopes, sinks, Tq, Tk,
                 S, H, q.device)
    return (q, k, v, cu_seqlens_q, cu_seqlens_k, bool(causal), _resolve_scale(scale, D), window_left,
            window_right, float(softcap), bottom_right, alibi_slopes, sinks)


_ATTENTION_VARLEN = Op(
    "attention_varlen", forward=attention_varlen_fwd,
    forward_schema=(f"(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, {_FLAGS_SCHEMA}, "
                    f"{_SCORE_SCHEMA}) -> (Tensor, Tensor)"),
    forward_fake=_varlen_fwd_fake, setup_context=_context_saver(5), backward=_backward,
    backward_launcher=_varlen_bwd_op,
    backward_schema=("(Tensor do, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor cu_seqlens_q, "
                     f"Tensor cu_seqlens_k, {_FLAGS_SCHEMA}, Tensor? dlse=None, {_SCORE_SCHEMA}) "
                     "-> (Tensor, Tensor, Tensor, Tensor)"),
    backward_fake=_varlen_bwd_fake, check=_varlen_check, forward_sharding=sharding.attention_varlen_fwd_sharding,
    backward_sharding=sharding.attention_varlen_bwd_sharding)


# ---------------------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------------------

def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              scale: float | None = None, window: tuple[int, int] | None = None,
              softcap: float | None = None, causal_alignment: str = "top_left",
              alibi_slopes: torch.Tensor | None = None, sinks: torch.Tensor | None = None,
              return_lse: bool = False):
    """Scaled dot-product attention, fused: softmax(scale * q k^T, masked) v.

    Same result as ``torch.nn.functional.scaled_dot_product_attention(q, k, v,
    is_causal=causal, scale=scale, enable_gqa=True)`` where both apply; differentiable in q,
    k and v (and sinks, and through the returned lse).

    q: (B, H, Nq, D); k: (B, Hkv, Nk, D); v: (B, Hkv, Nk, Dv), with H a multiple of Hkv
    (grouped-query and multi-query attention: query head h reads kv head h // (H // Hkv)). Nq
    and Nk may differ, and either may be 0 (no keys: every row sees none, as below). D and Dv:
    any from 1 to 512, Dv usually D (DeepSeek-V3's MLA: D = 192, Dv = 128). float16 or
    bfloat16, all three the same; the output is (B, H, Nq, Dv) in q's dtype. Any strides, e.g.
    views into a packed (B, N, 3, H, D) projection at any element offset.

    causal: query i sees keys j <= i. window=(left, right): query i sees keys
    i - left <= j <= i + right; -1 leaves a side unbounded; with causal, (w, 0) is the usual
    sliding-window decoder layer. causal_alignment: where those bounds sit when Nq != Nk:
    "top_left" (the default, as SDPA's is_causal=True: query i at key i) or "bottom_right" (as
    FlashAttention-2 and a KV cache: query i at key i + Nk - Nq, so the last query sees every
    key; rows with i + Nk - Nq < 0 under causal see no key). softcap=c: scores become
    c * tanh(s / c) before the softmax (Gemma 2). alibi_slopes: (H,) or (B, H) float slopes;
    -slope * |i' - j| is added to each scaled (and softcapped) score, i' the query's position
    under the alignment (FlashAttention-2's ALiBi; not differentiated). sinks: (H,) float
    logits, one a query head, each joining its rows' softmax denominator as a key with no value
    (gpt-oss's learnable sinks; differentiable). scale: defaults to 1 / sqrt(D), D q's head
    dim. return_lse: return (out, lse), lse (B, H, Nq) float32, the natural-log sum of exp of
    each row's visible scores (and its sink), differentiable (so partial attentions over parts
    of the keys can be merged exactly and trained through).

    Inside a torch.autocast region q, k and v are cast to its dtype first, as SDPA's are.

    A row that sees no key (a window that leaves it none, an empty k) gets output 0, lse
    -inf (with sinks: the sink) and zero gradients, never NaN. Key blocks that no query of a
    tile sees are never loaded.

    Raises TypeError for non-tensors, dtypes other than float16/bfloat16 or mixed dtypes, a
    causal, window, softcap, causal_alignment, alibi_slopes, sinks or return_lse of the wrong
    type, and ValueError for wrong ranks, mismatched batch, head counts that do not divide,
    q's and k's head dims unequal, D or Dv outside 1..512, tensors on different devices, window sides below -1, a
    softcap that is not positive and finite, an unknown alignment, slopes or sinks of the wrong
    shape. Memory: O(B * H * N) beyond inputs and output; the backward is deterministic.
    """
    window_left, window_right = _window_arg(window)
    q, k, v = autocast_inputs(q, k, v)
    # The launchers validate q, k, v and scale on the eager roads (scale=None means 1/sqrt(D)).
    o, lse = _ATTENTION(q, k, v, _flag_arg("causal", causal), scale, window_left, window_right, _softcap_arg(softcap),
                        _alignment_arg(causal_alignment), _alibi_arg(alibi_slopes), sinks)
    return (o, lse) if _flag_arg("return_lse", return_lse) else o


def attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor, max_seqlen_q: int | torch.Tensor, max_seqlen_k: int | torch.Tensor,
                     *, causal: bool = False, scale: float | None = None, window: tuple[int, int] | None = None,
                     softcap: float | None = None, causal_alignment: str = "top_left",
                     alibi_slopes: torch.Tensor | None = None, sinks: torch.Tensor | None = None,
                     return_lse: bool = False):
    """Attention over packed variable-length sequences, as FlashAttention-2's
    ``flash_attn_varlen_func``: sequence s is rows cu_seqlens_q[s]:cu_seqlens_q[s + 1] of q
    and rows cu_seqlens_k[s]:cu_seqlens_k[s + 1] of k and v, and sees nothing of the others.

    q: (total_q, H, D); k: (total_k, Hkv, D); v: (total_k, Hkv, Dv); dtypes, head counts, D
    and Dv as `attention`, any strides. cu_seqlens_q, cu_seqlens_k: int32, (batch + 1,), starting at 0
    and never decreasing, the last entry the total (checked where the tensors are on the CPU;
    on a GPU checking would stall every call, and bad values give wrong results but never
    out-of-bounds accesses). Sequences may be empty. max_seqlen_q, max_seqlen_k: Python ints
    or 0-d integer tensors, accepted for FlashAttention-2 compatibility: the kernels find each
    sequence's blocks from cu_seqlens alone, so nothing is read from them, and a new batch of
    new lengths runs the same compiled graph under torch.compile.

    causal, window, softcap, scale, causal_alignment, sinks: as `attention`, with positions
    counted within each sequence (FlashAttention-2 aligns bottom-right: pass
    causal_alignment="bottom_right", or use `tritonkit.flash_attn`). alibi_slopes: (H,) or
    (batch, H), batch the number of sequences. Returns o (total_q, H, Dv), and with return_lse
    also lse (H, total_q) float32, differentiable. Rows that see no key (an empty key sequence,
    a window) get 0 and lse -inf (with sinks: the sink).
    """
    _check_max_seqlen("max_seqlen_q", max_seqlen_q)
    _check_max_seqlen("max_seqlen_k", max_seqlen_k)
    window_left, window_right = _window_arg(window)
    q, k, v = autocast_inputs(q, k, v)
    o, lse = _ATTENTION_VARLEN(q, k, v, cu_seqlens_q, cu_seqlens_k, _flag_arg("causal", causal), scale, window_left,
                               window_right, _softcap_arg(softcap), _alignment_arg(causal_alignment),
                               _alibi_arg(alibi_slopes), sinks)
    return (o, lse) if _flag_arg("return_lse", return_lse) else o
