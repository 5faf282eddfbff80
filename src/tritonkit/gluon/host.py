"""The host side the Gluon attention kernels share: the warpgroup's rows, the register
budgets their partitions get, the tensor descriptors they read and write through, and the
SM count of their persistent grids."""

from __future__ import annotations

import dataclasses
import functools

import torch
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ..ops.attention.descriptors import tma_layout_ok

ROWS_PER_WARPGROUP = 64      # wgmma's M per warpgroup: 4 warps x 16 rows
# Registers per thread: 64K per SM over the consumer warpgroups' threads and the producer's
# warp, padded to a warpgroup by setmaxnreg: with two consumers (240 + 240 + 24) * 128 and with
# three (160 * 3 + 24) * 128, both 64,512 <= 65,536.
CONSUMER_REGS = 240
CONSUMER_REGS_OF_THREE = 160
PRODUCER_REGS = 24

GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}


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


# A dense causal pass hands out its tiles longest first within spans of this many heads
# (`longest_first_span`), where it has at most LONGEST_FIRST_MAX_TILES_PER_SM tiles an SM
# (BENCHMARKS.md has the orders and spans measured against each other).
LONGEST_FIRST_SPAN_HEADS = 8
LONGEST_FIRST_MAX_TILES_PER_SM = 32


def longest_first_span(causal: bool, window_left: int, varlen: bool, heads: int, blocks: int, sms: int) -> int:
    """The order a pass hands out its tiles: heads (batch x heads of the pass) of `blocks` tiles
    each, on sms SMs. 0 for head after head; otherwise the span of heads (a divisor of heads)
    within which every head's k-th longest tile goes before anyone's (k+1)-th, spans in turn
    (the kernels' LONGEST_FIRST and HEAD_SPAN, `common._ordered_tile`).

    Head after head, the programs running together walk the same head or two, so its K and V
    (the dQ pass's too; Q and dO in the dK/dV pass) are read from L2 by all of them. Under a
    causal mask that order also leaves the last head's longest tiles for the end of the grid,
    where they run with few SMs busy beside them: a tail of about one longest tile, some
    2 sms / (heads x blocks) of the pass. Longest first over every head removes the tail but
    spreads the programs in flight over as many heads as there are SMs, each read by about one
    program, whose K and V then come from HBM. Within spans of LONGEST_FIRST_SPAN_HEADS heads,
    a span's last tiles are its shortest and some sixteen programs read each head: the tail
    goes and the reuse stays. Taken under a causal mask without a window, up to
    LONGEST_FIRST_MAX_TILES_PER_SM tiles an SM, past which the tail is a few percent and long
    heads' K and V outgrow L2 across a span (measured slower at 42 and 124 tiles an SM). Full
    attention's and a window's tiles are of one length; packed sequences have their own order
    (heads together, `common._varlen_tile`)."""
    if not causal or window_left >= 0 or varlen or heads * blocks > LONGEST_FIRST_MAX_TILES_PER_SM * sms:
        return 0
    return max(d for d in range(1, min(heads, LONGEST_FIRST_SPAN_HEADS) + 1) if heads % d == 0)


@functools.lru_cache(maxsize=None)
def num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 132                      # compiling for sm_90 without a GPU: an H100/H200
    return torch.cuda.get_device_properties(device).multi_processor_count
