"""The attention launch plans' cache: a plan kept per call layout (`plans.py` says what a plan
holds and why), under keys made of what the checks, the path and tile choices and Triton's
specialisation read of each argument: every tensor's type, shape, strides, dtype, device and
16-byte alignment, the flags with their types, the score's arguments (`score.py`) and tensors,
the TRITONKIT_AUTOTUNE setting and the recordings open. Values are never keyed."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from ... import _launch

MAX_PLANS = 512  # layouts kept; past this many the cache starts afresh (packed batches of new totals)
_PLANS: dict[tuple, Any] = {}

def clear() -> None:
    """Forget every plan (tests that swap kernels' tuners or hooks call this)."""
    _PLANS.clear()


def planned(key_of: Callable, build: Callable, *args: Any) -> Any:
    """The plan for these launcher arguments: the one kept under their key, else built (which
    validates them) and kept. Arguments no key can be made of (not tensors, an unhashable
    flag) build a plan on every call, whose checks raise for them."""
    try:
        key = key_of(*args)
        plan = _PLANS.get(key)
    except (AttributeError, TypeError, RuntimeError):
        key = plan = None  # built below, outside this handler, so that its errors read as the checks'
    if plan is None:
        plan = build(*args)
        if key is not None:
            _keep(key, plan)
    return plan


def _keep(key: tuple, plan: Any) -> None:
    if len(_PLANS) >= MAX_PLANS:
        _PLANS.clear()
    _PLANS[key] = plan


def _layout(t: torch.Tensor) -> tuple:
    """A tensor's part of a plan key (what the checks, the path and tile choices and
    Triton's specialisation read of it)."""
    return type(t), t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16 == 0


def _setting() -> tuple:
    """What plans read besides the arguments: TRITONKIT_AUTOTUNE, and the recordings open."""
    return os.environ.get("TRITONKIT_AUTOTUNE"), _launch.recording_state()


def _flags_key(*flags: Any) -> tuple:
    """Flags with their types: 1 == True == 1.0 share a hash, and the checks tell them apart."""
    return (*flags, *map(type, flags))


def _score_key(score_args: tuple, alibi, sinks) -> tuple:
    """The score's part of a plan key: its flags (`launch.py`'s score_args) and the layouts of
    its tensors (None where not given)."""
    return (_flags_key(*score_args), None if alibi is None else _layout(alibi),
            None if sinks is None else _layout(sinks))


def forward_key(q, k, v, score_args, alibi, sinks, config, tma, gluon) -> tuple:
    return ("fwd", _layout(q), _layout(k), _layout(v), _score_key(score_args, alibi, sinks),
            _flags_key(config, tma, gluon), _setting())


def _one_cu_seqlens(cu_q, cu_k) -> bool:
    """Whether queries and keys share one cu_seqlens tensor (the same memory): packed
    self-attention, where every sequence has as many keys as queries, so that with a causal
    mask and a left window every row sees a key (itself)."""
    return isinstance(cu_q, torch.Tensor) and isinstance(cu_k, torch.Tensor) and (
        cu_q is cu_k or (cu_q.device == cu_k.device and cu_q.data_ptr() == cu_k.data_ptr()
                         and cu_q.shape == cu_k.shape and cu_q.stride() == cu_k.stride()
                         and cu_q.dtype == cu_k.dtype))


def varlen_forward_key(q, k, v, cu_q, cu_k, score_args, alibi, sinks, config, tma, gluon) -> tuple:
    return ("varlen_fwd", _layout(q), _layout(k), _layout(v), _layout(cu_q), _layout(cu_k),
            _one_cu_seqlens(cu_q, cu_k), _score_key(score_args, alibi, sinks), _flags_key(config, tma, gluon),
            _setting())


def backward_key(do, q, k, v, o, lse, score_args, alibi, sinks, dlse, dkdv_config, dq_config, tma, concurrent_dq,
                 gluon) -> tuple:
    return ("bwd", _layout(do), _layout(q), _layout(k), _layout(v), _layout(o), _layout(lse),
            None if dlse is None else _layout(dlse), _score_key(score_args, alibi, sinks),
            _flags_key(dkdv_config, dq_config, tma, concurrent_dq, gluon), _setting())


def varlen_backward_key(do, q, k, v, o, lse, cu_q, cu_k, score_args, alibi, sinks, dlse, dkdv_config, dq_config,
                        tma, concurrent_dq, gluon) -> tuple:
    return ("varlen_bwd", _layout(do), _layout(q), _layout(k), _layout(v), _layout(o), _layout(lse),
            _layout(cu_q), _layout(cu_k), _one_cu_seqlens(cu_q, cu_k), None if dlse is None else _layout(dlse),
            _score_key(score_args, alibi, sinks), _flags_key(dkdv_config, dq_config, tma, concurrent_dq, gluon),
            _setting())
