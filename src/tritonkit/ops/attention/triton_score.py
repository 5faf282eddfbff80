"""The Triton kernels' side of `score.py`, shared by the forward and both backward passes: the
logit softcap of Gemma 2, s -> c tanh(s / c).

With x = scale * q.k and cap_in = scale / c (what the launcher passes as qk_scale), y = cap_in q.k
= x / c; the base-2 score the softmax uses is tanh(y) c log2(e), and the gradient of the capped
score by x is 1 - tanh(y)^2.

tanh(y) comes from one of two formulas, chosen by a constexpr (TANH_APPROX):
- compiled for the GPU: the `tanh.approx.f32` instruction, one MUFU (special-function unit)
  operation an element, maximum relative error 2^-10.99 (PTX ISA). In the softmax's exponent
  that is an absolute error of at most |s| 2^-11 (s the capped score in natural-log units,
  |s| < c): 2^-11 relative in P for |s| <= 1, and below the bfloat16 rounding of P (2^-9)
  for |s| <= 4; a saturated score of a large cap (c = 50) moves P by up to 2.5%, the error
  of computing that score in float16. The forward and both backward passes use the same
  instruction, so the P they recompute agree with the forward's lse.
- under the interpreter (which cannot run PTX): t = 2^(-2 log2(e) |y|) = e^(-2|y|) in (0, 1]
  never overflows, and tanh(y) = sign(y) (1 - t) / (1 + t). Exact to float32 rounding; on the
  GPU it costs an exp2 and a reciprocal (two MUFU operations) where the approximation costs one,
  and the special-function unit is the forward's second bottleneck after the tensor cores.
"""

import triton
import triton.language as tl

@triton.jit
def _softcap_tanh(qk, cap_in, TANH_APPROX: tl.constexpr):
    # tanh(x / c) of raw scores qk, x = scale * qk (see the module docstring).
    y = qk * cap_in
    if TANH_APPROX:
        th = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [y], dtype=tl.float32,
                                       is_pure=True, pack=1)
    else:
        t = tl.math.exp2(tl.abs(y) * -2.8853900817779268)
        th = tl.fdiv(1.0 - t, 1.0 + t)
        th = tl.where(y < 0.0, -th, th)
    return th
