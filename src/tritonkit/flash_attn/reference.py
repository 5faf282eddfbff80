"""Float64 references of the FlashAttention-2 interface: tritonkit's attention references in
FlashAttention-2's layouts, with what this interface adds to them: its window rules
(`arguments.fa2_window`), bottom-right alignment and +inf lse on rows that see no key."""

from __future__ import annotations

import torch

from ..ops.attention.reference import attention_reference, attention_varlen_reference
from .arguments import fa2_lse, fa2_softcap, fa2_window


def flash_attn_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float | None = None,
                         causal: bool = False, window_size=(-1, -1), softcap: float = 0.0,
                         alibi_slopes: torch.Tensor | None = None, upcast: bool = True):
    """`flash_attn_func`'s result in float64 (upcast) or the inputs' dtype: q (batch, seqlen_q,
    nheads, headdim), k and v (batch, seqlen_k, nheads_k, ...); returns (out (batch, seqlen_q,
    nheads, headdim_v), softmax_lse (batch, nheads, seqlen_q)). Differentiable in q, k, v."""
    window = fa2_window(window_size, causal, k.shape[1])
    out, lse = attention_reference(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal, softmax_scale,
                                   upcast, window=window, softcap=fa2_softcap(softcap),
                                   causal_alignment="bottom_right", alibi_slopes=alibi_slopes, return_lse=True)
    return out.transpose(1, 2), fa2_lse(lse)


def flash_attn_varlen_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                cu_seqlens_k: torch.Tensor, max_seqlen_k: int, softmax_scale: float | None = None,
                                causal: bool = False, window_size=(-1, -1), softcap: float = 0.0,
                                alibi_slopes: torch.Tensor | None = None, upcast: bool = True):
    """`flash_attn_varlen_func`'s result in float64 (upcast): q (total_q, nheads, headdim), k and
    v (total_k, nheads_k, ...); returns (out (total_q, nheads, headdim_v), softmax_lse (nheads,
    total_q))."""
    window = fa2_window(window_size, causal, max_seqlen_k)
    out, lse = attention_varlen_reference(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, softmax_scale, upcast,
                                          window=window, softcap=fa2_softcap(softcap),
                                          causal_alignment="bottom_right", alibi_slopes=alibi_slopes,
                                          return_lse=True)
    return out, fa2_lse(lse)
