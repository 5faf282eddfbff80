"""`distill_loss`: forward KL, reverse KL or generalized JSD between a student's and a
teacher's head, token by token, without either's (tokens x vocabulary) logits.

The chunk loop (cross_entropy/chunks.py) makes each chunk of the student's logits; the rows
callback makes the same tokens' teacher logits into a second buffer (a fourth product, the
teacher's own forward, which nothing differentiates) and runs the distillation row kernel
(distill_kernel.py has the math) over both. For mean and sum the gradient's upstream factor is
known in the forward (1 / count, or 1), so the kernel writes dlogits there and the chunk loop
makes the student's gradients: products 1 to 4, the backward only scales them (`_fused.py`).
For reduction="none" each token's upstream gradient comes in the backward, which recomputes
both chunks (as `linear_cross_entropy` does for "none"). Memory beyond the inputs: two chunk
buffers, the gradients, and 24 bytes a token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..._autocast import autocast_inputs
from ..._checks import check_same_device, check_tensor, checked_arguments, optional_tensor
from ..._op import Op
from ..cross_entropy.chunks import check_chunk_tokens, check_head, chunk_buffer, chunk_loop, head_logits
from ..cross_entropy.kernel import REDUCTIONS, check_target
from ..cross_entropy.scale import scale_gradients
from ._fused import gradient_outputs, grad_fakes, requires_grads
from ._sequences import LOSS_OPTION_TYPES, check_choice, check_number
from .distill_kernel import KINDS, kind_for, launch_distill_rows
from . import sharding


def distill_loss_reference(hidden, weight, teacher_hidden, teacher_weight, *, target=None, bias=None,
                           teacher_bias=None, kind="jsd", beta=0.5, temperature=1.0, ignore_index=-100,
                           reduction="mean", upcast=True):
    """The divergence from the log-softmax of both heads' logits, as TRL's generalized JSD
    writes it; in float64 throughout when upcast, else from logits in each head's dtype."""
    def log_probs(h, w, b):
        if upcast:
            h, w, b = h.double(), w.double(), None if b is None else b.double()
        z = F.linear(h.reshape(-1, h.shape[-1]), w, b)
        return torch.log_softmax((z.double() if upcast else z.float()) / temperature, dim=-1)

    s, t = log_probs(hidden, weight, bias), log_probs(teacher_hidden, teacher_weight, teacher_bias)
    if kind == "forward_kl" or (kind == "jsd" and beta == 0.0):
        per_token = F.kl_div(s, t, reduction="none", log_target=True).sum(-1)
    elif kind == "reverse_kl" or (kind == "jsd" and beta == 1.0):
        per_token = F.kl_div(t, s, reduction="none", log_target=True).sum(-1)
    else:
        log_m = torch.logsumexp(torch.stack([s + torch.log(torch.tensor(1 - beta, dtype=s.dtype)),
                                             t + torch.log(torch.tensor(beta, dtype=s.dtype))]), dim=0)
        per_token = (beta * F.kl_div(log_m, t, reduction="none", log_target=True).sum(-1)
                     + (1 - beta) * F.kl_div(log_m, s, reduction="none", log_target=True).sum(-1))
    valid = torch.ones_like(per_token, dtype=torch.bool) if target is None else target.reshape(-1) != ignore_index
    per_token = torch.where(valid, per_token, torch.zeros_like(per_token))
    if reduction == "none":
        return per_token.reshape(hidden.shape[:-1])
    total = per_token.sum()
    return total / valid.sum().clamp(min=1) if reduction == "mean" else total


def _check(hidden, weight, target, bias, teacher_hidden, teacher_weight, teacher_bias, chunk_tokens):
    check_head(hidden, weight, bias, chunk_tokens)
    check_tensor("teacher_hidden", teacher_hidden)
    check_tensor("teacher_weight", teacher_weight)
    n, vocab = hidden.shape[0], weight.shape[0]
    if teacher_hidden.dim() != 2 or teacher_hidden.shape[0] != n:
        raise ValueError(f"teacher_hidden has shape {tuple(teacher_hidden.shape)}; expected ({n}, teacher hidden)")
    if teacher_weight.dim() != 2 or teacher_weight.shape != (vocab, teacher_hidden.shape[1]):
        raise ValueError(f"teacher_weight has shape {tuple(teacher_weight.shape)}; expected ({vocab}, "
                         f"{teacher_hidden.shape[1]}): the student's vocabulary and the teacher's hidden size")
    if teacher_weight.dtype != teacher_hidden.dtype:
        raise TypeError("teacher_weight and teacher_hidden must have one dtype")
    if teacher_bias is not None:
        check_tensor("teacher_bias", teacher_bias)
        if teacher_bias.shape != (vocab,) or teacher_bias.dtype != teacher_hidden.dtype:
            raise ValueError(f"teacher_bias must have shape ({vocab},) and teacher_hidden's dtype")
    check_target(target, n, "hidden")
    check_same_device(hidden=hidden, target=target, teacher_hidden=teacher_hidden, teacher_weight=teacher_weight)


