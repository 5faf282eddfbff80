"""moe_experts as a torch op: the launchers, their fakes, the declaration to the scaffold,
and the public function."""

from __future__ import annotations

import torch

from ..._autocast import autocast_inputs
from ..._op import Op, not_computed, records_grad, tracing
from .activation import ACTIVATIONS
from .backward import experts_backward
from .checks import Sizes, check_args, check_grad_out
from .configs import row_block
from .forward import experts_forward
from .routing import Routing, max_tiles
from .sharding import moe_experts_bwd_sharding, moe_experts_fwd_sharding


def moe_experts_fwd(hidden: torch.Tensor, expert_indices: torch.Tensor, routing_weights: torch.Tensor,
                    gate_up_weight: torch.Tensor, down_weight: torch.Tensor, gate_up_bias: torch.Tensor | None,
                    down_bias: torch.Tensor | None, activation: str, interleaved: bool, alpha: float, limit: float,
                    keep: bool = True) -> tuple[torch.Tensor, ...]:
    """Launcher for the forward pass: (out (T, H) contiguous in hidden's dtype, gu (T * k, 2I)
    kept for the backward (a placeholder unless `keep`), the routing's order, offsets and
    tiles)."""
    sizes = check_args(hidden, expert_indices, routing_weights, gate_up_weight, down_weight, gate_up_bias, down_bias,
                       activation, alpha, limit)
    _check_interleaved(interleaved)
    return experts_forward(hidden, expert_indices, routing_weights, gate_up_weight, down_weight, gate_up_bias,
                           down_bias, ACTIVATIONS[activation], interleaved, alpha, limit, sizes, keep)


def moe_experts_bwd(grad_out: torch.Tensor, hidden: torch.Tensor, expert_indices: torch.Tensor,
                    routing_weights: torch.Tensor, gate_up_weight: torch.Tensor, down_weight: torch.Tensor,
                    gate_up_bias: torch.Tensor | None, down_bias: torch.Tensor | None, gate_up: torch.Tensor,
                    order: torch.Tensor, offsets: torch.Tensor, tiles: torch.Tensor, activation: str,
                    interleaved: bool, alpha: float, limit: float, want_hidden: bool = True,
                    want_routing: bool = True, want_gate_up: bool = True,
                    want_down: bool = True) -> tuple[torch.Tensor, ...]:
    """Launcher for the backward pass, from the forward's gu and routing: (dhidden,
    drouting_weights, dgate_up_weight, ddown_weight, dgate_up_bias, ddown_bias). want_gate_up
    and want_down cover each weight with its bias; a gradient not wanted, or of an absent
    bias, is an empty placeholder. Weight gradients have their weight's layout."""
    sizes = check_args(hidden, expert_indices, routing_weights, gate_up_weight, down_weight, gate_up_bias, down_bias,
                       activation, alpha, limit)
    _check_interleaved(interleaved)
    check_grad_out(grad_out, hidden)
    slots = sizes.tokens * sizes.top_k
    if gate_up.shape != (slots, 2 * sizes.intermediate) or gate_up.dtype != hidden.dtype:
        raise ValueError(f"gate_up has shape {tuple(gate_up.shape)} and dtype {gate_up.dtype}; expected the "
                         f"forward's ({slots}, {2 * sizes.intermediate}) in {hidden.dtype}")
    for name, t, length in (("order", order, slots), ("offsets", offsets, sizes.experts + 1)):
        if t.shape != (length,) or t.dtype != torch.int32:
            raise ValueError(f"{name} has shape {tuple(t.shape)} and dtype {t.dtype}; expected the forward's "
                             f"({length},) int32")
    return experts_backward(grad_out, hidden, expert_indices, routing_weights, gate_up_weight, down_weight,
                            gate_up_bias, down_bias, gate_up, Routing(order, offsets, tiles),
                            ACTIVATIONS[activation], interleaved, alpha, limit, sizes, want_hidden, want_routing,
                            want_gate_up, want_down)


def _check_interleaved(interleaved: object) -> None:
    if not isinstance(interleaved, bool):
        raise TypeError(f"interleaved must be a bool, got {type(interleaved).__name__}")


