"""DTensor sharding rules of the cross-entropy ops, in `tritonkit._sharding`'s terms, passed to
their `Op` declarations.

Rows (tokens) may be sharded with reduction "sum" (the loss comes out Partial) or "none"; a
"mean" would divide each rank's sum by its own count of targets. The vocabulary may not be
sharded: that needs a log-sum-exp across ranks (`tritonkit.ops.cross_entropy.vocab_parallel`, for
linear_cross_entropy with the weight's rows sharded). `linear_logprobs` is a function of each
token on its own: tokens sharded, the head replicated, its gradients Partial.
"""

from __future__ import annotations

from ..._sharding import Partial, Replicate, Shard, Spec, empty, maybe, nonempty, only_shard

# Cross-entropy: rows (tokens) may be sharded with reduction "sum" (the loss comes out
# Partial) or "none"; a "mean" would divide each rank's sum by its own count of targets.
# The vocabulary may not be sharded: that needs a log-sum-exp across ranks.

_VOCAB_WHY = ("the vocabulary may not be sharded here: vocabulary-parallel cross-entropy needs a log-sum-exp "
              "across ranks, which tritonkit computes only for linear_cross_entropy with the weight's rows "
              "sharded (tritonkit.ops.cross_entropy.vocab_parallel); replicate the logits, or shard the tokens")


def loss_placements(op: str, name: str, spec: Spec, reduction: str):
    """(loss, row-shaped) placements for rows sharded along dim 0, or a ValueError for mean."""
    if reduction == "mean" and 0 in spec.sharded_dims():
        raise ValueError(f"tritonkit {op}: {name} is sharded along its rows with reduction='mean', which would "
                         f"average each rank's rows alone; use reduction='sum' and divide by the count of "
                         f"targets, or reduction='none'")
    return (Shard(0) if reduction == "none" else Partial()), Shard(0)


def cross_entropy_fwd_sharding(logits, target, ignore_index, label_smoothing, reduction, softcap, inplace):
    only_shard("cross_entropy", "logits", logits, (0,), _VOCAB_WHY)
    loss, rows = loss_placements("cross_entropy", "logits", logits, reduction)
    # The third output counts the targets that are not ignore_index: each rank counts its rows.
    return [([Replicate()] * 3, [Replicate(), Replicate()] + [None] * 5),
            ([loss, rows, Partial()], [rows, rows] + [None] * 5)]


def cross_entropy_bwd_sharding(grad_loss, logits, target, lse, ignore_index, label_smoothing, reduction,
                               softcap, inplace, count=None):
    only_shard("cross_entropy backward", "logits", logits, (0,), _VOCAB_WHY)
    upstream = Shard(0) if reduction == "none" else Replicate()
    # The count is read for reduction "mean" alone, which rows sharded refuse.
    return [([Replicate()], [Replicate()] * 4 + [None] * 5 + [None if count is None else Replicate()]),
            ([Shard(0)], [upstream, Shard(0), Shard(0), Shard(0)] + [None] * 5 + [None])]


def linear_cross_entropy_fwd_sharding(hidden, weight, target, bias, ignore_index, label_smoothing, reduction,
                                      softcap, grad_hidden, grad_weight, grad_bias, chunk_tokens):
    op = "linear_cross_entropy"
    # (A weight sharded along its rows never gets here: linear_cross_entropy takes it to
    # tritonkit.ops.cross_entropy.vocab_parallel.)
    only_shard(op, "weight", weight, (), "the weight's hidden dim (dim 1) may not be sharded")
    if bias is not None:
        only_shard(op, "bias", bias, (), _VOCAB_WHY)
    only_shard(op, "hidden", hidden, (0,), "only the tokens (rows) of hidden may be sharded")
    loss, rows = loss_placements(op, "hidden", hidden, reduction)
    reduced = reduction != "none"
    grads = [nonempty(reduced and grad_hidden, rows), nonempty(reduced and grad_weight, Partial()),
             nonempty(reduced and grad_bias and bias is not None, Partial())]
    replicated_inputs = [Replicate(), Replicate(), Replicate(), maybe(bias, Replicate())] + [None] * 8
    return [([Replicate()] * 5, replicated_inputs),
            ([loss, nonempty(not reduced, rows), *grads],
             [rows, Replicate(), rows, maybe(bias, Replicate())] + [None] * 8)]


