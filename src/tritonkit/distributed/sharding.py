"""DTensor sharding rules for tritonkit's custom ops.

A DTensor reaching a tritonkit op takes the custom-op road (`tritonkit._op.tracing`), and
DTensor then asks for the op's sharding strategy: which placements of the inputs let every
rank run the kernel on its local shard and give which placements of the outputs. The rules
here answer for each `tritonkit::<name>_fwd` / `_bwd` op, one mesh dimension at a time
(DTensor expands them to every mesh dimension):

- add: elementwise; the output sharded along any dim, each input along the matching dim
  (or replicated where it broadcasts).
- softmax: any dim but the softmax dim (rows are independent).
- attention: batch (dim 0) or heads (dim 1, tensor parallelism: q by H, k and v by Hkv,
  both multiples of the ranks sharding them); never the sequence (that is ring attention,
  `tritonkit.distributed.ring_attention`) or the head dim.

Every rule also accepts everything replicated. An input sharded in a way the op cannot run
locally raises ValueError naming the op, the argument and the placement, rather than an
all-gather DTensor would insert silently. Partial inputs are reduced by DTensor first.

Registration happens once per op, through `torch.distributed.tensor.experimental.
register_sharding`, when `tritonkit.distributed` is imported or the first time a DTensor
reaches a tritonkit op; plain-tensor users never import torch.distributed.tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.placement_types import Placement

from .._op import DECLARED

# Custom op name (without the namespace) -> its sharding function, as register_sharding takes.
_RULES: dict[str, Callable] = {}
_REGISTERED: set[str] = set()


def _rule(*op_names: str):
    def add(fn: Callable) -> Callable:
        for name in op_names:
            _RULES[name] = fn
        return fn
    return add


def register_shardings() -> None:
    """Register the sharding rule of every declared tritonkit custom op not yet registered
    (idempotent; new ops are picked up by the next call)."""
    if len(_REGISTERED) == len(_RULES):
        return
    from torch.distributed.tensor.experimental import register_sharding

    for name, fn in _RULES.items():
        if name in _REGISTERED or not hasattr(torch.ops.tritonkit, name):
            continue
        register_sharding(getattr(torch.ops.tritonkit, name).default)(fn)
        _REGISTERED.add(name)


def check_dtensor_args(custom_op, args: tuple) -> None:
    """Register the rules, then run `custom_op`'s rule on the call's DTensor arguments, so
    that an unsupported placement raises its ValueError itself (inside DTensor's sharding
    propagation the same error reaches the caller wrapped in a RuntimeError)."""
    from torch.distributed.tensor import DTensor

    register_shardings()
    rule = _RULES.get(custom_op._name.split("::")[-1])
    if rule is not None:
        rule(*(a._spec if isinstance(a, DTensor) else a for a in args))


def unregistered_ops() -> list[str]:
    """Custom ops of declared tritonkit ops that have no sharding rule (for tests)."""
    names = []
    for op in DECLARED.values():
        for custom in (op.forward_op, op.backward_op):
            if custom is not None:
                name = custom._name.split("::")[-1]
                if name not in _RULES:
                    names.append(name)
    return names


# ---------------------------------------------------------------------------------------
# Checks shared by the rules
# ---------------------------------------------------------------------------------------

def _shard_dims(spec) -> list[tuple[int, int]]:
    """(tensor dim, mesh dim) of each Shard placement of a DTensorSpec."""
    return [(p.dim % spec.ndim, mesh_dim) for mesh_dim, p in enumerate(spec.placements) if p.is_shard()]


def _refuse(op: str, name: str, spec, placement_dim: int, why: str) -> None:
    raise ValueError(f"tritonkit {op}: {name} is sharded along dim {placement_dim} (Shard({placement_dim})) of "
                     f"shape {tuple(spec.shape)}; {why}")


def _only_shard(op: str, name: str, spec, allowed: Sequence[int], why: str) -> None:
    """Refuse Shard placements of `spec` along dims outside `allowed`."""
    for dim, _ in _shard_dims(spec):
        if dim not in allowed:
            _refuse(op, name, spec, dim, why)


def _even(op: str, name: str, spec, dim: int, what: str) -> None:
    """Refuse a shard along `dim` that does not split it evenly over its mesh dims."""
    ranks = 1
    for d, mesh_dim in _shard_dims(spec):
        if d == dim:
            ranks *= spec.mesh.size(mesh_dim)
    if spec.shape[dim] % ranks:
        raise ValueError(f"tritonkit {op}: {name} has {spec.shape[dim]} {what}, sharded over {ranks} ranks; "
                         f"tritonkit needs a multiple of the ranks sharding them")


def _same(placement: Placement, count: int) -> list[Placement]:
    return [placement] * count


# ---------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------

@_rule("add")
def _add_sharding(x, y):
    out_ndim = max(x.ndim, y.ndim)
    out_shape = torch.broadcast_shapes(x.shape, y.shape)
    strategies = [([Replicate()], [Replicate(), Replicate()])]
    for d in range(out_ndim):
        inputs = []
        for t in (x, y):
            own = d - (out_ndim - t.ndim)
            sharded = own >= 0 and t.shape[own] == out_shape[d]
            inputs.append(Shard(own) if sharded else Replicate())
        strategies.append(([Shard(d)], inputs))
    return strategies


def _softmax_strategies(op: str, names: Sequence[str], specs: Sequence, dim: int, outputs: int):
    ndim = specs[0].ndim
    dim %= ndim
    for name, spec in zip(names, specs):
        _only_shard(op, name, spec, [d for d in range(ndim) if d != dim],
                    f"softmax normalises along dim {dim}, so its rows must stay whole on each rank")
    strategies = [(_same(Replicate(), outputs), _same(Replicate(), len(specs)) + [None])]
    for d in range(ndim):
        if d != dim:
            strategies.append((_same(Shard(d), outputs), _same(Shard(d), len(specs)) + [None]))
    return strategies


@_rule("softmax_fwd")
def _softmax_fwd_sharding(x, dim):
    return _softmax_strategies("softmax", ["x"], [x], dim, 1)


@_rule("softmax_bwd")
def _softmax_bwd_sharding(grad_out, y, dim):
    return _softmax_strategies("softmax backward", ["grad_out", "y"], [grad_out, y], dim, 1)


_ATTENTION_WHY = ("attention runs locally on shards of the batch (dim 0) or of the heads (dim 1); "
                  "for the sequence use tritonkit.distributed.ring_attention")


def _attention_strategies(op: str, named: dict, tail: int, outputs: int):
    """Strategies for an attention op whose (B, heads, N, D) arguments are `named` (in order),
    followed by the lse (B, H, N) for the backward, then `tail` non-tensor arguments."""
    for name, spec in named.items():
        if spec.ndim == 4:
            _only_shard(op, name, spec, (0, 1), _ATTENTION_WHY)
            _even(op, name, spec, 1, "heads")
    tensors = len(named)
    strategies = [(_same(Replicate(), outputs), _same(Replicate(), tensors) + [None] * tail)]
    for d in (0, 1):  # batch; heads (the lse (B, H, N) shards the same two dims)
        strategies.append((_same(Shard(d), outputs), _same(Shard(d), tensors) + [None] * tail))
    return strategies


@_rule("attention_fwd")
def _attention_fwd_sharding(q, k, v, causal, scale):
    return _attention_strategies("attention", dict(q=q, k=k, v=v), 2, 2)


@_rule("attention_bwd")
def _attention_bwd_sharding(do, q, k, v, o, lse, causal, scale):
    return _attention_strategies("attention backward", dict(do=do, q=q, k=k, v=v, o=o, lse=lse), 2, 3)