def _sizes(hidden, expert_indices, gate_up_weight) -> Sizes:
    tokens, hidden_size = hidden.shape
    return Sizes(tokens, hidden_size, expert_indices.shape[1], gate_up_weight.shape[0], gate_up_weight.shape[1] // 2)


def _fwd_fake(hidden, expert_indices, routing_weights, gate_up_weight, down_weight, gate_up_bias, down_bias,
              activation, interleaved, alpha, limit):
    tokens, hidden_size, top_k, experts, width = _sizes(hidden, expert_indices, gate_up_weight)
    slots = tokens * top_k
    tiles = max_tiles(slots, experts, row_block(slots, experts, hidden.dtype))
    int32 = dict(dtype=torch.int32, device=hidden.device)
    return (hidden.new_empty((tokens, hidden_size)), hidden.new_empty((slots, 2 * width)),
            torch.empty((slots,), **int32), torch.empty((experts + 1,), **int32), torch.empty((tiles, 3), **int32))


def _bwd_fake(grad_out, hidden, expert_indices, routing_weights, gate_up_weight, down_weight, gate_up_bias, down_bias,
              gate_up, order, offsets, tiles, activation, interleaved, alpha, limit, want_hidden, want_routing,
              want_gate_up, want_down):
    tokens, hidden_size, top_k, experts, width = _sizes(hidden, expert_indices, gate_up_weight)
    none = not_computed(hidden)
    return (hidden.new_empty((tokens, hidden_size)) if want_hidden else none,
            routing_weights.new_empty((tokens, top_k)) if want_routing else none,
            torch.empty_like(gate_up_weight) if want_gate_up else none,
            torch.empty_like(down_weight) if want_down else none,
            hidden.new_empty((experts, 2 * width)) if want_gate_up and gate_up_bias is not None else none,
            hidden.new_empty((experts, hidden_size)) if want_down and down_bias is not None else none)


def _eager_bwd(grad_out, hidden, expert_indices, routing_weights, gate_up_weight, down_weight, gate_up_bias,
               down_bias, gate_up, order, offsets, tiles, activation, interleaved, alpha, limit, *wants):
    # The saved tensors passed the forward's checks.
    return experts_backward(grad_out, hidden, expert_indices, routing_weights, gate_up_weight, down_weight,
                            gate_up_bias, down_bias, gate_up, Routing(order, offsets, tiles),
                            ACTIVATIONS[activation], interleaved, alpha, limit,
                            _sizes(hidden, expert_indices, gate_up_weight), *wants)


def _setup_context(ctx, inputs, output):
    *tensors, activation, interleaved, alpha, limit = inputs
    _, gate_up, order, offsets, tiles = output
    ctx.save_for_backward(*tensors, gate_up, order, offsets, tiles)
    ctx.options = (activation, interleaved, alpha, limit)


def _backward(bwd, ctx, grad_out, *unused):
    hidden, expert_indices, routing_weights, gate_up_weight, down_weight, gate_up_bias, down_bias, *state = \
        ctx.saved_tensors
    want = ctx.needs_input_grad
    has = (gate_up_bias is not None, down_bias is not None)
    grads = bwd(grad_out, hidden, expert_indices, routing_weights, gate_up_weight, down_weight, gate_up_bias,
                down_bias, *state, *ctx.options, want[0], want[2], want[3] or (want[5] and has[0]),
                want[4] or (want[6] and has[1]))
    dhidden, drouting, dgate_up, ddown, dgate_up_bias, ddown_bias = grads
    return (dhidden if want[0] else None, None, drouting if want[2] else None, dgate_up if want[3] else None,
            ddown if want[4] else None, dgate_up_bias if want[5] and has[0] else None,
            ddown_bias if want[6] and has[1] else None, None, None, None, None)


def _op_check(*args):
    check_args(*args[:8], *args[9:])
    _check_interleaved(args[8])
    return args


_MOE_EXPERTS = Op(
    "moe_experts", forward=moe_experts_fwd,
    forward_schema=("(Tensor hidden, Tensor expert_indices, Tensor routing_weights, Tensor gate_up_weight, "
                    "Tensor down_weight, Tensor? gate_up_bias, Tensor? down_bias, str activation, bool interleaved, "
                    "float alpha, float limit) -> (Tensor, Tensor, Tensor, Tensor, Tensor)"),
    forward_fake=_fwd_fake, setup_context=_setup_context, backward=_backward,
    backward_launcher=moe_experts_bwd,
    backward_schema=("(Tensor grad_out, Tensor hidden, Tensor expert_indices, Tensor routing_weights, "
                     "Tensor gate_up_weight, Tensor down_weight, Tensor? gate_up_bias, Tensor? down_bias, "
                     "Tensor gate_up, Tensor order, Tensor offsets, Tensor tiles, str activation, bool interleaved, "
                     "float alpha, float limit, bool want_hidden, bool want_routing, bool want_gate_up, "
                     "bool want_down) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)"),
    backward_fake=_bwd_fake, eager_backward_launcher=_eager_bwd, check=_op_check, returns=lambda *args: 1,
    forward_sharding=moe_experts_fwd_sharding, backward_sharding=moe_experts_bwd_sharding)


def moe_experts(hidden: torch.Tensor, expert_indices: torch.Tensor, routing_weights: torch.Tensor,
                gate_up_weight: torch.Tensor, down_weight: torch.Tensor, gate_up_bias: torch.Tensor | None = None,
                down_bias: torch.Tensor | None = None, *, activation: str = "silu", interleaved: bool = False,
                alpha: float = 1.702, limit: float = 7.0) -> torch.Tensor:
    """The routed experts of a mixture-of-experts MLP, for training:

        out[t] = sum_j routing_weights[t, j] * expert_{expert_indices[t, j]}(hidden[t])
        expert_e(x) = down_weight[e] @ act(gate_up_weight[e] @ x + gate_up_bias[e]) + down_bias[e]

    differentiable in hidden, routing_weights, both weights and both biases (docs/moe.md).

    hidden: (T, H) float32, float16 or bfloat16, any strides. expert_indices: (T, k) int32 or
    int64, k >= 1; an index outside [0, E) routes its slot nowhere (it adds nothing and its
    routing weight's gradient is 0: an expert-parallel sentinel). routing_weights: (T, k), any
    float dtype (its gradient comes back in it). gate_up_weight: (E, 2I, H), each expert's gate
    and up rows as an nn.Linear weight (transformers' Qwen3-MoE, Mixtral and DeepSeek-V3
    `experts.gate_up_proj`; gpt-oss's `gate_up_proj.transpose(1, 2)`, a view), rows [0, I) gate
    and [I, 2I) up, or alternating gate and up rows with ``interleaved=True`` (gpt-oss).
    down_weight: (E, H, I) (transformers' `down_proj`; gpt-oss's `down_proj.transpose(1, 2)`).
    gate_up_bias (E, 2I) in the weight's row order, down_bias (E, H), or None. Weights and
    biases in hidden's dtype, any strides, on its device.

    activation: "silu" (SwiGLU), "gelu_tanh" or "gelu" (GeGLU), or "gpt_oss": gpt-oss's
    (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(gate, limit).

    Returns (T, H) contiguous in hidden's dtype. Products accumulate in float32, gu and h are
    rounded to hidden's dtype (as torch's unfused experts round them), and each token's k
    weighted rows are summed in float32 in slot order. Saved for the backward: gu (T * k x 2I)
    and the routing, not h (recomputed). Every sum of the backward runs in a fixed order: the
    gradients are deterministic. Inside a torch.autocast region hidden, the weights and the
    biases are cast to its dtype first, as F.linear's operands are.

    Raises TypeError for unsupported or mismatched dtypes and ValueError for mismatched shapes
    or devices, another activation, or a non-finite alpha or limit, each naming the argument.
    """
    hidden, gate_up_weight, down_weight, gate_up_bias, down_bias = autocast_inputs(
        hidden, gate_up_weight, down_weight, gate_up_bias, down_bias)
    args = (hidden, expert_indices, routing_weights, gate_up_weight, down_weight, gate_up_bias, down_bias,
            activation, interleaved, alpha, limit)
    if not tracing(*args[:7]) and not records_grad(*args[:7]):
        return moe_experts_fwd(*args, keep=False)[0]   # inference: gu is not kept
    return _MOE_EXPERTS(*args)


__all__ = ["moe_experts", "moe_experts_fwd", "moe_experts_bwd"]
