"""How RMSNorm's and LayerNorm's rows are tiled and launched, their inputs checked, and the
launchers both norms call; the kernels, and the math they compute, are in `_kernels.py`.

Memory floor at 8192 x 4096 bf16 (64 MiB a tensor), at the H200's measured copy rate of
4.2 TB/s: forward 2 tensors = 134 MB -> 32 us (with residual 4 tensors, 64 us); backward
reads h and dy and writes dx, 3 tensors -> 48 us; forward + backward 80 us.
"""

from __future__ import annotations

import functools
import math

import torch

from ..._checks import check_same_device, check_tensor, dtype_name, is_finite
from ..._counters import MAX_COUNTERS, zeroed_counters
from ..._launch import LaunchTemplate
from ..._layout import cdiv, collapse_dims, next_power_of_2
from ._kernels import _norm_bwd_kernel, _norm_fwd_kernel
from ._plans import head_layout, template

MAX_FUSED_COLS = {"fwd": 16384, "bwd": 8192}  # longest row held whole by one program
CHUNK_COLS = 4096          # columns a program handles at a time in longer rows
# Short rows are packed several to a program up to this many elements: the forward's
# programs are many and short (two 1024-wide rows on 4 warps), the backward's persistent (one
# an SM), each holding more, so that one program's loads keep enough bytes in flight to cover
# memory latency.
MIN_TILE = {"fwd": 2048, "bwd": 8192}
# Elements a thread holds per tensor: 16 (two 16-byte loads of a 16-bit row): the forward at
# 8 warps a 4096-wide row, the backward at 16 warps over 8192 elements, with h, dy, w and the
# dW (and dB) sums in registers at once.
PER_THREAD = {"fwd": 16, "bwd": 16}
# Warps a program at most. A forward program's row reductions (LayerNorm's two) cross its
# warps through shared memory, each with a barrier: past 8 warps they cost more than the
# extra loads in flight bring, so wider rows hold more elements a thread instead.
MAX_WARPS = {"fwd": 8, "bwd": 32}
# Elements of a row a forward thread holds at most, past which the warps grow beyond
# MAX_WARPS instead. LayerNorm keeps h and h - mean live across its two reductions beside the
# weight and bias: 64 a thread (a 16384-wide row on 8 warps) take 148 registers, one block an
# SM and no loads in flight while its reductions run; 32 a thread (16 warps) take 64, two
# blocks. RMSNorm's one reduction holds 64 a thread in 107 registers, two blocks an SM.
MAX_PER_THREAD_FWD = {"rms": 64, "layer": 32}
WARPS_PER_SM = 16          # backward: persistent programs launched per SM = this / num_warps
SUM_PER_THREAD = 16        # partial-sum elements a thread loads at a time (16 fp32: four 16-byte loads)


