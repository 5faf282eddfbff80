"""tritonkit attention behind transformers' attention-function registry.

`attn_implementation="tritonkit"` selects two functions registered here:

- the mask function (`_masks.tritonkit_mask`), called once a forward for each kind of layer,
  describes the mask in the form the kernels take instead of building an (N x N) tensor (None,
  a 2D padding mask, `Packed` rows, `Cached` for queries that are not the last keys of a static
  cache's buffer), or gives transformers' own 4D bool mask for patterns the kernels do not take;
- the attention function, called by every attention layer with HF's (B, H, N, D) query and
  (B, Hkv, Nk, D) key/value, maps that description onto `tritonkit.attention` (dense rows) or
  `tritonkit.attention_varlen` (padding removed, or packed sequences), and falls back to SDPA for
  the call when the kernels cannot express it exactly (dtype, dropout, an arbitrary mask, an
  alignment or feature the kernels lack). The fallback builds the exact mask transformers would,
  and warns once a model and reason (`AttentionFallbackWarning`).

Alignment: transformers aligns a query block to the end of the keys (a cache holds earlier
tokens), tritonkit's `causal_alignment="bottom_right"`, in each packed sequence too. Equal lengths
keep the default (top-left, the same there), and a single query runs without a mask over the keys
its window keeps: those are the calls Hopper's Gluon kernels take. More queries than keys (the
first rows see no key) run SDPA. A static cache's keys past the queries are unfilled slots: they
are sliced off first, which leaves the queries the last keys.
"""

from __future__ import annotations

import warnings
import weakref

import torch
import torch.nn.functional as F

import tritonkit
from .._autocast import dtype_in_op
from ._masks import Cached, Packed, dense_mask, host_values, tritonkit_mask

NAME = "tritonkit"

_KERNEL_DTYPES = (torch.float16, torch.bfloat16)


class AttentionFallbackWarning(UserWarning):
    """A model's attention ran SDPA instead of tritonkit's kernels (warned once a model and reason)."""


# ---------------------------------------------------------------- attention function

# id(model config) -> the fallback reasons warned for that model. Every attention layer of a model
# holds the model's one config; an entry goes with its config.
_WARNED: dict[int, set[str]] = {}


def _warn_fallback(module: torch.nn.Module, reason: str) -> None:
    """Warn the first time a model's attention runs SDPA for `reason` (a reason without sizes)."""
    if torch.compiler.is_compiling():
        return  # warnings.warn breaks a graph; the model's eager calls warn
    owner = getattr(module, "config", module)
    seen = _WARNED.get(id(owner))
    if seen is None:
        seen = _WARNED[id(owner)] = set()
        weakref.finalize(owner, _WARNED.pop, id(owner), None)
    if reason not in seen:
        seen.add(reason)
        warnings.warn(f"tritonkit attention ({type(module).__name__}): SDPA runs instead of tritonkit's kernels "
                      f"for calls with {reason}; the result is transformers' exact attention",
                      AttentionFallbackWarning, stacklevel=3)


def _dense_plan(Nq: int, Nk: int, causal: bool, sliding_window: int | None):
    """(first key kept, tritonkit.attention's keyword arguments) for queries that are the last Nq of
    the Nk keys (transformers' alignment), or None if inexpressible."""
    if not causal:
        return None if sliding_window is not None else (0, {"causal": False})
    if Nq > Nk:
        return None  # transformers gives the first rows no keys
    if Nq == 1:  # the query is the last token: it sees every key its window keeps, unmasked
        return (max(0, Nk - sliding_window) if sliding_window else 0), {"causal": False}
    window = {"window": (sliding_window - 1, 0)} if sliding_window is not None and Nk > sliding_window else {}
    if Nq == Nk:  # top-left and bottom-right are the same; the default is the one Hopper's Gluon kernels take
        return 0, {"causal": True, **window}
    return 0, {"causal": True, "causal_alignment": "bottom_right", **window}


def _kernel_kwargs(window, softcap, sinks=None) -> dict:
    out = {}
    if window is not None:
        out["window"] = window
    if softcap is not None:
        out["softcap"] = softcap
    if sinks is not None:
        out["sinks"] = sinks
    return out


def head_dims_taken(D: int, Dv: int) -> bool:
    """Whether the kernels take q/k head dim D and v head dim Dv."""
    return 1 <= D <= MAX_HEAD_DIM and 1 <= Dv <= MAX_HEAD_DIM


