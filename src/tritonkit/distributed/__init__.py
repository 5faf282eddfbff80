"""tritonkit across GPUs, through torch.distributed.

- `ring_attention` (context parallelism): exact attention over a sequence split across the
  ranks of a process group, with `shard_for_ring` / `unshard_from_ring` / `ring_positions`
  for its load-balanced causal layout.
- DTensor: importing this module registers the sharding rules of tritonkit's custom ops
  (`tritonkit.distributed.sharding`), so tensor-parallel and sequence-parallel DTensor
  inputs reach the kernels shard by shard. tritonkit also registers them by itself the first
  time a DTensor reaches one of its ops. `tritonkit.linear_cross_entropy` with a weight whose
  rows (the vocabulary) are sharded computes the vocabulary-parallel loss, with the
  cross-rank log-sum-exp (`tritonkit.ops.cross_entropy.vocab_parallel`).
- `moe_experts_ep` (expert parallelism): `tritonkit.moe_experts` with the experts' weights
  sharded by expert over a process group, tokens exchanged by all-to-all
  (`tritonkit.distributed.expert_parallel`).

`import tritonkit` never imports this module; it needs no process group until a function
that communicates is called.
"""

from .expert_parallel import moe_experts_ep
from .ring import ring_attention, ring_chunks, ring_positions, shard_for_ring, unshard_from_ring
from .sharding import register_shardings

register_shardings()

__all__ = ["moe_experts_ep", "ring_attention", "ring_chunks", "ring_positions", "shard_for_ring",
           "unshard_from_ring", "register_shardings"]