# ---------------------------------------------------------------------------------------
# Launch helpers
# ---------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1024)
def row_config(n_rows: int, n_cols: int, direction: str, is_rms: bool) -> tuple[int, int, bool, int]:
    """(BLOCK_M, BLOCK_N, ONE_CHUNK, num_warps) for a pass ("fwd" or "bwd") of a norm: rows up
    to MAX_FUSED_COLS whole, short ones packed to MIN_TILE[direction] elements a program; longer
    rows in CHUNK_COLS chunks. PER_THREAD elements a thread set the warps (4 to MAX_WARPS; in
    the forward more where a thread would hold past MAX_PER_THREAD_FWD, up to 32)."""
    one_chunk = n_cols <= MAX_FUSED_COLS[direction]
    block_n = next_power_of_2(n_cols) if one_chunk else CHUNK_COLS
    block_m = max(1, min(next_power_of_2(n_rows), MIN_TILE[direction] // block_n)) if one_chunk else 1
    elements = block_m * block_n
    num_warps = min(MAX_WARPS[direction], max(4, elements // (32 * PER_THREAD[direction])))
    if direction == "fwd":
        num_warps = max(num_warps, min(32, elements // (32 * MAX_PER_THREAD_FWD["rms" if is_rms else "layer"])))
    return block_m, block_n, one_chunk, num_warps


@functools.lru_cache(maxsize=16)
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def backward_programs(device: torch.device, n_blocks: int, num_warps: int) -> int:
    """Persistent backward programs: about WARPS_PER_SM warps' worth an SM, enough rows in
    flight to cover memory latency while every program stays resident (a program that
    waits for a slot would finish its equal share of rows a whole turn late). The
    interpreter gets 2, so each walks several row blocks as on the GPU."""
    per_device = 2 if device.type != "cuda" else _sm_count(device) * max(1, WARPS_PER_SM // num_warps)
    return max(1, min(n_blocks, per_device))


def row_layout(shape: torch.Size, *tensors: torch.Tensor) -> tuple[int, list[tuple[int, int, int]]] | None:
    """(size1, [(s0, s1, column stride) per tensor]) addressing rows of `tensors` (all of
    `shape`) through two collapsed leading dims; None when the leading dims need more."""
    sizes, strides = collapse_dims(shape[:-1], *(t.stride()[:-1] for t in tensors))
    if len(sizes) > 2:
        return None
    if len(sizes) == 1:
        return 1, [(s[0], 0, t.stride(-1)) for s, t in zip(strides, tensors)]
    return sizes[1], [(s[0], s[1], t.stride(-1)) for s, t in zip(strides, tensors)]


def rows_of(shape: torch.Size, *tensors: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], int,
                                                                 list[tuple[int, int, int]]]:
    """The tensors (contiguous copies when their leading dims do not collapse to two, a
    layout the kernels do not address), size1 and their strides for the kernels."""
    for t in tensors:
        if not t.is_contiguous():
            break
    else:  # the common case, kept short (host time)
        return tensors, 1, [(shape[-1], 0, 1)] * len(tensors)
    layout = row_layout(shape, *tensors)
    if layout is None:
        tensors = tuple(t.contiguous() for t in tensors)
        layout = row_layout(shape, *tensors)
    return tensors, *layout


@functools.lru_cache(maxsize=1024)
def fwd_plan(n_rows: int, n_cols: int, is_rms: bool, has_weight: bool, has_bias: bool,
             has_residual: bool) -> tuple[tuple[int], dict, int]:
    """(grid, constexprs, num_warps) of the forward launch, worked out once per shape and
    flags (the constexprs dict is shared by the launches: nothing may change it)."""
    block_m, block_n, one_chunk, num_warps = row_config(n_rows, n_cols, "fwd", is_rms)
    return ((cdiv(n_rows, block_m),), dict(BLOCK_M=block_m, BLOCK_N=block_n, ONE_CHUNK=one_chunk, IS_RMS=is_rms,
                                            HAS_WEIGHT=has_weight, HAS_BIAS=has_bias, HAS_RESIDUAL=has_residual),
            num_warps)


def _fwd_template(is_rms: bool, tail: tuple, inputs: tuple) -> LaunchTemplate:
    """The forward's template for a key's first call (inputs: x, residual, weight, bias;
    tail: (n_rows, n_cols, size1) first)."""
    grid, constexprs, num_warps = fwd_plan(*tail[0][:2], is_rms, inputs[2] is not None, inputs[3] is not None,
                                           inputs[1] is not None)
    return LaunchTemplate("rms_norm_fwd" if is_rms else "layer_norm_fwd", _norm_fwd_kernel, grid, tail,
                          constexprs, num_warps, 1)


@functools.lru_cache(maxsize=1024)
def bwd_plan(device: torch.device, n_rows: int, n_cols: int, is_rms: bool, has_weight: bool, has_bias: bool,
             has_dh: bool) -> tuple[int, int, dict, int]:
    """(programs, partial-sum rows per sum, constexprs, num_warps) of the backward launch,
    worked out once per device, shape and flags (the dict is shared, as in fwd_plan)."""
    block_m, block_n, one_chunk, num_warps = row_config(n_rows, n_cols, "bwd", is_rms)
    programs = backward_programs(device, cdiv(n_rows, block_m), num_warps)
    group, sum_cols = sum_plan(programs, n_cols, num_warps)
    return (programs, programs + cdiv(programs, group),
            dict(BLOCK_M=block_m, BLOCK_N=block_n, ONE_CHUNK=one_chunk, IS_RMS=is_rms, HAS_WEIGHT=has_weight,
                 HAS_BIAS=has_bias, HAS_DH=has_dh, GROUP=group, SUM_COLS=sum_cols),
            num_warps)


@functools.lru_cache(maxsize=1024)
def sum_plan(programs: int, n_cols: int, num_warps: int) -> tuple[int, int]:
    """(GROUP, SUM_COLS) for summing `programs` partial rows in two levels. GROUP, programs a
    group: the power of two (about sqrt(programs)) that leaves the last program to finish
    the fewest rows to sum (its group's, then the group rows), with at most MAX_COUNTERS - 1
    groups. Rows are summed in tiles of GROUP rows by SUM_COLS columns, SUM_PER_THREAD
    elements a thread (more would raise the kernel's registers past two programs an SM)."""
    group = min((1 << i for i in range(programs.bit_length() + 1) if cdiv(programs, 1 << i) < MAX_COUNTERS),
                key=lambda g: g + cdiv(programs, g))
    sum_cols = max(1, min(next_power_of_2(n_cols), SUM_PER_THREAD * 32 * num_warps // group))
    return group, sum_cols


# ---------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------

def check_eps(eps: object) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"eps must be a float, got {type(eps).__name__}")
    if not is_finite(eps) or eps < 0:
        raise ValueError(f"eps must be finite and >= 0, got {eps}")
    return float(eps)


def check_weight_offset(weight_offset: object, weight: torch.Tensor | None) -> float:
    if isinstance(weight_offset, bool) or not isinstance(weight_offset, (int, float)):
        raise TypeError(f"weight_offset must be a float, got {type(weight_offset).__name__}")
    if not is_finite(weight_offset):
        raise ValueError(f"weight_offset must be finite, got {weight_offset}")
    if weight is None and weight_offset != 0:
        raise ValueError("weight_offset scales (weight_offset + weight); it needs a weight (got weight=None)")
    return float(weight_offset)


def check_inputs(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor | None,
                 bias: torch.Tensor | None = None) -> None:
    """x: a float tensor of at least one dim; residual: x's shape and dtype; weight and
    bias: None or a float tensor of shape (hidden,) on x's device. (Runs on every forward
    call: plain comparisons, no per-call containers.)"""
    check_tensor("x", x)
    if x.dim() == 0:
        raise ValueError("x must have at least one dim (the normalised last dim); got a 0-d tensor")
    shape = x.shape
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        check_tensor(name, t)
        if t.device != x.device:
            check_same_device(x=x, **{name: t})  # raises, naming the argument
        if t.dim() != 1 or t.shape[0] != shape[-1]:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected ({shape[-1]},): x's last dim")
    if residual is not None:
        check_tensor("residual", residual)
        if residual.device != x.device:
            check_same_device(x=x, residual=residual)
        if residual.shape != shape:
            raise ValueError(f"residual has shape {tuple(residual.shape)} but x has {tuple(shape)}")
        if residual.dtype != x.dtype:
            raise TypeError(f"residual has dtype {dtype_name(residual.dtype)} but x has "
                            f"{dtype_name(x.dtype)}; h = x + residual is kept in x's dtype")


# ---------------------------------------------------------------------------------------
# Launchers shared by both norms
# ---------------------------------------------------------------------------------------

def norm_fwd(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
             residual: torch.Tensor | None, eps: float, weight_offset: float, is_rms: bool):
    """(y, h, mean, rstd): y in x's dtype (contiguous, x's shape); h = x + residual (None
    without residual); mean (None for RMSNorm) and rstd in float32, one per row, flat (the
    custom ops' launchers view them as x.shape[:-1]). Inputs already checked. Runs on every
    call: the common case (contiguous x) allocates only the outputs and does no layout work."""
    shape = x.shape
    n_cols = shape[-1]
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    h = torch.empty_like(y) if residual is not None else None
    n_rows = y.numel() // n_cols if n_cols else math.prod(shape[:-1])
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    mean = None if is_rms else torch.empty(n_rows, dtype=torch.float32, device=x.device)
    if n_rows == 0 or n_cols == 0:
        return y, h, mean, rstd
    (x, residual), size1, (x_strides, r_strides) = rows_of(shape, x, residual if h is not None else x)
    # A strided 1-D weight or bias is copied: (hidden,) elements, next to (rows, hidden).
    inputs = (x, residual if h is not None else None, weight.contiguous() if weight is not None else None,
              bias.contiguous() if bias is not None else None)
    tail = ((n_rows, n_cols, size1), x_strides, r_strides, eps, weight_offset)
    # y, h, mean and rstd are fresh, aligned, and of the dtypes and presence that x, the
    # residual and is_rms decide: the inputs' layouts key them.
    key = (is_rms, x.device, tail, math.copysign(1.0, weight_offset), head_layout(inputs))
    template(key, _fwd_template, is_rms, tail, inputs)(*inputs, y, h, mean, rstd)
    return y, h, mean, rstd


def norm_bwd(dy: torch.Tensor, dh: torch.Tensor | None, h: torch.Tensor, weight: torch.Tensor | None,
             bias: torch.Tensor | None, mean: torch.Tensor | None, rstd: torch.Tensor, weight_offset: float,
             is_rms: bool):
    """(dx, dW, dB): dx in h's dtype (contiguous; with a residual, also the residual's
    gradient), dW and dB in weight's and bias's dtypes (None where that tensor is None;
    bias is read for its dtype only). Inputs already checked. One launch; allocates dx, dW,
    dB and the partial sums."""
    n_cols = h.shape[-1]
    n_rows = rstd.numel()
    dx = torch.empty_like(h, memory_format=torch.contiguous_format)
    dw = torch.empty_like(weight, memory_format=torch.contiguous_format) if weight is not None else None
    db = torch.empty_like(bias, memory_format=torch.contiguous_format) if bias is not None else None
    n_sums = (weight is not None) + (bias is not None)
    if n_rows == 0 or n_cols == 0:
        for t in (dw, db):
            if t is not None:
                t.zero_()
        return dx, dw, db
    has_dh = dh is not None
    (dy, dh, h), size1, strides = rows_of(h.shape, dy, dh if has_dh else dy, h)
    programs, part_rows, constexprs, num_warps = bwd_plan(h.device, n_rows, n_cols, is_rms, weight is not None,
                                                          bias is not None, has_dh)
    # A row a program, then a row a group: every element written before it is read.
    partials = torch.empty((n_sums, part_rows, n_cols), dtype=torch.float32, device=h.device) if n_sums else None
    inputs = (dy, dh if has_dh else None, h, weight.contiguous() if weight is not None else None, mean, rstd)
    tail = ((n_rows, n_cols, size1), *strides, weight_offset)
    # dx, dW, dB and the partial sums are fresh and aligned, the counters too (zeroed once);
    # their dtypes and presence follow h's, weight's and bias's.
    key = (is_rms, h.device, programs, tail, math.copysign(1.0, weight_offset),
           bias.dtype if bias is not None else None, head_layout(inputs))
    template(key, LaunchTemplate, "rms_norm_bwd" if is_rms else "layer_norm_bwd", _norm_bwd_kernel, (programs,),
             tail, constexprs, num_warps, 1)(*inputs, dx, dw, db, partials,
                                             zeroed_counters(h.device) if n_sums else None)
    return dx, dw, db
