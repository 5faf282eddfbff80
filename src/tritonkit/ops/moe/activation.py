"""The gated activations of the experts, and where gate and up sit in the fused projection.

h = act(g) * u, from the two halves of the gate/up projection gu = x W_gu^T (+ b_gu):
  "silu"       SwiGLU (Qwen3-MoE, Mixtral, DeepSeek-V3): g sigmoid(g) u
  "gelu_tanh"  GeGLU, GELU's tanh approximation (Gemma's gelu_pytorch_tanh)
  "gelu"       GeGLU, exact erf
  "gpt_oss"    gpt-oss's clamped variant (transformers' GptOssExperts._apply_gate):
               g' = min(g, limit), u' = clamp(u, -limit, limit),
               h = (u' + 1) g' sigmoid(alpha g'), with alpha = 1.702, limit = 7.0 there.
               Its backward passes gradient where torch's clamp does (limits inclusive):
               dg = dh (u' + 1) (s + alpha g' s (1 - s)) where g <= limit, s = sigmoid(alpha g'),
               du = dh g' s where -limit <= u <= limit.

Layouts of the 2I rows of an expert's gate/up weight (and of the bias, and of the saved
gu, which the kernels keep in the weight's row order so the products of the backward need
not know it):
  concatenated (interleaved=False): rows [0, I) gate, [I, 2I) up (transformers'
               `gate_up_proj` of Qwen3-MoE, Mixtral, DeepSeek-V3; `chunk(2, -1)`);
  interleaved  (interleaved=True): gate in even rows, up in odd ones (gpt-oss's
               `gate_up_proj[..., ::2]` / `[..., 1::2]`).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..._checks import check_choice
from ..gated import GELU_ERF, GELU_TANH, SILU, _activation, _activation_and_slope

GPT_OSS = 3
ACTIVATIONS = {"silu": SILU, "gelu_tanh": GELU_TANH, "gelu": GELU_ERF, "gpt_oss": GPT_OSS}


def activation_code(activation: object) -> int:
    return ACTIVATIONS[check_choice("activation", activation, tuple(ACTIVATIONS))]


@triton.jit
def gated(g, u, alpha, limit, ACTIVATION: tl.constexpr):
    """h = act(g) * u in float32 (the module docstring's formulas)."""
    if ACTIVATION == 3:
        gc = tl.minimum(g, limit)
        uc = tl.minimum(tl.maximum(u, -limit), limit)
        return (uc + 1.0) * (gc * tl.sigmoid(alpha * gc))
    else:
        return _activation(g, ACTIVATION, False) * u


@triton.jit
def gated_grads(g, u, dh, alpha, limit, ACTIVATION: tl.constexpr):
    """(dg, du) of h = gated(g, u) for the upstream dh, in float32."""
    if ACTIVATION == 3:
        gc = tl.minimum(g, limit)
        uc = tl.minimum(tl.maximum(u, -limit), limit)
        s = tl.sigmoid(alpha * gc)
        glu = gc * s
        dg = tl.where(g <= limit, dh * (uc + 1.0) * (s + alpha * glu * (1.0 - s)), 0.0)
        du = tl.where((u >= -limit) & (u <= limit), dh * glu, 0.0)
    else:
        a, slope = _activation_and_slope(g, ACTIVATION)
        dg = dh * u * slope
        du = dh * a
    return dg, du


@triton.jit
def load_gate_up(ptr, row_off, n0, I, row_mask, INTERLEAVED: tl.constexpr, BLOCK_N: tl.constexpr):
    """(g, u) of columns n0..n0+BLOCK_N of the intermediate, float32, from a buffer of rows
    of 2I in the weight's row order, contiguous along a row; row_off: (BLOCK_M,) element
    offsets of the rows."""
    if INTERLEAVED:
        cols = 2 * n0 + tl.arange(0, 2 * BLOCK_N)
        mask = row_mask[:, None] & (cols < 2 * I)[None, :]
        pair = tl.load(ptr + row_off[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        g, u = tl.split(tl.reshape(pair, (row_off.shape[0], BLOCK_N, 2)))
    else:
        cols = n0 + tl.arange(0, BLOCK_N)
        mask = row_mask[:, None] & (cols < I)[None, :]
        g = tl.load(ptr + row_off[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        u = tl.load(ptr + row_off[:, None] + (cols + I)[None, :], mask=mask, other=0.0).to(tl.float32)
    return g, u


@triton.jit
def store_gate_up(ptr, row_off, n0, I, row_mask, g, u, INTERLEAVED: tl.constexpr, BLOCK_N: tl.constexpr):
    """Store (g, u) where load_gate_up reads them, in ptr's dtype."""
    if INTERLEAVED:
        cols = 2 * n0 + tl.arange(0, 2 * BLOCK_N)
        mask = row_mask[:, None] & (cols < 2 * I)[None, :]
        pair = tl.reshape(tl.join(g, u), (row_off.shape[0], 2 * BLOCK_N))
        tl.store(ptr + row_off[:, None] + cols[None, :], pair.to(ptr.dtype.element_ty), mask=mask)
    else:
        cols = n0 + tl.arange(0, BLOCK_N)
        mask = row_mask[:, None] & (cols < I)[None, :]
        tl.store(ptr + row_off[:, None] + cols[None, :], g.to(ptr.dtype.element_ty), mask=mask)
        tl.store(ptr + row_off[:, None] + (cols + I)[None, :], u.to(ptr.dtype.element_ty), mask=mask)
