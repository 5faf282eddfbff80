"""tritonkit attention behind transformers' attention-function registry.

`attn_implementation="tritonkit"` selects two functions registered here:

- the mask function (`ALL_MASK_ATTENTION_FUNCTIONS["tritonkit"]`), called once a forward, describes
  the mask in the form the kernels take instead of building an (N x N) tensor: `None` (causal, or
  sliding through the layer's `sliding_window`), a 2D bool padding mask (batch, keys), or
  `Packed` (cumulative sequence lengths of packed rows, found from the position ids that restart);
  a pattern it does not recognise (a user's or/and mask function) comes back as transformers'
  own 4D bool mask, which the attention function hands to SDPA;
- the attention function, called by every attention layer with HF's (B, H, N, D) query and
  (B, Hkv, Nk, D) key/value, maps that description onto `tritonkit.attention` (dense rows) or
  `tritonkit.attention_varlen` (padding removed, or packed sequences), and falls back to SDPA for
  the call when the kernel cannot express it exactly (dtype, dropout, an arbitrary mask, an
  alignment or feature the kernels lack). The fallback builds the exact mask transformers would.

Alignment: tritonkit's causal mask is top-left (query i sees keys j <= i); transformers aligns a
query block to the end of the keys (a cache holds earlier tokens). The function keeps that
meaning: equal lengths are the same either way, a single query row sees every cached key, and
other shapes go through a window offset (more queries than keys, whose first rows see no key,
through SDPA).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import tritonkit
from .._autocast import dtype_in_op

logger = logging.getLogger("tritonkit.transformers")

NAME = "tritonkit"


_KERNEL_DTYPES = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class Packed:
    """Packed rows: sequences delimited by int32 cumulative lengths over the flattened (B*N) tokens."""
    cu_seqlens: torch.Tensor
    max_seqlen: int
    segment_ids: torch.Tensor  # (B, N): the sequence of each token, for the SDPA fallback's mask

    @property
    def ndim(self) -> int:  # transformers code that inspects a mask's rank sees a 2D one
        return 2

    @staticmethod
    def from_segment_ids(segment_ids: torch.Tensor) -> "Packed":
        B, N = segment_ids.shape
        # A new sequence starts at each row start and wherever the id changes.
        starts = torch.ones_like(segment_ids, dtype=torch.bool)
        starts[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
        first = torch.nonzero(starts.flatten()).flatten()
        total = torch.tensor([B * N], device=first.device, dtype=first.dtype)
        cu = torch.cat([first, total]).to(torch.int32)
        return Packed(cu, int((cu[1:] - cu[:-1]).max()), segment_ids)


# ---------------------------------------------------------------- mask function

def _leaves(fn, hf):
    """The mask functions `fn` intersects (and_masks flattened), or None if `fn` is an unknown shape."""
    if fn is hf.causal_mask_function:
        return [("causal", None)]
    code = getattr(fn, "__code__", None)
    cells = dict(zip(code.co_freevars, (c.cell_contents for c in fn.__closure__ or ()))) if code else {}
    if code is hf.and_masks(hf.causal_mask_function).__code__:
        out = []
        for sub in cells["mask_functions"]:
            leaves = _leaves(sub, hf)
            if leaves is None:
                return None
            out += leaves
        return out
    if code is hf.sliding_window_overlay(1).__code__:
        return [("sliding", cells["sliding_window"])]
    if code is hf.packed_sequence_mask_function(None).__code__:
        return [("packed", cells["packed_sequence_mask"])]
    return None


@torch.compiler.disable  # runs eagerly under torch.compile: it reads mask functions and decides on data
def tritonkit_mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0, kv_offset: int = 0,
                   mask_function=None, attention_mask: torch.Tensor | None = None, use_vmap: bool = False,
                   **kwargs):
    """transformers' mask interface for "tritonkit": None, a 2D padding mask, `Packed`, or a 4D bool mask."""
    from transformers import masking_utils as hf

    mask_function = hf.causal_mask_function if mask_function is None else mask_function
    leaves = None if use_vmap else _leaves(mask_function, hf)
    if leaves is None or ("causal", None) not in leaves:
        # Not a pattern the kernels take (bidirectional blocks, a user's function): the exact 4D mask.
        return hf.sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                            kv_offset=kv_offset, mask_function=mask_function, attention_mask=attention_mask,
                            allow_is_causal_skip=False, use_vmap=use_vmap, **kwargs)
    packed = [value for kind, value in leaves if kind == "packed"]
    # Only without a 2D mask and without a cache (transformers' rule). Under torch.compile
    # transformers passes the segment ids without looking whether any row holds two sequences.
    if packed and bool((packed[0][:, -1] != 0).any()):
        return Packed.from_segment_ids(packed[0])
    if attention_mask is None:
        return None
    attention_mask = attention_mask[:, -kv_length:]  # sliding caches keep the last keys
    if attention_mask.shape[1] == kv_length and bool(attention_mask.all()):
        return None
    return attention_mask


