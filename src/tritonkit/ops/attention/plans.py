"""Launch plans of the attention passes: everything a launcher call does besides allocating
its outputs and launching, worked out once per layout and kept.

Checking q, k, v, choosing between the Gluon and Triton kernels and between tensor
descriptors and pointers, picking tiles and sizing grids and output strides cost several
times the launches themselves, and they depend on the call's layout only: each tensor's
type, shape, strides, dtype, device and whether its data starts on a 16-byte boundary (what
TMA and Triton's specialisation read of it); the flags (causal, scale, window, softcap, and
the launchers' explicit tiles, tma, gluon, concurrent_dq) with their types; the
TRITONKIT_AUTOTUNE setting; and the recordings open (the inspector records GPU launches on
CPU tensors, `_launch.recording_state`). A layout's first call builds its plan, running
every check, so bad input raises as it always did, naming the argument, and is never kept;
later calls allocate, build their descriptors and launch through `LaunchTemplate`s, which
go straight to the compiled launcher once they have one. The op's eager backward finds its
plan through its forward's (`ForwardPlan.backward`): its q, k, v, flags, o and lse are what
that plan was keyed by or made, so only do's and dlse's layouts and the setting are keyed
again. Values are never planned: data pointers are the call's own, and packed sequences'
cu_seqlens are checked on every call where they are checked at all (CPU tensors); whether the
queries' and the keys' are one tensor is keyed (the Gluon kernels take a window only then).

A plan's outputs are fresh allocations, which torch's allocators align to 64 bytes or more:
with the inputs' alignment in the key, every tensor a template launches with has the
alignment it was bound with (`LaunchTemplate`'s contract).
"""

from __future__ import annotations

import torch

from ... import _launch
from ..._launch import LaunchTemplate, record_choice
from ..._streams import beside_the_current_stream
from ..._layout import cdiv
from .backward import _attn_bwd_dkdv_kernel, _attn_bwd_dq_kernel, _attn_bwd_preprocess_kernel
from .checks import (_check_cu_values, _check_qkv, _check_saved, _check_varlen, _empty_like_order,
                     _check_score_tensors, _head_dim_innermost, _needs_copy, _packed, _resolve_scale)
from .configs import (DKDV_TUNED_ROWS, _attn_bwd_dkdv_tuned, _attn_bwd_dq_tuned, _attn_fwd_tuned,
                      _autotune_enabled, _interpreting, _row_keys, fixed_configs)
from .descriptors import _descriptor_maker, _use_tma
from .forward import _attn_fwd_kernel
from .sinks import sinks_grad
from .head import head_tiles
from .order import longest_first_span, num_sms
from .paths import gluon_backward, gluon_forward
from .plan_keys import (_PLANS, MAX_PLANS, _keep, _layout, _one_cu_seqlens, _setting, backward_key,  # noqa: F401
                        clear, planned)
from .score import Score, kernel_qk_scale, score_of

# Running dQ on a side stream beside dK/dV fills the SMs the other pass's last, uneven
# programs leave idle, a few percent of a long backward (notes/attention.md); the stream
# switches and events cost host time, which a short backward, bound by host time, pays in
# full. Side stream from this many multiply-adds of the forward's visible Q K^T on: the
# backwards measured no faster with it below (BENCHMARKS.md).
CONCURRENT_DQ_MIN_WORK = 2**35


def _empty(shape: tuple, stride: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An output of the plans (o, dq, dk, dv): uninitialised, the kernels write every element."""
    return torch.empty_strided(shape, stride, dtype=dtype, device=device)


def _strides_like(like: torch.Tensor, shape: tuple) -> tuple:
    """The strides `_empty_like_order` gives an output of this shape laid out like `like`."""
    return _empty_like_order(like, shape, torch.float16, device="meta").stride()


def _copy(t: torch.Tensor, copy: bool) -> torch.Tensor:
    return t.contiguous() if copy else t


def _copies(*tensors: torch.Tensor) -> tuple[bool, ...] | None:
    """Which of a dense plan's operands `_head_dim_innermost` copies; None when none is (the
    layouts models make), which the plans' calls test once instead of once a tensor."""
    copies = tuple(_needs_copy(t) for t in tensors)
    return copies if any(copies) else None


