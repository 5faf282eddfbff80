"""Input checks and layouts of the attention launchers: q, k, v of a dense batch or of packed
sequences, the scale, the window, the softcap, cu_seqlens. Bad input raises TypeError or
ValueError naming the argument."""

import math

import torch

from ..._checks import check_same_device, check_tensor, dtype_name, is_finite
from ..._op import tracing
from .head import check_head_dim
from .score import window_side

HALF_DTYPES = (torch.float16, torch.bfloat16)
MAX_GRID_YZ = 65535  # CUDA's limit on grid dims 1 and 2 (heads, batch)


def _check_three(q: object, k: object, v: object, ndim: int, dims: str) -> None:
    """q, k, v are float16/bfloat16 tensors of `ndim` dims (named by `dims`), of one dtype, on
    one device."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, HALF_DTYPES)
        if t.dim() != ndim:
            raise ValueError(f"{name} must be {ndim}-d {dims}, got shape {tuple(t.shape)}")
    check_same_device(q=q, k=k, v=v)
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {dtype_name(t.dtype)} but q has {dtype_name(q.dtype)}")


def _check_qkv(q: object, k: object, v: object) -> tuple[int, int, int, int, int, int, int]:
    """Validate q (B, H, Nq, D), k (B, Hkv, Nk, D) and v (B, Hkv, Nk, Dv); returns
    (B, H, Nq, D, Hkv, Nk, Dv)."""
    _check_three(q, k, v, 4, "(batch, heads, seq_len, head_dim)")
    B, H, Nq, D = q.shape
    Bk, Hkv, Nk, Dk = k.shape
    if Bk != B:
        raise ValueError(f"k has batch {Bk} but q has batch {B}")
    if tuple(v.shape[:3]) != (Bk, Hkv, Nk):
        raise ValueError(f"v has (batch, heads, seq_len) {tuple(v.shape[:3])} but k has {(Bk, Hkv, Nk)}")
    _check_heads(H, Hkv, D, Dk, v.shape[3])
    if B > MAX_GRID_YZ:
        raise ValueError(f"q has batch {B}; at most {MAX_GRID_YZ} are supported")
    return B, H, Nq, D, Hkv, Nk, v.shape[3]


def _check_heads(H: int, Hkv: int, D: int, Dk: int, Dv: int) -> None:
    """Head counts and head dims: q's D and k's Dk equal (their dot products), v's Dv its own;
    each in `head.check_head_dim`'s range."""
    if H < 1 or Hkv < 1:
        raise ValueError(f"q and k need at least one head, got q heads {H}, k heads {Hkv}")
    if H % Hkv != 0:
        raise ValueError(f"q has {H} heads, which k's {Hkv} heads do not divide")
    if Dk != D:
        raise ValueError(f"k has head_dim {Dk} but q has head_dim {D}")
    check_head_dim("q", D)
    check_head_dim("v", Dv)
    if H > MAX_GRID_YZ:
        raise ValueError(f"q has {H} heads; at most {MAX_GRID_YZ} are supported")


def _check_varlen(q: object, k: object, v: object, cu_seqlens_q: object,
                  cu_seqlens_k: object) -> tuple[int, int, int, int, int, int, int]:
    """Validate packed q (Tq, H, D), k (Tk, Hkv, D), v (Tk, Hkv, Dv) and their int32 cumulative
    lengths (S + 1 entries each); returns (Tq, H, D, Tk, Hkv, S, Dv). The values of cu_seqlens (0 first,
    never decreasing, the total last) are checked where reading them costs nothing: tensors
    on the CPU. On a GPU that would stall the host on every call; there the kernels clamp
    every sequence to the tensors' rows instead, so bad values give wrong results, never
    reads or writes out of bounds (as FlashAttention-2's varlen kernels, which check nothing)."""
    _check_three(q, k, v, 3, "(total_tokens, heads, head_dim)")
    Tq, H, D = q.shape
    Tk, Hkv, Dk = k.shape
    if tuple(v.shape[:2]) != (Tk, Hkv):
        raise ValueError(f"v has (total_tokens, heads) {tuple(v.shape[:2])} but k has {(Tk, Hkv)}")
    _check_heads(H, Hkv, D, Dk, v.shape[2])
    counts = []
    for name, cu, total in (("cu_seqlens_q", cu_seqlens_q, Tq), ("cu_seqlens_k", cu_seqlens_k, Tk)):
        if not isinstance(cu, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(cu).__name__}")
        if cu.dtype != torch.int32:
            raise TypeError(f"{name} must be int32 (cumulative sequence lengths), got {dtype_name(cu.dtype)}")
        if cu.dim() != 1 or cu.shape[0] < 1:
            raise ValueError(f"{name} must be 1-d with batch + 1 entries, got shape {tuple(cu.shape)}")
        if cu.device != q.device:
            raise ValueError(f"{name} is on {cu.device} but q is on {q.device}")
        _check_cu_values(name, cu, total)
        counts.append(cu.shape[0])
    if counts[0] != counts[1]:
        raise ValueError(f"cu_seqlens_q has {counts[0]} entries but cu_seqlens_k has {counts[1]}: "
                         "one sequence of queries per sequence of keys")
    return Tq, H, D, Tk, Hkv, counts[0] - 1, v.shape[2]


