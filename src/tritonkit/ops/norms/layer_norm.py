"""LayerNorm, `y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias`, forward and backward,
with the pre-norm block's residual add fused in. The kernels are shared with RMSNorm
(`_kernels.py`, whose docstring gives the math; `_rows.py`, the launch plan and the memory floor)."""

from __future__ import annotations

import torch

from ._declare import declare
from ._rows import check_eps, check_inputs, norm_bwd, norm_fwd
from .rms_norm import _check_grads


def layer_norm_fwd(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                   residual: torch.Tensor | None, eps: float):
    """Launcher for the forward pass: (y, h, mean, rstd). y in x's dtype, contiguous; h =
    x + residual in x's dtype (a 0-element tensor without residual); mean and rstd float32
    of shape x.shape[:-1], saved for the backward."""
    y, h, mean, rstd = _layer_norm_fwd(x, weight, bias, residual, eps)
    stats = x.shape[:-1]
    return y, h if h is not None else x.new_empty((0,)), mean.view(stats), rstd.view(stats)


def _layer_norm_fwd(x, weight, bias, residual, eps):
    # The eager roads' forward: h is None without residual (not an output there), and mean
    # and rstd are flat (only the backward reads them).
    check_inputs(x, residual, weight, bias)
    return norm_fwd(x, weight, bias, residual, check_eps(eps), 0.0, is_rms=False)


def layer_norm_bwd(dy: torch.Tensor, dh: torch.Tensor | None, h: torch.Tensor, weight: torch.Tensor | None,
                   bias: torch.Tensor | None, mean: torch.Tensor, rstd: torch.Tensor):
    """Launcher for the backward pass: (dx, dweight, dbias) given dL/dy, dL/dh (None
    without residual), the tensor normalised (x, or h = x + residual), weight, bias (for
    its dtype) and the forward's mean and rstd. dx is also the residual's gradient;
    dweight and dbias are empty where weight and bias are None."""
    _check_grads(dy, dh, h, mean, rstd)
    return tuple(t if t is not None else h.new_empty((0,))
                 for t in _layer_norm_bwd(dy, dh, h, weight, bias, mean, rstd))


def _layer_norm_bwd(dy, dh, h, weight, bias, mean, rstd):
    # The eager backward's launcher: the saved tensors passed the forward's checks, and
    # autograd gives dy and dh of h's shape, dtype and device. dW, dB: None where absent.
    return norm_bwd(dy, dh, h, weight, bias, mean, rstd, 0.0, is_rms=False)


def _check(x, weight, bias, residual, eps):
    check_inputs(x, residual, weight, bias)
    return x, weight, bias, residual, check_eps(eps)


_LAYER_NORM = declare("layer_norm", params=("weight", "bias"), stats=("mean", "rstd"), options=("eps",),
                      backward_options=0,
                      launchers=(layer_norm_fwd, _layer_norm_fwd, layer_norm_bwd, _layer_norm_bwd), check=_check)


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5, *, residual: torch.Tensor | None = None):
    """LayerNorm over the last dim: ``(x - mean) / sqrt(var + eps) * weight + bias`` (biased
    variance, as ``F.layer_norm``).

    x: float32, float16 or bfloat16, shape (..., hidden), any strides and view offset.
    weight, bias: None or (hidden,) of any of those dtypes. Statistics and the affine map
    are computed in float32; the result has x's dtype (as ``F.layer_norm`` gives).
    residual: the pre-norm block's fused add. With it, ``h = x + residual`` (same shape and
    dtype as x; bitwise torch's ``x + residual``) is normalised and ``(layer_norm(h), h)``
    is returned, one read of each input and one write of each output. Differentiable in
    x, weight, bias and residual (and through h).

    Refuses (naming the argument): non-tensors and other dtypes (TypeError), weight or bias
    not of shape (hidden,), a residual not of x's shape (ValueError) or dtype (TypeError),
    eps negative or not finite, a 0-d x (ValueError).
    """
    return _LAYER_NORM(x, weight, bias, residual, eps)


def layer_norm_reference(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                         eps: float = 1e-5, *, residual: torch.Tensor | None = None, upcast: bool = True):
    """`layer_norm` in plain torch: in float64 (upcast, h included), or as an eager model
    composes it: h = x + residual in x's dtype, mean, variance and affine map in float32,
    the result cast to x's dtype."""
    h = x if residual is None else (x.double() + residual.double() if upcast else x + residual)
    t = h.to(torch.float64 if upcast else torch.float32)
    centred = t - t.mean(-1, keepdim=True)
    y = centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(t.dtype)
    if bias is not None:
        y = y + bias.to(t.dtype)
    y = y if upcast else y.to(x.dtype)
    return y if residual is None else (y, h)
