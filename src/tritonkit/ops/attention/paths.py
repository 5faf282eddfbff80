"""Which kernels run an attention pass: the Gluon kernels written for Hopper
(`gluon/`, FlashAttention-3's warp-specialized structure), or the Triton kernels of
this package, which run everywhere else: other GPUs, the interpreter, layouts a tensor
descriptor cannot read, head dims other than 64, 128 and 256 or unequal ones for q, k and v
(`head.py`), explicit tiles, windows other than a causal mask's left one, and
packed sequences with a window unless queries and keys share their cu_seqlens, and ALiBi.
Both take a softcap and learnable sinks.

The Gluon kernels are taken only where they were measured faster than the Triton ones on
the H200 (BENCHMARKS.md): the forward at head dims 128 and 256, and at 64 where it runs its
three-warpgroup tile (full attention, and causal at long sequences, without a softcap or
window); the backward at head dims 64 and 128, and its dK/dV pass at 256 (beside the Triton
dQ pass). Both paths give results within the same rounding of the float64 reference and are
deterministic; they are not bitwise equal to each other.

Each choice comes with its reason (`PathChoice`), which `tritonkit inspect` reports: the
inspector records the launches on CPU tensors for an sm_90 target, and the Gluon kernels'
`refusal` asks `_launch.target_capability` which GPU the launch would run on, so the same
choice is made there as on an H100 or H200.
"""

from __future__ import annotations

import torch

from ..._launch import PathChoice
from .configs import _row_keys
from .score import Score

GLUON_FORWARD_HEAD_DIMS = (128, 256)
# Only where the forward runs three consumer warpgroups (`gluon.attention_fwd.consumer_count`).
GLUON_FORWARD_WIDE_TILE_HEAD_DIMS = (64,)
# Packed sequences: the Gluon forward is chosen from this many keys a row sees on average
# (`configs._row_keys` of the mean length: half of it under a causal mask, at most the window).
# At D=128, causal, it measured 0.90x / 0.92x / 0.98x of the Triton forward at 123 / 165 / 219
# such keys (means of 246 / 330 / 439 rows), 0.95x with a 256-key window (mean 961), and 1.02x
# to 1.19x from 338 up: a short walk is a tile's prologue and epilogue with little between,
# and the Triton kernel's smaller tiles waste less of it. (The Gluon backward measured faster at
# every length and window tried.)
GLUON_VARLEN_FORWARD_MIN_ROW_KEYS = 300
# Head dim -> the multiply-adds of Q K^T from which the Gluon backward is chosen. At D=64, below
# 2^34, its kernels and the Triton ones take the same GPU time (measured at 2^33, B=8 H=16 N=1024;
# the Gluon ones faster from 2^35) and a call is bound by host time, where the Triton launches'
# bound templates cost less. At D=256 (the Gluon dK/dV pass, the Triton dQ pass) it measured
# faster at every size tried, 2^33 to 2^38. Dense calls only: packed sequences at D=64 measured
# as fast or faster on the Gluon kernels from 2^29.5 up (whole calls, host time included).
GLUON_BACKWARD_MIN_WORK = {64: 2**34, 128: 0, 256: 0}
GLUON_BACKWARD_HEAD_DIMS = tuple(GLUON_BACKWARD_MIN_WORK)


def _plain(score: Score, varlen: tuple | None, config: object, tma: bool | None,
           causal_window: tuple[int, int] | None = None) -> str | None:
    """Why the call is not one the Gluon kernels take (no tile forced, descriptors allowed, no
    window, alignment or ALiBi; a softcap and sinks they take), or None. causal_window: (Nq, Nk) for a causal pass, which takes
    a causal mask's left window where every row sees a key: dense, Nq <= Nk + window_left; packed
    (`varlen` = (sequences, one cu_seqlens)), where each sequence's lengths are not known on the
    host, only where queries and keys share one cu_seqlens (each row then sees itself)."""
    window = score.window
    if window and causal_window is not None and score.window_right < 0:
        if varlen is None:
            window = causal_window[0] > causal_window[1] + score.window_left   # rows left with no key
        else:
            window = not varlen[1]
    for refused, why in ((varlen is not None and window, "packed sequences with a sliding window other than a "
                          "causal mask's left one over one cu_seqlens for queries and keys"),
                         (config is not None, "an explicit tile"),
                         (tma is False, "tma=False (the pointer path)"),
                         (window, "a sliding window" if causal_window is None else
                          "a sliding window other than a causal mask's left one that leaves every row a key"),
                         (score.bottom_right, "a bottom-right alignment of queries and keys of unequal lengths"),
                         (score.alibi > 0, "ALiBi")):
        if refused:
            return f"{why}: only the Triton kernels have it"
    return None


