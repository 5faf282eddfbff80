"""Float64 references for tests and benchmarks: the dense formula with an explicit mask."""

import math

import torch


def _scores_and_mask(q, k, causal, scale, window, softcap):
    """Scores (..., Nq, Nk) after scale and softcap, and the boolean mask of visible keys."""
    s = (q @ k.transpose(-1, -2)) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    Nq, Nk = q.shape[-2], k.shape[-2]
    i = torch.arange(Nq, device=q.device)[:, None]
    j = torch.arange(Nk, device=q.device)[None, :]
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
                        softcap: float | None = None, return_lse: bool = False):
    """Plain attention in float64 (upcast=True) or in the inputs' dtype: scores, softcap,
    mask (causal top-left, window (left, right) with -1 unbounded), softmax, weighted sum,
    with kv heads repeated for grouped-query attention. Rows that see no key give 0 and lse
    -inf. return_lse: also the (B, H, Nq) natural-log sum of exp of the visible scores."""
    D = q.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    if upcast:
        q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    s, seen = _scores_and_mask(q, k, causal, scale, window, softcap)
    s = s.masked_fill(~seen, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.clamp_min(torch.finfo(s.dtype).min)[..., None])  # 0 on rows that see nothing
    out = p @ v
    return (out, lse) if return_lse else out


def attention_varlen_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                               cu_seqlens_k: torch.Tensor, causal: bool = False, scale: float | None = None,
                               upcast: bool = True, *, window: tuple[int, int] | None = None,
                               softcap: float | None = None, return_lse: bool = False):
    """`attention_reference` of each packed sequence on its own: q (Tq, H, D), k and v
    (Tk, Hkv, D); returns o (Tq, H, D) and, with return_lse, lse (H, Tq)."""
    outs, lses = [], []
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for s in range(len(cq) - 1):
        qs = q[cq[s]:cq[s + 1]].transpose(0, 1)[None]
        ks = k[ck[s]:ck[s + 1]].transpose(0, 1)[None]
        vs = v[ck[s]:ck[s + 1]].transpose(0, 1)[None]
        if ks.shape[2] == 0:  # no keys: every row sees none
            dtype = torch.float64 if upcast else q.dtype
            out = torch.zeros(qs.shape, dtype=dtype, device=q.device)
            lse = torch.full(qs.shape[:3], float("-inf"), dtype=dtype, device=q.device)
        else:
            out, lse = attention_reference(qs, ks, vs, causal, scale, upcast, window=window, softcap=softcap,
                                           return_lse=True)
        outs.append(out[0].transpose(0, 1))
        lses.append(lse[0])
    out = torch.cat(outs, 0) if outs else q.new_zeros(q.shape, dtype=torch.float64 if upcast else q.dtype)
    lse = torch.cat(lses, 1) if lses else q.new_zeros((q.shape[1], 0), dtype=out.dtype)
    return (out, lse) if return_lse else out
