"""DTensor sharding rules for the post-training ops' custom ops (`linear_logprobs`,
`grpo_loss`'s fused op, `distill_loss`), added to `sharding._RULES` when `sharding` is
imported.

Every one is a function of the tokens, each token on its own (the losses' token weights are
made from the whole batch before the op), so the tokens (rows of hidden, target and every
per-token input) may be sharded, with the head replicated: per-token outputs stay sharded,
the fused losses' sums become Partial, and the gradients of the replicated head are Partial.
The vocabulary may not be sharded (each row's log-sum-exp needs all of it), nor hidden's last
dim.
"""

from __future__ import annotations

from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec

from .sharding import _empty, _loss_placements, _maybe, _nonempty, _only_shard, _rule

_VOCAB_WHY = ("the vocabulary may not be sharded: each token's log-sum-exp needs all of it; replicate the head "
              "and shard the tokens")
_ROWS_WHY = "only the tokens (rows) may be sharded"
ROWS = Shard(0)


def _head(op: str, hidden, weight, bias, *per_token) -> None:
    """Tokens sharded or replicated, the head replicated (plain tensors, which DTensor refuses
    beside DTensors itself, are not looked at)."""
    for name, spec, allowed, why in (("weight", weight, (), _VOCAB_WHY), ("bias", bias, (), _VOCAB_WHY),
                                     ("hidden", hidden, (0,), _ROWS_WHY),
                                     *((n, t, (0,), _ROWS_WHY) for n, t in per_token)):
        if isinstance(spec, DTensorSpec):
            _only_shard(op, name, spec, allowed, why)


def _rows_unless_empty(spec, placement=ROWS):
    """An optional input that may be an empty placeholder."""
    return None if spec is None else Replicate() if _empty(spec) else placement


@_rule("linear_logprobs_fwd")
def _linear_logprobs_fwd_sharding(hidden, weight, target, bias, temperature, softcap, ignore_index, entropy,
                                  chunk_tokens):
    _head("linear_logprobs", hidden, weight, bias, ("target", target))
    options = [None] * 5
    return [([Replicate()] * 3, [Replicate(), Replicate(), Replicate(), _maybe(bias, Replicate())] + options),
            ([ROWS, _nonempty(entropy, ROWS), ROWS], [ROWS, Replicate(), ROWS, _maybe(bias, Replicate())] + options)]


@_rule("linear_logprobs_bwd")
def _linear_logprobs_bwd_sharding(grad_logp, grad_entropy, hidden, weight, target, bias, lse, entropy, temperature,
                                  softcap, ignore_index, want_hidden, want_weight, want_bias, chunk_tokens):
    _head("linear_logprobs backward", hidden, weight, bias, ("target", target))
    options = [None] * 7
    replicated = [_maybe(grad_logp, Replicate()), _maybe(grad_entropy, Replicate())] + [Replicate()] * 3 + [
        _maybe(bias, Replicate()), Replicate(), Replicate()]
    rows = [_maybe(grad_logp, ROWS), _maybe(grad_entropy, ROWS), ROWS, Replicate(), ROWS, _maybe(bias, Replicate()),
            ROWS, _rows_unless_empty(entropy)]
    outputs = [_nonempty(want_hidden, ROWS), _nonempty(want_weight, Partial()),
               _nonempty(want_bias and bias is not None, Partial())]
    return [([Replicate()] * 3, replicated + options), (outputs, rows + options)]


