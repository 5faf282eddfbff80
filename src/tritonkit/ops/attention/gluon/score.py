"""The Gluon kernels' side of `ops.attention.score`: what happens to a tile of raw products q.k
before the softmax (or, in the backward, before P), applied by `Scores`'s methods, which the
forward and both backward passes call. A score option lands here (and in the block ranges the
mask leaves, `common`), not in the kernels.

The kernels multiply Q K^T by qk_scale = `score.kernel_qk_scale(scale, softcap)` and work in
base 2: without a softcap the base-2 score is q.k qk_scale (qk_scale = scale log2 e); with a
softcap c it is tanh(q.k qk_scale) c log2 e (qk_scale = scale / c), tanh being the GPU's
`tanh.approx.f32`, as in the Triton kernels compiled for the GPU (`triton_score` has the
formula and its accuracy): the Gluon kernels run only compiled, so `Score.tanh_approx` does not
apply to them.
"""

# No `from __future__ import annotations`: an aggregate's field annotations are its types.
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..score import LOG2E
from .common import bundle

_LOG2E = gl.constexpr(LOG2E)


@gluon.jit
def _softcap_tanh(qk, cap_in):
    # tanh(y), y = qk * cap_in = scale q.k / c, for raw scores qk: one tanh.approx.f32 (a MUFU
    # operation) an element, the instruction the Triton kernels use on the GPU, so that both
    # paths' forwards and backwards agree on P.
    return gl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [qk * cap_in], dtype=gl.float32,
                                     is_pure=True, pack=1)


@bundle
class Scores:
    """The score of a kernel: SCORE, the `score.Score` it is compiled for (a constexpr), and
    qk_scale, what Q K^T is multiplied by. With t = `capped(s)` of raw products s, the base-2
    score is `base2(t)`; `capped_grad` folds the softcap's derivative into dS; `mask` and
    `mask_t` hide what the Score hides, in S tiles (query rows, key columns) and S^T tiles."""
    qk_scale: gl.base_value
    SCORE: gl.constexpr


    @gluon.jit
    def check(self):
        # What of a Score the Gluon kernels apply: a causal mask with a left window, a softcap,
        # the scale's sign, learnable sinks (the forward's `with_sink`; the backward reads them
        # in lse). The dispatch (`paths`) sends them nothing else; a Score with more does not
        # compile here rather than being applied in part.
        gl.static_assert(self.SCORE.window_right < 0, "the Gluon kernels have no right window")
        gl.static_assert(self.SCORE.causal or self.SCORE.window_left < 0, "a window only under a causal mask")
        gl.static_assert(not self.SCORE.bottom_right, "the Gluon kernels align queries and keys top-left")
        gl.static_assert(self.SCORE.alibi == 0, "the Gluon kernels have no ALiBi")

    @gluon.jit
    def capped(self, s):
        # Raw products s -> t: tanh(s qk_scale) with a softcap, s itself without.
        if self.SCORE.softcap > 0:
            s = _softcap_tanh(s, self.qk_scale)
        return s

    @gluon.jit
    def base2(self, t):
        # The base-2 score of t = `capped(s)` (or a row maximum of them): t c log2 e with a
        # softcap c (c > 0 keeps the order, so a row maximum of t is scaled once), t qk_scale
        # without one.
        if self.SCORE.softcap > 0:
            t = t * (self.SCORE.softcap * _LOG2E)
        else:
            t = t * self.qk_scale
        return t

    @gluon.jit
    def sink_logit(self, SINKS, h, like):
        # Head h's sink logit (natural log, float32), one a row of `like` (a vector of rows).
        return gl.load(SINKS + h + gl.full(like.shape, 0, gl.int32, like.type.layout)).to(gl.float32)

    @gluon.jit
    def with_sink(self, m_i, l_i, SINKS, h):
        # A learnable sink (gpt-oss) joins each row's softmax as a key of logit SINKS[h] and no
        # value, folded in once after the walk, from the walk's base-2 maximum m and sum l:
        #   m' = max(m, sink log2 e),  l' = l 2^(m - m') + 2^(sink log2 e - m'),
        # returned with the output's factor 2^(m - m') / l' (o = acc times it). After the walk
        # rather than before it (as `triton_score._row_start` starts the Triton kernels' walk):
        # with a softcap's fixed reference (FIXED_MAX) the walk's m is a constant that holds only
        # for bounded scores, which a sink's logit is not. A sink that outweighs the keys past
        # float32's range gives the factor 0 (o = 0) and a finite lse.
        sink = self.sink_logit(SINKS, h, m_i) * _LOG2E
        m_new = gl.maximum(m_i, sink)
        alpha = gl.exp2(m_i - m_new)
        l_new = l_i * alpha + gl.exp2(sink - m_new)
        return m_new, l_new, alpha / l_new

    @gluon.jit
    def capped_grad(self, p, t):
        # dS's factor from the softcap, the derivative of c tanh(x / c): p (1 - t^2), t =
        # `capped(s)`; p itself without a softcap.
        if self.SCORE.softcap > 0:
            p = p * (1.0 - t * t)
        return p

    @gluon.jit
    def mask(self, s, fill, row0, col0, Nk):
        # An S tile of query rows from row0 and key columns from col0 (local to the sequence),
        # fill where the key is past Nk (a ragged last block: zeros of K past the tensor's end,
        # or a packed batch's next sequence) or hidden from the row (causal: after it; with a
        # left window L also before i - L).
        layout: gl.constexpr = s.type.layout
        cols = col0 + gl.arange(0, s.shape[1], layout=gl.SliceLayout(0, layout))
        keep = gl.expand_dims(cols < Nk, 0)
        if self.SCORE.causal:
            rows = row0 + gl.arange(0, s.shape[0], layout=gl.SliceLayout(1, layout))
            keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1))
            if self.SCORE.window_left >= 0:
                keep = keep & (gl.expand_dims(cols, 0) >= gl.expand_dims(rows - self.SCORE.window_left, 1))
        return gl.where(keep, s, fill)

    @gluon.jit
    def mask_t(self, st, fill, key0, m0):
        # An S^T tile of key rows from key0 and query columns from m0 (the dK/dV pass's), fill
        # where the key is hidden from the query (causal: query i sees keys <= i; with a left
        # window L also keys >= i - L). Keys past the sequence are not masked: their rows of dK
        # and dV are never stored.
        if self.SCORE.causal:
            layout: gl.constexpr = st.type.layout
            cols = m0 + gl.arange(0, st.shape[1], layout=gl.SliceLayout(0, layout))
            keys = key0 + gl.arange(0, st.shape[0], layout=gl.SliceLayout(1, layout))
            keep = gl.expand_dims(cols, 0) >= gl.expand_dims(keys, 1)
            if self.SCORE.window_left >= 0:
                keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(keys + self.SCORE.window_left, 1))
            st = gl.where(keep, st, fill)
        return st
