"""Paired preference losses over a linear head: DPO, ORPO and SimPO, without the logits.

The batch holds 2B sequences, the B chosen completions first and then the B rejected ones in
the same order (TRL's concatenated forward). With S_c and S_r the per-sequence sums of the
completion tokens' log-probabilities (means over them, A_c and A_r, where a loss averages) and
sigma the logistic function:
    DPO    z = beta * ((S_c - R_c) - (S_r - R_r)),  R the reference model's sums
           "sigmoid": -(1 - eps) log sigma(z) - eps log sigma(-z)   (eps: label_smoothing, cDPO)
           "hinge":   relu(1 - z)
           "ipo":     ((S_c - R_c) / n_c - (S_r - R_r) / n_r - 1 / (2 beta))^2   (n: scored tokens)
    SimPO  z = beta * (A_c - A_r) - gamma;  -(1 - eps) log sigma(z) - eps log sigma(-z)
    ORPO   log_odds = (A_c - A_r) - (log(1 - exp(A_c)) - log(1 - exp(A_r)));  -beta log sigma(log_odds)
           plus the chosen completions' negative log-likelihood (mean over their tokens)
each averaged over the B pairs, plus nll_alpha times that negative log-likelihood where asked
(RPO for DPO, CPO's cpo_alpha for SimPO). These are TRL's DPOTrainer (f-divergence
"reverse_kl"), CPOTrainer (loss_type "simpo") and ORPOTrainer losses. The per-token
log-probabilities come from `linear_logprobs` and autograd carries the gradient back through
them: each loss depends on whole sequences, so the forward cannot know a token's upstream
gradient, and the backward recomputes the chunks' logits (four matrix products).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..._autocast import autocast_inputs
from ..cross_entropy.chunks import check_chunk_tokens
from ..cross_entropy.logprobs import check_options as check_head_options
from ..cross_entropy.logprobs import linear_logprobs, linear_logprobs_reference
from ._sequences import (check_choice, check_number, check_per_sequence, check_sequences, completion_mask,
                         sequence_logps, split_pairs, typed_loss)

DPO_LOSS_TYPES = ("sigmoid", "hinge", "ipo")


def _logistic(z: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    return -(1 - label_smoothing) * F.logsigmoid(z) - label_smoothing * F.logsigmoid(-z)


def _chosen_nll(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The chosen completions' negative log-likelihood, a mean over their scored tokens."""
    chosen, _ = split_pairs(logp, "hidden")
    chosen_mask, _ = split_pairs(mask, "hidden")
    return -(chosen * chosen_mask).sum() / chosen_mask.sum().clamp(min=1.0)


def dpo_objective(logp, mask, ref_chosen_logps, ref_rejected_logps, *, beta=0.1, loss_type="sigmoid",
                  label_smoothing=0.0, nll_alpha=0.0):
    """DPO from (2B, L) per-token log-probabilities and their mask."""
    sums = sequence_logps(logp, mask, average=False)
    chosen, rejected = split_pairs(sums, "hidden")
    chosen_ratio = chosen - ref_chosen_logps.to(logp.dtype)
    rejected_ratio = rejected - ref_rejected_logps.to(logp.dtype)
    if loss_type == "ipo":
        n_chosen, n_rejected = split_pairs(mask.sum(-1).clamp(min=1.0), "hidden")
        losses = (chosen_ratio / n_chosen - rejected_ratio / n_rejected - 1 / (2 * beta)) ** 2
    elif loss_type == "hinge":
        losses = torch.relu(1 - beta * (chosen_ratio - rejected_ratio))
    else:
        losses = _logistic(beta * (chosen_ratio - rejected_ratio), label_smoothing)
    loss = losses.mean()
    return loss + nll_alpha * _chosen_nll(logp, mask) if nll_alpha != 0.0 else loss


