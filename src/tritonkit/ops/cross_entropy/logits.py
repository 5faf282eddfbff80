"""`cross_entropy` for logits the caller already has: one read of the logits forward (loss
and each row's log-sum-exp), one read and one write backward (the gradient, from the saved
log-sum-exp; into the logits buffer itself with inplace_backward)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..._checks import check_tensor, check_writable_output
from ..._op import Op, tracing
from .kernel import (as_float_options, check_options, check_target, check_target_values, launch_rows, reduce_rows,
                     valid_count)


def cross_entropy_reference(logits: torch.Tensor, target: torch.Tensor, *, ignore_index: int = -100,
                            label_smoothing: float = 0.0, reduction: str = "mean", softcap: float | None = None,
                            upcast: bool = True) -> torch.Tensor:
    """F.cross_entropy of softcap(logits) (c * tanh(logits / c)), in float64 when upcast."""
    z = logits.double() if upcast else logits
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    return F.cross_entropy(z, target.long(), ignore_index=ignore_index, label_smoothing=label_smoothing,
                           reduction=reduction)


def _check(logits: object, target: object) -> None:
    check_tensor("logits", logits)
    if logits.dim() != 2:
        raise ValueError(f"logits has {logits.dim()} dims; expected (rows, classes) "
                         "(flatten leading dims first; 1-D logits are taken by the public function)")
    if logits.shape[1] == 0:
        raise ValueError("logits has 0 classes")
    check_target(target, logits.shape[0], "logits")


def cross_entropy_fwd(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                      label_smoothing: float = 0.0, reduction: str = "mean", softcap: float | None = None,
                      inplace_backward: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Launcher for the forward pass: (loss in logits' dtype, float64 log-sum-exp of each row's
    softcapped logits, which the backward reads: float64 so that it holds the row's max and the
    log of its sum apart, see the kernel). inplace_backward asks the backward to write
    the gradient over logits, so logits must be writable (not an expanded view)."""
    _check(logits, target)
    check_options(ignore_index, label_smoothing, reduction, softcap)
    if inplace_backward:
        check_writable_output("logits", logits)
    check_target_values(target, logits.shape[1], ignore_index)
    rows = logits.shape[0]
    loss_rows = torch.empty(rows, dtype=torch.float32, device=logits.device)
    lse = torch.empty(rows, dtype=torch.float64, device=logits.device)
    launch_rows(logits, target, ignore_index, label_smoothing, softcap, loss=loss_rows, lse=lse,
                name="cross_entropy_fwd")
    count = valid_count(target, ignore_index) if reduction == "mean" else None
    return reduce_rows(loss_rows, count, reduction).to(logits.dtype), lse


def cross_entropy_bwd(grad_loss: torch.Tensor, logits: torch.Tensor, target: torch.Tensor, lse: torch.Tensor,
                      ignore_index: int = -100, label_smoothing: float = 0.0, reduction: str = "mean",
                      softcap: float | None = None, inplace: bool = False) -> torch.Tensor:
    """Launcher for the backward pass: d(loss)/d(logits) for the upstream gradient grad_loss
    (0-d for mean and sum, one value a row for none), from the forward's lse. inplace: written
    over logits (whose autograd version is bumped) and logits returned."""
    _check(logits, target)
    check_tensor("grad_loss", grad_loss)
    rows = logits.shape[0]
    if grad_loss.shape != ((rows,) if reduction == "none" else ()):
        raise ValueError(f"grad_loss has shape {tuple(grad_loss.shape)}, which does not fit reduction={reduction!r} "
                         f"over {rows} rows")
    grad = logits if inplace else torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
    count = valid_count(target, ignore_index) if reduction == "mean" else None
    launch_rows(logits, target, ignore_index, label_smoothing, softcap, lse=lse, compute_lse=False,
                grad=grad, count=count, upstream=grad_loss, name="cross_entropy_bwd")
    if inplace:
        torch.autograd.graph.increment_version(logits)
    return grad


def _setup_context(ctx, inputs, output):
    logits, target, ignore_index, label_smoothing, reduction, softcap, inplace = inputs
    ctx.mark_non_differentiable(output[1])
    ctx.set_materialize_grads(False)  # lse's gradient is never read: no zero tensor for it
    ctx.save_for_backward(logits, target, output[1])
    ctx.options = (ignore_index, label_smoothing, reduction, softcap)
    ctx.inplace = inplace


