"""The forward pass of the experts: two grouped products over the expert-sorted rows, and
one pass summing each token's k rows.

  gate/up   gu_r = x_t W_gu[e]^T (+ b_gu[e]),  h_r = act(gu_r)   for row r = (token t, expert e)
            epilogue: the bias, the rounding of gu to the inputs' dtype (kept for the
            backward), the activation; h stored in sorted order
  down      y_s = w_s (h_r W_d[e]^T (+ b_d[e]))                  stored at the row's slot s
            epilogue: the bias and the routing weight; rows written in slot order (T, k, H)
  combine   out_t = sum_j y_{t k + j}, j = 0 .. k-1 in that order, in float32, rounded once

The down product's epilogue cannot finish the sum itself: a token's k rows lie in k tiles of
different experts, and adding them there would take atomics whose order varies from run to
run. Writing the rows in slot order and summing them in a fixed order is deterministic, and
costs one (T, k, H) write and read.

h is computed from gu rounded to the inputs' dtype (as an unfused gate_up_proj followed by
the activation computes it), so the backward recomputes exactly the h of the forward.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..._launch import Launch
from ..._layout import cdiv
from ..._op import not_computed
from .activation import gated, load_gate_up, store_gate_up
from .checks import Sizes
from .configs import Tile, combine_block, dot_precision, row_block, row_tiles
from .product import program_tile, tile_product
from .routing import Routing, route


@triton.jit
def _gate_up_kernel(
    # pointers: hidden, the gate/up weight, its bias (None: none), h written, gu written
    # (None: not kept), the routing's order and tiles
    x_ptr, w_ptr, bias_ptr, h_ptr, gu_ptr, order_ptr, tiles_ptr,
    # sizes and the activation's constants
    H, I, TOP_K, alpha, limit,
    # strides in elements: hidden (token, hidden), weight (expert, row, hidden)
    x_st, x_sh, w_se, w_sr, w_sh,
    ACTIVATION: tl.constexpr, INTERLEAVED: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
):
    # A program: BLOCK_M sorted rows of one expert x BLOCK_N columns of the intermediate,
    # the gate's and the up's (two accumulators, or one of 2 BLOCK_N interleaved columns).
    expert, rows, row_mask, empty, n0 = program_tile(tiles_ptr, I, BLOCK_M, BLOCK_N)
    if empty:
        return
    token = (tl.load(order_ptr + rows, mask=row_mask, other=0) // TOP_K).to(tl.int64)
    w_base = w_ptr + expert.to(tl.int64) * w_se
    cols = n0 + tl.arange(0, BLOCK_N)
    if INTERLEAVED:
        wide = 2 * n0 + tl.arange(0, 2 * BLOCK_N)
        pair, _, _ = tile_product(x_ptr, token * x_st, x_sh, row_mask, w_base, w_sh, wide * w_sr, wide * w_sr,
                                  wide < 2 * I, H, None, BLOCK_M, 2 * BLOCK_N, BLOCK_K, False, False, PRECISION)
        g, u = tl.split(tl.reshape(pair, (BLOCK_M, BLOCK_N, 2)))
    else:
        g, u, _ = tile_product(x_ptr, token * x_st, x_sh, row_mask, w_base, w_sh, cols * w_sr, (cols + I) * w_sr,
                               cols < I, H, None, BLOCK_M, BLOCK_N, BLOCK_K, True, False, PRECISION)
    if bias_ptr is not None:  # contiguous (E, 2I), in the weight's row order
        bias_rows = tl.zeros((BLOCK_M,), tl.int64) + expert.to(tl.int64) * (2 * I)
        bias_g, bias_u = load_gate_up(bias_ptr, bias_rows, n0, I, row_mask, INTERLEAVED, BLOCK_N)
        g += bias_g
        u += bias_u
    dtype = h_ptr.dtype.element_ty
    g = g.to(dtype)
    u = u.to(dtype)
    rows64 = rows.to(tl.int64)
    if gu_ptr is not None:
        store_gate_up(gu_ptr, rows64 * (2 * I), n0, I, row_mask, g, u, INTERLEAVED, BLOCK_N)
    h = gated(g.to(tl.float32), u.to(tl.float32), alpha, limit, ACTIVATION)
    tl.store(h_ptr + rows64[:, None] * I + cols[None, :], h.to(dtype), mask=row_mask[:, None] & (cols < I)[None, :])


@triton.jit
def _down_kernel(
    # pointers: A (sorted rows of K, contiguous), the weight, its bias (None: none, else
    # contiguous (E, N)), the per-slot scale (None: none; contiguous float32 (T * k,)), the
    # output (rows of N, contiguous, at each row's slot), the routing's order and tiles
    a_ptr, w_ptr, bias_ptr, scale_ptr, out_ptr, order_ptr, tiles_ptr,
    # sizes: the product's depth and width
    K, N,
    # weight strides in elements: expert, k, n
    w_se, w_sk, w_sn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
):
    # out[slot(r)] = scale[slot(r)] * (A[r] @ W[e] + bias[e]) for the rows r of a tile of expert e.
    # The forward's down product (A = h, W[e][k, n] = W_d[e, n, k]) and the input gradient's
    # product (A = dgu, W[e] = W_gu[e], no bias or scale).
    expert, rows, row_mask, empty, n0 = program_tile(tiles_ptr, N, BLOCK_M, BLOCK_N)
    if empty:
        return
    cols = n0 + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    acc, _, _ = tile_product(a_ptr, rows.to(tl.int64) * K, 1, row_mask, w_ptr + expert.to(tl.int64) * w_se, w_sk,
                             cols * w_sn, cols * w_sn, col_mask, K, None, BLOCK_M, BLOCK_N, BLOCK_K, False, False,
                             PRECISION)
    slot = tl.load(order_ptr + rows, mask=row_mask, other=0).to(tl.int64)
    if bias_ptr is not None:
        acc += tl.load(bias_ptr + expert.to(tl.int64) * N + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    if scale_ptr is not None:
        acc *= tl.load(scale_ptr + slot, mask=row_mask, other=0.0)[:, None]
    tl.store(out_ptr + slot[:, None] * N + cols[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=row_mask[:, None] & col_mask[None, :])


@triton.jit
def _combine_kernel(
    # pointers: rows of N in slot order (T * k, N), contiguous; the expert indices; the
    # output (T, N), contiguous
    rows_ptr, idx_ptr, out_ptr,
    T, N, TOP_K, E, idx_st, idx_sj,
    BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # out[t] = sum_j rows[t k + j] over the slots routed to an expert (index in [0, E)),
    # j = 0 .. k-1 in that order, in float32.
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    token_mask = tokens < T
    col_mask = cols < N
    tokens64 = tokens.to(tl.int64)
    acc = tl.zeros((BLOCK_T, BLOCK_N), tl.float32)
    for j in range(TOP_K):
        e = tl.load(idx_ptr + tokens64 * idx_st + j * idx_sj, mask=token_mask, other=-1)
        routed = token_mask & (e >= 0) & (e < E)
        slot = tokens64 * TOP_K + j
        acc += tl.load(rows_ptr + slot[:, None] * N + cols[None, :], mask=routed[:, None] & col_mask[None, :],
                       other=0.0).to(tl.float32)
    tl.store(out_ptr + tokens64[:, None] * N + cols[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=token_mask[:, None] & col_mask[None, :])


def scale_of(routing_weights: torch.Tensor) -> torch.Tensor:
    """The routing weights as the kernels read them: float32, one per slot, contiguous."""
    return routing_weights.reshape(-1).to(torch.float32).contiguous()


def down_product(a: torch.Tensor, weight: torch.Tensor, k_dim: int, bias: torch.Tensor | None,
                 scale: torch.Tensor | None, routing: Routing, tile: Tile, precision: str, n: int) -> torch.Tensor:
    """(S, n) rows at their slots: scale * (a[r] @ weight[e] + bias[e]), where weight[e]'s
    dim `k_dim` (1 or 2) is the product's depth and the other its width n. Rows of slots
    routed nowhere are left unwritten."""
    rows, depth = a.shape
    out = a.new_empty((rows, n))
    n_dim = 3 - k_dim
    grid = (routing.tiles.shape[0] * cdiv(n, tile.block_n),)
    Launch("moe_down", _down_kernel, grid,
           (a, weight, None if bias is None else bias.contiguous(), scale, out, routing.order, routing.tiles,
            depth, n, weight.stride(0), weight.stride(k_dim), weight.stride(n_dim)),
           dict(**tile.meta(), PRECISION=precision), num_warps=tile.num_warps, num_stages=tile.num_stages)()
    return out


def combine(rows: torch.Tensor, expert_indices: torch.Tensor, num_experts: int) -> torch.Tensor:
    """(T, N): each token's k rows (rows in slot order) summed in slot order."""
    tokens, top_k = expert_indices.shape
    n = rows.shape[1]
    out = rows.new_empty((tokens, n))
    block_t, block_n = combine_block(n)
    Launch("moe_combine", _combine_kernel, (cdiv(tokens, block_t), cdiv(n, block_n)),
           (rows, expert_indices, out, tokens, n, top_k, num_experts, *expert_indices.stride()),
           dict(BLOCK_T=block_t, BLOCK_N=block_n), num_warps=4, num_stages=1)()
    return out


