"""LayerNorm, `y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias`, forward and backward,
with the pre-norm block's residual add fused in. The kernels are shared with RMSNorm
(`_kernels.py`, whose docstring gives the math; `_rows.py`, the launch plan and the memory floor)."""

from __future__ import annotations

import torch

from ..._op import Op
from ._rows import check_eps, check_inputs, norm_bwd, norm_fwd
from ._sharding import sharding
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


def _fwd_fake(x, weight, bias, residual, eps):
    stats = x.shape[:-1]
    return (x.new_empty(x.shape), x.new_empty(x.shape if residual is not None else (0,)),
            x.new_empty(stats, dtype=torch.float32), x.new_empty(stats, dtype=torch.float32))


def _bwd_fake(dy, dh, h, weight, bias, mean, rstd):
    return (h.new_empty(h.shape), *(t.new_empty(t.shape) if t is not None else h.new_empty((0,))
                                    for t in (weight, bias)))


def _setup_context(ctx, inputs, output):
    x, weight, bias, residual, eps = inputs
    _, h, mean, rstd = output
    ctx.has_residual = residual is not None
    ctx.set_materialize_grads(False)  # as in rms_norm: no zero gradients allocated for unused outputs
    ctx.save_for_backward(h if ctx.has_residual else x, weight, bias, mean, rstd)


def _backward(bwd, ctx, dy, dh, _dmean, _drstd):
    h, weight, bias, mean, rstd = ctx.saved_tensors
    dy = torch.zeros_like(h) if dy is None else dy
    dx, dw, db = bwd(dy, dh if ctx.has_residual else None, h, weight, bias, mean, rstd)
    return (dx, dw if weight is not None else None, db if bias is not None else None,
            dx if ctx.has_residual else None, None)


def _returns(x, weight, bias, residual, eps):
    return 1 if residual is None else 2  # y, or (y, h); mean and rstd stay for the backward


def _check(x, weight, bias, residual, eps):
    check_inputs(x, residual, weight, bias)
    return x, weight, bias, residual, check_eps(eps)


_FWD_SHARDING, _BWD_SHARDING = sharding("layer_norm", ("weight", "bias"), 2)
_LAYER_NORM = Op(
    "layer_norm", forward=layer_norm_fwd,
    forward_schema=("(Tensor x, Tensor? weight, Tensor? bias, Tensor? residual, float eps) "
                    "-> (Tensor, Tensor, Tensor, Tensor)"),
    forward_fake=_fwd_fake, setup_context=_setup_context, backward=_backward,
    backward_launcher=layer_norm_bwd,
    backward_schema=("(Tensor dy, Tensor? dh, Tensor h, Tensor? weight, Tensor? bias, Tensor mean, "
                     "Tensor rstd) -> (Tensor, Tensor, Tensor)"),
    backward_fake=_bwd_fake, eager_backward_launcher=_layer_norm_bwd, check=_check,
    returns=_returns, eager_forward=_layer_norm_fwd,
    forward_sharding=_FWD_SHARDING, backward_sharding=_BWD_SHARDING)


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
