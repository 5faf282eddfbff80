"""Catalogue entry for `tritonkit.grpo_loss` (its token-level op, fused into the chunk loop):
benchmark cases against eager torch, torch.compile and Liger Kernel's fused GRPO loss, with
each provider's peak memory; sample and fuzz. Its row kernel is linear_logprobs's, which that
entry inspects."""

from __future__ import annotations

import functools

import torch

from ..ops.cross_entropy import linear_logprobs_reference
from ..ops.post_training import grpo_loss, grpo_loss_reference
from ..ops.post_training.policy import per_token_policy_loss
from . import BenchCase
from ._fuzz import FLOATS, FuzzInputs
from ._post_training import eager_grpo, liger_grpo, loss_entry, loss_providers
from .linear_logprobs import inspect_grad, inspect_stats

BETA = 0.04


def _case(batch: int, length: int, hidden: int, vocab: int, dtype: torch.dtype) -> BenchCase:
    def setup(device: torch.device):
        h = torch.randn(batch, length, hidden, device=device, dtype=dtype).requires_grad_()
        w = (torch.randn(vocab, hidden, device=device, dtype=dtype) / hidden ** 0.5).requires_grad_()
        target = torch.randint(0, vocab, (batch, length), device=device)
        target[:, -length // 8:] = -100   # padding after the shorter completions
        advantages = torch.randn(batch, device=device)
        with torch.no_grad():
            logp = grpo_loss(h, w, target, advantages, return_logprobs=True)[1]
        old, ref = logp + 0.05 * torch.randn_like(logp), logp + 0.05 * torch.randn_like(logp)

        def ours(h_, w_, t_, a_, o_, r_):
            return grpo_loss(h_, w_, t_, a_, old_logprobs=o_, ref_logprobs=r_, beta=BETA)

        def fwd_bwd(loss_fn):
            return lambda: torch.autograd.grad(loss_fn(h, w, target, advantages, old, ref), (h, w))

        return loss_providers(fwd_bwd, ours, functools.partial(eager_grpo, beta=BETA), liger_grpo(BETA))

    tokens = batch * length
    name = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    return BenchCase(
        label=f"{batch}x{length}x{hidden}x{vocab} {name}", group=f"grpo_loss {name}", unit="TFLOP/s",
        work=3 * 2 * tokens * hidden * vocab, size=tokens * vocab, setup=setup,
        bytes_in_flight=tokens * vocab * (dtype.itemsize + 12) + 2 * (tokens + vocab) * hidden * dtype.itemsize,
        memory=True)


def _bench_cases(on_gpu: bool) -> list[BenchCase]:
    if on_gpu:   # 8192 completion tokens at Qwen's hidden 4096 and vocabulary 151936
        return [_case(8, 1024, 4096, 151936, torch.bfloat16)]
    return [_case(2, 5, 64, 1000, torch.bfloat16)]


def _sample(device: torch.device) -> tuple:
    # hidden at an odd element offset, a transposed weight, a bias, unscored tokens, old and
    # reference log-probabilities, two-sided clipping, an entropy bonus, temperature, the stats,
    # chunks of 3 tokens over 7.
    hidden = torch.randn(7 * 24 + 1, device=device)[1:].view(7, 24)
    weight = torch.randn(24, 301, device=device).t() * 0.6
    bias = torch.randn(301, device=device)
    target = torch.randint(0, 301, (7,), device=device)
    target[::3] = -100
    scored = (target != -100).float()
    # old and reference policies near the current one, as in training
    logp = linear_logprobs_reference(hidden, weight, target, bias=bias, temperature=0.9).float()
    old, ref = logp + 0.3 * torch.randn(7, device=device), logp + 0.3 * torch.randn(7, device=device)
    return (hidden, weight, target, bias, torch.randn(7, device=device), old, ref, None,
            scored / scored.sum(), -0.01 * scored / scored.sum(), 0.9, None, -100, 0.04, "k3", 0.2, 0.28, 1.5, False,
            True, True, True, True, 3)


def _reference(hidden, weight, target, bias, advantages, old_logprobs, ref_logprobs, policy_weights, token_weights,
               entropy_weights, temperature, softcap, ignore_index, beta, kl_estimator, epsilon_low, epsilon_high,
               delta, cispo, stats, want_hidden, want_weight, want_bias, chunk_tokens, upcast=True):
    """The op's loss (sum_t w_t loss_t + e_t H_t over flat tokens) in torch: OpEntry.reference."""
    logp, entropy = linear_logprobs_reference(hidden, weight, target, bias=bias, temperature=temperature,
                                              softcap=softcap, ignore_index=ignore_index, return_entropy=True,
                                              upcast=upcast)
    row = (lambda t: None if t is None else t.to(logp.dtype).unsqueeze(0))
    per_token = per_token_policy_loss(row(logp), row((target != ignore_index).float()), row(advantages),
                                      old_logprobs=row(old_logprobs), ref_logprobs=row(ref_logprobs), beta=beta,
                                      kl_estimator=kl_estimator, epsilon_low=epsilon_low, epsilon_high=epsilon_high,
                                      delta=delta, policy_weights=row(policy_weights),
                                      loss_type="cispo" if cispo else "dapo")
    loss = (per_token * row(token_weights)).sum()
    return loss if entropy_weights is None else loss + (entropy * entropy_weights.to(logp.dtype)).sum()


def _fuzz_inputs(inputs: FuzzInputs):
    draw = inputs.draw
    small = tuple(s for s in inputs.edge if s <= 13)
    batch, length, width = draw.choice((1, 2, 3)), draw.choice(small), draw.choice(small)
    vocab = draw.choice(inputs.edge + (1000,))
    dtype = draw.choice(FLOATS)
    tensors = dict(hidden=inputs.view((batch, length, width), dtype),
                   weight=inputs.view((vocab, width), dtype, scale=3.0 / width ** 0.5))
    target = torch.randint(0, vocab, (batch, length), device=inputs.device, generator=inputs.generator)
    target[torch.rand(batch, length, device=inputs.device, generator=inputs.generator) < draw.choice((0.0, 0.3))] = -100
    logp = linear_logprobs_reference(tensors["hidden"], tensors["weight"], target).float()
    options = dict(target=target, advantages=inputs.randn((batch,), torch.float32),
                   old_logprobs=logp + 0.3 * inputs.randn(logp.shape, torch.float32) if draw.boolean() else None,
                   loss_type=draw.choice(("grpo", "bnpo", "dr_grpo", "dapo", "cispo")),
                   temperature=draw.choice((1.0, 0.7)), entropy_coef=draw.choice((0.0, 0.01)))
    options["importance_sampling_level"] = "token" if options["loss_type"] == "cispo" else draw.choice(
        ("token", "token", "sequence"))
    if options["loss_type"] == "cispo":
        options["epsilon_high"] = draw.choice((0.28, 5.0))
    if draw.boolean():
        options.update(ref_logprobs=logp + 0.3 * inputs.randn(logp.shape, torch.float32), beta=0.04,
                       kl_estimator=draw.choice(("k1", "k2", "k3")))
    return tensors, options


ENTRY = loss_entry(
    "grpo_loss", "GRPO-family policy loss over a linear head without the logits, gradients made in the forward",
    # the forward's two launches a chunk: the statistics, then dlogits for the loss's gradient
    passes={"stats": inspect_stats, "grad": inspect_grad}, op="linear_grpo_loss", bench_cases=_bench_cases,
    sample=_sample, reference=_reference,
    fuzz=(_fuzz_inputs, grpo_loss, grpo_loss_reference, lambda tensors, options: ()))
