"""transformers' rotary functions through tritonkit.rope, one replacement for each form a family uses.

transformers calls these as module-level functions of the family's modeling module, so they
are replaced family-wide (`_patch._patch_rope`); each computes the same function of its inputs,
in float32 with one rounding (transformers' multiplies and adds in the activations' dtype where
cos and sin are in it, or in float32 where they are, as OLMo 2/3's), and hands any call it does
not recognise (another signature, float64) to transformers' own.
"""

from __future__ import annotations

import functools

import torch

import tritonkit

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _takes(*tensors) -> bool:
    return all(isinstance(t, torch.Tensor) and t.dtype in _DTYPES for t in tensors)


def _marked(function, original):
    function._tritonkit_original = original
    return function


def _unsqueeze_dim(args, kwargs, at: int = 0, keywords=("unsqueeze_dim",)):
    """The call's unsqueeze_dim (positional at `at`, else the keyword, else transformers' default
    1), or None where the call passes more than the form's signature (another signature)."""
    if len(args) > at + 1 or set(kwargs) - set(keywords):
        return None
    return args[at] if len(args) > at else kwargs.get("unsqueeze_dim", 1)


def _both_halves(c: torch.Tensor) -> torch.Tensor:
    """cos or sin of each frequency once, repeated over both halves of a head: rotate_half's
    layout, which tritonkit.rope takes."""
    return torch.cat((c, c), -1)


def pair(original):
    """`apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`: q (B, H, N, D), k (B, Hkv, N, D),
    cos and sin (B, N, R) with R = D (or less: partial rotary, Phi-3)."""
    @functools.wraps(original)
    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):
        if _unsqueeze_dim(args, kwargs) != 1 or not _takes(q, k, cos, sin) or q.dtype != k.dtype:
            # Family-wide: another model of the family (float64, say; or q and k of two dtypes,
            # which tritonkit.rope does not take) keeps transformers' function.
            return original(q, k, cos, sin, *args, **kwargs)
        return tritonkit.rope(q, k, cos.unsqueeze(1), sin.unsqueeze(1))
    return _marked(apply_rotary_pos_emb, original)


def half_cos(original):
    """gpt-oss's `apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`: cos and sin hold each
    frequency once (B, N, D/2); the first half of each head rotates with the second as
    rotate_half's does, so tritonkit.rope takes them repeated over both halves."""
    @functools.wraps(original)
    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):
        if _unsqueeze_dim(args, kwargs) != 1 or not _takes(q, k, cos, sin) or q.dtype != k.dtype \
                or 2 * cos.shape[-1] != q.shape[-1]:
            return original(q, k, cos, sin, *args, **kwargs)
        cos, sin = _both_halves(cos), _both_halves(sin)
        return tritonkit.rope(q, k, cos.unsqueeze(1), sin.unsqueeze(1))
    return _marked(apply_rotary_pos_emb, original)


def one(original):
    """Gemma 4's `apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=1)` of one tensor: x (B, H, N, D)
    with unsqueeze_dim=1 or (B, N, H, D) with 2, cos and sin (B, N, D). tritonkit.rope rotates a
    pair: the second is one head of x, whose result is dropped (1/H more work, no copy of x)."""
    @functools.wraps(original)
    def apply_rotary_pos_emb(x, cos, sin, *args, **kwargs):
        unsqueeze_dim = _unsqueeze_dim(args, kwargs)
        if unsqueeze_dim not in (1, 2) or not _takes(x, cos, sin) or x.dim() != 4 or cos.dim() != 3 \
                or x.shape[1] == 0:
            return original(x, cos, sin, *args, **kwargs)
        heads_first = x if unsqueeze_dim == 1 else x.transpose(1, 2)
        out, _ = tritonkit.rope(heads_first, heads_first[:, :1], cos.unsqueeze(1), sin.unsqueeze(1))
        return out if unsqueeze_dim == 1 else out.transpose(1, 2)
    return _marked(apply_rotary_pos_emb, original)


def _deinterleave(x: torch.Tensor) -> torch.Tensor:
    return torch.cat((x[..., 0::2], x[..., 1::2]), -1)


def interleaved(original):
    """DeepSeek-V3's `apply_rotary_pos_emb_interleave(q, k, cos, sin, position_ids=None,
    unsqueeze_dim=1)`: pairs (x[2i], x[2i+1]) rotate by frequency i and come out de-interleaved,
    [x_even * c - x_odd * s, x_odd * c + x_even * s] with c = cos[..., :R/2]: rotate_half's
    rotation of the de-interleaved input. One copy of q and k's rotary parts to de-interleave them
    (transformers' makes two)."""
    @functools.wraps(original)
    def apply_rotary_pos_emb_interleave(q, k, cos, sin, *args, **kwargs):
        if _unsqueeze_dim(args, kwargs, at=1, keywords=("unsqueeze_dim", "position_ids")) != 1 \
                or not _takes(q, k, cos, sin) or q.dtype != k.dtype or cos.shape[-1] != q.shape[-1]:
            return original(q, k, cos, sin, *args, **kwargs)
        half = cos.shape[-1] // 2
        cos, sin = _both_halves(cos[..., :half]), _both_halves(sin[..., :half])
        return tritonkit.rope(_deinterleave(q), _deinterleave(k), cos.unsqueeze(1), sin.unsqueeze(1))
    return _marked(apply_rotary_pos_emb_interleave, original)


# Family.rope -> {the modeling module's function name: its replacement's factory}
FORMS = {
    "pair": {"apply_rotary_pos_emb": pair},
    "half_cos": {"apply_rotary_pos_emb": half_cos},
    "one": {"apply_rotary_pos_emb": one},
    "pair_and_interleaved": {"apply_rotary_pos_emb": pair, "apply_rotary_pos_emb_interleave": interleaved},
}