MAX_HEAD_DIM = 512
_HEAD_DIMS = f"the kernels take 1 to {MAX_HEAD_DIM}"


def tritonkit_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                                value: torch.Tensor, attention_mask, dropout: float = 0.0,
                                scaling: float | None = None, sliding_window: int | None = None,
                                softcap: float | None = None, is_causal: bool | None = None, **kwargs):
    """transformers' attention interface: returns ((B, Nq, H, Dv) output, None).

    `s_aux` (gpt-oss's attention passes its module's learnable `sinks`, (H,)) joins each row's
    softmax denominator, with its gradient."""
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    dropout = dropout if module.training else 0.0
    sinks = kwargs.pop("s_aux", None)
    out, reason = _kernels(query, key, value, attention_mask, causal, scaling, sliding_window, softcap, dropout,
                           sinks, kwargs)
    if out is not None:
        return out, None
    _warn_fallback(module, reason)
    return sdpa_fallback(query, key, value, attention_mask, causal, scaling, sliding_window, softcap, dropout,
                         sinks), None


def _kernels(query, key, value, attention_mask, causal, scaling, sliding_window, softcap, dropout, sinks, kwargs):
    """(the (B, Nq, H, Dv) output, None) through tritonkit's kernels, or (None, why they cannot)."""
    B, H, Nq, D = query.shape
    Dv = value.shape[-1]
    run_dtype = dtype_in_op(query)  # under autocast, the region's, as for SDPA
    if run_dtype not in _KERNEL_DTYPES:
        return None, f"dtype {run_dtype} (the kernels take float16/bfloat16)"
    if dropout > 0.0:
        return None, "attention dropout"
    if not head_dims_taken(D, Dv):
        return None, f"head dims {D} and {Dv} ({_HEAD_DIMS})"
    if isinstance(attention_mask, torch.Tensor) and attention_mask.ndim != 2:
        return None, "a 4D mask (a mask passed in, an or/and mask function, block_sequence_ids)"
    if isinstance(attention_mask, Cached):
        n_keys = attention_mask.past + Nq
        if key.shape[2] < n_keys:
            return None, "queries past the end of their keys"
        # A static cache's slots past the queries are unfilled and seen by no query.
        key, value, attention_mask = key[:, :, :n_keys], value[:, :, :n_keys], attention_mask.padding
    Nk = key.shape[2]

    if kwargs.get("cu_seq_lens_q") is not None and attention_mask is None:
        cu_q, cu_k = kwargs["cu_seq_lens_q"], kwargs["cu_seq_lens_k"]
        max_q, max_k = kwargs["max_length_q"], kwargs["max_length_k"]
        if B == 1 and Nq == Nk:
            return _packed(query, key, value, cu_q.to(torch.int32), cu_k.to(torch.int32), max_q, max_k,
                           causal, scaling, sliding_window, softcap, sinks), None
        return None, "flash-attention packing kwargs and a cache"
    if isinstance(attention_mask, Packed):
        if Nq == Nk:
            p = attention_mask
            return _packed(query, key, value, p.cu_seqlens, p.cu_seqlens, p.max_seqlen, p.max_seqlen, causal,
                           scaling, sliding_window, softcap, sinks), None
        return None, "packed sequences and a cache"
    if isinstance(attention_mask, torch.Tensor):  # 2D padding mask
        return _unpadded(query, key, value, attention_mask, causal, scaling, sliding_window, softcap, sinks)
    plan = _dense_plan(Nq, Nk, causal, sliding_window)
    if plan is None:
        return None, "more queries than keys, or a sliding window without a causal mask"
    drop, options = plan
    out = tritonkit.attention(query, key[:, :, drop:], value[:, :, drop:], scale=scaling, **options,
                              **_kernel_kwargs(None, softcap, sinks))
    return out.transpose(1, 2), None


def _flat(t: torch.Tensor, n: int) -> torch.Tensor:
    """(B, heads, n, d) -> (B * n, heads, d)."""
    return t.transpose(1, 2).reshape(t.shape[0] * n, t.shape[1], t.shape[3])