def experts_forward(hidden, expert_indices, routing_weights, gate_up_weight, down_weight, gate_up_bias, down_bias,
                    code: int, interleaved: bool, alpha: float, limit: float, sizes: Sizes, keep: bool):
    """The forward on checked arguments: (out, gu or a placeholder, order, offsets, tiles)."""
    tokens, hidden_size, top_k, experts, width = sizes
    slots = tokens * top_k
    block_m = row_block(slots, experts, hidden.dtype)
    tile = row_tiles(block_m, hidden.dtype)
    routing = route(expert_indices, experts, block_m)
    precision = dot_precision(hidden.dtype)
    gu = hidden.new_empty((slots, 2 * width)) if keep else not_computed(hidden)
    if slots == 0:
        return hidden.new_zeros((tokens, hidden_size)), gu, *routing
    h = hidden.new_empty((slots, width))
    t = tile["gate_up"]
    Launch("moe_gate_up", _gate_up_kernel, (routing.tiles.shape[0] * cdiv(width, t.block_n),),
           (hidden, gate_up_weight, None if gate_up_bias is None else gate_up_bias.contiguous(), h,
            gu if keep else None, routing.order, routing.tiles, hidden_size, width, top_k, float(alpha), float(limit),
            *hidden.stride(), *gate_up_weight.stride()),
           dict(ACTIVATION=code, INTERLEAVED=bool(interleaved), **t.meta(), PRECISION=precision),
           num_warps=t.num_warps, num_stages=t.num_stages)()
    rows = down_product(h, down_weight, 2, down_bias, scale_of(routing_weights), routing, tile["down"], precision,
                        hidden_size)
    return combine(rows, expert_indices, experts), gu, *routing