def _check_options(kind, beta, temperature, ignore_index, reduction):
    check_choice("kind", kind, KINDS)
    check_number("beta", beta, low=0.0, high=1.0)
    check_number("temperature", temperature, positive=True)
    if not isinstance(ignore_index, int) or isinstance(ignore_index, bool):
        raise TypeError(f"ignore_index must be an int, got {type(ignore_index).__name__}")
    check_choice("reduction", reduction, REDUCTIONS)


def _chunked(hidden, weight, target, bias, teacher_hidden, teacher_weight, teacher_bias, kind, beta, temperature,
             ignore_index, chunk_tokens, want, *, lse, teacher_lse, aux, loss=None, scale=None):
    """The chunk loop over both heads: the kernel's statistics (with `loss`) and the gradient
    (with `scale`: 0-d, or one a token) over each student chunk."""
    teacher_buffer = []
    code = kind_for(kind, beta)

    def rows(logits, start, end):
        if not teacher_buffer:   # the first chunk is the largest
            teacher_buffer.append(chunk_buffer(end - start, logits.shape[1], end - start, teacher_hidden)[0])
        teacher = head_logits(teacher_hidden[start:end], teacher_weight, teacher_bias,
                              teacher_buffer[0][: end - start])
        part = slice(start, end)
        launch_distill_rows(logits, teacher, target[part], ignore_index, code, beta, temperature, lse=lse[part],
                            teacher_lse=teacher_lse[part], aux=aux[part], loss=None if loss is None else loss[part],
                            scale=None if scale is None else scale if scale.dim() == 0 else scale[part])

    return chunk_loop(hidden, weight, bias, chunk_tokens, want, rows)


def linear_distill_loss_fwd(hidden, weight, target, bias, teacher_hidden, teacher_weight, teacher_bias,
                            kind: str = "jsd", beta: float = 0.5, temperature: float = 1.0, ignore_index: int = -100,
                            reduction: str = "mean", want_hidden: bool = False, want_weight: bool = False,
                            want_bias: bool = False, chunk_tokens: int | None = None):
    """Launcher for the forward pass. hidden (T, H), weight (V, H), target (T,), bias (V,);
    teacher_hidden (T, H_t), teacher_weight (V, H_t), teacher_bias (V,). Returns (loss (fp32, 0-d
    or (T,)), lse, teacher_lse (fp64), aux (fp32), grad_hidden, grad_weight, grad_bias): for mean
    and sum the gradients wanted (for an upstream gradient of 1), for none empty (the backward
    makes them from the statistics)."""
    _check(hidden, weight, target, bias, teacher_hidden, teacher_weight, teacher_bias, chunk_tokens)
    _check_options(kind, beta, temperature, ignore_index, reduction)
    n, device = hidden.shape[0], hidden.device
    loss_rows = torch.empty(n, dtype=torch.float32, device=device)
    lse, teacher_lse = (torch.empty(n, dtype=torch.float64, device=device) for _ in range(2))
    aux = torch.empty(n, dtype=torch.float32, device=device)
    count = (target != ignore_index).sum().clamp(min=1)
    none = reduction == "none"
    want = (False,) * 3 if none else (want_hidden, want_weight, want_bias and bias is not None)
    scale = None
    if any(want):
        scale = (1.0 / count.to(torch.float32)) if reduction == "mean" else torch.ones((), device=device)
    grads = _chunked(hidden, weight, target, bias, teacher_hidden, teacher_weight, teacher_bias, kind, beta,
                     temperature, ignore_index, chunk_tokens, want, lse=lse, teacher_lse=teacher_lse, aux=aux,
                     loss=loss_rows, scale=scale)
    loss = loss_rows if none else loss_rows.sum() / count if reduction == "mean" else loss_rows.sum()
    return (loss, lse, teacher_lse, aux, *gradient_outputs(grads, hidden))


