"""FlashAttention-2's arguments as its kernels read them, turned into `tritonkit.attention`'s.

FlashAttention-2's Python functions pass their options to its C++ entry points, which rewrite
the window before any kernel runs (csrc/flash_attn/flash_api.cpp, `mha_fwd`, `mha_varlen_fwd`
and `set_params_fprop`). With Nk the key length (for packed sequences max_seqlen_k):

    a side >= Nk becomes -1 (unbounded)
    causal: right = 0
    left >= 0 and right < 0: right = Nk     (left < 0 and right >= 0: left = Nk, a no-op)

so "-1 unbounded" holds for the right side only while the left one is unbounded too: with a left
window, an unbounded right side reaches Nk keys past the query's diagonal, which hides keys from
the first Nq - 2 Nk queries of a call with Nq > 2 Nk. `fa2_window` applies the same rules, so
that every call sees the keys it sees under FlashAttention-2.

A row that sees no key has lse +inf in FlashAttention-2 (its kernels write INFINITY there, so
that exp(s - lse) is 0 rather than NaN); tritonkit's is -inf (log of an empty sum): `fa2_lse`.
"""

from __future__ import annotations

import operator

import torch

from .._checks import check_bool, check_float


def check_rank(name: str, t: object, ndim: int, dims: str) -> torch.Tensor:
    """`t` itself if it is a tensor of `ndim` dims in FlashAttention-2's layout `dims`."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor {dims}, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-d {dims}, got shape {tuple(t.shape)}")
    return t


def check_packed(name: str, t: object, ndim: int, dim: int, count: int, dims: str) -> tuple[torch.Tensor, ...]:
    """The `count` tensors packed along `dim` of `t` (qkv: 3, kv: 2), as views (unbind's
    gradient stacks the parts' gradients into one tensor of t's shape)."""
    check_rank(name, t, ndim, dims)
    if t.shape[dim] != count:
        raise ValueError(f"{name} must have {count} at dim {dim} {dims}, got shape {tuple(t.shape)}")
    return t.unbind(dim)


def check_no_dropout(dropout_p: object) -> None:
    """dropout_p: 0.0 (FlashAttention-2's value for evaluation, and what tritonkit computes)."""
    check_float("dropout_p", dropout_p)
    if dropout_p != 0:
        raise NotImplementedError(f"dropout_p={dropout_p}: tritonkit.flash_attn has no attention dropout; "
                                  "pass dropout_p=0.0 (modern LLM training runs without it)")


def check_options(deterministic: object, return_attn_probs: object) -> bool:
    """deterministic is accepted (tritonkit's backward is always deterministic); returns
    return_attn_probs."""
    check_bool("deterministic", deterministic)
    return check_bool("return_attn_probs", return_attn_probs)


def fa2_softcap(softcap: object) -> float | None:
    """FlashAttention-2's softcap: a cap c > 0, anything <= 0 (0.0 by default) off."""
    check_float("softcap", softcap)
    return float(softcap) if softcap > 0 else None


def _side(value: object) -> int:
    """A window side: an int, a numpy integer or a one-element integer tensor (FlashAttention-2's
    own tests pass `torch.randint(0, n, (2,))`); any negative is unbounded, as in FlashAttention-2."""
    try:
        side = operator.index(value)
    except TypeError:
        raise TypeError(f"window_size sides must be ints (-1: unbounded), got {value!r}") from None
    return max(side, -1)


def fa2_window(window_size: object, causal: bool, seqlen_k: int | torch.Tensor) -> tuple[int, int]:
    """tritonkit's window=(left, right) that shows each query the keys FlashAttention-2's kernels
    show it under (causal, window_size) with keys of length seqlen_k (the module docstring gives
    the rules). seqlen_k is read only when a side is bounded."""
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise TypeError(f"window_size must be a pair (left, right) of ints, got {window_size!r}") from None
    left, right = _side(left), _side(right)
    if left < 0 and right < 0:
        return -1, 0 if causal else -1
    n = operator.index(seqlen_k)
    left = -1 if left >= n else left
    right = 0 if causal else (-1 if right >= n else right)
    if left >= 0 and right < 0:
        right = n
    return left, right


def fa2_lse(lse: torch.Tensor) -> torch.Tensor:
    """tritonkit's log-sum-exp with FlashAttention-2's value for rows that see no key: +inf."""
    return torch.where(lse == float("-inf"), float("inf"), lse)


def no_probs(q: torch.Tensor) -> torch.Tensor:
    """FlashAttention-2's S_dmask where dropout is off: an empty tensor of q's dtype."""
    return q.new_empty((0,))
