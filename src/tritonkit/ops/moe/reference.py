"""moe_experts in plain torch: the per-expert loop of transformers' eager experts."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def gated_reference(gu: torch.Tensor, activation: str = "silu", interleaved: bool = False, alpha: float = 1.702,
                    limit: float = 7.0) -> torch.Tensor:
    """h = act(gate) * up from the gate/up projection's output gu (..., 2I), in gu's dtype."""
    gate, up = (gu[..., ::2], gu[..., 1::2]) if interleaved else gu.chunk(2, dim=-1)
    if activation == "gpt_oss":
        gate = gate.clamp(min=None, max=limit)
        up = up.clamp(min=-limit, max=limit)
        return (up + 1) * (gate * torch.sigmoid(gate * alpha))
    if activation == "silu":
        return F.silu(gate) * up
    if activation == "gelu_tanh":
        return F.gelu(gate, approximate="tanh") * up
    if activation == "gelu":
        return F.gelu(gate) * up
    raise ValueError(f"unknown activation {activation!r}")


def moe_experts_reference(hidden: torch.Tensor, expert_indices: torch.Tensor, routing_weights: torch.Tensor,
                          gate_up_weight: torch.Tensor, down_weight: torch.Tensor,
                          gate_up_bias: torch.Tensor | None = None, down_bias: torch.Tensor | None = None,
                          activation: str = "silu", interleaved: bool = False, alpha: float = 1.702,
                          limit: float = 7.0, upcast: bool = True) -> torch.Tensor:
    """sum over k of routing_weights[t, j] * expert_{indices[t, j]}(hidden[t]), one expert at a
    time; in float64 (upcast=True) or in the inputs' dtypes, as transformers' eager experts
    compute it (the per-expert result cast to hidden's dtype and accumulated there). Indices
    outside [0, E) contribute nothing. Differentiable in every floating-point argument."""
    out_dtype = hidden.dtype
    tensors = [hidden, routing_weights, gate_up_weight, down_weight, gate_up_bias, down_bias]
    if upcast:
        tensors = [None if t is None else t.double() for t in tensors]
    hidden, routing_weights, gate_up_weight, down_weight, gate_up_bias, down_bias = tensors
    out = torch.zeros_like(hidden)
    for expert in range(gate_up_weight.shape[0]):
        token, slot = torch.where(expert_indices == expert)
        if token.numel() == 0:
            continue
        gu = F.linear(hidden[token], gate_up_weight[expert], None if gate_up_bias is None else gate_up_bias[expert])
        h = gated_reference(gu, activation, interleaved, alpha, limit)
        y = F.linear(h, down_weight[expert], None if down_bias is None else down_bias[expert])
        y = y * routing_weights[token, slot, None]
        out = out.index_add(0, token, y.to(out.dtype))
    return out if upcast else out.to(out_dtype)
