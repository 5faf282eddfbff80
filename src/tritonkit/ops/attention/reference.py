"""Float64 references for tests and benchmarks: the dense formula of `score.py` with an explicit
mask."""

import math

import torch


def _scores_and_mask(q, k, causal, scale, window, softcap, bottom_right=False, alibi_slopes=None):
    """Scores (..., Nq, Nk) after scale, softcap and ALiBi, and the boolean mask of visible keys.
    alibi_slopes: (H,) or (B, H)."""
    s = (q @ k.transpose(-1, -2)) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    Nq, Nk = q.shape[-2], k.shape[-2]
    i = torch.arange(Nq, device=q.device)[:, None] + (Nk - Nq if bottom_right else 0)
    j = torch.arange(Nk, device=q.device)[None, :]
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(s.dtype)
        slopes = slopes[None, :, None, None] if slopes.dim() == 1 else slopes[:, :, None, None]
        s = s - slopes * (i - j).abs().to(s.dtype)
    seen = torch.ones(Nq, Nk, dtype=torch.bool, device=q.device)
    if causal:
        seen &= j <= i
    left, right = window if window is not None else (-1, -1)
    if left >= 0:
        seen &= j >= i - left
    if right >= 0:
        seen &= j <= i + right
    return s, seen


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        scale: float | None = None, upcast: bool = True, *, window: tuple[int, int] | None = None,
                        softcap: float | None = None, causal_alignment: str = "top_left",
                        alibi_slopes: torch.Tensor | None = None, sinks: torch.Tensor | None = None,
                        return_lse: bool = False):
    """Plain attention in float64 (upcast=True) or in the inputs' dtype: scores, softcap,
    ALiBi, mask (causal, window (left, right) with -1 unbounded, aligned top-left or
    bottom-right), softmax (with a sink logit a head in its denominator), weighted sum, with kv
    heads repeated for grouped-query attention. Rows that see no key give 0 and lse -inf (the
    sink with sinks). return_lse: also the (B, H, Nq) natural-log sum of exp of the visible
    scores and the sink. Differentiable in q, k, v and sinks."""
    D = q.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    if upcast:
        q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    s, seen = _scores_and_mask(q, k, causal, scale, window, softcap, causal_alignment == "bottom_right",
                               alibi_slopes)
    s = s.masked_fill(~seen, float("-inf"))
    if sinks is not None:
        sink = sinks.to(s.dtype)[None, :, None, None].expand(*s.shape[:3], 1)
        lse = torch.logsumexp(torch.cat([s, sink], -1), dim=-1)
    else:
        lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.clamp_min(torch.finfo(s.dtype).min)[..., None])  # 0 on rows that see nothing
    out = p @ v
    return (out, lse) if return_lse else out


def attention_varlen_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                               cu_seqlens_k: torch.Tensor, causal: bool = False, scale: float | None = None,
                               upcast: bool = True, *, window: tuple[int, int] | None = None,
                               softcap: float | None = None, causal_alignment: str = "top_left",
                               alibi_slopes: torch.Tensor | None = None, sinks: torch.Tensor | None = None,
                               return_lse: bool = False):
    """`attention_reference` of each packed sequence on its own: q (Tq, H, D), k (Tk, Hkv, D),
    v (Tk, Hkv, Dv), alibi_slopes (H,) or (sequences, H); returns o (Tq, H, Dv) and, with
    return_lse, lse (H, Tq)."""
    outs, lses = [], []
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    dtype = torch.float64 if upcast else q.dtype
    for s in range(len(cq) - 1):
        qs = q[cq[s]:cq[s + 1]].transpose(0, 1)[None]
        ks = k[ck[s]:ck[s + 1]].transpose(0, 1)[None]
        vs = v[ck[s]:ck[s + 1]].transpose(0, 1)[None]
        slopes = alibi_slopes if alibi_slopes is None or alibi_slopes.dim() == 1 else alibi_slopes[s:s + 1]
        if ks.shape[2] == 0:  # no keys: every row sees none (but its sink)
            out = torch.zeros((*qs.shape[:3], v.shape[-1]), dtype=dtype, device=q.device)
            if sinks is None:
                lse = torch.full(qs.shape[:3], float("-inf"), dtype=dtype, device=q.device)
            else:
                lse = sinks.to(dtype)[None, :, None].expand(qs.shape[:3])
        else:
            out, lse = attention_reference(qs, ks, vs, causal, scale, upcast, window=window, softcap=softcap,
                                           causal_alignment=causal_alignment, alibi_slopes=slopes, sinks=sinks,
                                           return_lse=True)
        outs.append(out[0].transpose(0, 1))
        lses.append(lse[0])
    out = torch.cat(outs, 0) if outs else q.new_zeros((*q.shape[:-1], v.shape[-1]), dtype=dtype)
    lse = torch.cat(lses, 1) if lses else q.new_zeros((q.shape[1], 0), dtype=out.dtype)
    return (out, lse) if return_lse else out
