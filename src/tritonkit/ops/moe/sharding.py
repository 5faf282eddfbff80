"""DTensor sharding rules of moe_experts' custom ops, in `tritonkit._sharding`'s terms, passed
to its `Op` declaration.

The tokens (dim 0 of hidden, expert_indices and routing_weights) may be sharded, every
expert's weights and biases replicated (their gradients Partial): data parallelism over the
tokens. The forward's saved state (gu, the routing) is per rank, kept Shard(0) for the
backward. Experts sharded over ranks need their tokens exchanged, which
`tritonkit.distributed.moe_experts_ep` does with all-to-all; such placements are refused here,
pointing there.
"""

from __future__ import annotations

from ..._sharding import Partial, Replicate, Shard, Spec, maybe, nonempty, only_shard

_WHY = ("moe_experts runs locally on shards of the tokens (dim 0 of hidden, expert_indices and routing_weights) "
        "with the experts' weights replicated; for weights sharded by expert use tritonkit.distributed.moe_experts_ep")


def _params(op: str, hidden, expert_indices, routing_weights, gate_up_weight, down_weight, gate_up_bias,
            down_bias) -> list:
    """The weights' and biases' placements (replicated), after refusing any other sharding
    (plain tensors, which DTensor refuses beside DTensors itself, are not looked at)."""
    for name, spec, allowed in (("hidden", hidden, (0,)), ("expert_indices", expert_indices, (0,)),
                                ("routing_weights", routing_weights, (0,)), ("gate_up_weight", gate_up_weight, ()),
                                ("down_weight", down_weight, ()), ("gate_up_bias", gate_up_bias, ()),
                                ("down_bias", down_bias, ())):
        if isinstance(spec, Spec):
            only_shard(op, name, spec, allowed, _WHY)
    return [Replicate(), Replicate(), maybe(gate_up_bias, Replicate()), maybe(down_bias, Replicate())]


def moe_experts_fwd_sharding(hidden, expert_indices, routing_weights, gate_up_weight, down_weight, gate_up_bias,
                             down_bias, activation, interleaved, alpha, limit):
    params = _params("moe_experts", hidden, expert_indices, routing_weights, gate_up_weight, down_weight,
                     gate_up_bias, down_bias)
    return [([rows] * 5, [rows] * 3 + params + [None] * 4) for rows in (Replicate(), Shard(0))]


def moe_experts_bwd_sharding(grad_out, hidden, expert_indices, routing_weights, gate_up_weight, down_weight,
                             gate_up_bias, down_bias, gate_up, order, offsets, tiles, activation, interleaved, alpha,
                             limit, want_hidden, want_routing, want_gate_up, want_down):
    params = _params("moe_experts backward", hidden, expert_indices, routing_weights, gate_up_weight, down_weight,
                     gate_up_bias, down_bias)

    def strategy(rows, reduced):
        outputs = [nonempty(want_hidden, rows), nonempty(want_routing, rows), nonempty(want_gate_up, reduced),
                   nonempty(want_down, reduced), nonempty(want_gate_up and gate_up_bias is not None, reduced),
                   nonempty(want_down and down_bias is not None, reduced)]
        return outputs, [rows] * 4 + params + [rows] * 4 + [None] * 8

    return [strategy(Replicate(), Replicate()), strategy(Shard(0), Partial())]
