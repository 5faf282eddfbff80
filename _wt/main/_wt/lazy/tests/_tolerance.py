"""Error measures for tests: ours against a float64 reference, relative to torch's own.

A kernel passes when ||ours - ref|| / ||ref|| <= 2 * (the same for torch in the same
dtype) + eps. Under the interpreter, fp32 -> bf16 casts truncate instead of rounding
(a Triton 3.6 interpreter quirk; the GPU rounds to nearest even), which can double a
bf16 error; `eps_for` widens eps for that case only.
"""

from __future__ import annotations

import torch

import tritonkit
from tritonkit.registry import _accuracy


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    # NaN and inf must sit exactly where the reference has them.
    problem = _accuracy.mismatch(out, ref)
    assert problem is None, problem
    return _accuracy.relative_error(out, ref)


def eps_for(dtype: torch.dtype, gradient: bool = False) -> float:
    """eps for outputs; gradients get more under the interpreter's truncated bf16, since a
    truncated forward output (saved for backward) is amplified by the backward's cancellation."""
    base = {torch.float32: 1e-6, torch.float16: 1e-4, torch.bfloat16: 1e-3}[dtype]
    if gradient and dtype == torch.float32:
        base = 1e-5  # softmax's y * (dy - sum(y * dy)) cancels; seen on 2-element rows
    if gradient and dtype == torch.float16:
        # Fused backward passes start from the rounded forward output (softmax's y, attention's
        # O in rowsum(dO * O)), which torch's unfused math does not; on tiny inputs (a handful of
        # elements, as the fuzz draws) that alone can exceed twice torch's error.
        base = 4e-3
    if dtype == torch.bfloat16 and tritonkit.INTERPRETED:
        base = 1.5e-2 if gradient else 8e-3  # truncating casts cost up to one bf16 step (2**-7)
    return base


def assert_close_to_reference(out: torch.Tensor, ref: torch.Tensor, torch_out: torch.Tensor,
                              eps: float | None = None, what: str = "output") -> None:
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    eps = eps_for(out.dtype) if eps is None else eps
    ours = relative_error(out, ref)
    if _accuracy.mismatch(torch_out, ref) is None:
        theirs = relative_error(torch_out, ref)
    else:
        # torch overflowed in this dtype (fp16 cross-entropy's label-smoothing sum, say) where
        # the float64 reference is finite: its error is no yardstick, one rounding is.
        theirs = torch.finfo(out.dtype).eps / 2
    assert ours <= 2 * theirs + eps, (
        f"{what}: relative error {ours:.3e} exceeds 2 x torch's {theirs:.3e} + {eps:.1e}")
