"""Which modules of which families get which tritonkit op, and the report of what was done."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from . import _attention, _experts, _parts, _projections, _residual, _rope
from ._families import Family, family_of, why_no_layer
from ._instance import set_forward

logger = logging.getLogger("tritonkit.transformers")

PARTS = ("attention", "norms", "rope", "mlp", "loss")


@dataclass
class PatchReport:
    """What `patch`/`patch_classes` replaced (part -> what runs now) and left (part -> why)."""
    family: str
    replaced: dict[str, str] = field(default_factory=dict)
    left: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        done = ", ".join(f"{p} ({d})" for p, d in self.replaced.items()) or "nothing"
        left = "; ".join(f"{p}: {why}" for p, why in self.left.items())
        return f"tritonkit.transformers {self.family}: replaced {done}" + (f"; left {left}" if left else "")

    def _log(self) -> None:
        unrequested = all(why == "not requested" for why in self.left.values())
        (logger.info if unrequested else logger.warning)("%s", self)


# Class-level replacements, so that unpatch_classes can put the originals back: (owner, name, original).
_ORIGINALS: list[tuple[object, str, object]] = []


def _set(owner, name: str, value) -> None:
    _ORIGINALS.append((owner, name, owner.__dict__[name] if name in vars(owner) else None))
    setattr(owner, name, value)


def unpatch_classes(family: str | None = None) -> None:
    """Undo `patch_classes` and the family-wide rotary replacement of `patch` (all families by default)."""
    module = None if family is None else family_of(family).module
    owners = None if module is None else {id(module), *(id(v) for v in vars(module).values())}
    keep = []
    for owner, name, original in reversed(_ORIGINALS):
        if owners is not None and id(owner) not in owners:
            keep.append((owner, name, original))
            continue
        if original is None:
            delattr(owner, name)
        else:
            setattr(owner, name, original)
    _ORIGINALS[:] = reversed(keep)


def _original(fn):
    return getattr(fn, "_tritonkit_original", fn)


def _check_parts(parts: dict) -> None:
    for name, value in parts.items():
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def patch(model: torch.nn.Module, *, attention: bool = True, norms: bool = True, rope: bool = True,
          mlp: bool = True, loss: bool = True, experts: bool = True) -> torch.nn.Module:
    """Put tritonkit's ops into a loaded transformers model, in place; returns the model.

    attention: the model's attention implementation becomes "tritonkit" (unless a head dim is one
        the kernels do not take), and the q/k/v projections sum their input gradients in their
        GEMMs (_projections.py) (this model only). The report says which calls run the kernels and
        which SDPA; a float32 model's attention is under `left` (its calls run SDPA outside a
        float16/bfloat16 autocast region). gpt-oss's learnable sinks, DeepSeek-V3's unequal q/k
        and v head dims and Gemma 4's per-layer head dims run in the kernels.
    norms: each of the family's RMSNorm modules runs tritonkit.rms_norm, and the decoder layers'
        residual adds run inside the norms that read their sums (rms_norm(residual=); see
        _residual.py) where the layer is of a pre-norm form (this model only).
    rope: the family's rotary function(s) (`apply_rotary_pos_emb`, see _rope.py) run tritonkit.rope;
        transformers calls them as module-level functions, so this is family-wide (every model of
        the family in the process; `unpatch_classes` restores them). The result is the same
        function of its inputs.
    mlp: the gated dense MLP's activation-times-up runs tritonkit.swiglu / geglu, gate and up with
        one input gradient, and while training, the activation and down_proj as
        tritonkit.gated_linear, which does not keep h = act(gate) * up for the backward (this model
        only). Families without a dense MLP (Mixtral, gpt-oss: experts only) report it left.
    loss: with labels and gradients on, the causal-LM loss runs tritonkit.linear_cross_entropy on
        the hidden states (plus the router's load-balancing loss where the family adds it); the
        output's `logits` is then None (this model only).
    experts: the routed experts of a family in EXPERTS_FAMILIES run tritonkit.moe_experts
        (experts_implementation "tritonkit", this model only). Families without experts have
        nothing to report here.

    A part that the ops cannot express for this model (or that it lacks) is left as it is;
    `model.tritonkit_report` (a PatchReport) says which parts were replaced and why others were
    left, and one log line ("tritonkit.transformers" logger) says the same.
    """
    requested = dict(attention=attention, norms=norms, rope=rope, mlp=mlp, loss=loss)
    _check_parts(dict(requested, experts=experts))
    fam = family_of(model)
    config = getattr(model, "config", None)
    report = PatchReport(fam.name)
    for part, wanted in dict(requested, experts=experts).items():
        if not wanted and (part != "experts" or fam.experts):
            report.left[part] = "not requested"

    if attention:
        where, words = _attention.describe(config, getattr(model, "dtype", None), fam.sinks)
        if where != "sdpa":  # a float32 model's calls inside an autocast region run the kernels
            model.set_attn_implementation(_attention.NAME)
        grouped = _projections.group_attention(model, fam.cls(fam.attention))
        words += f"; q/k/v projections of {grouped} layers with one input gradient" if grouped else ""
        (report.replaced if where == "kernels" else report.left)["attention"] = words

    if norms:
        norm_cls = fam.cls(fam.norm)
        found = [m for m in model.modules() if isinstance(m, norm_cls)]
        if found:
            for m in found:
                set_forward(m, _parts.make_rms_norm_forward, _original(norm_cls.forward), fam.norm_offset,
                            fam.norm_in_float32)
            report.replaced["norms"] = (f"tritonkit.rms_norm in {len(found)} {norm_cls.__name__}"
                                        + _patch_layers(fam, model))
        else:
            report.left["norms"] = f"no {norm_cls.__name__} in the model"

    if rope:
        report.replaced["rope"] = f"tritonkit.rope (family-wide: {_patch_rope(fam)})"

    if mlp:
        mlp_cls = fam.cls(fam.mlp) if fam.mlp else None
        found = [m for m in model.modules() if isinstance(m, mlp_cls)] if mlp_cls else []
        # A multimodal model's config holds the text layers' activation in its text config.
        text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
        gated, why = _parts.gated_op(text_config)
        if gated is not None and found:
            tail = _parts.gated_linear_op(text_config)
            for m in found:
                set_forward(m, _parts.make_mlp_forward, _original(mlp_cls.forward), gated, fam.packed_mlp, tail)
            report.replaced["mlp"] = (f"tritonkit.{gated.func.__name__} in {len(found)} {mlp_cls.__name__}"
                                      + _mlp_tail_words(tail))
        elif mlp_cls is None:
            report.left["mlp"] = "no dense gated MLP in this family (its routed experts: part experts)"
        else:
            report.left["mlp"] = why or f"no {mlp_cls.__name__} in the model"

    if loss:
        lm_cls = fam.cls("ForCausalLM")
        if isinstance(model, lm_cls):
            set_forward(model, _parts.make_causal_lm_forward, _original(lm_cls.forward), fam.final_softcap,
                        _aux_loss(fam))
            report.replaced["loss"] = _LOSS_WORDS + (_AUX_WORDS if fam.aux_loss else "")
        else:
            report.left["loss"] = f"not a {lm_cls.__name__}"

    if experts and fam.experts:
        detail, why = _experts.patch_experts(model)
        if detail is None:
            report.left["experts"] = why
        else:
            report.replaced["experts"] = detail

    model.tritonkit_report = report
    report._log()
    return model


_LOSS_WORDS = "tritonkit.linear_cross_entropy on the hidden states (no logits in training)"
_AUX_WORDS = ", plus the router's load-balancing loss (output_router_logits) as transformers adds it"


def _aux_loss(fam: Family):
    """The family's load-balancing loss function, where its causal LM adds one."""
    return fam.module.load_balancing_loss_func if fam.aux_loss else None


def _mlp_tail_words(tail) -> str:
    """The MLP report's words on down_proj."""
    if tail is None:
        return ""
    return (", with down_proj as tritonkit.gated_linear (h = act(gate) * up recomputed in the backward, not "
            "saved) where down_proj is a plain nn.Linear in the activations' dtype, gradients on")


def _layer_forward(fam: Family):
    """The fused-residual forward of the family's decoder layer, or None if its form is not the known one."""
    original = _original(fam.cls(fam.decoder_layer).forward)
    if fam.layer is None or not _residual.layer_fits(original, fam.layer):
        return None
    return _residual.make_decoder_layer_forward(original, fam.layer)


def _patch_layers(fam: Family, model: torch.nn.Module) -> str:
    """Fuse the residual adds of the model's decoder layers into their norms; the report's words."""
    layer_cls = fam.cls(fam.decoder_layer)
    forward = _layer_forward(fam)
    found = [m for m in model.modules() if isinstance(m, layer_cls)]
    if forward is None or not found:
        return f"; residual adds left ({layer_cls.__name__}: {why_no_layer(fam)})" if found else ""
    for m in found:
        set_forward(m, _layer_forward, fam)
    linked = _residual.link(model, layer_cls, fam.cls(fam.norm))
    return (f", with the residual adds of {len(found)} {layer_cls.__name__} (rms_norm(residual=))"
            + ("" if linked else "; the adds between layers left (a distributed run, or no layers followed by a norm)"))


def _on_init(base: type, setup) -> None:
    """Run setup(model) at the end of every __init__ of the family's models (their post_init)."""
    post_init = base.post_init

    def wrapper(self, *args, **kwargs):
        out = post_init(self, *args, **kwargs)
        setup(self)
        return out
    _set(base, "post_init", wrapper)


def _patch_rope(fam: Family) -> str:
    """Replace the family's rotary functions (once); the report's words."""
    module = fam.module
    for name, factory in _rope.FORMS[fam.rope].items():
        current = getattr(module, name)
        if not hasattr(current, "_tritonkit_original"):
            _set(module, name, factory(current))
    return ", ".join(f"modeling_{fam.name}.{name}" for name in _rope.FORMS[fam.rope])


def patch_classes(family: str, *, attention: bool = True, norms: bool = True, rope: bool = True,
                  mlp: bool = True, loss: bool = True, experts: bool = True) -> PatchReport:
    """Patch a family's classes, so that models built afterwards (from_pretrained, from_config,
    a Trainer) come up with tritonkit's ops; returns the PatchReport and logs it.

    attention: models of the family that do not ask for an implementation get "tritonkit"
    (an explicit `attn_implementation=` still wins); experts likewise get "tritonkit" as their
    default experts implementation. The other parts as in `patch`, for every model of the family;
    `unpatch_classes(family)` undoes it.
    """
    requested = dict(attention=attention, norms=norms, rope=rope, mlp=mlp, loss=loss)
    _check_parts(dict(requested, experts=experts))
    fam = family_of(family)
    report = PatchReport(fam.name)
    for part, wanted in dict(requested, experts=experts).items():
        if not wanted and (part != "experts" or fam.experts):
            report.left[part] = "not requested"
    config = fam.default_config()  # None: then only the ops' presence decides
    base = fam.cls("PreTrainedModel")

    if attention:
        if hasattr(base, "get_correct_attn_implementation"):
            _set(base, "get_correct_attn_implementation", _default_to_tritonkit(base.get_correct_attn_implementation))
            attention_cls = fam.cls(fam.attention)
            _on_init(base, lambda model: _projections.group_attention(model, attention_cls))
            words = _attention.describe(config, None, fam.sinks)[1] if config is not None else "tritonkit.attention"
            report.replaced["attention"] = (words + " (the default implementation of the family); q/k/v "
                                            "projections with one input gradient")
        else:
            report.left["attention"] = "pass attn_implementation='tritonkit' to from_pretrained"
    if norms:
        norm_cls = fam.cls(fam.norm)
        _set(norm_cls, "forward", _parts.make_rms_norm_forward(_original(norm_cls.forward), fam.norm_offset,
                                                               fam.norm_in_float32))
        report.replaced["norms"] = f"tritonkit.rms_norm in {norm_cls.__name__}"
        layer_cls = fam.cls(fam.decoder_layer)
        forward = _layer_forward(fam)
        if forward is None:
            report.replaced["norms"] += f"; residual adds left ({layer_cls.__name__}: {why_no_layer(fam)})"
        else:
            _set(layer_cls, "forward", forward)
            _on_init(base, lambda model: _residual.link(model, layer_cls, norm_cls))
            report.replaced["norms"] += f", with the residual adds of {layer_cls.__name__} (rms_norm(residual=))"
    if rope:
        report.replaced["rope"] = f"tritonkit.rope ({_patch_rope(fam)})"
    if mlp:
        if fam.mlp is None:
            report.left["mlp"] = "no dense gated MLP in this family (its routed experts: part experts)"
        else:
            mlp_cls = fam.cls(fam.mlp)
            gated, why = _parts.gated_op(config) if config is not None else (None, "no default config")
            if gated is not None:
                _set(mlp_cls, "forward", _parts.make_mlp_forward(_original(mlp_cls.forward), None, fam.packed_mlp))
                report.replaced["mlp"] = (f"tritonkit.{gated.func.__name__} in {mlp_cls.__name__}"
                                          + _mlp_tail_words(_parts.gated_linear_op(config)))
            else:
                report.left["mlp"] = why
    if loss:
        lm_cls = fam.cls("ForCausalLM")
        _set(lm_cls, "forward", _parts.make_causal_lm_forward(_original(lm_cls.forward), fam.final_softcap,
                                                              _aux_loss(fam)))
        report.replaced["loss"] = _LOSS_WORDS + (_AUX_WORDS if fam.aux_loss else "")
    if experts and fam.experts:
        _set(base, "get_correct_experts_implementation",
             _experts.default_to_tritonkit(base.get_correct_experts_implementation))
        report.replaced["experts"] = "tritonkit.moe_experts (the default experts implementation of the family)"
    report._log()
    return report


def _default_to_tritonkit(original):
    def get_correct_attn_implementation(self, requested_attention, is_init_check=False):
        if requested_attention is None:
            requested_attention = _attention.NAME
        return original(self, requested_attention, is_init_check=is_init_check)
    get_correct_attn_implementation._tritonkit_original = original
    return get_correct_attn_implementation
