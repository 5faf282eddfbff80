"""Attention launchers: the forward and the backward passes of dense batches (B, H, N, D) and
of packed sequences (total, H, D) delimited by cu_seqlens. Each call finds the plan of its
layout (plans.py: checks, path and tile choices, grids, output strides, made once per
layout) and runs it: allocation and launches.

Loads are plain pointer loads, right for any strides and element offset, except on Hopper
and later, where the tiles each kernel streams (q, k, v in the forward; q, dO in dK/dV; k, v
in dQ) are read through tensor descriptors when `_tma_ok` has checked on the host that their
bases and strides allow it (USE_TMA), and otherwise, silently, through pointers. Packed
sequences run the same kernels on (1, H, total, D) views of their tensors.
"""

from collections.abc import Callable

import torch

from .configs import TileConfig
from .plan_keys import backward_key, forward_key, planned, varlen_backward_key, varlen_forward_key
from .plans import build_backward, build_forward, build_varlen_backward, build_varlen_forward


# ---------------------------------------------------------------------------------------
# Forward
# ---------------------------------------------------------------------------------------

def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  scale: float | None = None, window_left: int = -1, window_right: int = -1,
                  softcap: float = 0.0, bottom_right: bool = False, alibi_slopes: torch.Tensor | None = None,
                  sinks: torch.Tensor | None = None, *, config: TileConfig | None = None,
                  tma: bool | None = None, gluon: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Launcher of the forward pass. Returns (o, lse): o like q (B, H, Nq, D) in q's dtype,
    lse (B, H, Nq) float32, the natural-log sum of exp(scores) per query row (-inf for a row
    that sees no key, whose o is 0).

    causal, window_left, window_right (-1: unbounded), softcap (0: none), bottom_right (the
    alignment of the causal and window bounds), alibi_slopes, sinks: what happens to a score, as
    `tritonkit.attention` says (score.py).
    config: a TileConfig to launch with; None autotunes on a GPU (unless TRITONKIT_AUTOTUNE=0)
    and uses `fixed_configs` otherwise.
    tma: None reads q, k, v through tensor descriptors (TMA) wherever `_tma_ok` allows it and
    through pointers elsewhere; False always through pointers; True through descriptors, or a
    ValueError if the inputs do not allow them. (Benchmarks and tests compare the paths.)
    gluon: None runs the Gluon kernel on Hopper where `paths.gluon_forward` chooses it; False
    always the Triton kernels; True the Gluon kernel, or a ValueError where it cannot run.
    """
    score_args = (causal, scale, window_left, window_right, softcap, bottom_right)
    return planned(forward_key, build_forward, q, k, v, score_args, alibi_slopes, sinks, config, tma,
                   gluon).run(q, k, v, alibi_slopes, sinks)


def attention_fwd_eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        scale: float | None = None, window_left: int = -1, window_right: int = -1,
                        softcap: float = 0.0, bottom_right: bool = False, alibi_slopes: torch.Tensor | None = None,
                        sinks: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, Callable]:
    """`attention_fwd` with its default options, as the op's eager roads run it: (o, lse, the
    backward launcher of this call's plan, `ForwardPlan.backward`), so that the backward of
    the saved tensors finds its plan without keying every tensor again."""
    score_args = (causal, scale, window_left, window_right, softcap, bottom_right)
    plan = planned(forward_key, build_forward, q, k, v, score_args, alibi_slopes, sinks, None, None, None)
    o, lse = plan.run(q, k, v, alibi_slopes, sinks)
    return o, lse, plan.backward


def attention_varlen_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                         cu_seqlens_k: torch.Tensor, causal: bool = False, scale: float | None = None,
                         window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                         bottom_right: bool = False, alibi_slopes: torch.Tensor | None = None,
                         sinks: torch.Tensor | None = None, *, config: TileConfig | None = None,
                         tma: bool | None = None, gluon: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Launcher of the forward pass over packed sequences: q (Tq, H, D), k and v (Tk, Hkv, D),
    sequence s holding rows cu_seqlens_q[s]:cu_seqlens_q[s + 1] of q and the same of k. Returns
    (o, lse): o (Tq, H, D) in q's dtype, lse (H, Tq) float32. Other arguments as `attention_fwd`
    (a bottom-right alignment within each sequence; alibi_slopes (H,) or (sequences, H))."""
    score_args = (causal, scale, window_left, window_right, softcap, bottom_right)
    return planned(varlen_forward_key, build_varlen_forward, q, k, v, cu_seqlens_q, cu_seqlens_k, score_args,
                   alibi_slopes, sinks, config, tma, gluon).run(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes,
                                                                sinks)


