"""`linear_logprobs`: per-token log-probabilities (and the entropy) of a linear head's softmax,
without its (tokens x vocabulary) logits.

The forward runs the chunk loop (chunks.py) with the log-probability row kernel's first pass:
one product a chunk, and each row's logp, entropy and float64 log-sum-exp kept (16 bytes a
token). The upstream gradients of logp and entropy differ per token and are known only in the
backward, which recomputes each chunk's logits, writes dlogits over them from the saved
statistics (the kernel's second pass) and makes grad_hidden and grad_weight: four products in
all, against three for a loss whose upstream gradient is known in its forward (the fused
losses of `tritonkit.ops.post_training`, and `linear_cross_entropy`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..._autocast import autocast_inputs
from ..._checks import check_same_device, check_tensor
from ..._op import Op, not_computed
from .chunks import check_chunk_tokens, check_head, chunk_loop
from .kernel import check_target, check_target_values
from .logprob_kernel import launch_logprob_rows
from . import sharding


def linear_logprobs_reference(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, *,
                              bias: torch.Tensor | None = None, temperature: float = 1.0,
                              softcap: float | None = None, ignore_index: int = -100, return_entropy: bool = False,
                              upcast: bool = True):
    """log_softmax(softcap(F.linear(hidden, weight, bias)) / temperature) at target, and the
    entropy: in float64 throughout when upcast, else from logits in hidden's dtype computed in
    float32 (the usual eager path). Ignored targets give 0."""
    if upcast:
        hidden, weight = hidden.double(), weight.double()
        bias = None if bias is None else bias.double()
    z = F.linear(hidden, weight, bias)
    z = z.double() if upcast else z.float()
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    logp_all = torch.log_softmax(z / temperature, dim=-1)
    valid = target != ignore_index
    logp = logp_all.gather(-1, torch.where(valid, target, 0).long().unsqueeze(-1)).squeeze(-1)
    logp = torch.where(valid, logp, torch.zeros_like(logp))
    if not return_entropy:
        return logp
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, torch.where(valid, entropy, torch.zeros_like(entropy))


def check_options(temperature: object, softcap: object, ignore_index: object) -> None:
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not temperature > 0:
        raise ValueError(f"temperature must be a positive float, got {temperature!r}")
    if softcap is not None and (not isinstance(softcap, (int, float)) or not softcap > 0):
        raise ValueError(f"softcap must be None or a positive float, got {softcap!r}")
    if not isinstance(ignore_index, int) or isinstance(ignore_index, bool):
        raise TypeError(f"ignore_index must be an int, got {type(ignore_index).__name__}")


def check_inputs(hidden, weight, target, bias, chunk_tokens) -> None:
    check_head(hidden, weight, bias, chunk_tokens)
    check_target(target, hidden.shape[0], "hidden")
    check_same_device(hidden=hidden, target=target)


def logprob_stats(hidden, weight, target, bias, temperature, softcap, ignore_index, entropy: bool, chunk_tokens,
                  rows_after=None, want=(False, False, False)):
    """The chunk loop with the row kernel's first pass: (logp fp32, entropy fp32 or None, lse
    fp64), one a token. `rows_after(logits, start, end, logp, entropy, lse)`, when given, runs
    after each chunk's first pass (a fused loss writes its dlogits there), and the gradients in
    `want` are made from what it wrote. Returns ((logp, entropy, lse), (grad_hidden,
    grad_weight, grad_bias) with None where not wanted)."""
    n = hidden.shape[0]
    logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
    ent = torch.empty(n, dtype=torch.float32, device=hidden.device) if entropy else None
    lse = torch.empty(n, dtype=torch.float64, device=hidden.device)

    def rows(logits, start, end):
        launch_logprob_rows(logits, target[start:end], ignore_index, temperature, softcap, lse[start:end],
                            logp=logp[start:end], entropy=None if ent is None else ent[start:end])
        if rows_after is not None:
            rows_after(logits, start, end, logp[start:end], None if ent is None else ent[start:end], lse[start:end])

    grads = chunk_loop(hidden, weight, bias, chunk_tokens, want, rows)
    return (logp, ent, lse), grads


def linear_logprobs_fwd(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                        bias: torch.Tensor | None = None, temperature: float = 1.0, softcap: float | None = None,
                        ignore_index: int = -100, entropy: bool = False, chunk_tokens: int | None = None):
    """Launcher for the forward pass. hidden (T, H), weight (V, H), target (T,), bias (V,).
    Returns (logp (T,) fp32, entropy (T,) fp32 (empty unless asked), lse (T,) fp64, for the
    backward)."""
    check_inputs(hidden, weight, target, bias, chunk_tokens)
    check_options(temperature, softcap, ignore_index)
    check_target_values(target, weight.shape[0], ignore_index)
    (logp, ent, lse), _ = logprob_stats(hidden, weight, target, bias, temperature, softcap, ignore_index, entropy,
                                        chunk_tokens)
    return logp, not_computed(logp) if ent is None else ent, lse


def linear_logprobs_bwd(grad_logp: torch.Tensor | None, grad_entropy: torch.Tensor | None, hidden: torch.Tensor,
                        weight: torch.Tensor, target: torch.Tensor, bias: torch.Tensor | None, lse: torch.Tensor,
                        entropy: torch.Tensor, temperature: float = 1.0, softcap: float | None = None,
                        ignore_index: int = -100, want_hidden: bool = True, want_weight: bool = True,
                        want_bias: bool = True, chunk_tokens: int | None = None):
    """Launcher for the backward pass: (grad_hidden, grad_weight, grad_bias), empty where not
    wanted, for the upstream gradients of logp and entropy ((T,) each; either may be None).
    Recomputes each chunk's logits from hidden and weight."""
    check_inputs(hidden, weight, target, bias, chunk_tokens)
    n = hidden.shape[0]
    check_tensor("lse", lse, (torch.float64,))
    if lse.shape != (n,):
        raise ValueError(f"lse has shape {tuple(lse.shape)}, expected ({n},): the forward's log-sum-exp per token")
    upstream = []
    for name, g in (("grad_logp", grad_logp), ("grad_entropy", grad_entropy)):
        if g is not None:
            check_tensor(name, g)
            if g.shape != (n,):
                raise ValueError(f"{name} has shape {tuple(g.shape)}, expected ({n},)")
            g = g.to(torch.float32).contiguous()
        upstream.append(g)
    grad_logp, grad_entropy = upstream
    if grad_entropy is not None and entropy.shape != (n,):
        raise ValueError(f"entropy has shape {tuple(entropy.shape)}, expected ({n},): the forward's entropy")
    want = (want_hidden, want_weight, want_bias and bias is not None)

    def rows(logits, start, end):
        launch_logprob_rows(logits, target[start:end], ignore_index, temperature, softcap, lse[start:end],
                            entropy=None if grad_entropy is None else entropy[start:end],
                            grad_logp=None if grad_logp is None else grad_logp[start:end],
                            grad_entropy=None if grad_entropy is None else grad_entropy[start:end], grad=True)

    grads = chunk_loop(hidden, weight, bias, chunk_tokens, want, rows)
    return tuple(not_computed(hidden) if g is None else g for g in grads)


