"""FlashAttention-2's padding helpers (flash_attn.bert_padding): between a padded batch (batch,
seqlen, ...) with a mask of valid tokens and the packed rows (total, ...) that the varlen
functions take. Plain torch indexing, differentiable, with FlashAttention-2's signatures and
return values."""

from __future__ import annotations

import torch


def index_first_axis(input: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Rows `indices` of `input` along its first axis: (len(indices), *input.shape[1:])."""
    return input[indices]


def index_put_first_axis(values: torch.Tensor, indices: torch.Tensor, first_axis_dim: int) -> torch.Tensor:
    """A zero tensor of first_axis_dim rows with `values` at rows `indices`; the inverse of
    `index_first_axis` on those rows."""
    out = values.new_zeros((first_axis_dim, *values.shape[1:]))
    return out.index_put((indices,), values)


def unpad_input(hidden_states: torch.Tensor, attention_mask: torch.Tensor, unused_mask: torch.Tensor | None = None):
    """Pack the valid tokens of hidden_states (batch, seqlen, ...) as attention_mask (batch,
    seqlen; nonzero: valid) marks them. unused_mask marks tokens kept in the packed rows but not
    counted as used (FlashAttention-2's seqused).

    Returns (hidden_states (total, ...), indices (total,) int64 into the flattened batch,
    cu_seqlens (batch + 1,) int32, max_seqlen_in_batch (an int), seqused (batch,) int32: the
    tokens attention_mask marks in each sequence).
    """
    kept = attention_mask if unused_mask is None else attention_mask + unused_mask
    seqlens = kept.sum(dim=-1, dtype=torch.int32)
    seqused = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(kept.flatten()).flatten()
    cu_seqlens = torch.nn.functional.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    rows = index_first_axis(hidden_states.flatten(0, 1), indices)
    return rows, indices, cu_seqlens, int(seqlens.max().item()), seqused


def pad_input(hidden_states: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int) -> torch.Tensor:
    """The packed rows hidden_states (total, ...) back in a padded (batch, seqlen, ...) tensor,
    zeros where no row goes; `indices` as `unpad_input` returned them."""
    return index_put_first_axis(hidden_states, indices, batch * seqlen).unflatten(0, (batch, seqlen))
