"""Ring attention: exact attention over a sequence split across the ranks of a process group.

Each of the W ranks holds a shard of q, k and v along the sequence. The K/V shards travel
around the ring (rank r sends to r + 1 and receives from r - 1), one hop per step, and each
rank attends its queries to the block it holds while the next block is in flight
(`dist.batch_isend_irecv`, overlapped with the kernel). Partial results merge exactly by
their log-sum-exp, in float32:

    lse = logaddexp(lse_a, lse_b),   o = o_a exp(lse_a - lse) + o_b exp(lse_b - lse).

Backward (the standard ring backward): with the final o and lse, the attention backward of
one (query block, key block) pair gives exactly that pair's share of dQ and that key block's
dK and dV (P_ij = exp(s_ij - lse_i) is the final probability; delta_i = rowsum(dO_i O_i) is
the final row's). So each rank runs `attention_bwd` once per block it sees, sums its dQ
shares in a fixed order, and adds its dK/dV of each block into a float32 accumulator that
travels with that block around the ring and reaches the block's owner after W hops. Every
sum runs in the same order on every call: the result is bitwise deterministic.

Causal load balance: the full sequence is cut into 2W chunks and rank r holds chunks r and
2W-1-r (`shard_for_ring`), so every rank has the same amount of causal work. With the
kernel's top-left causal mask, rank r's block against its own keys is plain causal
attention on its two chunks (their positions increase); against the keys of rank s < r
all its queries see s's first chunk and none of its second; against rank s > r only its
second chunk's queries attend, to all of s's keys. Each step costs the same two chunk x
chunk products. Without `causal` any layout works (keys form a set).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from .._checks import check_bool, check_float, check_int
from ..ops.attention import attention_bwd, attention_fwd


# ---------------------------------------------------------------------------------------
# The load-balanced layout
# ---------------------------------------------------------------------------------------

def _group_shape(group: dist.ProcessGroup | None) -> tuple[int, int]:
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"group must be a torch.distributed ProcessGroup or None, got {type(group).__name__}")
    return dist.get_world_size(group), dist.get_rank(group)


def ring_chunks(world_size: int, rank: int) -> tuple[int, int]:
    """The two chunks (of 2 * world_size) of the full sequence that `rank` holds, in order."""
    check_int("world_size", world_size)
    check_int("rank", rank)
    return rank, 2 * world_size - 1 - rank


def _check_tensor_dim(name: str, x: object, dim: object) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    check_int("dim", dim)


def _check_chunks(name: str, n: int, world_size: int) -> int:
    if n % (2 * world_size):
        raise ValueError(f"{name} has {n} positions along the sequence dim; the load-balanced layout "
                         f"needs a multiple of 2 * world_size = {2 * world_size}")
    return n // (2 * world_size)


def shard_for_ring(x: torch.Tensor, dim: int = 2, *, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """This rank's shard of a full sequence `x` in the load-balanced layout: chunks r and
    2W-1-r of 2W equal chunks along `dim` (default 2: the N of (B, H, N, D)), concatenated.
    x's length along dim must be a multiple of 2W. Differentiable (slices and a cat)."""
    _check_tensor_dim("x", x, dim)
    world, rank = _group_shape(group)
    c = _check_chunks("x", x.shape[dim], world)
    first, second = ring_chunks(world, rank)
    return torch.cat([x.narrow(dim, first * c, c), x.narrow(dim, second * c, c)], dim=dim)


