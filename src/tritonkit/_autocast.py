"""torch.autocast for the ops that are matrix products: `attention`, `attention_varlen`,
`linear_cross_entropy`, `gated_linear`, `moe_experts`, and the linear-head ops of
post-training (`linear_logprobs` and the losses on it).

Inside an autocast region torch runs `F.linear` and `scaled_dot_product_attention` in the
region's lower-precision dtype, casting their floating inputs to it (autocast's
"lower_precision_fp" list), so a float32 model trained under autocast multiplies on the
tensor cores. tritonkit's custom ops are on none of autocast's lists (and its eager roads do
not go through the dispatcher), so these ops cast their inputs here, the same way:
every floating input but float64 on the region's device type, to the region's dtype; the
gradients flow back through the casts in the inputs' own dtypes. Outside a region nothing
changes. The other ops (norms, RoPE, the gated activations, cross_entropy on given logits) keep
their inputs' dtype as they do without autocast: their statistics are float32 either way.
"""

from __future__ import annotations

import torch


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype an autocast region on this device type runs matrix products in; None outside
    one, and on device types autocast has no regions for (meta: asking raises there).

    While torch.compile traces, the tensors are on the device types the graph runs on, and
    `is_autocast_available` is not asked: dynamo constant-folds `is_autocast_enabled` and
    `get_autocast_dtype`, but before torch 2.13 it cannot trace `is_autocast_available`
    (a graph break, an error under fullgraph=True)."""
    if device_type == "meta":
        return None
    if not (torch.compiler.is_compiling() or torch.amp.is_autocast_available(device_type)):
        return None
    if not torch.is_autocast_enabled(device_type):
        return None
    return torch.get_autocast_dtype(device_type)


def _eligible(t: object, device_type: str, dtype: torch.dtype) -> bool:
    return (isinstance(t, torch.Tensor) and t.device.type == device_type and t.is_floating_point()
            and t.dtype != dtype and t.dtype != torch.float64)


def dtype_in_op(t: torch.Tensor) -> torch.dtype:
    """The dtype a matrix-product op computes `t` in: the autocast region's where autocast_inputs
    casts it, else its own."""
    dtype = autocast_dtype(t.device.type)
    return dtype if dtype is not None and _eligible(t, t.device.type, dtype) else t.dtype


def autocast_inputs(*tensors):
    """`tensors` as autocast would hand them to a matrix product: in the region's dtype where an
    autocast region is on for the first tensor's device type, else unchanged (None and
    non-tensors pass through, for the ops' own checks to name)."""
    first = tensors[0]
    if not isinstance(first, torch.Tensor):
        return tensors
    device_type = first.device.type
    dtype = autocast_dtype(device_type)
    if dtype is None:
        return tensors
    return tuple(t.to(dtype) if _eligible(t, device_type, dtype) else t for t in tensors)
