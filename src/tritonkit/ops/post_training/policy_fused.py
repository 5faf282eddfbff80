"""The token-level GRPO-family loss fused into the chunk loop: three matrix products.

Each chunk's first pass of the log-probability row kernel gives logp_t (and the entropy H_t);
the loss's terms and their derivatives are then per token (policy.py has the math):
    d loss / d logp_t = w_t * d loss_t / d logp_t,   d loss / d H_t = e_t (the entropy weights)
so the kernel's second pass writes dlogits for those upstream gradients at once, and the chunk
loop makes the gradients of hidden, weight and bias in the forward (`_fused.py`).

d loss_t / d logp_t, with r = exp(logp_t - old_t) (and r's own derivative r):
    the policy term -min(c1 * A, c2 * A): -A * dc1 where c1 * A < c2 * A, -A * dc2 where
      c2 * A < c1 * A, and half of each on a tie (torch.min's gradient, which the reference's
      autograd takes: with old_t = logp_t every token is a tie at r = 1);
      dc1 = r (0 above delta), dc2 = r inside [1 - eps_low, 1 + eps_high] (clamp's gradient,
      bounds included), else 0; times policy_weight_t
    beta * kl_t: k3 beta * (1 - exp(ref_t - logp_t)); k1 beta; k2 beta * (logp_t - ref_t)
    cispo's -min(r, eps_high) * A * logp_t, its factor detached: -min(r, eps_high) * A
"""

from __future__ import annotations

import torch

from ..._op import Op
from ..cross_entropy.kernel import check_target_values
from ..cross_entropy.logprob_kernel import launch_logprob_rows
from ..cross_entropy.logprobs import check_inputs, logprob_stats
from ..cross_entropy.logprobs import check_options as check_head_options
from ._fused import (GRADS_SCHEMA, eager_saved_gradients_bwd, grad_fakes, gradient_outputs, per_token,
                     requires_grads, saved_gradients_bwd, saved_gradients_fake)
from . import sharding


def token_terms(logp, advantages, old, ref, policy_weights, beta, kl_estimator, epsilon_low, epsilon_high, delta,
                cispo=False):
    """(loss_t, d loss_t / d logp_t) of each token (float32, (n,) each), before its weight."""
    ratio = torch.ones_like(logp) if old is None else torch.exp(logp - old)
    if cispo:
        grad = -torch.clamp(ratio, max=epsilon_high) * advantages
        return _with_kl(grad * logp, grad, logp, ref, policy_weights, beta, kl_estimator)
    c1, d1 = ratio, ratio
    if delta is not None:
        c1 = torch.clamp(ratio, max=delta)
        d1 = torch.where(ratio <= delta, ratio, 0.0)
    c2 = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    d2 = torch.where((ratio >= 1 - epsilon_low) & (ratio <= 1 + epsilon_high), ratio, 0.0)
    l1, l2 = c1 * advantages, c2 * advantages
    loss = -torch.minimum(l1, l2)
    grad = -advantages * torch.where(l1 < l2, d1, torch.where(l2 < l1, d2, 0.5 * (d1 + d2)))
    return _with_kl(loss, grad, logp, ref, policy_weights, beta, kl_estimator)


def _with_kl(loss, grad, logp, ref, policy_weights, beta, kl_estimator):
    """The policy term times its per-token weights, plus beta times the KL estimate."""
    if policy_weights is not None:
        loss, grad = loss * policy_weights, grad * policy_weights
    if beta != 0.0:
        diff = logp - ref
        if kl_estimator == "k1":
            kl, dkl = diff, torch.ones_like(diff)
        elif kl_estimator == "k2":
            kl, dkl = 0.5 * diff * diff, diff
        else:
            e = torch.exp(-diff)
            kl, dkl = e + diff - 1, 1 - e
        loss, grad = loss + beta * kl, grad + beta * dkl
    return loss, grad


