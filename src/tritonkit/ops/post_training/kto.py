"""`kto_loss`: KTO (unpaired desirable / undesirable completions) over a linear head, without
the logits.

For sequence i with per-sequence sum of its completion tokens' log-probabilities S_i, the
reference model's R_i, and the reference point kl (TRL's detached batch estimate of
KL(policy || reference) from mismatched completions, clamped at 0; 0 for the "apo-free" form):
    desirable i:    d_w * (1 - sigma(beta * ((S_i - R_i) - kl)))
    undesirable i:  u_w * (1 - sigma(beta * (kl - (S_i - R_i))))
averaged over the N sequences: TRL's KTOTrainer with loss_type "kto". Autograd carries the
gradient back through `linear_logprobs` (four matrix products: each term depends on a whole
sequence).
"""

from __future__ import annotations

import torch

from ..._autocast import autocast_inputs
from ..._checks import check_tensor
from ..cross_entropy.chunks import check_chunk_tokens
from ..cross_entropy.logprobs import check_options as check_head_options
from ..cross_entropy.logprobs import linear_logprobs, linear_logprobs_reference
from ._sequences import (check_number, check_per_sequence, check_sequences, completion_mask, sequence_logps,
                         typed_loss)


def kto_objective(logp, mask, desirable, ref_logps, kl=0.0, *, beta=0.1, desirable_weight=1.0,
                  undesirable_weight=1.0):
    """KTO from (N, L) per-token log-probabilities and their mask."""
    ratio = sequence_logps(logp, mask, average=False) - ref_logps.to(logp.dtype)
    kl = torch.as_tensor(kl, dtype=logp.dtype, device=logp.device).detach()
    losses = torch.where(desirable, desirable_weight * (1 - torch.sigmoid(beta * (ratio - kl))),
                         undesirable_weight * (1 - torch.sigmoid(beta * (kl - ratio))))
    return losses.mean()


def _check(hidden, target, desirable, ref_logps, kl, beta, desirable_weight, undesirable_weight):
    check_sequences(hidden, target)
    n = target.shape[0]
    check_tensor("desirable", desirable, (torch.bool,))
    if desirable.shape != (n,):
        raise ValueError(f"desirable has shape {tuple(desirable.shape)}, expected ({n},): one flag a sequence")
    if ref_logps is None:
        raise TypeError(f"ref_logps must be a tensor of shape ({n},): the reference model's sums")
    check_per_sequence("ref_logps", ref_logps, hidden, ((n,),))
    if isinstance(kl, torch.Tensor):
        if kl.numel() != 1:
            raise ValueError(f"kl has shape {tuple(kl.shape)}; expected one value")
    else:
        check_number("kl", kl)
    check_number("beta", beta)
    check_number("desirable_weight", desirable_weight, low=0.0)
    check_number("undesirable_weight", undesirable_weight, low=0.0)


@typed_loss
def kto_loss(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, desirable: torch.Tensor,
             ref_logps: torch.Tensor, kl=0.0, *, beta: float = 0.1, desirable_weight: float = 1.0,
             undesirable_weight: float = 1.0, bias: torch.Tensor | None = None, temperature: float = 1.0,
             softcap: float | None = None, ignore_index: int = -100, chunk_tokens: int | None = None,
             return_logps: bool = False):
    """KTO over a linear head (the module docstring has the math), without the logits.

    hidden: (N, L, H), the policy's last hidden states; target: (N, L) int64 or int32
    completion tokens, ignore_index where not scored; desirable: (N,) bool; ref_logps: (N,),
    the reference model's per-sequence sums; kl: the reference point, a float or one-element
    tensor (detached). weight (V, H), bias (V,), temperature and softcap as in
    `linear_logprobs`. Returns the float32 0-d loss; with return_logps, (loss, logps), the
    policy's (N,) sums, detached."""
    hidden, weight, bias = autocast_inputs(hidden, weight, bias)
    _check(hidden, target, desirable, ref_logps, kl, beta, desirable_weight, undesirable_weight)
    check_head_options(temperature, softcap, ignore_index)
    check_chunk_tokens(chunk_tokens)
    logp = linear_logprobs(hidden, weight, target, bias=bias, temperature=temperature, softcap=softcap,
                           ignore_index=ignore_index, chunk_tokens=chunk_tokens)
    mask = completion_mask(target, ignore_index)
    loss = kto_objective(logp, mask, desirable, ref_logps, kl, beta=beta, desirable_weight=desirable_weight,
                         undesirable_weight=undesirable_weight)
    return (loss, sequence_logps(logp.detach(), mask, average=False)) if return_logps else loss


def kto_loss_reference(hidden, weight, target, desirable, ref_logps, kl=0.0, *, bias=None, temperature=1.0,
                       softcap=None, ignore_index=-100, upcast=True, **options):
    """`kto_loss` on the log-probabilities of `linear_logprobs_reference` (float64 throughout
    when upcast)."""
    logp = linear_logprobs_reference(hidden, weight, target, bias=bias, temperature=temperature, softcap=softcap,
                                     ignore_index=ignore_index, upcast=upcast)
    return kto_objective(logp, completion_mask(target, ignore_index).to(logp.dtype), desirable, ref_logps, kl,
                         **options)