def linear_distill_loss_bwd(grad_loss, hidden, weight, target, bias, teacher_hidden, teacher_weight, teacher_bias,
                            lse, teacher_lse, aux, grad_hidden, grad_weight, grad_bias, kind: str = "jsd",
                            beta: float = 0.5, temperature: float = 1.0, ignore_index: int = -100,
                            reduction: str = "mean", want_hidden: bool = True, want_weight: bool = True,
                            want_bias: bool = True, chunk_tokens: int | None = None, *, in_place: bool = False):
    """Launcher for the backward pass: (grad_hidden, grad_weight, grad_bias), empty where not
    wanted. Mean and sum: the forward's gradients times the 0-d grad_loss (`scale_gradients`).
    None: both heads' chunks recomputed, each row's gradient scaled by its grad_loss."""
    if reduction != "none":
        if grad_loss.dim() != 0:
            raise ValueError(f"grad_loss has shape {tuple(grad_loss.shape)}; reduction={reduction!r} gives a 0-d loss")
        return scale_gradients(grad_loss, (grad_hidden, grad_weight, grad_bias), in_place)
    _check(hidden, weight, target, bias, teacher_hidden, teacher_weight, teacher_bias, chunk_tokens)
    if grad_loss.shape != (hidden.shape[0],):
        raise ValueError(f"grad_loss has shape {tuple(grad_loss.shape)}; expected ({hidden.shape[0]},)")
    want = (want_hidden, want_weight, want_bias and bias is not None)
    grads = _chunked(hidden, weight, target, bias, teacher_hidden, teacher_weight, teacher_bias, kind, beta,
                     temperature, ignore_index, chunk_tokens, want, lse=lse, teacher_lse=teacher_lse, aux=aux,
                     scale=grad_loss.to(torch.float32).contiguous())
    return gradient_outputs(grads, hidden)


def _setup_context(ctx, inputs, output):
    *tensors, kind, beta, temperature, ignore_index, reduction, want_h, want_w, want_b, chunk_tokens = inputs
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(*tensors, *output[1:])
    ctx.options = (kind, beta, temperature, ignore_index, reduction, want_h, want_w, want_b, chunk_tokens)
    ctx.wants = (want_h, want_w, want_b and tensors[3] is not None)


def _backward(bwd, ctx, grad_loss, *_):
    if grad_loss is None:
        return (None,) * 16
    grads = bwd(grad_loss, *ctx.saved_tensors, *ctx.options)
    return (grads[0] if ctx.wants[0] else None, grads[1] if ctx.wants[1] else None, None,
            grads[2] if ctx.wants[2] else None, *([None] * 12))


def _fake_fwd(hidden, weight, target, bias, teacher_hidden, teacher_weight, teacher_bias, kind, beta, temperature,
              ignore_index, reduction, want_hidden, want_weight, want_bias, chunk_tokens):
    n = hidden.shape[0]
    f32, f64 = (dict(dtype=d, device=hidden.device) for d in (torch.float32, torch.float64))
    none = reduction == "none"
    wants = (False,) * 3 if none else (want_hidden, want_weight, want_bias)
    return (torch.empty(n if none else (), **f32), torch.empty(n, **f64), torch.empty(n, **f64),
            torch.empty(n, **f32), *grad_fakes(hidden, weight, bias, wants))


def _fake_bwd(grad_loss, hidden, weight, target, bias, teacher_hidden, teacher_weight, teacher_bias, lse, teacher_lse,
              aux, grad_hidden, grad_weight, grad_bias, kind, beta, temperature, ignore_index, reduction,
              want_hidden, want_weight, want_bias, chunk_tokens):
    if reduction != "none":
        return tuple(torch.empty_like(g) for g in (grad_hidden, grad_weight, grad_bias))
    return grad_fakes(hidden, weight, bias, (want_hidden, want_weight, want_bias))


def _op_check(*args):
    _check(*args[:7], args[-1])
    _check_options(*args[7:12])
    return args


_TENSORS = ("Tensor hidden, Tensor weight, Tensor target, Tensor? bias, Tensor teacher_hidden, Tensor teacher_weight, "
            "Tensor? teacher_bias")
_OPTIONS = ("str kind, float beta, float temperature, int ignore_index, str reduction, bool want_hidden, "
            "bool want_weight, bool want_bias, int? chunk_tokens")
