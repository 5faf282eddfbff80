"""The routed experts of transformers' mixture-of-experts families through tritonkit.moe_experts.

transformers 5.17 computes the experts of Qwen3-MoE, Mixtral, gpt-oss, DeepSeek-V3 and Gemma 4 (every
experts class decorated with `use_experts_implementation`) through its experts interface: the
experts module's forward calls the function registered under the model's
`experts_implementation`. Importing tritonkit.transformers registers "tritonkit" there, so

    AutoModelForCausalLM.from_pretrained(path, experts_implementation="tritonkit")
    model.set_experts_implementation("tritonkit")

route the experts through `tritonkit.moe_experts` (and `patch` does the second for the
families in `_families.EXPERTS_FAMILIES`). The function reads the module as transformers' own
implementations do: gate_up_proj (E, 2I, H) and down_proj (E, H, I), or both transposed
(`is_transposed`, gpt-oss), passed as transposed views; the biases where `has_bias`; the
activation from the config's `hidden_act` for transformers' default gate (act(gate) * up of
the two halves), or gpt-oss's clamped gate on its interleaved columns. An experts module it
cannot express (no gate, another activation or gate) runs transformers' own forward.
"""

from __future__ import annotations

import torch
from transformers.integrations.moe import ExpertsInterface, _default_apply_gate

import tritonkit

from . import _parts

NAME = "tritonkit"
_GPT_OSS = "transformers.models.gpt_oss.modeling_gpt_oss"


def is_experts(module: torch.nn.Module) -> bool:
    """Whether `module` is an experts module of transformers' experts interface."""
    return all(hasattr(module, a) for a in ("has_gate", "has_bias", "is_transposed", "is_concatenated")) and \
        hasattr(type(module).forward, "__wrapped__")


def experts_options(experts: torch.nn.Module) -> dict | None:
    """moe_experts' keyword arguments for this experts module, or None where it has none."""
    if not experts.has_gate:
        return None
    if type(experts)._apply_gate is not _default_apply_gate:
        if type(experts).__module__ == _GPT_OSS:
            return dict(activation="gpt_oss", interleaved=not experts.is_concatenated, alpha=float(experts.alpha),
                        limit=float(experts.limit))
        return None
    gated = _parts._GATED.get(_parts.activation_name(experts.config))
    # transformers' default gate splits gate and up as halves (chunk), whatever is_concatenated says
    return None if gated is None else dict(activation=gated[2], interleaved=False)


def tritonkit_experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                              top_k_weights: torch.Tensor) -> torch.Tensor:
    """The experts interface's signature: (T, H) hidden states, the router's (T, k) experts and
    weights; returns (T, H)."""
    options = experts_options(self)
    if options is None:
        return type(self).forward.__wrapped__(self, hidden_states, top_k_index, top_k_weights)
    gate_up, down = self.gate_up_proj, self.down_proj
    if self.is_transposed:
        gate_up, down = gate_up.transpose(1, 2), down.transpose(1, 2)
    biases = (self.gate_up_proj_bias, self.down_proj_bias) if self.has_bias else (None, None)
    return tritonkit.moe_experts(hidden_states, top_k_index, top_k_weights, gate_up, down, *biases, **options)


def register() -> None:
    ExpertsInterface.register(NAME, tritonkit_experts_forward)


def patch_experts(model: torch.nn.Module) -> tuple[str | None, str]:
    """Set the model's experts implementation to "tritonkit": (what runs now, None) or (None,
    why it was left)."""
    found = [m for m in model.modules() if is_experts(m)]
    if not found:
        return None, "no experts module of transformers' experts interface in the model"
    model.set_experts_implementation(NAME)
    if model.config._experts_implementation != NAME:
        return None, f"{type(model).__name__} does not take an experts implementation"
    ours = sum(experts_options(m) is not None for m in found)
    detail = f"tritonkit.moe_experts in {ours} {type(found[0]).__name__} (experts_implementation='{NAME}')"
    if ours < len(found):
        detail += f"; {len(found) - ours} with another gate or activation run transformers' own forward"
    return detail, None


def default_to_tritonkit(original):
    """A PreTrainedModel's get_correct_experts_implementation whose default is "tritonkit"."""
    def get_correct_experts_implementation(self, requested_experts):
        return original(self, NAME if requested_experts is None else requested_experts)
    get_correct_experts_implementation._tritonkit_original = original
    return get_correct_experts_implementation