def simpo_objective(logp, mask, *, beta=2.0, gamma=0.5, label_smoothing=0.0, nll_alpha=0.0):
    """SimPO from (2B, L) per-token log-probabilities and their mask."""
    chosen, rejected = split_pairs(sequence_logps(logp, mask, average=True), "hidden")
    loss = _logistic(beta * (chosen - rejected) - gamma, label_smoothing).mean()
    return loss + nll_alpha * _chosen_nll(logp, mask) if nll_alpha != 0.0 else loss


def orpo_objective(logp, mask, *, beta=0.1):
    """ORPO from (2B, L) per-token log-probabilities and their mask. A pair in which either
    completion has no scored token has no odds (its mean log-probability 0 is certainty):
    its odds-ratio term is 0, where TRL's would be NaN."""
    chosen, rejected = split_pairs(sequence_logps(logp, mask, average=True), "hidden")
    n_chosen, n_rejected = split_pairs(mask.sum(-1), "hidden")
    scored = (n_chosen > 0) & (n_rejected > 0)
    # Away from 0 where not scored, so that neither branch of the where makes a NaN gradient.
    chosen, rejected = (torch.where(scored, a, -1.0) for a in (chosen, rejected))
    log_odds = (chosen - rejected) - (torch.log1p(-torch.exp(chosen)) - torch.log1p(-torch.exp(rejected)))
    ratio = torch.where(scored, F.logsigmoid(log_odds), 0.0)
    return _chosen_nll(logp, mask) - beta * ratio.mean()


_OBJECTIVES = {"dpo": dpo_objective, "simpo": simpo_objective, "orpo": orpo_objective}


def _check(hidden, target, ref, options):
    check_sequences(hidden, target)
    pairs = target.shape[0] // 2
    split_pairs(target, "hidden")
    for name in ("beta", "gamma", "nll_alpha"):
        if name in options:
            check_number(name, options[name])
    if "label_smoothing" in options:
        check_number("label_smoothing", options["label_smoothing"], low=0.0, high=0.5)
    if "loss_type" in options:
        check_choice("loss_type", options["loss_type"], DPO_LOSS_TYPES)
    if options.get("loss_type") == "ipo" and not options.get("beta", 0.1) > 0:
        raise ValueError("beta must be > 0 for loss_type='ipo'")
    for name, t in zip(("ref_chosen_logps", "ref_rejected_logps"), ref or ()):
        if t is None:
            raise TypeError(f"{name} must be a tensor of shape ({pairs},): the reference model's sums")
        check_per_sequence(name, t, hidden, ((pairs,),))


def _preference(kind, hidden, weight, target, ref, *, bias, temperature, softcap, ignore_index, chunk_tokens,
                return_logps, reference_upcast=None, **options):
    """One of the objectives on the log-probabilities of ours (reference_upcast None) or of
    the reference (float64 when reference_upcast)."""
    if reference_upcast is None:
        hidden, weight, bias = autocast_inputs(hidden, weight, bias)
        _check(hidden, target, ref, options)
        check_head_options(temperature, softcap, ignore_index)
        check_chunk_tokens(chunk_tokens)
        logp = linear_logprobs(hidden, weight, target, bias=bias, temperature=temperature, softcap=softcap,
                               ignore_index=ignore_index, chunk_tokens=chunk_tokens)
    else:
        logp = linear_logprobs_reference(hidden, weight, target, bias=bias, temperature=temperature,
                                         softcap=softcap, ignore_index=ignore_index, upcast=reference_upcast)
    mask = completion_mask(target, ignore_index).to(logp.dtype)
    loss = _OBJECTIVES[kind](logp, mask, *(ref or ()), **options)
    if not return_logps:
        return loss
    return (loss, *split_pairs(sequence_logps(logp.detach(), mask, average=kind != "dpo"), "hidden"))


