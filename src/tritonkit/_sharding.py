"""What an op's sharding rule is written in: DTensor's placements and the checks the rules
share, without importing torch.distributed (an op module imports this; plain-tensor users
never import torch.distributed.tensor).

An op declares one rule per custom op (`Op(..., forward_sharding=..., backward_sharding=...)`).
A rule is called with the custom op's arguments, each DTensor among them as a `Spec` (its
shape and the dims its mesh shards), every other argument as itself, and returns the
strategies DTensor may use for one mesh dimension (DTensor expands them to every mesh
dimension): a list of (output placements, input placements), with None for an input that is
not a tensor. Placements are `Replicate()`, `Shard(dim)` and `Partial()` (a sum across ranks),
as in torch.distributed.tensor; `tritonkit._dtensor` translates them and registers the rules.

Every rule also accepts everything replicated. An input sharded in a way the op cannot run
locally raises ValueError naming the op, the argument and the placement (`only_shard`,
`even`), rather than an all-gather DTensor would insert silently. Partial inputs are reduced
by DTensor before a rule sees them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Replicate:
    """The whole tensor on every rank."""


@dataclass(frozen=True)
class Shard:
    """Split along `dim` over the ranks of the mesh dimension."""
    dim: int


@dataclass(frozen=True)
class Partial:
    """Each rank holds a term; the tensor is their sum."""


Placement = Replicate | Shard | Partial
# A rule: the custom op's arguments -> [(output placements, input placements), ...].
Rule = Callable[..., list[tuple[list, list]]]


@dataclass(frozen=True)
class Spec:
    """A DTensor argument as a rule sees it."""
    shape: tuple[int, ...]
    shards: tuple[tuple[int, int], ...]  # (tensor dim, ranks) for each mesh dimension sharding it

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def sharded_dims(self) -> list[int]:
        return [dim for dim, _ in self.shards]


def refuse(op: str, name: str, spec: Spec, dim: int, why: str) -> None:
    raise ValueError(f"tritonkit {op}: {name} is sharded along dim {dim} (Shard({dim})) of "
                     f"shape {tuple(spec.shape)}; {why}")


def only_shard(op: str, name: str, spec: Spec, allowed: Iterable[int], why: str) -> None:
    """Refuse Shard placements of `spec` along dims outside `allowed`."""
    allowed = set(allowed)
    for dim in spec.sharded_dims():
        if dim not in allowed:
            refuse(op, name, spec, dim, why)


def even(op: str, name: str, spec: Spec, dim: int, what: str) -> None:
    """Refuse a shard along `dim` that does not split it evenly over its ranks."""
    ranks = math.prod(r for d, r in spec.shards if d == dim)
    if spec.shape[dim] % ranks:
        raise ValueError(f"tritonkit {op}: {name} has {spec.shape[dim]} {what}, sharded over {ranks} ranks; "
                         f"tritonkit needs a multiple of the ranks sharding them")


def empty(spec: Spec) -> bool:
    return math.prod(spec.shape) == 0


def maybe(spec: object, placement: Placement) -> Placement | None:
    """The placement of an optional tensor argument: None where it is absent."""
    return None if spec is None else placement


def nonempty(present: bool, placement: Placement) -> Placement:
    """The placement of an output that is an empty (0,) placeholder when absent."""
    return placement if present else Replicate()
