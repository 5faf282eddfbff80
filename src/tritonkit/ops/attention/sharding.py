"""DTensor sharding rules of the attention ops, in `tritonkit._sharding`'s terms, passed to their
`Op` declarations.

Dense attention runs locally on shards of the batch (dim 0) or of the heads (dim 1, tensor
parallelism: q by H, k and v by Hkv, both multiples of the ranks sharding them), never of the
sequence (that is ring attention, `tritonkit.distributed.ring_attention`) or the head dim.
Packed sequences shard only their heads: the packed tokens and cu_seqlens stay whole on each
rank. The score's tensors follow the heads: sinks (H,) and ALiBi's (H,) slopes shard along
their only dim with the heads and are replicated with the batch; (B, H) slopes shard with
either. A sharded batch makes d(sinks) a sum over ranks (Partial).
"""

from __future__ import annotations

from ..._sharding import Partial, Replicate, Shard, Spec, even, maybe, nonempty, only_shard

_ATTENTION_WHY = ("attention runs locally on shards of the batch (dim 0) or of the heads (dim 1); "
                  "for the sequence use tritonkit.distributed.ring_attention")
_VARLEN_WHY = ("packed-sequence attention runs locally on shards of the heads (dim 1 of q, k, v; dim 0 of "
               "the log-sum-exp); the packed tokens and cu_seqlens stay whole on each rank")
_SCORE_WHY = "sinks and ALiBi slopes shard with the heads (or (batch, head) slopes with the batch)"


def _score_tensor(spec, along: int | None, per_batch_dim: int | None) -> object:
    """The placement of alibi_slopes or sinks when the op's tensors shard `along` (0: batch, 1:
    heads, None: replicated): a 2-d (batch, head) tensor shards its matching dim, a 1-d
    (head,) one its dim 0 with the heads and nothing with the batch."""
    if spec is None:
        return None
    if along is None:
        return Replicate()
    if spec.ndim == 2:
        return Shard(along if per_batch_dim is None else per_batch_dim)
    return Shard(0) if along == 1 else Replicate()


def _check_score(op: str, alibi, sinks) -> None:
    for name, spec in (("alibi_slopes", alibi), ("sinks", sinks)):
        if isinstance(spec, Spec):
            only_shard(op, name, spec, range(spec.ndim), _SCORE_WHY)


def _dense(op: str, names: tuple, tensors: tuple, options: int, alibi, sinks, outputs: int, dsinks: bool):
    """Strategies of a dense attention op: `tensors` (named `names`) are (B, heads, N, D) or
    (B, H, N) (the lse and its gradient, shaped by the same batch and heads), followed by
    `options` plain arguments and the score's tensors; `outputs` tensors shard like q, and with
    dsinks a d(sinks) last (a placeholder where there are no sinks)."""
    for name, spec in zip(names, tensors):
        if isinstance(spec, Spec) and spec.ndim == 4:
            only_shard(op, name, spec, (0, 1), _ATTENTION_WHY)
            even(op, name, spec, 1, "heads")
    _check_score(op, alibi, sinks)
    strategies = []
    for along in (None, 0, 1):
        p = Replicate() if along is None else Shard(along)
        inputs = [maybe(t, p) for t in tensors] + [None] * options
        inputs += [_score_tensor(alibi, along, None), _score_tensor(sinks, along, None)]
        outs = [p] * outputs
        if dsinks:
            summed = Partial() if along == 0 else _score_tensor(sinks, along, None)
            outs.append(nonempty(sinks is not None, summed or Replicate()))
        strategies.append((outs, inputs))
    return strategies


def _given(strategies: list, n: int) -> list:
    """The strategies' input placements for the n arguments a call gave: DTensor passes a rule
    only those, leaving the schema's defaults (the rules below fill them in) unplaced."""
    return [(outs, inputs[:n]) for outs, inputs in strategies]


