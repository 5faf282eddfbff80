"""Elementwise add with torch's broadcasting and type promotion.

out[i] = round_to(result_dtype, float32(x[i]) + float32(y[i])), then cast to out's dtype.
That is torch's own recipe for half types (compute in float32, round once), so the
result matches `x + y` bit for bit.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._op import Op
from .._sharding import Replicate, Shard
from .._checks import check_out_without_grad, check_same_device, check_tensor, check_writable_output, dtype_name
from .._launch import LaunchTemplate
from .._layout import cdiv, collapse_dims, pad_front
from .._templates import Templates, head_layout

# The general (strided/broadcast) path indexes through up to this many collapsed dims;
# inputs whose layout will not collapse that far are first copied to contiguous memory.
MAX_DIMS = 4


@triton.jit
def _add_kernel(
    # pointers
    x_ptr, y_ptr, out_ptr,
    # shape: total elements, then the sizes of collapsed dims 1..3 (dim 0 is implied)
    n_elements, size1, size2, size3,
    # strides in elements, 0 along broadcast dims (unused when CONTIGUOUS)
    xs0, xs1, xs2, xs3,
    ys0, ys1, ys2, ys3,
    os0, os1, os2, os3,
    # meta
    RESULT_DTYPE: tl.constexpr,
    BLOCK: tl.constexpr,
    CONTIGUOUS: tl.constexpr,
):
    # 64-bit offsets: a tensor may hold more than 2**31 elements.
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    if CONTIGUOUS:
        # Full blocks skip the mask: a mask built from an n that is not a multiple of 16
        # would stop Triton from emitting 16-byte vector loads for every block.
        if start + BLOCK <= n_elements:
            x = tl.load(x_ptr + offs)
            y = tl.load(y_ptr + offs)
            total = (x.to(tl.float32) + y.to(tl.float32)).to(RESULT_DTYPE)
            tl.store(out_ptr + offs, total.to(out_ptr.dtype.element_ty))
        else:
            mask = offs < n_elements
            x = tl.load(x_ptr + offs, mask=mask)
            y = tl.load(y_ptr + offs, mask=mask)
            total = (x.to(tl.float32) + y.to(tl.float32)).to(RESULT_DTYPE)
            tl.store(out_ptr + offs, total.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        mask = offs < n_elements
        i3 = offs % size3
        rest = offs // size3
        i2 = rest % size2
        rest = rest // size2
        i1 = rest % size1
        i0 = rest // size1
        x = tl.load(x_ptr + i0 * xs0 + i1 * xs1 + i2 * xs2 + i3 * xs3, mask=mask)
        y = tl.load(y_ptr + i0 * ys0 + i1 * ys1 + i2 * ys2 + i3 * ys3, mask=mask)
        total = (x.to(tl.float32) + y.to(tl.float32)).to(RESULT_DTYPE)
        tl.store(out_ptr + i0 * os0 + i1 * os1 + i2 * os2 + i3 * os3,
                 total.to(out_ptr.dtype.element_ty), mask=mask)


_TL_DTYPE = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}


def _block_config(dtype: torch.dtype, contiguous: bool) -> tuple[int, int]:
    """(BLOCK, num_warps): 16-byte vectors on the contiguous path; a smaller block on the
    index-heavy strided path. A streaming add is bound by memory, not by how its work is cut:
    the block sweep (benchmarks/sweep_elementwise.py, notes/add_softmax.md) found every setting from
    1 to 8 vectors a thread and 4 to 16 warps level."""
    if not contiguous:
        return 1024, 4
    per_vector = 16 // dtype.itemsize
    return per_vector * 2 * 32 * 4, 4


def add_reference(x: torch.Tensor, y: torch.Tensor, upcast: bool = True) -> torch.Tensor:
    """x + y in float64 (upcast=True) or in torch's own arithmetic."""
    return x.double() + y.double() if upcast else x + y