# ---------------------------------------------------------------- attention function

_NOTED: set[str] = set()


def _note(reason: str) -> None:
    if reason not in _NOTED:  # once a reason a process: this runs inside every layer
        _NOTED.add(reason)
        logger.info("tritonkit attention: SDPA for calls with %s", reason)


def _dense_plan(Nq: int, Nk: int, causal: bool, sliding_window: int | None):
    """(first key kept, causal, window) for rows aligned to the end of the keys, or None if inexpressible."""
    if not causal:
        return (0, False, None) if sliding_window is None else None
    drop = max(0, Nk - Nq - (sliding_window - 1)) if sliding_window else 0  # keys no query sees
    Nk -= drop
    offset = Nk - Nq
    if offset < 0:
        return None  # transformers gives the first rows no keys; the kernel's top-left rows see some
    left = sliding_window - 1 - offset if sliding_window else -1
    needs_window = sliding_window is not None and Nk > sliding_window
    if offset == 0:
        return drop, True, ((left, 0) if needs_window else None)
    if Nq == 1:  # the query is the last token: it sees every key kept
        return drop, False, None
    return drop, False, (left, offset)


def _kernel_kwargs(window, softcap) -> dict:
    out = {}
    if window is not None:
        out["window"] = window
    if softcap is not None:
        out["softcap"] = softcap
    return out


def tritonkit_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                                value: torch.Tensor, attention_mask, dropout: float = 0.0,
                                scaling: float | None = None, sliding_window: int | None = None,
                                softcap: float | None = None, is_causal: bool | None = None, **kwargs):
    """transformers' attention interface: returns ((B, Nq, H, D) output, None)."""
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    B, H, Nq, D = query.shape
    Nk = key.shape[2]
    reason = None
    run_dtype = dtype_in_op(query)  # under autocast, the region's, as for SDPA
    if run_dtype not in _KERNEL_DTYPES:
        reason = f"dtype {run_dtype} (kernels take float16/bfloat16)"
    elif dropout > 0.0:
        reason = "attention dropout"
    elif D % 8 != 0 or not 16 <= D <= 256:
        reason = f"head dim {D}"
    elif isinstance(attention_mask, torch.Tensor) and attention_mask.ndim != 2:
        reason = "a 4D mask"

    if reason is None and kwargs.get("cu_seq_lens_q") is not None and attention_mask is None:
        cu_q, cu_k = kwargs["cu_seq_lens_q"], kwargs["cu_seq_lens_k"]
        max_q, max_k = kwargs["max_length_q"], kwargs["max_length_k"]
        if B == 1 and Nq == Nk:
            return _packed(query, key, value, cu_q.to(torch.int32), cu_k.to(torch.int32), max_q, max_k,
                           causal, scaling, sliding_window, softcap), None
        reason = "flash-attention packing kwargs"
    if reason is None and isinstance(attention_mask, Packed):
        if Nq == Nk:
            p = attention_mask
            return _packed(query, key, value, p.cu_seqlens, p.cu_seqlens, p.max_seqlen, p.max_seqlen, causal,
                           scaling, sliding_window, softcap), None
        reason = f"packed sequences of {Nq} queries against {Nk} keys"
    if reason is None and isinstance(attention_mask, torch.Tensor):  # 2D padding mask
        out = _unpadded(query, key, value, attention_mask, causal, scaling, sliding_window, softcap)
        if out is not None:
            return out, None
        reason = "a padding mask here (it needs equal query and key lengths, or one query)"
    if reason is None:
        plan = _dense_plan(Nq, Nk, causal, sliding_window)
        if plan is not None:
            drop, kernel_causal, window = plan
            out = tritonkit.attention(query, key[:, :, drop:], value[:, :, drop:], causal=kernel_causal,
                                      scale=scaling, **_kernel_kwargs(window, softcap))
            return out.transpose(1, 2), None
        reason = f"{Nq} queries against {Nk} keys (causal={causal}, sliding_window={sliding_window})"
    _note(reason)
    return sdpa_fallback(query, key, value, attention_mask, causal, scaling, sliding_window, softcap,
                         dropout if module.training else 0.0), None


