"""Gradients times an upstream scalar that stays on the device.

`linear_cross_entropy` makes its mean/sum gradients in the forward, for an upstream gradient
of 1, and its backward multiplies them by the real upstream scalar. Reading that scalar on the
host is a synchronisation, which a CUDA graph capture refuses (torch.compile's
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
