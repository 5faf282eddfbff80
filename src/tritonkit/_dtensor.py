"""DTensor meets tritonkit's ops: each declared op's sharding rules (written in
`tritonkit._sharding`'s terms and carried by its `Op` declaration) registered with DTensor's
sharding propagation.

A DTensor reaching a tritonkit op takes the custom-op road (`tritonkit._op.tracing`), and
DTensor then asks for the custom op's sharding strategy. `check` registers the op's rules the
first time one of its calls holds a DTensor (`tritonkit.distributed` registers every op's
when imported, for torch.compile, under which that first call is not seen). Every function
here imports torch.distributed.tensor itself: only a program that holds a DTensor calls them.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from . import _sharding

_REGISTERED: set[str] = set()  # names of the declared ops whose rules are registered


def rules(op) -> list[tuple[str, _sharding.Rule | None]]:
    """(custom op name, its rule or None) for each custom op of the declared `op`."""
    found = []
    for custom, rule in ((op.forward_op, op.forward_sharding), (op.backward_op, op.backward_sharding)):
        if custom is not None:
            name = custom._name.split("::")[-1]
            found.append((name, rule))
    return found


def missing(ops: Iterable) -> list[str]:
    """The custom ops of these declared ops that have no sharding rule."""
    return [name for op in ops for name, rule in rules(op) if rule is None]


def register(op) -> None:
    """Register the sharding rules of the declared `op`'s custom ops (once)."""
    if op.name in _REGISTERED:
        return
    from torch.distributed.tensor.experimental import register_sharding

    for name, rule in rules(op):
        if rule is None:
            continue
        overload = getattr(torch.ops.tritonkit, name).default
        if isinstance(overload._schema.returns[0].type, torch.ListType):
            _register_list_output(overload, _in_torch_terms(rule))
        else:
            register_sharding(overload)(_in_torch_terms(rule))
    _REGISTERED.add(op.name)


def check(op, args: tuple) -> None:
    """Register `op`'s rules, then run its forward rule on the call's arguments, so that an
    unsupported placement raises its ValueError itself (inside DTensor's sharding propagation
    the same error reaches the caller wrapped in a RuntimeError)."""
    from torch.distributed.tensor import DTensor

    register(op)
    rule = rules(op)[0][1]
    if rule is not None:
        rule(*(_spec(a._spec) if isinstance(a, DTensor) else a for a in args))


def _spec(spec) -> _sharding.Spec:
    """A DTensorSpec as the rules see it."""
    ndim = len(spec.shape)
    return _sharding.Spec(tuple(spec.shape), tuple((p.dim % ndim, spec.mesh.size(mesh_dim))
                                                   for mesh_dim, p in enumerate(spec.placements) if p.is_shard()))


def _in_torch_terms(rule: _sharding.Rule):
    """`rule` as register_sharding calls it: DTensorSpecs in, torch's placements out."""
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor._dtensor_spec import DTensorSpec

    def placement(p):
        if p is None:
            return None
        if isinstance(p, _sharding.Shard):
            return Shard(p.dim)
        return Replicate() if isinstance(p, _sharding.Replicate) else Partial()

    def torch_rule(*args):
        strategies = rule(*(_spec(a) if isinstance(a, DTensorSpec) else a for a in args))
        return [([placement(p) for p in outputs], [placement(p) for p in inputs]) for outputs, inputs in strategies]
    return torch_rule


def _register_list_output(overload, fn) -> None:
    """register_sharding for an op returning Tensor[]: register_sharding counts a list as
    one output, while DTensor wants a placement for each tensor in it; this counts the
    placements the rule gives. (The same calls register_sharding makes, with that count.)"""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._op_schema import OpStrategy, RuntimeSchemaInfo
    from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy

    def strategy(op_schema):
        specs = [a.strategies[0].output_spec if isinstance(a, OpStrategy) else a for a in op_schema.args_schema]
        shardings = fn(*specs)
        return expand_to_full_mesh_op_strategy(op_schema.get_mesh_from_args(), op_schema,
                                               [list(out) + list(inp) for out, inp in shardings],
                                               input_index=len(shardings[0][0]))

    static = next((i for i, a in enumerate(overload._schema.arguments)
                   if not isinstance(a.type, (torch.TensorType, torch.OptionalType))), 100)
    DTensor._op_dispatcher.sharding_propagator.register_op_strategy(
        overload, strategy, RuntimeSchemaInfo(static, needs_pytree=True))
