"""Which modules of which families get which tritonkit op, and the report of what was done."""

from __future__ import annotations

import importlib
import logging
import types
from dataclasses import dataclass, field

import torch

from . import _attention, _experts, _parts, _projections, _residual
from ._instance import set_forward

logger = logging.getLogger("tritonkit.transformers")

PARTS = ("attention", "norms", "rope", "mlp", "loss")


@dataclass(frozen=True)
class Family:
    """A transformers model family: its modeling module and the shapes of its parts."""
    name: str                    # transformers' model_type, e.g. "llama"
    prefix: str                  # class-name prefix, e.g. "Llama" (LlamaRMSNorm, LlamaMLP, LlamaForCausalLM)
    norm_offset: float = 0.0     # Gemma's RMSNorm scales by (1 + w)
    packed_mlp: bool = False     # Phi-3: one gate_up projection
    final_softcap: str | None = None  # config attribute capping the logits (Gemma 2 and 3)
    # The decoder layer's residual form (see _residual.make_decoder_layer_forward): modules on the
    # attention output before its add, the norm that add feeds, modules on the MLP output before its add.
    layer: tuple = ((), "post_attention_layernorm", ())

    @property
    def module(self) -> types.ModuleType:
        return importlib.import_module(f"transformers.models.{self.name}.modeling_{self.name}")

    def cls(self, suffix: str):
        return getattr(self.module, f"{self.prefix}{suffix}")


_SANDWICH = (("post_attention_layernorm",), "pre_feedforward_layernorm", ("post_feedforward_layernorm",))  # Gemma 2/3

FAMILIES = {f.name: f for f in (
    Family("llama", "Llama"),
    Family("mistral", "Mistral"),
    Family("qwen2", "Qwen2"),
    Family("qwen3", "Qwen3"),
    Family("gemma2", "Gemma2", norm_offset=1.0, final_softcap="final_logit_softcapping", layer=_SANDWICH),
    Family("gemma3", "Gemma3", norm_offset=1.0, final_softcap="final_logit_softcapping", layer=_SANDWICH),
    Family("phi3", "Phi3", packed_mlp=True, layer=(("resid_attn_dropout",), "post_attention_layernorm",
                                                   ("resid_mlp_dropout",))),
)}

# Mixture-of-experts families: their routed experts run tritonkit.moe_experts through
# transformers' experts interface (_experts.py); their other parts are not patched yet.
EXPERTS_FAMILIES = {f.name: f for f in (
    Family("qwen3_moe", "Qwen3Moe"), Family("mixtral", "Mixtral"), Family("gpt_oss", "GptOss"),
    Family("deepseek_v3", "DeepseekV3"),
)}
_EXPERTS_ONLY = "not patched yet in this mixture-of-experts family (its experts are)"


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


