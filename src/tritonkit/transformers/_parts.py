"""The replacement forwards: RMSNorm, gated MLP, and the causal-LM loss (rotary: _rope.py).

Each is a plain function of the module (bound to one instance by `patch`, or set on the class by
`patch_classes`) that computes what transformers' own forward computes, through tritonkit's ops.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

import tritonkit

from . import _ahead, _projections, _residual

# transformers' activation names -> (tritonkit op, its extra arguments, gated_linear's activation)
_GATED = {
    "silu": ("swiglu", {}, "silu"),
    "swish": ("swiglu", {}, "silu"),
    "gelu_pytorch_tanh": ("geglu", {"approximate": "tanh"}, "gelu_tanh"),
    "gelu_new": ("geglu", {"approximate": "tanh"}, "gelu_tanh"),
    "gelu": ("geglu", {"approximate": "none"}, "gelu"),
}


def activation_name(config) -> str | None:
    return getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", None)


def gated_op(config):
    """(op, kwargs) for the family's gated activation, or (None, reason)."""
    name = activation_name(config)
    if name not in _GATED:
        return None, f"activation {name!r} has no tritonkit gated op"
    op, extra, _ = _GATED[name]
    return functools.partial(getattr(tritonkit, op), **extra), None


def gated_linear_op(config):
    """tritonkit.gated_linear with the family's activation (the activation and down_proj in one
    op that does not keep h for the backward), or None."""
    name = activation_name(config)
    if name not in _GATED:
        return None
    return functools.partial(tritonkit.gated_linear, activation=_GATED[name][2])


# ---------------------------------------------------------------- RMSNorm

def make_rms_norm_forward(original, weight_offset: float, in_float32: bool = False):
    """RMSNorm through tritonkit.rms_norm: x / rms(x) * (weight_offset + w), or x / rms(x) for a
    norm without a weight (Gemma 4's `with_scale=False`).

    weight_offset 0 is Llama's form, 1 is Gemma 2/3's (1 + w). in_float32: the family multiplies
    by the weight in float32 and casts once (gpt-oss, OLMo 2/3, Gemma), as tritonkit does, and
    returns x's dtype whatever the weight's; otherwise (Llama's form: cast, then multiply in the
    weight's dtype, which promotes) a weight whose dtype differs from the input's takes the
    original. An input whose norm the previous decoder layer computed with its residual add
    (`_residual.add_ahead`) returns that result.
    """
    @functools.wraps(original)
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        ahead = _ahead.take(self, hidden_states)
        if ahead is not None:
            return ahead
        weight = getattr(self, "weight", None)
        if weight is not None and hidden_states.dtype != weight.dtype and not in_float32:
            return original(self, hidden_states)
        return tritonkit.rms_norm(hidden_states, weight, _residual.eps_of(self), weight_offset=weight_offset)
    forward._tritonkit_original = original
    setattr(forward, _residual.OFFSET, weight_offset)
    return forward


# ---------------------------------------------------------------- gated MLP

def make_mlp_forward(original, gated, packed: bool, tail=None):
    """down(act(gate(x)) * up(x)) with the activation and product in one tritonkit op, and gate and
    up as one `_projections.shared_linear` (one input gradient) when it applies.

    packed: one gate_up projection with [gate, up] along the last dim (Phi-3), given whole to the op.
    gated: the op (from `gated_op`), or None to choose it and `tail` from the module's config at each
    call (class-level patching, where no config is known yet; an activation without an op runs the
    original). tail: `gated_linear_op`'s op, or None. Where down_proj passes
    `_projections.tail_fusable` (a plain nn.Linear in the activations' dtype and device, or under
    autocast in any dtype; gradients on), whatever gate and up are, the activation and down_proj
    run as that one op, which keeps gate and up for the backward but not h = act(gate) * up
    (recomputed there): one (tokens x intermediate) tensor less a layer, the same bits.
    """
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        op, fused = (gated, tail) if gated is not None else (gated_op(self.config)[0], gated_linear_op(self.config))
        if op is None:
            return original(self, x)
        down = self.down_proj
        if packed:
            gate_up = self.gate_up_proj(x)
            if fused is not None and _projections.tail_fusable(down, gate_up):
                return fused(gate_up, None, down.weight, down.bias)
            return down(op(gate_up))  # the op splits [gate, up] into views
        pair = (self.gate_proj, self.up_proj)
        if _projections.shareable(pair, x):  # one input gradient for both (see _projections)
            gate, up = _projections.shared_linear(x, pair)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        if fused is not None and _projections.tail_fusable(down, gate):
            return fused(gate, up, down.weight, down.bias)
        return down(op(gate, up))
    functools.update_wrapper(forward, original)
    forward._tritonkit_original = original
    return forward


