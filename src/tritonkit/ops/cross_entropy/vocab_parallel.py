"""Vocabulary-parallel linear cross-entropy: `tritonkit.linear_cross_entropy` when the head's
weight (and bias) rows are sharded over the ranks of one mesh dimension, as a tensor-parallel
Llama shards its lm_head (`ColwiseParallel`: weight Shard(0)). The weight is never gathered
and the (tokens x vocabulary) logits never held: each rank holds vocabulary rows
[v0, v0 + V_r) and works through token chunks of its own logits.

A row's loss needs the log-sum-exp over the whole vocabulary, so the forward makes one pass:
per chunk z = softcap(float(hidden_c @ W_r^T + b_r)) (the product rounded to hidden's dtype,
as F.linear rounds it), and per row the local max, the sum of exp(z - max), the target's logit
on the rank that holds the target and, with label smoothing, the sum of the row's logits.
All-reduces over the mesh dimension then give
    lse = M + log(sum_r s_r exp(m_r - M)),   loss = lse - (1 - eps) z_target - (eps / V) sum_j z_j
(computed from M - z_target and M - mean_j z_j, so that a small loss does not cancel)
(ignored rows: 0). The backward recomputes each chunk's logits (the second product a chunk):
    dz = w_row (exp(z - lse) - (1 - eps) onehot(target) - eps / V) (times 1 - tanh^2 with a softcap)
with w_row the upstream gradient of the row's loss (over the count of targets for the mean;
0 for ignored rows), rounded to hidden's dtype, then grad_hidden = sum over ranks of dz W_r
(one all-reduce), grad_W_r = dz^T hidden and grad_b_r = the column sums of dz.

The per-shard work is torch ops (cuBLAS products, elementwise kernels), not the row kernel of
`tritonkit.ops.cross_entropy`; eager only (torch.compile is not supported here). Its speed on
GPUs is not measured yet.
"""

from __future__ import annotations

import math
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

# fp32 logits per chunk: the memory this path adds beyond the gradients.
CHUNK_BYTES = 256 << 20


def vocab_sharded(weight: object) -> bool:
    """Whether `weight` is a DTensor whose rows (dim 0) are sharded, the case this module
    computes (a program that never imported DTensor pays a dict lookup)."""
    module = sys.modules.get("torch.distributed.tensor")
    return (module is not None and isinstance(weight, module.DTensor)
            and any(p.is_shard(0) for p in weight.placements))


def _mesh_dim(weight, bias) -> int:
    """The one mesh dimension that shards weight's rows; every other placement must be
    Replicate, and a bias must be sharded the same way."""
    dims = [i for i, p in enumerate(weight.placements) if p.is_shard(0)]
    others = [p for i, p in enumerate(weight.placements) if i not in dims and not p.is_replicate()]
    if len(dims) != 1 or others:
        raise ValueError(f"tritonkit linear_cross_entropy: weight has placements {tuple(weight.placements)}; a "
                         "vocabulary-parallel weight must be sharded along its rows (Shard(0)) on one mesh "
                         "dimension and replicated on the others")
    if bias is not None and tuple(getattr(bias, "placements", ())) != tuple(weight.placements):
        raise ValueError(f"tritonkit linear_cross_entropy: bias must be a DTensor placed as weight "
                         f"({tuple(weight.placements)}), got {tuple(getattr(bias, 'placements', ('a plain tensor',)))}")
    return dims[0]


def _local(t):
    """A DTensor's local tensor (differentiably), a plain tensor as it is; Replicate only."""
    from torch.distributed.tensor import DTensor

    if not isinstance(t, DTensor):
        return t
    if not all(p.is_replicate() for p in t.placements):
        raise ValueError(f"tritonkit linear_cross_entropy: with a vocabulary-parallel weight, hidden and target "
                         f"must be replicated, got placements {tuple(t.placements)}")
    return t.to_local()


def vocab_parallel_linear_cross_entropy(hidden, weight, target, bias, ignore_index: int, label_smoothing: float,
                                        reduction: str, softcap: float | None, chunk_tokens: int | None):
    """The loss (a DTensor replicated over weight's mesh) for checked options; hidden (T, H)
    and target (T,) plain or replicated DTensors, weight (V, H) and bias (V,) DTensors
    sharded along dim 0 of one mesh dimension."""
    from torch.distributed.tensor import DTensor, Replicate

    mesh = weight.device_mesh
    mesh_dim = _mesh_dim(weight, bias)
    group = mesh.get_group(mesh_dim)
    ranks, rank = mesh.size(mesh_dim), mesh.get_local_rank(mesh_dim)
    vocab = weight.shape[0]
    # DTensor's Shard splits as torch.chunk does: ceil(V / ranks) rows a rank, the last fewer.
    v0 = min(rank * math.ceil(vocab / ranks), vocab)
    loss = _VocabParallel.apply(_local(hidden), weight.to_local(), _local(target),
                                None if bias is None else bias.to_local(), v0, vocab, group, ignore_index,
                                label_smoothing, reduction, softcap, chunk_tokens)
    return DTensor.from_local(loss, mesh, [Replicate()] * mesh.ndim, run_check=False)