def family_of(model_or_name) -> Family:
    """The family of a model instance, a model class, or a model_type name ("llama")."""
    families = {**FAMILIES, **EXPERTS_FAMILIES}
    if isinstance(model_or_name, str):
        if model_or_name not in families:
            raise ValueError(f"family {model_or_name!r} is not supported; supported: {sorted(families)}")
        return families[model_or_name]
    cls = model_or_name if isinstance(model_or_name, type) else type(model_or_name)
    for klass in cls.__mro__:
        for fam in families.values():
            if klass.__module__ == f"transformers.models.{fam.name}.modeling_{fam.name}":
                return fam
    raise ValueError(f"model {cls.__name__} is not of a supported family; supported: {sorted(families)}")


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

    attention: the model's attention implementation becomes "tritonkit" (unless its head dim is one
        the kernels do not take), and the q/k/v projections sum their input gradients in their
        GEMMs (_projections.py) (this model only). The report says which calls run the kernels and
        which SDPA; a float32 model's attention is under `left` (its calls run SDPA outside a
        float16/bfloat16 autocast region).
    norms: each of the family's RMSNorm modules runs tritonkit.rms_norm, and the decoder layers'
        residual adds run inside the norms that read their sums (rms_norm(residual=); see
        _residual.py) (this model only).
    rope: the family's `apply_rotary_pos_emb` runs tritonkit.rope; transformers calls it as a
        module-level function, so this is family-wide (every model of the family in the process;
        `unpatch_classes` restores it). The result is the same function of its inputs.
    mlp: the gated MLP's activation-times-up runs tritonkit.swiglu / geglu, gate and up with one
        input gradient, and while training, the activation and down_proj as tritonkit.gated_linear,
        which does not keep h = act(gate) * up for the backward (this model only).
    loss: with labels and gradients on, the causal-LM loss runs tritonkit.linear_cross_entropy on
        the hidden states; the output's `logits` is then None (this model only).
    experts: a mixture-of-experts family's (EXPERTS_FAMILIES) routed experts run
        tritonkit.moe_experts (experts_implementation "tritonkit", this model only); its other
        parts are left for now. Models without experts have nothing to report here.

    A part that the ops cannot express for this model (or that it lacks) is left as it is;
    `model.tritonkit_report` (a PatchReport) says which parts were replaced and why others were
    left, and one log line ("tritonkit.transformers" logger) says the same.
    """
    requested = dict(attention=attention, norms=norms, rope=rope, mlp=mlp, loss=loss)
    _check_parts(dict(requested, experts=experts))
    fam = family_of(model)
    if fam.name in EXPERTS_FAMILIES:
        return _patch_experts_family(model, fam, requested, experts)
    config = getattr(model, "config", None)
    report = PatchReport(fam.name)
    for part, wanted in requested.items():
        if not wanted:
            report.left[part] = "not requested"

    if attention:
        where, words = _attention.describe(config, getattr(model, "dtype", None))
        if where != "sdpa":  # a float32 model's calls inside an autocast region run the kernels
            model.set_attn_implementation(_attention.NAME)
        grouped = _projections.group_attention(model, fam.cls("Attention"))
        words += f"; q/k/v projections of {grouped} layers with one input gradient" if grouped else ""
        (report.replaced if where == "kernels" else report.left)["attention"] = words

    if norms:
        norm_cls = fam.cls("RMSNorm")
        found = [m for m in model.modules() if isinstance(m, norm_cls)]
        if found:
            for m in found:
                set_forward(m, _parts.make_rms_norm_forward, _original(norm_cls.forward), fam.norm_offset)
            report.replaced["norms"] = (f"tritonkit.rms_norm in {len(found)} {norm_cls.__name__}"
                                        + _patch_layers(fam, model))
        else:
            report.left["norms"] = f"no {norm_cls.__name__} in the model"

    if rope:
        _patch_rope(fam)
        report.replaced["rope"] = f"tritonkit.rope (family-wide: modeling_{fam.name}.apply_rotary_pos_emb)"

    if mlp:
        mlp_cls = fam.cls("MLP")
        found = [m for m in model.modules() if isinstance(m, mlp_cls)]
        gated, why = _parts.gated_op(config)
        if gated is not None and found:
            tail = _parts.gated_linear_op(config)
            for m in found:
                set_forward(m, _parts.make_mlp_forward, _original(mlp_cls.forward), gated, fam.packed_mlp, tail)
            report.replaced["mlp"] = (f"tritonkit.{gated.func.__name__} in {len(found)} {mlp_cls.__name__}"
                                      + _mlp_tail_words(tail))
        else:
            report.left["mlp"] = why or f"no {mlp_cls.__name__} in the model"

    if loss:
        lm_cls = fam.cls("ForCausalLM")
        if isinstance(model, lm_cls):
            set_forward(model, _parts.make_causal_lm_forward, _original(lm_cls.forward), fam.final_softcap)
            report.replaced["loss"] = "tritonkit.linear_cross_entropy on the hidden states (no logits in training)"
        else:
            report.left["loss"] = f"not a {lm_cls.__name__}"

    model.tritonkit_report = report
    report._log()
    return model


def _experts_report(fam: Family, requested: dict, experts: bool) -> PatchReport:
    report = PatchReport(fam.name)
    report.left.update({part: _EXPERTS_ONLY if wanted else "not requested" for part, wanted in requested.items()})
    if not experts:
        report.left["experts"] = "not requested"
    return report


def _patch_experts_family(model: torch.nn.Module, fam: Family, requested: dict, experts: bool) -> torch.nn.Module:
    report = _experts_report(fam, requested, experts)
    if experts:
        detail, why = _experts.patch_experts(model)
        if detail is None:
            report.left["experts"] = why
        else:
            report.replaced["experts"] = detail
    model.tritonkit_report = report
    report._log()
    return model


def _mlp_tail_words(tail) -> str:
    """The MLP report's words on down_proj."""
    if tail is None:
        return ""
    return (", with down_proj as tritonkit.gated_linear (h = act(gate) * up recomputed in the backward, not "
            "saved) where down_proj is a plain nn.Linear in the activations' dtype, gradients on")


def _layer_forward(fam: Family):
    """The fused-residual forward of the family's decoder layer, or None if its form is not the known one."""
    original = _original(fam.cls("DecoderLayer").forward)
    if not _residual.layer_fits(original, fam.layer):
        return None
    return _residual.make_decoder_layer_forward(original, fam.layer)


def _patch_layers(fam: Family, model: torch.nn.Module) -> str:
    """Fuse the residual adds of the model's decoder layers into their norms; the report's words."""
    layer_cls = fam.cls("DecoderLayer")
    forward = _layer_forward(fam)
    found = [m for m in model.modules() if isinstance(m, layer_cls)]
    if forward is None or not found:
        return f"; residual adds left ({layer_cls.__name__} is not of the known form)" if found else ""
    for m in found:
        set_forward(m, _layer_forward, fam)
    linked = _residual.link(model, layer_cls, fam.cls("RMSNorm"))
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


