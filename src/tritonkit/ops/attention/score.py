"""What happens to an attention score between the product q.k and the softmax: one description,
built once per call layout from the public arguments, validated once, and handed whole to every
kernel of every pass and backend as one constexpr (so that it keys the compiled kernels).

For query row i and key j (positions local to a packed sequence), with Nq queries and Nk keys
(a sequence's), and i' = i (top-left alignment, SDPA's is_causal) or i' = i + Nk - Nq
(bottom-right, FlashAttention-2's and a KV cache's: the last query sits at the last key):

    s_ij = scale * q_i . k_j
    s_ij = c tanh(s_ij / c)                       with a softcap c > 0 (Gemma 2)
    s_ij = s_ij - slope_h |i' - j|                with ALiBi (a slope a head, or a (batch, head))
    query i sees key j when every bound that is on allows it:
        causal:        j <= i'
        window_left L: j >= i' - L      window_right R: j <= i' + R     (-1: unbounded)
    p_ij = exp(s_ij) / (sum_j' exp(s_ij') + exp(sink_h))     the sink term with learnable sinks
                                                                (gpt-oss), else absent

The kernels apply it in one helper per backend: `triton_score` for the Triton kernels, and the
Gluon kernels' own (`gluon.score`). The float64 references (`reference.py`) state it in
plain torch.
"""

from __future__ import annotations

from typing import NamedTuple

from ..._checks import is_finite

LOG2E = 1.4426950408889634


class Score(NamedTuple):
    """The score description the kernels are compiled for (a constexpr: its fields are Python
    values). Built by `score_of`, which folds bounds that cannot hide a key, so that equal masks
    compile to one kernel.

    causal, window_left, window_right, softcap: as the module docstring says (-1: a window side
    unbounded; 0.0: no softcap).
    scale_positive: the scale is > 0, so that a row's maximum of scale * q.k is scale times the
    maximum of q.k (the forward then scales once, in the exponent's FMA).
    tanh_approx: the softcap's tanh through the GPU's tanh.approx instruction; False where the
    kernels run through the interpreter, which cannot run PTX (`triton_score`), and for kernels
    without a softcap, so that they compile as one variant whatever runs them.
    bottom_right: the bounds and ALiBi's distances aligned bottom-right (folded to False where
    every sequence has as many queries as keys, or nothing depends on it).
    alibi: 0 none, 1 a slope a head, 2 a slope a (batch, head) pair.
    sinks: a learnable sink logit a head joins every row's softmax.
    """
    causal: bool = False
    window_left: int = -1
    window_right: int = -1
    softcap: float = 0.0
    scale_positive: bool = True
    tanh_approx: bool = False
    bottom_right: bool = False
    alibi: int = 0
    sinks: bool = False

    @property
    def window(self) -> bool:
        """Whether either side of a window is bounded."""
        return self.window_left >= 0 or self.window_right >= 0

    def empty_rows(self, varlen: bool) -> bool:
        """Whether a query row may see no key at all (packed sequences, which may be empty; a
        left window; keys aligned bottom-right), for which the kernels keep the softmax finite
        (`mask.py`). varlen: packed sequences."""
        return varlen or self.window_left >= 0 or self.bottom_right


def window_side(name: str, side: object) -> int:
    """A window side as an int, -1 for unbounded; TypeError / ValueError naming `name`."""
    if isinstance(side, bool) or not isinstance(side, int):
        raise TypeError(f"{name} sides must be ints (-1: unbounded), got {side!r}")
    if side < -1:
        raise ValueError(f"{name} sides must be >= 0, or -1 for unbounded; got {side}")
    return side


def score_of(causal: bool, window_left: int, window_right: int, softcap: float, Nq: int, Nk: int,
             scale_positive: bool = True, interpreting: bool = True, bottom_right: bool = False, alibi: int = 0,
             sinks: bool = False, equal_lengths: bool = False) -> Score:
    """The Score of these arguments for queries and keys of Nq and Nk rows (for packed sequences
    the totals, which bound every sequence's length), each bound folded away where it cannot hide
    a key: a right bound under causal (causal already hides every key right of the diagonal), a
    right bound of 0 (that is causal), and bounds at least as wide as the sequence (query i < Nq
    sees key 0 when left >= Nq - 1, key Nk - 1 when right >= Nk - 1; aligned bottom-right, when
    left >= Nk - 1 and right >= Nq - 1); and the alignment where every sequence has as many
    queries as keys (equal_lengths) or no bound or ALiBi is left. Validates the window sides, the
    softcap and the alignment (a TypeError or ValueError naming them). scale_positive and
    interpreting: as `Score` has them (taken as flags, not as the scale itself: under
    torch.compile's dynamic shapes a float argument is symbolic, and comparing it would restart
    the trace); alibi and sinks: as `Score` has them, from `checks._check_score_tensors`."""
    window_left = window_side("window_left", window_left)
    window_right = window_side("window_right", window_right)
    softcap = float(softcap)
    if not (is_finite(softcap) and softcap >= 0):
        raise ValueError(f"softcap must be a positive, finite float (0: none), got {softcap}")
    if not isinstance(bottom_right, bool):
        raise TypeError(f"bottom_right must be a bool, got {type(bottom_right).__name__}")
    causal = bool(causal) or window_right == 0
    bottom_right = bottom_right and not equal_lengths
    # The narrowest bounds that hide no key: top-left, left Nq - 1 and right Nk - 1 (the first
    # query sees key 0, the last key Nk - 1 the first query); bottom-right the other way round.
    widest_left, widest_right = (Nk - 1, Nq - 1) if bottom_right else (Nq - 1, Nk - 1)
    if causal or window_right >= max(widest_right, 0):
        window_right = -1
    if window_left >= max(widest_left, 0):
        window_left = -1
    bottom_right = bottom_right and (causal or window_left >= 0 or window_right >= 0 or alibi > 0)
    return Score(causal, window_left, window_right, softcap, scale_positive, softcap > 0 and not interpreting,
                 bottom_right, alibi, sinks)


def kernel_qk_scale(scale: float, softcap: float) -> float:
    """What the kernels (Triton and Gluon) multiply Q K^T by: scale log2(e), or with a softcap
    c > 0 the tanh's input factor scale / c."""
    return scale / softcap if softcap else scale * LOG2E