# ---------------------------------------------------------------------------------------
# Backward
# ---------------------------------------------------------------------------------------

def attention_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  o: torch.Tensor, lse: torch.Tensor, causal: bool = False, scale: float | None = None,
                  window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                  dlse: torch.Tensor | None = None, bottom_right: bool = False,
                  alibi_slopes: torch.Tensor | None = None, sinks: torch.Tensor | None = None, *,
                  dkdv_config: TileConfig | None = None, dq_config: TileConfig | None = None,
                  tma: bool | None = None, concurrent_dq: bool | None = None,
                  gluon: bool | None = None) -> tuple[torch.Tensor, ...]:
    """Launcher of the backward pass: (dq, dk, dv) from the upstream gradient `do` of o (and
    `dlse` of lse, when lse was used) and the forward's `o` and `lse`; with sinks, d(sinks)
    (shaped and typed as sinks) fourth. Deterministic: the same inputs give bitwise the same
    gradients.

    tma: as in `attention_fwd`. Through descriptors go the tiles each kernel streams: Q and
    dO in the dK/dV pass (when both allow it), K and V in the dQ pass (when both allow it);
    the rest through pointers.
    concurrent_dq: the dQ pass needs only the preprocess's delta, not dK and dV, so on a GPU
    it may run on a side stream beside the dK/dV pass, filling the SMs that pass's last,
    uneven programs leave idle (faster on the H200 for long backwards, same bits:
    notes/attention.md). None does so where the work is large enough to pay for the stream
    switches (`plans.CONCURRENT_DQ_MIN_WORK`), True always, False never (the passes one after
    the other on the current stream).
    gluon: as in `attention_fwd`, for the dK/dV and dQ passes (`paths.gluon_backward`)."""
    score_args = (causal, scale, window_left, window_right, softcap, bottom_right)
    grads = planned(backward_key, build_backward, do, q, k, v, o, lse, score_args, alibi_slopes, sinks, dlse,
                    dkdv_config, dq_config, tma, concurrent_dq, gluon).run(do, q, k, v, o, lse, dlse, alibi_slopes,
                                                                           sinks)
    return grads if sinks is not None else grads[:3]


def attention_varlen_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         o: torch.Tensor, lse: torch.Tensor, cu_seqlens_q: torch.Tensor,
                         cu_seqlens_k: torch.Tensor, causal: bool = False, scale: float | None = None,
                         window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                         dlse: torch.Tensor | None = None, bottom_right: bool = False,
                         alibi_slopes: torch.Tensor | None = None, sinks: torch.Tensor | None = None, *,
                         dkdv_config: TileConfig | None = None, dq_config: TileConfig | None = None,
                         tma: bool | None = None, concurrent_dq: bool | None = None,
                         gluon: bool | None = None) -> tuple[torch.Tensor, ...]:
    """Launcher of the backward pass over packed sequences (see `attention_varlen_fwd`):
    (dq, dk, dv) shaped as q, k, v. Other arguments as `attention_bwd`; lse and dlse (H, Tq)."""
    score_args = (causal, scale, window_left, window_right, softcap, bottom_right)
    grads = planned(varlen_backward_key, build_varlen_backward, do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k,
                    score_args, alibi_slopes, sinks, dlse, dkdv_config, dq_config, tma, concurrent_dq,
                    gluon).run(do, q, k, v, o, lse, dlse, cu_seqlens_q, cu_seqlens_k, alibi_slopes, sinks)
    return grads if sinks is not None else grads[:3]
