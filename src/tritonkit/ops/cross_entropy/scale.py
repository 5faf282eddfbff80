"""Gradients times an upstream scalar that stays on the device.

`linear_cross_entropy` (mean and sum) and the fused post-training losses make their
gradients in the forward, for an upstream gradient of 1, and their backward multiplies them by
the real upstream scalar. Reading that scalar on the host is a synchronisation, which a CUDA graph capture refuses (torch.compile's
mode="reduce-overhead" captures the backward too), so the multiply reads it on the device.
Each element is multiplied in float32 and rounded once to the gradient's dtype: the product
torch's multiply by a Python float gives.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..._launch import Launch

BLOCK = 4096  # elements a program: 16 a thread at 8 warps, 128-bit accesses for 2-byte types


@triton.jit
def _scale_kernel(src_ptr, dst_ptr, scale_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    scale = tl.load(scale_ptr).to(tl.float32)
    x = tl.load(src_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(dst_ptr + offsets, (x * scale).to(dst_ptr.dtype.element_ty), mask=mask)


def _dense(t: torch.Tensor) -> bool:
    """Whether t's elements fill numel() consecutive places from its offset, in some order."""
    dims = sorted((stride, size) for stride, size in zip(t.stride(), t.shape) if size != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def scale_by(grad: torch.Tensor, scale: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """grad * scale (a one-element tensor on grad's device) into `out` (grad itself for in
    place; a new tensor of grad's layout when None). grad is one of the op's own gradients:
    dense, so its elements are walked in memory order whatever its strides."""
    if out is None:
        out = torch.empty_like(grad)  # a dense tensor's empty_like has its strides
    if not (_dense(grad) and out.stride() == grad.stride()):
        raise ValueError("scale_by takes a dense gradient and an output of its strides")
    n = grad.numel()
    if n:
        flat = (lambda t: t.as_strided((n,), (1,), t.storage_offset()))
        Launch("linear_cross_entropy_scale", _scale_kernel, (triton.cdiv(n, BLOCK),),
               (flat(grad), flat(out), scale, n), dict(BLOCK=BLOCK), num_warps=8, num_stages=1)()
    return out


def scale_gradients(grad_loss: torch.Tensor, grads: tuple[torch.Tensor, ...], in_place: bool) -> tuple:
    """The gradients a forward made for an upstream gradient of 1, times the 0-d grad_loss.

    With in_place (the eager road) grad_loss is read on the host (one sync) and `grads`
    themselves are returned, untouched when it is 1 (loss.backward()) and multiplied in place
    otherwise: no second weight-sized buffer. Without (the custom op, torch.compile's road,
    which may not alias or mutate its inputs), new tensors. While a CUDA graph is captured
    (torch.compile's mode="reduce-overhead", a captured step), which may not sync, a kernel
    reads the scale on the device and multiplies whatever it is (by 1 it changes no bit), on
    both roads. Both multiplies are float32 products rounded once: the same bits."""
    if grad_loss.is_cuda and torch.cuda.is_current_stream_capturing():
        if not in_place:
            return tuple(scale_by(g, grad_loss) for g in grads)
        for g in grads:
            scale_by(g, grad_loss, out=g)
            # A kernel's write is invisible to autograd: bump the version as mul_ does, so a
            # second backward through this graph is refused rather than given scaled tensors.
            torch.autograd.graph.increment_version(g)
        return grads
    scale = grad_loss.item()
    if not in_place:
        return tuple(g * scale for g in grads)
    if scale != 1.0:
        for g in grads:
            g.mul_(scale)
    return grads
