"""tritonkit: Triton GPU kernels for the work of large language models.

Importing tritonkit never touches a GPU. Without a CUDA device, kernels run through
Triton's interpreter on CPU tensors (see `tritonkit._runtime`).
"""

from . import _runtime  # must come first: it picks compiled or interpreted Triton

from ._runtime import INTERPRETED, default_device
from .ops.add import add
from .ops.softmax import softmax
from .ops.attention import attention, attention_varlen
from .ops.norms import layer_norm, rms_norm
from .ops.rope import rope
from .ops.gated import geglu, swiglu
from .ops.gated_linear import gated_linear
from .ops.cross_entropy import cross_entropy, linear_cross_entropy, linear_logprobs
from .ops.moe import moe_experts
from .ops.post_training import distill_loss, dpo_loss, grpo_loss, kto_loss, orpo_loss, simpo_loss
from . import nn

__all__ = ["INTERPRETED", "default_device", "add", "softmax", "attention", "attention_varlen", "rms_norm",
           "layer_norm", "rope", "swiglu", "geglu", "gated_linear", "cross_entropy", "linear_cross_entropy",
           "linear_logprobs", "grpo_loss", "dpo_loss", "orpo_loss", "simpo_loss", "kto_loss", "distill_loss",
           "moe_experts", "nn"]
__version__ = "0.1.0"  # the one place the version is written (pyproject reads it)