def attention_fwd_sharding(*args):
    q, k, v, causal, scale, window_left, window_right, softcap, bottom_right, alibi, sinks = (
        *args, *(-1, -1, 0.0, False, None, None)[len(args) - 5:])
    return _given(_dense("attention", ("q", "k", "v"), (q, k, v), 6, alibi, sinks, 2, False), len(args))


def attention_bwd_sharding(*args):
    do, q, k, v, o, lse, causal, scale, window_left, window_right, softcap, dlse, bottom_right, alibi, sinks = (
        *args, *(-1, -1, 0.0, None, False, None, None)[len(args) - 8:])
    strategies = _dense("attention backward", ("do", "q", "k", "v", "o", "lse"), (do, q, k, v, o, lse), 0, alibi,
                        sinks, 3, True)
    # The arguments between lse and the score's tensors: five options, dlse (like lse), bottom_right.
    for outs, inputs in strategies:
        inputs[6:6] = [None] * 5 + [maybe(dlse, inputs[5])] + [None]
    return _given(strategies, len(args))


def _packed(op: str, tensors: tuple, cu: tuple, lse_like: tuple, options: int, alibi, sinks, outputs: tuple,
            dsinks: bool):
    """Strategies of a packed attention op: `tensors` (total, heads, D), `cu` the cu_seqlens
    (replicated), `lse_like` the (H, total) log-sum-exps, `options` plain arguments, then the
    score's tensors; `outputs` gives each output's head dim, and with dsinks a d(sinks) last."""
    for i, spec in enumerate(tensors):
        if isinstance(spec, Spec):
            only_shard(op, f"argument {i}", spec, (1,), _VARLEN_WHY)
            even(op, f"argument {i}", spec, 1, "heads")
    for spec in lse_like:
        if isinstance(spec, Spec):
            only_shard(op, "lse", spec, (0,), _VARLEN_WHY)
    _check_score(op, alibi, sinks)
    strategies = []
    for heads in (False, True):
        inputs = [maybe(t, Shard(1) if heads else Replicate()) for t in tensors]
        inputs += [maybe(t, Replicate()) for t in cu]
        inputs += [maybe(t, Shard(0) if heads else Replicate()) for t in lse_like]
        inputs += [None] * options
        inputs += [_score_tensor(alibi, 1 if heads else None, 1), _score_tensor(sinks, 1 if heads else None, None)]
        outs = [Shard(d) if heads else Replicate() for d in outputs]
        if dsinks:
            outs.append(nonempty(sinks is not None, Shard(0) if heads else Replicate()))
        strategies.append((outs, inputs))
    return strategies


def attention_varlen_fwd_sharding(*args):
    q, k, v, cu_q, cu_k, causal, scale, window_left, window_right, softcap, bottom_right, alibi, sinks = (
        *args, *(-1, -1, 0.0, False, None, None)[len(args) - 7:])
    return _given(_packed("attention_varlen", (q, k, v), (cu_q, cu_k), (), 6, alibi, sinks, (1, 0), False),
                  len(args))


def attention_varlen_bwd_sharding(*args):
    (do, q, k, v, o, lse, cu_q, cu_k, causal, scale, window_left, window_right, softcap, dlse, bottom_right, alibi,
     sinks) = (*args, *(-1, -1, 0.0, None, False, None, None)[len(args) - 10:])
    strategies = _packed("attention_varlen backward", (do, q, k, v, o), (), (lse,), 0, alibi, sinks, (1, 1, 1), True)
    # Argument order: do, q, k, v, o, lse, cu_q, cu_k, five options, dlse, bottom_right, alibi, sinks.
    for outs, inputs in strategies:
        lse_p = inputs[5]
        inputs[6:6] = [maybe(cu_q, Replicate()), maybe(cu_k, Replicate())] + [None] * 5 + [maybe(dlse, lse_p)] + [None]
    return _given(strategies, len(args))
