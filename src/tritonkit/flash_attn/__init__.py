"""FlashAttention-2's interface on tritonkit's kernels: code written for `flash_attn` moves over by
changing its imports (`from flash_attn import flash_attn_func` becomes `from tritonkit.flash_attn
import flash_attn_func`). docs/flash-attn-migration.md says what is the same, what differs and
what raises.

The package, one concept a module:
- flash_attn_interface: FlashAttention-2's functions, as views into `tritonkit.attention` and
  `tritonkit.attention_varlen` (bottom-right masks, its layouts of out and softmax_lse);
- arguments: its arguments as its kernels read them (the window rules, softcap 0.0 off, lse +inf
  on rows that see no key, what raises NotImplementedError);
- bert_padding: pad_input, unpad_input and index_first_axis, between padded and packed batches;
- reference: float64 references in its layouts and conventions.
"""

from .flash_attn_interface import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                                   flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                                   flash_attn_varlen_qkvpacked_func, flash_attn_with_kvcache)
from .reference import flash_attn_reference, flash_attn_varlen_reference

__all__ = ["flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache",
           "flash_attn_reference", "flash_attn_varlen_reference"]