def _packed(q, k, v, cu_q, cu_k, max_q, max_k, causal, scaling, sliding_window, softcap):
    B, H, N, D = q.shape
    window = (sliding_window - 1, 0) if sliding_window and causal and max_k > sliding_window else None
    out = tritonkit.attention_varlen(
        q.transpose(1, 2).reshape(B * N, H, D), k.transpose(1, 2).reshape(B * N, k.shape[1], D),
        v.transpose(1, 2).reshape(B * N, v.shape[1], D), cu_q, cu_k, max_q, max_k, causal=causal, scale=scaling,
        **_kernel_kwargs(window, softcap))
    return out.view(B, N, H, D)


def _unpadded(q, k, v, mask, causal, scaling, sliding_window, softcap):
    """Padding removed, the sequences run through attention_varlen, zeros put back; None if inexpressible."""
    B, H, Nq, D = q.shape
    Nk = k.shape[2]
    if not (Nq == Nk or Nq == 1):
        return None
    mask = mask.to(device=q.device, dtype=torch.bool)
    if mask.shape[1] < Nk:  # a static cache's unfilled slots
        mask = F.pad(mask, (0, Nk - mask.shape[1]), value=False)
    q_mask = mask[:, -Nq:]
    k_lens = mask.sum(1, dtype=torch.int32)
    q_lens = q_mask.sum(1, dtype=torch.int32)
    max_k, max_q = int(k_lens.max()), int(q_lens.max())
    window = None
    if sliding_window is not None and max_k > sliding_window:
        if Nq == 1:
            return None
        window = (sliding_window - 1, 0)
    zero = torch.zeros(1, dtype=torch.int32, device=q.device)
    cu_k = torch.cat([zero, k_lens.cumsum(0, dtype=torch.int32)])
    cu_q = torch.cat([zero, q_lens.cumsum(0, dtype=torch.int32)])
    rows_q = torch.nonzero(q_mask.flatten()).flatten()
    rows_k = torch.nonzero(mask.flatten()).flatten()
    flat = lambda t, n: t.transpose(1, 2).reshape(B * n, t.shape[1], D)  # noqa: E731
    out = tritonkit.attention_varlen(flat(q, Nq)[rows_q], flat(k, Nk)[rows_k], flat(v, Nk)[rows_k], cu_q, cu_k,
                                     max_q, max_k, causal=causal and Nq > 1, scale=scaling,
                                     **_kernel_kwargs(window, softcap))
    full = out.new_zeros(B * Nq, H, D).index_put((rows_q,), out)
    return full.view(B, Nq, H, D)


def dense_mask(B: int, Nq: int, Nk: int, device, attention_mask, causal: bool,
               sliding_window: int | None) -> torch.Tensor | None:
    """The (B, 1, Nq, Nk) bool mask transformers means, rows aligned to the end of the keys."""
    if isinstance(attention_mask, torch.Tensor) and attention_mask.ndim == 4:
        return attention_mask
    q = torch.arange(Nk - Nq, Nk, device=device)[:, None]
    kv = torch.arange(Nk, device=device)[None, :]
    seen = (kv <= q) if causal else torch.ones(Nq, Nk, dtype=torch.bool, device=device)
    if sliding_window is not None:
        seen = seen & (kv > q - sliding_window)
    seen = seen.expand(B, 1, Nq, Nk)
    if isinstance(attention_mask, Packed):
        ids = attention_mask.segment_ids
        seen = seen & (ids[:, None, -Nq:, None] == ids[:, None, None, :])
    elif isinstance(attention_mask, torch.Tensor):
        pad = attention_mask.to(device=device, dtype=torch.bool)
        if pad.shape[1] < Nk:
            pad = F.pad(pad, (0, Nk - pad.shape[1]), value=False)
        seen = seen & pad[:, None, None, -Nk:]
    return seen


def sdpa_fallback(q, k, v, attention_mask, causal, scaling, sliding_window, softcap, dropout):
    """The exact attention transformers means, through SDPA (or scores in the open for softcap)."""
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
    if softcap is None:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, scale=scale,
                                             enable_gqa=k.shape[1] != H)
    else:
        group = H // k.shape[1]
        kk, vv = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        s = torch.matmul(q, kk.transpose(-1, -2)) * scale
        s = softcap * torch.tanh(s / softcap)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
        p = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(F.dropout(p, dropout), vv)
    if empty is not None:
        out = out.masked_fill(empty, 0.0)
    return out.transpose(1, 2)


def register() -> None:
    """Make `attn_implementation="tritonkit"` known to transformers (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, tritonkit_attention_forward)
    AttentionMaskInterface.register(NAME, tritonkit_mask)
