"""Attention launchers: input checks, the choice between tensor descriptors (TMA) and plain
pointers, descriptors, and the launches of the forward and the three backward passes.

Loads are plain pointer loads, right for any strides and element offset, except on Hopper
and later, where the tiles each kernel streams (q, k, v in the forward; q, dO in dK/dV; k, v
in dQ) are read through tensor descriptors when `_tma_ok` has checked on the host that their
bases and strides allow it (USE_TMA), and otherwise, silently, through pointers.
"""

import contextlib
import functools
import math

import torch
from triton.tools.tensor_descriptor import TensorDescriptor

from ... import _launch
from ..._checks import check_same_device, check_tensor, dtype_name
from ..._launch import Launch
from ..._layout import cdiv, next_power_of_2
from .backward import _attn_bwd_dkdv_kernel, _attn_bwd_dq_kernel, _attn_bwd_preprocess_kernel
from .configs import (DKDV_TUNED_ROWS, TileConfig, _attn_bwd_dkdv_tuned, _attn_bwd_dq_tuned, _attn_fwd_tuned,
                      _autotune_enabled, _interpreting, _row_keys, fixed_configs)
from .forward import _attn_fwd_kernel

LOG2E = 1.4426950408889634
HALF_DTYPES = (torch.float16, torch.bfloat16)
MAX_GRID_YZ = 65535  # CUDA's limit on grid dims 1 and 2 (heads, batch)


# ---------------------------------------------------------------------------------------
# Checks and layouts
# ---------------------------------------------------------------------------------------

def _check_qkv(q: object, k: object, v: object) -> tuple[int, int, int, int, int, int]:
    """Validate q, k, v; returns (B, H, Nq, D, Hkv, Nk)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, HALF_DTYPES)
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-d (batch, heads, seq_len, head_dim), got shape {tuple(t.shape)}")
    check_same_device(q=q, k=k, v=v)
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {dtype_name(t.dtype)} but q has {dtype_name(q.dtype)}")
    B, H, Nq, D = q.shape
    Bk, Hkv, Nk, Dk = k.shape
    if Bk != B:
        raise ValueError(f"k has batch {Bk} but q has batch {B}")
    if tuple(v.shape[:3]) != (Bk, Hkv, Nk):
        raise ValueError(f"v has (batch, heads, seq_len) {tuple(v.shape[:3])} but k has {(Bk, Hkv, Nk)}")
    if Dk != D:
        raise ValueError(f"k has head_dim {Dk} but q has head_dim {D}")
    if v.shape[3] != D:
        raise ValueError(f"v has head_dim {v.shape[3]} but q has head_dim {D}")
    if H < 1 or Hkv < 1:
        raise ValueError(f"q and k need at least one head, got q heads {H}, k heads {Hkv}")
    if H % Hkv != 0:
        raise ValueError(f"q has {H} heads, which k's {Hkv} heads do not divide")
    if D % 8 != 0 or not 16 <= D <= 256:
        raise ValueError(f"q has head_dim {D}; supported: multiples of 8 from 16 to 256")
    if Nk < 1:
        raise ValueError("k has sequence length 0: attention needs at least one key")
    if H > MAX_GRID_YZ or B > MAX_GRID_YZ:
        raise ValueError(f"q has batch {B} and {H} heads; at most {MAX_GRID_YZ} of each are supported")
    return B, H, Nq, D, Hkv, Nk


def _resolve_scale(scale: object, head_dim: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return float(scale)


def _empty_like_order(like: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An empty (B, H, N, D) tensor laid out as `like` is: (B, N, H, D) in memory when like's
    head stride is below its sequence stride (as for projected, packed qkv), else (B, H, N, D).
    The fake (meta) implementations use it too, so compiled graphs see the same strides."""
    B, H, N, D = shape
    if like.shape[1] > 1 and like.shape[2] > 1 and like.stride(1) < like.stride(2):
        return torch.empty((B, N, H, D), dtype=dtype, device=like.device).transpose(1, 2)
    return torch.empty((B, H, N, D), dtype=dtype, device=like.device)


def _block_d(head_dim: int) -> int:
    return max(16, next_power_of_2(head_dim))


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
    rows_apart = t.shape[-2] == 1 or t.stride(-2) >= t.shape[-1]  # not expanded or overlapping
    return t if t.stride(-1) == 1 and rows_apart else t.contiguous()


# ---------------------------------------------------------------------------------------
# Tensor descriptors (TMA)
# ---------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _has_tma(device: torch.device) -> bool:
    """Whether `device` has TMA: a CUDA GPU of compute capability 9.0 (Hopper) or later. CPU
    tensors reach a launcher in two ways: under Triton's interpreter, which reads tensor
    descriptors (zero-filling out of bounds as TMA does), or recorded for `tritonkit inspect`,
    which compiles for sm_90 by default."""
    if device.type != "cuda":
        return True
    return torch.cuda.get_device_capability(device)[0] >= 9


