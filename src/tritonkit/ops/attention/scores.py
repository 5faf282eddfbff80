"""Score modifications applied before the softmax, shared by the forward and both backward
passes: the logit softcap of Gemma 2, s -> c tanh(s / c).

With x = scale * q.k and cap_in = 2 scale log2(e) / c (what the launcher passes as qk_scale),
t = 2^(-|cap_in q.k|) = e^(-2|x|/c) lies in (0, 1] and never overflows, and
    tanh(x / c) = sign(x) (1 - t) / (1 + t);
the base-2 score the softmax uses is tanh(x / c) c log2(e), and the gradient of the capped
score by x is 1 - tanh(x / c)^2. One exp2, one fast reciprocal and a few FMAs an element, in
float32.
"""

import triton
import triton.language as tl


@triton.jit
def _softcap_tanh(qk, cap_in):
    # tanh(x / c) of raw scores qk, x = scale * qk (see the module docstring).
    y = qk * cap_in
    t = tl.math.exp2(-tl.abs(y))
    th = tl.fdiv(1.0 - t, 1.0 + t)
    return tl.where(y < 0.0, -th, th)