def _scalars_to_device(x: object, y: object) -> tuple[object, object]:
    """torch lets a 0-d tensor on another device (a CPU scalar) act as a scalar: move it over."""
    if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.device != y.device:
        if y.dim() == 0:
            y = y.to(x.device)
        elif x.dim() == 0:
            x = x.to(y.device)
    return x, y


def _launch(x, y, out, n, sizes, strides, result_dtype, contiguous):
    # The tail (n, sizes, strides) and the flags key the plan; the head's dtypes (out's sets
    # the block) and alignment the rest of what Triton compiles for (out may be the caller's).
    tail = (n, *sizes, *strides)
    head = (x, y, out)
    _TEMPLATES.get((tail, result_dtype, contiguous, x.device, head_layout(head)), _template, tail, result_dtype,
                   out.dtype, contiguous)(*head)


def _template(tail: tuple, result_dtype: torch.dtype, out_dtype: torch.dtype, contiguous: bool) -> LaunchTemplate:
    block, num_warps = _block_config(out_dtype, contiguous)
    return LaunchTemplate("add", _add_kernel, (cdiv(tail[0], block),), tail,
                          dict(RESULT_DTYPE=_TL_DTYPE[result_dtype], BLOCK=block, CONTIGUOUS=contiguous), num_warps, 1)


_TEMPLATES = Templates()


_UNUSED_LAYOUT = ((1, 1, 1), (0,) * 12)   # sizes and strides the contiguous path ignores


