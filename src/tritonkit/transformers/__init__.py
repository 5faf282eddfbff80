"""tritonkit inside Hugging Face transformers models, in one call.

    import tritonkit.transformers as tkt
    model = tkt.patch(AutoModelForCausalLM.from_config(config))   # in place; returns the model
    print(model.tritonkit_report)                                  # what was replaced, what was left and why

    tkt.patch_classes("llama")                                     # before from_pretrained / Trainer
    model = AutoModelForCausalLM.from_pretrained(path)              # built already patched

    AutoModelForCausalLM.from_pretrained(path, attn_implementation="tritonkit")  # attention alone
    AutoModelForCausalLM.from_pretrained(path, experts_implementation="tritonkit")  # MoE experts alone

Importing this module imports transformers and registers the "tritonkit" attention
implementation; `import tritonkit` alone never imports transformers. See docs/transformers.md.
"""

from __future__ import annotations

from ._attention import AttentionFallbackWarning, register, tritonkit_attention_forward
from ._experts import register as register_experts
from ._masks import tritonkit_mask
from ._families import EXPERTS_FAMILIES, FAMILIES, family_of
from ._patch import PARTS, PatchReport, patch, patch_classes, unpatch_classes

register()
register_experts()

__all__ = ["patch", "patch_classes", "unpatch_classes", "PatchReport", "FAMILIES", "EXPERTS_FAMILIES", "PARTS",
           "family_of", "AttentionFallbackWarning", "tritonkit_attention_forward", "tritonkit_mask"]