def linear_grpo_loss_fwd(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, bias: torch.Tensor | None,
                         advantages: torch.Tensor, old_logprobs: torch.Tensor | None,
                         ref_logprobs: torch.Tensor | None, policy_weights: torch.Tensor | None,
                         token_weights: torch.Tensor, entropy_weights: torch.Tensor | None,
                         temperature: float = 1.0, softcap: float | None = None, ignore_index: int = -100,
                         beta: float = 0.0, kl_estimator: str = "k3", epsilon_low: float = 0.2,
                         epsilon_high: float = 0.2, delta: float | None = None, cispo: bool = False,
                         stats: bool = False,
                         want_hidden: bool = False, want_weight: bool = False, want_bias: bool = False,
                         chunk_tokens: int | None = None):
    """Launcher for the forward pass. hidden (T, H), weight (V, H), target (T,), bias (V,); the
    per-token advantages, old and reference log-probabilities, policy weights, token weights
    w_t and entropy weights e_t, (T,) each. Returns (loss (fp32, 0-d), logp (T,), entropy
    (T,), grad_hidden, grad_weight, grad_bias): the entropy is empty unless `stats` or
    entropy_weights ask for it, the gradients (for an upstream gradient of 1) empty unless
    wanted."""
    check_inputs(hidden, weight, target, bias, chunk_tokens)
    check_head_options(temperature, softcap, ignore_index)
    check_target_values(target, weight.shape[0], ignore_index)
    n = hidden.shape[0]
    advantages, old, ref, policy_weights = (
        per_token(name, t, n, hidden) for name, t in (
            ("advantages", advantages), ("old_logprobs", old_logprobs), ("ref_logprobs", ref_logprobs),
            ("policy_weights", policy_weights)))
    # The weights (1 / counts) stay in float64: see the loss's sum below.
    token_weights, entropy_weights = (per_token(name, t, n, hidden, torch.float64) for name, t in (
        ("token_weights", token_weights), ("entropy_weights", entropy_weights)))
    if advantages is None or token_weights is None:
        raise TypeError("advantages and token_weights are tensors, one value a token")
    if beta != 0.0 and ref is None:
        raise ValueError("beta != 0 needs ref_logprobs")
    # The loss sums terms of both signs (advantages are centred): float64, so that their
    # cancellation does not amplify the float32 terms' rounding into the result.
    total = torch.zeros((), dtype=torch.float64, device=hidden.device)
    want = (want_hidden, want_weight, want_bias and bias is not None)

    def rows_after(logits, start, end, logp, entropy, lse):
        part = slice(start, end)
        loss_t, grad_t = token_terms(logp, advantages[part], None if old is None else old[part],
                                     None if ref is None else ref[part],
                                     None if policy_weights is None else policy_weights[part], beta, kl_estimator,
                                     epsilon_low, epsilon_high, delta, cispo)
        w = token_weights[part]
        # Unscored tokens (weight 0) may hold anything in old or ref: their terms never count.
        scored = w != 0
        total.add_(torch.where(scored, w * loss_t, 0.0).sum())
        e = None if entropy_weights is None else entropy_weights[part]
        if e is not None:
            total.add_((e * entropy).sum())
        if any(want):
            launch_logprob_rows(logits, target[part], ignore_index, temperature, softcap, lse, entropy=entropy,
                                grad_logp=torch.where(scored, w * grad_t, 0.0).float(),
                                grad_entropy=None if e is None else e.float(), grad=True,
                                name="linear_grpo_loss")

    (logp, entropy, _), grads = logprob_stats(hidden, weight, target, bias, temperature, softcap, ignore_index,
                                              stats or entropy_weights is not None, chunk_tokens, rows_after, want)
    if entropy is None:
        entropy = logp.new_empty((0,))
    return (total.float(), logp, entropy, *gradient_outputs(grads, hidden))


