"""Rotary position embeddings of q and k, forward and backward, in one launch.

With R the rotary width (cos.shape[-1]) and each head's first R dims taken as pairs (x1, x2):

    y1 = x1 * cos1 - x2 * sin1          cos1, sin1: cos, sin at x1's positions
    y2 = x2 * cos2 + x1 * sin2          cos2, sin2: cos, sin at x2's positions
    y[R:] = x[R:]                       partial rotary passes the other dims through

Rotate-half (Hugging Face's apply_rotary_pos_emb): x1 = x[:R/2], x2 = x[R/2:R].
Interleaved (GPT-J, Meta): x1 = x[0:R:2], x2 = x[1:R:2].
That is y = x * cos + rotate(x) * sin with rotate(x) = (-x2, x1) in place, for any cos and sin.
Backward, the transpose of that map: dx1 = dy1 * cos1 + dy2 * sin2, dx2 = dy2 * cos2 - dy1 * sin1,
the same arithmetic with (sin1, sin2) replaced by (-sin2, -sin1) (the BACKWARD flag).

A program takes a block of BLOCK_S positions (b, n), loads their cos and sin once, and
rotates every head of q and then of k at those positions in [BLOCK_S, BLOCK_H, R/2] tiles;
on a persistent grid it then takes the blocks P, 2P, ... after its own. A tile's last dim is
a head's dims, contiguous in memory, so Hugging Face's layout (q a (B, N, H, D) projection
transposed to (B, H, N, D)), packed qkv and plain (B, H, N, D) tensors are all read in runs
of whole heads. Arithmetic is float32. The tiling (`RopeTile`) is a launcher argument;
`default_tile` gives the rule the op uses.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .._checks import check_meta, check_tensor, dtype_name, meta_of
from .._launch import LaunchTemplate
from .._layout import cdiv, next_power_of_2
from .._op import Op
from .._sharding import Replicate, Shard, even, only_shard
from .._templates import Templates, head_layout
from .attention import _empty_like_order

# Elements of q a program rotates (the heads at its positions): 8192 keeps enough of q and k in
# flight a program for 4 warps to run near the copy rate (BENCHMARKS.md has the tile sweep).
TILE_ELEMENTS = 8192


@triton.jit
def _rope_heads(
    x_ptr, o_ptr, pos_x, pos_o, pos_ok, c1, c2, s1, s2,
    n_heads, head_dim, half, xs_h, xs_d, os_h, os_d,
    BLOCK_S: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_PASS: tl.constexpr,
    INTERLEAVED: tl.constexpr, HAS_PASS: tl.constexpr,
):
    # Every head of one tensor at the program's positions, BLOCK_H heads at a time.
    # pos_x, pos_o: [BLOCK_S] element offsets of each position in x and out; c1..s2: [BLOCK_S, 1, BLOCK_HALF].
    for h0 in range(0, n_heads, BLOCK_H):
        h = h0 + tl.arange(0, BLOCK_H)
        row_ok = pos_ok[:, None, None] & (h < n_heads)[None, :, None]
        x_row = pos_x[:, None, None] + h[None, :, None] * xs_h
        o_row = pos_o[:, None, None] + h[None, :, None] * os_h
        if INTERLEAVED:
            d = tl.arange(0, 2 * BLOCK_HALF)[None, None, :]
            mask = row_ok & (d < 2 * half)
            x = tl.load(x_ptr + x_row + d * xs_d, mask=mask, other=0.0).to(tl.float32)
            x1, x2 = tl.split(tl.reshape(x, (BLOCK_S, BLOCK_H, BLOCK_HALF, 2)))
        else:
            d = tl.arange(0, BLOCK_HALF)[None, None, :]
            mask = row_ok & (d < half)
            x1 = tl.load(x_ptr + x_row + d * xs_d, mask=mask, other=0.0).to(tl.float32)
            x2 = tl.load(x_ptr + x_row + (d + half) * xs_d, mask=mask, other=0.0).to(tl.float32)
        y1 = (x1 * c1 - x2 * s1).to(o_ptr.dtype.element_ty)
        y2 = (x2 * c2 + x1 * s2).to(o_ptr.dtype.element_ty)
        if INTERLEAVED:
            tl.store(o_ptr + o_row + d * os_d, tl.reshape(tl.join(y1, y2), (BLOCK_S, BLOCK_H, 2 * BLOCK_HALF)),
                     mask=mask)
        else:
            tl.store(o_ptr + o_row + d * os_d, y1, mask=mask)
            tl.store(o_ptr + o_row + (d + half) * os_d, y2, mask=mask)
        if HAS_PASS:  # partial rotary: dims R..D are copied
            p = 2 * half + tl.arange(0, BLOCK_PASS)[None, None, :]
            pass_mask = row_ok & (p < head_dim)
            tl.store(o_ptr + o_row + p * os_d, tl.load(x_ptr + x_row + p * xs_d, mask=pass_mask, other=0.0),
                     mask=pass_mask)


@triton.jit
def _cos_sin(ptr, pos_off, pos_ok, half, r_stride, BLOCK_S: tl.constexpr, BLOCK_HALF: tl.constexpr,
             INTERLEAVED: tl.constexpr):
    """(values at x1's dims, values at x2's dims) of cos or sin, [BLOCK_S, BLOCK_HALF] in its dtype."""
    if INTERLEAVED:
        r = tl.arange(0, 2 * BLOCK_HALF)[None, :]
        mask = pos_ok[:, None] & (r < 2 * half)
        v = tl.load(ptr + pos_off[:, None] + r * r_stride, mask=mask, other=0.0)
        v1, v2 = tl.split(tl.reshape(v, (BLOCK_S, BLOCK_HALF, 2)))
    else:
        r = tl.arange(0, BLOCK_HALF)[None, :]
        mask = pos_ok[:, None] & (r < half)
        v1 = tl.load(ptr + pos_off[:, None] + r * r_stride, mask=mask, other=0.0)
        v2 = tl.load(ptr + pos_off[:, None] + (r + half) * r_stride, mask=mask, other=0.0)
    return v1, v2


@triton.jit
def _cos_sin_rows(cos_ptr, sin_ptr, cos_off, sin_off, pos_ok, half, cs_r, ss_r, BLOCK_S: tl.constexpr,
                  BLOCK_HALF: tl.constexpr, INTERLEAVED: tl.constexpr):
    """c1, c2, s1, s2 of the block's positions: [BLOCK_S, 1, BLOCK_HALF] float32, broadcast over heads."""
    c1, c2 = _cos_sin(cos_ptr, cos_off, pos_ok, half, cs_r, BLOCK_S, BLOCK_HALF, INTERLEAVED)
    s1, s2 = _cos_sin(sin_ptr, sin_off, pos_ok, half, ss_r, BLOCK_S, BLOCK_HALF, INTERLEAVED)
    if c1.dtype != s1.dtype:  # tl.join takes one dtype
        c1, c2, s1, s2 = c1.to(tl.float32), c2.to(tl.float32), s1.to(tl.float32), s2.to(tl.float32)
    # The loads' layout spreads a row over all threads; the tiles' gives each thread the dims
    # of its heads, so the rows change layout, through shared memory where the tile's warps
    # hold different heads. Stacked into one tensor first, all four loads are issued before
    # the first change; changed one at a time, each change waited for its own load in turn
    # (four round trips to memory at the start of every block instead of one). Changed in
    # the inputs' dtype: half the shared-memory traffic of float32 for 16-bit tables.
    v = tl.expand_dims(tl.join(tl.join(c1, c2), tl.join(s1, s2)), 1)
    c, s = tl.split(v)
    c1, c2 = tl.split(c)
    s1, s2 = tl.split(s)
    return c1.to(tl.float32), c2.to(tl.float32), s1.to(tl.float32), s2.to(tl.float32)


