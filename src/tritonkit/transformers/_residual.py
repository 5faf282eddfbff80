"""The decoder layer's residual adds, fused into the RMSNorms that read their sums.

A pre-norm decoder layer computes ``h1 = x + attn(norm_a(x))`` and ``out = h1 + mlp(norm_m(h1))``,
and the next layer starts with ``norm_a'(out)`` (the last layer's ``out`` goes to the model's
final norm). Each sum is read only by a norm and by the next add, so
``tritonkit.rms_norm(branch, w, eps, residual=r)``, which returns ``(norm(branch + r), branch + r)``
from one read of each input, replaces the add and the norm after it. Forward, a layer saves two
adds (a read and a write of the hidden state each) and two launches; backward, the norm's kernel
adds the residual's gradient into its own, where autograd summed the two branches' gradients
with a separate add.

The add inside a layer (into the MLP's norm) only needs the layer's forward. The add at the end
of a layer feeds the *next* layer's input norm, so a layer is linked to that norm (`link`, a
plain reference outside the module tree, so state dicts and `named_modules` are unchanged): it
computes the next norm with the sum, returns the sum and leaves the norm of it on the norm
module (`_ahead`), whose patched forward returns it when called on that same, unchanged sum.
Everything else that sees a layer's output (hooks, `output_hidden_states`) sees the true sum.

Layers are not linked in a distributed run (see `link`). A linked layer does not compute ahead
under gradient checkpointing (its recompute would leave a result nobody takes), nor when the next
norm's weight is not a plain tensor on the activations' device in their dtype (FSDP2 or
DeepSpeed shards, offloaded or meta weights, another device in a pipeline split): it then
returns the sum as transformers does. The add inside a layer is fused in every case.
"""

from __future__ import annotations

import functools
import inspect
import re
from typing import NamedTuple

import torch

import tritonkit

from . import _ahead

_NEXT = "_tritonkit_next_norm"   # a decoder layer's link: the norm that reads its output
OFFSET = "_tritonkit_weight_offset"  # on a patched RMSNorm forward: its weight_offset


def eps_of(norm: torch.nn.Module) -> float:
    eps = getattr(norm, "variance_epsilon", None)
    return norm.eps if eps is None else eps


def _fusable(norm: torch.nn.Module, x: torch.Tensor, residual: torch.Tensor) -> bool:
    """Whether tritonkit.rms_norm(x, norm.weight, residual=residual) is exactly norm(residual + x)."""
    weight = getattr(norm, "weight", None)
    return (getattr(norm.forward, OFFSET, None) is not None and type(weight) in (torch.nn.Parameter, torch.Tensor)
            and weight.dtype == x.dtype == residual.dtype and weight.device == x.device
            and weight.shape == x.shape[-1:] and residual.shape == x.shape)


def add_norm(norm: torch.nn.Module, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(norm(residual + x), residual + x); one tritonkit.rms_norm when `norm` is a patched RMSNorm.

    The fused sum is bitwise torch's (added in float32, rounded once to the dtype)."""
    if not _fusable(norm, x, residual):
        h = residual + x
        return norm(h), h
    return tritonkit.rms_norm(x, norm.weight, eps_of(norm), residual=residual,
                              weight_offset=getattr(norm.forward, OFFSET))


def add_ahead(layer: torch.nn.Module, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """residual + x, the layer's output; with the linked next norm of it computed alongside and left
    on that norm (`_ahead`), when that norm can be fused."""
    norm = getattr(layer, _NEXT, None)
    if norm is None or (layer.training and getattr(layer, "gradient_checkpointing", False)) \
            or not _fusable(norm, x, residual) or hasattr(norm.weight, "ds_id"):  # ds_id: DeepSpeed ZeRO-3's
        return residual + x
    y, h = add_norm(norm, x, residual)
    _ahead.leave(norm, h, y)
    return h


# ---------------------------------------------------------------- the layer

class LayerForm(NamedTuple):
    """A pre-norm decoder layer's form: modules on the attention output before its add, the norm
    that add feeds, modules on the MLP output before its add, and whether the MLP returns a pair
    (its output and the router's scores, gpt-oss) rather than its output."""
    attn_out: tuple = ()
    mlp_norm: str = "post_attention_layernorm"
    mlp_out: tuple = ()
    mlp_pair: bool = False


def expected_attributes(form: LayerForm) -> set[str]:
    return {"input_layernorm", "self_attn", "mlp", form.mlp_norm, *form.attn_out, *form.mlp_out}


_PAIR_CALL = re.compile(r"\w+\s*,\s*_\s*=\s*self\.mlp\(")


@functools.lru_cache(maxsize=None)
def layer_fits(original, form: LayerForm) -> bool:
    """Whether transformers' layer forward is the pre-norm form `form` describes: it reads exactly
    the modules the form names (a version that adds a step reads something else), unpacks the
    MLP's output as the form says, and takes the hidden states first. Checked on its source, once
    a forward."""
    try:
        source = inspect.getsource(original)
        params = list(inspect.signature(original).parameters)
    except (OSError, TypeError, ValueError):
        return False
    used = set(re.findall(r"self\.(\w+)", source))
    return (used == expected_attributes(form) and params[:2] == ["self", "hidden_states"]
            and bool(_PAIR_CALL.search(source)) == form.mlp_pair)


def make_decoder_layer_forward(original, form: LayerForm):
    """The decoder layer's forward with its two residual adds fused into the norms that follow.

    form: e.g. Llama's LayerForm(), Gemma 2/3's sandwich norms (("post_attention_layernorm",),
    "pre_feedforward_layernorm", ("post_feedforward_layernorm",)). Positional arguments beyond the
    hidden states (transformers passes the rest by name) run the original."""
    attn_out, mlp_norm, mlp_out, mlp_pair = form

    def forward(self, hidden_states, *args, **kwargs):
        if args:
            return original(self, hidden_states, *args, **kwargs)
        x = self.input_layernorm(hidden_states)  # taken from the previous layer's add when it computed it
        x, _ = self.self_attn(hidden_states=x, **kwargs)
        for name in attn_out:
            x = getattr(self, name)(x)
        x, residual = add_norm(getattr(self, mlp_norm), x, hidden_states)
        x = self.mlp(x)
        if mlp_pair:
            x = x[0]
        for name in mlp_out:
            x = getattr(self, name)(x)
        return add_ahead(self, x, residual)

    functools.update_wrapper(forward, original)
    forward._tritonkit_original = original
    return forward


def link(model: torch.nn.Module, layer_cls: type, norm_cls: type) -> int:
    """Point each decoder layer of each stack in `model` (a `layers` ModuleList of `layer_cls`
    followed by a `norm` of `norm_cls`) at the norm that reads its output; returns how many.

    None in a distributed run: data-parallel wrappers shard and reduce each layer's parameters
    on their own schedule (FSDP's per-layer reduce-scatter), which a weight of the next layer
    whose gradient arrives with this layer's would miss."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return 0
    count = 0
    for module in model.modules():
        layers, final = getattr(module, "layers", None), getattr(module, "norm", None)
        if not (isinstance(layers, torch.nn.ModuleList) and len(layers) and isinstance(final, norm_cls)
                and all(isinstance(layer, layer_cls) for layer in layers)):
            continue
        for layer, nxt in zip(layers, [*(layer.input_layernorm for layer in layers[1:]), final]):
            object.__setattr__(layer, _NEXT, nxt)  # not nn.Module.__setattr__: no second parent
            _ahead.clear(nxt)
            count += 1
    return count