def _patch_rope(fam: Family) -> None:
    module = fam.module
    current = module.apply_rotary_pos_emb
    if not hasattr(current, "_tritonkit_original"):
        _set(module, "apply_rotary_pos_emb", _parts.make_rope(current))


def patch_classes(family: str, *, attention: bool = True, norms: bool = True, rope: bool = True,
                  mlp: bool = True, loss: bool = True, experts: bool = True) -> PatchReport:
    """Patch a family's classes, so that models built afterwards (from_pretrained, from_config,
    a Trainer) come up with tritonkit's ops; returns the PatchReport and logs it.

    attention: models of the family that do not ask for an implementation get "tritonkit"
    (an explicit `attn_implementation=` still wins). The other parts as in `patch`, for every
    model of the family; `unpatch_classes(family)` undoes it.
    """
    requested = dict(attention=attention, norms=norms, rope=rope, mlp=mlp, loss=loss)
    _check_parts(dict(requested, experts=experts))
    fam = family_of(family)
    if fam.name in EXPERTS_FAMILIES:  # experts: "tritonkit" as the family's default implementation
        report = _experts_report(fam, requested, experts)
        if experts:
            base = fam.cls("PreTrainedModel")
            _set(base, "get_correct_experts_implementation",
                 _experts.default_to_tritonkit(base.get_correct_experts_implementation))
            report.replaced["experts"] = "tritonkit.moe_experts (the default experts implementation of the family)"
        report._log()
        return report
    report = PatchReport(fam.name)
    for part, wanted in requested.items():
        if not wanted:
            report.left[part] = "not requested"
    config = None
    try:
        config = importlib.import_module(f"transformers.models.{fam.name}.configuration_{fam.name}")
        config = getattr(config, f"{fam.prefix}{'Text' if fam.name == 'gemma3' else ''}Config")()
    except (ImportError, AttributeError, TypeError, ValueError):
        config = None  # then only the ops' presence decides

    if attention:
        base = fam.cls("PreTrainedModel")
        if hasattr(base, "get_correct_attn_implementation"):
            _set(base, "get_correct_attn_implementation", _default_to_tritonkit(base.get_correct_attn_implementation))
            attention_cls = fam.cls("Attention")
            _on_init(base, lambda model: _projections.group_attention(model, attention_cls))
            words = _attention.describe(config, None)[1] if config is not None else "tritonkit.attention"
            report.replaced["attention"] = (words + " (the default implementation of the family); q/k/v "
                                            "projections with one input gradient")
        else:
            report.left["attention"] = "pass attn_implementation='tritonkit' to from_pretrained"
    if norms:
        norm_cls = fam.cls("RMSNorm")
        _set(norm_cls, "forward", _parts.make_rms_norm_forward(_original(norm_cls.forward), fam.norm_offset))
        report.replaced["norms"] = f"tritonkit.rms_norm in {norm_cls.__name__}"
        layer_cls, base = fam.cls("DecoderLayer"), fam.cls("PreTrainedModel")
        forward = _layer_forward(fam)
        if forward is None:
            report.replaced["norms"] += f"; residual adds left ({layer_cls.__name__} is not of the known form)"
        else:
            _set(layer_cls, "forward", forward)
            _on_init(base, lambda model: _residual.link(model, layer_cls, norm_cls))
            report.replaced["norms"] += f", with the residual adds of {layer_cls.__name__} (rms_norm(residual=))"
    if rope:
        _patch_rope(fam)
        report.replaced["rope"] = "tritonkit.rope"
    if mlp:
        mlp_cls = fam.cls("MLP")
        gated, why = _parts.gated_op(config) if config is not None else (None, "no default config")
        if gated is not None:
            _set(mlp_cls, "forward", _parts.make_mlp_forward(_original(mlp_cls.forward), None, fam.packed_mlp))
            report.replaced["mlp"] = (f"tritonkit.{gated.func.__name__} in {mlp_cls.__name__}"
                                      + _mlp_tail_words(_parts.gated_linear_op(config)))
        else:
            report.left["mlp"] = why
    if loss:
        lm_cls = fam.cls("ForCausalLM")
        _set(lm_cls, "forward", _parts.make_causal_lm_forward(_original(lm_cls.forward), fam.final_softcap))
        report.replaced["loss"] = "tritonkit.linear_cross_entropy on the hidden states (no logits in training)"
    report._log()
    return report


def _default_to_tritonkit(original):
    def get_correct_attn_implementation(self, requested_attention, is_init_check=False):
        if requested_attention is None:
            requested_attention = _attention.NAME
        return original(self, requested_attention, is_init_check=is_init_check)
    get_correct_attn_implementation._tritonkit_original = original
    return get_correct_attn_implementation
