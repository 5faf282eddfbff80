"""Cross-entropy losses: `cross_entropy` on logits, and `linear_cross_entropy`, which fuses the
linear head in and never holds the (tokens x vocabulary) logits; and `linear_logprobs`, the
per-token log-probabilities and entropy of a head, the same way. One row kernel (kernel.py)
serves both losses, another (logprob_kernel.py) the log-probabilities and the post-training
losses built on them; chunks.py chunks the tokens around cuBLAS products for all three."""

import functools

from ..._checks import check_bool, check_choice, check_float, check_int
from . import linear as _linear, logits as _logits, logprobs as _logprobs
from .kernel import REDUCTIONS
from .linear import linear_cross_entropy_bwd, linear_cross_entropy_fwd, linear_cross_entropy_reference
from .logits import cross_entropy_bwd, cross_entropy_fwd, cross_entropy_reference
from .logprobs import linear_logprobs_bwd, linear_logprobs_fwd, linear_logprobs_reference

__all__ = ["REDUCTIONS", "check_option_types", "cross_entropy", "cross_entropy_bwd", "cross_entropy_fwd",
           "cross_entropy_reference", "linear_cross_entropy", "linear_cross_entropy_bwd", "linear_cross_entropy_fwd",
           "linear_cross_entropy_reference", "linear_logprobs", "linear_logprobs_bwd", "linear_logprobs_fwd",
           "linear_logprobs_reference"]

# The types of the keyword options these functions take (their ranges are checked where they are used).
_OPTION_TYPES = {
    "ignore_index": check_int,
    "label_smoothing": check_float,
    "reduction": functools.partial(check_choice, choices=REDUCTIONS),
    "softcap": functools.partial(check_float, optional=True),
    "temperature": check_float,
    "inplace_backward": check_bool,
    "return_entropy": check_bool,
    "chunk_tokens": functools.partial(check_int, optional=True),
}


def check_option_types(options: dict) -> None:
    """TypeError naming the first of these loss options whose value has the wrong type."""
    for name, value in options.items():
        check = _OPTION_TYPES.get(name)
        if check is not None:
            check(name, value)


def _options_typed(loss):
    """`loss` with its keyword options' types checked first."""
    @functools.wraps(loss)
    def typed(*tensors, **options):
        check_option_types(options)
        return loss(*tensors, **options)
    return typed


cross_entropy = _options_typed(_logits.cross_entropy)
linear_cross_entropy = _options_typed(_linear.linear_cross_entropy)
linear_logprobs = _options_typed(_logprobs.linear_logprobs)
