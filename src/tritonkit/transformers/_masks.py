"""The "tritonkit" mask function: transformers' mask described in a form the kernels take.

transformers calls the mask function once a forward for each kind of layer (full, sliding),
before the layers update their caches, with the queries' position (`q_offset`), the position
of the layer's first key (`kv_offset`), the number of keys the layer will hold (`kv_length`,
a static cache's whole buffer) and the 2D padding mask over all positions. Instead of an
(Nq x Nk) tensor it returns:

- None: causal (sliding through the layer's `sliding_window`), the queries the last keys;
- `Packed`: packed rows, found from position ids that restart;
- `Cached`: where the queries sit among the layer's keys (a static cache's slots past the
  current position are unfilled), and the padding mask over the keys (batched generate);
- a 4D bool mask, transformers' own, for what the kernels cannot express (a user's or/and
  mask function, bidirectional blocks), which the attention function hands to SDPA.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


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


@dataclass(frozen=True)
class Cached:
    """Where the queries sit among their layer's keys, and the padding.

    Query i is at key index `past + i` of the layer's keys; keys past the last query are a
    static cache's unfilled slots, which no query sees. `padding` (B, past + Nq) bool, False at
    padding tokens, or None. (A plain 2D padding mask, which the attention function also
    takes, puts the queries at the last keys.)
    """
    past: int
    padding: torch.Tensor | None

    # generate() builds the mask of a static cache before the forward and passes it in as the
    # forward's attention_mask; mask creation returns a prepared 4D mask as it is, and keeps its
    # 2D-mask handling (a cast) off a mask whose rank is not 2. tritonkit_mask returns it unchanged.
    ndim = 4


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


def host_values(*values):
    """Python ints and bools of 0-d tensors (one read from the device for all) and of Python values."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if not tensors:
        return values
    read = iter(torch.stack([t.to(tensors[0].device, torch.long) for t in tensors]).tolist())
    return tuple(next(read) if isinstance(v, torch.Tensor) else v for v in values)


@torch.compiler.disable  # runs eagerly under torch.compile: it reads mask functions and decides on data
def tritonkit_mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0, kv_offset: int = 0,
                   mask_function=None, attention_mask: torch.Tensor | None = None, use_vmap: bool = False,
                   **kwargs):
    """transformers' mask interface for "tritonkit": None, a 2D padding mask, `Packed`, `Cached`
    or a 4D bool mask (see the module's docstring)."""
    from transformers import masking_utils as hf

    if isinstance(attention_mask, Cached):
        return attention_mask  # described already, before this forward (generate with a static cache)
    mask_function = hf.causal_mask_function if mask_function is None else mask_function
    leaves = None if use_vmap else _leaves(mask_function, hf)
    if leaves is None or ("causal", None) not in leaves:
        # Not a pattern the kernels take (bidirectional blocks, a user's function): the exact 4D
        # mask. No causal skip: a skipped mask would mean top-left causal rows, and the queries
        # are the last keys only without a static cache.
        kwargs.pop("allow_is_causal_skip", None)
        return hf.sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                            kv_offset=kv_offset, mask_function=mask_function, attention_mask=attention_mask,
                            allow_is_causal_skip=False, use_vmap=use_vmap, **kwargs)
    packed = [value for kind, value in leaves if kind == "packed"]
    # Only without a 2D mask and without a cache (transformers' rule). Under torch.compile
    # transformers passes the segment ids without looking whether any row holds two sequences.
    if packed and bool((packed[0][:, -1] != 0).any()):
        return Packed.from_segment_ids(packed[0])

    # Key index j is position kv_offset + j; query i is position q_offset + i. A static cache's
    # full-attention layer gives q_offset as a device tensor (its fill), read here once a forward
    # with the padding check below.
    seen = None
    if attention_mask is not None:
        attention_mask = attention_mask[:, kv_offset:]  # a sliding cache keeps the last keys
        seen = attention_mask.all()
    q_offset, kv_offset, no_padding = host_values(q_offset, kv_offset, seen)
    past = q_offset - kv_offset
    n_keys = past + q_length  # the keys any query sees; a static buffer holds more
    if attention_mask is not None:
        if attention_mask.shape[1] < n_keys:  # as transformers pads it: positions past the mask are padding
            attention_mask = F.pad(attention_mask, (0, n_keys - attention_mask.shape[1]), value=False)
            no_padding = False
        elif attention_mask.shape[1] > n_keys:
            attention_mask = attention_mask[:, :n_keys]
            no_padding = bool(attention_mask.all())
    padding = None if attention_mask is None or no_padding else attention_mask.bool()
    # A padding mask comes as `Cached` too: generate() may pass this function's result back to it
    # (see `Cached`), and only a described mask is not sliced a second time.
    return None if padding is None and n_keys == kv_length else Cached(past, padding)


def dense_mask(B: int, Nq: int, Nk: int, device, attention_mask, causal: bool,
               sliding_window: int | None) -> torch.Tensor | None:
    """The (B, 1, Nq, Nk) bool mask transformers means (the queries the last keys, unless `Cached`)."""
    if isinstance(attention_mask, torch.Tensor) and attention_mask.ndim == 4:
        return attention_mask
    past = attention_mask.past if isinstance(attention_mask, Cached) else Nk - Nq
    q = torch.arange(past, past + Nq, device=device)[:, None]
    kv = torch.arange(Nk, device=device)[None, :]
    seen = (kv <= q) if causal else torch.ones(Nq, Nk, dtype=torch.bool, device=device)
    if sliding_window is not None:
        # transformers' windows: the last `sliding_window` keys causal, keys within `sliding_window`
        # either side bidirectional (sliding_window_bidirectional_overlay, Gemma 4's "all").
        seen = seen & ((kv > q - sliding_window) if causal else ((q - kv).abs() <= sliding_window))
    seen = seen.expand(B, 1, Nq, Nk)
    pad = attention_mask.padding if isinstance(attention_mask, Cached) else attention_mask
    if isinstance(pad, Packed):
        ids = pad.segment_ids
        seen = seen & (ids[:, None, -Nq:, None] == ids[:, None, None, :])
    elif isinstance(pad, torch.Tensor):
        pad = pad.to(device=device, dtype=torch.bool)
        if pad.shape[1] < Nk:  # a static cache's unfilled slots
            pad = F.pad(pad, (0, Nk - pad.shape[1]), value=False)
        # A Cached padding mask starts at the first key; a plain one ends at the last.
        pad = pad[:, :Nk] if isinstance(attention_mask, Cached) else pad[:, -Nk:]
        seen = seen & pad[:, None, None, :]
    return seen