def _check_cu_values(name: str, cu: torch.Tensor, total: int) -> None:
    """The values of cu_seqlens (0 first, never decreasing, `total` last), where reading them
    costs nothing: a CPU tensor, outside tracing (traced, they are checked when the custom op
    runs). Launch plans hold layouts, never values, so they call this on every call."""
    if cu.device.type != "cpu" or tracing(cu):
        return
    values = cu.tolist()
    if values[0] != 0:
        raise ValueError(f"{name} must start at 0, got {values[0]}")
    if any(b < a for a, b in zip(values, values[1:])):
        raise ValueError(f"{name} must not decrease (cumulative lengths), got {values}")
    if values[-1] != total:
        raise ValueError(f"{name} ends at {values[-1]}, but the tensor it delimits has {total} tokens")


def _check_saved(do, o, lse, dlse, q, v, lse_shape: tuple[int, ...]) -> None:
    """The backward's do, o, lse and dlse (None: lse unused) against q (do and o have its rows),
    v (and its head dim) and lse's shape."""
    for name, t in (("do", do), ("o", o)):
        check_tensor(name, t, HALF_DTYPES)
        if t.shape[:-1] != q.shape[:-1] or t.dim() != q.dim():
            raise ValueError(f"{name} has shape {tuple(t.shape)} but q has {tuple(q.shape)} (the same but for "
                             "the head dim, which is v's)")
        if t.shape[-1] != v.shape[-1]:
            raise ValueError(f"{name} has head_dim {t.shape[-1]} but v has head_dim {v.shape[-1]}")
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {dtype_name(t.dtype)} but q has {dtype_name(q.dtype)}")
    for name, t in (("lse", lse), ("dlse", dlse)):
        if t is None and name == "dlse":
            continue
        check_tensor(name, t, (torch.float32,))
        if tuple(t.shape) != lse_shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; expected {lse_shape}")
    check_same_device(q=q, do=do, o=o, lse=lse)


def _check_max_seqlen(name: str, value: object) -> None:
    """max_seqlen_*: a Python int or a 0-d integer tensor, >= 0 (a hint; nothing needs it)."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 0 or value.dtype.is_floating_point or value.dtype == torch.bool:
            raise TypeError(f"{name} must be an int or a 0-d integer tensor, got a {dtype_name(value.dtype)} "
                            f"tensor of shape {tuple(value.shape)}")
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int or a 0-d integer tensor, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def _resolve_scale(scale: object, head_dim: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    if not is_finite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return float(scale)


def _empty_like_order(like: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype,
                      device: torch.device | str | None = None) -> torch.Tensor:
    """An empty (B, H, N, D) tensor laid out as `like` is: (B, N, H, D) in memory when like's
    head stride is below its sequence stride (as for projected, packed qkv), else (B, H, N, D).
    The fake (meta) implementations use it too, so compiled graphs see the same strides; the
    launch plans take its strides from a meta tensor (device="meta") once per layout."""
    B, H, N, D = shape
    device = like.device if device is None else device
    if like.shape[1] > 1 and like.shape[2] > 1 and like.stride(1) < like.stride(2):
        return torch.empty((B, N, H, D), dtype=dtype, device=device).transpose(1, 2)
    return torch.empty((B, H, N, D), dtype=dtype, device=device)


def _packed(t: torch.Tensor) -> torch.Tensor:
    """A (total, H, D) tensor of packed sequences as the kernels' (1, H, total, D) view."""
    return t.permute(1, 0, 2).unsqueeze(0)


