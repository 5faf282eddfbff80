"""Projections of one input (attention's q, k, v; the MLP's gate and up) with one input gradient.

For y_i = x W_i^T + b_i, autograd computes each g_i W_i and sums them with a separate add per
extra projection, each a read of two and a write of one (tokens x hidden) tensor. `shared_linear`
computes the same outputs (the same F.linear calls) and accumulates the input gradient in the
products (addmm into one buffer, beta = 1): a read of the buffer inside each GEMM instead of an
add kernel. The weight and bias gradients are torch's products and sums.

The MLP's forward calls `shared_linear` itself. Attention's projections are called by
transformers' attention forward one by one, so each of q_proj, k_proj, v_proj gets a forward
(`group`) with which the first one called computes the three and leaves the others' outputs
on their modules (`_ahead`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._autocast import autocast_dtype, autocast_inputs
from . import _ahead
from ._instance import as_is, set_forward

_GROUP = "_tritonkit_group"  # on a grouped projection: (the group's modules, its own index)


class _SharedInputLinear(torch.autograd.Function):
    """(F.linear(x, W_i, b_i) for each i); params = (W_0, b_0, W_1, b_1, ...), biases may be None."""

    @staticmethod
    def forward(ctx, x, *params):
        weights, biases = params[0::2], params[1::2]
        ctx.save_for_backward(x, *weights)
        ctx.has_bias = tuple(b is not None for b in biases)
        ctx.set_materialize_grads(False)  # an unused output contributes nothing, not a zero product
        return tuple(F.linear(x, w, b) for w, b in zip(weights, biases))

    @staticmethod
    def backward(ctx, *grads):
        x, *weights = ctx.saved_tensors
        x2 = x.reshape(-1, x.shape[-1])
        dx = None
        out = []
        for i, (g, w) in enumerate(zip(grads, weights)):
            if g is None:
                out += [None, None]
                continue
            g2 = g.reshape(-1, g.shape[-1])
            if ctx.needs_input_grad[0]:
                dx = torch.mm(g2, w) if dx is None else dx.addmm_(g2, w)
            out.append(g2.t().mm(x2) if ctx.needs_input_grad[1 + 2 * i] else None)
            out.append(g2.sum(0) if ctx.has_bias[i] and ctx.needs_input_grad[2 + 2 * i] else None)
        return (None if dx is None else dx.view(x.shape), *out)


def _plain(t: torch.Tensor | None, x: torch.Tensor, any_dtype: bool) -> bool:
    return t is None or (type(t) in (torch.nn.Parameter, torch.Tensor) and t.device == x.device
                         and (any_dtype or t.dtype == x.dtype))


def shareable(modules, x: torch.Tensor) -> bool:
    """Whether `shared_linear` is these nn.Linear modules applied to x: gradients on, plain weights
    (not FSDP/TP shards or quantized) on x's device, in x's dtype (in any inside an autocast region,
    where each F.linear, and `shared_linear`, casts x and them to the region's dtype)."""
    any_dtype = autocast_dtype(x.device.type) is not None
    return torch.is_grad_enabled() and all(
        type(m) is torch.nn.Linear and _plain(m.weight, x, any_dtype) and _plain(m.bias, x, any_dtype)
        for m in modules)


def tail_fusable(down, gate: torch.Tensor) -> bool:
    """Whether `tritonkit.gated_linear(gate, up, down.weight, down.bias)` is exactly
    `down(act(gate) * up)`: `shareable` for `down` alone, and under autocast gate in the region's
    dtype (gate_proj's output there), so that h is made in the dtype down_proj would take it in
    (gated_linear casts the weights as F.linear does: the same products, the same bits)."""
    dtype = autocast_dtype(gate.device.type)
    return (dtype is None or gate.dtype == dtype) and shareable((down,), gate)


def shared_linear(x: torch.Tensor, modules) -> tuple[torch.Tensor, ...]:
    """(m(x) for m in modules) for nn.Linear modules that `shareable` accepts, one input gradient.
    Under autocast x and the weights are cast once, to the region's dtype, and the products run
    there: the F.linear calls would cast x once each and each keep its copy for the backward."""
    params = [p for m in modules for p in (m.weight, m.bias)]
    if autocast_dtype(x.device.type) is None:
        return _SharedInputLinear.apply(x, *params)
    x, *params = autocast_inputs(x, *params)
    with torch.autocast(x.device.type, enabled=False):
        return _SharedInputLinear.apply(x, *params)


def _grouped_forward(self, x: torch.Tensor) -> torch.Tensor:
    took = _ahead.take(self, x)
    if took is not None:
        return took
    group, index = getattr(self, _GROUP)
    if not shareable(group, x):
        return F.linear(x, self.weight, self.bias)
    outs = shared_linear(x, group)
    for module, y in zip(group, outs):
        if module is not self:
            _ahead.leave(module, x, y)
    return outs[index]


def group(modules) -> bool:
    """Give these nn.Linear modules (of one input) the grouped forward; False if one is not a plain nn.Linear."""
    modules = tuple(modules)
    if not all(type(m) is torch.nn.Linear for m in modules):
        return False
    for i, m in enumerate(modules):
        object.__setattr__(m, _GROUP, (modules, i))  # a tuple outside the module tree: no second parent
        _ahead.clear(m)
        set_forward(m, as_is, _grouped_forward)
    return True


def group_attention(model: torch.nn.Module, attention_cls: type) -> int:
    """Group q_proj, k_proj, v_proj of every `attention_cls` module in `model`; returns how many."""
    count = 0
    for module in model.modules():
        if isinstance(module, attention_cls) and all(hasattr(module, n) for n in ("q_proj", "k_proj", "v_proj")):
            count += group((module.q_proj, module.k_proj, module.v_proj))
    return count
