"""DTensor sharding rules of the post-training ops' custom ops (`grpo_loss`'s fused op,
`distill_loss`), in `tritonkit._sharding`'s terms, passed to their `Op` declarations.

Every one is a function of the tokens, each token on its own (the losses' token weights are
made from the whole batch before the op), so the tokens (rows of hidden, target and every
per-token input) may be sharded, with the head replicated: per-token outputs stay sharded,
the fused losses' sums become Partial, and the gradients of the replicated head are Partial.
The vocabulary may not be sharded (each row's log-sum-exp needs all of it), nor hidden's last
dim.
"""

from __future__ import annotations

from ..._sharding import Partial, Replicate, maybe, nonempty
from ..cross_entropy.sharding import ROWS, head_replicated, loss_placements, rows_unless_empty


def linear_grpo_loss_fwd_sharding(hidden, weight, target, bias, advantages, old_logprobs, ref_logprobs,
                                   policy_weights, token_weights, entropy_weights, temperature, softcap, ignore_index,
                                   beta, kl_estimator, epsilon_low, epsilon_high, delta, cispo, stats, want_hidden,
                                   want_weight, want_bias, chunk_tokens):
    per_token = (("target", target), ("advantages", advantages), ("old_logprobs", old_logprobs),
                 ("ref_logprobs", ref_logprobs), ("policy_weights", policy_weights), ("token_weights", token_weights),
                 ("entropy_weights", entropy_weights))
    head_replicated("grpo_loss", hidden, weight, bias, *per_token)
    options = [None] * 14
    tokens = [spec for _, spec in per_token[1:]]
    replicated = [Replicate(), Replicate(), Replicate(), maybe(bias, Replicate())] + [
        maybe(spec, Replicate()) for spec in tokens]
    rows = [ROWS, Replicate(), ROWS, maybe(bias, Replicate())] + [maybe(spec, ROWS) for spec in tokens]
    outputs = [Partial(), ROWS, nonempty(stats or entropy_weights is not None, ROWS), nonempty(want_hidden, ROWS),
               nonempty(want_weight, Partial()), nonempty(want_bias and bias is not None, Partial())]
    return [([Replicate()] * 6, replicated + options), (outputs, rows + options)]


def linear_grpo_loss_bwd_sharding(grad_loss, grad_hidden, grad_weight, grad_bias):
    # The forward's gradients, as it placed them, times the replicated upstream scalar.
    saved = [rows_unless_empty(grad_hidden), rows_unless_empty(grad_weight, Partial()),
             rows_unless_empty(grad_bias, Partial())]
    return [([Replicate()] * 3, [Replicate()] * 4), (saved, [Replicate(), *saved])]


def linear_distill_loss_fwd_sharding(hidden, weight, target, bias, teacher_hidden, teacher_weight, teacher_bias,
                                      kind, beta, temperature, ignore_index, reduction, want_hidden, want_weight,
                                      want_bias, chunk_tokens):
    op = "distill_loss"
    head_replicated(op, hidden, weight, bias, ("target", target))
    head_replicated(op, teacher_hidden, teacher_weight, teacher_bias)
    loss, rows = loss_placements(op, "hidden", hidden, reduction)
    reduced = reduction != "none"
    grads = [nonempty(reduced and want_hidden, rows), nonempty(reduced and want_weight, Partial()),
             nonempty(reduced and want_bias and bias is not None, Partial())]
    options = [None] * 9
    replicated = [Replicate(), Replicate(), Replicate(), maybe(bias, Replicate()), Replicate(), Replicate(),
                  maybe(teacher_bias, Replicate())]
    inputs = [rows, Replicate(), rows, maybe(bias, Replicate()), rows, Replicate(), maybe(teacher_bias, Replicate())]
    return [([Replicate()] * 7, replicated + options), ([loss, rows, rows, rows, *grads], inputs + options)]


def linear_distill_loss_bwd_sharding(grad_loss, hidden, weight, target, bias, teacher_hidden, teacher_weight,
                                      teacher_bias, lse, teacher_lse, aux, grad_hidden, grad_weight, grad_bias, kind,
                                      beta, temperature, ignore_index, reduction, want_hidden, want_weight, want_bias,
                                      chunk_tokens):
    head_replicated("distill_loss backward", hidden, weight, bias, ("target", target))
    reduced = reduction != "none"
    options = [None] * 9
    heads = [ROWS, Replicate(), ROWS, maybe(bias, Replicate()), ROWS, Replicate(), maybe(teacher_bias, Replicate())]
    saved = [rows_unless_empty(grad_hidden), rows_unless_empty(grad_weight, Partial()),
             rows_unless_empty(grad_bias, Partial())]
    rows = [Replicate() if reduced else ROWS, *heads, ROWS, ROWS, ROWS, *saved]
    replicated = [Replicate(), Replicate(), Replicate(), Replicate(), maybe(bias, Replicate()), Replicate(),
                  Replicate(), maybe(teacher_bias, Replicate())] + [Replicate()] * 6
    outputs = [nonempty(want_hidden, ROWS), nonempty(want_weight, Partial()),
               nonempty(want_bias and bias is not None, Partial())]
    return [([Replicate()] * 3, replicated + options), (outputs, rows + options)]
