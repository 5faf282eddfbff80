"""The peers the post-training entries measure against, and what their cases share: the
eager compositions a trainer runs (the whole (tokens x vocabulary) logits in float32), TRL's
way of getting per-token log-probabilities (the model's logits divided by the temperature,
then gathered a block of rows at a time), and TRL's and Liger Kernel's own functions where
they import."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..ops.post_training.policy import policy_objective
from ..ops.post_training.preference import dpo_objective
from . import OpEntry
from ._accuracy import Comparison
from ._fuzz import FuzzCase, FuzzInputs, compare_gradients, describe
from ._inputs import peer_compile
from ._peers import liger

ROWS_A_BLOCK = 1024   # rows of the logits a TRL-style block takes (its float32 copy bounds memory)
LOSS_PEERS = ("eager", "torch.compile", "Liger")


def eager_logprobs(hidden, weight, target, temperature=1.0):
    """log_softmax of the float32 logits, gathered at target; the entropy from the same."""
    logp_all = torch.log_softmax(F.linear(hidden, weight).float() / temperature, dim=-1)
    logp = logp_all.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return logp, -(logp_all.exp() * logp_all).sum(-1)


def blockwise_logprobs(hidden, weight, target, temperature=1.0):
    """TRL's path written in torch: the model's logits in its dtype, divided by the temperature
    there, then log-probabilities and entropies a block of rows at a time in float32 (memory
    of one block's float32 copy beyond the logits themselves)."""
    logits = F.linear(hidden, weight) / temperature
    flat, index = logits.reshape(-1, logits.shape[-1]), target.reshape(-1).clamp(min=0)
    logps, entropies = [], []
    for start in range(0, flat.shape[0], ROWS_A_BLOCK):
        block = torch.log_softmax(flat[start:start + ROWS_A_BLOCK].float(), dim=-1)
        logps.append(block.gather(-1, index[start:start + ROWS_A_BLOCK].unsqueeze(-1)).squeeze(-1))
        entropies.append(-(block.exp() * block).sum(-1))
    return torch.cat(logps).view(target.shape), torch.cat(entropies).view(target.shape)


def trl_logprobs():
    """TRL's own selective_log_softmax_and_entropy on the model's logits, where TRL imports."""
    try:
        from trl.trainer.utils import selective_log_softmax_and_entropy
    except Exception:  # not installed, or its imports fail here
        return None

    def run(hidden, weight, target, temperature=1.0):
        return selective_log_softmax_and_entropy(F.linear(hidden, weight), target.clamp(min=0),
                                                 temperature=temperature)
    return run


def pg_objective(logp, entropy, target):
    """The per-token objective of the logprob cases: -(logp * advantage) - 0.01 entropy, means
    over the scored tokens (advantages fixed by the target, so every provider sees the same)."""
    mask = (target != -100).float()
    advantage = (target % 7 - 3).float() / 3
    return (-(logp * advantage * mask).sum() - 0.01 * (entropy * mask).sum()) / mask.sum().clamp(min=1.0)


def eager_grpo(hidden, weight, target, advantages, old, ref, beta):
    """TRL's GRPO loss on eager per-token log-probabilities (dapo, k3 KL)."""
    logp, entropy = eager_logprobs(hidden, weight, target)
    mask = (target != -100).float()
    return policy_objective(logp, entropy, mask, advantages, old_logprobs=old, ref_logprobs=ref, beta=beta)


def liger_grpo(beta):
    """Liger Kernel's fused linear GRPO loss (dapo, k3) where it imports, as (hidden, weight,
    target, advantages, old, ref) -> loss."""
    cls = liger("chunked_loss", "LigerFusedLinearGRPOLoss")
    if cls is None:
        return None
    loss_fn = cls(beta=beta, loss_type="dapo", use_ref_model=False)

    def run(hidden, weight, target, advantages, old, ref):
        mask = (target != -100).long()
        loss, _ = loss_fn(hidden, weight, target.clamp(min=0), mask, advantages, ref_per_token_logps=ref,
                          old_per_token_logps=old)
        return loss
    return run


def reference_sums(logprobs, ref_hidden, ref_weight, target):
    """The reference model's per-sequence sums (chosen, rejected), without a gradient."""
    with torch.no_grad():
        sums = (logprobs(ref_hidden, ref_weight, target)[0] * (target != -100)).sum(-1)
    half = sums.shape[0] // 2
    return sums[:half], sums[half:]


def eager_dpo(hidden, weight, ref_hidden, ref_weight, target):
    """DPO on eager log-probabilities of the policy and of the reference model."""
    logp, _ = eager_logprobs(hidden, weight, target)
    return dpo_objective(logp, (target != -100).float(), *reference_sums(eager_logprobs, ref_hidden, ref_weight, target))


def liger_dpo():
    """Liger Kernel's fused linear DPO loss (sigmoid, beta 0.1) with its reference model, where
    it imports."""
    cls = liger("chunked_loss", "LigerFusedLinearDPOLoss")
    if cls is None:
        return None
    loss_fn = cls(beta=0.1, use_ref_model=True)

    def run(hidden, weight, ref_hidden, ref_weight, target):
        out = loss_fn(weight, hidden, target, ref_input=ref_hidden, ref_weight=ref_weight)
        return out[0] if isinstance(out, tuple) else out
    return run


def eager_distill(hidden, weight, teacher_hidden, teacher_weight, target, beta):
    """TRL's generalized JSD on eager logits of both heads, a mean over the scored tokens."""
    s = torch.log_softmax(F.linear(hidden, weight).float(), dim=-1)
    with torch.no_grad():
        t = torch.log_softmax(F.linear(teacher_hidden, teacher_weight).float(), dim=-1)
    log_m = torch.logsumexp(torch.stack([s + torch.log(torch.tensor(1 - beta)), t + torch.log(torch.tensor(beta))]),
                            dim=0)
    per_token = (beta * F.kl_div(log_m, t, reduction="none", log_target=True)
                 + (1 - beta) * F.kl_div(log_m, s, reduction="none", log_target=True)).sum(-1)
    mask = (target != -100).float()
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


def liger_distill(beta):
    """Liger Kernel's fused linear JSD (soft loss only) where it imports."""
    cls = liger("chunked_loss", "LigerFusedLinearJSDLoss")
    if cls is None:
        return None
    loss_fn = cls(weight_hard_loss=0.0, weight_soft_loss=1.0, beta=beta)

    def run(hidden, weight, teacher_hidden, teacher_weight, target):
        flat = (lambda t: t.reshape(-1, t.shape[-1]))
        return loss_fn(flat(hidden), weight, flat(teacher_hidden), teacher_weight, target.reshape(-1))
    return run


def loss_fuzz_cases(name, draw, ours, reference, upstream_shape, examples=6) -> tuple[FuzzCase, FuzzCase]:
    """The forward and backward fuzz cases of a loss: draw(inputs) gives (tensors, options),
    the differentiable tensors and everything else; ours(**tensors, **options, chunk_tokens)
    and reference(**tensors, **options, upcast) compute it; upstream_shape(tensors, options)
    is the shape of its result."""
    def note(tensors, options) -> str:
        shown = {k: v for k, v in options.items() if not isinstance(v, torch.Tensor)}
        return f"{name} {shown}: " + ", ".join(f"{n} {describe(t)}" for n, t in tensors.items())

    def forward(inputs: FuzzInputs) -> list[Comparison]:
        tensors, options = draw(inputs)
        result = ours(**tensors, **options, chunk_tokens=inputs.draw.choice((None, 2)))
        return [Comparison(note(tensors, options), result, reference(**tensors, **options),
                           reference(**tensors, **options, upcast=False))]

    def backward(inputs: FuzzInputs) -> list[Comparison]:
        tensors, options = draw(inputs)
        chunk_tokens = inputs.draw.choice((None, 2))
        return compare_gradients(note(tensors, options), tensors,
                                 lambda **t: ours(**t, **options, chunk_tokens=chunk_tokens),
                                 lambda upcast, **t: reference(**t, **options, upcast=upcast),
                                 [inputs.randn(upstream_shape(tensors, options), torch.float32)])

    return FuzzCase("forward", examples, forward), FuzzCase("backward", examples, backward)


def loss_providers(fwd_bwd, ours, eager, liger_loss) -> dict:
    """A fused loss's benchmark providers (LOSS_PEERS beside ours), each timed as fwd_bwd(loss)
    makes it: ours, the eager composition, torch.compile of that, and Liger Kernel's loss
    (liger_loss; None where Liger does not import, and then left out)."""
    providers = {"tritonkit": fwd_bwd(ours), "eager": fwd_bwd(eager), "torch.compile": fwd_bwd(peer_compile(eager))}
    if liger_loss is not None:
        providers["Liger"] = fwd_bwd(liger_loss)
    return providers


def loss_entry(name, summary, passes, op, bench_cases, sample, reference, fuzz) -> OpEntry:
    """The catalogue entry of a fused loss measured against LOSS_PEERS; fuzz: (draw, ours,
    reference, upstream_shape) as `loss_fuzz_cases` takes them."""
    return OpEntry(name=name, summary=summary, passes=passes, bench_cases=bench_cases, peers=LOSS_PEERS, op=op,
                   sample=sample, reference=reference, fuzz=loss_fuzz_cases(name, *fuzz))