def _setup_context(ctx, inputs, output):
    hidden, weight, target, bias, temperature, softcap, ignore_index, entropy, chunk_tokens = inputs
    # Either output may get no gradient (an entropy kept for logging): no zeros made for it.
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(hidden, weight, target, bias, output[2], output[1])
    ctx.options = (temperature, softcap, ignore_index)
    ctx.chunk_tokens = chunk_tokens


def _backward(bwd, ctx, grad_logp, grad_entropy=None, *_):
    hidden, weight, target, bias, lse, entropy = ctx.saved_tensors
    wants = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], bias is not None and ctx.needs_input_grad[3])
    if (grad_logp is None and grad_entropy is None) or not any(wants):
        return (None,) * 9
    grads = bwd(grad_logp, grad_entropy, hidden, weight, target, bias, lse, entropy, *ctx.options, *wants,
                ctx.chunk_tokens)
    return (grads[0] if wants[0] else None, grads[1] if wants[1] else None, None,
            grads[2] if wants[2] else None, *([None] * 5))


def _fake_fwd(hidden, weight, target, bias, temperature, softcap, ignore_index, entropy, chunk_tokens):
    n = hidden.shape[0]
    f32 = dict(dtype=torch.float32, device=hidden.device)
    return (torch.empty(n, **f32), torch.empty(n if entropy else 0, **f32),
            torch.empty(n, dtype=torch.float64, device=hidden.device))


def _fake_bwd(grad_logp, grad_entropy, hidden, weight, target, bias, lse, entropy, temperature, softcap,
              ignore_index, want_hidden, want_weight, want_bias, chunk_tokens):
    return (torch.empty(hidden.shape, dtype=hidden.dtype, device=hidden.device) if want_hidden
            else not_computed(hidden),
            torch.empty_like(weight) if want_weight else not_computed(hidden),
            torch.empty_like(bias) if want_bias and bias is not None else not_computed(hidden))