# ---------------------------------------------------------------- causal-LM loss

def make_causal_lm_forward(original, final_softcap_attr: str | None, aux_loss=None):
    """The CausalLM forward: with labels and gradients on, hidden states -> linear_cross_entropy.

    The (tokens x vocabulary) logits are never built: the output's `logits` is None, and no KV
    cache is built unless `use_cache=True` or `past_key_values` is passed. Without
    labels, or under no_grad (evaluation, where the logits are often wanted and cost no saved
    activations), the original forward runs unchanged. `num_items_in_batch` (transformers'
    gradient-accumulation count) turns the mean into sum / num_items_in_batch, as transformers does.

    aux_loss: the family's `load_balancing_loss_func` (mixture-of-experts families whose causal LM
    adds it): with `output_router_logits` (the argument, else the config's) the router's logits
    are recorded and router_aux_loss_coef * aux_loss is added to the loss, as transformers does;
    the output is then a MoeCausalLMOutputWithPast.
    """
    from transformers.modeling_outputs import CausalLMOutputWithPast, MoeCausalLMOutputWithPast
    from transformers.utils import can_return_tuple

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, labels=None, use_cache=None, logits_to_keep=0, **kwargs):
        shift_labels = kwargs.get("shift_labels")
        if (labels is None and shift_labels is None) or not torch.is_grad_enabled():
            return original(self, input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            past_key_values=past_key_values, inputs_embeds=inputs_embeds, labels=labels,
                            use_cache=use_cache, logits_to_keep=logits_to_keep, **kwargs)
        if use_cache is None and past_key_values is None:
            # A training step asks for no cache; transformers' default (config.use_cache) would build a
            # DynamicCache and copy every layer's keys and values into it (two cats a layer), kept
            # alive with the output. An explicit use_cache=True still gets one.
            use_cache = False
        router = None
        if aux_loss is not None:
            router = kwargs.pop("output_router_logits", None)
            router = self.config.output_router_logits if router is None else router
            kwargs["output_router_logits"] = router
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=past_key_values, inputs_embeds=inputs_embeds, use_cache=use_cache,
                             **kwargs)
        hidden = outputs.last_hidden_state
        ignore_index = kwargs.get("ignore_index", -100)
        if shift_labels is None:  # tokens < n predict token n; the last one predicts nothing
            shift_labels = F.pad(labels[..., 1:], (0, 1), value=ignore_index)  # contiguous: no copy to flatten
        num_items = kwargs.get("num_items_in_batch")
        softcap = getattr(self.config, final_softcap_attr, None) if final_softcap_attr else None
        loss = tritonkit.linear_cross_entropy(
            hidden.reshape(-1, hidden.shape[-1]), self.lm_head.weight, shift_labels.reshape(-1).to(hidden.device),
            bias=self.lm_head.bias, ignore_index=ignore_index,
            reduction="mean" if num_items is None else "sum", softcap=softcap)
        if num_items is not None:
            loss = loss / (num_items.to(loss.device) if torch.is_tensor(num_items) else num_items)
        if router:
            aux = aux_loss(outputs.router_logits, self.num_experts, self.num_experts_per_tok, attention_mask)
            loss = loss + self.router_aux_loss_coef * aux.to(loss.device)
            return MoeCausalLMOutputWithPast(loss=loss, aux_loss=aux, logits=None,
                                             past_key_values=outputs.past_key_values,
                                             hidden_states=outputs.hidden_states, attentions=outputs.attentions,
                                             router_logits=outputs.router_logits)
        return CausalLMOutputWithPast(loss=loss, logits=None, past_key_values=outputs.past_key_values,
                                      hidden_states=outputs.hidden_states, attentions=outputs.attentions)

    functools.update_wrapper(forward, original)  # the signature generate() and Trainer inspect
    forward._tritonkit_original = original
    return forward