@triton.jit
def _rope_kernel(
    # pointers: q and k in, their rotations out; cos, sin (B, N, R), broadcast dims at stride 0
    q_ptr, k_ptr, qo_ptr, ko_ptr, cos_ptr, sin_ptr,
    # shape: positions B * N, N, heads of q and k, head dim D, R / 2
    n_pos, seq, n_q_heads, n_k_heads, head_dim, half,
    # strides in elements: (b, n, h, d) of q, k, q out, k out; (b, n, r) of cos, sin
    q_strides, k_strides, qo_strides, ko_strides, cos_strides, sin_strides,
    # meta
    BLOCK_S: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr,
    BLOCK_PASS: tl.constexpr, INTERLEAVED: tl.constexpr, HAS_PASS: tl.constexpr, BACKWARD: tl.constexpr,
):
    # Program p takes position blocks p, p + P, p + 2P, ... (P programs; one block each unless
    # the launcher chose a persistent grid). Positions count in n_pos's integer type, int32
    # unless B * N passes 2**31 (the loop variable takes the widest of its bounds' types), so
    # the division by N is 32-bit; element offsets are int64: q may hold more than 2**31 elements.
    qs_b, qs_n, qs_h, qs_d = q_strides
    ks_b, ks_n, ks_h, ks_d = k_strides
    qos_b, qos_n, qos_h, qos_d = qo_strides
    kos_b, kos_n, kos_h, kos_d = ko_strides
    cs_b, cs_n, cs_r = cos_strides
    ss_b, ss_n, ss_r = sin_strides
    for block in range(tl.program_id(0), tl.cdiv(n_pos, BLOCK_S), tl.num_programs(0)):
        pos = block * BLOCK_S + tl.arange(0, BLOCK_S)
        pos_ok = pos < n_pos
        b = (pos // seq).to(tl.int64)
        n = (pos % seq).to(tl.int64)
        c1, c2, s1, s2 = _cos_sin_rows(cos_ptr, sin_ptr, b * cs_b + n * cs_n, b * ss_b + n * ss_n, pos_ok, half,
                                       cs_r, ss_r, BLOCK_S, BLOCK_HALF, INTERLEAVED)
        if BACKWARD:  # the transpose of the rotation (see the module docstring)
            s1, s2 = -s2, -s1
        _rope_heads(q_ptr, qo_ptr, b * qs_b + n * qs_n, b * qos_b + n * qos_n, pos_ok, c1, c2, s1, s2,
                    n_q_heads, head_dim, half, qs_h, qs_d, qos_h, qos_d,
                    BLOCK_S, BLOCK_H, BLOCK_HALF, BLOCK_PASS, INTERLEAVED, HAS_PASS)
        _rope_heads(k_ptr, ko_ptr, b * ks_b + n * ks_n, b * kos_b + n * kos_n, pos_ok, c1, c2, s1, s2,
                    n_k_heads, head_dim, half, ks_h, ks_d, kos_h, kos_d,
                    BLOCK_S, BLOCK_H, BLOCK_HALF, BLOCK_PASS, INTERLEAVED, HAS_PASS)


@dataclass(frozen=True)
class RopeTile:
    """How a launch tiles the work: blocks of `positions` positions, each tensor's heads in
    tiles of `heads` ([positions, heads, R/2] elements a half), `num_warps` warps a program,
    and `programs_per_sm` programs an SM for a persistent grid (0: one program a block).
    positions, heads and num_warps are powers of two."""
    positions: int
    heads: int
    num_warps: int = 4
    programs_per_sm: int = 0

    def check(self) -> None:
        for name in ("positions", "heads", "num_warps", "programs_per_sm"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"tile.{name} must be an int, got {type(value).__name__}")
        for name, value in (("positions", self.positions), ("heads", self.heads), ("num_warps", self.num_warps)):
            if value < 1 or value & (value - 1):
                raise ValueError(f"tile.{name} must be a power of two, got {value}")
        if self.num_warps > 32:
            raise ValueError(f"tile.num_warps must be at most 32, got {self.num_warps}")
        if self.programs_per_sm < 0:
            raise ValueError(f"tile.programs_per_sm must be >= 0, got {self.programs_per_sm}")


@functools.lru_cache(maxsize=1024)
def default_tile(n_pos: int, q_heads: int, k_heads: int, rot: int) -> RopeTile:
    """The op's tiling: q and k both in tiles of as many heads as k has (at most
    TILE_ELEMENTS's worth), positions stacked until a tile holds TILE_ELEMENTS, 4 warps, one
    program a block. One head count for both keeps k's tiles as large as q's: with GQA's few
    k heads in a tile of one position, a thread would load k in 64-bit pieces instead of
    128-bit ones."""
    per_head = 2 * next_power_of_2(rot // 2)
    block_h = min(next_power_of_2(q_heads), next_power_of_2(k_heads), max(1, TILE_ELEMENTS // per_head))
    block_s = min(next_power_of_2(n_pos), max(1, TILE_ELEMENTS // (per_head * block_h)))
    return RopeTile(positions=block_s, heads=block_h)


@functools.lru_cache(maxsize=16)
def _sm_count(device: torch.device) -> int:
    """The GPU's SMs, for a persistent grid; 1 under the interpreter, so that each of a
    persistent grid's few programs walks several blocks there too."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


Meta = tuple  # (shape, strides, dtype, device) of one tensor: meta_of(t)


def _cos_sin_strides(name: str, shape: tuple[int, ...], stride: tuple[int, ...], batch: int,
                     seq: int) -> tuple[int, int, int]:
    """Strides (b, n, r) of cos or sin viewed as (batch, seq, R), size-1 dims broadcast at
    stride 0 (the strides `.expand` gives). Taken: (N, R), (B or 1, N, R) (Hugging Face's
    rotary embedding output) and (B or 1, 1, N, R) (that unsqueezed at dim 1, as
    apply_rotary_pos_emb does), N may be 1."""
    if len(shape) == 4:
        if shape[1] != 1:
            raise ValueError(f"{name} has shape {tuple(shape)}; a 4-dim {name} must be (B, 1, N, R)")
        shape, stride = (shape[0], shape[2], shape[3]), (stride[0], stride[2], stride[3])
    elif len(shape) == 2:
        shape, stride = (1, *shape), (shape[0] * stride[0], *stride)  # as unsqueeze(0) strides it
    elif len(shape) != 3:
        raise ValueError(f"{name} has shape {tuple(shape)}; expected (N, R), (B, N, R) or (B, 1, N, R)")
    if shape[0] not in (1, batch) or shape[1] not in (1, seq):
        raise ValueError(f"{name} has shape {tuple(shape)}, which does not broadcast to q's batch {batch} "
                         f"and sequence {seq}")
    return (0 if shape[0] != batch else stride[0], 0 if shape[1] != seq else stride[1], stride[2])


def _cos_sin_3d(name: str, t: torch.Tensor, batch: int, seq: int) -> torch.Tensor:
    """cos or sin as a (batch, seq, R) view (see _cos_sin_strides)."""
    strides = _cos_sin_strides(name, tuple(t.shape), t.stride(), batch, seq)
    return t.as_strided((batch, seq, t.shape[-1]), strides)


def _validate(q: Meta, k: Meta, cos: Meta, sin: Meta, interleaved: object) -> None:
    """Raise for arguments rope refuses, from their metadata alone (SymInts too, while tracing)."""
    for name, (_, _, dtype, device) in (("q", q), ("k", k), ("cos", cos), ("sin", sin)):
        check_meta(name, dtype, device)
        if device != q[3]:
            raise ValueError(f"{name} is on {device} but q is on {q[3]}")
    if not isinstance(interleaved, bool):
        raise TypeError(f"interleaved must be a bool, got {type(interleaved).__name__}")
    q_shape, k_shape = q[0], k[0]
    if len(q_shape) != 4:
        raise ValueError(f"q has shape {tuple(q_shape)}; expected (B, H, N, D)")
    if len(k_shape) != 4 or (k_shape[0], k_shape[2], k_shape[3]) != (q_shape[0], q_shape[2], q_shape[3]):
        raise ValueError(f"k has shape {tuple(k_shape)}; expected (B, Hkv, N, D) with q's B, N, D "
                         f"{tuple(q_shape)}")
    if k[2] != q[2]:
        raise TypeError(f"k has dtype {dtype_name(k[2])} but q has {dtype_name(q[2])}; they must match")
    if sin[0] != cos[0]:
        raise ValueError(f"sin has shape {tuple(sin[0])} but cos has {tuple(cos[0])}; they must match")
    batch, _, seq, head_dim = q_shape
    for name, (shape, stride, _, _) in (("cos", cos), ("sin", sin)):
        _cos_sin_strides(name, shape, stride, batch, seq)
    rot = cos[0][-1]
    if rot % 2 or rot == 0 or rot > head_dim:
        raise ValueError(f"cos has last dim {rot}, the rotary width R: it must be even, positive and at most "
                         f"the head dim {head_dim}")


def _dense_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides torch.empty gives a tensor of this shape."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _out_strides(shape: tuple[int, ...], stride: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of attention's _empty_like_order for an input of this shape and strides
    (the fakes use that function itself)."""
    batch, heads, seq, head_dim = shape
    if heads > 1 and seq > 1 and stride[1] < stride[2]:
        return _bnhd(_dense_strides((batch, seq, heads, head_dim)))
    return _dense_strides(shape)


def _bnhd(s: tuple[int, ...]) -> tuple[int, int, int, int]:
    """Strides in the kernel's (b, n, h, d) order of a (B, H, N, D) tensor (and back)."""
    return s[0], s[2], s[1], s[3]


@functools.lru_cache(maxsize=1024)
def _plan(q_shape, q_stride, k_shape, k_stride, cos_shape, cos_stride, sin_shape, sin_stride,
          interleaved: bool, backward: bool, tile: RopeTile | None, device: torch.device) -> tuple:
    """Everything a call does besides allocating and launching, worked out once per layout
    and tile (None: `default_tile`): (q out strides, k out strides, grid or None when there
    is nothing to rotate, the kernel's integer arguments, its constexprs, num_warps, the
    layout's launch templates by its tensors' dtypes and alignment). Arguments already
    validated."""
    batch, q_heads, seq, head_dim = q_shape
    k_heads, rot = k_shape[1], cos_shape[-1]
    n_pos = batch * seq
    qo_stride, ko_stride = _out_strides(q_shape, q_stride), _out_strides(k_shape, k_stride)
    if not (n_pos and (q_heads or k_heads) and head_dim):
        return qo_stride, ko_stride, None, (), {}, 4, None
    tile = tile or default_tile(n_pos, q_heads, k_heads, rot)
    n_blocks = cdiv(n_pos, tile.positions)
    programs = min(n_blocks, tile.programs_per_sm * _sm_count(device)) if tile.programs_per_sm else n_blocks
    ints = (n_pos, seq, q_heads, k_heads, head_dim, rot // 2,
            _bnhd(q_stride), _bnhd(k_stride), _bnhd(qo_stride), _bnhd(ko_stride),
            _cos_sin_strides("cos", cos_shape, cos_stride, batch, seq),
            _cos_sin_strides("sin", sin_shape, sin_stride, batch, seq))
    constexprs = dict(BLOCK_S=tile.positions, BLOCK_H=tile.heads, BLOCK_HALF=next_power_of_2(rot // 2),
                      BLOCK_PASS=next_power_of_2(max(1, head_dim - rot)), INTERLEAVED=interleaved,
                      HAS_PASS=rot < head_dim, BACKWARD=backward)
    return qo_stride, ko_stride, (programs,), ints, constexprs, tile.num_warps, Templates(64)


@functools.lru_cache(maxsize=1024)
def _checked_plan(q: Meta, k: Meta, cos: Meta, sin: Meta, interleaved: bool, backward: bool,
                  tile: RopeTile | None) -> tuple:
    """_plan after _validate: a layout, dtype, device and tile validated once is not validated again."""
    _validate(q, k, cos, sin, interleaved)
    if tile is not None:
        tile.check()
    return _plan(q[0], q[1], k[0], k[1], cos[0], cos[1], sin[0], sin[1], interleaved, backward, tile, q[3])


def _check_tensors(*named: tuple[str, object]) -> None:
    for name, t in named:
        check_tensor(name, t)


def _rotate(q, k, cos, sin, plan: tuple, backward: bool) -> tuple[torch.Tensor, torch.Tensor]:
    qo_stride, ko_stride, grid, ints, constexprs, num_warps, templates = plan
    qo = torch.empty_strided(q.shape, qo_stride, dtype=q.dtype, device=q.device)
    ko = torch.empty_strided(k.shape, ko_stride, dtype=k.dtype, device=k.device)
    if grid is not None:
        # cos and sin themselves: their (B, N, R) views start at the same element. The plan
        # holds the shapes, strides and device; the key the rest a compiled launch depends on
        # (qo and ko are fresh: aligned, of q's and k's dtypes).
        head = (q, k, qo, ko, cos, sin)
        templates.get(head_layout((q, k, cos, sin)), LaunchTemplate, "rope_bwd" if backward else "rope_fwd",
                      _rope_kernel, grid, ints, constexprs, num_warps, 1)(*head)
    return qo, ko


def _rotate_validated(q, k, cos, sin, interleaved, backward: bool,
                      tile: RopeTile | None) -> tuple[torch.Tensor, torch.Tensor]:
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(cos, torch.Tensor)
            and isinstance(sin, torch.Tensor)):
        _check_tensors(("q", q), ("k", k), ("cos", cos), ("sin", sin))
    if type(interleaved) is not bool:  # raises; not in the cache, where 1 == True would share a key
        _validate(meta_of(q), meta_of(k), meta_of(cos), meta_of(sin), interleaved)
    if tile is not None and type(tile) is not RopeTile:
        raise TypeError(f"tile must be a RopeTile or None, got {type(tile).__name__}")
    plan = _checked_plan(meta_of(q), meta_of(k), meta_of(cos), meta_of(sin), interleaved, backward, tile)
    return _rotate(q, k, cos, sin, plan, backward)


def rope_fwd(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
             interleaved: bool, tile: RopeTile | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Launcher for the forward pass: (q rotated, k rotated), each dense in its input's layout
    ((B, N, H, D) in memory where the input's head stride is below its sequence stride).
    tile: the kernel's tiling; None takes `default_tile`'s."""
    return _rotate_validated(q, k, cos, sin, interleaved, False, tile)


def rope_bwd(grad_q: torch.Tensor, grad_k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
             interleaved: bool, tile: RopeTile | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Launcher for the backward pass: (dq, dk) from the gradients of the rotated q and k;
    tile as for rope_fwd."""
    return _rotate_validated(grad_q, grad_k, cos, sin, interleaved, True, tile)


def _rope_bwd_checked(grad_q, grad_k, cos, sin, interleaved):
    """rope_bwd for the eager backward, without validation: cos and sin passed the forward's,
    and autograd hands gradients of the outputs' shapes, dtype and device."""
    plan = _plan(grad_q.shape, grad_q.stride(), grad_k.shape, grad_k.stride(), cos.shape, cos.stride(),
                 sin.shape, sin.stride(), interleaved, True, None, grad_q.device)
    return _rotate(grad_q, grad_k, cos, sin, plan, backward=True)


def rope_reference(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   interleaved: bool = False, upcast: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face's apply_rotary_pos_emb (rotate_half), or GPT-J's rotate_every_two with
    interleaved=True, with partial rotary (the first cos.shape[-1] dims), in float64 (upcast)
    or in the inputs' dtype; cos and sin of any shape rope takes."""
    batch, _, seq, _ = q.shape
    cos, sin = (_cos_sin_3d(name, t, batch, seq).unsqueeze(1) for name, t in (("cos", cos), ("sin", sin)))
    if upcast:
        q, k, cos, sin = q.double(), k.double(), cos.double(), sin.double()
    rot = cos.shape[-1]

    def rotate(x):
        x_rot, x_pass = x[..., :rot], x[..., rot:]
        if interleaved:
            rotated = torch.stack((-x_rot[..., 1::2], x_rot[..., 0::2]), dim=-1).flatten(-2)
        else:
            rotated = torch.cat((-x_rot[..., rot // 2:], x_rot[..., :rot // 2]), dim=-1)
        return torch.cat((x_rot * cos + rotated * sin, x_pass), dim=-1)

    return rotate(q), rotate(k)


def _rope_fake(q, k, cos, sin, interleaved):
    return _empty_like_order(q, tuple(q.shape), q.dtype), _empty_like_order(k, tuple(k.shape), k.dtype)


def _setup_context(ctx, inputs, output):
    q, k, cos, sin, interleaved = inputs
    ctx.save_for_backward(cos, sin)
    ctx.interleaved = interleaved
    ctx.outputs = [(tuple(t.shape), t.dtype, t.device) for t in (q, k)]


def _backward(bwd, ctx, grad_q, grad_k):
    # cos and sin get no gradient (rope refuses ones that require it).
    cos, sin = ctx.saved_tensors
    if grad_q is None or grad_k is None:
        grad_q, grad_k = (torch.zeros(shape, dtype=dtype, device=device) if g is None else g
                          for g, (shape, dtype, device) in zip((grad_q, grad_k), ctx.outputs))
    dq, dk = bwd(grad_q, grad_k, cos, sin, ctx.interleaved)
    return dq, dk, None, None, None


def _check_args(q, k, cos, sin, interleaved):
    _check_tensors(("q", q), ("k", k), ("cos", cos), ("sin", sin))
    _validate(meta_of(q), meta_of(k), meta_of(cos), meta_of(sin), interleaved)
    return q, k, cos, sin, interleaved


def _sharding(op: str, names: tuple[str, str], q, k, cos, sin, interleaved):
    """DTensor may shard the batch, the heads (q by H, k by Hkv) and the positions, never the
    head dim: rope rotates pairs within one head. cos and sin follow a batch or position
    sharding where they have that dim, else stay replicated. The backward's grad_q and
    grad_k stand where the forward's q and k do (`names`)."""
    why = "rope rotates pairs inside each head's D dims, which must stay whole"
    for name, spec in zip(names, (q, k)):
        only_shard(op, name, spec, (0, 1, 2), why)
        even(op, name, spec, 1, "heads")
    only_shard(op, "cos", cos, range(cos.ndim - 1), why)
    strategies = [([Replicate()] * 2, [Replicate()] * 4 + [None]),
                  ([Shard(1)] * 2, [Shard(1), Shard(1), Replicate(), Replicate(), None])]
    for d in (0, 2):  # batch; positions
        # cos is (N, R), (B, N, R) or (B, 1, N, R); a dim of size 1 broadcasts.
        own = {2: {2: 0, 3: 1, 4: 2}, 0: {3: 0, 4: 0}}[d].get(cos.ndim)
        c = Replicate() if own is None or cos.shape[own] == 1 else Shard(own)
        strategies.append(([Shard(d)] * 2, [Shard(d), Shard(d), c, c, None]))
    return strategies


_ROPE = Op(
    "rope", forward=rope_fwd,
    forward_schema="(Tensor q, Tensor k, Tensor cos, Tensor sin, bool interleaved) -> (Tensor, Tensor)",
    forward_fake=_rope_fake, setup_context=_setup_context, backward=_backward,
    backward_launcher=rope_bwd,
    backward_schema="(Tensor grad_q, Tensor grad_k, Tensor cos, Tensor sin, bool interleaved) -> (Tensor, Tensor)",
    backward_fake=_rope_fake, eager_backward_launcher=_rope_bwd_checked, check=_check_args,
    forward_sharding=functools.partial(_sharding, "rope", ("q", "k")),
    backward_sharding=functools.partial(_sharding, "rope backward", ("grad_q", "grad_k")))


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *,
         interleaved: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embeddings of q and k: ``(q * cos + rotate(q) * sin, k * cos + rotate(k) * sin)``
    over the first R = cos.shape[-1] dims of each head, the other D - R passed through (partial
    rotary, as in Phi and GPT-NeoX). Differentiable in q and k.

    interleaved=False: Hugging Face's ``apply_rotary_pos_emb``, rotate(x) = cat(-x[R/2:R], x[:R/2]).
    interleaved=True: GPT-J's and Meta's pairs, rotate(x)[2i] = -x[2i+1], rotate(x)[2i+1] = x[2i];
    cos and sin then hold each pair's value twice (Meta's ``freqs_cis`` as
    ``freqs_cis.real.repeat_interleave(2, -1)`` and ``.imag``).

    q: (B, H, N, D); k: (B, Hkv, N, D), any Hkv (grouped-query attention); float32, float16 or
    bfloat16, one dtype; any strides and view offset (views of one packed qkv projection too).
    cos, sin: one shape, any float dtype, R even and at most D, taken as (N, R), (B, N, R)
    (the output of a Hugging Face rotary embedding) or (B, 1, N, R) (that unsqueezed at dim 1),
    B and N each either the full size or 1. Returns two new tensors in q's and k's dtype, each
    dense in its input's layout: (B, N, H, D) in memory when the input's head stride is below
    its sequence stride (Hugging Face's transposed projection), else (B, H, N, D). Arithmetic in
    float32, one launch for both tensors.

    cos and sin get no gradient: ValueError if either requires one while grad is enabled
    (Hugging Face's never do; detach them). TypeError for other dtypes or q and k of two
    dtypes; ValueError for shapes that do not match, R odd or above D.
    """
    if torch.is_grad_enabled() and (isinstance(cos, torch.Tensor) and cos.requires_grad
                                    or isinstance(sin, torch.Tensor) and sin.requires_grad):
        raise ValueError("cos or sin requires grad, but rope gives no gradient for them; pass them detached")
    return _ROPE(q, k, cos, sin, interleaved)