def gluon_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, score: Score,
                  varlen: tuple | None, config: object, tma: bool | None, gluon: bool | None) -> PathChoice:
    """Which kernels run the forward, and why (`.gluon`: the Gluon kernel). gluon: None chooses by
    the measured head dims, False never the Gluon kernel, True always (a ValueError where it
    cannot take the call)."""
    if gluon is False:
        return _chosen("forward", False, "gluon=False forces the Triton kernels")
    causal, window_left = score.causal, score.window_left
    D = q.shape[-1]
    if gluon is None and D not in GLUON_FORWARD_HEAD_DIMS + GLUON_FORWARD_WIDE_TILE_HEAD_DIMS:
        return _chosen("forward", False, f"head dim {D}: the Gluon forward is chosen at head dims "
                       f"{_dims(GLUON_FORWARD_HEAD_DIMS + GLUON_FORWARD_WIDE_TILE_HEAD_DIMS)}, where it "
                       "measured faster")
    from .gluon import attention_fwd as kernels
    rows = q.shape[-2] if varlen is None else q.shape[-2] // max(varlen[0], 1)
    row_keys = _row_keys(rows, rows, causal, window_left, score.window_right)
    if gluon is None and varlen is not None and row_keys < GLUON_VARLEN_FORWARD_MIN_ROW_KEYS:
        return _chosen("forward", False, f"{varlen[0]} packed sequences of {rows} query rows on average, about "
                       f"{row_keys} keys a row: the Gluon forward is chosen for packed sequences from "
                       f"{GLUON_VARLEN_FORWARD_MIN_ROW_KEYS}, where it measured faster")
    if (gluon is None and D in GLUON_FORWARD_WIDE_TILE_HEAD_DIMS
            and kernels.consumer_count(D, score, rows) < 3):
        return _chosen("forward", False, f"head dim {D}: the Gluon forward is chosen there only for its "
                       "three-warpgroup tile (full attention, or causal from "
                       f"{kernels.THREE_CONSUMERS_CAUSAL_ROWS} query rows; no softcap or window), where "
                       "it measured faster")
    refused = (_unequal_head_dims(q, v)
               or _plain(score, varlen, config, tma, causal_window=(q.shape[-2], k.shape[-2]) if causal else None)
               or kernels.refusal(q, k, v, score, scale))
    if refused:
        return _refused("forward", refused, gluon)
    window = _packed_window(score, varlen)
    return _chosen("forward", True, f"{'gluon=True; ' if gluon else ''}sm_90 (Hopper), {window}head dim "
                   f"{q.shape[-1]}, {_dtype(q)}, {_softcap(score)}q, k, v readable by TMA")


def gluon_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                   lse: torch.Tensor, scale: float, score: Score, varlen: tuple | None, dkdv_config: object,
                   dq_config: object, tma: bool | None, gluon: bool | None, work: int) -> PathChoice:
    """Which kernels run the dK/dV and dQ passes, and why; gluon as in `gluon_forward`. work: the
    multiply-adds of the Q K^T the mask leaves visible (B H Nq D times the keys a row sees)."""
    causal = score.causal
    if gluon is False:
        return _chosen("backward", False, "gluon=False forces the Triton kernels")
    if gluon is None and q.shape[-1] not in GLUON_BACKWARD_HEAD_DIMS:
        return _chosen("backward", False, f"head dim {q.shape[-1]}: the Gluon backward is chosen at head dim "
                       f"{_dims(GLUON_BACKWARD_HEAD_DIMS)}, where it measured faster")
    if gluon is None and varlen is None and work < GLUON_BACKWARD_MIN_WORK[q.shape[-1]]:
        return _chosen("backward", False, f"head dim {q.shape[-1]} with {work} multiply-adds of Q K^T, under "
                       f"{GLUON_BACKWARD_MIN_WORK[q.shape[-1]]}, below which the Gluon backward did not measure "
                       "faster")
    from .gluon import attention_bwd as kernels
    refused = (_unequal_head_dims(q, v)
               or _plain(score, varlen, dkdv_config if dq_config is None else dq_config, tma,
                         causal_window=(q.shape[-2], k.shape[-2]) if causal else None)
               or kernels.refusal(do, q, k, v, o, lse, score, scale))
    if refused:
        return _refused("backward", refused, gluon)
    window = _packed_window(score, varlen)
    dq_pass = "" if q.shape[-1] in kernels.HEAD_DIMS else "; the dQ pass in Triton (no Gluon dQ kernel there)"
    return _chosen("backward", True, f"{'gluon=True; ' if gluon else ''}sm_90 (Hopper), {'causal, ' if causal else ''}"
                   f"{window}head dim {q.shape[-1]}, {_dtype(q)}, {_softcap(score)}q, k, v, do readable by TMA"
                   f"{dq_pass}")


def _unequal_head_dims(q: torch.Tensor, v: torch.Tensor) -> str | None:
    """Why the Gluon kernels cannot take q, k and v of different head dims (DeepSeek-V3's 192
    and 128), or None: theirs are written for one."""
    if v.shape[-1] != q.shape[-1]:
        return (f"head dim {q.shape[-1]} for q and k but {v.shape[-1]} for v: the Gluon kernels take one head dim, "
                "only the Triton kernels have two")
    return None


def _refused(which: str, refused: str, gluon: bool | None) -> PathChoice:
    """The Triton path because the Gluon kernel cannot take the call; a ValueError if gluon=True."""
    if gluon:
        raise ValueError(f"gluon=True, but the Gluon {which} cannot take this call: {refused} (it needs a Hopper "
                         "GPU (sm_90), float16/bfloat16 tensors that tensor descriptors can read, a head dim it "
                         "supports, no explicit tiles, and no window other than a causal mask's left one "
                         "(with packed sequences, over one cu_seqlens for queries and keys))")
    return _chosen(which, False, refused)


def _chosen(which: str, gluon: bool, reason: str) -> PathChoice:
    """The choice. A launch plan keeps it and tells the inspector's recordings of it on every
    call (`_launch.record_choice`), also the calls that find the plan made."""
    return PathChoice(f"attention {which}", "gluon" if gluon else "triton", reason)


def _packed_window(score: Score, varlen: tuple | None) -> str:
    """The reason's words for packed sequences and a causal mask's left window."""
    return ((f"{varlen[0]} packed sequences, " if varlen is not None else "")
            + (f"left window {score.window_left}, " if score.window_left >= 0 else ""))


def _dims(dims: tuple[int, ...]) -> str:
    return " and ".join(map(str, dims))


def _softcap(score: Score) -> str:
    return f"softcap {score.softcap:g}, " if score.softcap else ""


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")