def _setup_context(ctx, inputs, output):
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(*output[3:])
    hidden, weight, target, bias, *_ = inputs
    want_hidden, want_weight, want_bias = inputs[-4:-1]
    ctx.wants = (want_hidden, want_weight, want_bias and bias is not None)


def _backward(bwd, ctx, grad_loss, *_):
    if grad_loss is None:
        return (None,) * 24
    grads = bwd(grad_loss, *ctx.saved_tensors)
    return (grads[0] if ctx.wants[0] else None, grads[1] if ctx.wants[1] else None, None,
            grads[2] if ctx.wants[2] else None, *([None] * 20))


def _fake_fwd(hidden, weight, target, bias, advantages, old_logprobs, ref_logprobs, policy_weights, token_weights,
              entropy_weights, temperature, softcap, ignore_index, beta, kl_estimator, epsilon_low, epsilon_high, delta,
              cispo, stats, want_hidden, want_weight, want_bias, chunk_tokens):
    n = hidden.shape[0]
    f32 = dict(dtype=torch.float32, device=hidden.device)
    return (torch.empty((), **f32), torch.empty(n, **f32),
            torch.empty(n if stats or entropy_weights is not None else 0, **f32),
            *grad_fakes(hidden, weight, bias, (want_hidden, want_weight, want_bias)))


def _op_check(*args):
    check_inputs(*args[:4], args[-1])
    check_head_options(*args[10:13])
    return args


_LINEAR_GRPO_LOSS = Op(
    "linear_grpo_loss", forward=linear_grpo_loss_fwd,
    forward_schema=("(Tensor hidden, Tensor weight, Tensor target, Tensor? bias, Tensor advantages, "
                    "Tensor? old_logprobs, Tensor? ref_logprobs, Tensor? policy_weights, Tensor token_weights, "
                    "Tensor? entropy_weights, float temperature, float? softcap, int ignore_index, float beta, "
                    "str kl_estimator, float epsilon_low, float epsilon_high, float? delta, bool cispo, bool stats, "
                    "bool want_hidden, bool want_weight, bool want_bias, int? chunk_tokens) "
                    "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)"),
    forward_fake=_fake_fwd, setup_context=_setup_context, backward=_backward,
    backward_launcher=saved_gradients_bwd, backward_schema=GRADS_SCHEMA, backward_fake=saved_gradients_fake,
    eager_backward_launcher=eager_saved_gradients_bwd, check=_op_check,
    returns=lambda *args: 3 if args[19] else 1, forward_sharding=sharding.linear_grpo_loss_fwd_sharding,
    backward_sharding=sharding.linear_grpo_loss_bwd_sharding)


def _flat(t: torch.Tensor | None, shape) -> torch.Tensor | None:
    return None if t is None else t.expand(shape).reshape(-1)


def fused_policy_loss(hidden, weight, target, bias, advantages, token_weights, entropy_weights, policy_weights, *,
                      old_logprobs, ref_logprobs, beta, kl_estimator, epsilon_low, epsilon_high, delta, cispo,
                      temperature, softcap, ignore_index, chunk_tokens, stats):
    """The fused op on (B, L) sequences: (loss, logp (B, L), entropy (B, L) or None)."""
    shape = target.shape
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    out = _LINEAR_GRPO_LOSS(
        hidden.reshape(-1, hidden.shape[-1]), weight, target.reshape(-1), bias, _flat(adv, shape),
        _flat(old_logprobs, shape), _flat(ref_logprobs, shape), _flat(policy_weights, shape),
        _flat(token_weights, shape), _flat(entropy_weights, shape), float(temperature),
        None if softcap is None else float(softcap), ignore_index, float(beta), kl_estimator, float(epsilon_low),
        float(epsilon_high), None if delta is None else float(delta), bool(cispo), bool(stats),
        *requires_grads(hidden, weight, bias), chunk_tokens)
    if not stats:
        return out, None, None
    loss, logp, entropy = out
    return loss, logp.reshape(shape), entropy.reshape(shape)
