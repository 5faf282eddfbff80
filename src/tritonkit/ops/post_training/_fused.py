"""The plumbing of a fused loss whose gradients are made in its forward.

A loss that is a weighted sum of per-token terms knows each token's upstream gradient (its
weight times the term's derivative) as soon as the chunk's log-probabilities are known, so the
chunk loop writes dlogits straight away and makes grad_hidden, grad_weight and grad_bias in the
forward: three matrix products, no recomputation. The backward only multiplies them by the
0-d upstream gradient (`scale_gradients`: in place on the eager road, without a host read
while a CUDA graph is captured), as `linear_cross_entropy` does for mean and sum.
"""

from __future__ import annotations

import torch

from ..._checks import check_tensor
from ..._op import not_computed
from ..cross_entropy.scale import scale_gradients

GRADS_SCHEMA = "(Tensor grad_loss, Tensor grad_hidden, Tensor grad_weight, Tensor grad_bias) -> (Tensor, Tensor, Tensor)"


def saved_gradients_bwd(grad_loss: torch.Tensor, grad_hidden: torch.Tensor, grad_weight: torch.Tensor,
                        grad_bias: torch.Tensor, *, in_place: bool = False):
    """Launcher for the backward pass of a fused loss: the forward's gradients (empty where not
    made) times the 0-d grad_loss."""
    if grad_loss.dim() != 0:
        raise ValueError(f"grad_loss has shape {tuple(grad_loss.shape)}; the loss is 0-d")
    return scale_gradients(grad_loss, (grad_hidden, grad_weight, grad_bias), in_place)


def saved_gradients_fake(grad_loss, grad_hidden, grad_weight, grad_bias):
    return tuple(torch.empty_like(g) for g in (grad_hidden, grad_weight, grad_bias))


def eager_saved_gradients_bwd(*args):
    return saved_gradients_bwd(*args, in_place=True)


def grad_fakes(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, wants) -> tuple:
    """The gradients a fused forward returns (empty placeholders where not wanted), as fakes."""
    return (torch.empty(hidden.shape, dtype=hidden.dtype, device=hidden.device) if wants[0] else not_computed(hidden),
            torch.empty_like(weight) if wants[1] else not_computed(hidden),
            torch.empty_like(bias) if wants[2] and bias is not None else not_computed(hidden))


def gradient_outputs(grads: tuple, hidden: torch.Tensor) -> tuple:
    """The chunk loop's gradients, with empty placeholders for those not made."""
    return tuple(not_computed(hidden) if g is None else g for g in grads)


def per_token(name: str, t: torch.Tensor | None, n: int, like: torch.Tensor,
              dtype: torch.dtype = torch.float32) -> torch.Tensor | None:
    """An optional per-token float tensor of shape (n,), in `dtype`, contiguous."""
    if t is None:
        return None
    check_tensor(name, t, (torch.float64, torch.float32, torch.float16, torch.bfloat16))
    if t.shape != (n,):
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected ({n},): one value a token")
    if t.device != like.device:
        raise ValueError(f"{name} is on {t.device} but hidden is on {like.device}")
    return t.to(dtype).contiguous()


def requires_grads(hidden, weight, bias) -> list[bool]:
    """Which of hidden, weight and bias autograd will want a gradient of."""
    on = torch.is_grad_enabled()
    return [on and isinstance(t, torch.Tensor) and t.requires_grad for t in (hidden, weight, bias)]
