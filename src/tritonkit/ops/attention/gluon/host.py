"""The host side the Gluon attention kernels share: the warpgroup's rows, the register
budgets their partitions get, and the tensor descriptors they read and write through (the SM
count of their persistent grids and their tiles' order: `ops.attention.order`)."""

from __future__ import annotations

import dataclasses
import functools

import torch
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ..descriptors import tma_layout_ok
from ..score import Score

ROWS_PER_WARPGROUP = 64      # wgmma's M per warpgroup: 4 warps x 16 rows
# Registers per thread: 64K per SM over the consumer warpgroups' threads and the producer's
# warp, padded to a warpgroup by setmaxnreg: with two consumers (240 + 240 + 24) * 128 and with
# three (160 * 3 + 24) * 128, both 64,512 <= 65,536.
CONSUMER_REGS = 240
CONSUMER_REGS_OF_THREE = 160
PRODUCER_REGS = 24

GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}


def kernel_score(score: Score) -> Score:
    """The `Score` a Gluon kernel is compiled for (its SCORE): the Gluon kernels run only
    compiled for the GPU, where a softcap's tanh is always `tanh.approx.f32` (`score.Scores`),
    so that a Score differing in tanh_approx alone compiles the same kernel once."""
    return score._replace(tanh_approx=score.softcap > 0)


def consumer_regs(consumers: int) -> int:
    """Registers of each consumer warpgroup's threads (setmaxnreg) with this many consumers."""
    return {2: CONSUMER_REGS, 3: CONSUMER_REGS_OF_THREE}[consumers]


def descriptor(t: torch.Tensor, rows: int, cols: int | None = None) -> TensorDescriptor:
    """A descriptor of the whole (B, H, N, D) tensor read (or written) as (1, 1, rows, cols)
    boxes, cols = D unless given (a kernel that splits the head dim reads column boxes).

    Only for tensors the kernels' `refusal` accepted (TMA's layout: 16-byte aligned data and
    strides, unit innermost stride, no empty dim) or allocated like them. The descriptor's own
    constructor checks exactly that again, which costs microseconds of host time per descriptor
    and a backward makes eleven a call, so it is built without it where the class has the
    fields this module knows (`_FIELDS`; otherwise through the constructor)."""
    cols = t.shape[-1] if cols is None else cols
    block = [1, 1, rows, cols]
    layout = _box_layout(rows, cols, t.dtype)
    if not _UNCHECKED:
        return TensorDescriptor(t, list(t.shape), list(t.stride()), block, layout)
    made = _new(TensorDescriptor)
    made.__dict__.update(base=t, shape=list(t.shape), strides=list(t.stride()), block_shape=block, layout=layout,
                         padding="zero")
    return made


# The fields of Triton 3.6's Gluon descriptor, in order: the unchecked construction above sets
# them all, and is used only while the class has exactly these.
_FIELDS = ("base", "shape", "strides", "block_shape", "layout", "padding")
_UNCHECKED = tuple(f.name for f in dataclasses.fields(TensorDescriptor)) == _FIELDS
_new = object.__new__


@functools.lru_cache(maxsize=None)
def _box_layout(rows: int, head_dim: int, dtype: torch.dtype) -> gl.NVMMASharedLayout:
    # Made once per box: building a layout costs tens of microseconds of host time, and a
    # backward makes eleven descriptors a call.
    return gl.NVMMASharedLayout.get_default_for([1, 1, rows, head_dim], GL_DTYPES[dtype])


def tma_refusal(**tensors: torch.Tensor) -> str | None:
    """Why TMA cannot read one of these tensors in place (naming it), or None."""
    for name, t in tensors.items():
        if not tma_layout_ok(t):
            where = (f"its data starts {t.data_ptr() % 16} bytes past a 16-byte boundary" if t.data_ptr() % 16
                     else f"strides {tuple(t.stride())} are not TMA's (unit innermost, 16-byte multiples)")
            return f"{name} cannot be read by TMA in place: {where}"
    return None