def _chunks(rows: int, local_vocab: int, chunk_tokens: int | None):
    step = chunk_tokens or max(1, CHUNK_BYTES // (4 * max(local_vocab, 1)))
    return [(s, min(s + step, rows)) for s in range(0, rows, step)]


def _logits(hidden_c, weight, bias, softcap):
    """float32 logits of a chunk (rounded to hidden's dtype first, as F.linear rounds them),
    softcapped, and tanh of the capped ones (None without a softcap) for the derivative."""
    z = F.linear(hidden_c, weight, bias).float()
    if softcap is None:
        return z, None
    th = torch.tanh(z / softcap)
    return softcap * th, th


class _VocabParallel(torch.autograd.Function):

    @staticmethod
    def forward(ctx, hidden, weight, target, bias, v0, vocab, group, ignore_index, label_smoothing, reduction,
                softcap, chunk_tokens):
        rows, local_vocab = hidden.shape[0], weight.shape[0]
        mine = (target >= v0) & (target < v0 + local_vocab)
        local_target = torch.where(mine, target - v0, 0)
        row_max = hidden.new_empty(rows, dtype=torch.float32)
        row_sum = torch.zeros_like(row_max)
        target_logit = torch.zeros_like(row_max)
        logit_sum = torch.zeros_like(row_max)
        if local_vocab == 0:  # a rank past the last row (more ranks than rows to split)
            row_max.fill_(float("-inf"))
        for s, e in _chunks(rows, local_vocab, chunk_tokens) if local_vocab else ():
            z, _ = _logits(hidden[s:e], weight, bias, softcap)
            row_max[s:e] = z.amax(dim=1)
            row_sum[s:e] = torch.exp(z - row_max[s:e, None]).sum(dim=1)
            target_logit[s:e] = torch.where(mine[s:e], z.gather(1, local_target[s:e, None]).squeeze(1), 0.0)
            if label_smoothing:
                logit_sum[s:e] = z.sum(dim=1)
        global_max = row_max.clone()
        dist.all_reduce(global_max, dist.ReduceOp.MAX, group=group)
        scaled = torch.where(row_max == float("-inf"), 0.0, row_sum * torch.exp(row_max - global_max))
        sums = torch.stack([scaled, target_logit, logit_sum])
        dist.all_reduce(sums, group=group)
        log_sum = torch.log(sums[0])
        valid = target != ignore_index
        # Measured from the row max, as the row kernel does (no cancellation of a small loss).
        loss_rows = torch.where(valid, (1.0 - label_smoothing) * (global_max - sums[1])
                                + label_smoothing * (global_max - sums[2] / vocab) + log_sum, 0.0)
        count = valid.sum()
        # The max and the log of the sum apart, as the row kernel keeps them: their float32 sum
        # would carry its rounding (at the logits' magnitude) into every probability.
        ctx.save_for_backward(hidden, weight, bias, target, global_max, log_sum, count)
        ctx.options = (v0, vocab, group, ignore_index, label_smoothing, reduction, softcap, chunk_tokens)
        if reduction == "none":
            return loss_rows
        total = loss_rows.sum()
        return total / count if reduction == "mean" else total

    @staticmethod
    def backward(ctx, grad_loss):
        hidden, weight, bias, target, global_max, log_sum, count = ctx.saved_tensors
        v0, vocab, group, ignore_index, label_smoothing, reduction, softcap, chunk_tokens = ctx.options
        rows, local_vocab = hidden.shape[0], weight.shape[0]
        valid = target != ignore_index
        upstream = grad_loss.float() if reduction == "none" else grad_loss.float().expand(rows)
        if reduction == "mean":
            upstream = upstream / count
        row_weight = torch.where(valid, upstream, 0.0)
        mine = (target >= v0) & (target < v0 + local_vocab) & valid
        local_target = torch.where(mine, target - v0, 0)
        want_hidden, want_weight, want_bias = ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[3]
        grad_hidden = torch.zeros_like(hidden, dtype=torch.float32) if want_hidden else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if want_weight else None
        grad_bias = torch.zeros(local_vocab, dtype=torch.float32, device=hidden.device) if want_bias else None
        for s, e in _chunks(rows, local_vocab, chunk_tokens) if local_vocab else ():
            z, th = _logits(hidden[s:e], weight, bias, softcap)
            dz = torch.exp((z - global_max[s:e, None]) - log_sum[s:e, None])
            if label_smoothing:
                dz -= label_smoothing / vocab
            onehot = torch.zeros_like(dz).scatter_(1, local_target[s:e, None], (1.0 - label_smoothing) * mine[s:e, None])
            dz = (dz - onehot) * row_weight[s:e, None]
            if th is not None:
                dz = dz * (1.0 - th * th)
            dz = dz.to(hidden.dtype)
            if want_hidden:
                grad_hidden[s:e] = (dz @ weight).float()
            if want_weight:
                grad_weight += (dz.t() @ hidden[s:e]).float()
            if want_bias:
                grad_bias += dz.float().sum(dim=0)
        if want_hidden:
            dist.all_reduce(grad_hidden, group=group)
        cast = (lambda g, like: None if g is None else g.to(like.dtype))
        return (cast(grad_hidden, hidden), cast(grad_weight, weight), None, None if bias is None else cast(grad_bias, bias),
                *([None] * 8))