@typed_loss
def dpo_loss(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, ref_chosen_logps: torch.Tensor,
             ref_rejected_logps: torch.Tensor, *, beta: float = 0.1, loss_type: str = "sigmoid",
             label_smoothing: float = 0.0, nll_alpha: float = 0.0, bias: torch.Tensor | None = None,
             temperature: float = 1.0, softcap: float | None = None, ignore_index: int = -100,
             chunk_tokens: int | None = None, return_logps: bool = False):
    """DPO over a linear head (the module docstring has the math), without the logits.

    hidden: (2B, L, H), the policy's last hidden states of the B chosen completions followed by
    the B rejected ones; target: (2B, L) int64 or int32, the completion tokens, ignore_index at
    positions not scored (prompt, padding); weight (V, H) and bias (V,) in hidden's dtype.
    ref_chosen_logps, ref_rejected_logps: (B,), the reference model's per-sequence sums of
    log-probabilities (`linear_logprobs` of the reference head under torch.no_grad, summed).
    loss_type "sigmoid" (with label_smoothing: cDPO), "hinge" or "ipo"; nll_alpha adds the
    chosen completions' negative log-likelihood (RPO). temperature and softcap as in
    `linear_logprobs`. Returns the float32 0-d loss; with return_logps, (loss, chosen_logps,
    rejected_logps), the policy's (B,) sums, detached (for rewards and metrics)."""
    return _preference("dpo", hidden, weight, target, (ref_chosen_logps, ref_rejected_logps), bias=bias,
                       temperature=temperature, softcap=softcap, ignore_index=ignore_index, chunk_tokens=chunk_tokens,
                       return_logps=return_logps, beta=beta, loss_type=loss_type, label_smoothing=label_smoothing,
                       nll_alpha=nll_alpha)


@typed_loss
def simpo_loss(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, *, beta: float = 2.0,
               gamma: float = 0.5, label_smoothing: float = 0.0, nll_alpha: float = 0.0,
               bias: torch.Tensor | None = None, temperature: float = 1.0, softcap: float | None = None,
               ignore_index: int = -100, chunk_tokens: int | None = None, return_logps: bool = False):
    """SimPO (reference-free, length-normalised) over a linear head, without the logits.
    Inputs as `dpo_loss` without the reference sums; gamma is the target margin (TRL's
    simpo_gamma), nll_alpha CPO's cpo_alpha. With return_logps the per-sequence means."""
    return _preference("simpo", hidden, weight, target, None, bias=bias, temperature=temperature, softcap=softcap,
                       ignore_index=ignore_index, chunk_tokens=chunk_tokens, return_logps=return_logps, beta=beta,
                       gamma=gamma, label_smoothing=label_smoothing, nll_alpha=nll_alpha)


@typed_loss
def orpo_loss(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, *, beta: float = 0.1,
              bias: torch.Tensor | None = None, temperature: float = 1.0, softcap: float | None = None,
              ignore_index: int = -100, chunk_tokens: int | None = None, return_logps: bool = False):
    """ORPO (the chosen completions' NLL minus beta times the mean log-sigmoid of the log odds
    ratio) over a linear head, without the logits. Inputs as `dpo_loss` without the reference
    sums. With return_logps the per-sequence means."""
    return _preference("orpo", hidden, weight, target, None, bias=bias, temperature=temperature, softcap=softcap,
                       ignore_index=ignore_index, chunk_tokens=chunk_tokens, return_logps=return_logps, beta=beta)


def _reference(kind):
    def reference(hidden, weight, target, *ref, bias=None, temperature=1.0, softcap=None, ignore_index=-100,
                  upcast=True, **options):
        return _preference(kind, hidden, weight, target, ref or None, bias=bias, temperature=temperature,
                           softcap=softcap, ignore_index=ignore_index, chunk_tokens=None, return_logps=False,
                           reference_upcast=upcast, **options)
    reference.__name__ = reference.__qualname__ = f"{kind}_loss_reference"
    reference.__doc__ = (f"`{kind}_loss` on the log-probabilities of `linear_logprobs_reference` (float64 "
                         "throughout when upcast).")
    return reference


dpo_loss_reference = _reference("dpo")
simpo_loss_reference = _reference("simpo")
orpo_loss_reference = _reference("orpo")
