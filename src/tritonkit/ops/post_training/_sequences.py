"""What the post-training losses share: their checks, the completion mask, and per-sequence
sums of per-token log-probabilities."""

from __future__ import annotations

import torch

from ..._checks import check_bool, check_choice, check_float, check_tensor, checked_arguments, optional_int
from ..cross_entropy import OPTION_TYPES

# The types of the losses' options: the head's (OPTION_TYPES) and their own, checked before each
# call (`typed_loss`); their values are checked where they are used.
LOSS_OPTION_TYPES = dict(OPTION_TYPES, return_logps=check_bool, return_logprobs=check_bool,
                         max_completion_length=optional_int)
typed_loss = checked_arguments(**LOSS_OPTION_TYPES)


def check_number(name: str, value: object, *, low: float | None = None, high: float | None = None,
                 positive: bool = False, optional: bool = False) -> None:
    """A real number (a Python int or float) in [low, high], > 0 when positive; None if optional."""
    if value is None and optional:
        return
    check_float(name, value)
    if (positive and not value > 0) or (low is not None and not value >= low) or (high is not None and not value <= high):
        bounds = "> 0" if positive else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {bounds}, got {value!r}")


def check_sequences(hidden: object, target: object, hidden_name: str = "hidden", target_name: str = "target") -> None:
    """hidden (N, L, H) and target (N, L): sequences of tokens, each with its hidden state."""
    check_tensor(hidden_name, hidden)
    check_tensor(target_name, target, (torch.int64, torch.int32))
    if hidden.dim() != 3 or target.dim() != 2 or target.shape != hidden.shape[:2]:
        raise ValueError(f"{hidden_name} has shape {tuple(hidden.shape)} and {target_name} {tuple(target.shape)}; "
                         f"expected (sequences, length, hidden) and (sequences, length)")


def check_per_sequence(name: str, t: object, like: torch.Tensor, shapes: tuple) -> torch.Tensor | None:
    """An optional float tensor of one of `shapes`, on like's device."""
    if t is None:
        return None
    check_tensor(name, t, (torch.float32, torch.float64, torch.float16, torch.bfloat16))
    if tuple(t.shape) not in [tuple(s) for s in shapes]:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected one of {', '.join(str(tuple(s)) for s in shapes)}")
    if t.device != like.device:
        raise ValueError(f"{name} is on {t.device} but the hidden states are on {like.device}")
    return t


def completion_mask(target: torch.Tensor, ignore_index: int) -> torch.Tensor:
    """1.0 where a token is scored (its target is not ignore_index), else 0.0: float32."""
    return (target != ignore_index).to(torch.float32)


def sequence_logps(logp: torch.Tensor, mask: torch.Tensor, average: bool) -> torch.Tensor:
    """Per-sequence sums of (N, L) per-token log-probabilities over the scored tokens (masked
    ones are 0 already), or their means over them when average (0 for a sequence with none)."""
    total = (logp * mask).sum(-1)
    return total / mask.sum(-1).clamp(min=1.0) if average else total


def split_pairs(t: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen, rejected): the first and second halves of t's leading dim."""
    if t.shape[0] % 2:
        raise ValueError(f"{name} has {t.shape[0]} sequences; expected chosen then rejected, an even number")
    half = t.shape[0] // 2
    return t[:half], t[half:]