def _score(score_args: tuple, alibi, sinks, Nq: int, Nk: int, D: int, batch: int, heads: int, device,
           equal_lengths: bool) -> tuple[Score, float]:
    """The call's `Score` (for kernels compiled here or run through the interpreter) and scale,
    from `launch.py`'s score_args and the score's tensors, all validated (`batch`: the
    sequences of a packed batch). equal_lengths: every sequence has as many queries as keys."""
    causal, scale, window_left, window_right, softcap, bottom_right = score_args
    scale = _resolve_scale(scale, D)
    alibi_kind = _check_score_tensors(alibi, sinks, batch, heads, device)
    return score_of(causal, window_left, window_right, softcap, Nq, Nk, scale > 0, _interpreting(), bottom_right,
                    alibi_kind, sinks is not None, equal_lengths), scale


def _score_tensors(alibi, sinks) -> tuple:
    """alibi_slopes and sinks as the kernels read them: float32 contiguous slopes, contiguous
    sinks (a logit a head, in their own dtype)."""
    return (None if alibi is None else alibi.to(torch.float32).contiguous(),
            None if sinks is None else sinks.contiguous())


def _head_span(score: Score, varlen: tuple | None, heads: int, blocks: int, device: torch.device) -> int:
    """A Triton pass's HEAD_SPAN (`order.longest_first_span`): heads x blocks programs (any
    window gives its programs about one length)."""
    return longest_first_span(score.causal, score.window, varlen is not None, heads, blocks, num_sms(device))


def _query_grid(n: int, block: int, heads: int, batch: int, seqs: int | None) -> tuple[int, int, int]:
    """Programs of a pass that tiles n rows in blocks (mask._program_tile): one per block, head
    and batch; for packed sequences cdiv(total, block) + seqs per head, which covers every
    sequence's blocks whatever their lengths."""
    return (cdiv(n, block), heads, batch) if seqs is None else (cdiv(n, block) + seqs, heads, 1)


def _keys_a_row_sees(Nq: int, Nk: int, score: Score, varlen: tuple | None) -> int:
    """About how many keys a query row sees (`configs._row_keys`); for packed sequences the
    mean length stands for a row's."""
    if varlen is not None:
        Nq = Nk = max(Nq, Nk) // max(varlen[0], 1)
    return _row_keys(Nq, Nk, score.causal, score.window_left, score.window_right)


# ---------------------------------------------------------------------------------------
# Forward
# ---------------------------------------------------------------------------------------

class _ForwardLaunch:
    """The forward pass of a plan on (B, H, N, D) views: the Gluon kernel, or the Triton
    kernel's template and the makers of q's, k's and v's descriptors (None: pointers)."""

    __slots__ = ("choice", "gluon", "template", "descriptors")

    def __init__(self, choice, gluon=None, template=None, descriptors=None):
        self.choice, self.gluon, self.template, self.descriptors = choice, gluon, template, descriptors

    def __call__(self, q, k, v, o, lse, cu_q=None, cu_k=None, alibi=None, sinks=None) -> None:
        record_choice(self.choice)
        if self.gluon is not None:     # (never with ALiBi: `paths.gluon_forward`)
            self.gluon(q, k, v, o, lse, cu_q, cu_k, sinks)
            return
        if self.descriptors is not None:
            of_q, of_k, of_v = self.descriptors
            q, k, v = of_q(q), of_k(k), of_v(v)
        self.template(q, k, v, o, lse, cu_q, cu_k, alibi, sinks)