def linear_cross_entropy_bwd_sharding(grad_loss, hidden, weight, target, bias, lse, grad_hidden, grad_weight,
                                      grad_bias, ignore_index, label_smoothing, reduction, softcap, want_hidden,
                                      want_weight, want_bias, chunk_tokens):
    op = "linear_cross_entropy backward"
    only_shard(op, "weight", weight, (), _VOCAB_WHY)
    reduced = reduction != "none"
    rows = Shard(0)
    saved = [nonempty(not reduced, rows),
             nonempty(reduced and not empty(grad_hidden), rows),
             nonempty(reduced and not empty(grad_weight), Partial()),
             nonempty(reduced and not empty(grad_bias), Partial())]
    outputs = [nonempty(want_hidden, rows), nonempty(want_weight, Partial()),
               nonempty(want_bias and bias is not None, Partial())]
    replicated = [Replicate()] * 4 + [maybe(bias, Replicate())] + [Replicate()] * 4 + [None] * 8
    return [([Replicate()] * 3, replicated),
            (outputs, [rows if not reduced else Replicate(), rows, Replicate(), rows, maybe(bias, Replicate()),
                       *saved] + [None] * 8)]


# ---------------------------------------------------------------------------------------
# linear_logprobs (and the post-training losses built on it, `ops.post_training.sharding`)
# ---------------------------------------------------------------------------------------

HEAD_VOCAB_WHY = ("the vocabulary may not be sharded: each token's log-sum-exp needs all of it; replicate the head "
                  "and shard the tokens")
ROWS_WHY = "only the tokens (rows) may be sharded"
ROWS = Shard(0)


def head_replicated(op: str, hidden, weight, bias, *per_token) -> None:
    """Tokens sharded or replicated, the head replicated (plain tensors, which DTensor refuses
    beside DTensors itself, are not looked at)."""
    for name, spec, allowed, why in (("weight", weight, (), HEAD_VOCAB_WHY), ("bias", bias, (), HEAD_VOCAB_WHY),
                                     ("hidden", hidden, (0,), ROWS_WHY),
                                     *((n, t, (0,), ROWS_WHY) for n, t in per_token)):
        if isinstance(spec, Spec):
            only_shard(op, name, spec, allowed, why)


def rows_unless_empty(spec, placement=ROWS):
    """An optional input that may be an empty placeholder."""
    return None if spec is None else Replicate() if empty(spec) else placement


def linear_logprobs_fwd_sharding(hidden, weight, target, bias, temperature, softcap, ignore_index, entropy,
                                  chunk_tokens):
    head_replicated("linear_logprobs", hidden, weight, bias, ("target", target))
    options = [None] * 5
    return [([Replicate()] * 3, [Replicate(), Replicate(), Replicate(), maybe(bias, Replicate())] + options),
            ([ROWS, nonempty(entropy, ROWS), ROWS], [ROWS, Replicate(), ROWS, maybe(bias, Replicate())] + options)]


def linear_logprobs_bwd_sharding(grad_logp, grad_entropy, hidden, weight, target, bias, lse, entropy, temperature,
                                  softcap, ignore_index, want_hidden, want_weight, want_bias, chunk_tokens):
    head_replicated("linear_logprobs backward", hidden, weight, bias, ("target", target))
    options = [None] * 7
    replicated = [maybe(grad_logp, Replicate()), maybe(grad_entropy, Replicate())] + [Replicate()] * 3 + [
        maybe(bias, Replicate()), Replicate(), Replicate()]
    rows = [maybe(grad_logp, ROWS), maybe(grad_entropy, ROWS), ROWS, Replicate(), ROWS, maybe(bias, Replicate()),
            ROWS, rows_unless_empty(entropy)]
    outputs = [nonempty(want_hidden, ROWS), nonempty(want_weight, Partial()),
               nonempty(want_bias and bias is not None, Partial())]
    return [([Replicate()] * 3, replicated + options), (outputs, rows + options)]
