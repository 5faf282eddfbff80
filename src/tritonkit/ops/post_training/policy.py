"""`grpo_loss`: the GRPO family's clipped policy loss (GRPO, DAPO, Dr. GRPO, BNPO, GSPO) over a
linear head, without its (tokens x vocabulary) logits.

For completion tokens t of sequence i, with log-probability logp_t under the policy (the head's
softmax at temperature T), advantage A (per sequence or per token), the sampling policy's
old_t (logp_t itself, detached, when not given) and the reference model's ref_t:
    ratio_t   = exp(logp_t - old_t)                                  importance_sampling_level="token"
              = exp(mean over i's tokens of (logp - old))             "sequence" (GSPO), one per sequence
    loss_t    = -min(c1 * A, clip(ratio_t, 1 - eps_low, 1 + eps_high) * A) * policy_weight_t
                + beta * kl_t
      with c1 = ratio_t, or min(ratio_t, delta) with two-sided clipping (delta)
      or, for loss_type "cispo", -min(ratio_t, eps_high) * A * logp_t with the factor detached:
      REINFORCE's -A * logp_t on policy (CISPO's clipped importance-sampling weights)
    kl_t      = exp(ref_t - logp_t) - (ref_t - logp_t) - 1           k3 (TRL's), or
                logp_t - ref_t (k1), (logp_t - ref_t)^2 / 2 (k2)
    loss      = sum_t w_t * loss_t - entropy_coef * (sum of H_t over scored tokens) / their count
with the token weights w_t of TRL's loss_type:
    "grpo"    1 / (B * n_i)     each sequence's mean, then the mean over sequences
    "bnpo"    1 / N             the mean over the batch's N scored tokens
    "dr_grpo" 1 / (B * max_completion_length)
    "dapo"    1 / num_items_in_batch (N by default): the mean over the whole (global) batch
    "cispo"   as "dapo"
This is TRL's GRPOTrainer._compute_loss for those loss types, written once here as
`policy_objective`: the float64 reference and the sequence-level path run it on per-token
log-probabilities; the token-level path (policy_fused.py) runs its derivative in the chunk
loop, three matrix products in all.
"""

from __future__ import annotations

import torch

from ..._autocast import autocast_inputs
from ..._checks import check_float, checked_arguments
from ..cross_entropy.chunks import check_chunk_tokens
from ..cross_entropy.logprobs import check_options as check_head_options
from ..cross_entropy.logprobs import linear_logprobs, linear_logprobs_reference
from ._sequences import (LOSS_OPTION_TYPES, check_choice, check_number, check_per_sequence, check_sequences,
                         completion_mask)
from .policy_fused import fused_policy_loss

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo")
KL_ESTIMATORS = ("k1", "k2", "k3")
LEVELS = ("token", "sequence")


def kl_estimate(logp: torch.Tensor, ref: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from the sampled tokens' log-probabilities."""
    if estimator == "k1":
        return logp - ref
    if estimator == "k2":
        return 0.5 * (logp - ref) ** 2
    return torch.exp(ref - logp) - (ref - logp) - 1


def token_weights(mask: torch.Tensor, loss_type: str, max_completion_length: int | None,
                  num_items_in_batch) -> torch.Tensor:
    """w_t of each token (mask (B, L), 1.0 where scored): the loss is sum_t w_t * loss_t."""
    if loss_type == "grpo":
        return mask / mask.sum(-1, keepdim=True).clamp(min=1.0) / mask.shape[0]
    if loss_type == "dr_grpo":
        return mask / (mask.shape[0] * (max_completion_length or mask.shape[1]))
    if loss_type in ("dapo", "cispo") and num_items_in_batch is not None:
        return mask / torch.as_tensor(num_items_in_batch, dtype=mask.dtype, device=mask.device).clamp(min=1.0)
    return mask / mask.sum().clamp(min=1.0)   # bnpo, and dapo and cispo over this batch alone


def per_token_policy_loss(logp: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor, *, old_logprobs=None,
                          ref_logprobs=None, beta=0.0, kl_estimator="k3", epsilon_low=0.2, epsilon_high=None,
                          delta=None, importance_sampling_level="token", policy_weights=None,
                          loss_type="dapo") -> torch.Tensor:
    """loss_t of every token (mask's shape, (B, L) or (1, T)), as TRL's GRPOTrainer computes it;
    differentiable in logp."""
    epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
    advantages = advantages.to(logp.dtype)
    advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    # Unscored tokens may hold anything in the per-token inputs (a trainer's padding): they are
    # replaced before any arithmetic, so that not even a NaN reaches the loss or its gradient.
    scored = mask > 0

    def at_scored(t: torch.Tensor) -> torch.Tensor:
        return torch.where(scored, t.to(logp.dtype), logp.detach())

    old = logp.detach() if old_logprobs is None else at_scored(old_logprobs)
    log_ratio = logp - old
    if importance_sampling_level == "sequence":
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_ratio)
    if loss_type == "cispo":
        per_token = -torch.clamp(coef_1, max=epsilon_high).detach() * advantages * logp
    else:
        coef_2 = torch.clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)
        if delta is not None:
            coef_1 = torch.clamp(coef_1, max=delta)
        per_token = -torch.min(coef_1 * advantages, coef_2 * advantages)
    if policy_weights is not None:
        per_token = per_token * torch.where(scored, policy_weights.to(logp.dtype), 0.0)
    if beta != 0.0:
        per_token = per_token + beta * kl_estimate(logp, at_scored(ref_logprobs), kl_estimator)
    return per_token.expand(mask.shape)