def _backward(bwd, ctx, grad_loss, _grad_lse):
    # After an in-place backward, the logits' bumped version makes autograd refuse a second
    # backward through this graph (retain_graph) rather than read the gradient as logits.
    logits, target, lse = ctx.saved_tensors
    return bwd(grad_loss, logits, target, lse, *ctx.options, ctx.inplace), None, None, None, None, None, None


def _fake_fwd(logits, target, ignore_index, label_smoothing, reduction, softcap, inplace_backward):
    rows = logits.shape[0]
    shape = (rows,) if reduction == "none" else ()
    return logits.new_empty(shape), logits.new_empty((rows,), dtype=torch.float64)


def _op_check(logits, target, ignore_index, label_smoothing, reduction, softcap, inplace_backward):
    _check(logits, target)
    check_options(ignore_index, label_smoothing, reduction, softcap)
    return logits, target, ignore_index, label_smoothing, reduction, softcap, inplace_backward


_CROSS_ENTROPY = Op(
    "cross_entropy", forward=cross_entropy_fwd,
    forward_schema=("(Tensor logits, Tensor target, int ignore_index, float label_smoothing, str reduction, "
                    "float? softcap, bool inplace_backward) -> (Tensor, Tensor)"),
    forward_fake=_fake_fwd, setup_context=_setup_context, backward=_backward,
    backward_launcher=cross_entropy_bwd,
    backward_schema=("(Tensor grad_loss, Tensor logits, Tensor target, Tensor lse, int ignore_index, "
                     "float label_smoothing, str reduction, float? softcap, bool inplace) -> Tensor"),
    backward_fake=lambda grad_loss, logits, *rest: torch.empty_like(logits), check=_op_check)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, *, ignore_index: int = -100,
                  label_smoothing: float = 0.0, reduction: str = "mean", softcap: float | None = None,
                  inplace_backward: bool = False) -> torch.Tensor:
    """``F.cross_entropy(softcap(logits), target, ...)`` by one Triton kernel a pass,
    differentiable in logits.

    logits: (rows, classes) or (classes,), float32, float16 or bfloat16, any strides and view
    offset. target: int64 or int32, (rows,) or () for 1-D logits; class indices in
    [0, classes) or ignore_index. softcap: None, or c > 0 for c * tanh(logits / c) (Gemma 2's
    final-logit softcapping) before the loss. label_smoothing and reduction as in torch (no
    class weights); a mean over only ignored targets is NaN, as in torch. Arithmetic in
    float32; the loss has logits' dtype, as torch's.

    inplace_backward=True: the backward writes the gradient over ``logits`` instead of into a
    new tensor (saving a logits-sized buffer). The caller must not use ``logits`` after the
    backward has run; a second backward through the same graph raises (autograd sees the
    logits modified). Under
    torch.compile the gradient is a new tensor (a compiled graph may not write its inputs).

    Raises TypeError for a float target or other dtypes, ValueError for shape mismatches,
    bad options, and (where checking costs no host sync: CPU tensors) target values out of
    range; on a GPU those trigger a device-side assert, as torch's own op does.
    """
    if isinstance(logits, torch.Tensor) and logits.dim() == 1:
        if isinstance(target, torch.Tensor) and target.dim() != 0:
            raise ValueError(f"target has shape {tuple(target.shape)}; 1-D logits take a 0-d target")
        loss = cross_entropy(logits.unsqueeze(0), target.reshape(1), ignore_index=ignore_index,
                             label_smoothing=label_smoothing, reduction=reduction, softcap=softcap,
                             inplace_backward=inplace_backward)
        return loss.squeeze(0) if reduction == "none" else loss
    check_options(ignore_index, label_smoothing, reduction, softcap)
    label_smoothing, softcap = as_float_options(label_smoothing, softcap)
    inplace = bool(inplace_backward) and not tracing(logits, target)
    return _CROSS_ENTROPY(logits, target, ignore_index, label_smoothing, reduction, softcap, inplace)[0]