def _tma_ok(*tensors: torch.Tensor) -> bool:
    """Whether these (B, H, N, D) operands can be read through tensor descriptors (TMA).

    TMA addresses a tensor by its base and a byte stride per dimension, and refuses on the
    host (an AssertionError in TensorDescriptor, or an error when the driver encodes the
    descriptor) a base that is not 16-byte aligned or a stride that is not a multiple of 16
    bytes; the innermost stride must be 1. Views that start inside a buffer (packed qkv at an
    odd offset) and rows of, say, 131 elements fail here, and take the pointer path instead,
    silently. Also refused, to stay inside the hardware's documented range: strides of 0
    (broadcast dims), of 2^40 bytes or more, and dims of 2^32 or more.
    """
    for t in tensors:
        if not _has_tma(t.device) or t.data_ptr() % 16:
            return False
        size = t.element_size()
        *outer, inner = t.stride()
        if inner != 1:
            return False
        for n in t.shape:
            if n >= 2**32:
                return False
        for s in outer:
            if s <= 0 or s * size % 16 or s * size >= 2**40:
                return False
    return True


def _use_tma(tma: bool | None, *tensors: torch.Tensor) -> bool:
    """The launchers' `tma` argument: None reads these operands through tensor descriptors
    where `_tma_ok` allows it, False never, True always (a ValueError where it cannot)."""
    use = tma is not False and _tma_ok(*tensors)
    if tma and not use:
        raise ValueError("tma=True, but the operands cannot be read through tensor descriptors: each needs "
                         "a 16-byte aligned start and strides that are multiples of 16 bytes")
    return use


def _descriptor(t: torch.Tensor, rows: int, block_d: int) -> TensorDescriptor:
    """A descriptor of the whole (B, H, N, D) tensor with its own strides, read a tile of
    `rows` x block_d of one (batch, head) at a time. Reads past N or D come back as zeros,
    and never from the next head. The kernel's pre-run hook (`_descriptor_fitter`) resets the
    tile shape to the config that launches.

    Built without TensorDescriptor's own checks (its __post_init__), which repeat what
    `_tma_ok` has checked on every operand that reaches here (aligned base, 16-byte strides,
    unit innermost stride; dims are positive and tiles powers of two by construction): they
    cost ~2 us of host time a descriptor, and a forward and backward build seven. A test
    holds the result equal to the checked constructor's."""
    desc = object.__new__(TensorDescriptor)
    desc.base, desc.shape, desc.strides = t, list(t.shape), list(t.stride())
    desc.block_shape, desc.padding = [1, 1, rows, block_d], "zero"
    return desc


def _descriptor_fitter(kernel, rows_of: dict[str, str]):
    """A pre-run hook for `kernel` that gives its descriptor arguments (by parameter name ->
    the meta-parameter counting their tile's rows) the tile shape of the config being
    launched. The autotuner picks BLOCK_M and BLOCK_N after the launcher built them, and
    Triton compiles a descriptor for the block shape it carries. A config pre_hook, as in
    Triton's tutorial, would do the same, but Triton's on-disk tuning cache skips configs
    that have one. Launches pass the kernel's runtime arguments by position."""
    positions = {kernel.arg_names.index(name): rows for name, rows in rows_of.items()}

    def fit_descriptors(*args, **meta) -> None:
        if meta.get("USE_TMA"):
            for position, rows in positions.items():
                args[position].block_shape = [1, 1, meta[rows], meta["BLOCK_D"]]
    kernel.add_pre_run_hook(fit_descriptors)
    return fit_descriptors


_fit_descriptors = _descriptor_fitter(_attn_fwd_kernel, {"Q": "BLOCK_M", "K": "BLOCK_N", "V": "BLOCK_N"})
_fit_dkdv_descriptors = _descriptor_fitter(_attn_bwd_dkdv_kernel, {"Q": "BLOCK_M", "DO": "BLOCK_M"})
_fit_dq_descriptors = _descriptor_fitter(_attn_bwd_dq_kernel, {"K": "BLOCK_N", "V": "BLOCK_N"})


# ---------------------------------------------------------------------------------------
# Launchers
# ---------------------------------------------------------------------------------------

