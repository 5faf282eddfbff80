"""Modules built on tritonkit's kernels, to drop into a model."""

from __future__ import annotations

import torch

from ._checks import check_bool, check_float, check_int, dtype_name
from .ops.attention import attention
from .ops.attention.head import MAX_HEAD_DIM
from .ops.norms import layer_norm, rms_norm
from .ops.cross_entropy import OPTION_TYPES, linear_cross_entropy


_ATTENTION_DTYPES = (torch.float16, torch.bfloat16)


class Attention(torch.nn.Module):
    """Multi-head self-attention with a packed qkv projection and tritonkit's fused kernel.

    x (B, N, dim) -> one Linear to (B, N, (H + 2 Hkv) * D), viewed (no copy) as q (B, H, N, D)
    and k, v (B, Hkv, N, D) -> `tritonkit.attention` -> output Linear back to (B, N, dim).

    dim: model width, a multiple of num_heads; head_dim = dim // num_heads at most 512.
    num_kv_heads: heads of k and v (grouped-query attention), dividing
    num_heads; None means num_heads. causal: each position attends to itself and earlier ones.
    bias: whether both projections have a bias.

    The attention kernel computes in float16 or bfloat16: make the module one of those
    (``dtype=torch.bfloat16`` or ``.to(torch.bfloat16)``), or keep it in float32 and call it
    inside ``torch.autocast(device_type, dtype=torch.bfloat16)`` (mixed precision). A float32
    call outside autocast is refused (TypeError) rather than run at a lower precision than
    its dtype promises.
    """

    def __init__(self, dim: int, num_heads: int, num_kv_heads: int | None = None, causal: bool = True,
                 bias: bool = False, device: torch.device | None = None, dtype: torch.dtype | None = None):
        super().__init__()
        check_int("dim", dim)
        check_int("num_heads", num_heads)
        check_int("num_kv_heads", num_kv_heads, optional=True)
        check_bool("causal", causal)
        check_bool("bias", bias)
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads < 1 or dim % num_heads != 0:
            raise ValueError(f"dim {dim} is not a multiple of num_heads {num_heads}")
        if num_kv_heads < 1 or num_heads % num_kv_heads != 0:
            raise ValueError(f"num_kv_heads {num_kv_heads} does not divide num_heads {num_heads}")
        head_dim = dim // num_heads
        if head_dim > MAX_HEAD_DIM:
            raise ValueError(f"head_dim {head_dim} (dim / num_heads); supported: up to {MAX_HEAD_DIM}")
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
        if q.dtype not in _ATTENTION_DTYPES:
            raise TypeError(
                f"tritonkit.nn.Attention computes in float16 or bfloat16, but its projection of x gives "
                f"{dtype_name(q.dtype)} (x {dtype_name(x.dtype)}, weights {dtype_name(self.qkv.weight.dtype)}): "
                f"make the module bfloat16 (.to(torch.bfloat16), and x too), or call it inside "
                f"torch.autocast({q.device.type!r}, dtype=torch.bfloat16)")
        o = attention(q, k, v, causal=self.causal)  # laid out (B, N, H, D) in memory, like q
        return self.proj(o.transpose(1, 2).flatten(2))

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
                f"causal={self.causal}")


def _normalized_shape(normalized_shape) -> tuple[int, ...]:
    shape = normalized_shape if isinstance(normalized_shape, (tuple, list, torch.Size)) else (normalized_shape,)
    if any(isinstance(s, bool) or not isinstance(s, int) for s in shape):
        raise TypeError(f"normalized_shape must be an int or a sequence of ints, got {normalized_shape!r}")
    shape = tuple(shape)
    if not shape or any(s < 0 for s in shape):
        raise ValueError(f"normalized_shape must be a non-empty shape of sizes >= 0, got {normalized_shape!r}")
    return shape


class _Norm(torch.nn.Module):
    """What RMSNorm and LayerNorm share: normalisation over the trailing normalized_shape
    dims, flattened into one (a view where x allows) for the last-dim kernels."""

    def _rows(self, x: torch.Tensor, residual: torch.Tensor | None):
        k = len(self.normalized_shape)
        if not isinstance(x, torch.Tensor) or tuple(x.shape[x.dim() - k:]) != self.normalized_shape or x.dim() < k:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"x has shape {got}; its last dims must be normalized_shape {self.normalized_shape}")
        if k == 1:
            return x, residual, lambda t: t
        flat = (lambda t: t.flatten(-k)) if x.dim() > k else (lambda t: t.reshape(-1))
        return flat(x), (flat(residual) if isinstance(residual, torch.Tensor) else residual), \
            (lambda t: t.unflatten(-1, self.normalized_shape))

    def _finish(self, out, unflatten):
        return tuple(unflatten(t) for t in out) if isinstance(out, tuple) else unflatten(out)

    @staticmethod
    def _flat(p: torch.Tensor | None) -> torch.Tensor | None:
        return p.reshape(-1) if p is not None else None


