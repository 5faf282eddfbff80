"""The backward pass of the experts, from dY (T, H) and what the forward kept: the routing
and gu, the gate/up projection before the activation (h is recomputed from it).

For a row r = (token t, slot s, expert e) with routing weight w_s:
  gate/up bwd  a_r = dY_t W_d[e]                       (the unweighted gradient of h, over H)
               epilogue: h_r = act(gu_r) recomputed, bitwise the forward's;
               dw_s = a_r . h_r (+ dY_t . b_d[e]),     partial sums per column block;
               dh_r = w_s a_r, (dg, du) = act'(gu_r) dh_r, stored in the weight's row order;
               h_r stored for the down weight's gradient
  input        dx_s = dgu_r W_gu[e]                    at the row's slot, then dX_t = sum_j dx_{t k + j}
  weights      dW_d[e]  = sum_r (w_s dY_t)^T h_r       dW_gu[e] = sum_r dgu_r^T x_t
               db_d[e]  = sum_r w_s dY_t               db_gu[e] = sum_r dgu_r
The weight gradients are products per expert whose depth is the expert's rows: one program
owns a tile of one expert's gradient and walks its rows in sorted order, so every sum runs in
a fixed order (deterministic, no atomics); an expert without rows gets zeros. The biases'
gradients are sums over the same rows, in a pass of their own (`_bias_grad_kernel`): summed
inside the product's loop they held its operand in registers every step, which kept the
operands from streaming into the tensor cores (notes/moe.md). The routing weight's partial sums
are added in column-block order, and dX's k rows in slot order.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..._launch import Launch
from ..._layout import cdiv
from ..._op import not_computed
from .activation import gated, gated_grads, load_gate_up, store_gate_up
from .checks import Sizes
from .configs import bias_grad_block, dot_precision, row_block, row_tiles, weight_grad_tile
from .forward import combine, down_product, scale_of
from .product import dot, row_tile, tile_product
from .routing import Routing, max_tiles


@triton.jit
def _gate_up_bwd_kernel(
    # pointers: dY (T, H) contiguous, the down weight, its bias (None: none; contiguous
    # (E, H)), gu kept by the forward, the routing weights (float32 per slot); written: dgu
    # (None: not wanted), h (None: not wanted), the routing weights' partial gradients
    # (None: not wanted; (T * k, column blocks) float32); the routing's order and tiles
    dy_ptr, w_ptr, bias_ptr, gu_ptr, scale_ptr, dgu_ptr, h_ptr, dw_ptr, order_ptr, tiles_ptr,
    # sizes and the activation's constants
    H, I, TOP_K, alpha, limit,
    # down weight strides in elements: expert, hidden, intermediate
    w_se, w_sh, w_si,
    ACTIVATION: tl.constexpr, INTERLEAVED: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
):
    pid = tl.program_id(0)
    n_blocks = tl.cdiv(I, BLOCK_N)
    tile = pid // n_blocks
    n_block = pid % n_blocks
    n0 = n_block * BLOCK_N
    expert, rows, row_mask, empty = row_tile(tiles_ptr, tile, BLOCK_M)
    if empty:
        return
    slot = tl.load(order_ptr + rows, mask=row_mask, other=0).to(tl.int64)
    token = slot // TOP_K
    expert64 = expert.to(tl.int64)
    cols = n0 + tl.arange(0, BLOCK_N)
    col_mask = cols < I
    a, _, bias_dot = tile_product(dy_ptr, token * H, 1, row_mask, w_ptr + expert64 * w_se, w_sh, cols * w_si,
                                  cols * w_si, col_mask, H, bias_ptr + expert64 * H if bias_ptr is not None else None,
                                  BLOCK_M, BLOCK_N, BLOCK_K, False, bias_ptr is not None, PRECISION)
    rows64 = rows.to(tl.int64)
    g, u = load_gate_up(gu_ptr, rows64 * (2 * I), n0, I, row_mask, INTERLEAVED, BLOCK_N)
    dtype = gu_ptr.dtype.element_ty
    # The forward's h, rounded as the down product read it.
    h = gated(g, u, alpha, limit, ACTIVATION).to(dtype)
    if h_ptr is not None:
        tl.store(h_ptr + rows64[:, None] * I + cols[None, :], h, mask=row_mask[:, None] & col_mask[None, :])
    if dw_ptr is not None:
        partial = tl.sum(a * h.to(tl.float32), 1)
        if bias_ptr is not None:
            partial += tl.where(n_block == 0, bias_dot, 0.0)
        tl.store(dw_ptr + slot * n_blocks + n_block, partial, mask=row_mask)
    if dgu_ptr is not None:
        w = tl.load(scale_ptr + slot, mask=row_mask, other=0.0)
        dg, du = gated_grads(g, u, a * w[:, None], alpha, limit, ACTIVATION)
        store_gate_up(dgu_ptr, rows64 * (2 * I), n0, I, row_mask, dg, du, INTERLEAVED, BLOCK_N)


@triton.jit
def _weight_grad_kernel(
    # pointers: the token-indexed operand (dY or hidden), the row-indexed one (h or dgu, rows
    # of the sorted order, contiguous), the gradient written, the routing weights (float32 per
    # slot; read with TOKENS_FIRST), the routing's order and offsets
    tok_ptr, rows_ptr, out_ptr, scale_ptr, order_ptr, offsets_ptr,
    # the gradient's rows and columns per expert, and k
    M, N, TOP_K,
    # strides in elements: the token operand (token, column), the gradient (expert, row, column)
    tok_st, tok_sc, out_se, out_sm, out_sn,
    TOKENS_FIRST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
):
    # out[e] = P^T Q over the rows r of expert e, in sorted order:
    #   TOKENS_FIRST (the down weight): P[r] = w_s dY_t (M = H), Q[r] = h_r (N = I)
    #   otherwise (the gate/up weight): P[r] = dgu_r (M = 2I), Q[r] = x_t (N = H)
    pid = tl.program_id(0)
    m_blocks = tl.cdiv(M, BLOCK_M)
    n_blocks = tl.cdiv(N, BLOCK_N)
    expert = pid // (m_blocks * n_blocks)
    m_block = (pid // n_blocks) % m_blocks
    n_block = pid % n_blocks
    start = tl.load(offsets_ptr + expert)
    end = tl.load(offsets_ptr + expert + 1)
    ms = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    ns = n_block * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = ms < M
    n_mask = ns < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    dtype = rows_ptr.dtype.element_ty
    for r0 in range(start, end, BLOCK_K):
        rows = r0 + tl.arange(0, BLOCK_K)
        r_mask = rows < end
        slot = tl.load(order_ptr + rows, mask=r_mask, other=0).to(tl.int64)
        token = slot // TOP_K
        rows64 = rows.to(tl.int64)
        if TOKENS_FIRST:
            p = tl.load(tok_ptr + token[None, :] * tok_st + ms[:, None] * tok_sc,
                        mask=m_mask[:, None] & r_mask[None, :], other=0.0)
            w = tl.load(scale_ptr + slot, mask=r_mask, other=0.0)
            p = (p.to(tl.float32) * w[None, :]).to(dtype)
            q = tl.load(rows_ptr + rows64[:, None] * N + ns[None, :], mask=r_mask[:, None] & n_mask[None, :],
                        other=0.0)
        else:
            p = tl.load(rows_ptr + rows64[None, :] * M + ms[:, None], mask=m_mask[:, None] & r_mask[None, :],
                        other=0.0)
            q = tl.load(tok_ptr + token[:, None] * tok_st + ns[None, :] * tok_sc,
                        mask=r_mask[:, None] & n_mask[None, :], other=0.0)
        acc = dot(p, q, acc, PRECISION)
    expert64 = expert.to(tl.int64)
    tl.store(out_ptr + expert64 * out_se + ms[:, None] * out_sm + ns[None, :] * out_sn,
             acc.to(out_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])



@triton.jit
def _bias_grad_kernel(
    # pointers as `_weight_grad_kernel`'s; out: the bias's gradient, contiguous (E, M)
    tok_ptr, rows_ptr, out_ptr, scale_ptr, order_ptr, offsets_ptr,
    M, TOP_K, tok_st, tok_sc,
    TOKENS_FIRST: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_M: tl.constexpr,
):
    # out[e] = sum_r P[r] over the rows r of expert e in sorted order, P as in
    # `_weight_grad_kernel`: w_s dY_t (TOKENS_FIRST, the down bias), else dgu_r (the gate/up
    # bias). One program a column block of one expert: a fixed order, no atomics.
    pid = tl.program_id(0)
    m_blocks = tl.cdiv(M, BLOCK_M)
    expert = pid // m_blocks
    ms = (pid % m_blocks) * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = ms < M
    start = tl.load(offsets_ptr + expert)
    end = tl.load(offsets_ptr + expert + 1)
    acc = tl.zeros((BLOCK_R, BLOCK_M), tl.float32)
    for r0 in range(start, end, BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        r_mask = rows < end
        mask = r_mask[:, None] & m_mask[None, :]
        if TOKENS_FIRST:
            slot = tl.load(order_ptr + rows, mask=r_mask, other=0).to(tl.int64)
            p = tl.load(tok_ptr + (slot // TOP_K)[:, None] * tok_st + ms[None, :] * tok_sc, mask=mask, other=0.0)
            acc += p.to(tl.float32) * tl.load(scale_ptr + slot, mask=r_mask, other=0.0)[:, None]
        else:
            acc += tl.load(rows_ptr + rows.to(tl.int64)[:, None] * M + ms[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + expert.to(tl.int64) * M + ms, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty), mask=m_mask)


def _weight_grad(tokens: torch.Tensor, rows: torch.Tensor, like: torch.Tensor, with_bias: bool,
                 scale: torch.Tensor | None, routing: Routing, top_k: int,
                 precision: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(gradient in like's layout, its bias's gradient or a placeholder): tokens-first
    (scale given) for the down weight, rows-first for the gate/up weight."""
    experts, m, n = like.shape
    if rows.shape[0] == 0:  # no rows: nothing to launch over
        return torch.zeros_like(like), like.new_zeros((experts, m)) if with_bias else not_computed(like)
    out = torch.empty_like(like)
    tile = weight_grad_tile(like.dtype)
    grid = (experts * cdiv(m, tile.block_m) * cdiv(n, tile.block_n),)
    Launch("moe_weight_grad", _weight_grad_kernel, grid,
           (tokens, rows, out, scale, routing.order, routing.offsets, m, n, top_k, *tokens.stride(), *out.stride()),
           dict(TOKENS_FIRST=scale is not None, **tile.meta(), PRECISION=precision),
           num_warps=tile.num_warps, num_stages=tile.num_stages)()
    if not with_bias:
        return out, not_computed(like)
    bias_grad = like.new_empty((experts, m))
    block_r, block_m = bias_grad_block()
    Launch("moe_bias_grad", _bias_grad_kernel, (experts * cdiv(m, block_m),),
           (tokens, rows, bias_grad, scale, routing.order, routing.offsets, m, top_k, *tokens.stride()),
           dict(TOKENS_FIRST=scale is not None, BLOCK_R=block_r, BLOCK_M=block_m), num_warps=4, num_stages=2)()
    return out, bias_grad


