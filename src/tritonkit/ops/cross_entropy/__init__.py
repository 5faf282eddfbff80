"""Cross-entropy losses: `cross_entropy` on logits, and `linear_cross_entropy`, which fuses the
linear head in and never holds the (tokens x vocabulary) logits; and `linear_logprobs`, the
per-token log-probabilities and entropy of a head, the same way. One row kernel (kernel.py)
serves both losses, another (logprob_kernel.py) the log-probabilities and the post-training
losses built on them; chunks.py chunks the tokens around cuBLAS products for all three."""

from ..._checks import check_bool, check_float, check_int, checked_arguments, choice_of, optional_float, optional_int
from . import linear as _linear, logits as _logits, logprobs as _logprobs
from .kernel import REDUCTIONS
from .linear import linear_cross_entropy_bwd, linear_cross_entropy_fwd, linear_cross_entropy_reference
from .logits import cross_entropy_bwd, cross_entropy_fwd, cross_entropy_reference
from .logprobs import linear_logprobs_bwd, linear_logprobs_fwd, linear_logprobs_reference

__all__ = ["OPTION_TYPES", "REDUCTIONS", "cross_entropy", "cross_entropy_bwd", "cross_entropy_fwd",
           "cross_entropy_reference", "linear_cross_entropy", "linear_cross_entropy_bwd", "linear_cross_entropy_fwd",
           "linear_cross_entropy_reference", "linear_logprobs", "linear_logprobs_bwd", "linear_logprobs_fwd",
           "linear_logprobs_reference"]

# The types of the options these functions take (their ranges are checked where they are used);
# the post-training losses over a head take the same ones.
OPTION_TYPES = dict(ignore_index=check_int, label_smoothing=check_float, reduction=choice_of(*REDUCTIONS),
                    softcap=optional_float, temperature=check_float, inplace_backward=check_bool,
                    return_entropy=check_bool, chunk_tokens=optional_int)
_typed = checked_arguments(**OPTION_TYPES)

cross_entropy = _typed(_logits.cross_entropy)
linear_cross_entropy = _typed(_linear.linear_cross_entropy)
linear_logprobs = _typed(_logprobs.linear_logprobs)
