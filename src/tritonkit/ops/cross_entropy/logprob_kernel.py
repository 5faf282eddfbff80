"""The log-probability row kernel: per-token log-probabilities of the targets, the entropy of
each row's distribution, and their gradient for any upstream gradients of both. Serves
`linear_logprobs` and the fused post-training losses (one chunk of a head's logits at a time).

For a row of logits x (C classes), target t, temperature T and softcap c:
    z    = softcap(x) / T                 (c * tanh(x / c); x itself without a softcap)
    lse  = log(sum_j exp(z_j))
    logp = z_t - lse                      log p_t
    H    = -sum_j p_j log p_j = log s - u / s,  with s = sum_j exp(z_j - m), u = sum_j exp(z_j - m) (z_j - m)
(m the row's max: u's terms are all <= 0, and u / s is the mean of z - m under p, so H is
formed without the cancellation of lse - sum_j p_j z_j at large logits.) For upstream
gradients g (of logp) and h (of H):
    dL/dz_j = g * ([j == t] - p_j) - h * p_j * (log p_j + H)
    dL/dx_j = dL/dz_j / T * (1 - (softcap(x_j) / c)^2)
A row whose target is ignore_index has logp = H = 0 and gradient 0.

Pass 1 (STATS) keeps m, s and u online, rescaled by exp(m_old - m_new) when the max grows
(u also gains (m_old - m_new) * s); pass 2 (GRAD) writes the gradient over the logits, from the
float64 lse and the entropy (saved by pass 1 of this launch or of an earlier one).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..._launch import Launch
from .kernel import _column_block, _lse_parts, _row_target, _softcapped, row_block


@triton.jit
def _logprob_kernel(
    # pointers: logits [rows, C] with unit column stride, its gradient written over it (GRAD);
    # target [rows]; logp and entropy [rows] fp32 (written with STATS; entropy read with
    # UP_ENTROPY otherwise); lse [rows] fp64 (written with STATS, else read); grad_logp and
    # grad_entropy [rows] fp32, contiguous: the upstream gradients (UP_LOGP, UP_ENTROPY)
    logits_ptr, target_ptr, logp_ptr, entropy_ptr, lse_ptr, grad_logp_ptr, grad_entropy_ptr,
    # shape and strides in elements
    n_cols, l_row, t_stride,
    # options
    ignore_index, inv_temperature, softcap,
    # meta: STATS: pass 1 (else lse is read); ENTROPY: H kept and stored by pass 1; GRAD: pass 2
    BLOCK: tl.constexpr, STATS: tl.constexpr, ENTROPY: tl.constexpr, GRAD: tl.constexpr,
    UP_LOGP: tl.constexpr, UP_ENTROPY: tl.constexpr, SOFTCAP: tl.constexpr,
):
    row, x_row, target, valid = _row_target(logits_ptr, target_ptr, l_row, t_stride, ignore_index, n_cols)
    cols = tl.arange(0, BLOCK)
    h = 0.0
    if STATS:
        m = -float("inf")
        s = 0.0
        u = 0.0
        for start in range(0, n_cols, BLOCK):
            c, mask, x = _column_block(x_row, 1, start, cols, n_cols, -float("inf"))
            z = tl.where(mask, _softcapped(x, softcap, SOFTCAP) * inv_temperature, -float("inf"))
            m_new = tl.maximum(m, tl.max(z, axis=0))
            # m_new stays -inf only while every logit so far is -inf: nothing to add yet.
            shift = tl.where(m_new == -float("inf"), 0.0, m_new)
            e = tl.exp(z - shift)
            rescale = tl.exp(m - shift)
            if ENTROPY:
                # e * (z - shift) is 0 where e is (masked lanes, -inf logits), not 0 * -inf.
                moved = tl.where(m == -float("inf"), 0.0, m - shift)
                u = rescale * (u + moved * s) + tl.sum(tl.where(e > 0, e * (z - shift), 0.0), axis=0)
            s = s * rescale + tl.sum(e, axis=0)
            m = m_new
        log_s = tl.log(s)
        # In float64, as the cross-entropy kernel stores it: m and log s both kept (_lse_parts).
        tl.store(lse_ptr + row, m.to(tl.float64) + log_s.to(tl.float64))
        z_t = _softcapped(tl.load(x_row + tl.where(valid, target, 0)).to(tl.float32), softcap, SOFTCAP)
        # From the row's max, as the cross-entropy loss: exact when the target holds the max.
        logp = (z_t * inv_temperature - m) - log_s
        tl.store(logp_ptr + row, tl.where(valid, logp, 0.0))
        if ENTROPY:
            h = log_s - u / s
            tl.store(entropy_ptr + row, tl.where(valid, h, 0.0))
    else:
        m, log_s = _lse_parts(tl.load(lse_ptr + row))
        if UP_ENTROPY:
            h = tl.load(entropy_ptr + row)
    if GRAD:
        g = 0.0
        if UP_LOGP:
            g = tl.load(grad_logp_ptr + row).to(tl.float32)
        g_h = 0.0
        if UP_ENTROPY:
            g_h = tl.load(grad_entropy_ptr + row).to(tl.float32)
        for start in range(0, n_cols, BLOCK):
            c, mask, x = _column_block(x_row, 1, start, cols, n_cols, 0.0)
            y = _softcapped(x, softcap, SOFTCAP)
            log_p = (y * inv_temperature - m) - log_s
            p = tl.exp(log_p)
            d = tl.where(c == target, g - g * p, -g * p)
            if UP_ENTROPY:
                d -= g_h * p * (log_p + h)
            d *= inv_temperature
            if SOFTCAP:
                d *= 1.0 - (y / softcap) * (y / softcap)
            # An ignored row gets exact zeros, whatever its logits (even inf or NaN).
            tl.store(x_row + c, tl.where(valid, d, 0.0).to(logits_ptr.dtype.element_ty), mask=mask)


def launch_logprob_rows(logits: torch.Tensor, target: torch.Tensor, ignore_index: int, temperature: float,
                        softcap: float | None, lse: torch.Tensor, *, logp: torch.Tensor | None = None,
                        entropy: torch.Tensor | None = None, grad_logp: torch.Tensor | None = None,
                        grad_entropy: torch.Tensor | None = None, grad: bool = False,
                        name: str = "linear_logprobs") -> None:
    """One program per row of the 2-D `logits` (unit column stride; a chunk buffer). With `logp`
    (pass 1): writes logp, the fp64 `lse` and, when given, `entropy` (fp32, one a row). Without,
    reads lse (and entropy where grad_entropy is given). With `grad`: writes the gradient for
    the upstream grad_logp and grad_entropy (fp32, one a row, contiguous; either may be None)
    over the logits."""
    n_rows, n_cols = logits.shape
    if n_rows == 0:
        return
    if logits.stride(1) != 1 and n_cols > 1:
        raise ValueError("logits must have unit column stride (a chunk buffer)")
    block, num_warps = row_block(n_cols)
    dummy = lse  # pointers of absent tensors; their flags keep the kernel from touching them
    stats = logp is not None
    Launch(name, _logprob_kernel, (n_rows,), (
        logits, target, dummy if logp is None else logp, dummy if entropy is None else entropy, lse,
        dummy if grad_logp is None else grad_logp, dummy if grad_entropy is None else grad_entropy,
        n_cols, logits.stride(0), target.stride(0), ignore_index, 1.0 / temperature, float(softcap or 1.0),
    ), dict(BLOCK=block, STATS=stats, ENTROPY=stats and entropy is not None, GRAD=grad,
            UP_LOGP=grad and grad_logp is not None, UP_ENTROPY=grad and grad_entropy is not None,
            SOFTCAP=softcap is not None),
        num_warps=num_warps, num_stages=1)()
