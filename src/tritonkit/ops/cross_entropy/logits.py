"""`cross_entropy` for logits the caller already has: one read of the logits forward (loss
and each row's log-sum-exp), one read and one write backward (the gradient, from the saved
log-sum-exp; into the logits buffer itself with inplace_backward). One launch a pass: the
forward's kernel also counts the targets, checks them and reduces the loss (kernel.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..._checks import check_same_device, check_tensor, check_writable_output
from ..._counters import zeroed_counters
from ..._op import Op, tracing
from .kernel import (TARGET_DTYPES, Finish, as_float_options, check_options, check_target, check_target_values,
                     launch_rows, valid_count)
from . import sharding


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
                         "(the public function takes 1-D and (N, classes, d1, ...) logits too)")
    if logits.shape[1] == 0:
        raise ValueError("logits has 0 classes")
    check_target(target, logits.shape[0], "logits")
    check_same_device(logits=logits, target=target)


def cross_entropy_fwd(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                      label_smoothing: float = 0.0, reduction: str = "mean", softcap: float | None = None,
                      inplace_backward: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launcher for the forward pass: (loss in logits' dtype, float64 log-sum-exp of each row's
    softcapped logits, the int64 count of targets that are not ignore_index), the last two
    for the backward. lse is float64 so that it holds the row's max and the log of its sum
    apart (see the kernel). inplace_backward asks the backward to write the gradient over
    logits, so logits must be writable (not an expanded view). Out-of-range targets: a
    ValueError on the CPU, a device-side assert on a GPU (`check_target_values`)."""
    _check(logits, target)
    check_options(ignore_index, label_smoothing, reduction, softcap)
    if inplace_backward:
        check_writable_output("logits", logits)
    device = logits.device
    if device.type != "cuda":
        check_target_values(target, logits.shape[1], ignore_index)
    rows = logits.shape[0]
    lse = torch.empty(rows, dtype=torch.float64, device=device)
    count = torch.empty((), dtype=torch.int64, device=device)
    if reduction == "none":
        loss = loss_rows = torch.empty(rows, dtype=logits.dtype, device=device)
    else:
        loss = torch.empty((), dtype=logits.dtype, device=device)
        loss_rows = torch.empty(rows, dtype=torch.float32, device=device)
    if rows == 0:
        count.zero_()
        loss.fill_(float("nan") if reduction == "mean" else 0.0)   # torch's mean and sum of nothing
        return loss, lse, count
    ok = torch.empty((), dtype=torch.int32, device=device)
    finish = Finish(zeroed_counters(device).view(torch.int64), count, ok, None if reduction == "none" else loss,
                    reduction)
    launch_rows(logits, target, ignore_index, label_smoothing, softcap, loss=loss_rows, lse=lse, finish=finish,
                name="cross_entropy_fwd")
    if device.type == "cuda":
        # Reading ok on the host would wait for the GPU: a device-side assert instead, as
        # torch's own F.cross_entropy does (the next synchronising call fails loudly).
        torch._assert_async(ok, "target has class indices outside [0, n_classes) that are not ignore_index")
    return loss, lse, count


def cross_entropy_bwd(grad_loss: torch.Tensor, logits: torch.Tensor, target: torch.Tensor, lse: torch.Tensor,
                      ignore_index: int = -100, label_smoothing: float = 0.0, reduction: str = "mean",
                      softcap: float | None = None, inplace: bool = False,
                      count: torch.Tensor | None = None) -> torch.Tensor:
    """Launcher for the backward pass: d(loss)/d(logits) for the upstream gradient grad_loss
    (0-d for mean and sum, one value a row for none), from the forward's lse (and, for mean,
    its count of targets; counted again when not given). inplace: written over logits (whose
    autograd version is bumped) and logits returned."""
    _check(logits, target)
    check_tensor("grad_loss", grad_loss)
    rows = logits.shape[0]
    # float64, as the forward saves it: the kernel splits it into the row's max and log-sum.
    check_tensor("lse", lse, (torch.float64,))
    if lse.shape != (rows,):
        raise ValueError(f"lse has shape {tuple(lse.shape)}, expected ({rows},): the forward's log-sum-exp per row")
    if count is not None:
        check_tensor("count", count, (torch.int64, torch.int32))
        if count.dim() != 0:
            raise ValueError(f"count has shape {tuple(count.shape)}, expected (): the forward's count of targets")
    if grad_loss.shape != ((rows,) if reduction == "none" else ()):
        raise ValueError(f"grad_loss has shape {tuple(grad_loss.shape)}, which does not fit reduction={reduction!r} "
                         f"over {rows} rows")
    grad = logits if inplace else torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
    if reduction != "mean":
        count = None
    elif count is None:
        count = valid_count(target, ignore_index)
    launch_rows(logits, target, ignore_index, label_smoothing, softcap, lse=lse, compute_lse=False,
                grad=grad, count=count, upstream=grad_loss, name="cross_entropy_bwd")
    if inplace:
        torch.autograd.graph.increment_version(logits)
    return grad


