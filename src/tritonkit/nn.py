"""Modules built on tritonkit's kernels, to drop into a model."""

from __future__ import annotations

import torch

from .ops.attention import attention
from .ops.cross_entropy import linear_cross_entropy


class Attention(torch.nn.Module):
    """Multi-head self-attention with a packed qkv projection and tritonkit's fused kernel.

    x (B, N, dim) -> one Linear to (B, N, (H + 2 Hkv) * D), viewed (no copy) as q (B, H, N, D)
    and k, v (B, Hkv, N, D) -> `tritonkit.attention` -> output Linear back to (B, N, dim).

    dim: model width, a multiple of num_heads; head_dim = dim // num_heads must be a multiple
    of 8 from 16 to 256. num_kv_heads: heads of k and v (grouped-query attention), dividing
    num_heads; None means num_heads. causal: each position attends to itself and earlier ones.
    bias: whether both projections have a bias.
    """

    def __init__(self, dim: int, num_heads: int, num_kv_heads: int | None = None, causal: bool = True,
                 bias: bool = False, device: torch.device | None = None, dtype: torch.dtype | None = None):
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads < 1 or dim % num_heads != 0:
            raise ValueError(f"dim {dim} is not a multiple of num_heads {num_heads}")
        if num_kv_heads < 1 or num_heads % num_kv_heads != 0:
            raise ValueError(f"num_kv_heads {num_kv_heads} does not divide num_heads {num_heads}")
        head_dim = dim // num_heads
        if head_dim % 8 != 0 or not 16 <= head_dim <= 256:
            raise ValueError(f"head_dim {head_dim} (dim / num_heads); supported: multiples of 8 from 16 to 256")
        self.dim, self.num_heads, self.num_kv_heads, self.head_dim = dim, num_heads, num_kv_heads, head_dim
        self.causal = causal
        factory = dict(device=device, dtype=dtype)
        self.qkv = torch.nn.Linear(dim, (num_heads + 2 * num_kv_heads) * head_dim, bias=bias, **factory)
        self.proj = torch.nn.Linear(num_heads * head_dim, dim, bias=bias, **factory)

    def split_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q (B, H, N, D), k and v (B, Hkv, N, D): strided views of the packed projection."""
        H, Hkv, D = self.num_heads, self.num_kv_heads, self.head_dim
        qkv = self.qkv(x)
        q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
        return (q.unflatten(-1, (H, D)).transpose(1, 2), k.unflatten(-1, (Hkv, D)).transpose(1, 2),
                v.unflatten(-1, (Hkv, D)).transpose(1, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.split_heads(x)
        o = attention(q, k, v, causal=self.causal)  # laid out (B, N, H, D) in memory, like q
        return self.proj(o.transpose(1, 2).flatten(2))

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
                f"causal={self.causal}")


class LinearCrossEntropyLoss(torch.nn.Module):
    """The loss of a language-model head, `tritonkit.linear_cross_entropy`, as a module: the
    cross-entropy of ``hidden @ weight.T (+ bias)`` against ``target`` without ever holding
    the (tokens x vocabulary) logits.

    It holds the options only (no parameters or buffers, so its state dict is empty, like
    ``torch.nn.CrossEntropyLoss`` without class weights); the head's weight stays in the model
    and is passed in, which keeps tied input/output embeddings tied:

        loss_fn = tritonkit.nn.LinearCrossEntropyLoss(ignore_index=-100)
        # causal LM: position i predicts token i + 1
        loss = loss_fn(hidden[:, :-1], model.lm_head.weight, input_ids[:, 1:])

    forward(hidden (..., H), weight (V, H), target (...), bias (V,) or None) -> the loss:
    () for mean and sum, target's shape for none; float32.
    """

    def __init__(self, ignore_index: int = -100, label_smoothing: float = 0.0, reduction: str = "mean",
                 softcap: float | None = None):
        super().__init__()
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing
        self.reduction, self.softcap = reduction, softcap

    def forward(self, hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        return linear_cross_entropy(hidden, weight, target, bias=bias, ignore_index=self.ignore_index,
                                    label_smoothing=self.label_smoothing, reduction=self.reduction,
                                    softcap=self.softcap)

    def extra_repr(self) -> str:
        return (f"ignore_index={self.ignore_index}, label_smoothing={self.label_smoothing}, "
                f"reduction={self.reduction!r}, softcap={self.softcap}")
