"""Gated activations of a transformer MLP: SwiGLU and GeGLU, forward and backward.

Forward:   out = act(gate) * up
Backward:  dup = dout * act(gate),   dgate = dout * up * act'(gate)

act is SiLU (swiglu: g * sigmoid(g)) or GELU (geglu: tanh approximation or exact erf).
`gate` and `up` are two tensors of one shape, or one tensor whose last dim holds
[gate, up] (the output of a fused gate-up projection), split into two views without a
copy; its gradient is then one tensor of the same packed shape.

One elementwise kernel serves every activation and both passes (constexpr flags). It
walks rows x columns: the tensors' dims are collapsed into up to three row dims and one
column dim (contiguous inputs become a single run), each program a BLOCK_M x BLOCK_N
tile. The column stride is passed as an int, which Triton specialises to the constant 1
when it is 1, so contiguous columns at 16-byte-aligned rows get 16-byte vector accesses.
Arithmetic is float32. The backward recomputes act(gate) rather than saving it.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from .._checks import check_choice, check_meta, check_same_device, check_tensor, dtype_name, meta_of
from .._launch import LaunchTemplate
from .._layout import cdiv, collapse_dims, next_power_of_2, pad_front
from .._op import Op
from .._runtime import INTERPRETED
from .._sharding import Replicate, Shard, maybe, only_shard
from .._templates import Templates, head_layout

SILU, GELU_TANH, GELU_ERF = 0, 1, 2
_ACTIVATIONS = {"silu": SILU, "gelu_tanh": GELU_TANH, "gelu": GELU_ERF}
_APPROXIMATE = {"tanh": "gelu_tanh", "none": "gelu"}
TILE_ELEMENTS = 2048  # elements of each tensor a program moves: 16 a thread at 4 warps
ROW_DIMS = 3          # collapsed dims that index rows inside the kernel


@triton.jit
def _exp(x, PRECISE: tl.constexpr):
    # PRECISE: CUDA's expf, the one torch's kernels call; otherwise ex2.approx (a few ulp).
    if PRECISE:
        return libdevice.exp(x)
    else:
        return tl.exp(x)


@triton.jit
def _activation(g, ACTIVATION: tl.constexpr, PRECISE: tl.constexpr):
    """act(g) in float32. PRECISE (float32 inputs on the GPU) evaluates torch's own expressions
    with CUDA's correctly rounded division and libm functions, so that swiglu's float32 forward
    gives torch's bits; otherwise the cheaper forms, whose error (a few float32 ulp) vanishes
    in the 16-bit rounding of the result."""
    if ACTIVATION == 0:  # SiLU: g / (1 + exp(-g))
        if PRECISE:
            a = tl.div_rn(g, 1.0 + _exp(-g, PRECISE))
        else:
            a = g * tl.sigmoid(g)
    elif ACTIVATION == 1:  # GELU, tanh: 0.5 g (1 + tanh(u)), u = sqrt(2/pi) (g + 0.044715 g^3)
        u = 0.7978845608028654 * (g + 0.044715 * (g * g * g))
        if PRECISE:
            a = (0.5 * g) * (1.0 + libdevice.tanh(u))
        else:
            a = g * tl.sigmoid(2.0 * u)  # 1 + tanh(u) = 2 sigmoid(2u): no cancellation
    else:  # GELU, erf: 0.5 g (1 + erf(g / sqrt(2)))
        a = (g * 0.5) * (1.0 + tl.erf(g * 0.7071067811865476))
    return a


@triton.jit
def _activation_and_slope(g, ACTIVATION: tl.constexpr):
    """(act(g), act'(g)) in float32, for the backward.
    SiLU:       s = sigmoid(g);  act = g s;  act' = s + act (1 - s)
    GELU tanh:  s = sigmoid(2u) = (1 + tanh u) / 2;  act = g s;
                act' = s + 2 g s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 g^2)
    GELU erf:   act = 0.5 g (1 + erf(g / sqrt 2));  act' = 0.5 (1 + erf(g / sqrt 2)) + g exp(-g^2/2) / sqrt(2 pi)"""
    if ACTIVATION == 0:
        s = tl.sigmoid(g)
        a = g * s
        slope = s + a * (1.0 - s)
    elif ACTIVATION == 1:
        g2 = g * g
        s = tl.sigmoid(2.0 * (0.7978845608028654 * (g + 0.044715 * (g2 * g))))
        a = g * s
        slope = s + 2.0 * a * (1.0 - s) * (0.7978845608028654 * (1.0 + 3.0 * 0.044715 * g2))
    else:
        cdf = 0.5 * (1.0 + tl.erf(g * 0.7071067811865476))
        a = g * cdf
        slope = cdf + g * (0.3989422804014327 * tl.exp(-0.5 * (g * g)))
    return a, slope


@triton.jit
def _load(ptrs, mask, MASKED: tl.constexpr):
    if MASKED:
        return tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    else:
        return tl.load(ptrs).to(tl.float32)


@triton.jit
def _store(ptrs, value, mask, MASKED: tl.constexpr):
    if MASKED:
        tl.store(ptrs, value.to(ptrs.dtype.element_ty), mask=mask)
    else:
        tl.store(ptrs, value.to(ptrs.dtype.element_ty))


@triton.jit
def _gated_tile(gate_ptr, up_ptr, dout_ptr, out_ptr, dup_ptr, h_ptr, g_off, u_off, d_off, o_off, p_off, h_off,
                mask, MASKED: tl.constexpr, ACTIVATION: tl.constexpr, PRECISE: tl.constexpr,
                BACKWARD: tl.constexpr, STORE_H: tl.constexpr):
    g = _load(gate_ptr + g_off, mask, MASKED)
    up = _load(up_ptr + u_off, mask, MASKED)
    if BACKWARD:
        dout = _load(dout_ptr + d_off, mask, MASKED)
        a, slope = _activation_and_slope(g, ACTIVATION)
        _store(out_ptr + o_off, dout * up * slope, mask, MASKED)  # dgate
        _store(dup_ptr + p_off, dout * a, mask, MASKED)
        if STORE_H:
            # The forward's expression, so h has the forward's bits; stored after dout was
            # loaded at the same offsets, so h may be written over dout (gated_linear does).
            _store(h_ptr + h_off, _activation(g, ACTIVATION, PRECISE) * up, mask, MASKED)
    else:
        _store(out_ptr + o_off, _activation(g, ACTIVATION, PRECISE) * up, mask, MASKED)


@triton.jit
def _tile_offsets(i0, i1, i2, cols, strides):
    """Element offsets of a [rows, columns] tile: row indices i0..i2 over the 3 row dims,
    strides (s0, s1, s2, column)."""
    s0, s1, s2, col = strides
    return (i0 * s0 + i1 * s1 + i2 * s2)[:, None] + cols * col


@triton.jit
def _gated_kernel(
    # pointers: forward reads gate, up and writes out; backward reads gate, up, dout and
    # writes dgate (through out_ptr) and dup, and with STORE_H also h = act(gate) * up (the
    # forward's output, for a product that follows; h_ptr and its strides None otherwise)
    gate_ptr, up_ptr, dout_ptr, out_ptr, dup_ptr, h_ptr,
    # shape: rows x columns; the rows collapsed into 3 dims, (size1, size2) (dim 0 implied)
    n_rows, n_cols, row_sizes,
    # strides in elements, per tensor: (row dims 0..2, column)
    g_strides, u_strides, d_strides, o_strides, p_strides, h_strides,
    # meta
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACTIVATION: tl.constexpr, PRECISE: tl.constexpr,
    BACKWARD: tl.constexpr, STORE_H: tl.constexpr,
):
    # 64-bit offsets: a tensor may hold more than 2**31 elements.
    pid = tl.program_id(0).to(tl.int64)
    n_col_blocks = tl.cdiv(n_cols, BLOCK_N)
    row_block = pid // n_col_blocks
    col_block = pid % n_col_blocks
    rows = row_block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = col_block * BLOCK_N + tl.arange(0, BLOCK_N)
    size1, size2 = row_sizes
    i2 = rows % size2
    i1 = (rows // size2) % size1
    i0 = rows // size2 // size1
    cols = cols[None, :]
    g_off = _tile_offsets(i0, i1, i2, cols, g_strides)
    u_off = _tile_offsets(i0, i1, i2, cols, u_strides)
    d_off = _tile_offsets(i0, i1, i2, cols, d_strides)
    o_off = _tile_offsets(i0, i1, i2, cols, o_strides)
    p_off = _tile_offsets(i0, i1, i2, cols, p_strides)
    if STORE_H:
        h_off = _tile_offsets(i0, i1, i2, cols, h_strides)
    else:
        h_off = None
    mask = (rows < n_rows)[:, None] & (cols < n_cols)
    # Whole tiles go without a mask, so that no mask stands between Triton and 16-byte vectors.
    if ((row_block + 1) * BLOCK_M <= n_rows) & ((col_block + 1) * BLOCK_N <= n_cols):
        _gated_tile(gate_ptr, up_ptr, dout_ptr, out_ptr, dup_ptr, h_ptr, g_off, u_off, d_off, o_off, p_off, h_off,
                    mask, False, ACTIVATION, PRECISE, BACKWARD, STORE_H)
    else:
        _gated_tile(gate_ptr, up_ptr, dout_ptr, out_ptr, dup_ptr, h_ptr, g_off, u_off, d_off, o_off, p_off, h_off,
                    mask, True, ACTIVATION, PRECISE, BACKWARD, STORE_H)


@functools.lru_cache(maxsize=1024)
def _tile_config(n_rows: int, n_cols: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps): TILE_ELEMENTS a program, as one row's columns where the
    row is that long. BLOCK_N is halved (down to 512) while padding a row to whole blocks
    would add more than an eighth of it (14336 columns: seven whole blocks of 2048), and once
    more for a row longer than a block where half-width blocks pad it less (11008: eleven of
    1024, 2.3% padding, against six of 2048, 11.6%); a row longer than a block gets a program
    a block. Four warps, forward and backward: 16 elements of each tensor a thread (one to
    four 16-byte vectors by dtype), 8 in 1024-wide blocks. Rows of a packed [gate, up] tensor
    lie 2I apart, and two of them a program ran 6-11% slower at Llama's widths than one;
    smaller or larger tiles were no faster on contiguous inputs (BENCHMARKS.md)."""
    return tile_for(n_rows, n_cols, TILE_ELEMENTS, TILE_ELEMENTS, 4)


def tile_for(n_rows: int, n_cols: int, elements: int, max_cols: int, num_warps: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) of `_tile_config`'s rule for a program of `elements` and
    blocks of at most `max_cols` columns (benchmarks/sweep_gated.py times other values)."""
    def padding(block: int) -> int:
        return cdiv(n_cols, block) * block - n_cols

    block_n = min(next_power_of_2(n_cols), max_cols)
    while block_n > 512 and padding(block_n) * 8 > n_cols:
        block_n //= 2
    if n_cols > block_n >= 2048 and padding(block_n // 2) < padding(block_n):
        block_n //= 2
    if n_cols > block_n >= 1024:
        return 1, block_n, num_warps  # a row longer than a block: one row a program
    block_m = max(1, min(next_power_of_2(n_rows), elements // block_n))
    return block_m, block_n, num_warps


@functools.lru_cache(maxsize=1024)
def _plan(shape: tuple[int, ...], strides: tuple[tuple[int, ...], ...], activation: int, precise: bool,
          backward: bool) -> tuple | None:
    """(grid, the kernel's integer arguments, its constexprs, num_warps, the layout's launch
    templates by device and its tensors' dtypes and alignment) for tensors of this shape and
    these strides (gate, up, dout, out, dup, and h where the backward stores it), worked out
    once per layout; None where their dims do not collapse into ROW_DIMS row dims and a
    column dim."""
    store_h = len(strides) == 6
    sizes, strides = collapse_dims(shape, *strides)
    if len(sizes) > ROW_DIMS + 1:
        return None
    n_cols = sizes[-1]
    n_rows = math.prod(sizes[:-1])
    row_sizes = tuple(pad_front(sizes[:-1], ROW_DIMS, 1)[1:])
    strides = [(*pad_front(st[:-1], ROW_DIMS, 0), st[-1]) for st in strides]
    if not store_h:
        strides.append(None)  # h's: compiled in as a constant, no argument
    block_m, block_n, num_warps = _tile_config(n_rows, n_cols)
    return ((cdiv(n_rows, block_m) * cdiv(n_cols, block_n),), (n_rows, n_cols, row_sizes, *strides),
            dict(BLOCK_M=block_m, BLOCK_N=block_n, ACTIVATION=activation, PRECISE=precise, BACKWARD=backward,
                 STORE_H=store_h),
            num_warps, Templates(64))


def _launch(shape, gate, up, dout, out, dup, activation: int, backward: bool, h=None) -> None:
    """Launch over `shape`. gate and out may be packed [gate, up] tensors, whose first half
    (the same strides and first element) is what the kernel walks. h (backward only): where
    to store act(gate) * up as well, bitwise the forward's output; it may be dout itself."""
    strides = (gate.stride(), up.stride(), dout.stride(), out.stride(), dup.stride())
    plan = _plan(shape, strides if h is None else (*strides, h.stride()), activation,
                 gate.dtype == torch.float32 and not INTERPRETED, backward)
    if plan is None:
        # Rare: inputs whose dims no stride pattern merges into four: run on contiguous copies
        # (the outputs, made here, always merge).
        n = shape[-1]
        _launch(shape, *(t[..., :n].contiguous() for t in (gate, up, dout)), out, dup, activation, backward, h)
        return
    grid, ints, constexprs, num_warps, templates = plan
    # Every tensor in the key: out, dup and h may be views of the caller's (packed halves,
    # gated_linear's h) rather than fresh allocations.
    head = (gate, up, dout, out, dup, h)
    templates.get((gate.device, head_layout(head)), LaunchTemplate, "gated_bwd" if backward else "gated_fwd",
                  _gated_kernel, grid, ints, constexprs, num_warps, 1)(*head)


def _validate(gate: tuple, up: tuple | None) -> None:
    """Raise for a gate and up (their meta_of; up None for packed) the ops refuse."""
    check_meta("gate", gate[2], gate[3])
    if up is None:
        if len(gate[0]) == 0 or gate[0][-1] % 2:
            raise ValueError(f"gate of shape {tuple(gate[0])} was given without up, so its last dim must "
                             f"hold [gate, up] and be even")
        return
    check_meta("up", up[2], up[3])
    if up[3] != gate[3]:
        raise ValueError(f"up is on {up[3]} but gate is on {gate[3]}")
    if up[2] != gate[2]:
        raise TypeError(f"up has dtype {dtype_name(up[2])} but gate has {dtype_name(gate[2])}; they must match")
    if up[0] != gate[0]:
        raise ValueError(f"up has shape {tuple(up[0])} but gate has {tuple(gate[0])}; they must match")


@functools.lru_cache(maxsize=1024)
def _checked_shape(gate: tuple, up: tuple | None) -> tuple[int, ...]:
    """The output's shape, after _validate: metadata validated once is not validated again."""
    _validate(gate, up)
    return _out_shape(gate[0], packed=up is None)


def _split(gate: torch.Tensor, up: torch.Tensor | None) -> tuple[tuple[int, ...], torch.Tensor]:
    """(the output's shape, up): with up None, gate's last dim holds [gate, up] and up is the
    view of its second half (gate's first half is walked through gate itself)."""
    if not isinstance(gate, torch.Tensor) or not (up is None or isinstance(up, torch.Tensor)):
        _check_tensors(gate, up)
    shape = _checked_shape(meta_of(gate), None if up is None else meta_of(up))
    return shape, gate.narrow(-1, shape[-1], shape[-1]) if up is None else up


def _check_tensors(gate, up) -> None:
    check_tensor("gate", gate)
    if up is not None:
        check_tensor("up", up)


def _activation_code(approximate: str) -> int:
    return _ACTIVATIONS[_APPROXIMATE[check_choice("approximate", approximate, _APPROXIMATE)]]


def _out_shape(gate_shape: tuple[int, ...], packed: bool) -> tuple[int, ...]:
    return (*gate_shape[:-1], gate_shape[-1] // 2) if packed else tuple(gate_shape)


def gated_fwd(gate: torch.Tensor, up: torch.Tensor | None, activation: int) -> torch.Tensor:
    """Launcher for the forward pass: act(gate) * up (activation: SILU, GELU_TANH or GELU_ERF),
    contiguous, in gate's dtype."""
    shape, up = _split(gate, up)
    out = torch.empty(shape, dtype=gate.dtype, device=gate.device)
    if out.numel():
        _launch(shape, gate, up, gate, out, out, activation, backward=False)
    return out


def gated_bwd(grad_out: torch.Tensor, gate: torch.Tensor, up: torch.Tensor | None,
              activation: int) -> list[torch.Tensor]:
    """Launcher for the backward pass: [dgate, dup], or [d(packed)] when up is None; contiguous,
    in gate's dtype."""
    shape, _ = _split(gate, up)
    check_tensor("grad_out", grad_out)
    check_same_device(gate=gate, grad_out=grad_out)
    if grad_out.shape != shape:
        raise ValueError(f"grad_out has shape {tuple(grad_out.shape)} but the output has {shape}")
    return _gated_bwd_checked(grad_out, gate, up, activation)


def _gated_bwd_checked(grad_out, gate, up, activation: int, h=None) -> list[torch.Tensor]:
    """gated_bwd without validation, for the eager backward: gate and up passed the forward's,
    and autograd hands a gradient of the output's shape, dtype and device. h: a tensor of the
    output's shape (grad_out itself allowed) into which the same launch writes the forward's
    output, for gated_linear's weight gradient."""
    shape = grad_out.shape
    dgate = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
    if up is None:  # one packed gradient; the kernel writes dgate through its first half
        grads = [dgate]
        up, dup = gate.narrow(-1, shape[-1], shape[-1]), dgate.narrow(-1, shape[-1], shape[-1])
    else:
        grads = [dgate, dup := torch.empty(up.shape, dtype=up.dtype, device=up.device)]
    if grad_out.numel():
        _launch(shape, gate, up, grad_out, dgate, dup, activation, backward=True, h=h)
    return grads


def swiglu_fwd(gate: torch.Tensor, up: torch.Tensor | None) -> torch.Tensor:
    """Launcher: silu(gate) * up."""
    return gated_fwd(gate, up, SILU)


def swiglu_bwd(grad_out: torch.Tensor, gate: torch.Tensor, up: torch.Tensor | None) -> list[torch.Tensor]:
    """Launcher: the gradients of swiglu (see gated_bwd)."""
    return gated_bwd(grad_out, gate, up, SILU)


def geglu_fwd(gate: torch.Tensor, up: torch.Tensor | None, approximate: str) -> torch.Tensor:
    """Launcher: gelu(gate, approximate) * up."""
    return gated_fwd(gate, up, _activation_code(approximate))


def geglu_bwd(grad_out: torch.Tensor, gate: torch.Tensor, up: torch.Tensor | None,
              approximate: str) -> list[torch.Tensor]:
    """Launcher: the gradients of geglu (see gated_bwd)."""
    return gated_bwd(grad_out, gate, up, _activation_code(approximate))


def swiglu_reference(gate: torch.Tensor, up: torch.Tensor | None = None, upcast: bool = True) -> torch.Tensor:
    """F.silu(gate) * up in float64 (upcast=True) or in torch's own arithmetic (the eager peer)."""
    gate, up = gate.chunk(2, dim=-1) if up is None else (gate, up)
    if upcast:
        gate, up = gate.double(), up.double()
    return torch.nn.functional.silu(gate) * up


def geglu_reference(gate: torch.Tensor, up: torch.Tensor | None = None, approximate: str = "tanh",
                    upcast: bool = True) -> torch.Tensor:
    """F.gelu(gate, approximate=approximate) * up in float64 (upcast=True) or in gate's dtype."""
    gate, up = gate.chunk(2, dim=-1) if up is None else (gate, up)
    if upcast:
        gate, up = gate.double(), up.double()
    return torch.nn.functional.gelu(gate, approximate=approximate) * up


def _fwd_fake(gate, up, *activation):
    return gate.new_empty(_out_shape(gate.shape, packed=up is None))


def _bwd_fake(grad_out, gate, up, *activation):
    return [gate.new_empty(gate.shape)] + ([] if up is None else [up.new_empty(up.shape)])


def _setup_context(ctx, inputs, output):
    gate, up, *activation = inputs
    ctx.save_for_backward(gate, up)
    ctx.activation = activation


def _backward(bwd, ctx, grad_out):
    gate, up = ctx.saved_tensors
    grads = bwd(grad_out, gate, up, *ctx.activation)
    return (grads[0], grads[1] if up is not None else None, *[None] * len(ctx.activation))


def _check(gate, up, *activation):
    _check_tensors(gate, up)
    _validate(meta_of(gate), None if up is None else meta_of(up))
    if activation:
        _activation_code(*activation)
    return (gate, up, *activation)


def _sharding(op: str, backward: bool, *args):
    """DTensor may shard any dim: the op is elementwise in (gate, up), the intermediate (last)
    dim included, as tensor parallelism shards the MLP. A packed (..., 2I) gate holds
    [gate, up] along its last dim, which must then stay whole. `args`: the custom op's,
    grad_out first for the backward."""
    leading = int(backward)
    gate, up, *options = args[leading:]
    allowed = range(gate.ndim) if up is not None else range(gate.ndim - 1)
    why = "a packed gate holds [gate, up] halves along its last dim, which must stay whole (pass up separately)"
    only_shard(op, "gate", gate, allowed, why)
    if up is not None:
        only_shard(op, "up", up, allowed, why)
    outputs = 2 if backward and up is not None else 1
    return [([p] * outputs, [p] * leading + [p, maybe(up, p)] + [None] * len(options))
            for p in [Replicate()] + [Shard(d) for d in allowed]]


_SWIGLU = Op("swiglu", forward=swiglu_fwd, forward_schema="(Tensor gate, Tensor? up) -> Tensor",
             forward_fake=_fwd_fake, setup_context=_setup_context, backward=_backward,
             backward_launcher=swiglu_bwd, backward_schema="(Tensor grad_out, Tensor gate, Tensor? up) -> Tensor[]",
             backward_fake=_bwd_fake, check=_check,
             eager_backward_launcher=lambda grad_out, gate, up: _gated_bwd_checked(grad_out, gate, up, SILU),
             forward_sharding=functools.partial(_sharding, "swiglu", False),
             backward_sharding=functools.partial(_sharding, "swiglu backward", True))
_GEGLU = Op("geglu", forward=geglu_fwd, forward_schema="(Tensor gate, Tensor? up, str approximate) -> Tensor",
            forward_fake=_fwd_fake, setup_context=_setup_context, backward=_backward,
            backward_launcher=geglu_bwd,
            backward_schema="(Tensor grad_out, Tensor gate, Tensor? up, str approximate) -> Tensor[]",
            backward_fake=_bwd_fake, check=_check,
            eager_backward_launcher=lambda grad_out, gate, up, approximate: _gated_bwd_checked(
                grad_out, gate, up, _activation_code(approximate)),
            forward_sharding=functools.partial(_sharding, "geglu", False),
            backward_sharding=functools.partial(_sharding, "geglu backward", True))


def _promoted(gate, up):
    """gate and up in one dtype: torch's promotion of theirs where they differ, as
    ``F.silu(gate) * up`` promotes (the casts are differentiable; their gradients come back in
    each input's dtype)."""
    if (isinstance(gate, torch.Tensor) and isinstance(up, torch.Tensor) and gate.dtype != up.dtype
            and gate.is_floating_point() and up.is_floating_point()):
        dtype = torch.promote_types(gate.dtype, up.dtype)
        return gate.to(dtype), up.to(dtype)
    return gate, up


def swiglu(gate: torch.Tensor, up: torch.Tensor | None = None) -> torch.Tensor:
    """``F.silu(gate) * up``, the SwiGLU MLP activation, differentiable in gate and up.

    gate, up: float32, float16 or bfloat16 tensors of one shape, any strides and view offset;
    of two dtypes, both are first cast to torch's promotion of them (as the eager product
    promotes). Or ``up=None`` and ``gate`` of shape (..., 2 * I) holding [gate, up] along its
    last dim (a fused gate-up projection): it is split into two views without a copy, and its
    gradient is one (..., 2 * I) tensor. Returns a contiguous (..., I) tensor in gate's (the
    promoted) dtype, computed in float32 (rounded once, where eager torch rounds silu(gate)
    first; float32 forward results are torch's bits on the GPU). Raises TypeError for other
    dtypes, ValueError for mismatched shapes or an odd packed last dim.
    """
    return _SWIGLU(*_promoted(gate, up))


def geglu(gate: torch.Tensor, up: torch.Tensor | None = None, approximate: str = "tanh") -> torch.Tensor:
    """``F.gelu(gate, approximate=approximate) * up``, the GeGLU MLP activation.

    approximate: "tanh" (the default, as Gemma's ``gelu_pytorch_tanh``) or "none" (exact erf).
    Shapes, dtypes, the packed ``up=None`` form and errors as for ``swiglu``; ValueError for
    another ``approximate`` (TypeError for one that is not a string).
    """
    check_choice("approximate", approximate, _APPROXIMATE)
    return _GEGLU(*_promoted(gate, up), approximate)
