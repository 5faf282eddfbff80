"""RMSNorm, `y = x / sqrt(mean(x^2) + eps) * (weight_offset + weight)`, forward and backward,
with the pre-norm block's residual add fused in. The kernels are shared with LayerNorm
(`_kernels.py`, whose docstring gives the math; `_rows.py`, the launch plan and the memory floor)."""

from __future__ import annotations

import torch

from ..._checks import check_tensor
from ._declare import declare
from ._rows import check_eps, check_inputs, check_weight_offset, norm_bwd, norm_fwd


def rms_norm_fwd(x: torch.Tensor, weight: torch.Tensor | None, residual: torch.Tensor | None,
                 eps: float, weight_offset: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launcher for the forward pass: (y, h, rstd). y in x's dtype, contiguous; h = x +
    residual in x's dtype (a 0-element tensor without residual); rstd float32 of shape
    x.shape[:-1], saved for the backward."""
    y, h, rstd = _rms_norm_fwd(x, weight, residual, eps, weight_offset)
    return y, h if h is not None else x.new_empty((0,)), rstd.view(x.shape[:-1])


def _rms_norm_fwd(x, weight, residual, eps, weight_offset):
    # The eager roads' forward: h is None without residual (not an output there), and rstd
    # is flat (only the backward reads it).
    check_inputs(x, residual, weight)
    y, h, _, rstd = norm_fwd(x, weight, None, residual, check_eps(eps),
                             check_weight_offset(weight_offset, weight), is_rms=True)
    return y, h, rstd


def rms_norm_bwd(dy: torch.Tensor, dh: torch.Tensor | None, h: torch.Tensor, weight: torch.Tensor | None,
                 rstd: torch.Tensor, weight_offset: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Launcher for the backward pass: (dx, dweight) given dL/dy, dL/dh (None without
    residual), the tensor normalised (x, or h = x + residual), weight and the forward's
    rstd. dx is also the residual's gradient; dweight is empty without weight."""
    _check_grads(dy, dh, h, rstd)
    dx, dw = _rms_norm_bwd(dy, dh, h, weight, rstd, weight_offset)
    return dx, dw if dw is not None else h.new_empty((0,))


def _rms_norm_bwd(dy, dh, h, weight, rstd, weight_offset):
    # The eager backward's launcher: the saved tensors passed the forward's checks, and
    # autograd gives dy and dh of h's shape, dtype and device. dW is None without weight.
    dx, dw, _ = norm_bwd(dy, dh, h, weight, None, None, rstd, weight_offset, is_rms=True)
    return dx, dw


def _check_grads(dy, dh, h, *stats):
    for name, t in (("dy", dy), ("h", h), *((("dh", dh),) if dh is not None else ())):
        check_tensor(name, t)
        if t.shape != h.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)} but h has {tuple(h.shape)}")
    for t in stats:
        check_tensor("rstd", t, (torch.float32,))
        if t.shape != h.shape[:-1]:
            raise ValueError(f"rstd has shape {tuple(t.shape)}, expected {tuple(h.shape[:-1])}")


def _check(x, weight, residual, eps, weight_offset):
    check_inputs(x, residual, weight)
    return x, weight, residual, check_eps(eps), check_weight_offset(weight_offset, weight)


_RMS_NORM = declare("rms_norm", params=("weight",), stats=("rstd",), options=("eps", "weight_offset"),
                    backward_options=1, launchers=(rms_norm_fwd, _rms_norm_fwd, rms_norm_bwd, _rms_norm_bwd),
                    check=_check)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6, *,
             residual: torch.Tensor | None = None, weight_offset: float = 0.0):
    """RMSNorm over the last dim: ``x / sqrt(mean(x^2, -1) + eps) * (weight_offset + weight)``.

    x: float32, float16 or bfloat16, shape (..., hidden), any strides and view offset.
    weight: None (no scale) or (hidden,) of any of those dtypes (float32 weights with bf16
    activations are fine). Statistics and the scaling are computed in float32; the result
    has x's dtype, whatever weight's (as ``F.rms_norm`` gives for mixed dtypes).
    weight_offset: 1.0 gives Gemma's ``(1 + weight)``; needs a weight.
    residual: the pre-norm block's fused add. With it, ``h = x + residual`` (same shape and
    dtype as x; added in float32 and rounded to x's dtype, bitwise torch's ``x + residual``)
    is normalised and ``(rms_norm(h), h)`` is returned; x and residual are read once and
    both outputs written once. Differentiable in x, weight and residual (and through h).

    Refuses (naming the argument): non-tensors and other dtypes (TypeError), a weight not of
    shape (hidden,), a residual not of x's shape (ValueError) or dtype (TypeError), eps
    negative or not finite, a nonzero weight_offset without weight, a 0-d x (ValueError).
    """
    return _RMS_NORM(x, weight, residual, eps, weight_offset)


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6, *,
                       residual: torch.Tensor | None = None, weight_offset: float = 0.0, upcast: bool = True):
    """`rms_norm` in plain torch: in float64 (upcast, h included), or as an eager PyTorch
    model writes it (Hugging Face's LlamaRMSNorm / Gemma's): h = x + residual in x's
    dtype, statistics and scaling in float32, the result cast to x's dtype."""
    h = x if residual is None else (x.double() + residual.double() if upcast else x + residual)
    t = h.to(torch.float64 if upcast else torch.float32)
    y = t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * (weight.to(t.dtype) + weight_offset)
    y = y if upcast else y.to(x.dtype)
    return y if residual is None else (y, h)
