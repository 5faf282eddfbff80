"""RMSNorm and LayerNorm: one kernel family (`_kernels.py`, launched by `_rows.py`), one module per norm."""

from .layer_norm import layer_norm, layer_norm_bwd, layer_norm_fwd, layer_norm_reference
from .rms_norm import rms_norm, rms_norm_bwd, rms_norm_fwd, rms_norm_reference

__all__ = ["rms_norm", "rms_norm_fwd", "rms_norm_bwd", "rms_norm_reference",
           "layer_norm", "layer_norm_fwd", "layer_norm_bwd", "layer_norm_reference"]
