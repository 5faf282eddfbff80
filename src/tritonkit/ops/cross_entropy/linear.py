"""`linear_cross_entropy`: the loss of a linear head without its (tokens x vocabulary) logits.

Tokens are taken CHUNK_BYTES of logits at a time by the chunk loop (chunks.py): for each
chunk the logits by cuBLAS, then the cross-entropy row kernel (loss_c, and dlogits written over
the logits: each row read twice), then grad_hidden and grad_weight by cuBLAS. For mean and sum the gradients are made during the forward (for an
upstream gradient of 1; the count of non-ignored targets is reduced on the device first, so
nothing waits for the host) and the backward scales them by the upstream scalar. For
reduction="none" the upstream gradient differs per token and multiplies rows of dlogits
before both products, so the forward keeps only each row's log-sum-exp and the backward
recomputes the chunks' logits: a fourth matrix product, the price of exact gradients there.

Memory (bf16, vocabulary V, hidden H, T tokens): grad_weight V*H*2 bytes (the output itself),
grad_hidden T*H*2, and one chunk buffer (chunk_tokens rows, by default CHUNK_BYTES): at
V = 128256, H = 4096, T = 8192, 0.98 GiB + 64 MiB + 500 MiB (2048 tokens of 250.5 KiB). The
eager backward returns those same gradients (no second buffer). grad_weight is accumulated
in weight's dtype: an fp32 accumulator would double the largest term.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from ..._autocast import autocast_inputs
from ..._checks import check_same_device, check_tensor
from ..._op import Op, not_computed
from .chunks import CHUNK_BYTES, check_chunk_tokens, check_head, chunk_loop, chunk_tokens_for
from .kernel import as_float_options, check_options, check_target, check_target_values, launch_rows, reduce_rows, valid_count
from .scale import scale_gradients
from . import sharding

__all__ = ["CHUNK_BYTES", "chunk_tokens_for", "linear_cross_entropy", "linear_cross_entropy_bwd",
           "linear_cross_entropy_fwd", "linear_cross_entropy_reference"]

def linear_cross_entropy_reference(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, *,
                                   bias: torch.Tensor | None = None, ignore_index: int = -100,
                                   label_smoothing: float = 0.0, reduction: str = "mean",
                                   softcap: float | None = None, upcast: bool = True) -> torch.Tensor:
    """F.cross_entropy(softcap(F.linear(hidden, weight, bias).float()), target, ...) on the
    flattened rows; in float64 throughout when upcast."""
    if upcast:
        hidden, weight = hidden.double(), weight.double()
        bias = None if bias is None else bias.double()
    z = F.linear(hidden.reshape(-1, hidden.shape[-1]), weight, bias)
    z = z.double() if upcast else z.float()
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    loss = F.cross_entropy(z, target.reshape(-1).long(), ignore_index=ignore_index, label_smoothing=label_smoothing,
                           reduction=reduction)
    return loss.reshape(target.shape) if reduction == "none" else loss


def _check(hidden, weight, target, bias, chunk_tokens):
    check_head(hidden, weight, bias, chunk_tokens)
    check_target(target, hidden.shape[0], "hidden")
    check_same_device(hidden=hidden, target=target)


def _vocab_sharded(weight: torch.Tensor) -> bool:
    # A DTensor weight sharded along its rows (a tensor-parallel lm_head) takes the
    # vocabulary-parallel path (tritonkit.ops.cross_entropy.vocab_parallel); nothing is imported
    # for plain tensors.
    if "torch.distributed.tensor" not in sys.modules:
        return False
    from .vocab_parallel import vocab_sharded
    return vocab_sharded(weight)


def _chunked(hidden, weight, target, bias, ignore_index, label_smoothing, softcap, chunk_tokens,
             want, *, loss=None, lse=None, count=None, upstream=None):
    """The chunk loop with the cross-entropy row kernel: loss and lse, or, with lse given and no
    loss, only the gradient, written over each chunk's logits when any of `want` (hidden,
    weight, bias flags) is set. Returns (grad_hidden, grad_weight, grad_bias), None where not
    wanted."""
    any_grad = any(want)

    def rows(logits, start, end):
        launch_rows(logits, target[start:end], ignore_index, label_smoothing, softcap,
                    loss=None if loss is None else loss[start:end], lse=None if lse is None else lse[start:end],
                    compute_lse=loss is not None, grad=logits if any_grad else None, count=count,
                    upstream=None if upstream is None else upstream[start:end], name="linear_cross_entropy")

    return chunk_loop(hidden, weight, bias, chunk_tokens, want, rows)


def linear_cross_entropy_fwd(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                             bias: torch.Tensor | None = None, ignore_index: int = -100,
                             label_smoothing: float = 0.0, reduction: str = "mean", softcap: float | None = None,
                             want_hidden: bool = False, want_weight: bool = False, want_bias: bool = False,
                             chunk_tokens: int | None = None):
    """Launcher for the forward pass. hidden (T, H), weight (V, H), target (T,), bias (V,).
    Returns (loss (fp32; () or (T,)), lse, grad_hidden, grad_weight, grad_bias). For mean and
    sum the gradients asked for by the three want_ flags are those for an upstream gradient of 1;
    for none the gradients wait for the backward and lse holds each row's log-sum-exp (float64,
    see the row kernel). Outputs not computed are empty. chunk_tokens: tokens per chunk
    (default: CHUNK_BYTES of logits)."""
    _check(hidden, weight, target, bias, chunk_tokens)
    check_options(ignore_index, label_smoothing, reduction, softcap)
    check_target_values(target, weight.shape[0], ignore_index)
    n_tokens = hidden.shape[0]
    loss_rows = torch.empty(n_tokens, dtype=torch.float32, device=hidden.device)
    count = valid_count(target, ignore_index) if reduction == "mean" else None
    none = reduction == "none"
    lse = torch.empty(n_tokens, dtype=torch.float64, device=hidden.device) if none else None  # see the kernel
    want = (False, False, False) if none else (want_hidden, want_weight, want_bias and bias is not None)
    grads = _chunked(hidden, weight, target, bias, ignore_index, label_smoothing, softcap, chunk_tokens, want,
                     loss=loss_rows, lse=lse, count=count)
    loss = reduce_rows(loss_rows, count, reduction)
    return (loss, not_computed(loss_rows) if lse is None else lse, *(not_computed(hidden) if g is None else g for g in grads))


def linear_cross_entropy_bwd(grad_loss: torch.Tensor, hidden: torch.Tensor, weight: torch.Tensor,
                             target: torch.Tensor, bias: torch.Tensor | None, lse: torch.Tensor,
                             grad_hidden: torch.Tensor, grad_weight: torch.Tensor, grad_bias: torch.Tensor,
                             ignore_index: int = -100, label_smoothing: float = 0.0, reduction: str = "mean",
                             softcap: float | None = None, want_hidden: bool = True, want_weight: bool = True,
                             want_bias: bool = True, chunk_tokens: int | None = None, *, in_place: bool = False):
    """Launcher for the backward pass: (grad_hidden, grad_weight, grad_bias), empty where not
    wanted. Mean and sum: the forward's gradients times the 0-d grad_loss. With in_place (the
    eager road) grad_loss is read on the host (one sync; not while a CUDA graph is captured) and
    the forward's tensors are returned themselves, untouched when it is 1 and multiplied in
    place otherwise: no second weight-sized buffer. Without (the custom op), new tensors.
    While a CUDA graph is captured, on both roads, the scale is read on the device instead.
    None: the chunks are recomputed and each row's dlogits scaled by its grad_loss before the
    products."""
    if reduction != "none":
        if grad_loss.dim() != 0:
            raise ValueError(f"grad_loss has shape {tuple(grad_loss.shape)}; reduction={reduction!r} gives a 0-d loss")
        return scale_gradients(grad_loss, (grad_hidden, grad_weight, grad_bias), in_place)
    _check(hidden, weight, target, bias, chunk_tokens)
    if grad_loss.shape != (hidden.shape[0],):
        raise ValueError(f"grad_loss has shape {tuple(grad_loss.shape)}; expected ({hidden.shape[0]},) for "
                         "reduction='none'")
    want = (want_hidden, want_weight, want_bias and bias is not None)
    grads = _chunked(hidden, weight, target, bias, ignore_index, label_smoothing, softcap, chunk_tokens, want,
                     lse=lse, upstream=grad_loss)
    return tuple(not_computed(hidden) if g is None else g for g in grads)


def _setup_context(ctx, inputs, output):
    hidden, weight, target, bias, *options, want_h, want_w, want_b, chunk_tokens = inputs
    ctx.mark_non_differentiable(*output[1:])
    # The backward reads only the loss's gradient: without this, autograd would allocate and
    # fill a zero tensor for each other output, grad_weight's size among them, every call.
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(hidden, weight, target, bias, *output[1:])
    ctx.options = (*options, want_h, want_w, want_b, chunk_tokens)
    ctx.wants = (want_h, want_w, want_b and bias is not None)


def _backward(bwd, ctx, grad_loss, *_):
    # The eager launcher returns the saved gradients themselves, scaled in place when the
    # upstream gradient is not 1 (mul_ bumps their version: a second backward through the same
    # graph is then refused by autograd, not wrong; so is one after the caller modified a
    # returned gradient in place, e.g. an optimizer step on weight.grad).
    grads = bwd(grad_loss, *ctx.saved_tensors, *ctx.options)
    return (*(g if w else None for g, w in zip(grads[:2], ctx.wants[:2])), None,
            grads[2] if ctx.wants[2] else None, *([None] * 8))


def _grad_fakes(hidden, weight, bias, wants):
    return (torch.empty(hidden.shape, dtype=hidden.dtype, device=hidden.device) if wants[0] else not_computed(hidden),
            torch.empty_like(weight) if wants[1] else not_computed(hidden),
            torch.empty_like(bias) if wants[2] and bias is not None else not_computed(hidden))


def _fake_fwd(hidden, weight, target, bias, ignore_index, label_smoothing, reduction, softcap,
              want_hidden, want_weight, want_bias, chunk_tokens):
    n = hidden.shape[0]
    f32 = dict(dtype=torch.float32, device=hidden.device)
    if reduction == "none":
        return (torch.empty(n, **f32), torch.empty(n, dtype=torch.float64, device=hidden.device),
                *_grad_fakes(hidden, weight, bias, (False,) * 3))
    return (torch.empty((), **f32), torch.empty(0, **f32),
            *_grad_fakes(hidden, weight, bias, (want_hidden, want_weight, want_bias)))


def _fake_bwd(grad_loss, hidden, weight, target, bias, lse, grad_hidden, grad_weight, grad_bias,
              ignore_index, label_smoothing, reduction, softcap, want_hidden, want_weight, want_bias, chunk_tokens):
    if reduction != "none":
        return tuple(torch.empty_like(g) for g in (grad_hidden, grad_weight, grad_bias))
    return _grad_fakes(hidden, weight, bias, (want_hidden, want_weight, want_bias))


def _op_check(hidden, weight, target, bias, ignore_index, label_smoothing, reduction, softcap, *rest):
    _check(hidden, weight, target, bias, rest[-1])
    check_options(ignore_index, label_smoothing, reduction, softcap)
    return (hidden, weight, target, bias, ignore_index, label_smoothing, reduction, softcap, *rest)


# The want_ flags: which gradients autograd will ask for (named apart from the backward's
# grad_ tensors: one schema may not name two arguments alike).
_OPTIONS_SCHEMA = ("int ignore_index, float label_smoothing, str reduction, float? softcap, bool want_hidden, "
                   "bool want_weight, bool want_bias, int? chunk_tokens")
_LINEAR_CROSS_ENTROPY = Op(
    "linear_cross_entropy", forward=linear_cross_entropy_fwd,
    forward_schema=(f"(Tensor hidden, Tensor weight, Tensor target, Tensor? bias, {_OPTIONS_SCHEMA}) "
                    "-> (Tensor, Tensor, Tensor, Tensor, Tensor)"),
    forward_fake=_fake_fwd, setup_context=_setup_context, backward=_backward,
    backward_launcher=linear_cross_entropy_bwd,
    backward_schema=("(Tensor grad_loss, Tensor hidden, Tensor weight, Tensor target, Tensor? bias, Tensor lse, "
                     f"Tensor grad_hidden, Tensor grad_weight, Tensor grad_bias, {_OPTIONS_SCHEMA}) "
                     "-> (Tensor, Tensor, Tensor)"),
    backward_fake=_fake_bwd, forward_sharding=sharding.linear_cross_entropy_fwd_sharding,
    backward_sharding=sharding.linear_cross_entropy_bwd_sharding,
    eager_backward_launcher=lambda *args: linear_cross_entropy_bwd(*args, in_place=True),
    check=_op_check)


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, *,
                         bias: torch.Tensor | None = None, ignore_index: int = -100, label_smoothing: float = 0.0,
                         reduction: str = "mean", softcap: float | None = None,
                         chunk_tokens: int | None = None) -> torch.Tensor:
    """``F.cross_entropy(softcap(F.linear(hidden, weight, bias).float()), target, ...)`` without
    ever holding the (tokens x vocabulary) logits; differentiable in hidden, weight and bias.

    hidden: (..., H); target: hidden.shape[:-1], int64 or int32 class indices in [0, V) or
    ignore_index; weight: (V, H) and bias: (V,) in hidden's dtype (float32, float16 or
    bfloat16); any strides and view offsets (a transposed weight too). The logits are rounded
    to hidden's dtype as F.linear rounds them, the loss computed in float32. softcap: None or
    c > 0 for c * tanh(logits / c) before the loss. label_smoothing and reduction as in torch
    (no class weights); a mean over only ignored targets is NaN, as in torch. The result is
    float32: () for mean and sum, target's shape for none. Inside a torch.autocast region
    hidden, weight and bias are cast to its dtype first, as F.linear's are.

    chunk_tokens: tokens per chunk of logits (a positive int), the trade of memory for time:
    the default, None, takes 512 MiB of logits (2048 tokens at V = 128256 in bf16). Memory
    beyond the inputs is the gradients themselves plus chunk_tokens * V * element size; below
    ~330 tokens on an H200 the grad_weight product is bound by memory and the call slows
    (docs/block-ops.md has the arithmetic and the measured trade). 256 matches Liger Kernel's
    memory at Llama-3's head, at about 1.4x the default's time.

    The gradients are made during the forward when anything requires grad; the backward
    reads the upstream gradient on the host (one sync) and returns them as they are when it
    is 1 (loss.backward()), else multiplied in place (a second backward through the same graph
    then raises). While a CUDA graph is captured it multiplies in place without the host read.
    Under torch.compile the backward returns new, scaled tensors (a custom op may not mutate
    what it saved): a second weight-sized buffer there.
    reduction="none" recomputes the chunks in the backward instead.

    A DTensor weight sharded along its rows (a tensor-parallel lm_head), with a bias placed
    the same way and hidden and target replicated, takes the vocabulary-parallel path
    (`tritonkit.ops.cross_entropy.vocab_parallel`: a log-sum-exp across the ranks, the weight never
    gathered; docs/distributed.md).

    Raises TypeError for a float target or mismatched dtypes, ValueError for shape mismatches,
    bad options, and (CPU tensors, where checking costs no host sync) target values out of
    range; on a GPU those trigger a device-side assert, as torch's own op does.
    """
    hidden, weight, bias = autocast_inputs(hidden, weight, bias)
    check_tensor("hidden", hidden)
    check_tensor("target", target, (torch.int64, torch.int32))
    if hidden.dim() == 0 or target.shape != hidden.shape[:-1]:
        raise ValueError(f"target has shape {tuple(target.shape)} but hidden has {tuple(hidden.shape)}; "
                         "target must have hidden's shape without its last dim")
    check_options(ignore_index, label_smoothing, reduction, softcap)
    check_chunk_tokens(chunk_tokens)
    label_smoothing, softcap = as_float_options(label_smoothing, softcap)
    if _vocab_sharded(weight):
        from .vocab_parallel import vocab_parallel_linear_cross_entropy
        loss = vocab_parallel_linear_cross_entropy(hidden.reshape(-1, hidden.shape[-1]), weight, target.reshape(-1),
                                                   bias, ignore_index, label_smoothing, reduction, softcap,
                                                   chunk_tokens)
        return loss.reshape(target.shape) if reduction == "none" else loss
    grad_on = torch.is_grad_enabled()
    wants = [grad_on and isinstance(t, torch.Tensor) and t.requires_grad for t in (hidden, weight, bias)]
    loss = _LINEAR_CROSS_ENTROPY(hidden.reshape(-1, hidden.shape[-1]), weight, target.reshape(-1), bias,
                                 ignore_index, label_smoothing, reduction, softcap, *wants, chunk_tokens)[0]
    return loss.reshape(target.shape) if reduction == "none" else loss
