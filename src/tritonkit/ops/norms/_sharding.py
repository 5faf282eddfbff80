"""How DTensor may shard the norms: rows are independent, so any dim but the normalised
last one (the token dim under sequence parallelism); weight and bias stay replicated, and
their gradients, summed over each rank's rows, come out Partial (DTensor reduces them)."""

from __future__ import annotations

from ..._sharding import Partial, Replicate, Shard, empty, maybe, nonempty, only_shard

_NORM_WHY = "a norm reduces over the last dim, which must stay whole on each rank (shard the rows instead)"
_PARAM_WHY = "tritonkit's norms take the weight and bias replicated (as tensor and sequence parallelism keep them)"


def _row_dims(op: str, named: dict) -> int:
    """The dims of the first non-empty tensor in `named`; refuses a Shard of the last dim of any."""
    ndim = None
    for name, spec in named.items():
        if spec is None or spec.ndim == 0 or empty(spec):
            continue
        ndim = spec.ndim if ndim is None else ndim
        only_shard(op, name, spec, range(spec.ndim - 1), _NORM_WHY)
    return ndim or 1


def sharding(op: str, params: tuple[str, ...], stats: int):
    """(forward rule, backward rule) of a norm whose forward takes (x, *params, residual,
    *options) and returns (y, h, *stats), and whose backward takes (dy, dh, h, *params,
    *stats, *options) and returns (dx, *the params' gradients)."""
    n = len(params)

    def forward(x, *args):
        weights, residual, options = args[:n], args[n], args[n + 1:]
        ndim = _row_dims(op, dict(x=x, residual=residual))
        for name, spec in zip(params, weights):
            if spec is not None:
                only_shard(op, name, spec, (), _PARAM_WHY)
        return [([p, nonempty(residual is not None, p)] + [p] * stats,
                 [p, *(maybe(w, Replicate()) for w in weights), maybe(residual, p)] + [None] * len(options))
                for p in [Replicate()] + [Shard(d) for d in range(ndim - 1)]]

    def backward(dy, dh, h, *args):
        weights, options = args[:n], args[n + stats:]
        ndim = _row_dims(f"{op} backward", dict(dy=dy, dh=dh, h=h))
        strategies = []
        for p in [Replicate()] + [Shard(d) for d in range(ndim - 1)]:
            grad = Replicate() if p == Replicate() else Partial()
            strategies.append(([p, *(nonempty(w is not None, grad) for w in weights)],
                               [p, maybe(dh, p), p, *(maybe(w, Replicate()) for w in weights)]
                               + [p] * stats + [None] * len(options)))
        return strategies

    return forward, backward
