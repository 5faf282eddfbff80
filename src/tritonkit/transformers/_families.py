"""The transformers families `patch` knows: each one's modeling module and the forms of its parts.

A part's form decides which tritonkit op computes it exactly, or that none does; `_patch` reads
only these fields, so a new family is one entry here when its parts take forms known already.
"""

from __future__ import annotations

import importlib
import types
from dataclasses import dataclass

from ._residual import LayerForm


@dataclass(frozen=True)
class Family:
    """A transformers model family: its modeling module and the shapes of its parts."""
    name: str                    # transformers' model_type, e.g. "llama"
    prefix: str                  # class-name prefix, e.g. "Llama" (LlamaRMSNorm, LlamaMLP, LlamaForCausalLM)
    norm: str = "RMSNorm"        # the RMSNorm class's suffix
    norm_offset: float = 0.0     # Gemma 2/3's RMSNorm scales by (1 + w)
    # The norm multiplies by the weight in float32 and casts once (gpt-oss, OLMo 2/3, Gemma): the
    # same function for a weight of any dtype (gpt-oss keeps its norms' weights in float32).
    # Llama's casts first and multiplies in the weight's dtype, which then promotes the result.
    norm_in_float32: bool = False
    # transformers' rotary function(s) (_rope.py): "pair" apply_rotary_pos_emb(q, k, cos, sin);
    # "half_cos" the same with cos and sin over half the head (gpt-oss); "one" apply_rotary_pos_emb(x,
    # cos, sin, unsqueeze_dim) of one tensor (Gemma 4); "pair_and_interleaved" "pair" and
    # DeepSeek-V3's apply_rotary_pos_emb_interleave.
    rope: str = "pair"
    mlp: str | None = "MLP"      # the gated dense MLP's class suffix; None: the family has none
    packed_mlp: bool = False     # Phi-3: one gate_up projection
    attention: str = "Attention"  # the attention class's suffix
    decoder_layer: str = "DecoderLayer"  # the decoder layer class's suffix
    sinks: bool = False          # attention modules hold learnable sinks (`sinks`, passed as s_aux)
    experts: bool = False        # routed experts of transformers' experts interface (_experts.py)
    aux_loss: bool = False       # the causal LM adds the router's load-balancing loss (output_router_logits)
    final_softcap: str | None = None  # config attribute capping the logits (Gemma 2, 3 and 4)
    # The decoder layer's residual form (_residual.make_decoder_layer_forward), or None where the
    # adds are not of a fusable form (post-norm layers, Gemma 4's extra steps).
    layer: LayerForm | None = LayerForm()
    config: str = "Config"       # the text config class's suffix (for patch_classes' default config)

    @property
    def module(self) -> types.ModuleType:
        return importlib.import_module(f"transformers.models.{self.name}.modeling_{self.name}")

    def cls(self, suffix: str):
        return getattr(self.module, f"{self.prefix}{suffix}")

    def default_config(self):
        """The family's config with its defaults, or None where it cannot be built."""
        try:
            module = importlib.import_module(f"transformers.models.{self.name}.configuration_{self.name}")
            return getattr(module, f"{self.prefix}{self.config}")()
        except (ImportError, AttributeError, TypeError, ValueError):
            return None


_SANDWICH = LayerForm(("post_attention_layernorm",), "pre_feedforward_layernorm", ("post_feedforward_layernorm",))
_WHY_NO_LAYER = {
    # OLMo 2/3 normalise each branch's output before its add (x + norm(attn(x))): no sum is normalised.
    "olmo2": "post-norm layers: the adds' sums are not normalised",
    "olmo3": "post-norm layers: the adds' sums are not normalised",
    # Gemma 4's layer scales its output (layer_scalar) and may add per-layer inputs and an experts branch.
    "gemma4": "the layer scales its output and may add per-layer inputs and an experts branch",
}

FAMILIES = {f.name: f for f in (
    Family("llama", "Llama"),
    Family("mistral", "Mistral"),
    Family("qwen2", "Qwen2"),
    Family("qwen3", "Qwen3"),
    Family("gemma2", "Gemma2", norm_offset=1.0, norm_in_float32=True, final_softcap="final_logit_softcapping",
           layer=_SANDWICH),
    Family("gemma3", "Gemma3", norm_offset=1.0, norm_in_float32=True, final_softcap="final_logit_softcapping",
           layer=_SANDWICH, config="TextConfig"),
    Family("phi3", "Phi3", packed_mlp=True, layer=LayerForm(("resid_attn_dropout",), "post_attention_layernorm",
                                                             ("resid_mlp_dropout",))),
    Family("qwen3_moe", "Qwen3Moe", experts=True, aux_loss=True),
    Family("mixtral", "Mixtral", mlp=None, experts=True, aux_loss=True),
    Family("gpt_oss", "GptOss", norm_in_float32=True, rope="half_cos", mlp=None, sinks=True, experts=True,
           aux_loss=True, layer=LayerForm(mlp_pair=True)),
    Family("deepseek_v3", "DeepseekV3", rope="pair_and_interleaved", experts=True),
    Family("gemma4", "Gemma4", norm_in_float32=True, rope="one", mlp="TextMLP", attention="TextAttention",
           decoder_layer="TextDecoderLayer",
           experts=True, final_softcap="final_logit_softcapping", layer=None, config="TextConfig"),
    Family("olmo2", "Olmo2", norm_in_float32=True, layer=None),
    Family("olmo3", "Olmo3", norm_in_float32=True, layer=None),
)}

# Families whose models may hold routed experts (part `experts`).
EXPERTS_FAMILIES = {name: f for name, f in FAMILIES.items() if f.experts}


def why_no_layer(fam: Family) -> str:
    return _WHY_NO_LAYER.get(fam.name, "not of the known form")


def family_of(model_or_name) -> Family:
    """The family of a model instance, a model class, or a model_type name ("llama")."""
    if isinstance(model_or_name, str):
        if model_or_name not in FAMILIES:
            raise ValueError(f"family {model_or_name!r} is not supported; supported: {sorted(FAMILIES)}")
        return FAMILIES[model_or_name]
    cls = model_or_name if isinstance(model_or_name, type) else type(model_or_name)
    for klass in cls.__mro__:
        for fam in FAMILIES.values():
            if klass.__module__ == f"transformers.models.{fam.name}.modeling_{fam.name}":
                return fam
    raise ValueError(f"model {cls.__name__} is not of a supported family; supported: {sorted(FAMILIES)}")
