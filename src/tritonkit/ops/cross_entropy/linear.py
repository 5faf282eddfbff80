"""`linear_cross_entropy`: the loss of a linear head without its (tokens x vocabulary) logits.

Tokens are taken CHUNK_BYTES of logits at a time. For each chunk:
    logits  = hidden_c @ weight^T (+ bias)        cuBLAS, in hidden's dtype, into one buffer
    loss_c, dlogits = row kernel                   reads each row twice, writes dlogits in place
    grad_hidden_c  = dlogits @ weight              cuBLAS, into the preallocated grad_hidden
    grad_weight   += dlogits^T @ hidden_c          cuBLAS addmm, accumulated in weight's dtype
    grad_bias     += sum of dlogits rows           fp32 accumulator
So the three matrix products run at cuBLAS speed, the logits are rounded to the input dtype
exactly as F.linear rounds them, and dlogits is rounded to it as torch's backward of
`.float()` rounds it. For mean and sum the gradients are made during the forward (for an
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
from .kernel import (as_float_options, check_options, check_target, check_target_values, launch_rows, reduce_rows, same_dtype,
                     valid_count)
from .scale import scale_by

# Logits buffer per chunk. grad_weight += dlogits^T @ hidden_c reads and writes all of
# grad_weight (4*V*H bytes in bf16) for 2*V*H*chunk flops: it is bound by memory rather than
# by the tensor cores below chunk = 2 * rate / bandwidth tokens, about 2 * 687e12 / 4.2e12 =
# 330 on the H200 (its bf16 GEMM rate and copy bandwidth), and each chunk's re-read of
# grad_weight costs a share of its product's time that falls as 1 / chunk above that.
# 512 MiB gives 2048 tokens at V = 128256, where the three products run near their full
# rate; smaller chunks cost time, larger ones memory (docs/block-ops.md has the trade).
CHUNK_BYTES = 512 << 20
CHUNK_MULTIPLE = 128     # chunk rows rounded to whole GEMM tiles
MIN_CHUNK_TOKENS = 128


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


def chunk_tokens_for(n_tokens: int, n_classes: int, element_size: int) -> int:
    """Tokens per chunk: CHUNK_BYTES of logits, in whole GEMM tiles, at least MIN_CHUNK_TOKENS."""
    rows = CHUNK_BYTES // max(1, n_classes * element_size) // CHUNK_MULTIPLE * CHUNK_MULTIPLE
    return max(1, min(n_tokens, max(MIN_CHUNK_TOKENS, rows)))


def _check(hidden, weight, target, bias, chunk_tokens):
    check_tensor("hidden", hidden)
    check_tensor("weight", weight)
    if hidden.dim() != 2:
        raise ValueError(f"hidden has {hidden.dim()} dims; the launchers take (tokens, hidden) "
                         "(the public function flattens leading dims)")
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[1]:
        raise ValueError(f"weight has shape {tuple(weight.shape)}; expected (vocabulary, {hidden.shape[1]}) "
                         f"for hidden of shape {tuple(hidden.shape)}")
    if weight.shape[0] == 0:
        raise ValueError("weight has 0 rows (an empty vocabulary)")
    same_dtype("weight", weight, "hidden", hidden)
    check_target(target, hidden.shape[0], "hidden")
    check_same_device(hidden=hidden, weight=weight, target=target)
    if bias is not None:
        check_tensor("bias", bias)
        if bias.shape != (weight.shape[0],):
            raise ValueError(f"bias has shape {tuple(bias.shape)}; expected ({weight.shape[0]},)")
        same_dtype("bias", bias, "hidden", hidden)
        check_same_device(hidden=hidden, bias=bias)
    check_chunk_tokens(chunk_tokens)


def _vocab_sharded(weight: torch.Tensor) -> bool:
    # A DTensor weight sharded along its rows (a tensor-parallel lm_head) takes the
    # vocabulary-parallel path (tritonkit.distributed.vocab_parallel); nothing is imported
    # for plain tensors.
    if "torch.distributed.tensor" not in sys.modules:
        return False
    from ...distributed.vocab_parallel import vocab_sharded
    return vocab_sharded(weight)


def check_chunk_tokens(chunk_tokens: object) -> None:
    if chunk_tokens is not None and (not isinstance(chunk_tokens, int) or isinstance(chunk_tokens, bool)):
        raise TypeError(f"chunk_tokens must be None or a positive int, got {type(chunk_tokens).__name__}")
    if chunk_tokens is not None and chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be None or a positive int, got {chunk_tokens!r}")


def _chunked(hidden, weight, target, bias, ignore_index, label_smoothing, softcap, chunk_tokens,
             want, *, loss=None, lse=None, count=None, upstream=None):
    """Run the chunk loop: logits, the row kernel (loss and lse, or, with lse given and no
    loss, only the gradient), then the products for the gradients in `want` (hidden, weight,
    bias flags). Returns (grad_hidden, grad_weight, grad_bias) for those wanted, else None."""
    n_tokens, n_classes = hidden.shape[0], weight.shape[0]
    want_hidden, want_weight, want_bias = want
    grad_hidden = torch.empty(hidden.shape, dtype=hidden.dtype, device=hidden.device) if want_hidden else None
    grad_weight = torch.empty_like(weight) if want_weight else None  # weight's layout, as autograd prefers
    grad_bias32 = None  # fp32 accumulator, started by the first chunk's sum
    any_grad = want_hidden or want_weight or want_bias
    step = chunk_tokens or chunk_tokens_for(n_tokens, n_classes, hidden.element_size())
    buffer = torch.empty((min(step, n_tokens), n_classes), dtype=hidden.dtype, device=hidden.device)
    for start in range(0, n_tokens, step):
        end = min(n_tokens, start + step)
        logits, h = buffer[: end - start], hidden[start:end]
        if bias is None:
            torch.mm(h, weight.t(), out=logits)
        else:
            torch.addmm(bias, h, weight.t(), out=logits)
        launch_rows(logits, target[start:end], ignore_index, label_smoothing, softcap,
                    loss=None if loss is None else loss[start:end], lse=None if lse is None else lse[start:end],
                    compute_lse=loss is not None, grad=logits if any_grad else None, count=count,
                    upstream=None if upstream is None else upstream[start:end], name="linear_cross_entropy")
        if want_hidden:
            torch.mm(logits, weight, out=grad_hidden[start:end])
        if want_weight:
            if start == 0:
                torch.mm(logits.t(), h, out=grad_weight)
            else:
                grad_weight.addmm_(logits.t(), h)
        if want_bias:
            rows = logits.sum(0, dtype=torch.float32)
            grad_bias32 = rows if grad_bias32 is None else grad_bias32.add_(rows)
    if want_weight and n_tokens == 0:
        grad_weight.zero_()
    if want_bias and grad_bias32 is None:  # no tokens
        grad_bias32 = torch.zeros(n_classes, dtype=torch.float32, device=hidden.device)
    grad_bias = grad_bias32.to(hidden.dtype) if want_bias else None
    return grad_hidden, grad_weight, grad_bias


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
        grads = (grad_hidden, grad_weight, grad_bias)
        # A CUDA graph capture (torch.compile's mode="reduce-overhead", a captured step) may not
        # sync: there a kernel reads the scale on the device and multiplies whatever it is (by
        # 1 it changes no bit). Elsewhere the scale is read on the host (one sync): an upstream
        # 1 (loss.backward()) then returns the eager road's saved gradients untouched, no pass
        # over grad_weight, and any other scale multiplies as a host scalar. Both multiplies
        # are float32 products rounded once: the same bits.
        # Without in_place (the custom op, torch.compile's road) it may not alias or mutate its
        # inputs: new tensors.
        if grad_loss.is_cuda and torch.cuda.is_current_stream_capturing():
            if not in_place:
                return tuple(scale_by(g, grad_loss) for g in grads)
            for g in grads:
                scale_by(g, grad_loss, out=g)
                # A kernel's write is invisible to autograd: bump the version as mul_ does, so a
                # second backward through this graph is refused rather than given scaled tensors.
                torch.autograd.graph.increment_version(g)
            return grads
        scale = grad_loss.item()
        if not in_place:
            return tuple(g * scale for g in grads)
        if scale != 1.0:
            for g in grads:
                g.mul_(scale)
        return grads
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
    backward_fake=_fake_bwd,
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
    (`tritonkit.distributed.vocab_parallel`: a log-sum-exp across the ranks, the weight never
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
        from ...distributed.vocab_parallel import vocab_parallel_linear_cross_entropy
        loss = vocab_parallel_linear_cross_entropy(hidden.reshape(-1, hidden.shape[-1]), weight, target.reshape(-1),
                                                   bias, ignore_index, label_smoothing, reduction, softcap,
                                                   chunk_tokens)
        return loss.reshape(target.shape) if reduction == "none" else loss
    grad_on = torch.is_grad_enabled()
    wants = [grad_on and isinstance(t, torch.Tensor) and t.requires_grad for t in (hidden, weight, bias)]
    loss = _LINEAR_CROSS_ENTROPY(hidden.reshape(-1, hidden.shape[-1]), weight, target.reshape(-1), bias,
                                 ignore_index, label_smoothing, reduction, softcap, *wants, chunk_tokens)[0]
    return loss.reshape(target.shape) if reduction == "none" else loss
