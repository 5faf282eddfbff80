"""The distillation row kernel: a divergence between a student's and a teacher's softmax over
one chunk of both heads' logits, and its gradient in the student's logits.

For a row with student logits x and teacher logits y (C classes each), temperature T:
    s = log_softmax(x / T),  t = log_softmax(y / T),  P_s = exp(s),  P_t = exp(t)
    forward KL  KL(P_t || P_s) = sum_j P_t,j (t_j - s_j)         d/dx_k = (P_s,k - P_t,k) / T
    reverse KL  KL(P_s || P_t) = sum_j P_s,j (s_j - t_j) = D      d/dx_k = P_s,k ((s_k - t_k) - D) / T
    JSD(beta)   beta KL(P_t || M) + (1 - beta) KL(P_s || M),  M = beta P_t + (1 - beta) P_s
                d/dx_k = (1 - beta) P_s,k ((s_k - log M_k) - K) / T,  K = KL(P_s || M)
(the JSD's derivative in P_s is (1 - beta)(log P_s - log M) + const, since
beta P_t + (1 - beta) P_s is M itself; the softmax's Jacobian then subtracts its P_s-mean K).
This is TRL's and Liger's generalized JSD: beta = 0 and 1 are the forward and reverse KL,
which the launcher takes instead. A row whose target is ignore_index has loss 0 and gradient 0.

Pass 1 (STATS) keeps both rows' max and sum of exponentials online; pass 2 (STATS) sums the
loss and the statistic the gradient needs (AUX: D, or K); pass 3 (GRAD) writes the gradient
over the student's logits, times each row's scale (1 / count for a mean made in the forward,
the upstream gradient in a backward), from the lse and aux of pass 1 and 2 of this launch or of
the forward's. The forward KL's gradient needs no sum, so with STATS it is written in pass 2.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..._launch import Launch
from ..cross_entropy.kernel import _lse_parts, _online_lse, row_block

KINDS = ("forward_kl", "reverse_kl", "jsd")
FORWARD_KL, REVERSE_KL, JSD = 0, 1, 2


@triton.jit
def _log_mix(s, t, log_beta, log_1m_beta):
    """log(beta exp(t) + (1 - beta) exp(s)), from the larger term: no overflow, no underflow to
    log 0 unless both are 0."""
    a = log_beta + t
    b = log_1m_beta + s
    hi = tl.maximum(a, b)
    lo = tl.minimum(a, b)
    return hi + tl.log(1.0 + tl.exp(lo - hi))


@triton.jit
def _distill_kernel(
    # pointers: student logits [rows, C] and teacher logits [rows, C], unit column stride (the
    # gradient is written over the student's with GRAD); target [rows] (ignore_index: not
    # scored); loss [rows] fp32 (STATS); lse_s, lse_t [rows] fp64 and aux [rows] fp32 (written
    # with STATS, else read); scale: the gradient's factor (0-d, or one a row)
    s_ptr, t_ptr, target_ptr, loss_ptr, lse_s_ptr, lse_t_ptr, aux_ptr, scale_ptr,
    # shape and strides in elements (scale_stride 0: one scalar for every row)
    n_cols, s_row, t_row, target_stride, scale_stride,
    # options
    ignore_index, inv_temperature, beta,
    # meta: STATS: passes 1 and 2; GRAD: the gradient; KIND: FORWARD_KL, REVERSE_KL or JSD
    BLOCK: tl.constexpr, STATS: tl.constexpr, GRAD: tl.constexpr, KIND: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    s_row_ptr = s_ptr + row * s_row
    t_row_ptr = t_ptr + row * t_row
    valid = tl.load(target_ptr + row * target_stride).to(tl.int64) != ignore_index
    cols = tl.arange(0, BLOCK)
    log_beta = tl.log(beta)
    log_1m_beta = tl.log(1.0 - beta)
    scale = 0.0
    if GRAD:
        scale = tl.load(scale_ptr + row * scale_stride).to(tl.float32) * inv_temperature
    if STATS:
        m_s = -float("inf")
        sum_s = 0.0
        m_t = -float("inf")
        sum_t = 0.0
        for start in range(0, n_cols, BLOCK):
            c = start + cols
            mask = c < n_cols
            x = tl.load(s_row_ptr + c, mask=mask, other=-float("inf")).to(tl.float32) * inv_temperature
            y = tl.load(t_row_ptr + c, mask=mask, other=-float("inf")).to(tl.float32) * inv_temperature
            m_s, sum_s = _online_lse(m_s, sum_s, x)
            m_t, sum_t = _online_lse(m_t, sum_t, y)
        log_s_s = tl.log(sum_s)
        log_s_t = tl.log(sum_t)
        tl.store(lse_s_ptr + row, m_s.to(tl.float64) + log_s_s.to(tl.float64))
        tl.store(lse_t_ptr + row, m_t.to(tl.float64) + log_s_t.to(tl.float64))
        loss = 0.0
        aux = 0.0
        for start in range(0, n_cols, BLOCK):
            c = start + cols
            mask = c < n_cols
            s = (tl.load(s_row_ptr + c, mask=mask, other=0.0).to(tl.float32) * inv_temperature - m_s) - log_s_s
            t = (tl.load(t_row_ptr + c, mask=mask, other=0.0).to(tl.float32) * inv_temperature - m_t) - log_s_t
            p_s = tl.where(mask, tl.exp(s), 0.0)
            p_t = tl.where(mask, tl.exp(t), 0.0)
            # Each term p * (log p - log q) is 0 where p is (masked lanes, -inf logits).
            if KIND == 0:
                loss += tl.sum(tl.where(p_t > 0, p_t * (t - s), 0.0), axis=0)
                if GRAD:
                    d = tl.where(valid, (p_s - p_t) * scale, 0.0)
                    tl.store(s_row_ptr + c, d.to(s_ptr.dtype.element_ty), mask=mask)
            elif KIND == 1:
                loss += tl.sum(tl.where(p_s > 0, p_s * (s - t), 0.0), axis=0)
            else:
                log_m = _log_mix(s, t, log_beta, log_1m_beta)
                teacher_term = tl.sum(tl.where(p_t > 0, p_t * (t - log_m), 0.0), axis=0)
                student_term = tl.sum(tl.where(p_s > 0, p_s * (s - log_m), 0.0), axis=0)
                loss += beta * teacher_term + (1.0 - beta) * student_term
                aux += student_term
        if KIND == 1:
            aux = loss
        tl.store(loss_ptr + row, tl.where(valid, loss, 0.0))
        tl.store(aux_ptr + row, aux)
    else:
        m_s, log_s_s = _lse_parts(tl.load(lse_s_ptr + row))
        m_t, log_s_t = _lse_parts(tl.load(lse_t_ptr + row))
        aux = tl.load(aux_ptr + row)
    if GRAD and not (STATS and KIND == 0):
        for start in range(0, n_cols, BLOCK):
            c = start + cols
            mask = c < n_cols
            s = (tl.load(s_row_ptr + c, mask=mask, other=0.0).to(tl.float32) * inv_temperature - m_s) - log_s_s
            t = (tl.load(t_row_ptr + c, mask=mask, other=0.0).to(tl.float32) * inv_temperature - m_t) - log_s_t
            p_s = tl.exp(s)
            if KIND == 0:
                d = p_s - tl.exp(t)
            elif KIND == 1:
                d = tl.where(p_s > 0, p_s * ((s - t) - aux), 0.0)
            else:
                d = tl.where(p_s > 0, (1.0 - beta) * p_s * ((s - _log_mix(s, t, log_beta, log_1m_beta)) - aux), 0.0)
            # An ignored row gets exact zeros, whatever its logits.
            tl.store(s_row_ptr + c, tl.where(valid, d * scale, 0.0).to(s_ptr.dtype.element_ty), mask=mask)


def kind_for(kind: str, beta: float) -> int:
    """The kernel's KIND: JSD at beta 0 and 1 is the forward and the reverse KL (TRL's reading)."""
    if kind == "jsd" and beta in (0.0, 1.0):
        return FORWARD_KL if beta == 0.0 else REVERSE_KL
    return KINDS.index(kind)


def launch_distill_rows(student: torch.Tensor, teacher: torch.Tensor, target: torch.Tensor, ignore_index: int,
                        kind: int, beta: float, temperature: float, *, lse: torch.Tensor,
                        teacher_lse: torch.Tensor, aux: torch.Tensor, loss: torch.Tensor | None = None,
                        scale: torch.Tensor | None = None) -> None:
    """One program per row of the 2-D student and teacher logits (unit column stride). With
    `loss`, passes 1 and 2 write it, the fp64 lse of both and aux (fp32), else they are read;
    with `scale` (fp32, 0-d or one a row), the gradient is written over the student's logits."""
    n_rows, n_cols = student.shape
    if n_rows == 0:
        return
    for name, t in (("student", student), ("teacher", teacher)):
        if t.stride(1) != 1 and n_cols > 1:
            raise ValueError(f"{name} logits must have unit column stride (a chunk buffer)")
    block, num_warps = row_block(n_cols)
    # The kernel takes logs of beta and 1 - beta only for the JSD, whose beta is inside (0, 1).
    beta = beta if kind == JSD else 0.5
    Launch("linear_distill_loss", _distill_kernel, (n_rows,), (
        student, teacher, target, lse if loss is None else loss, lse, teacher_lse, aux,
        lse if scale is None else scale, n_cols, student.stride(0), teacher.stride(0), target.stride(0),
        scale.stride(0) if scale is not None and scale.dim() else 0, ignore_index, 1.0 / temperature, float(beta),
    ), dict(BLOCK=block, STATS=loss is not None, GRAD=scale is not None, KIND=kind),
        num_warps=num_warps, num_stages=1)()

