"""Expert parallelism for `tritonkit.moe_experts`: the experts' weights sharded by expert over
the ranks of one process group (a DeviceMesh dimension), tokens exchanged by all-to-all.

Each rank holds its own tokens (hidden, their router's expert indices and weights: data
parallel over the group) and E / W of the E experts: rank r owns experts [r E_r, (r + 1) E_r).
A call, on every rank of the group at once:

1. dispatch: each (token, slot) pair whose expert lies on rank d is a row for rank d. The rows
   are sorted by destination (stably), the counts exchanged (one all-to-all of W integers,
   read back to the host: all_to_all_single takes its split sizes as host integers, the one
   host synchronisation of a call), then the rows' hidden states and their experts' local
   indices (an all-to-all each);
2. experts: the received rows through `moe_experts` with k = 1 and routing weight 1 against
   this rank's experts (the sort by expert, the grouped products, all on this rank);
3. combine: the expert outputs return by the reverse all-to-all, and each token sums its
   slots weighted by its routing weights, in float32 and slot order, on its own rank.

The backward runs the same exchanges in reverse (autograd through the two all-to-alls of
hidden states), so each rank gets the gradients of its tokens, its routing weights and its
experts' weights and biases. Every gather and scatter moves distinct rows and every sum runs in
a fixed order: deterministic. Slots whose index lies outside [0, E) are routed nowhere (they
add nothing, their routing weights' gradient is 0). The expert weights' gradients are those of
this rank's tokens' rows routed to them from every rank: nothing is left to reduce over the
expert-parallel group (a data-parallel group beside it still averages its replicas as usual).
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from ..ops.moe import moe_experts


class _AllToAll(torch.autograd.Function):
    """Rows of x sent in blocks of send[d] rows to rank d, received in blocks of recv[d];
    the backward sends the gradient back the same way."""

    @staticmethod
    def forward(ctx, x, send, recv, group):
        ctx.splits, ctx.group = (send, recv), group
        return _all_to_all(x, send, recv, group)

    @staticmethod
    def backward(ctx, grad):
        send, recv = ctx.splits
        return _all_to_all(grad, recv, send, ctx.group), None, None, None


def _all_to_all(x: torch.Tensor, send: list[int], recv: list[int], group) -> torch.Tensor:
    out = x.new_empty((sum(recv), *x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), recv, send, group=group)
    return out


class _SlotRows(torch.autograd.Function):
    """hidden's rows for the given slots (token = slot // k): a gather whose backward places
    each row's gradient at its slot (distinct slots: no accumulation) and sums each token's k
    slots in slot order, deterministic where an index_add's atomics would not be."""

    @staticmethod
    def forward(ctx, hidden, slots, k):
        ctx.save_for_backward(slots)
        ctx.shape = (hidden.shape[0], k, hidden.shape[1])
        return hidden[slots // k]

    @staticmethod
    def backward(ctx, grad):
        (slots,) = ctx.saved_tensors
        tokens, k, width = ctx.shape
        full = grad.new_zeros((tokens * k, width))
        full[slots] = grad
        return full.view(tokens, k, width).sum(1), None, None


class _ToSlots(torch.autograd.Function):
    """rows placed at their slots of a (slots, width) tensor, zeros at the others; backward:
    the gradient's rows at those slots."""

    @staticmethod
    def forward(ctx, rows, slots, count):
        ctx.save_for_backward(slots)
        out = rows.new_zeros((count, rows.shape[1]))
        out[slots] = rows
        return out

    @staticmethod
    def backward(ctx, grad):
        (slots,) = ctx.saved_tensors
        return grad[slots], None, None


def _local_experts(weights: list, group):
    """(local tensors, group): DTensors sharded by expert (Shard(0) on one mesh dimension,
    Replicate on the others) give their local shards (differentiably) and that dimension's
    group; plain tensors are this rank's experts already, over `group`."""
    module = sys.modules.get("torch.distributed.tensor")
    present = [w for w in weights if w is not None]
    dtensors = [module is not None and isinstance(w, module.DTensor) for w in present]
    if not any(dtensors):
        return weights, group if group is not None else dist.group.WORLD
    names = ("gate_up_weight", "down_weight", "gate_up_bias", "down_bias")
    first = present[0]
    dims = [i for i, p in enumerate(first.placements) if p.is_shard(0)]
    if not all(dtensors) or len(dims) != 1 or any(not p.is_replicate() for i, p in enumerate(first.placements)
                                                  if i != dims[0]):
        raise ValueError(f"moe_experts_ep: the experts' weights and biases must all be DTensors sharded by expert "
                         f"(Shard(0)) on one mesh dimension and replicated on the others, or all plain tensors; "
                         f"gate_up_weight has {getattr(first, 'placements', 'no placements')}")
    for name, w in zip(names, weights):
        if w is not None and (w.placements != first.placements or w.device_mesh != first.device_mesh):
            raise ValueError(f"moe_experts_ep: {name} is placed {w.placements}, gate_up_weight {first.placements}; "
                             "they must match")
    mesh_group = first.device_mesh.get_group(dims[0])
    if group is not None and group != mesh_group:
        raise ValueError("moe_experts_ep: group differs from the weights' expert-sharded mesh dimension")
    return [None if w is None else w.to_local() for w in weights], mesh_group


def moe_experts_ep(hidden: torch.Tensor, expert_indices: torch.Tensor, routing_weights: torch.Tensor,
                   gate_up_weight: torch.Tensor, down_weight: torch.Tensor, gate_up_bias: torch.Tensor | None = None,
                   down_bias: torch.Tensor | None = None, *, group=None, activation: str = "silu",
                   interleaved: bool = False, alpha: float = 1.702, limit: float = 7.0) -> torch.Tensor:
    """`tritonkit.moe_experts` with the experts sharded over a process group (module docstring).

    hidden (T, H), expert_indices (T, k) and routing_weights (T, k): this rank's tokens, plain
    tensors, the indices global expert numbers in [0, E). gate_up_weight (E_r, 2I, H),
    down_weight (E_r, H, I) and the biases: this rank's experts, as DTensors sharded by expert
    (Shard(0) on one mesh dimension, whose group is used) or plain tensors with `group` (the
    default group if None); every rank holds the same number E_r of experts, E = W E_r. The
    other arguments are moe_experts'. Returns (T, H) in hidden's dtype; differentiable in the
    tokens' and routing weights' and this rank's experts' tensors. Call it on every rank of the
    group at once (it communicates). One host synchronisation a call, for the all-to-all's
    split sizes. Eager only: torch.compile would break its graph at the synchronisation.
    """
    (gate_up_weight, down_weight, gate_up_bias, down_bias), group = _local_experts(
        [gate_up_weight, down_weight, gate_up_bias, down_bias], group)
    if hidden.dim() != 2 or expert_indices.dim() != 2 or expert_indices.shape[0] != hidden.shape[0]:
        raise ValueError(f"moe_experts_ep: hidden {tuple(hidden.shape)} and expert_indices "
                         f"{tuple(expert_indices.shape)} must be (T, H) and (T, k)")
    if routing_weights.shape != expert_indices.shape:
        raise ValueError(f"moe_experts_ep: routing_weights has shape {tuple(routing_weights.shape)}; expected "
                         f"{tuple(expert_indices.shape)}")
    world = dist.get_world_size(group)
    tokens, k = expert_indices.shape
    local = gate_up_weight.shape[0]
    slots = tokens * k

    # dispatch: the slots by destination rank (W: routed nowhere, sorted last, never sent)
    flat = expert_indices.reshape(-1)
    destination = torch.where((flat >= 0) & (flat < local * world), flat // local, world)
    destination, order = destination.sort(stable=True)
    counts = torch.searchsorted(destination, torch.arange(1, world + 1, device=flat.device)).diff(
        prepend=torch.zeros(1, dtype=torch.long, device=flat.device))
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts, group=group)
    send, recv = counts.tolist(), received.tolist()
    sent = order[:sum(send)]
    rows = _AllToAll.apply(_SlotRows.apply(hidden, sent, k), send, recv, group)
    experts = _all_to_all((flat[sent] - destination[:sum(send)] * local).to(torch.int32), send, recv, group)

    # experts: this rank's, on the rows sent to it
    ones = rows.new_ones((rows.shape[0], 1), dtype=routing_weights.dtype)
    outputs = moe_experts(rows, experts[:, None], ones, gate_up_weight, down_weight, gate_up_bias, down_bias,
                          activation=activation, interleaved=interleaved, alpha=alpha, limit=limit)

    # combine: back to the tokens' ranks, each token's slots weighted and summed in slot order
    back = _ToSlots.apply(_AllToAll.apply(outputs, recv, send, group), sent, slots)
    weighted = back.view(tokens, k, -1).float() * routing_weights.float()[..., None]
    return weighted.sum(1).to(hidden.dtype)
