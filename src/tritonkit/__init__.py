"""tritonkit: Triton GPU kernels for the work of large language models.

Importing tritonkit never touches a GPU. Without a CUDA device, kernels run through
Triton's interpreter on CPU tensors (see `tritonkit._runtime`).
"""

from . import _runtime  # must come first: it picks compiled or interpreted Triton

from ._runtime import INTERPRETED, default_device
from .ops.add import add
from .ops.softmax import softmax
from .ops.attention import attention, attention_varlen
from . import nn

__all__ = ["INTERPRETED", "default_device", "add", "softmax", "attention", "attention_varlen", "nn"]
__version__ = "0.1.0"
