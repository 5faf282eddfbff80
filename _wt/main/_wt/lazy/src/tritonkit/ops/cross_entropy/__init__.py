"""Cross-entropy losses: `cross_entropy` on logits, and `linear_cross_entropy`, which fuses the
linear head in and never holds the (tokens x vocabulary) logits. One row kernel (kernel.py)
serves both; linear.py chunks the tokens around cuBLAS products."""

from .kernel import REDUCTIONS
from .linear import (linear_cross_entropy, linear_cross_entropy_bwd, linear_cross_entropy_fwd,
                     linear_cross_entropy_reference)
from .logits import cross_entropy, cross_entropy_bwd, cross_entropy_fwd, cross_entropy_reference

__all__ = ["REDUCTIONS", "cross_entropy", "cross_entropy_bwd", "cross_entropy_fwd", "cross_entropy_reference",
           "linear_cross_entropy", "linear_cross_entropy_bwd", "linear_cross_entropy_fwd",
           "linear_cross_entropy_reference"]