def add_fwd(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Launcher: validate, broadcast, allocate and launch. Returns `out`."""
    if (type(x) is torch.Tensor and type(y) is torch.Tensor and x.dtype is y.dtype
            and x.dtype in _TL_DTYPE and x.shape == y.shape and x.device == y.device
            and x.is_contiguous() and y.is_contiguous() and x.numel() > 0
            and (out is None or (type(out) is torch.Tensor and out.dtype is x.dtype and out.shape == x.shape
                                 and out.device == x.device and out.is_contiguous()))):
        # The common case, kept short: small tensors are bound by host time, and the general
        # path below (broadcast, promotion, stride collapsing) costs several times the launch.
        check_tensor("x", x)
        if out is None:
            out = torch.empty_like(x, memory_format=torch.contiguous_format)
        else:
            check_writable_output("out", out, x=x, y=y)
        _launch(x, y, out, x.numel(), *_UNUSED_LAYOUT, x.dtype, contiguous=True)
        return out
    x, y = _scalars_to_device(x, y)
    check_tensor("x", x)
    check_tensor("y", y)
    check_same_device(x=x, y=y)
    try:
        shape = x.shape if x.shape == y.shape else torch.broadcast_shapes(x.shape, y.shape)
    except RuntimeError as err:
        raise ValueError(f"x of shape {tuple(x.shape)} and y of shape {tuple(y.shape)} "
                         f"do not broadcast: {err}") from None
    result_dtype = torch.result_type(x, y)
    if out is None:
        out = torch.empty(shape, dtype=result_dtype, device=x.device)
    else:
        check_tensor("out", out)
        check_same_device(x=x, out=out)
        if out.shape != shape:
            raise ValueError(f"out has shape {tuple(out.shape)}, but x + y has shape {tuple(shape)}")
        if not torch.can_cast(result_dtype, out.dtype):
            raise TypeError(f"out has dtype {dtype_name(out.dtype)}, which {dtype_name(result_dtype)} "
                            "cannot be cast to")
        check_writable_output("out", out, x=x, y=y)
    n = out.numel()
    if n == 0:
        return out

    xb, yb = x.expand(shape), y.expand(shape)
    contiguous = (xb.is_contiguous() and yb.is_contiguous() and out.is_contiguous())
    sizes, (xs, ys, os_) = collapse_dims(shape, xb.stride(), yb.stride(), out.stride())
    if not contiguous and len(sizes) > MAX_DIMS:
        # Rare: a layout with more than MAX_DIMS dims that no stride pattern merges.
        xb, yb = xb.contiguous(), yb.contiguous()
        staging = torch.empty(shape, dtype=out.dtype, device=out.device)
        add_fwd(xb, yb, staging)
        out.copy_(staging)
        return out
    sizes = pad_front(sizes, MAX_DIMS, 1)
    strides = [*pad_front(xs, MAX_DIMS, 0), *pad_front(ys, MAX_DIMS, 0), *pad_front(os_, MAX_DIMS, 0)]
    _launch(xb, yb, out, n, sizes[1:], strides, result_dtype, contiguous)
    return out


def _add_fake(x, y):
    # add_fwd moves a 0-d operand to the other operand's device, as torch does.
    device = y.device if x.dim() == 0 and y.dim() > 0 else x.device
    return torch.empty(torch.broadcast_shapes(x.shape, y.shape), dtype=torch.result_type(x, y), device=device)


def _add_setup_context(ctx, inputs, output):
    x, y = inputs
    ctx.x_meta = (x.shape, x.dtype, x.device)
    ctx.y_meta = (y.shape, y.dtype, y.device)


def _add_backward(bwd, ctx, grad):
    # d(x + y)/dx = 1: the gradient is the upstream one summed over broadcast dims, in torch
    # ops (so it can itself be differentiated).
    return _unbroadcast(grad, *ctx.x_meta), _unbroadcast(grad, *ctx.y_meta)


def _add_check(x, y):
    check_tensor("x", x)
    check_tensor("y", y)
    check_same_device(x=x, y=y)
    return x, y


def _add_sharding(x, y):
    # Elementwise: the output sharded along any dim, each input along the matching dim (or
    # replicated where it broadcasts).
    out_ndim = max(x.ndim, y.ndim)
    out_shape = torch.broadcast_shapes(x.shape, y.shape)
    strategies = [([Replicate()], [Replicate(), Replicate()])]
    for d in range(out_ndim):
        inputs = []
        for t in (x, y):
            own = d - (out_ndim - t.ndim)
            sharded = own >= 0 and t.shape[own] == out_shape[d]
            inputs.append(Shard(own) if sharded else Replicate())
        strategies.append(([Shard(d)], inputs))
    return strategies


_ADD = Op("add", forward=add_fwd, forward_schema="(Tensor x, Tensor y) -> Tensor", forward_fake=_add_fake,
          setup_context=_add_setup_context, backward=_add_backward, check=_add_check,
          forward_sharding=_add_sharding)


def _unbroadcast(grad: torch.Tensor, shape: torch.Size, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    # A 0-d CPU operand beside a GPU one gets its gradient back on the CPU, as torch's own.
    lead = grad.dim() - len(shape)
    dims = list(range(lead)) + [lead + i for i, s in enumerate(shape) if s == 1 and grad.shape[lead + i] != 1]
    if dims:
        grad = grad.sum(dim=dims, keepdim=True)
    return grad.reshape(shape).to(device=device, dtype=dtype)


def add(x: torch.Tensor, y: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """Elementwise ``x + y``, as torch computes it.

    x, y: float32, float16 or bfloat16 tensors of any strides and view offset whose
    shapes broadcast (0-d tensors act as scalars). The result has the broadcast shape
    and torch's promoted dtype (float16 + float32 gives float32). ``out``, if given,
    must have that shape and a float dtype the result can be cast to; it is written and
    returned. As in torch, ``out=`` takes no part in autograd: with grad enabled, inputs or an
    ``out`` that require grad are refused (RuntimeError), and ``out=`` calls are not traced by
    torch.compile.

    Raises TypeError for non-tensors and unsupported dtypes, ValueError for shapes that
    do not broadcast, a wrong ``out`` shape, an ``out`` that partly overlaps x or y or
    whose elements share memory (as torch refuses them), or tensors on different devices.
    """
    if out is not None:
        check_out_without_grad("add", out, x, y)
        return add_fwd(x, y, out)
    return _ADD(x, y)