def _setup_context(ctx, inputs, output):
    logits, target, ignore_index, label_smoothing, reduction, softcap, inplace = inputs
    ctx.set_materialize_grads(False)  # lse's and count's gradients are never read: no zeros for them
    ctx.save_for_backward(logits, target, output[1], output[2])
    ctx.options = (ignore_index, label_smoothing, reduction, softcap)
    ctx.inplace = inplace


def _backward(bwd, ctx, grad_loss, *_unused):
    # After an in-place backward, the logits' bumped version makes autograd refuse a second
    # backward through this graph (retain_graph) rather than read the gradient as logits.
    logits, target, lse, count = ctx.saved_tensors
    return bwd(grad_loss, logits, target, lse, *ctx.options, ctx.inplace, count), None, None, None, None, None, None


def _fake_fwd(logits, target, ignore_index, label_smoothing, reduction, softcap, inplace_backward):
    rows = logits.shape[0]
    shape = (rows,) if reduction == "none" else ()
    return (logits.new_empty(shape), logits.new_empty((rows,), dtype=torch.float64),
            logits.new_empty((), dtype=torch.int64))


def _op_check(logits, target, ignore_index, label_smoothing, reduction, softcap, inplace_backward):
    _check(logits, target)
    check_options(ignore_index, label_smoothing, reduction, softcap)
    return logits, target, ignore_index, label_smoothing, reduction, softcap, inplace_backward


_CROSS_ENTROPY = Op(
    "cross_entropy", forward=cross_entropy_fwd,
    forward_schema=("(Tensor logits, Tensor target, int ignore_index, float label_smoothing, str reduction, "
                    "float? softcap, bool inplace_backward) -> (Tensor, Tensor, Tensor)"),
    forward_fake=_fake_fwd, setup_context=_setup_context, backward=_backward,
    backward_launcher=cross_entropy_bwd,
    backward_schema=("(Tensor grad_loss, Tensor logits, Tensor target, Tensor lse, int ignore_index, "
                     "float label_smoothing, str reduction, float? softcap, bool inplace, Tensor? count=None) "
                     "-> Tensor"),
    backward_fake=lambda grad_loss, logits, *rest: torch.empty_like(logits), check=_op_check,
    returns=lambda *args: 1, forward_sharding=sharding.cross_entropy_fwd_sharding,
    backward_sharding=sharding.cross_entropy_bwd_sharding)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, *, ignore_index: int = -100,
                  label_smoothing: float = 0.0, reduction: str = "mean", softcap: float | None = None,
                  inplace_backward: bool = False) -> torch.Tensor:
    """``F.cross_entropy(softcap(logits), target, ...)`` by one Triton kernel a pass,
    differentiable in logits.

    logits: (rows, classes), (classes,) or, as torch takes them, (N, classes, d1, ..., dk),
    float32, float16 or bfloat16, any strides and view offset (the last form is read as rows
    of classes: a copy unless the class dim is innermost in memory). target: int64 or int32,
    (rows,), () for 1-D logits, (N, d1, ..., dk) for the last form; class indices in
    [0, classes) or ignore_index; reduction="none" gives target's shape. softcap: None, or
    c > 0 for c * tanh(logits / c) (Gemma 2's final-logit softcapping) before the loss.
    label_smoothing and reduction as in torch (no class weights); a mean over only ignored
    targets is NaN, as in torch. Arithmetic in float32; the loss has logits' dtype, as torch's.

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
    if isinstance(logits, torch.Tensor) and logits.dim() > 2:
        check_tensor("target", target, TARGET_DTYPES)
        expected = (logits.shape[0], *logits.shape[2:])
        if tuple(target.shape) != expected:
            raise ValueError(f"target has shape {tuple(target.shape)}; logits of shape {tuple(logits.shape)} "
                             f"(N, classes, d1, ...) take a target of shape {expected}")
        loss = cross_entropy(logits.movedim(1, -1).reshape(-1, logits.shape[1]), target.reshape(-1),
                             ignore_index=ignore_index, label_smoothing=label_smoothing, reduction=reduction,
                             softcap=softcap, inplace_backward=inplace_backward)
        return loss.reshape(target.shape) if reduction == "none" else loss
    check_options(ignore_index, label_smoothing, reduction, softcap)
    label_smoothing, softcap = as_float_options(label_smoothing, softcap)
    inplace = bool(inplace_backward) and not tracing(logits, target)
    return _CROSS_ENTROPY(logits, target, ignore_index, label_smoothing, reduction, softcap, inplace)