@_rule("linear_grpo_loss_fwd")
def _linear_grpo_loss_fwd_sharding(hidden, weight, target, bias, advantages, old_logprobs, ref_logprobs,
                                   policy_weights, token_weights, entropy_weights, temperature, softcap, ignore_index,
                                   beta, kl_estimator, epsilon_low, epsilon_high, delta, cispo, stats, want_hidden,
                                   want_weight, want_bias, chunk_tokens):
    per_token = (("target", target), ("advantages", advantages), ("old_logprobs", old_logprobs),
                 ("ref_logprobs", ref_logprobs), ("policy_weights", policy_weights), ("token_weights", token_weights),
                 ("entropy_weights", entropy_weights))
    _head("grpo_loss", hidden, weight, bias, *per_token)
    options = [None] * 14
    tokens = [spec for _, spec in per_token[1:]]
    replicated = [Replicate(), Replicate(), Replicate(), _maybe(bias, Replicate())] + [
        _maybe(spec, Replicate()) for spec in tokens]
    rows = [ROWS, Replicate(), ROWS, _maybe(bias, Replicate())] + [_maybe(spec, ROWS) for spec in tokens]
    outputs = [Partial(), ROWS, _nonempty(stats or entropy_weights is not None, ROWS), _nonempty(want_hidden, ROWS),
               _nonempty(want_weight, Partial()), _nonempty(want_bias and bias is not None, Partial())]
    return [([Replicate()] * 6, replicated + options), (outputs, rows + options)]


@_rule("linear_grpo_loss_bwd")
def _linear_grpo_loss_bwd_sharding(grad_loss, grad_hidden, grad_weight, grad_bias):
    # The forward's gradients, as it placed them, times the replicated upstream scalar.
    saved = [_rows_unless_empty(grad_hidden), _rows_unless_empty(grad_weight, Partial()),
             _rows_unless_empty(grad_bias, Partial())]
    return [([Replicate()] * 3, [Replicate()] * 4), (saved, [Replicate(), *saved])]


@_rule("linear_distill_loss_fwd")
def _linear_distill_loss_fwd_sharding(hidden, weight, target, bias, teacher_hidden, teacher_weight, teacher_bias,
                                      kind, beta, temperature, ignore_index, reduction, want_hidden, want_weight,
                                      want_bias, chunk_tokens):
    op = "distill_loss"
    _head(op, hidden, weight, bias, ("target", target))
    _head(op, teacher_hidden, teacher_weight, teacher_bias)
    loss, rows = _loss_placements(op, "hidden", hidden, reduction)
    reduced = reduction != "none"
    grads = [_nonempty(reduced and want_hidden, rows), _nonempty(reduced and want_weight, Partial()),
             _nonempty(reduced and want_bias and bias is not None, Partial())]
    options = [None] * 9
    replicated = [Replicate(), Replicate(), Replicate(), _maybe(bias, Replicate()), Replicate(), Replicate(),
                  _maybe(teacher_bias, Replicate())]
    inputs = [rows, Replicate(), rows, _maybe(bias, Replicate()), rows, Replicate(), _maybe(teacher_bias, Replicate())]
    return [([Replicate()] * 7, replicated + options), ([loss, rows, rows, rows, *grads], inputs + options)]


@_rule("linear_distill_loss_bwd")
def _linear_distill_loss_bwd_sharding(grad_loss, hidden, weight, target, bias, teacher_hidden, teacher_weight,
                                      teacher_bias, lse, teacher_lse, aux, grad_hidden, grad_weight, grad_bias, kind,
                                      beta, temperature, ignore_index, reduction, want_hidden, want_weight, want_bias,
                                      chunk_tokens):
    _head("distill_loss backward", hidden, weight, bias, ("target", target))
    reduced = reduction != "none"
    options = [None] * 9
    heads = [ROWS, Replicate(), ROWS, _maybe(bias, Replicate()), ROWS, Replicate(), _maybe(teacher_bias, Replicate())]
    saved = [_rows_unless_empty(grad_hidden), _rows_unless_empty(grad_weight, Partial()),
             _rows_unless_empty(grad_bias, Partial())]
    rows = [Replicate() if reduced else ROWS, *heads, ROWS, ROWS, ROWS, *saved]
    replicated = [Replicate(), Replicate(), Replicate(), Replicate(), _maybe(bias, Replicate()), Replicate(),
                  Replicate(), _maybe(teacher_bias, Replicate())] + [Replicate()] * 6
    outputs = [_nonempty(want_hidden, ROWS), _nonempty(want_weight, Partial()),
               _nonempty(want_bias and bias is not None, Partial())]
    return [([Replicate()] * 3, replicated + options), (outputs, rows + options)]
