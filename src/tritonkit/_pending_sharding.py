"""The sharding rules of the ops whose `Op` declarations do not carry them yet: attention,
attention_varlen, cross_entropy and linear_cross_entropy, by custom op name.

Each moves next to its op: its functions into the op's package (e.g.
`ops/attention/sharding.py`), passed to its declaration as `Op(..., forward_sharding=...,
backward_sharding=...)`; its entries then leave `PENDING`, and with the last of them this
module and its one use in `tritonkit._dtensor` go.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._sharding import Partial, Replicate, Shard, Spec, empty, even, maybe, nonempty, only_shard

# ---------------------------------------------------------------------------------------
# attention: batch (dim 0) or heads (dim 1, tensor parallelism: q by H, k and v by Hkv, both
# multiples of the ranks sharding them); never the sequence (that is ring attention,
# `tritonkit.distributed.ring_attention`) or the head dim.
# ---------------------------------------------------------------------------------------

_ATTENTION_WHY = ("attention runs locally on shards of the batch (dim 0) or of the heads (dim 1); "
                  "for the sequence use tritonkit.distributed.ring_attention")


def _attention_strategies(op: str, names: Sequence[str], args: tuple, outputs: int):
    """Strategies for an attention op whose leading arguments, named `names`, are (B, heads,
    N, D) tensors; the arguments after them are options, or (B, H, N) tensors such as the
    log-sum-exp, which shard along the same batch and head dims. Outputs likewise."""
    for name, spec in zip(names, args):
        if spec.ndim == 4:
            only_shard(op, name, spec, (0, 1), _ATTENTION_WHY)
            even(op, name, spec, 1, "heads")

    def placements(p):
        return [p if isinstance(a, Spec) else None for a in args]

    strategies = [([Replicate()] * outputs, placements(Replicate()))]
    for d in (0, 1):  # batch; heads
        strategies.append(([Shard(d)] * outputs, placements(Shard(d))))
    return strategies


def attention_fwd_sharding(q, k, v, *options):
    return _attention_strategies("attention", ("q", "k", "v"), (q, k, v, *options), 2)


def attention_bwd_sharding(do, q, k, v, o, lse, *options):
    return _attention_strategies("attention backward", ("do", "q", "k", "v", "o"), (do, q, k, v, o, lse, *options), 3)


_VARLEN_WHY = ("packed-sequence attention runs locally on shards of the heads (dim 1 of q, k, v; dim 0 of "
               "the log-sum-exp); the packed tokens and cu_seqlens stay whole on each rank")


def _varlen_strategies(op: str, args: tuple, outputs: Sequence[int]):
    """Strategies for a packed-sequence attention op: (total, heads, D) tensors shard their heads
    (dim 1), (H, total) log-sum-exps their dim 0, cu_seqlens stay replicated; `outputs` gives
    each output's head dim."""
    heads_dim = {3: 1, 2: 0}
    for i, spec in enumerate(args):
        if isinstance(spec, Spec):
            allowed = (heads_dim[spec.ndim],) if spec.ndim in heads_dim else ()
            only_shard(op, f"argument {i}", spec, allowed, _VARLEN_WHY)
            if spec.ndim == 3:
                even(op, f"argument {i}", spec, 1, "heads")

    def placements(shard: bool):
        return [None if not isinstance(a, Spec)
                else Shard(heads_dim[a.ndim]) if shard and a.ndim in heads_dim else Replicate() for a in args]

    return [([Replicate()] * len(outputs), placements(False)),
            ([Shard(d) for d in outputs], placements(True))]


def attention_varlen_fwd_sharding(*args):
    return _varlen_strategies("attention_varlen", args, (1, 0))


def attention_varlen_bwd_sharding(*args):
    return _varlen_strategies("attention_varlen backward", args, (1, 1, 1))


# ---------------------------------------------------------------------------------------
# Cross-entropy: rows (tokens) may be sharded with reduction "sum" (the loss comes out
# Partial) or "none"; a "mean" would divide each rank's sum by its own count of targets.
# The vocabulary may not be sharded: that needs a log-sum-exp across ranks.
# ---------------------------------------------------------------------------------------

_VOCAB_WHY = ("the vocabulary may not be sharded here: vocabulary-parallel cross-entropy needs a log-sum-exp "
              "across ranks, which tritonkit computes only for linear_cross_entropy with the weight's rows "
              "sharded (tritonkit.distributed.vocab_parallel); replicate the logits, or shard the tokens")


def _loss_placements(op: str, name: str, spec: Spec, reduction: str):
    """(loss, row-shaped) placements for rows sharded along dim 0, or a ValueError for mean."""
    if reduction == "mean" and 0 in spec.sharded_dims():
        raise ValueError(f"tritonkit {op}: {name} is sharded along its rows with reduction='mean', which would "
                         f"average each rank's rows alone; use reduction='sum' and divide by the count of "
                         f"targets, or reduction='none'")
    return (Shard(0) if reduction == "none" else Partial()), Shard(0)


def cross_entropy_fwd_sharding(logits, target, ignore_index, label_smoothing, reduction, softcap, inplace):
    only_shard("cross_entropy", "logits", logits, (0,), _VOCAB_WHY)
    loss, rows = _loss_placements("cross_entropy", "logits", logits, reduction)
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
    # tritonkit.distributed.vocab_parallel.)
    only_shard(op, "weight", weight, (), "the weight's hidden dim (dim 1) may not be sharded")
    if bias is not None:
        only_shard(op, "bias", bias, (), _VOCAB_WHY)
    only_shard(op, "hidden", hidden, (0,), "only the tokens (rows) of hidden may be sharded")
    loss, rows = _loss_placements(op, "hidden", hidden, reduction)
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


PENDING = {
    "attention_fwd": attention_fwd_sharding,
    "attention_bwd": attention_bwd_sharding,
    "attention_varlen_fwd": attention_varlen_fwd_sharding,
    "attention_varlen_bwd": attention_varlen_bwd_sharding,
    "cross_entropy_fwd": cross_entropy_fwd_sharding,
    "cross_entropy_bwd": cross_entropy_bwd_sharding,
    "linear_cross_entropy_fwd": linear_cross_entropy_fwd_sharding,
    "linear_cross_entropy_bwd": linear_cross_entropy_bwd_sharding,
}