def _forward_launch(q, k, v, o_stride: tuple, scale: float, score: Score, varlen: tuple | None, config, tma,
                    gluon) -> _ForwardLaunch | None:
    """The forward of (B, H, N, D) q, k and (B, Hkv, Nk, Dv) v (packed: B = 1 and `varlen` =
    (number of sequences, whether queries and keys share one cu_seqlens: `_one_cu_seqlens`))
    writing o (B, H, Nq, Dv) of these strides and lse (B, H, Nq); None where nothing is
    launched."""
    B, H, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    if B == 0 or Nq == 0 or Nk == 0:
        return None
    softcap = score.softcap
    choice = gluon_forward(q, k, v, scale, score, varlen, config, tma, gluon)
    if choice.path == "gluon":
        from .gluon.attention_fwd import ForwardLaunch
        return _ForwardLaunch(choice, gluon=ForwardLaunch(q, k, scale, score, None if varlen is None else varlen[0],
                                                          o_stride))
    head = head_tiles(D, v.shape[-1])
    use_tma = _use_tma(tma, q, k, v)
    row_keys = _keys_a_row_sees(Nq, Nk, score, varlen)
    tile = config or fixed_configs(head.qk, row_keys, block_dv=head.v)["fwd_tma" if use_tma else "fwd"]
    seqs = None if varlen is None else varlen[0]
    tail = (Nq, Nk, (D, H // Hkv), kernel_qk_scale(scale, softcap), seqs,
            (q.stride(), k.stride(), v.stride(), tuple(o_stride)))
    constexprs = dict(SCORE=score, HEAD=head, USE_TMA=use_tma,
                      HEAD_SPAN=_head_span(score, varlen, B * H, cdiv(Nq, tile.block_m), q.device))
    if config is None and _autotune_enabled():
        template = LaunchTemplate("attention_fwd", _attn_fwd_tuned,
                                  lambda meta: _query_grid(Nq, meta["BLOCK_M"], H, B, seqs), tail, constexprs,
                                  num_warps=None, num_stages=None)
    else:
        template = LaunchTemplate("attention_fwd", _attn_fwd_kernel, _query_grid(Nq, tile.block_m, H, B, seqs),
                                  tail, dict(constexprs, **tile.meta()), tile.num_warps, tile.num_stages)
    descriptors = None
    if use_tma:
        descriptors = (_descriptor_maker(q, tile.block_m, head.qk), _descriptor_maker(k, tile.block_n, head.qk),
                       _descriptor_maker(v, tile.block_n, head.v))
    return _ForwardLaunch(choice, template=template, descriptors=descriptors)


class ForwardPlan:
    """A dense forward: outputs' shapes, strides, dtype and device, which of q, k, v are
    copied (`_head_dim_innermost`; None: none is), and the launch (None: an empty batch,
    query or key sequence; `no_keys`: Nk == 0, every row sees none)."""

    __slots__ = ("o_shape", "o_stride", "lse_shape", "dtype", "device", "copies", "no_keys", "launch")

    def __init__(self, o_shape, o_stride, lse_shape, dtype, device, copies, no_keys, launch):
        self.o_shape, self.o_stride, self.lse_shape = o_shape, o_stride, lse_shape
        self.dtype, self.device, self.copies, self.no_keys, self.launch = dtype, device, copies, no_keys, launch

    def run(self, q, k, v, alibi=None, sinks=None) -> tuple[torch.Tensor, torch.Tensor]:
        o = _empty(self.o_shape, self.o_stride, self.dtype, self.device)
        lse = torch.empty(self.lse_shape, dtype=torch.float32, device=self.device)
        if self.no_keys:
            return o.zero_(), _no_keys_lse(lse, sinks, 1)
        if self.copies is not None:
            q, k, v = (_copy(t, copy) for t, copy in zip((q, k, v), self.copies))
        if self.launch is not None:
            self.launch(q, k, v, o, lse, None, None, *_score_tensors(alibi, sinks))
        return o, lse

    def backward(self, do, q, k, v, o, lse, causal, scale, window_left, window_right, softcap, dlse,
                 bottom_right=False, alibi=None, sinks=None) -> tuple[torch.Tensor, ...]:
        """`attention_bwd` with its default options, for a call that this plan's call saved:
        q, k, v and the flags it was planned for, o and lse as `run` made them (fresh, so
        aligned). Of `backward_key` only do's and dlse's layouts and the setting can differ
        from what this plan was keyed by, so the backward's plan is kept under those and
        the plan itself."""
        key = (self, _layout(do), None if dlse is None else _layout(dlse), _setting())
        plan = _PLANS.get(key)
        if plan is None:
            score_args = (causal, scale, window_left, window_right, softcap, bottom_right)
            plan = planned(backward_key, build_backward, do, q, k, v, o, lse, score_args, alibi, sinks, dlse, None,
                           None, None, None, None)
            _keep(key, plan)
        return plan.run(do, q, k, v, o, lse, dlse, alibi, sinks)


def _no_keys_lse(lse: torch.Tensor, sinks, head_dim: int) -> torch.Tensor:
    """The lse of rows that see no key: -inf, or with sinks the head's sink (its only term);
    `head_dim`: lse's dim of heads."""
    if sinks is None:
        return lse.fill_(float("-inf"))
    shape = [1] * lse.dim()
    shape[head_dim] = -1
    return lse.copy_(sinks.float().view(shape).expand_as(lse))


def build_forward(q, k, v, score_args, alibi, sinks, config, tma, gluon) -> ForwardPlan:
    B, H, Nq, D, Hkv, Nk, Dv = _check_qkv(q, k, v)
    score, scale = _score(score_args, alibi, sinks, Nq, Nk, D, B, H, q.device, Nq == Nk)
    copies = _copies(q, k, v)
    q, k, v = (_head_dim_innermost(t) for t in (q, k, v))
    o_stride = _strides_like(q, (B, H, Nq, Dv))
    return ForwardPlan((B, H, Nq, Dv), o_stride, (B, H, Nq), q.dtype, q.device, copies, Nk == 0,
                       _forward_launch(q, k, v, o_stride, scale, score, None, config, tma, gluon))


class VarlenForwardPlan:
    """A forward over packed sequences: o (Tq, H, Dv) and lse (H, Tq), the kernels run on
    (1, H, total, D) views; `no_keys`: Tk == 0, every row sees none."""

    __slots__ = ("o_shape", "lse_shape", "totals", "copies", "no_keys", "launch")

    def __init__(self, o_shape, lse_shape, totals, copies, no_keys, launch):
        self.o_shape, self.lse_shape, self.totals, self.copies = o_shape, lse_shape, totals, copies
        self.no_keys, self.launch = no_keys, launch

    def run(self, q, k, v, cu_q, cu_k, alibi=None, sinks=None) -> tuple[torch.Tensor, torch.Tensor]:
        _check_cu_values("cu_seqlens_q", cu_q, self.totals[0])
        _check_cu_values("cu_seqlens_k", cu_k, self.totals[1])
        o = torch.empty(self.o_shape, dtype=q.dtype, device=q.device)
        lse = torch.empty(self.lse_shape, dtype=torch.float32, device=q.device)
        if self.no_keys:
            return o.zero_(), _no_keys_lse(lse, sinks, 0)
        if self.launch is not None:
            q4, k4, v4 = (_copy(_packed(t), c) for t, c in zip((q, k, v), self.copies))
            self.launch(q4, k4, v4, _packed(o), lse.unsqueeze(0), cu_q, cu_k, *_score_tensors(alibi, sinks))
        return o, lse


def build_varlen_forward(q, k, v, cu_q, cu_k, score_args, alibi, sinks, config, tma, gluon) -> VarlenForwardPlan:
    Tq, H, D, Tk, Hkv, S, Dv = _check_varlen(q, k, v, cu_q, cu_k)
    score, scale = _score(score_args, alibi, sinks, Tq, Tk, D, S, H, q.device, _one_cu_seqlens(cu_q, cu_k))
    views = [_packed(t) for t in (q, k, v)]
    copies = tuple(_needs_copy(t) for t in views)
    q4, k4, v4 = (_head_dim_innermost(t) for t in views)
    o_stride = _packed(torch.empty((Tq, H, Dv), device="meta")).stride()
    varlen = (S, _one_cu_seqlens(cu_q, cu_k))
    launch = None if Tk == 0 else _forward_launch(q4, k4, v4, o_stride, scale, score, varlen, config, tma, gluon)
    return VarlenForwardPlan((Tq, H, Dv), (H, Tq), (Tq, Tk), copies, Tk == 0, launch)


# ---------------------------------------------------------------------------------------
# Backward
# ---------------------------------------------------------------------------------------

class _BackwardLaunches:
    """The backward passes of a plan on (B, H, N, D) views: the Gluon kernels (whose dQ pass
    forms delta, so it runs first and alone), or the preprocess (delta) and the Triton dK/dV
    and dQ templates with the makers of the descriptors each streams (None: pointers), dQ on a
    side stream beside dK/dV where `concurrent`. gluon_dkdv: a Gluon plan whose dK/dV pass runs
    in place of the Triton one (head dim 256, where the Gluon dQ pass has no kernel)."""

    __slots__ = ("preprocess", "choice", "gluon", "gluon_dkdv", "dkdv", "dq", "dkdv_descriptors", "dq_descriptors",
                 "concurrent")

    def __init__(self, preprocess, choice, gluon=None, dkdv=None, dq=None, dkdv_descriptors=None,
                 dq_descriptors=None, concurrent=False, gluon_dkdv=None):
        self.preprocess, self.choice, self.gluon, self.gluon_dkdv = preprocess, choice, gluon, gluon_dkdv
        self.dkdv, self.dq = dkdv, dq
        self.dkdv_descriptors, self.dq_descriptors = dkdv_descriptors, dq_descriptors
        self.concurrent = concurrent

    def __call__(self, do, q, k, v, o, lse, dlse, dq, dk, dv, cu_q=None, cu_k=None, alibi=None,
                 sinks=None) -> torch.Tensor | None:
        """lse and dlse contiguous (the plans' runs copy them where they are not); alibi and sinks
        as the kernels read them (`_score_tensors`). Returns d(sinks), or None without them."""
        if self.gluon is not None:     # (never with ALiBi: `paths.gluon_backward`)
            record_choice(self.choice)
            delta = self.gluon(do, q, k, v, o, lse, dlse, dq, dk, dv, cu_q, cu_k)
            return None if sinks is None else sinks_grad(sinks, lse, delta)
        delta = torch.empty(lse.shape, dtype=torch.float32, device=lse.device)
        self.preprocess(o, do, delta, dlse)
        dsinks = None if sinks is None else sinks_grad(sinks, lse, delta)
        record_choice(self.choice)
        if self.gluon_dkdv is not None:
            self.gluon_dkdv.run_dkdv(do, q, k, v, lse, delta, dk, dv, cu_q, cu_k)
        else:
            q_in, do_in = q, do
            if self.dkdv_descriptors is not None:
                of_q, of_do = self.dkdv_descriptors
                q_in, do_in = of_q(q), of_do(do)
            self.dkdv(q_in, k, v, do_in, dk, dv, lse, delta, cu_q, cu_k, alibi)
        k_in, v_in = k, v
        if self.dq_descriptors is not None:
            of_k, of_v = self.dq_descriptors
            k_in, v_in = of_k(k), of_v(v)
        if self.concurrent:
            with beside_the_current_stream(q.device):
                self.dq(q, k_in, v_in, do, dq, lse, delta, cu_q, cu_k, alibi)
        else:
            self.dq(q, k_in, v_in, do, dq, lse, delta, cu_q, cu_k, alibi)
        return dsinks


def _backward_launches(do, q, k, v, o, lse, dq_stride: tuple, dk_stride: tuple, dv_stride: tuple, scale: float,
                       score: Score, varlen: tuple | None, dkdv_config, dq_config, tma, concurrent_dq,
                       gluon) -> _BackwardLaunches:
    """The backward of (B, H, N, D) tensors (v, o, do: head dim Dv) with B, Nq > 0 (packed: B =
    1, `varlen` as in `_forward_launch`), writing dq, dk, dv of these strides."""
    # A sink changes only lse, which every backward kernel reads, and its own gradient comes
    # from lse and delta (`sinks.sinks_grad`): the kernels are those compiled without sinks.
    score = score._replace(sinks=False)
    B, H, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    softcap = score.softcap
    row_keys = _keys_a_row_sees(Nq, Nk, score, varlen)
    head = head_tiles(D, v.shape[-1])
    group = H // Hkv
    tuned = _autotune_enabled()
    fixed = fixed_configs(head.qk, busy_dkdv=softcap > 0, packed=varlen is not None, block_dv=head.v)
    seqs = None if varlen is None else varlen[0]
    work = B * H * Nq * row_keys * D
    choice = gluon_backward(do, q, k, v, o, lse, scale, score, varlen, dkdv_config, dq_config, tma, gluon, work)
    gluon_plan = None
    if choice.path == "gluon":
        from .gluon.attention_bwd import BackwardLaunches
        gluon_plan = BackwardLaunches(q, k, scale, score, seqs, dq_stride, dk_stride)
        if gluon_plan.dq is not None:     # its dQ pass forms delta: no preprocess
            return _BackwardLaunches(None, choice, gluon=gluon_plan)
    pre_block = 32 if _interpreting() else 64
    preprocess = LaunchTemplate("attention_bwd_preprocess", _attn_bwd_preprocess_kernel,
                                (cdiv(Nq, pre_block), H, B), (Nq, v.shape[-1], *o.stride(), *do.stride()),
                                dict(BLOCK_M=pre_block, BLOCK_D=head.v, PAD_D=head.pad_v), num_warps=4, num_stages=1)
    if concurrent_dq is None:
        concurrent_dq = work >= CONCURRENT_DQ_MIN_WORK
    concurrent = bool(concurrent_dq) and q.device.type == "cuda" and _launch.launches_execute()

    common = dict(SCORE=score, HEAD=head)
    qk_scale = kernel_qk_scale(scale, softcap)
    tma_dkdv, tma_dq = _use_tma(tma, q, do), _use_tma(tma, k, v)
    dkdv_cfg = dkdv_config or fixed["dkdv_tma" if tma_dkdv else "dkdv"]
    dkdv_span = _head_span(score, varlen, B * Hkv, cdiv(Nk, dkdv_cfg.block_n), q.device)
    dkdv_tail = (Nq, Nk, (D, group), (qk_scale, scale), seqs,
                 (q.stride(), k.stride(), v.stride(), do.stride(), tuple(dk_stride), tuple(dv_stride)))
    # Query rows are masked (CHECK_M) unless every query block is full: always for packed
    # sequences, whose lengths the host does not know (the kernel then masks only the query
    # blocks that may reach past their sequence's end).
    if gluon_plan is not None:      # the Gluon dK/dV pass alone (head dim 256)
        dkdv = None
    elif dkdv_config is None and tuned:
        dkdv = LaunchTemplate("attention_bwd_dkdv", _attn_bwd_dkdv_tuned,
                              lambda meta: _query_grid(Nk, meta["BLOCK_N"], Hkv, B, seqs), dkdv_tail,
                              dict(common, CHECK_M=varlen is not None or Nq % DKDV_TUNED_ROWS != 0, USE_TMA=tma_dkdv,
                                   HEAD_SPAN=dkdv_span),
                              num_warps=None, num_stages=None)
    else:
        dkdv = LaunchTemplate("attention_bwd_dkdv", _attn_bwd_dkdv_kernel,
                              _query_grid(Nk, dkdv_cfg.block_n, Hkv, B, seqs), dkdv_tail,
                              dict(common, CHECK_M=varlen is not None or Nq % dkdv_cfg.block_m != 0,
                                   USE_TMA=tma_dkdv, HEAD_SPAN=dkdv_span, **dkdv_cfg.meta()),
                              dkdv_cfg.num_warps, dkdv_cfg.num_stages)
    dq_cfg = dq_config or fixed["dq_tma" if tma_dq else "dq"]
    dq_span = _head_span(score, varlen, B * H, cdiv(Nq, dq_cfg.block_m), q.device)
    dq_tail = (Nq, Nk, (D, group), (qk_scale, scale), seqs,
               (q.stride(), k.stride(), v.stride(), do.stride(), tuple(dq_stride)))
    if dq_config is None and tuned:
        dq = LaunchTemplate("attention_bwd_dq", _attn_bwd_dq_tuned,
                            lambda meta: _query_grid(Nq, meta["BLOCK_M"], H, B, seqs), dq_tail,
                            dict(common, USE_TMA=tma_dq, HEAD_SPAN=dq_span), num_warps=None, num_stages=None)
    else:
        dq = LaunchTemplate("attention_bwd_dq", _attn_bwd_dq_kernel, _query_grid(Nq, dq_cfg.block_m, H, B, seqs),
                            dq_tail, dict(common, USE_TMA=tma_dq, HEAD_SPAN=dq_span, **dq_cfg.meta()), dq_cfg.num_warps,
                            dq_cfg.num_stages)
    dkdv_descriptors = dq_descriptors = None
    if tma_dkdv and dkdv is not None:
        dkdv_descriptors = (_descriptor_maker(q, dkdv_cfg.block_m, head.qk),
                            _descriptor_maker(do, dkdv_cfg.block_m, head.v))
    if tma_dq:
        dq_descriptors = (_descriptor_maker(k, dq_cfg.block_n, head.qk), _descriptor_maker(v, dq_cfg.block_n, head.v))
    return _BackwardLaunches(preprocess, choice, dkdv=dkdv, dq=dq, dkdv_descriptors=dkdv_descriptors,
                             dq_descriptors=dq_descriptors, concurrent=concurrent, gluon_dkdv=gluon_plan)


class BackwardPlan:
    """A dense backward: the gradients' shapes and strides, their dtype and device, which of
    q, k, v, do, o, lse, dlse are copied (None: none is), and the launches (None: an empty
    batch, an empty query whose dk, dv are zeros (`zero_kv`) or an empty key sequence whose
    dq is (`zero_q`))."""

    __slots__ = ("grads", "dtype", "device", "copies", "launches", "zero_kv", "zero_q")

    def __init__(self, grads, dtype, device, copies, launches, zero_kv, zero_q):
        self.grads, self.dtype, self.device = grads, dtype, device
        self.copies, self.launches, self.zero_kv, self.zero_q = copies, launches, zero_kv, zero_q

    def run(self, do, q, k, v, o, lse, dlse, alibi=None, sinks=None) -> tuple:
        """(dq, dk, dv, d(sinks) or None)."""
        if self.copies is not None:
            do, q, k, v, o, lse = (_copy(t, copy) for t, copy in zip((do, q, k, v, o, lse), self.copies))
            dlse = None if dlse is None else dlse.contiguous()
        (dq_shape, dq_stride), (dk_shape, dk_stride), (dv_shape, dv_stride) = self.grads
        dq = _empty(dq_shape, dq_stride, self.dtype, self.device)
        dk = _empty(dk_shape, dk_stride, self.dtype, self.device)
        dv = _empty(dv_shape, dv_stride, self.dtype, self.device)
        dsinks = None
        if self.launches is not None:
            dsinks = self.launches(do, q, k, v, o, lse, dlse, dq, dk, dv, None, None, *_score_tensors(alibi, sinks))
        elif self.zero_kv:
            dk.zero_(), dv.zero_()
        elif self.zero_q:
            dq.zero_()
        if sinks is not None and dsinks is None:    # no launch: delta from do and o in torch
            dsinks = sinks_grad(sinks, lse, _torch_delta(do, o, dlse))
        return dq, dk, dv, dsinks


def _torch_delta(do: torch.Tensor, o: torch.Tensor, dlse) -> torch.Tensor:
    """delta = rowsum(dO O) - dlse in torch, (B, H, N) of (B, H, N, D) do and o, for the
    backwards that launch nothing (an empty query or key sequence)."""
    delta = (do.float() * o.float()).sum(-1)
    return delta if dlse is None else delta - dlse


def build_backward(do, q, k, v, o, lse, score_args, alibi, sinks, dlse, dkdv_config, dq_config, tma, concurrent_dq,
                   gluon) -> BackwardPlan:
    B, H, Nq, D, Hkv, Nk, Dv = _check_qkv(q, k, v)
    _check_saved(do, o, lse, dlse, q, v, (B, H, Nq))
    score, scale = _score(score_args, alibi, sinks, Nq, Nk, D, B, H, q.device, Nq == Nk)
    copies = _copies(do, q, k, v, o)
    if copies is not None or not lse.is_contiguous() or not (dlse is None or dlse.is_contiguous()):
        copies = (*(copies or (False,) * 5), True)  # lse (and dlse): the kernels read them flat
    do, q, k, v, o = (_head_dim_innermost(t) for t in (do, q, k, v, o))
    shapes = ((B, H, Nq, D), (B, Hkv, Nk, D), (B, Hkv, Nk, Dv))
    strides = tuple(_strides_like(t, shape) for t, shape in zip((q, k, v), shapes))
    launches = None
    if B > 0 and Nq > 0 and Nk > 0:
        launches = _backward_launches(do, q, k, v, o, lse, *strides, scale, score, None, dkdv_config, dq_config, tma,
                                      concurrent_dq, gluon)
    return BackwardPlan(tuple(zip(shapes, strides)), q.dtype, q.device, copies, launches, B > 0 and Nq == 0,
                        B > 0 and Nq > 0 and Nk == 0)


class VarlenBackwardPlan:
    """A backward over packed sequences: dq, dk, dv (T, heads, D) contiguous, the kernels on
    (1, H, total, D) views; `no_keys`: Tk == 0 (dq is zeros)."""

    __slots__ = ("totals", "copies", "no_keys", "launches")

    def __init__(self, totals, copies, no_keys, launches):
        self.totals, self.copies, self.no_keys, self.launches = totals, copies, no_keys, launches

    def run(self, do, q, k, v, o, lse, dlse, cu_q, cu_k, alibi=None, sinks=None) -> tuple:
        """(dq, dk, dv, d(sinks) or None)."""
        _check_cu_values("cu_seqlens_q", cu_q, self.totals[0])
        _check_cu_values("cu_seqlens_k", cu_k, self.totals[1])
        dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
        dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
        dsinks = None
        if self.no_keys:
            dq.zero_()
        else:
            views = [_copy(_packed(t), c) for t, c in zip((do, q, k, v, o), self.copies)]
            dq4, dk4, dv4 = _packed(dq), _packed(dk), _packed(dv)
            if self.launches is not None:
                dsinks = self.launches(*views, lse.contiguous().unsqueeze(0),
                                       None if dlse is None else dlse.contiguous().unsqueeze(0), dq4, dk4, dv4, cu_q,
                                       cu_k, *_score_tensors(alibi, sinks))
            else:  # no queries: nothing flows back to the keys
                dk.zero_(), dv.zero_()
        if sinks is not None and dsinks is None:    # no launch: delta from do and o in torch
            dsinks = sinks_grad(sinks, lse[None], _torch_delta(_packed(do), _packed(o),
                                                                None if dlse is None else dlse[None]))
        return dq, dk, dv, dsinks


def build_varlen_backward(do, q, k, v, o, lse, cu_q, cu_k, score_args, alibi, sinks, dlse, dkdv_config, dq_config,
                          tma, concurrent_dq, gluon) -> VarlenBackwardPlan:
    Tq, H, D, Tk, Hkv, S, Dv = _check_varlen(q, k, v, cu_q, cu_k)
    _check_saved(do, o, lse, dlse, q, v, (H, Tq))
    score, scale = _score(score_args, alibi, sinks, Tq, Tk, D, S, H, q.device, _one_cu_seqlens(cu_q, cu_k))
    views = [_packed(t) for t in (do, q, k, v, o)]
    copies = tuple(_needs_copy(t) for t in views)
    do4, q4, k4, v4, o4 = (_head_dim_innermost(t) for t in views)
    launches = None
    if Tk > 0 and Tq > 0:
        grads = [_packed(torch.empty(shape, device="meta")).stride()
                 for shape in ((Tq, H, D), (Tk, Hkv, D), (Tk, Hkv, Dv))]
        varlen = (S, _one_cu_seqlens(cu_q, cu_k))
        launches = _backward_launches(do4, q4, k4, v4, o4, lse.unsqueeze(0), *grads, scale, score, varlen,
                                      dkdv_config, dq_config, tma, concurrent_dq, gluon)
    return VarlenBackwardPlan((Tq, Tk), copies, Tk == 0, launches)