def _packed(q, k, v, cu_q, cu_k, max_q, max_k, causal, scaling, sliding_window, softcap, sinks):
    B, H, N, _ = q.shape
    window = (sliding_window - 1, 0) if sliding_window and causal and max_k > sliding_window else None
    out = tritonkit.attention_varlen(_flat(q, N), _flat(k, N), _flat(v, N), cu_q, cu_k, max_q, max_k, causal=causal,
                                     scale=scaling, **_kernel_kwargs(window, softcap, sinks))
    return out.view(B, N, H, v.shape[-1])


def _unpadded(q, k, v, mask, causal, scaling, sliding_window, softcap, sinks):
    """(output, None) with the padding removed, the sequences through attention_varlen and zeros
    put back; or (None, why the kernels cannot)."""
    B, H, Nq, _ = q.shape
    Nk = k.shape[2]
    if mask.shape[1] != Nk:
        return None, "a padding mask of another length than the keys"
    if Nq > Nk:
        return None, "more queries than keys, or a sliding window without a causal mask"
    if sliding_window is not None and not causal:
        return None, "a sliding window without a causal mask"
    if sliding_window is not None:  # keys older than every query's window: a decoding query keeps w
        drop = max(0, Nk - Nq - (sliding_window - 1))
        k, v, mask, Nk = k[:, :, drop:], v[:, :, drop:], mask[:, drop:], Nk - drop
    mask = mask.to(device=q.device, dtype=torch.bool)
    q_mask = mask[:, -Nq:]
    k_lens = mask.sum(1, dtype=torch.int32)
    q_lens = q_mask.sum(1, dtype=torch.int32)
    holes = False
    if sliding_window is not None:
        # The window counts positions, and once the padding is gone, tokens: the same where each
        # row's tokens are contiguous (left or right padding), not across holes.
        first = mask.to(torch.int32).argmax(1)
        last = Nk - 1 - mask.flip(1).to(torch.int32).argmax(1)
        holes = ((last - first + 1 != k_lens) & (k_lens > 0)).any()
    max_k, max_q, holes = host_values(k_lens.max(), q_lens.max(), holes)
    window = None
    if sliding_window is not None and max_k > sliding_window:
        if holes:
            return None, "a sliding window over a padding mask with holes"
        window = (sliding_window - 1, 0)
    zero = torch.zeros(1, dtype=torch.int32, device=q.device)
    cu_k = torch.cat([zero, k_lens.cumsum(0, dtype=torch.int32)])
    cu_q = torch.cat([zero, q_lens.cumsum(0, dtype=torch.int32)])
    rows_q = torch.nonzero(q_mask.flatten()).flatten()
    rows_k = torch.nonzero(mask.flatten()).flatten()
    # Each row's queries are its last tokens: a sequence's queries end at its last key. Equal
    # lengths need no alignment (the default is the one Hopper's Gluon kernels take), and one
    # query sees every key its window kept.
    align = {"causal_alignment": "bottom_right"} if 1 < Nq < Nk else {}
    out = tritonkit.attention_varlen(_flat(q, Nq)[rows_q], _flat(k, Nk)[rows_k], _flat(v, Nk)[rows_k], cu_q, cu_k,
                                     max_q, max_k, causal=causal and Nq > 1, scale=scaling, **align,
                                     **_kernel_kwargs(window, softcap, sinks))
    full = out.new_zeros(B * Nq, H, v.shape[-1]).index_put((rows_q,), out)
    return full.view(B, Nq, H, v.shape[-1]), None


def sdpa_fallback(q, k, v, attention_mask, causal, scaling, sliding_window, softcap, dropout, sinks=None):
    """The exact attention transformers means, through SDPA (or scores in the open for softcap and
    sinks: a sink is a logit in each row's softmax denominator with no value)."""
    B, H, Nq, D = q.shape
    Nk = k.shape[2]
    mask = dense_mask(B, Nq, Nk, q.device, attention_mask, causal, sliding_window)
    if mask is not None and mask.dtype == torch.bool:
        # Rows with no key at all (padding queries) would give NaN: let them see every key, zero them after.
        empty = ~mask.any(-1, keepdim=True)
        mask = mask | empty
    else:
        empty = None
    scale = D ** -0.5 if scaling is None else scaling
    if softcap is None and sinks is None:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, scale=scale,
                                             enable_gqa=k.shape[1] != H)
    else:
        group = H // k.shape[1]
        kk, vv = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        s = torch.matmul(q, kk.transpose(-1, -2)) * scale
        if softcap is not None:
            s = softcap * torch.tanh(s / softcap)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
        if sinks is None:
            p = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
        else:
            s = torch.cat([s, sinks.to(s.dtype).view(1, H, 1, 1).expand(B, H, Nq, 1)], dim=-1)
            p = torch.softmax(s, dim=-1, dtype=torch.float32)[..., :-1].to(q.dtype)
        out = torch.matmul(F.dropout(p, dropout), vv)
    if empty is not None:
        out = out.masked_fill(empty, 0.0)
    return out.transpose(1, 2)