def _head_dim_innermost(t: torch.Tensor) -> torch.Tensor:
    """`t` itself when its head dim is innermost (unit stride), else a contiguous copy.

    On the H200 with Triton 3.6 the compiled kernels gave wrong results (relative error
    ~1, no fault) for K stored transposed (sequence stride 1, head-dim stride 130), while
    the interpreter was right (scripts/repro_attention_strides.py reproduces it; the cause
    inside the compiler is not isolated). A query with head-dim stride 2 was right. Until
    that is understood, any operand whose head dim is not innermost, or whose rows overlap
    (an expanded sequence dim), is copied; every layout a model produces ((B,H,N,D),
    (B,N,H,D), packed qkv) has a unit head-dim stride and rows apart, and is never copied.
    """
    return t.contiguous() if _needs_copy(t) else t


def _needs_copy(t: torch.Tensor) -> bool:
    """Whether `_head_dim_innermost` copies `t`: its head dim is not innermost, or its rows
    overlap."""
    rows_apart = t.shape[-2] == 1 or t.stride(-2) >= t.shape[-1]  # not expanded or overlapping
    return not (t.stride(-1) == 1 and rows_apart)


def _window_arg(window: object) -> tuple[int, int]:
    """The public `window=(left, right)` as two ints, -1 for an unbounded side (None: both)."""
    if window is None:
        return -1, -1
    if not isinstance(window, (tuple, list)) or len(window) != 2:
        raise TypeError(f"window must be None or a pair (left, right) of ints, got {window!r}")
    return window_side("window", window[0]), window_side("window", window[1])


def _softcap_arg(softcap: object) -> float:
    """The public `softcap=c` as a float, 0.0 for none."""
    if softcap is None:
        return 0.0
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        raise TypeError(f"softcap must be a positive float or None, got {type(softcap).__name__}")
    if not (is_finite(softcap) and softcap > 0):
        raise ValueError(f"softcap must be a positive, finite float or None, got {softcap}")
    return float(softcap)


def _check_score_tensors(alibi_slopes: object, sinks: object, batch: int, heads: int,
                         device: torch.device) -> int:
    """alibi_slopes: None, or a float tensor of (heads,) or (batch, heads) slopes; sinks: None, or
    a float tensor of (heads,) logits; both on `device` (for packed sequences batch is their
    count). Returns the kernels' ALiBi kind (`score.Score.alibi`): 0 none, 1 a slope a head, 2 a
    slope a (batch, head) pair."""
    for name, t, shapes in (("alibi_slopes", alibi_slopes, ((heads,), (batch, heads))), ("sinks", sinks, ((heads,),))):
        if t is None:
            continue
        check_tensor(name, t, (torch.float32, torch.float16, torch.bfloat16, torch.float64))
        if tuple(t.shape) not in shapes:
            raise ValueError(f"{name} must have shape {' or '.join(map(str, shapes))} (a value a query head"
                             f"{' or a (batch, head) pair' if len(shapes) > 1 else ''}), got {tuple(t.shape)}")
        if t.device != device:
            raise ValueError(f"{name} is on {t.device} but q is on {device}")
    if alibi_slopes is None:
        return 0
    return 1 if alibi_slopes.dim() == 1 else 2


ALIGNMENTS = ("top_left", "bottom_right")


def _alignment_arg(alignment: object) -> bool:
    """The public causal_alignment as the kernels' bottom_right flag."""
    if not isinstance(alignment, str):
        raise TypeError(f"causal_alignment must be one of {ALIGNMENTS}, got {type(alignment).__name__}")
    if alignment not in ALIGNMENTS:
        raise ValueError(f"causal_alignment must be one of {ALIGNMENTS}, got {alignment!r}")
    return alignment == "bottom_right"


def _flag_arg(name: str, value: object) -> bool:
    """A public on/off argument: a bool (numpy's and 0-d tensors' truth is refused as well as
    strings', so that causal="no" cannot pass for True)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def _alibi_arg(alibi_slopes: object) -> object:
    """The public alibi_slopes, refused where autograd would expect a gradient for them: ALiBi's
    slopes are not differentiated (as in FlashAttention-2), and a gradient must never be
    silently missing."""
    if isinstance(alibi_slopes, torch.Tensor) and alibi_slopes.requires_grad and torch.is_grad_enabled():
        raise ValueError("alibi_slopes requires grad, but ALiBi's slopes are not differentiated (as in "
                         "FlashAttention-2): pass alibi_slopes.detach() if they are fixed")
    return alibi_slopes
