"""FlashAttention-2's functions (flash_attn.flash_attn_interface), computed by `tritonkit.attention`
and `tritonkit.attention_varlen`.

FlashAttention-2 keeps q, k, v as (batch, seqlen, nheads, headdim) and packed sequences as
(total, nheads, headdim); tritonkit's dense kernels take (batch, nheads, seqlen, headdim) with
any strides, so each tensor goes in as a transposed view and the output comes back as one (in
FlashAttention-2's memory order: tritonkit's output follows q's). Packed qkv and kv go in as
views too (`unbind`), and their gradients come back as one tensor. Masks and ALiBi's distances
are aligned bottom-right, as FlashAttention-2 aligns them, and the window follows its rules
(`arguments.fa2_window`).
"""

from __future__ import annotations

import torch

from ..ops.attention import attention, attention_varlen
from .._checks import check_bool
from .arguments import (check_no_dropout, check_options, check_packed, check_rank, fa2_lse, fa2_softcap,
                        fa2_window, no_probs)

DENSE = "(batch, seqlen, nheads, headdim)"
PACKED = "(total_tokens, nheads, headdim)"


def _dense(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
           return_attn_probs):
    check_no_dropout(dropout_p)
    probs = check_options(deterministic, return_attn_probs)
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_rank(name, t, 4, DENSE)
    window = fa2_window(window_size, check_bool("causal", causal), k.shape[1])
    out, lse = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal,
                         scale=softmax_scale, window=window, softcap=fa2_softcap(softcap),
                         causal_alignment="bottom_right", alibi_slopes=alibi_slopes, return_lse=True)
    out = out.transpose(1, 2)
    return (out, fa2_lse(lse), no_probs(q)) if probs else out


def _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
            window_size, softcap, alibi_slopes, deterministic, return_attn_probs):
    check_no_dropout(dropout_p)
    probs = check_options(deterministic, return_attn_probs)
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_rank(name, t, 3, PACKED)
    window = fa2_window(window_size, check_bool("causal", causal), max_seqlen_k)
    out, lse = attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=causal,
                                scale=softmax_scale, window=window, softcap=fa2_softcap(softcap),
                                causal_alignment="bottom_right", alibi_slopes=alibi_slopes, return_lse=True)
    return (out, fa2_lse(lse), no_probs(q)) if probs else out


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """FlashAttention-2's flash_attn_func: attention of q over k, v, differentiable in q, k, v.

    q: (batch, seqlen_q, nheads, headdim); k: (batch, seqlen_k, nheads_k, headdim); v: (batch,
    seqlen_k, nheads_k, headdim_v), nheads a multiple of nheads_k (GQA/MQA: query head h reads
    kv head h // (nheads // nheads_k)); float16 or bfloat16; any strides (views are read in place).
    headdim and headdim_v: 1 to 512 (FlashAttention-2: up to 256, equal). Returns out (batch,
    seqlen_q, nheads, headdim_v).

    dropout_p: 0.0 only. softmax_scale: default 1 / sqrt(headdim). causal: query i sees keys j <=
    i + seqlen_k - seqlen_q (aligned bottom-right). window_size=(left, right): query i sees keys
    from i + seqlen_k - seqlen_q - left to i + seqlen_k - seqlen_q + right, -1 unbounded, with
    FlashAttention-2's rules (`arguments.fa2_window`). softcap: c > 0 caps scores to c tanh(s / c);
    0.0 is off. alibi_slopes: float32 (nheads,) or (batch, nheads); -slope |i + seqlen_k -
    seqlen_q - j| is added to each scaled score (not differentiated). deterministic: accepted; the
    backward is always deterministic. return_attn_probs: return (out, softmax_lse, S_dmask):
    softmax_lse (batch, nheads, seqlen_q) float32 (+inf on rows that see no key, whose output is
    0), differentiable; S_dmask an empty tensor (it holds probabilities only under dropout).

    Raises NotImplementedError for dropout_p != 0; TypeError / ValueError naming the argument for
    wrong types and shapes (`tritonkit.attention` lists them).
    """
    return _dense(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                  return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """FlashAttention-2's flash_attn_kvpacked_func: `flash_attn_func` with k and v packed in kv
    (batch, seqlen_k, 2, nheads_k, headdim), read in place; kv's gradient is one tensor."""
    k, v = check_packed("kv", kv, 5, 2, 2, "(batch, seqlen_k, 2, nheads_k, headdim)")
    return _dense(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                  return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """FlashAttention-2's flash_attn_qkvpacked_func: `flash_attn_func` with q, k and v packed in
    qkv (batch, seqlen, 3, nheads, headdim), read in place; qkv's gradient is one tensor."""
    q, k, v = check_packed("qkv", qkv, 5, 2, 3, "(batch, seqlen, 3, nheads, headdim)")
    return _dense(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                  return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """FlashAttention-2's flash_attn_varlen_func: attention over packed variable-length sequences.

    q: (total_q, nheads, headdim); k: (total_k, nheads_k, headdim); v: (total_k, nheads_k,
    headdim_v); sequence s is rows cu_seqlens_q[s]:cu_seqlens_q[s + 1] of q and
    cu_seqlens_k[s]:cu_seqlens_k[s + 1] of k and v (int32, batch + 1 entries; sequences may be
    empty). max_seqlen_q, max_seqlen_k: ints (or 0-d integer tensors); the kernels do not need
    them, but the window rules read max_seqlen_k as FlashAttention-2 does. Options as
    `flash_attn_func`, positions counted within each sequence; alibi_slopes (nheads,) or (batch,
    nheads). Returns out (total_q, nheads, headdim_v), and with return_attn_probs (out,
    softmax_lse (nheads, total_q) float32, an empty S_dmask).

    block_table (a paged KV cache) raises NotImplementedError, as does dropout_p != 0.
    """
    if block_table is not None:
        raise NotImplementedError("block_table: tritonkit.flash_attn has no paged KV cache; pass k and v as "
                                  "packed (total_k, nheads_k, headdim) tensors")
    return _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                   causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """FlashAttention-2's flash_attn_varlen_kvpacked_func: `flash_attn_varlen_func` with k and v
    packed in kv (total_k, 2, nheads_k, headdim), read in place."""
    k, v = check_packed("kv", kv, 4, 1, 2, "(total_k, 2, nheads_k, headdim)")
    return _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                   causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """FlashAttention-2's flash_attn_varlen_qkvpacked_func: `flash_attn_varlen_func` with q, k and
    v packed in qkv (total, 3, nheads, headdim), read in place, and one cu_seqlens and max_seqlen
    for queries and keys."""
    q, k, v = check_packed("qkv", qkv, 4, 1, 3, "(total, 3, nheads, headdim)")
    return _varlen(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p, softmax_scale, causal,
                   window_size, softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    """FlashAttention-2's KV-cache API (appending to the cache in place, rotary embedding, paged
    and per-sequence cache lengths) is not part of tritonkit: it raises NotImplementedError. For
    decoding over a filled cache, `tritonkit.attention(q, k, v, causal=True,
    causal_alignment="bottom_right")` over the cache's filled part (or `flash_attn_func` on it)
    computes the attention."""
    raise NotImplementedError("flash_attn_with_kvcache: tritonkit.flash_attn has no KV-cache API; attend over "
                              "the cache's filled part with flash_attn_func (or tritonkit.attention with "
                              "causal_alignment='bottom_right')")