def _op_check(hidden, weight, target, bias, temperature, softcap, ignore_index, entropy, chunk_tokens):
    check_inputs(hidden, weight, target, bias, chunk_tokens)
    check_options(temperature, softcap, ignore_index)
    return hidden, weight, target, bias, temperature, softcap, ignore_index, entropy, chunk_tokens


_OPTIONS = "float temperature, float? softcap, int ignore_index"
_LINEAR_LOGPROBS = Op(
    "linear_logprobs", forward=linear_logprobs_fwd,
    forward_schema=(f"(Tensor hidden, Tensor weight, Tensor target, Tensor? bias, {_OPTIONS}, bool entropy, "
                    "int? chunk_tokens) -> (Tensor, Tensor, Tensor)"),
    forward_fake=_fake_fwd, setup_context=_setup_context, backward=_backward,
    backward_launcher=linear_logprobs_bwd,
    backward_schema=("(Tensor? grad_logp, Tensor? grad_entropy, Tensor hidden, Tensor weight, Tensor target, "
                     f"Tensor? bias, Tensor lse, Tensor entropy, {_OPTIONS}, bool want_hidden, bool want_weight, "
                     "bool want_bias, int? chunk_tokens) -> (Tensor, Tensor, Tensor)"),
    backward_fake=_fake_bwd, check=_op_check,
    returns=lambda *args: 2 if args[7] else 1, forward_sharding=sharding.linear_logprobs_fwd_sharding,
    backward_sharding=sharding.linear_logprobs_bwd_sharding)


def head_inputs(hidden, weight, bias, target, names=("hidden", "target")):
    """The public functions' common start: autocast's casts, and hidden (..., H) with target
    hidden.shape[:-1] flattened to (T, H) and (T,)."""
    hidden, weight, bias = autocast_inputs(hidden, weight, bias)
    check_tensor(names[0], hidden)
    check_tensor(names[1], target, (torch.int64, torch.int32))
    if hidden.dim() == 0 or target.shape != hidden.shape[:-1]:
        raise ValueError(f"{names[1]} has shape {tuple(target.shape)} but {names[0]} has {tuple(hidden.shape)}; "
                         f"{names[1]} must have {names[0]}'s shape without its last dim")
    return hidden.reshape(-1, hidden.shape[-1]), weight, bias, target.reshape(-1)


def linear_logprobs(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, *,
                    bias: torch.Tensor | None = None, temperature: float = 1.0, softcap: float | None = None,
                    ignore_index: int = -100, return_entropy: bool = False,
                    chunk_tokens: int | None = None):
    """Per-token log-probabilities of `target` under ``softmax(softcap(F.linear(hidden, weight,
    bias)) / temperature)`` and, with return_entropy, the entropy of that softmax, without ever
    holding the (tokens x vocabulary) logits; differentiable in hidden, weight and bias for any
    upstream gradients of both outputs.

    hidden: (..., H); target: hidden.shape[:-1], int64 or int32 class indices in [0, V) or
    ignore_index; weight: (V, H) and bias: (V,) in hidden's dtype (float32, float16 or
    bfloat16); any strides and view offsets. The logits are rounded to hidden's dtype as
    F.linear rounds them, everything after in float32. Returns logp, or (logp, entropy),
    float32 of target's shape; tokens whose target is ignore_index get 0 for both, and no
    gradient. softcap: None or c > 0 for c * tanh(logits / c) before the temperature (Gemma 2).
    Inside a torch.autocast region hidden, weight and bias are cast to its dtype first, as
    F.linear's are.

    This is TRL's ``selective_log_softmax(logits / temperature, target)`` and
    ``entropy_from_logits`` with the head fused in. Memory beyond the inputs: 16 bytes a token
    kept for the backward, one chunk of logits (chunk_tokens as in linear_cross_entropy), and
    the gradients. The backward recomputes the chunks' logits: four matrix products in all.
    Passing only the tokens that are scored (hidden[mask], target[mask]) saves the products of
    the others.

    Raises TypeError for a float target or mismatched dtypes, ValueError for shape mismatches,
    bad options and (CPU tensors) target values out of range; on a GPU those trigger a
    device-side assert.
    """
    hidden2, weight, bias, target1 = head_inputs(hidden, weight, bias, target)
    check_options(temperature, softcap, ignore_index)
    check_chunk_tokens(chunk_tokens)
    out = _LINEAR_LOGPROBS(hidden2, weight, target1, bias, float(temperature),
                           None if softcap is None else float(softcap), ignore_index, bool(return_entropy),
                           chunk_tokens)
    if return_entropy:
        return out[0].reshape(target.shape), out[1].reshape(target.shape)
    return out.reshape(target.shape)
