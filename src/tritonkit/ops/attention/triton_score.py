"""The Triton kernels' side of `score.py`, shared by the forward and both backward passes: the
base-2 score of a tile (`_score2`: scale or softcap, ALiBi), and each row's softmax start
(`_row_start`: a learnable sink's logit). The mask is `mask.py`'s.

The softmax works in base 2: s2 = log2(e) s, so p = 2^(s2 - m2). ALiBi's bias -slope |i + diag - j|
enters as -slope log2(e) |i + diag - j| (`_alibi_slope` loads the slope already scaled).

The softcap of Gemma 2, s -> c tanh(s / c):
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

from .mask import _diag
from .score import LOG2E as _LOG2E_VALUE

# A global a kernel reads must be a constexpr (compiled kernels refuse plain floats).
LOG2E = tl.constexpr(_LOG2E_VALUE)


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


@triton.jit
def _score2(qk, qk_scale, q, k, diag, slope2, SCORE: tl.constexpr):
    # Base-2 scores of the raw products qk (before the mask) and the softcap's tanh of them (the
    # backward's factor 1 - tanh^2; qk itself where there is no softcap, unused). q, k: query
    # and key indices broadcasting to the tile as in `mask._visible`; diag: `mask._diag`;
    # slope2: `_alibi_slope`.
    if SCORE.softcap > 0:
        th = _softcap_tanh(qk, qk_scale, SCORE.tanh_approx)
        s2 = th * (SCORE.softcap * LOG2E)
    else:
        th = qk
        s2 = qk * qk_scale
    if SCORE.alibi > 0:
        if SCORE.bottom_right:
            at = q + diag
        else:
            at = q
        s2 -= slope2 * tl.abs(at - k).to(tl.float32)
    return s2, th


@triton.jit
def _alibi_slope(ALIBI, b, h, H, SCORE: tl.constexpr):
    # The ALiBi slope of (batch b, head h) times log2(e): ALIBI holds float32 slopes, one a head
    # (SCORE.alibi == 1) or one a (batch, head) pair (== 2); 0.0 without ALiBi.
    if SCORE.alibi == 2:
        slope2 = tl.load(ALIBI + b.to(tl.int64) * H + h) * LOG2E
    elif SCORE.alibi == 1:
        slope2 = tl.load(ALIBI + h) * LOG2E
    else:
        slope2 = 0.0
    return slope2


@triton.jit
def _score_at(ALIBI, seq, h, H, nq, nk, SCORE: tl.constexpr):
    # What a query tile's scores depend on beyond Q K^T, as `_score2` takes it: score_at =
    # (diag, ALiBi slope) of head h of sequence seq, nq queries and nk keys long
    # (`mask._diag`, `_alibi_slope`).
    return _diag(nq, nk, SCORE), _alibi_slope(ALIBI, seq, h, H, SCORE)


@triton.jit
def _row_start(SINKS, h, BLOCK_M: tl.constexpr, SCORE: tl.constexpr):
    # A row's running maximum and sum before its first key block (base 2): -inf and 0, or with a
    # learnable sink (gpt-oss) the sink's logit, as if a key of that score and no value had been
    # seen first: it joins every row's softmax denominator and lse, and a row that sees no key
    # gets output 0 and lse = the sink.
    if SCORE.sinks:
        m_i = tl.zeros([BLOCK_M], tl.float32) + tl.load(SINKS + h).to(tl.float32) * LOG2E
        l_i = tl.full([BLOCK_M], 1.0, tl.float32)
    else:
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
    return m_i, l_i
