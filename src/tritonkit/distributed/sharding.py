"""DTensor sharding rules for tritonkit's custom ops, registered all at once.

Each op's rules live with the op (its `Op` declaration's `forward_sharding` and
`backward_sharding`, written in `tritonkit._sharding`'s terms) and are registered with
DTensor, through `torch.distributed.tensor.experimental.register_sharding`, the first time a
DTensor reaches the op (`tritonkit._dtensor`). Importing `tritonkit.distributed` registers
every declared op's here, which torch.compile needs: under it that first call is not seen.
"""

from __future__ import annotations

from .. import _dtensor
from .._op import DECLARED


def register_shardings() -> None:
    """Register the sharding rules of every declared tritonkit op not yet registered
    (idempotent; ops declared later are picked up by the next call)."""
    for op in DECLARED.values():
        _dtensor.register(op)


def unregistered_ops() -> list[str]:
    """Custom ops of declared tritonkit ops that have no sharding rule (for tests)."""
    return _dtensor.missing(DECLARED.values())