def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  scale: float | None = None, *, config: TileConfig | None = None,
                  tma: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Launcher of the forward pass. Returns (o, lse): o like q (B, H, Nq, D) in q's dtype,
    lse (B, H, Nq) float32, the natural-log sum of exp(scores) per query row.

    config: a TileConfig to launch with; None autotunes on a GPU (unless TRITONKIT_AUTOTUNE=0)
    and uses `fixed_configs` otherwise.
    tma: None reads q, k, v through tensor descriptors (TMA) wherever `_tma_ok` allows it and
    through pointers elsewhere; False always through pointers; True through descriptors, or a
    ValueError if the inputs do not allow them. (Benchmarks and tests compare the paths.)
    """
    B, H, Nq, D, Hkv, Nk = _check_qkv(q, k, v)
    q, k, v = (_head_dim_innermost(t) for t in (q, k, v))
    scale = _resolve_scale(scale, D)
    causal = bool(causal)
    o = _empty_like_order(q, (B, H, Nq, D), q.dtype)
    lse = torch.empty((B, H, Nq), dtype=torch.float32, device=q.device)
    if B == 0 or Nq == 0:
        return o, lse
    block_d = _block_d(D)
    use_tma = _use_tma(tma, q, k, v)
    fixed = fixed_configs(block_d, _row_keys(Nq, Nk, causal))["fwd_tma" if use_tma else "fwd"]
    tile = config or fixed
    q_in, k_in, v_in = q, k, v
    if use_tma:
        q_in = _descriptor(q, tile.block_m, block_d)
        k_in, v_in = (_descriptor(t, tile.block_n, block_d) for t in (k, v))
    args = (q_in, k_in, v_in, o, lse, Nq, Nk, D, H // Hkv, scale * LOG2E,
            *q.stride(), *k.stride(), *v.stride(), *o.stride())
    constexprs = dict(CAUSAL=causal, SCALE_POS=scale > 0, BLOCK_D=block_d, PAD_D=block_d != D, USE_TMA=use_tma)
    if config is None and _autotune_enabled():
        Launch("attention_fwd", _attn_fwd_tuned,
               lambda meta: (cdiv(Nq, meta["BLOCK_M"]), H, B),
               args, constexprs, num_warps=None, num_stages=None)()
    else:
        Launch("attention_fwd", _attn_fwd_kernel, (cdiv(Nq, tile.block_m), H, B), args,
               dict(constexprs, **tile.meta()), num_warps=tile.num_warps, num_stages=tile.num_stages)()
    return o, lse


def attention_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  o: torch.Tensor, lse: torch.Tensor, causal: bool = False, scale: float | None = None,
                  *, dkdv_config: TileConfig | None = None, dq_config: TileConfig | None = None,
                  tma: bool | None = None, concurrent_dq: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launcher of the backward pass: (dq, dk, dv) from the upstream gradient `do` and the
    forward's `o` and `lse`. Deterministic: the same inputs give bitwise the same gradients.

    tma: as in `attention_fwd`. Through descriptors go the tiles each kernel streams: Q and
    dO in the dK/dV pass (when both allow it), K and V in the dQ pass (when both allow it);
    the rest through pointers.
    concurrent_dq: the dQ pass needs only the preprocess's delta, not dK and dV, so on a GPU
    it runs on a side stream beside the dK/dV pass, filling the SMs that pass's last, uneven
    programs leave idle (faster on the H200, same bits: notes/attention.md); False runs the
    passes one after the other on the current stream."""
    B, H, Nq, D, Hkv, Nk = _check_qkv(q, k, v)
    for name, t in (("do", do), ("o", o)):
        check_tensor(name, t, HALF_DTYPES)
        if t.shape != q.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)} but q has {tuple(q.shape)}")
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {dtype_name(t.dtype)} but q has {dtype_name(q.dtype)}")
    check_tensor("lse", lse, (torch.float32,))
    if lse.shape != (B, H, Nq):
        raise ValueError(f"lse has shape {tuple(lse.shape)}; expected {(B, H, Nq)}")
    check_same_device(q=q, do=do, o=o, lse=lse)
    return _attention_bwd_checked(do, q, k, v, o, lse, causal, scale, dkdv_config=dkdv_config,
                                  dq_config=dq_config, tma=tma, concurrent_dq=concurrent_dq)


