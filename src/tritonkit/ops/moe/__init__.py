"""Mixture-of-experts: the routed experts' gated MLPs as grouped products over tokens sorted
by expert, forward and backward (docs/moe.md).

routing.py   the sort of (token, slot) rows by expert and the row tiles, on the device
activation.py  the gated activations (SwiGLU, GeGLU, gpt-oss's clamped one) and gate/up layouts
product.py   the K loop every grouped product shares, and a row tile's place in the routing
forward.py   the gate/up and down products, and the per-token sum
backward.py  the gradients of the inputs, the routing weights, the weights and biases
configs.py   tile sizes and the products' precision
checks.py    argument validation
op.py        the torch op and the public `moe_experts`
sharding.py  its DTensor sharding rules (the tokens sharded, the experts replicated)
reference.py the per-expert loop in plain torch
"""

from .op import moe_experts, moe_experts_bwd, moe_experts_fwd
from .reference import moe_experts_reference

__all__ = ["moe_experts", "moe_experts_fwd", "moe_experts_bwd", "moe_experts_reference"]
