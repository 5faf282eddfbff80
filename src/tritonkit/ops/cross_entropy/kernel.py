"""The cross-entropy row kernel, shared by `cross_entropy` (logits given) and
`linear_cross_entropy` (logits made a chunk at a time), and the checks both launchers make.

For a row of logits x (C classes), target t, label smoothing eps and softcap c:
    z    = c * tanh(x / c)                    (x itself without a softcap)
    lse  = log(sum_j exp(z_j))
    loss = (1 - eps) * (lse - z_t) + eps * (lse - sum_j z_j / C)
This is torch's definition: nll of log_softmax weighted (1 - eps), plus eps times the mean
over classes of -log_softmax. Its gradient, for an upstream scale s:
    dL/dz_j = s * (softmax(z)_j - (1 - eps) * [j == t] - eps / C)
    dL/dx_j = dL/dz_j * (1 - (z_j / c)^2)    (the softcap's derivative, 1 - tanh^2)
A row whose target is ignore_index has loss 0 and gradient 0.

The forward of `cross_entropy` also finishes the op in the same launch (FINISH): each row's
program adds one to a ticket counter (and its row to the count of non-ignored targets), and
the last to arrive writes the count, a flag for out-of-range targets and, for mean and sum,
the loss, summed over the rows in a fixed order. A small logits tensor is bound by the host's
time a call, which counting, checking and reducing with torch ops (a launch each) multiplied.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..._checks import check_tensor, dtype_name
from ..._launch import Launch
from ..._layout import next_power_of_2

TARGET_DTYPES = (torch.int64, torch.int32)
REDUCTIONS = ("mean", "sum", "none")
REDUCTIONS_FINISHED = {"none": 0, "sum": 1, "mean": 2}   # the kernel's REDUCE
MAX_BLOCK = 8192   # columns a program holds per step: 16 fp32 values a thread at 16 warps


@triton.jit
def _softcapped(x, softcap, SOFTCAP: tl.constexpr):
    """softcap * tanh(x / softcap), through exp(-2|y|) in (0, 1]: no overflow for any x, and
    -inf maps to -softcap (callers re-mask masked-off lanes)."""
    if SOFTCAP:
        y = x / softcap
        e = tl.exp(-2.0 * tl.abs(y))
        t = (1.0 - e) / (1.0 + e)
        x = softcap * tl.where(y < 0, -t, t)
    return x


@triton.jit
def _online_lse(m, s, z):
    """A block z of a row's logits into its running max m and sum s of exp(z - m), rescaled by
    exp(m_old - m_new) when the max grows; returns the new (m, s)."""
    m_new = tl.maximum(m, tl.max(z, axis=0))
    # m_new stays -inf only while every logit so far is -inf: nothing to add yet.
    shift = tl.where(m_new == -float("inf"), 0.0, m_new)
    return m_new, s * tl.exp(m - shift) + tl.sum(tl.exp(z - shift), axis=0)


@triton.jit
def _lse_parts(lse):
    """A row's float64 log-sum-exp, as the forward stores it, split again into its max m (the
    float32 rounding of lse) and log s (the exact rest, in float32)."""
    lse = lse.to(tl.float64)
    m = lse.to(tl.float32)
    return m, (lse - m.to(tl.float64)).to(tl.float32)


@triton.jit
def _row_target(logits_ptr, target_ptr, l_row, t_stride, ignore_index, n_cols):
    # This program's row (one a row): its logits' base pointer, its target, and whether the
    # target is a class (not ignore_index). Out-of-range targets were refused by the launcher
    # (host check or device assert); masking them here keeps every load in bounds whatever happens.
    row = tl.program_id(0).to(tl.int64)
    target = tl.load(target_ptr + row * t_stride).to(tl.int64)
    valid = (target != ignore_index) & (target >= 0) & (target < n_cols)
    return row, logits_ptr + row * l_row, target, valid


@triton.jit
def _column_block(x_row, l_col, start, cols, n_cols, other):
    # The row's column block at start: its columns, which of them lie inside the row, and its
    # logits in float32 (`other` past the row's end).
    c = start + cols
    mask = c < n_cols
    x = tl.load(x_row + c * l_col, mask=mask, other=other).to(tl.float32)
    return c, mask, x


@triton.jit
def _cross_entropy_kernel(
    # pointers: logits [rows, C] read; grad [rows, C] written (may be the logits themselves);
    # target [rows]; loss [rows] (fp32, or the op's output for reduction "none"); lse [rows]
    # fp64 (written by pass 1, else read); count: number of non-ignored targets (a 0-d tensor,
    # read with MEAN, written with FINISH); upstream: the upstream gradient of each row's loss
    # (UPSTREAM); with FINISH: tickets, int64 [2], zero at the start and left at zero (the
    # ticket and count, a flag for bad targets), reduced (the op's 0-d loss), ok (int32 0-d: 1
    # if every target is a class index or ignore_index)
    logits_ptr, grad_ptr, target_ptr, loss_ptr, lse_ptr, count_ptr, upstream_ptr, tickets_ptr, reduced_ptr,
    ok_ptr,
    # shape: (n_rows, n_cols); strides in elements: (l_row, l_col, g_row, g_col, t_stride,
    # upstream_stride), upstream_stride 0 for one scalar for every row; loss_options: (ignore_index,
    # smoothing, softcap)
    shape, strides, loss_options,
    # meta: COMPUTE_LSE: pass 1 over the row (else lse is read from lse_ptr); STORE_LSE;
    # WRITE_LOSS; WRITE_GRAD: pass 2 over the row; MEAN: gradient / count; FINISH: the last
    # program counts, checks and (REDUCE: 0 none, 1 sum, 2 mean) reduces
    BLOCK: tl.constexpr, COMPUTE_LSE: tl.constexpr, STORE_LSE: tl.constexpr, WRITE_LOSS: tl.constexpr,
    WRITE_GRAD: tl.constexpr, MEAN: tl.constexpr, UPSTREAM: tl.constexpr, SMOOTH: tl.constexpr,
    SOFTCAP: tl.constexpr, FINISH: tl.constexpr, REDUCE: tl.constexpr,
):
    # One program a row. Pass 1 walks the row in BLOCK columns keeping the running max m and
    # sum s of exp(z - m) (rescaled by exp(m_old - m_new) when the max grows); pass 2 walks it
    # again (from L2, where pass 1 just left it) and writes the gradient, in place if asked.
    n_rows, n_cols = shape
    l_row, l_col, g_row, g_col, t_stride, upstream_stride = strides
    ignore_index, smoothing, softcap = loss_options
    row, x_row, target, valid = _row_target(logits_ptr, target_ptr, l_row, t_stride, ignore_index, n_cols)
    cols = tl.arange(0, BLOCK)
    if COMPUTE_LSE:
        m = -float("inf")
        s = 0.0
        z_sum = 0.0
        for start in range(0, n_cols, BLOCK):
            c, mask, x = _column_block(x_row, l_col, start, cols, n_cols, -float("inf"))
            z = _softcapped(x, softcap, SOFTCAP)
            if SOFTCAP:
                z = tl.where(mask, z, -float("inf"))
            m, s = _online_lse(m, s, z)
            if SMOOTH:
                z_sum += tl.sum(tl.where(mask, z, 0.0), axis=0)
        log_s = tl.log(s)
        if STORE_LSE:
            # In float64: m + log s rounded to float32 is off by up to half a unit at the
            # logits' magnitude (5e-4 at 1e4), which exp(z - lse) would carry into every
            # probability; float64 keeps m and log s both, to be split again below.
            tl.store(lse_ptr + row, m.to(tl.float64) + log_s.to(tl.float64))
    else:
        m, log_s = _lse_parts(tl.load(lse_ptr + row))
    if WRITE_LOSS:
        z_t = _softcapped(tl.load(x_row + tl.where(valid, target, 0) * l_col).to(tl.float32), softcap, SOFTCAP)
        # Measured from the row's max: lse - z_t, with lse rounded at the logits' magnitude,
        # would lose a small loss (a confident, correct row) to cancellation; m - z_t is exact
        # when the target holds the max, as in torch's log_softmax.
        loss = (m - z_t) + log_s
        if SMOOTH:
            loss = (1.0 - smoothing) * (m - z_t) + smoothing * (m - z_sum / n_cols) + log_s
        tl.store(loss_ptr + row, tl.where(valid, loss, 0.0).to(loss_ptr.dtype.element_ty))
    if FINISH:
        _finish(loss_ptr, count_ptr, tickets_ptr, reduced_ptr, ok_ptr, n_rows, valid,
                (target != ignore_index) & ~valid, REDUCE)
    if WRITE_GRAD:
        scale = 1.0
        if MEAN:
            # A count of 0 means every row is ignored, and scale is never used.
            scale = scale / tl.maximum(tl.load(count_ptr).to(tl.float32), 1.0)
        if UPSTREAM:
            scale = scale * tl.load(upstream_ptr + row * upstream_stride).to(tl.float32)
        g_out = grad_ptr + row * g_row
        for start in range(0, n_cols, BLOCK):
            c, mask, x = _column_block(x_row, l_col, start, cols, n_cols, 0.0)
            z = _softcapped(x, softcap, SOFTCAP)
            # From the row's max, as the loss: exp(z - lse) would carry lse's rounding (at
            # the logits' magnitude) into every probability; z - m is exact near the max.
            d = tl.exp((z - m) - log_s)
            if SMOOTH:
                d -= smoothing / n_cols
            d = tl.where(c == target, d - (1.0 - smoothing), d)
            if SOFTCAP:
                d *= 1.0 - (z / softcap) * (z / softcap)
            # An ignored row gets exact zeros, whatever its logits (even inf or NaN).
            d = tl.where(valid, d * scale, 0.0)
            tl.store(g_out + c * g_col, d.to(grad_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _finish(loss_ptr, count_ptr, tickets_ptr, reduced_ptr, ok_ptr, n_rows, valid, bad, REDUCE: tl.constexpr):
    # Ticket and count in one int64 counter: programs taken in the low 32 bits, non-ignored
    # targets in the high 32 (rows are programs, fewer than 2^31). Stores before a ticket are
    # released by it (a barrier first: every thread's stores, the bad flag included), and the
    # taker of the last ticket acquires them all; it resets both counters for the next launch.
    if bad:
        tl.atomic_xchg(tickets_ptr + 1, 1, sem="relaxed")
    tl.debug_barrier()
    taken = tl.atomic_add(tickets_ptr, 1 + (valid.to(tl.int64) << 32), sem="acq_rel")
    if (taken & 0xFFFFFFFF) == n_rows - 1:
        tl.atomic_xchg(tickets_ptr, 0, sem="relaxed")
        flagged = tl.atomic_xchg(tickets_ptr + 1, 0, sem="relaxed")
        count = (taken >> 32) + valid.to(tl.int64)
        tl.store(count_ptr, count)
        tl.store(ok_ptr, (flagged == 0).to(tl.int32))
        if REDUCE != 0:
            # 1024 rows a step (two a thread at 16 warps): a wider step would hold registers
            # that the row loop's occupancy needs.
            rows = tl.arange(0, 1024)
            total = 0.0
            for start in range(0, n_rows, 1024):
                r = start + rows
                total += tl.sum(tl.load(loss_ptr + r, mask=r < n_rows, other=0.0), axis=0)
            if REDUCE == 2:
                total = total / count.to(tl.float32)   # no targets: 0 / 0, NaN as torch's mean
            tl.store(reduced_ptr, total.to(reduced_ptr.dtype.element_ty))


class Finish(NamedTuple):
    """What the forward's last program writes (see the module docstring): `count` (int64 0-d),
    `ok` (int32 0-d), and for reduction mean or sum `reduced` (0-d, the op's loss); `tickets`
    are two int64 counters at zero, which the launch leaves at zero."""
    tickets: torch.Tensor
    count: torch.Tensor
    ok: torch.Tensor
    reduced: torch.Tensor | None
    reduction: str


def launch_rows(logits: torch.Tensor, target: torch.Tensor, ignore_index: int, label_smoothing: float,
                softcap: float | None, *, loss: torch.Tensor | None = None, lse: torch.Tensor | None = None,
                compute_lse: bool = True, grad: torch.Tensor | None = None, count: torch.Tensor | None = None,
                upstream: torch.Tensor | None = None, finish: Finish | None = None,
                name: str = "cross_entropy") -> None:
    """One program per row of the 2-D `logits`. Writes the `loss` rows (fp32, or any float
    dtype without a reduction to finish) and fp64 `lse` rows when given (lse is read instead
    when compute_lse is False), and the gradient into `grad` (any 2-D tensor of logits'
    shape, logits itself included) scaled by 1/count and by `upstream` (a 0-d tensor or one
    value a row) when given; with `finish` (and `loss`), what the forward's last program
    writes."""
    n_rows, n_cols = logits.shape
    if n_rows == 0:
        return
    block, num_warps = row_block(n_cols)
    dummy = logits  # pointers of absent tensors; their flags keep the kernel from touching them
    reduce = 0 if finish is None else REDUCTIONS_FINISHED[finish.reduction]
    Launch(name, _cross_entropy_kernel, (n_rows,), (
        logits, dummy if grad is None else grad, target, dummy if loss is None else loss,
        dummy if lse is None else lse, finish.count if finish is not None else dummy if count is None else count,
        dummy if upstream is None else upstream, dummy if finish is None else finish.tickets,
        dummy if finish is None or finish.reduced is None else finish.reduced,
        dummy if finish is None else finish.ok,
        (n_rows, n_cols),
        (logits.stride(0), logits.stride(1), *(grad.stride() if grad is not None else (0, 0)), target.stride(0),
         upstream.stride(0) if upstream is not None and upstream.dim() else 0),
        (ignore_index, float(label_smoothing), float(softcap or 1.0)),
    ), dict(BLOCK=block, COMPUTE_LSE=compute_lse, STORE_LSE=compute_lse and lse is not None,
            WRITE_LOSS=loss is not None, WRITE_GRAD=grad is not None, MEAN=count is not None,
            UPSTREAM=upstream is not None, SMOOTH=label_smoothing != 0.0, SOFTCAP=softcap is not None,
            FINISH=finish is not None, REDUCE=reduce),
        num_warps=num_warps, num_stages=1)()


def row_block(n_cols: int) -> tuple[int, int]:
    """Columns a row program takes a step, and its warps, for rows of n_cols classes."""
    block = min(MAX_BLOCK, next_power_of_2(n_cols))
    return block, max(1, min(16, block // 256))


def check_options(ignore_index: object, label_smoothing: object, reduction: object, softcap: object) -> None:
    if not isinstance(ignore_index, int) or isinstance(ignore_index, bool):
        raise TypeError(f"ignore_index must be an int, got {type(ignore_index).__name__}")
    if not isinstance(label_smoothing, (int, float)) or not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be a float in [0, 1], got {label_smoothing!r}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    if softcap is not None and (not isinstance(softcap, (int, float)) or not softcap > 0):
        raise ValueError(f"softcap must be None or a positive float, got {softcap!r}")


def as_float_options(label_smoothing: float, softcap: float | None) -> tuple[float, float | None]:
    """The float options as the custom ops' schemas declare them (an int 0 becomes 0.0), after
    check_options has accepted them."""
    return float(label_smoothing), None if softcap is None else float(softcap)


def check_target(target: object, rows: int, rows_of: str) -> torch.Tensor:
    """target: int64 or int32, one class index per row of `rows_of`."""
    check_tensor("target", target, TARGET_DTYPES)
    if target.dim() != 1 or target.shape[0] != rows:
        raise ValueError(f"target has shape {tuple(target.shape)}, expected ({rows},): one class index "
                         f"per row of {rows_of}")
    return target


def check_target_values(target: torch.Tensor, n_classes: int, ignore_index: int) -> None:
    """Refuse class indices outside [0, n_classes) other than ignore_index, without a host
    sync on the GPU. On the CPU (the interpreter) the values are read here and a ValueError
    names target. On a GPU reading them would stall the host until the GPU catches up, so a
    device-side assert is queued instead (torch's own behaviour for F.cross_entropy on CUDA):
    the kernel masks such rows, and the assert fails the next synchronising call loudly."""
    if target.numel() == 0:
        return
    bad = (target != ignore_index) & ((target < 0) | (target >= n_classes))
    if target.device.type == "cuda":
        torch._assert_async(~bad.any(), "target has class indices outside [0, n_classes) "
                                        "that are not ignore_index")
    elif bad.any():
        first = target[bad][0].item()
        raise ValueError(f"target holds class index {first}, outside [0, {n_classes}) and not "
                         f"ignore_index={ignore_index}")


def valid_count(target: torch.Tensor, ignore_index: int) -> torch.Tensor:
    """The number of non-ignored targets, as a 0-d tensor on target's device (no host sync):
    the mean's denominator, which the kernel reads before it writes gradients."""
    return (target != ignore_index).sum()


def reduce_rows(loss_rows: torch.Tensor, count: torch.Tensor | None, reduction: str) -> torch.Tensor:
    """The op's loss from the fp32 per-row losses: as torch, a mean over no rows is 0/0 = NaN."""
    if reduction == "none":
        return loss_rows
    total = loss_rows.sum()
    return total / count if reduction == "mean" else total


def same_dtype(name: str, t: torch.Tensor, like_name: str, like: torch.Tensor) -> None:
    if t.dtype != like.dtype:
        raise TypeError(f"{name} has dtype {dtype_name(t.dtype)} but {like_name} has {dtype_name(like.dtype)}; "
                        "they must match")
