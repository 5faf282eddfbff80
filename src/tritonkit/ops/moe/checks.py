"""Validation of moe_experts' arguments: every error names the argument at fault."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..._checks import check_float, check_tensor, dtype_name, is_finite
from .activation import activation_code

INDEX_DTYPES = (torch.int32, torch.int64)


class Sizes(NamedTuple):
    tokens: int        # T
    hidden: int        # H
    top_k: int         # k
    experts: int       # E
    intermediate: int  # I


def _same(name: str, t: torch.Tensor, like: torch.Tensor, like_name: str, dtype: bool = True) -> None:
    if dtype and t.dtype != like.dtype:
        raise TypeError(f"{name} has dtype {dtype_name(t.dtype)} but {like_name} has {dtype_name(like.dtype)}; "
                        "they must match")
    if t.device != like.device:
        raise ValueError(f"{name} is on {t.device} but {like_name} is on {like.device}")


def _shape(name: str, t: torch.Tensor, expected: tuple, what: str) -> None:
    if tuple(t.shape) != expected:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected {expected} ({what})")


def check_args(hidden, expert_indices, routing_weights, gate_up_weight, down_weight, gate_up_bias, down_bias,
               activation, alpha, limit) -> Sizes:
    """The sizes of a call, after checking every argument."""
    check_tensor("hidden", hidden)
    if hidden.dim() != 2:
        raise ValueError(f"hidden must be 2-d (tokens, hidden), got shape {tuple(hidden.shape)}")
    tokens, hidden_size = hidden.shape
    check_tensor("expert_indices", expert_indices, INDEX_DTYPES)
    _same("expert_indices", expert_indices, hidden, "hidden", dtype=False)
    if expert_indices.dim() != 2 or expert_indices.shape[0] != tokens or expert_indices.shape[1] < 1:
        raise ValueError(f"expert_indices has shape {tuple(expert_indices.shape)}; expected ({tokens}, k), k >= 1")
    top_k = expert_indices.shape[1]
    check_tensor("routing_weights", routing_weights)
    _same("routing_weights", routing_weights, hidden, "hidden", dtype=False)
    _shape("routing_weights", routing_weights, (tokens, top_k), "one weight per expert index")
    check_tensor("gate_up_weight", gate_up_weight)
    _same("gate_up_weight", gate_up_weight, hidden, "hidden")
    if gate_up_weight.dim() != 3 or gate_up_weight.shape[2] != hidden_size or gate_up_weight.shape[1] % 2:
        raise ValueError(f"gate_up_weight has shape {tuple(gate_up_weight.shape)}; expected (experts, 2 * I, "
                         f"{hidden_size}): each expert's gate and up rows over the hidden size")
    experts, intermediate = gate_up_weight.shape[0], gate_up_weight.shape[1] // 2
    if experts < 1 or intermediate < 1 or hidden_size < 1:
        raise ValueError(f"gate_up_weight has shape {tuple(gate_up_weight.shape)} and hidden {tuple(hidden.shape)}: "
                         "experts, I and the hidden size must be at least 1")
    check_tensor("down_weight", down_weight)
    _same("down_weight", down_weight, hidden, "hidden")
    _shape("down_weight", down_weight, (experts, hidden_size, intermediate), "experts, hidden, I")
    if gate_up_bias is not None:
        check_tensor("gate_up_bias", gate_up_bias)
        _same("gate_up_bias", gate_up_bias, hidden, "hidden")
        _shape("gate_up_bias", gate_up_bias, (experts, 2 * intermediate), "experts, 2 * I")
    if down_bias is not None:
        check_tensor("down_bias", down_bias)
        _same("down_bias", down_bias, hidden, "hidden")
        _shape("down_bias", down_bias, (experts, hidden_size), "experts, hidden")
    activation_code(activation)
    for name, value in (("alpha", alpha), ("limit", limit)):
        check_float(name, value)
        if not is_finite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit!r}")
    return Sizes(tokens, hidden_size, top_k, experts, intermediate)


def check_grad_out(grad_out: torch.Tensor, hidden: torch.Tensor) -> None:
    check_tensor("grad_out", grad_out)
    _same("grad_out", grad_out, hidden, "hidden")
    _shape("grad_out", grad_out, tuple(hidden.shape), "the output's shape")