class RMSNorm(_Norm):
    """``torch.nn.RMSNorm`` on tritonkit's kernels: same arguments, parameters and
    state-dict keys (``weight``, absent when elementwise_affine=False), so checkpoints load
    either way.

    forward(x, residual=None): y = RMSNorm(x); with residual, ``(RMSNorm(h), h)`` for
    ``h = x + residual`` (the fused pre-norm add, see `tritonkit.rms_norm`). eps=None
    means ``torch.finfo(x.dtype).eps``, as torch's. weight_offset (not in torch's
    module; keyword only) scales by ``(weight_offset + weight)``: 1.0 is Gemma's RMSNorm,
    whose weight then starts at 0 so that the scale starts at 1.
    """

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True,
                 device=None, dtype=None, *, weight_offset: float = 0.0):
        super().__init__()
        self.normalized_shape = _normalized_shape(normalized_shape)
        self.eps = check_float("eps", eps, optional=True)
        self.elementwise_affine = check_bool("elementwise_affine", elementwise_affine)
        self.weight_offset = float(check_float("weight_offset", weight_offset))
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            torch.nn.init.constant_(self.weight, 1.0 - self.weight_offset)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        x, residual, unflatten = self._rows(x, residual)
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        return self._finish(rms_norm(x, self._flat(self.weight), eps, residual=residual,
                                     weight_offset=self.weight_offset), unflatten)

    def extra_repr(self) -> str:
        offset = f", weight_offset={self.weight_offset}" if self.weight_offset else ""
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}{offset}")


class LayerNorm(_Norm):
    """``torch.nn.LayerNorm`` on tritonkit's kernels: same arguments, parameters and
    state-dict keys (``weight``, ``bias``), so checkpoints load either way.

    forward(x, residual=None): y = LayerNorm(x); with residual, ``(LayerNorm(h), h)`` for
    ``h = x + residual`` (the fused pre-norm add, see `tritonkit.layer_norm`).
    """

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        self.normalized_shape = _normalized_shape(normalized_shape)
        self.eps = check_float("eps", eps)
        self.elementwise_affine = check_bool("elementwise_affine", elementwise_affine)
        check_bool("bias", bias)
        factory = dict(device=device, dtype=dtype)
        for name, wanted in (("weight", elementwise_affine), ("bias", elementwise_affine and bias)):
            self.register_parameter(name, torch.nn.Parameter(torch.empty(self.normalized_shape, **factory))
                                    if wanted else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            torch.nn.init.ones_(self.weight)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        x, residual, unflatten = self._rows(x, residual)
        return self._finish(layer_norm(x, self._flat(self.weight), self._flat(self.bias), self.eps,
                                       residual=residual), unflatten)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


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
    () for mean and sum, target's shape for none; float32. chunk_tokens: tokens per chunk of
    logits, memory against time (see `tritonkit.linear_cross_entropy`); None for the default.
    """

    def __init__(self, ignore_index: int = -100, label_smoothing: float = 0.0, reduction: str = "mean",
                 softcap: float | None = None, chunk_tokens: int | None = None):
        super().__init__()
        for name, value in dict(ignore_index=ignore_index, label_smoothing=label_smoothing, reduction=reduction,
                                softcap=softcap, chunk_tokens=chunk_tokens).items():
            OPTION_TYPES[name](name, value)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing
        self.reduction, self.softcap, self.chunk_tokens = reduction, softcap, chunk_tokens

    def forward(self, hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        return linear_cross_entropy(hidden, weight, target, bias=bias, ignore_index=self.ignore_index,
                                    label_smoothing=self.label_smoothing, reduction=self.reduction,
                                    softcap=self.softcap, chunk_tokens=self.chunk_tokens)

    def extra_repr(self) -> str:
        return (f"ignore_index={self.ignore_index}, label_smoothing={self.label_smoothing}, "
                f"reduction={self.reduction!r}, softcap={self.softcap}, chunk_tokens={self.chunk_tokens}")
