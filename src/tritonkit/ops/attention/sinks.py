"""The gradient of learnable sinks (gpt-oss): a sink is a key of logit sinks[h] and no value, so
its dS in row i is p_i (0 - delta_i), p_i = exp(sinks[h] - lse_i), delta_i = rowsum(dO O)_i -
dlse_i, and

    d sinks[h] = -sum over every row i of head h (all batches) of exp(sinks[h] - lse_i) delta_i.

One program a head sums its rows in a fixed order (deterministic), one launch in place of the
five torch ops of `sinks_grad_reference`, which at short walks (a sliding window) were a few
percent of a whole backward."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..._launch import Launch

_BLOCK = 1024


@triton.jit
def _sinks_grad_kernel(SINKS, LSE, DELTA, DSINKS, B, H, N, BLOCK: tl.constexpr):
    # SINKS, DSINKS: (H,) in the sinks' dtype; LSE, DELTA: (B, H, N) float32, contiguous.
    h = tl.program_id(0)
    sink = tl.load(SINKS + h).to(tl.float32)
    acc = tl.zeros([BLOCK], tl.float32)
    for b in range(B):
        row0 = (b * H + h).to(tl.int64) * N
        for n0 in range(0, N, BLOCK):
            rows = n0 + tl.arange(0, BLOCK)
            inside = rows < N
            lse = tl.load(LSE + row0 + rows, mask=inside, other=float("inf"))
            delta = tl.load(DELTA + row0 + rows, mask=inside, other=0.0)
            acc += tl.where(inside, tl.exp(sink - lse) * delta, 0.0)
    tl.store(DSINKS + h, (-tl.sum(acc, axis=0)).to(DSINKS.dtype.element_ty))


def sinks_grad(sinks: torch.Tensor, lse: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """d(loss)/d(sinks) of (H,) sinks from the forward's lse and the backward's delta, both
    (B, H, N) float32 (packed sequences: B = 1); in the sinks' dtype."""
    B, H, N = lse.shape
    dsinks = torch.empty(H, dtype=sinks.dtype, device=sinks.device)
    if B * N == 0:
        return dsinks.zero_()
    args = (sinks.contiguous(), lse.contiguous(), delta.contiguous(), dsinks, B, H, N)
    Launch("attention_sinks_grad", _sinks_grad_kernel, (H,), args,
           dict(BLOCK=_BLOCK), num_warps=4, num_stages=1)()
    return dsinks


def sinks_grad_reference(sinks: torch.Tensor, lse: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """`sinks_grad` in torch ops (float32, torch's reduction)."""
    p = torch.exp(sinks.float()[None, :, None] - lse)
    return (-(p * delta).sum((0, 2))).to(sinks.dtype)
