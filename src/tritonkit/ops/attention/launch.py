"""Attention launchers: validate, allocate, choose the path and the tiles, launch the forward
and the three backward passes, for dense batches (B, H, N, D) and packed sequences
(total, H, D) delimited by cu_seqlens.

Loads are plain pointer loads, right for any strides and element offset, except on Hopper
and later, where the tiles each kernel streams (q, k, v in the forward; q, dO in dK/dV; k, v
in dQ) are read through tensor descriptors when `_tma_ok` has checked on the host that their
bases and strides allow it (USE_TMA), and otherwise, silently, through pointers. Packed
sequences run the same kernels on (1, H, total, D) views of their tensors.
"""

import contextlib
import functools

import torch

from ... import _launch
from ..._checks import check_same_device, check_tensor, dtype_name
from ..._launch import Launch
from ..._layout import cdiv
from .backward import _attn_bwd_dkdv_kernel, _attn_bwd_dq_kernel, _attn_bwd_preprocess_kernel
from .checks import (HALF_DTYPES, _block_d, _check_qkv, _check_varlen, _empty_like_order, _head_dim_innermost,
                     _mask_flags, _resolve_scale)
from .configs import (DKDV_TUNED_ROWS, TileConfig, _attn_bwd_dkdv_tuned, _attn_bwd_dq_tuned, _attn_fwd_tuned,
                      _autotune_enabled, _interpreting, _row_keys, fixed_configs)
from .descriptors import _descriptor, _use_tma
from .forward import _attn_fwd_kernel
from .paths import gluon_backward, gluon_forward
from .scores import kernel_qk_scale


def _packed(t: torch.Tensor) -> torch.Tensor:
    """A (total, H, D) tensor of packed sequences as the kernels' (1, H, total, D) view."""
    return t.permute(1, 0, 2).unsqueeze(0)


def _score_flags(causal: bool, window_left: int, window_right: int, softcap: float) -> dict:
    """The constexprs of the mask and the score function that every pass's kernel takes.
    TANH_APPROX: the softcap's tanh through the GPU's tanh.approx instruction, except where the
    kernels run through the interpreter, which cannot run PTX (scores.py); plain kernels keep
    False, so they compile as one variant whatever runs them."""
    return dict(CAUSAL=causal, WINDOW_LEFT=window_left, WINDOW_RIGHT=window_right, SOFTCAP=softcap,
                TANH_APPROX=softcap > 0 and not _interpreting())


# ---------------------------------------------------------------------------------------
# Forward
# ---------------------------------------------------------------------------------------