def _attention_bwd_checked(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           o: torch.Tensor, lse: torch.Tensor, causal: bool = False,
                           scale: float | None = None, *, dkdv_config: TileConfig | None = None,
                           dq_config: TileConfig | None = None, tma: bool | None = None,
                           concurrent_dq: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`attention_bwd` after its checks, for callers whose arguments are known good: the
    eager autograd road, whose q, k, v, o, lse are what the checked forward saved and whose
    do autograd has already matched to o's shape, dtype and device."""
    B, H, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    scale = _resolve_scale(scale, D)
    causal = bool(causal)
    lse = lse.contiguous()
    q, k, v, do, o = (_head_dim_innermost(t) for t in (q, k, v, do, o))

    dq = _empty_like_order(q, (B, H, Nq, D), q.dtype)
    dk = _empty_like_order(k, (B, Hkv, Nk, D), k.dtype)
    dv = _empty_like_order(v, (B, Hkv, Nk, D), v.dtype)
    if B == 0:
        return dq, dk, dv
    if Nq == 0:
        return dq, dk.zero_(), dv.zero_()
    block_d = _block_d(D)
    pad_d = block_d != D
    group = H // Hkv
    tuned = _autotune_enabled()
    fixed = fixed_configs(block_d)

    delta = torch.empty((B, H, Nq), dtype=torch.float32, device=q.device)
    pre_block = 32 if _interpreting() else 64
    Launch("attention_bwd_preprocess", _attn_bwd_preprocess_kernel, (cdiv(Nq, pre_block), H, B),
           (o, do, delta, Nq, D, *o.stride(), *do.stride()),
           dict(BLOCK_M=pre_block, BLOCK_D=block_d, PAD_D=pad_d), num_warps=4, num_stages=1)()

    common = dict(CAUSAL=causal, BLOCK_D=block_d, PAD_D=pad_d)
    tma_dkdv, tma_dq = _use_tma(tma, q, do), _use_tma(tma, k, v)
    dkdv_cfg = dkdv_config or fixed["dkdv_tma" if tma_dkdv else "dkdv"]
    q_in, do_in = (_descriptor(t, dkdv_cfg.block_m, block_d) if tma_dkdv else t for t in (q, do))
    dkdv_args = (q_in, k, v, do_in, dk, dv, lse, delta, Nq, Nk, D, group, scale * LOG2E, scale,
                 *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dk.stride(), *dv.stride())
    if dkdv_config is None and tuned:
        Launch("attention_bwd_dkdv", _attn_bwd_dkdv_tuned,
               lambda meta: (cdiv(Nk, meta["BLOCK_N"]), Hkv, B), dkdv_args,
               dict(common, CHECK_M=Nq % DKDV_TUNED_ROWS != 0, USE_TMA=tma_dkdv), num_warps=None, num_stages=None)()
    else:
        Launch("attention_bwd_dkdv", _attn_bwd_dkdv_kernel, (cdiv(Nk, dkdv_cfg.block_n), Hkv, B), dkdv_args,
               dict(common, CHECK_M=Nq % dkdv_cfg.block_m != 0, USE_TMA=tma_dkdv, **dkdv_cfg.meta()),
               num_warps=dkdv_cfg.num_warps, num_stages=dkdv_cfg.num_stages)()

    dq_cfg = dq_config or fixed["dq_tma" if tma_dq else "dq"]
    k_in, v_in = (_descriptor(t, dq_cfg.block_n, block_d) if tma_dq else t for t in (k, v))
    dq_args = (q, k_in, v_in, do, dq, lse, delta, Nq, Nk, D, group, scale * LOG2E, scale,
               *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dq.stride())
    with _beside_the_current_stream(q.device, concurrent_dq and _launch.launches_execute()):
        if dq_config is None and tuned:
            Launch("attention_bwd_dq", _attn_bwd_dq_tuned,
                   lambda meta: (cdiv(Nq, meta["BLOCK_M"]), H, B), dq_args, dict(common, USE_TMA=tma_dq),
                   num_warps=None, num_stages=None)()
        else:
            Launch("attention_bwd_dq", _attn_bwd_dq_kernel, (cdiv(Nq, dq_cfg.block_m), H, B), dq_args,
                   dict(common, USE_TMA=tma_dq, **dq_cfg.meta()),
                   num_warps=dq_cfg.num_warps, num_stages=dq_cfg.num_stages)()
    return dq, dk, dv


@functools.lru_cache(maxsize=None)
def _side_stream(device: torch.device) -> "torch.cuda.Stream":
    return torch.cuda.Stream(device)


@contextlib.contextmanager
def _beside_the_current_stream(device: torch.device, enabled: bool):
    """Run the block's launches on a side stream that starts after everything queued so far
    on the current stream, and make the current stream wait for them before anything queued
    after the block. Tensors made on the current stream stay safe: the caching allocator hands
    their memory out again only to work on that stream, which now waits for the side stream.
    CUDA only (the interpreter, a CPU tensor, or enabled=False: the current stream)."""
    if not enabled or device.type != "cuda":
        yield
        return
    main = torch.cuda.current_stream(device)
    side = _side_stream(device)
    side.wait_stream(main)
    try:
        with torch.cuda.stream(side):
            yield
    finally:
        main.wait_stream(side)