def head_dim_of(config) -> int | None:
    dim = getattr(config, "head_dim", None)
    if dim is None and getattr(config, "hidden_size", None) and getattr(config, "num_attention_heads", None):
        dim = config.hidden_size // config.num_attention_heads
    return dim


def head_dims(config) -> list[tuple[int, int]]:
    """The (q/k, v) head dims of the model's attention layers, each pair once: DeepSeek-V3's MLA
    (qk_nope + qk_rope, v_head_dim), Gemma 4's per layer (its global layers' wider heads), else
    the config's head_dim."""
    if getattr(config, "v_head_dim", None) and getattr(config, "qk_nope_head_dim", None) is not None:
        return [(config.qk_nope_head_dim + config.qk_rope_head_dim, config.v_head_dim)]
    try:
        D = head_dim_of(config)
    except RuntimeError:  # transformers' AmbiguousGlobalPerLayerAttributeError: the head dim varies by layer
        dims = {config.per_layer_config[i].head_dim for i in range(config.num_hidden_layers)}
        return [(d, d) for d in sorted(dims)]
    return [] if D is None else [(D, D)]


def _words(dims: list[tuple[int, int]]) -> str:
    return ", ".join(f"{d}" if d == dv else f"{d}/{dv}" for d, dv in dims)


def describe(config, dtype: torch.dtype | None, sinks: bool = False) -> tuple[str, str]:
    """(where the model's calls run, what runs where in words) for a model's config and weights'
    dtype (None: not known yet, as for patch_classes); sinks: its attention modules hold
    learnable sinks. Where: "kernels"; "autocast" (a float32 model: SDPA, the kernels inside a
    float16/bfloat16 autocast region); "sdpa" (never the kernels)."""
    dims = head_dims(config)
    refused = [(d, dv) for d, dv in dims if not head_dims_taken(d, dv)]
    if refused:
        return "sdpa", f"SDPA: head dims {_words(refused)} ({_HEAD_DIMS})"
    types = list(getattr(config, "layer_types", None) or ())
    window = getattr(config, "sliding_window", None)
    layers = getattr(config, "num_hidden_layers", 0)
    sliding = sum(t == "sliding_attention" for t in types) if types else (layers if window else 0)
    kernels = ("tritonkit.attention (causal rows; KV caches: dynamic, static, sliding; prefill, chunked prefill, "
               "decoding) and attention_varlen (padding removed, as in batched generate; packed rows)")
    if sliding and window:
        kernels += f", sliding layers ({sliding} of {layers}) with window ({window - 1}, 0)"
    if getattr(config, "attn_logit_softcapping", None):
        kernels += f", scores capped at {config.attn_logit_softcapping}"
    if len(dims) > 1 or any(d != dv for d, dv in dims):
        kernels += f", head dims {_words(dims)} (q/k or q/k/v)"
    if sinks:
        kernels += ", the layers' learnable sinks (with their gradient)"
    sdpa = ("a 4D mask (passed in, or/and mask functions, block_sequence_ids), a sliding window over a padding "
            "mask with holes")
    if getattr(config, "attention_dropout", 0.0):
        sdpa += f", attention dropout {config.attention_dropout} while training"
    if dtype is not None and dtype not in _KERNEL_DTYPES:
        return "autocast", (f"SDPA: the model is {dtype} (the kernels take float16/bfloat16); inside a "
                            f"float16/bfloat16 autocast region its calls run {kernels}")
    model = "" if dtype is None else f" (the model is {dtype})"
    other = "" if dtype is not None else ", and float32 calls outside autocast"
    return "kernels", (f"{kernels} for float16/bfloat16 calls{model}; SDPA with transformers' exact mask for "
                       f"{sdpa}{other}")


def register() -> None:
    """Make `attn_implementation="tritonkit"` known to transformers (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, tritonkit_attention_forward)
    AttentionMaskInterface.register(NAME, tritonkit_mask)