_LINEAR_DISTILL_LOSS = Op(
    "linear_distill_loss", forward=linear_distill_loss_fwd,
    forward_schema=f"({_TENSORS}, {_OPTIONS}) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)",
    forward_fake=_fake_fwd, setup_context=_setup_context, backward=_backward,
    backward_launcher=linear_distill_loss_bwd,
    backward_schema=(f"(Tensor grad_loss, {_TENSORS}, Tensor lse, Tensor teacher_lse, Tensor aux, "
                     f"Tensor grad_hidden, Tensor grad_weight, Tensor grad_bias, {_OPTIONS}) "
                     "-> (Tensor, Tensor, Tensor)"),
    backward_fake=_fake_bwd, eager_backward_launcher=lambda *args: linear_distill_loss_bwd(*args, in_place=True),
    check=_op_check, returns=lambda *args: 1, forward_sharding=sharding.linear_distill_loss_fwd_sharding,
    backward_sharding=sharding.linear_distill_loss_bwd_sharding)


@checked_arguments(**LOSS_OPTION_TYPES, teacher_weight=check_tensor, teacher_bias=optional_tensor)
def distill_loss(hidden: torch.Tensor, weight: torch.Tensor, teacher_hidden: torch.Tensor,
                 teacher_weight: torch.Tensor, *, target: torch.Tensor | None = None, kind: str = "jsd",
                 beta: float = 0.5, temperature: float = 1.0, bias: torch.Tensor | None = None,
                 teacher_bias: torch.Tensor | None = None, ignore_index: int = -100, reduction: str = "mean",
                 chunk_tokens: int | None = None) -> torch.Tensor:
    """A divergence between the student's softmax(F.linear(hidden, weight, bias) / temperature)
    and the teacher's, token by token, without either's (tokens x vocabulary) logits;
    differentiable in the student's hidden, weight and bias (the teacher is frozen: no gradient
    flows to its tensors).

    hidden: (..., H) and teacher_hidden: (..., H_t) of the same tokens; weight (V, H), bias
    (V,) in hidden's dtype; teacher_weight (V, H_t), teacher_bias (V,) in teacher_hidden's
    dtype (the vocabularies must match). kind: "forward_kl" KL(teacher || student), the usual
    distillation loss; "reverse_kl" KL(student || teacher); "jsd": the generalized
    Jensen-Shannon divergence with mixture M = beta * teacher + (1 - beta) * student, TRL's GKD
    and Liger's JSD, whose beta 0 and 1 are the forward and the reverse KL. target: None (every
    token scored) or hidden.shape[:-1] int, ignore_index where a token is not scored (only its
    mask is read). reduction: "mean" over the scored tokens (0 when there are none), "sum", or
    "none" (float32 of hidden.shape[:-1], 0 at unscored tokens). Inside a torch.autocast region
    both heads are cast to its dtype first. Logits are rounded to each head's dtype as F.linear
    rounds them, everything after in float32.
    """
    hidden, weight, bias = autocast_inputs(hidden, weight, bias)
    teacher_hidden, teacher_weight, teacher_bias = autocast_inputs(teacher_hidden, teacher_weight, teacher_bias)
    check_tensor("hidden", hidden)
    check_tensor("teacher_hidden", teacher_hidden)
    if hidden.dim() == 0 or teacher_hidden.shape[:-1] != hidden.shape[:-1]:
        raise ValueError(f"teacher_hidden has shape {tuple(teacher_hidden.shape)} but hidden has "
                         f"{tuple(hidden.shape)}: they must hold the same tokens")
    shape = hidden.shape[:-1]
    if target is None:
        target = torch.zeros(shape, dtype=torch.int64, device=hidden.device)
        ignore_index = -1
    check_tensor("target", target, (torch.int64, torch.int32))
    if target.shape != shape:
        raise ValueError(f"target has shape {tuple(target.shape)}; expected hidden's without its last dim, {tuple(shape)}")
    _check_options(kind, beta, temperature, ignore_index, reduction)
    check_chunk_tokens(chunk_tokens)
    teacher = [t.detach() if t is not None else None for t in (teacher_hidden, teacher_weight, teacher_bias)]
    loss = _LINEAR_DISTILL_LOSS(hidden.reshape(-1, hidden.shape[-1]), weight, target.reshape(-1), bias,
                                teacher[0].reshape(-1, teacher[0].shape[-1]), teacher[1], teacher[2], kind,
                                float(beta), float(temperature), ignore_index, reduction,
                                *requires_grads(hidden, weight, bias), chunk_tokens)
    return loss.reshape(shape) if reduction == "none" else loss
