"""Fused scaled-dot-product attention, forward and backward (FlashAttention-2 style).

o[b, h, i] = sum_j softmax_j(scale * q[b, h, i] . k[b, hk, j]) v[b, hk, j],  hk = h // (H // Hkv)

with, when causal, query i seeing keys j <= i (top-left aligned, as SDPA's is_causal=True).
No N x N matrix is ever stored: the forward streams key blocks through an online softmax and
keeps, per query row, the log-sum-exp lse_i = log sum_j exp(s_ij); the backward recomputes
p_ij = exp(s_ij - lse_i) tile by tile, deterministically (no atomics).

The package, one concept a module:
- mask: which key blocks a query block visits, which query blocks a key block is seen by,
  and the per-element mask, shared by the three passes;
- loads: tile loads through pointers or tensor descriptors (TMA);
- forward, backward: the @triton.jit kernels;
- configs: tile configs, autotune spaces and pruners;
- launch: checks, descriptors, launchers (`attention_fwd`, `attention_bwd`);
- this module: the op's declaration to tritonkit's scaffold, the public function and the
  float64 reference.
What was tried and measured (atomic dQ, a rotated key loop, warp specialization, tile sweeps)
is in notes/attention*.md.
"""

import math

import torch

from ..._op import Op
from .configs import (TileConfig, _attn_bwd_dkdv_tuned, _attn_bwd_dq_tuned, _attn_fwd_tuned, _prune_dkdv,
                      _prune_dq, _prune_fwd, _row_keys, autotune_configs, fixed_configs)
from .backward import _attn_bwd_dkdv_kernel, _attn_bwd_dq_kernel
from .forward import _attn_fwd_kernel
from .launch import (_attention_bwd_checked, _block_d, _check_qkv, _descriptor, _empty_like_order,
                     _fit_descriptors, _fit_dkdv_descriptors, _fit_dq_descriptors, _has_tma, _head_dim_innermost,
                     _resolve_scale, _tma_ok, attention_bwd, attention_fwd)

__all__ = ["attention", "attention_reference", "attention_fwd", "attention_bwd", "TileConfig",
           "fixed_configs", "autotune_configs"]


# ---------------------------------------------------------------------------------------
# The op's declaration: custom ops for torch.compile, fake (meta) and autograd registrations
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