def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  scale: float | None = None, window_left: int = -1, window_right: int = -1,
                  softcap: float = 0.0, *, config: TileConfig | None = None,
                  tma: bool | None = None, gluon: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Launcher of the forward pass. Returns (o, lse): o like q (B, H, Nq, D) in q's dtype,
    lse (B, H, Nq) float32, the natural-log sum of exp(scores) per query row (-inf for a row
    that sees no key, whose o is 0).

    causal, window_left, window_right (-1: unbounded), softcap (0: none): the mask and score
    function of `tritonkit.attention` (mask.py, scores.py).
    config: a TileConfig to launch with; None autotunes on a GPU (unless TRITONKIT_AUTOTUNE=0)
    and uses `fixed_configs` otherwise.
    tma: None reads q, k, v through tensor descriptors (TMA) wherever `_tma_ok` allows it and
    through pointers elsewhere; False always through pointers; True through descriptors, or a
    ValueError if the inputs do not allow them. (Benchmarks and tests compare the paths.)
    gluon: None runs the Gluon kernel on Hopper where `paths.gluon_forward` chooses it; False
    always the Triton kernels; True the Gluon kernel, or a ValueError where it cannot run.
    """
    B, H, Nq, D, Hkv, Nk = _check_qkv(q, k, v)
    q, k, v = (_head_dim_innermost(t) for t in (q, k, v))
    o = _empty_like_order(q, (B, H, Nq, D), q.dtype)
    lse = torch.empty((B, H, Nq), dtype=torch.float32, device=q.device)
    flags = _mask_flags(causal, window_left, window_right, softcap, Nq, Nk)
    _forward(q, k, v, o, lse, _resolve_scale(scale, D), flags, None, config, tma, gluon)
    return o, lse


def attention_varlen_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                         cu_seqlens_k: torch.Tensor, causal: bool = False, scale: float | None = None,
                         window_left: int = -1, window_right: int = -1, softcap: float = 0.0, *,
                         config: TileConfig | None = None,
                         tma: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Launcher of the forward pass over packed sequences: q (Tq, H, D), k and v (Tk, Hkv, D),
    sequence s holding rows cu_seqlens_q[s]:cu_seqlens_q[s + 1] of q and the same of k. Returns
    (o, lse): o (Tq, H, D) in q's dtype, lse (H, Tq) float32. Other arguments as `attention_fwd`."""
    Tq, H, D, Tk, Hkv, S = _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k)
    o = torch.empty((Tq, H, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((H, Tq), dtype=torch.float32, device=q.device)
    if Tk == 0:  # no keys at all: every row sees none
        return o.zero_(), lse.fill_(float("-inf"))
    q4, k4, v4 = (_head_dim_innermost(_packed(t)) for t in (q, k, v))
    flags = _mask_flags(causal, window_left, window_right, softcap, Tq, Tk)
    _forward(q4, k4, v4, _packed(o), lse.unsqueeze(0), _resolve_scale(scale, D), flags,
             (cu_seqlens_q, cu_seqlens_k, S), config, tma)
    return o, lse


def _forward(q, k, v, o, lse, scale: float, flags: tuple, varlen: tuple | None,
             config: TileConfig | None, tma: bool | None, gluon: bool | None = None) -> None:
    """Launch the forward on (B, H, N, D) q, k, v (packed: B = 1 and `varlen` = (cu_seqlens_q,
    cu_seqlens_k, number of sequences)), writing o and lse (B, H, Nq)."""
    B, H, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    if B == 0 or Nq == 0:
        return
    causal, window_left, window_right, softcap = flags
    if gluon_forward(q, k, v, scale, flags, varlen, config, tma, gluon).path == "gluon":
        from ...gluon.attention_fwd import attention_fwd_gluon
        attention_fwd_gluon(q, k, v, o, lse, causal, scale, softcap)
        return
    block_d = _block_d(D)
    use_tma = _use_tma(tma, q, k, v)
    if varlen is None:
        row_keys = _row_keys(Nq, Nk, causal, window_left, window_right)
    else:  # packed: the mean length stands for a row's
        mean = max(Nq, Nk) // max(varlen[2], 1)
        row_keys = _row_keys(mean, mean, causal, window_left, window_right)
    fixed = fixed_configs(block_d, row_keys)["fwd_tma" if use_tma else "fwd"]
    tile = config or fixed
    q_in, k_in, v_in = q, k, v
    if use_tma:
        q_in = _descriptor(q, tile.block_m, block_d)
        k_in, v_in = (_descriptor(t, tile.block_n, block_d) for t in (k, v))
    cu_q, cu_k, seqs = varlen or (None, None, None)
    args = (q_in, k_in, v_in, o, lse, cu_q, cu_k, Nq, Nk, D, H // Hkv, kernel_qk_scale(scale, softcap), seqs,
            *q.stride(), *k.stride(), *v.stride(), *o.stride())
    constexprs = dict(_score_flags(*flags), SCALE_POS=scale > 0, BLOCK_D=block_d, PAD_D=block_d != D,
                      USE_TMA=use_tma)
    if config is None and _autotune_enabled():
        Launch("attention_fwd", _attn_fwd_tuned, lambda meta: _query_grid(Nq, meta["BLOCK_M"], H, B, seqs),
               args, constexprs, num_warps=None, num_stages=None)()
    else:
        Launch("attention_fwd", _attn_fwd_kernel, _query_grid(Nq, tile.block_m, H, B, seqs), args,
               dict(constexprs, **tile.meta()), num_warps=tile.num_warps, num_stages=tile.num_stages)()


def _query_grid(n: int, block: int, heads: int, batch: int, seqs: int | None) -> tuple[int, int, int]:
    """Programs of a pass that tiles n rows in blocks (mask._program_tile): one per block, head
    and batch; for packed sequences cdiv(total, block) + seqs per head, which covers every
    sequence's blocks whatever their lengths."""
    return (cdiv(n, block), heads, batch) if seqs is None else (cdiv(n, block) + seqs, heads, 1)


# ---------------------------------------------------------------------------------------
# Backward
# ---------------------------------------------------------------------------------------

def attention_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  o: torch.Tensor, lse: torch.Tensor, causal: bool = False, scale: float | None = None,
                  window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                  dlse: torch.Tensor | None = None, *, dkdv_config: TileConfig | None = None,
                  dq_config: TileConfig | None = None, tma: bool | None = None,
                  concurrent_dq: bool = True, gluon: bool | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launcher of the backward pass: (dq, dk, dv) from the upstream gradient `do` of o (and
    `dlse` of lse, when lse was used) and the forward's `o` and `lse`. Deterministic: the same
    inputs give bitwise the same gradients.

    tma: as in `attention_fwd`. Through descriptors go the tiles each kernel streams: Q and
    dO in the dK/dV pass (when both allow it), K and V in the dQ pass (when both allow it);
    the rest through pointers.
    concurrent_dq: the dQ pass needs only the preprocess's delta, not dK and dV, so on a GPU
    it runs on a side stream beside the dK/dV pass, filling the SMs that pass's last, uneven
    programs leave idle (faster on the H200, same bits: notes/attention.md); False runs the
    passes one after the other on the current stream.
    gluon: as in `attention_fwd`, for the dK/dV and dQ passes (`paths.gluon_backward`)."""
    B, H, Nq, D, Hkv, Nk = _check_qkv(q, k, v)
    _check_saved(do, o, lse, dlse, q, (B, H, Nq))
    return _attention_bwd_checked(do, q, k, v, o, lse, causal, scale, window_left, window_right, softcap, dlse,
                                  dkdv_config=dkdv_config, dq_config=dq_config, tma=tma,
                                  concurrent_dq=concurrent_dq, gluon=gluon)


def _check_saved(do, o, lse, dlse, q, lse_shape: tuple[int, ...]) -> None:
    for name, t in (("do", do), ("o", o)):
        check_tensor(name, t, HALF_DTYPES)
        if t.shape != q.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)} but q has {tuple(q.shape)}")
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {dtype_name(t.dtype)} but q has {dtype_name(q.dtype)}")
    for name, t in (("lse", lse), ("dlse", dlse)):
        if t is None and name == "dlse":
            continue
        check_tensor(name, t, (torch.float32,))
        if tuple(t.shape) != lse_shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; expected {lse_shape}")
    check_same_device(q=q, do=do, o=o, lse=lse)


def _attention_bwd_checked(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           o: torch.Tensor, lse: torch.Tensor, causal: bool = False,
                           scale: float | None = None, window_left: int = -1, window_right: int = -1,
                           softcap: float = 0.0, dlse: torch.Tensor | None = None, *,
                           dkdv_config: TileConfig | None = None, dq_config: TileConfig | None = None,
                           tma: bool | None = None, concurrent_dq: bool = True,
                           gluon: bool | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`attention_bwd` after its checks, for callers whose arguments are known good: the
    eager autograd road, whose q, k, v, o, lse are what the checked forward saved and whose
    do autograd has already matched to o's shape, dtype and device."""
    B, H, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    q, k, v, do, o = (_head_dim_innermost(t) for t in (q, k, v, do, o))
    dq = _empty_like_order(q, (B, H, Nq, D), q.dtype)
    dk = _empty_like_order(k, (B, Hkv, Nk, D), k.dtype)
    dv = _empty_like_order(v, (B, Hkv, Nk, D), v.dtype)
    flags = _mask_flags(causal, window_left, window_right, softcap, Nq, Nk)
    _backward(do, q, k, v, o, lse, dlse, dq, dk, dv, _resolve_scale(scale, D), flags, None,
              dkdv_config, dq_config, tma, concurrent_dq, gluon)
    return dq, dk, dv


def attention_varlen_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         o: torch.Tensor, lse: torch.Tensor, cu_seqlens_q: torch.Tensor,
                         cu_seqlens_k: torch.Tensor, causal: bool = False, scale: float | None = None,
                         window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                         dlse: torch.Tensor | None = None, *, dkdv_config: TileConfig | None = None,
                         dq_config: TileConfig | None = None, tma: bool | None = None,
                         concurrent_dq: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launcher of the backward pass over packed sequences (see `attention_varlen_fwd`):
    (dq, dk, dv) shaped as q, k, v. Other arguments as `attention_bwd`; lse and dlse (H, Tq)."""
    Tq, H, D, Tk, Hkv, S = _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k)
    _check_saved(do, o, lse, dlse, q, (H, Tq))
    dq = torch.empty((Tq, H, D), dtype=q.dtype, device=q.device)
    dk = torch.empty((Tk, Hkv, D), dtype=k.dtype, device=k.device)
    dv = torch.empty((Tk, Hkv, D), dtype=v.dtype, device=v.device)
    if Tk == 0:
        return dq.zero_(), dk, dv
    flags = _mask_flags(causal, window_left, window_right, softcap, Tq, Tk)
    views = [_head_dim_innermost(_packed(t)) for t in (do, q, k, v, o)]
    _backward(*views, lse.unsqueeze(0), None if dlse is None else dlse.unsqueeze(0),
              _packed(dq), _packed(dk), _packed(dv), _resolve_scale(scale, D), flags,
              (cu_seqlens_q, cu_seqlens_k, S), dkdv_config, dq_config, tma, concurrent_dq)
    return dq, dk, dv


def _backward(do, q, k, v, o, lse, dlse, dq, dk, dv, scale: float, flags: tuple, varlen: tuple | None,
              dkdv_config: TileConfig | None, dq_config: TileConfig | None, tma: bool | None,
              concurrent_dq: bool, gluon: bool | None = None) -> None:
    """Launch the three backward passes on (B, H, N, D) tensors (packed: B = 1 and `varlen`
    as in `_forward`), writing dq, dk, dv."""
    B, H, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    if B == 0:
        return
    if Nq == 0:
        dk.zero_(), dv.zero_()
        return
    causal, _, _, softcap = flags
    lse = lse.contiguous()
    dlse = None if dlse is None else dlse.contiguous()
    block_d = _block_d(D)
    pad_d = block_d != D
    group = H // Hkv
    tuned = _autotune_enabled()
    fixed = fixed_configs(block_d, busy_dkdv=softcap > 0 or varlen is not None)
    cu_q, cu_k, seqs = varlen or (None, None, None)

    delta = torch.empty(lse.shape, dtype=torch.float32, device=q.device)
    pre_block = 32 if _interpreting() else 64
    Launch("attention_bwd_preprocess", _attn_bwd_preprocess_kernel, (cdiv(Nq, pre_block), H, B),
           (o, do, delta, dlse, Nq, D, *o.stride(), *do.stride()),
           dict(BLOCK_M=pre_block, BLOCK_D=block_d, PAD_D=pad_d), num_warps=4, num_stages=1)()
    if gluon_backward(do, q, k, v, o, lse, scale, flags, varlen, dkdv_config, dq_config, tma, gluon).path == "gluon":
        from ...gluon.attention_bwd import attention_bwd_gluon
        attention_bwd_gluon(do, q, k, v, lse, delta, dq, dk, dv, causal, scale, softcap)
        return

    common = dict(_score_flags(*flags), BLOCK_D=block_d, PAD_D=pad_d)
    qk_scale = kernel_qk_scale(scale, softcap)
    tma_dkdv, tma_dq = _use_tma(tma, q, do), _use_tma(tma, k, v)
    dkdv_cfg = dkdv_config or fixed["dkdv_tma" if tma_dkdv else "dkdv"]
    q_in, do_in = (_descriptor(t, dkdv_cfg.block_m, block_d) if tma_dkdv else t for t in (q, do))
    dkdv_args = (q_in, k, v, do_in, dk, dv, lse, delta, cu_q, cu_k, Nq, Nk, D, group, qk_scale, scale, seqs,
                 *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dk.stride(), *dv.stride())
    # Query rows are masked (CHECK_M) unless every query block is full: always for packed
    # sequences, whose lengths the host does not know (the kernel then masks only the query
    # blocks that may reach past their sequence's end).
    if dkdv_config is None and tuned:
        Launch("attention_bwd_dkdv", _attn_bwd_dkdv_tuned,
               lambda meta: _query_grid(Nk, meta["BLOCK_N"], Hkv, B, seqs), dkdv_args,
               dict(common, CHECK_M=varlen is not None or Nq % DKDV_TUNED_ROWS != 0, USE_TMA=tma_dkdv),
               num_warps=None, num_stages=None)()
    else:
        Launch("attention_bwd_dkdv", _attn_bwd_dkdv_kernel, _query_grid(Nk, dkdv_cfg.block_n, Hkv, B, seqs),
               dkdv_args, dict(common, CHECK_M=varlen is not None or Nq % dkdv_cfg.block_m != 0,
                               USE_TMA=tma_dkdv, **dkdv_cfg.meta()),
               num_warps=dkdv_cfg.num_warps, num_stages=dkdv_cfg.num_stages)()

    dq_cfg = dq_config or fixed["dq_tma" if tma_dq else "dq"]
    k_in, v_in = (_descriptor(t, dq_cfg.block_n, block_d) if tma_dq else t for t in (k, v))
    dq_args = (q, k_in, v_in, do, dq, lse, delta, cu_q, cu_k, Nq, Nk, D, group, qk_scale, scale, seqs,
               *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dq.stride())
    with _beside_the_current_stream(q.device, concurrent_dq and _launch.launches_execute()):
        if dq_config is None and tuned:
            Launch("attention_bwd_dq", _attn_bwd_dq_tuned,
                   lambda meta: _query_grid(Nq, meta["BLOCK_M"], H, B, seqs), dq_args, dict(common, USE_TMA=tma_dq),
                   num_warps=None, num_stages=None)()
        else:
            Launch("attention_bwd_dq", _attn_bwd_dq_kernel, _query_grid(Nq, dq_cfg.block_m, H, B, seqs), dq_args,
                   dict(common, USE_TMA=tma_dq, **dq_cfg.meta()),
                   num_warps=dq_cfg.num_warps, num_stages=dq_cfg.num_stages)()


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