def unshard_from_ring(shard: torch.Tensor, dim: int = 2, *, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """The full sequence from every rank's `shard_for_ring` shard (an all-gather, then the
    chunks put back in order). For evaluation and tests: not differentiable."""
    _check_tensor_dim("shard", shard, dim)
    world, _ = _group_shape(group)
    if shard.shape[dim] % 2:
        raise ValueError(f"shard has {shard.shape[dim]} positions along dim {dim}; a ring shard holds two equal chunks")
    parts = [torch.empty_like(shard) for _ in range(world)]
    dist.all_gather(parts, shard.contiguous(), group=group)
    chunks: list[torch.Tensor | None] = [None] * (2 * world)
    for r, part in enumerate(parts):
        a, b = part.chunk(2, dim=dim)
        first, second = ring_chunks(world, r)
        chunks[first], chunks[second] = a, b
    return torch.cat(chunks, dim=dim)


def ring_positions(seq_len: int, *, group: dist.ProcessGroup | None = None,
                   device: torch.device | str | None = None) -> torch.Tensor:
    """Global positions (int64) of this rank's tokens in the load-balanced layout of a
    sequence of seq_len tokens: what RoPE needs under ring attention (position_ids)."""
    check_int("seq_len", seq_len)
    return shard_for_ring(torch.arange(seq_len, device=device), dim=0, group=group)


# ---------------------------------------------------------------------------------------
# The ring
# ---------------------------------------------------------------------------------------

class _Ring:
    """Neighbours in the group, and one hop of a tensor to the next rank."""

    def __init__(self, group: dist.ProcessGroup | None):
        self.group = group if group is not None else dist.group.WORLD
        self.world, self.rank = _group_shape(self.group)
        self.next = dist.get_global_rank(self.group, (self.rank + 1) % self.world)
        self.prev = dist.get_global_rank(self.group, (self.rank - 1) % self.world)

    def source(self, step: int) -> int:
        """Group rank whose K/V this rank holds at `step`."""
        return (self.rank - step) % self.world

    def shift(self, tensor: torch.Tensor, tag: int) -> "_Hop":
        """Send `tensor` to the next rank and receive the previous rank's, asynchronously.
        Every rank posts its hops in the same order, so the two sides always match; the tag
        keeps K/V hops apart from gradient hops in flight at the same time (gloo matches
        messages by tag; NCCL by order)."""
        received = torch.empty_like(tensor)
        ops = [dist.P2POp(dist.isend, tensor, self.next, self.group, tag),
               dist.P2POp(dist.irecv, received, self.prev, self.group, tag)]
        return _Hop(dist.batch_isend_irecv(ops), received)


class _Hop:
    def __init__(self, requests: list, received: torch.Tensor):
        self.requests, self.received = requests, received

    def wait(self) -> torch.Tensor:
        for request in self.requests:
            request.wait()
        return self.received


_KV_TAG, _GRAD_TAG = 1, 2


def _block(step: int, ring: _Ring, causal: bool, n: int) -> tuple[slice, slice, bool] | None:
    """(query rows, key rows, causal) of the local shard's product with the K/V held at
    `step` (n local positions), or None when no query sees those keys. See the module doc."""
    every = slice(0, n)
    if not causal:
        return every, every, False
    s = ring.source(step)
    if s == ring.rank:
        return every, every, True
    half = n // 2
    if s < ring.rank:
        return every, slice(0, half), False
    return slice(half, n), every, False


def _merge(out: torch.Tensor, lse: torch.Tensor, o_b: torch.Tensor, lse_b: torch.Tensor) -> None:
    """out, lse (float32 views) <- the exact merge of themselves with a block's (o_b, lse_b)."""
    merged = torch.logaddexp(lse, lse_b)
    out.mul_(torch.exp(lse - merged).unsqueeze(-1))
    out.add_(o_b.float() * torch.exp(lse_b - merged).unsqueeze(-1))
    lse.copy_(merged)


def _ring_forward(q, k, v, causal, scale, ring):
    n = q.shape[2]
    kv = torch.stack([k, v])  # one message a hop; contiguous, as P2P needs
    out = lse = None
    for step in range(ring.world):
        hop = ring.shift(kv, _KV_TAG) if step + 1 < ring.world else None
        block = _block(step, ring, causal, n)
        if block is not None:
            rows, keys, block_causal = block
            o_b, lse_b = attention_fwd(q[:, :, rows], kv[0][:, :, keys], kv[1][:, :, keys], block_causal, scale)
            if out is None:  # step 0: the local block, which every query row sees
                out, lse = o_b.float(), lse_b
            else:
                _merge(out[:, :, rows], lse[:, :, rows], o_b, lse_b)
        if hop is not None:
            kv = hop.wait()
    return out.to(q.dtype), lse


def _ring_backward(do, q, k, v, o, lse, causal, scale, ring):
    n = q.shape[2]
    kv = torch.stack([k, v])
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    incoming = None  # the accumulator of the block held now, from the previous rank
    for step in range(ring.world):
        hop = ring.shift(kv, _KV_TAG) if step + 1 < ring.world else None
        mine = torch.zeros(kv.shape, dtype=torch.float32, device=kv.device)
        block = _block(step, ring, causal, n)
        if block is not None:
            rows, keys, block_causal = block
            dq_b, dk_b, dv_b = attention_bwd(do[:, :, rows], q[:, :, rows], kv[0][:, :, keys], kv[1][:, :, keys],
                                             o[:, :, rows], lse[:, :, rows], block_causal, scale)
            dq[:, :, rows] += dq_b
            mine[0][:, :, keys] = dk_b
            mine[1][:, :, keys] = dv_b
        # The block's accumulator, summed in ring order from its owner: owner, owner+1, ...
        dkv = mine if incoming is None else incoming.wait().add_(mine)
        if ring.world > 1:
            incoming = ring.shift(dkv, _GRAD_TAG)  # to the next rank; after the last step, the owner
        if hop is not None:
            kv = hop.wait()
    if ring.world > 1:
        dkv = incoming.wait()
    return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, ring):
        o, lse = _ring_forward(q, k, v, causal, scale, ring)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale, ctx.ring = causal, scale, ring
        return o

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _ring_backward(do, q, k, v, o, lse, ctx.causal, ctx.scale, ctx.ring)
        return dq, dk, dv, None, None, None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                   group: dist.ProcessGroup | None = None, scale: float | None = None) -> torch.Tensor:
    """Attention over a sequence split across the ranks of `group` (default: the world),
    differentiable in q, k and v. Every rank of the group calls it with its own shard.

    q: (B, H, n, D), k and v: (B, Hkv, n, D), this rank's n positions of the full sequence
    of W * n (H a multiple of Hkv; float16 or bfloat16; D as for `tritonkit.attention`).
    causal=True needs the load-balanced layout: `shard_for_ring(x, dim=2)` of the full
    q, k, v (rank r holds chunks r and 2W-1-r of 2W, so n is even); the result is then
    `shard_for_ring` of full causal attention. Without causal, any split of the sequence
    works (each rank's queries see every rank's keys) and the result is its queries' rows.
    scale defaults to 1 / sqrt(D). Returns this rank's output, shaped and typed like q.

    Communication: K and V pass once around the ring in the forward, and K, V plus a float32
    dK/dV accumulator in the backward, each hop overlapped with a block's kernel. Gloo (CPU
    tensors) and NCCL (one GPU per rank, `torch.cuda.set_device` called) both work.
    Deterministic. Not traced by torch.compile (a graph break).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, heads, n, D), got shape {tuple(t.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"v has shape {tuple(v.shape)} but k has {tuple(k.shape)}")
    if k.shape[2] != q.shape[2]:
        raise ValueError(f"k holds {k.shape[2]} positions but q holds {q.shape[2]}: "
                         f"each rank's q, k and v shards cover the same positions")
    check_bool("causal", causal)
    check_float("scale", scale, optional=True)
    if causal and q.shape[2] % 2:
        raise ValueError(f"q holds {q.shape[2]} positions; causal ring attention needs the two equal "
                         f"chunks of shard_for_ring's layout (an even count)")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    ring = _Ring(group)
    return _RingAttention.apply(q, k.contiguous(), v.contiguous(), causal, scale, ring)