def policy_objective(logp: torch.Tensor, entropy: torch.Tensor | None, mask: torch.Tensor, advantages: torch.Tensor, *,
                     loss_type="dapo", max_completion_length=None, num_items_in_batch=None, entropy_coef=0.0,
                     **options) -> torch.Tensor:
    """The GRPO-family loss from (B, L) per-token log-probabilities (and entropies), as TRL's
    GRPOTrainer computes it; differentiable in logp and entropy. `options`: those of
    per_token_policy_loss."""
    per_token = per_token_policy_loss(logp, mask, advantages, loss_type=loss_type, **options)
    if loss_type == "grpo":
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif loss_type == "bnpo" or (loss_type in ("dapo", "cispo") and num_items_in_batch is None):
        loss = (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    elif loss_type == "dr_grpo":
        loss = (per_token * mask).sum() / (per_token.shape[0] * (max_completion_length or mask.shape[1]))
    else:
        loss = (per_token * mask).sum() / torch.as_tensor(num_items_in_batch, dtype=logp.dtype,
                                                          device=logp.device).clamp(min=1.0)
    if entropy_coef != 0.0:
        loss = loss - entropy_coef * (entropy * mask).sum() / mask.sum().clamp(min=1.0)
    return loss


def grpo_loss_reference(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, advantages: torch.Tensor,
                        *, bias=None, temperature=1.0, softcap=None, ignore_index=-100, upcast: bool = True,
                        **options) -> torch.Tensor:
    """`policy_objective` on the log-probabilities of `linear_logprobs_reference` (float64
    throughout when upcast): the loss `grpo_loss` computes."""
    logp, entropy = linear_logprobs_reference(hidden, weight, target, bias=bias, temperature=temperature,
                                              softcap=softcap, ignore_index=ignore_index, return_entropy=True,
                                              upcast=upcast)
    return policy_objective(logp, entropy, completion_mask(target, ignore_index).to(logp.dtype), advantages,
                            **options)


def _check(hidden, target, advantages, old_logprobs, ref_logprobs, policy_weights, beta, kl_estimator, epsilon_low,
           epsilon_high, delta, loss_type, importance_sampling_level, max_completion_length, entropy_coef):
    check_sequences(hidden, target)
    n, length = target.shape
    check_per_sequence("advantages", advantages, hidden, ((n,), (n, length), (n, 1)))
    if advantages is None:
        raise TypeError("advantages must be a tensor of shape (sequences,) or (sequences, length)")
    for name, t in (("old_logprobs", old_logprobs), ("ref_logprobs", ref_logprobs), ("policy_weights", policy_weights)):
        check_per_sequence(name, t, hidden, ((n, length),))
    check_number("beta", beta)
    check_choice("kl_estimator", kl_estimator, KL_ESTIMATORS)
    if beta != 0.0 and ref_logprobs is None:
        raise ValueError("beta != 0 needs ref_logprobs, the reference model's per-token log-probabilities")
    check_number("epsilon_low", epsilon_low, low=0.0, high=1.0)
    check_number("epsilon_high", epsilon_high, low=0.0, optional=True)
    check_number("delta", delta, positive=True, optional=True)
    check_choice("loss_type", loss_type, LOSS_TYPES)
    check_choice("importance_sampling_level", importance_sampling_level, LEVELS)
    if loss_type == "cispo" and importance_sampling_level != "token":
        raise ValueError("loss_type='cispo' weighs each token's log-probability by its own ratio: "
                         "importance_sampling_level must be 'token'")
    if max_completion_length is not None and (not isinstance(max_completion_length, int) or max_completion_length < 1):
        raise ValueError(f"max_completion_length must be None or a positive int, got {max_completion_length!r}")
    check_number("entropy_coef", entropy_coef)


def _check_items(name: str, value: object) -> None:
    """num_items_in_batch: None, a number, or a 0-d tensor (TRL passes either)."""
    if value is None or isinstance(value, torch.Tensor) and value.dim() == 0:
        return
    check_float(name, value, optional=True)


@checked_arguments(**LOSS_OPTION_TYPES, num_items_in_batch=_check_items)
def grpo_loss(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, advantages: torch.Tensor, *,
              old_logprobs: torch.Tensor | None = None, ref_logprobs: torch.Tensor | None = None, beta: float = 0.0,
              kl_estimator: str = "k3", epsilon_low: float = 0.2, epsilon_high: float | None = None,
              delta: float | None = None, loss_type: str = "dapo", importance_sampling_level: str = "token",
              max_completion_length: int | None = None, num_items_in_batch=None, entropy_coef: float = 0.0,
              policy_weights: torch.Tensor | None = None, temperature: float = 1.0,
              bias: torch.Tensor | None = None, softcap: float | None = None, ignore_index: int = -100,
              chunk_tokens: int | None = None, return_logprobs: bool = False):
    """The GRPO-family policy loss of a linear head's softmax (see the module docstring for the
    math), without ever holding the (tokens x vocabulary) logits; differentiable in hidden,
    weight and bias.

    hidden: (B, L, H), the policy's last hidden states at the completion positions; target:
    (B, L) int64 or int32, the sampled completion tokens, ignore_index where a position is not
    scored (padding, tool output: TRL's completion_mask == 0); weight (V, H) and bias (V,) in
    hidden's dtype. advantages: (B,) or (B, L). old_logprobs, ref_logprobs, policy_weights:
    (B, L) float (TRL's old_per_token_logps, ref_per_token_logps, and any per-token factor of
    the policy term: the vLLM importance-sampling ratio, an entropy mask). beta: the KL
    coefficient (needs ref_logprobs), with kl_estimator "k3" (TRL's), "k1" or "k2".
    epsilon_low, epsilon_high (default epsilon_low), delta (two-sided clipping), loss_type,
    importance_sampling_level ("sequence": GSPO), max_completion_length (dr_grpo; default L)
    and num_items_in_batch (dapo's normaliser: TRL's num_items_in_batch / num_processes, a
    number or 0-d tensor; default the batch's scored tokens) as in TRL's GRPOConfig;
    entropy_coef: TRL's entropy bonus. temperature and softcap as in `linear_logprobs`.
    A batch without scored tokens gives 0 and zero gradients.

    Returns the float32 0-d loss; with return_logprobs, (loss, logprobs, entropy), the (B, L)
    per-token values (detached) for metrics. Token-level importance sampling makes the
    gradients in the forward (three matrix products; the backward scales them); "sequence"
    runs `linear_logprobs` and autograd (four products).
    """
    hidden, weight, bias = autocast_inputs(hidden, weight, bias)
    _check(hidden, target, advantages, old_logprobs, ref_logprobs, policy_weights, beta, kl_estimator, epsilon_low,
           epsilon_high, delta, loss_type, importance_sampling_level, max_completion_length, entropy_coef)
    check_head_options(temperature, softcap, ignore_index)
    check_chunk_tokens(chunk_tokens)
    epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
    mask = completion_mask(target, ignore_index)
    options = dict(old_logprobs=old_logprobs, ref_logprobs=ref_logprobs, beta=beta, kl_estimator=kl_estimator,
                   epsilon_low=epsilon_low, epsilon_high=epsilon_high, delta=delta)
    if importance_sampling_level == "token":
        wide = mask.double()   # the weights' roundings would be amplified by the loss's cancellation
        weights = token_weights(wide, loss_type, max_completion_length, num_items_in_batch)
        entropy_weights = -entropy_coef * wide / wide.sum().clamp(min=1.0) if entropy_coef != 0.0 else None
        loss, logp, entropy = fused_policy_loss(hidden, weight, target, bias, advantages, weights, entropy_weights,
                                                policy_weights, temperature=temperature, softcap=softcap,
                                                ignore_index=ignore_index, chunk_tokens=chunk_tokens,
                                                stats=return_logprobs, cispo=loss_type == "cispo", **options)
    else:
        out = linear_logprobs(hidden, weight, target, bias=bias, temperature=temperature, softcap=softcap,
                              ignore_index=ignore_index, return_entropy=entropy_coef != 0.0 or return_logprobs,
                              chunk_tokens=chunk_tokens)
        logp, entropy = out if isinstance(out, tuple) else (out, None)
        loss = policy_objective(logp, entropy, mask, advantages, loss_type=loss_type,
                                importance_sampling_level=importance_sampling_level,
                                max_completion_length=max_completion_length, num_items_in_batch=num_items_in_batch,
                                entropy_coef=entropy_coef, policy_weights=policy_weights, **options)
    if return_logprobs:
        return loss, logp.detach(), entropy.detach()
    return loss