def experts_backward(grad_out, hidden, expert_indices, routing_weights, gate_up_weight, down_weight, gate_up_bias,
                     down_bias, gu, routing: Routing, code: int, interleaved: bool, alpha: float, limit: float,
                     sizes: Sizes, want_hidden: bool, want_routing: bool, want_gate_up: bool, want_down: bool):
    """The backward on checked arguments: (dhidden, drouting_weights, dgate_up_weight,
    ddown_weight, dgate_up_bias, ddown_bias); a gradient not wanted (or of a bias that is
    None) is a placeholder."""
    tokens, hidden_size, top_k, experts, width = sizes
    slots = tokens * top_k
    block_m = row_block(slots, experts, hidden.dtype)
    if routing.tiles.shape[0] != max_tiles(slots, experts, block_m):
        raise ValueError("tiles was built for another row block; pass the forward's routing unchanged")
    tile = row_tiles(block_m, hidden.dtype)
    precision = dot_precision(hidden.dtype)
    dy = grad_out.contiguous()
    scale = scale_of(routing_weights)
    want_dgu = want_hidden or want_gate_up
    t = tile["gate_up_bwd"]
    n_blocks = cdiv(width, t.block_n)
    dgu = hidden.new_empty((slots, 2 * width)) if want_dgu else None
    h = hidden.new_empty((slots, width)) if want_down else None  # the down weight's gradient reads it
    dw = torch.empty((slots, n_blocks), dtype=torch.float32, device=hidden.device) if want_routing else None
    if slots and (want_dgu or want_down or want_routing):
        Launch("moe_gate_up_bwd", _gate_up_bwd_kernel, (routing.tiles.shape[0] * n_blocks,),
               (dy, down_weight, None if down_bias is None else down_bias.contiguous(), gu, scale, dgu, h, dw,
                routing.order, routing.tiles, hidden_size, width, top_k, float(alpha), float(limit),
                *down_weight.stride()),
               dict(ACTIVATION=code, INTERLEAVED=bool(interleaved), **t.meta(), PRECISION=precision),
               num_warps=t.num_warps, num_stages=t.num_stages)()
    dhidden = drouting = dgate_up = ddown = dgate_up_bias = ddown_bias = not_computed(hidden)
    if want_hidden:
        if slots:
            rows = down_product(dgu, gate_up_weight, 1, None, None, routing, tile["down"], precision, hidden_size)
            dhidden = combine(rows, expert_indices, experts)
        else:
            dhidden = torch.zeros_like(hidden, memory_format=torch.contiguous_format)
    if want_routing:
        # Slots routed nowhere have no row, and no partial sums written: their gradient is 0.
        routed = (expert_indices >= 0) & (expert_indices < experts)
        drouting = torch.where(routed, dw.sum(1).view(tokens, top_k), 0.0).to(routing_weights.dtype)
    if want_down:
        ddown, ddown_bias = _weight_grad(dy, h, down_weight, down_bias is not None, scale, routing, top_k,
                                           precision)
    if want_gate_up:
        dgate_up, dgate_up_bias = _weight_grad(hidden, dgu, gate_up_weight, gate_up_bias is not None, None, routing,
                                               top_k, precision)
    return dhidden, drouting, dgate_up, ddown, dgate_up_bias, ddown_bias
