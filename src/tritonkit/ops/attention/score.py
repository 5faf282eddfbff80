"""What happens to an attention score between the product q.k and the softmax: one description,
built once per call layout from the public arguments, validated once, and handed whole to every
kernel of every pass and backend as one constexpr (so that it keys the compiled kernels).

For query row i and key j (positions local to a packed sequence):

    s_ij = scale * q_i . k_j
    s_ij = c tanh(s_ij / c)                       with a softcap c > 0 (Gemma 2)
    query i sees key j when every bound that is on allows it:
        causal:        j <= i
        window_left L: j >= i - L       window_right R: j <= i + R      (-1: unbounded)

The kernels apply it in one helper per backend: `triton_score` for the Triton kernels, and the
Gluon kernels' own (`gluon.common`). The float64 references (`reference.py`) state it in
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
    """
    causal: bool = False
    window_left: int = -1
    window_right: int = -1
    softcap: float = 0.0
    scale_positive: bool = True
    tanh_approx: bool = False

    @property
    def window(self) -> bool:
        """Whether either side of a window is bounded."""
        return self.window_left >= 0 or self.window_right >= 0


def window_side(name: str, side: object) -> int:
    """A window side as an int, -1 for unbounded; TypeError / ValueError naming `name`."""
    if isinstance(side, bool) or not isinstance(side, int):
        raise TypeError(f"{name} sides must be ints (-1: unbounded), got {side!r}")
    if side < -1:
        raise ValueError(f"{name} sides must be >= 0, or -1 for unbounded; got {side}")
    return side


def score_of(causal: bool, window_left: int, window_right: int, softcap: float, Nq: int, Nk: int,
             scale_positive: bool = True, interpreting: bool = True) -> Score:
    """The Score of these arguments for queries and keys of Nq and Nk rows (for packed sequences
    the totals, which bound every sequence's length), each bound folded away where it cannot hide
    a key: a right bound under causal (causal already hides every key right of the diagonal), a
    right bound of 0 (that is causal), and bounds at least as wide as the sequence (query i < Nq
    sees key 0 when left >= Nq - 1, key Nk - 1 when right >= Nk - 1). Validates the window sides
    and the softcap (a TypeError or ValueError naming them). scale_positive and interpreting: as
    `Score` has them (taken as flags, not as the scale itself: under torch.compile's dynamic
    shapes a float argument is symbolic, and comparing it would restart the trace)."""
    window_left = window_side("window_left", window_left)
    window_right = window_side("window_right", window_right)
    softcap = float(softcap)
    if not (is_finite(softcap) and softcap >= 0):
        raise ValueError(f"softcap must be a positive, finite float (0: none), got {softcap}")
    causal = bool(causal) or window_right == 0
    if causal or window_right >= max(Nk - 1, 0):
        window_right = -1
    if window_left >= max(Nq - 1, 0):
        window_left = -1
    return Score(causal, window_left, window_right, softcap, scale_positive, softcap > 0 and not interpreting)


def kernel_qk_scale(scale: float, softcap: float) -> float:
    """What the kernels (Triton and Gluon) multiply Q K^T by: scale log2(e), or with a softcap
    c > 0 the tanh's input factor scale / c."""
    return scale / softcap if softcap else scale * LOG2E
