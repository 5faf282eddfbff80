"""Cross-entropy losses: `cross_entropy` on logits, and `linear_cross_entropy`, which fuses the
linear head in and never holds the (tokens x vocabulary) logits; and `linear_logprobs`, the
per-token log-probabilities and entropy of a head, the same way. One row kernel (kernel.py)
serves both losses, another (logprob_kernel.py) the log-probabilities and the post-training
losses built on them; chunks.py chunks the tokens around cuBLAS products for all three."""

from .kernel import REDUCTIONS
from .linear import (linear_cross_entropy, linear_cross_entropy_bwd, linear_cross_entropy_fwd,
                     linear_cross_entropy_reference)
from .logits import cross_entropy, cross_entropy_bwd, cross_entropy_fwd, cross_entropy_reference
from .logprobs import linear_logprobs, linear_logprobs_bwd, linear_logprobs_fwd, linear_logprobs_reference

__all__ = ["REDUCTIONS", "cross_entropy", "cross_entropy_bwd", "cross_entropy_fwd", "cross_entropy_reference",
           "linear_cross_entropy", "linear_cross_entropy_bwd", "linear_cross_entropy_fwd",
           "linear_cross_entropy_reference", "linear_logprobs", "linear_logprobs_bwd", "linear_logprobs_fwd",
           "linear_logprobs_reference"]
