"""tritonkit.transformers for the families beyond the seven dense ones of test_transformers.py:
Qwen3-MoE, Mixtral, gpt-oss, DeepSeek-V3, Gemma 4 (text), OLMo 2 and OLMo 3, each patched whole
and compared with the unpatched model.

Tiny random float16 models (the attention kernels take float16/bfloat16; the interpreter's
float16 is exact enough, its bf16 dot is not), two layers, with large random weights so that a
wrong term moves the results far past float16's rounding. The unpatched model in float64 is the
reference; the patched model must be within twice the unpatched float16 model's own error
(tests/_tolerance.py) in the logits, the loss and every parameter's gradient (gpt-oss's sinks
included). Each test records the attention calls, so a pass proves the kernels ran with what
the family needs: sinks, DeepSeek-V3's q/k and v head dims, Gemma 4's 512-wide global heads.
Greedy generation, left-padded, with a DynamicCache (and a StaticCache for gpt-oss: sinks,
sliding layers and unfilled slots) gives the unpatched model's tokens. The rotary replacement is
family-wide, so references are taken before patching and `_restore` undoes it after.
"""

from __future__ import annotations

import contextlib
import copy
import warnings

import pytest
import torch

import tritonkit

transformers = pytest.importorskip("transformers")

import tritonkit.transformers as tkt  # noqa: E402

from _tolerance import assert_close_to_reference, eps_for  # noqa: E402

DEVICE = tritonkit.default_device()
TINY = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2, initializer_range=0.5)
HYBRID = ["sliding_attention", "full_attention"]
WINDOW = 4  # shorter than the rows: the sliding layers' window acts
# The router's load-balancing loss, weighted so that leaving it out would show in the loss.
AUX = dict(output_router_logits=True, router_aux_loss_coef=0.5)


def _configs():
    t = transformers
    return {
        # a dense MLP layer (mlp_only_layers) beside an experts one; per-head q/k norms
        "qwen3_moe": lambda: t.Qwen3MoeConfig(**TINY, head_dim=16, intermediate_size=48, moe_intermediate_size=16,
                                              num_experts=4, num_experts_per_tok=2, norm_topk_prob=True,
                                              mlp_only_layers=[0], **AUX),
        "mixtral": lambda: t.MixtralConfig(**TINY, head_dim=16, intermediate_size=16, num_local_experts=4,
                                           num_experts_per_tok=2, **AUX),
        # sinks, sliding layers, biased experts on interleaved gate/up, half-width cos/sin
        "gpt_oss": lambda: t.GptOssConfig(**TINY, head_dim=16, intermediate_size=16, num_local_experts=4,
                                          num_experts_per_tok=2, sliding_window=WINDOW, layer_types=HYBRID, **AUX),
        # MLA: q/k heads of 16 + 8 (rotary, interleaved), v heads of 16; a dense first layer, then
        # routed experts beside a shared one
        "deepseek_v3": lambda: t.DeepseekV3Config(**{**TINY, "num_key_value_heads": 2}, intermediate_size=48,
                                                  moe_intermediate_size=16, n_routed_experts=4,
                                                  num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
                                                  n_group=1, topk_group=1, kv_lora_rank=16, q_lora_rank=12,
                                                  qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                                                  rope_interleave=True),
        # sliding layers of head dim 16, a global layer of 512, dense MLP and experts side by side
        "gemma4": lambda: t.Gemma4TextConfig(**TINY, head_dim=16, global_head_dim=512, intermediate_size=48,
                                             layer_types=HYBRID, sliding_window=WINDOW, hidden_size_per_layer_input=0,
                                             enable_moe_block=True, num_experts=4, top_k_experts=2,
                                             moe_intermediate_size=16, final_logit_softcapping=30.0),
        "olmo2": lambda: t.Olmo2Config(**TINY, intermediate_size=48),
        "olmo3": lambda: t.Olmo3Config(**TINY, intermediate_size=48, sliding_window=WINDOW, layer_types=HYBRID),
    }


FAMILIES = sorted(_configs())
# The parts each family's report must name as replaced (Mixtral and gpt-oss have no dense MLP).
ALL = {*tkt.PARTS, "experts"}
REPLACED = {
    "qwen3_moe": ALL, "mixtral": ALL - {"mlp"}, "gpt_oss": ALL - {"mlp"}, "deepseek_v3": ALL, "gemma4": ALL,
    "olmo2": set(tkt.PARTS), "olmo3": set(tkt.PARTS),
}
# (q/k head dim, v head dim, sinks) of the attention calls each family must make in the kernels
CALLS = {
    "qwen3_moe": {(16, 16, False)}, "mixtral": {(16, 16, False)}, "gpt_oss": {(16, 16, True)},
    "deepseek_v3": {(24, 16, False)}, "gemma4": {(16, 16, False), (512, 512, False)},
    "olmo2": {(16, 16, False)}, "olmo3": {(16, 16, False)},
}


def test_every_family_is_tested():
    from test_transformers import FAMILIES as DENSE
    assert set(DENSE) | set(FAMILIES) == set(tkt.FAMILIES)
    assert {f for f in FAMILIES if "experts" in REPLACED[f]} == set(tkt.EXPERTS_FAMILIES)


@pytest.fixture(autouse=True)
def _restore():
    yield
    tkt.unpatch_classes()


@pytest.fixture
def calls(monkeypatch):
    """(q/k head dim, v head dim, with sinks) of each call of the attention kernels; any SDPA
    fallback fails the test."""
    seen = []

    def spy(fn):
        def call(q, k, v, *args, **kwargs):
            seen.append((q.shape[-1], v.shape[-1], kwargs.get("sinks") is not None))
            return fn(q, k, v, *args, **kwargs)
        return call
    monkeypatch.setattr(tritonkit, "attention", spy(tritonkit.attention))
    monkeypatch.setattr(tritonkit, "attention_varlen", spy(tritonkit.attention_varlen))
    with warnings.catch_warnings():
        warnings.simplefilter("error", tkt.AttentionFallbackWarning)
        yield seen


def _model(family: str, implementations=dict(attn_implementation="eager", experts_implementation="eager")):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(_configs()[family](), **implementations)
    return model.to(DEVICE, torch.float16)


def _run(model, ids, labels):
    """(logits, loss, gradients by name): logits from a forward without labels, the rest with."""
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    return logits, loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family", FAMILIES)
def test_family_matches_unpatched(family, calls):
    base = _model(family).train()
    ids, labels, ref, theirs = _references(base)
    model = tkt.patch(copy.deepcopy(base))
    report = model.tritonkit_report
    assert set(report.replaced) == REPLACED[family], report
    assert model.config._attn_implementation == "tritonkit"
    ours = _run(model, ids, labels)
    assert set(calls) == CALLS[family], calls
    _assert_matches(ours, ref, theirs)


def _references(base):
    """Rows and labels (one ignored), and _run of the unpatched model in float64 and as it is."""
    ids = torch.randint(3, 64, (2, 10), device=DEVICE)
    labels = ids.clone()
    labels[:, 3] = -100
    return ids, labels, _run(copy.deepcopy(base).double(), ids, labels), _run(base, ids, labels)


def _assert_matches(ours, ref, theirs):
    """(logits, loss, gradients) of the patched model within twice the unpatched float16 model's error."""
    assert_close_to_reference(ours[0], ref[0], theirs[0], what="logits")
    # One number: its error is one draw, where torch's can be lucky (gpt-oss's hidden states within
    # 1.1x torch's error give a loss at 3.4x); 1e-3 is still far below a term left out.
    assert_close_to_reference(ours[1], ref[1], theirs[1], eps=1e-3, what="loss")
    assert set(ours[2]) == set(ref[2])
    for name in ref[2]:
        assert_close_to_reference(ours[2][name], ref[2][name], theirs[2][name],
                                  eps=eps_for(torch.float16, gradient=True), what=f"grad {name}")


def test_reports_name_what_each_family_needs():
    words = {family: str(tkt.patch(_model(family)).tritonkit_report) for family in FAMILIES}
    assert "learnable sinks" in words["gpt_oss"]
    assert "head dims 24/16" in words["deepseek_v3"]
    assert "apply_rotary_pos_emb_interleave" in words["deepseek_v3"]
    assert "head dims 16, 512" in words["gemma4"] and "Gemma4TextExperts" in words["gemma4"]
    assert "load-balancing loss" in words["qwen3_moe"] and "load-balancing loss" not in words["deepseek_v3"]
    for family in ("olmo2", "olmo3"):
        assert "post-norm layers" in words[family]
    for family in ("qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3"):
        assert "with the residual adds of 2" in words[family], words[family]


def _generate(model, cache, ids, mask, new_tokens=4):
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, past_key_values=cache, max_new_tokens=new_tokens,
                              do_sample=False, pad_token_id=0)


GENERATION = [(family, "dynamic") for family in FAMILIES] + [("gpt_oss", "static")]


@pytest.mark.parametrize("family,kind", GENERATION)
def test_generation_matches_unpatched(family, kind, calls):
    from transformers import DynamicCache, StaticCache
    base = _model(family).eval()
    # transformers' load-balancing loss fails on a padded batch (a mask of another length than the
    # routed tokens at decoding); no step of generate needs it.
    base.config.output_router_logits = False
    model = tkt.patch(copy.deepcopy(base), **{part: part == "attention" for part in tkt.PARTS})

    def cache(m):
        return DynamicCache(config=m.config) if kind == "dynamic" else StaticCache(m.config, max_cache_len=16)
    ids = torch.randint(3, 64, (2, 7), device=DEVICE)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # left padding, as generate pads a batch
    ids[mask == 0] = 0
    theirs = _generate(base, cache(base), ids, mask)
    ours = _generate(model, cache(model), ids, mask)
    assert calls and all(call in CALLS[family] for call in calls), calls
    assert torch.equal(ours, theirs), (ours, theirs)


@pytest.mark.parametrize("family", ["gpt_oss", "deepseek_v3", "gemma4"])
def test_patch_classes(family, calls):
    # Models built after patch_classes come up patched (attention and experts "tritonkit" by
    # default, the family's norms, rotary, MLP and loss), and unpatch_classes restores the classes.
    ids = torch.randint(3, 64, (2, 10), device=DEVICE)
    base = _model(family).eval()
    with torch.no_grad():
        ref, theirs = copy.deepcopy(base).double()(input_ids=ids).logits, base(input_ids=ids).logits
    report = tkt.patch_classes(family)
    assert set(report.replaced) == REPLACED[family], report
    built = _model(family, {}).eval()  # no implementation asked for: the family's default
    assert built.config._attn_implementation == "tritonkit" and built.config._experts_implementation == "tritonkit"
    with torch.no_grad():
        ours = built(input_ids=ids).logits
    assert calls
    assert_close_to_reference(ours, ref, theirs, what="logits")
    tkt.unpatch_classes(family)
    assert _model(family, {}).config._attn_implementation != "tritonkit"


# Gemma 4's options, each on sliding layers of head dim 16 and full ones of 32 (two of each where
# layers share K/V: the last two reuse the first two's, past the sliding cache's window in generate).
GEMMA4_OPTIONS = {
    "kv_shared": dict(num_hidden_layers=4, layer_types=HYBRID * 2, num_kv_shared_layers=2),
    # the full layers' values are their keys before k_norm and the rotation (no v_proj)
    "k_eq_v": dict(attention_k_eq_v=True, num_global_key_value_heads=1),
    # every layer non-causal; the sliding layers see keys within 5 // 2 + 1 = 3 either side, a
    # mask the kernels do not take (SDPA with transformers' 4D mask), the full layers run the kernels
    "bidirectional": dict(use_bidirectional_attention="all", sliding_window=5),
}
GEMMA4_CALLS = {"kv_shared": {(16, 16, False), (32, 32, False)}, "k_eq_v": {(16, 16, False), (32, 32, False)},
                "bidirectional": {(32, 32, False)}}


# Gemma 4's text layers for the option and multimodal tests: sliding of head dim 16, full of 32.
GEMMA4_TEXT = dict(TINY, head_dim=16, global_head_dim=32, intermediate_size=48, layer_types=HYBRID,
                   sliding_window=WINDOW, hidden_size_per_layer_input=0, final_logit_softcapping=30.0)


def _gemma4_text(option: str):
    torch.manual_seed(0)
    config = transformers.Gemma4TextConfig(**{**GEMMA4_TEXT, **GEMMA4_OPTIONS[option]})
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").to(DEVICE, torch.float16)


@contextlib.contextmanager
def _fallback_warned():
    """The block must warn that a 4D mask fell back to SDPA. (pytest.warns would record every
    warning "always" and show again those the project's filters drop: the interpreter's
    numpy deprecations, hundreds a call.)"""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", tkt.AttentionFallbackWarning)
        yield
    messages = [str(w.message) for w in caught if issubclass(w.category, tkt.AttentionFallbackWarning)]
    assert any("4D mask" in m for m in messages), messages


def _fallback_expected(option: str):
    return _fallback_warned() if option == "bidirectional" else contextlib.nullcontext()


@pytest.mark.parametrize("option", sorted(GEMMA4_OPTIONS))
def test_gemma4_option_matches_unpatched(option, calls):
    base = _gemma4_text(option).train()
    ids, labels, ref, theirs = _references(base)
    model = tkt.patch(copy.deepcopy(base))
    with _fallback_expected(option):
        ours = _run(model, ids, labels)
    assert set(calls) == GEMMA4_CALLS[option], calls
    _assert_matches(ours, ref, theirs)


@pytest.mark.parametrize("option", ["kv_shared", "k_eq_v"])
def test_gemma4_option_generation_matches_unpatched(option, calls):
    from transformers import DynamicCache
    base = _gemma4_text(option).eval()
    model = tkt.patch(copy.deepcopy(base), **{part: part == "attention" for part in tkt.PARTS})
    ids = torch.randint(3, 64, (2, 7), device=DEVICE)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    ids[mask == 0] = 0
    theirs = _generate(base, DynamicCache(config=base.config), ids, mask)
    ours = _generate(model, DynamicCache(config=model.config), ids, mask)
    assert calls and set(calls) <= GEMMA4_CALLS[option], calls
    assert torch.equal(ours, theirs), (ours, theirs)


def _gemma4_multimodal(bidirectional: str | None):
    """Gemma 4 with a vision tower of head dim 8 (its attention non-causal, its axial rotation
    through the family's apply_rotary_pos_emb) before text layers of 16 (sliding) and 32 (full)."""
    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4, head_dim=8, patch_size=2, pooling_kernel_size=2, position_embedding_size=16,
                  initializer_range=0.5)
    return _gemma4_conditional("eager", dict(use_bidirectional_attention=bidirectional), vision_config=vision,
                               image_token_id=5, boi_token_id=6, eoi_token_id=7)


def _gemma4_conditional(implementation: str, text: dict, **towers):
    """A float16 Gemma4ForConditionalGeneration of GEMMA4_TEXT's layers (with `text`'s options)
    and the given towers and their token ids."""
    config = transformers.Gemma4Config(text_config={**GEMMA4_TEXT, **text}, initializer_range=0.5, **towers)
    torch.manual_seed(0)
    model = transformers.Gemma4ForConditionalGeneration(config).to(DEVICE, torch.float16)
    model.set_attn_implementation(implementation)
    return model


@pytest.mark.parametrize("bidirectional", [None, "vision"])
def test_gemma4_multimodal_matches_unpatched(bidirectional, calls, monkeypatch):
    base = _gemma4_multimodal(bidirectional).train()
    # Two images of 4 x 4 patches (4 soft tokens each after 2 x 2 pooling) inside text rows.
    grid = torch.stack(torch.meshgrid(torch.arange(4), torch.arange(4), indexing="ij"), -1).reshape(1, 16, 2)
    ids = torch.randint(8, 64, (2, 12), device=DEVICE)
    ids[:, 1], ids[:, 2:6], ids[:, 6] = 6, 5, 7
    labels = ids.clone()
    labels[:, :7] = -100
    inputs = dict(pixel_values=torch.rand(2, 16, 12, device=DEVICE), image_position_ids=grid.expand(2, -1, -1).to(DEVICE))
    if bidirectional:  # the image tokens see each other on the sliding layers
        inputs["mm_token_type_ids"] = (ids == 5).long()

    def run(model):
        with torch.no_grad():
            logits = model(input_ids=ids, **inputs).logits
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=labels, **inputs).loss
        loss.backward()
        return logits, loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    ref = run(copy.deepcopy(base).double())
    theirs = run(base)
    rotated = []
    rope = tritonkit.rope
    monkeypatch.setattr(tritonkit, "rope", lambda q, k, *args, **kwargs: rotated.append(q.shape[-1]) or rope(q, k, *args,
                                                                                                              **kwargs))
    model = tkt.patch(copy.deepcopy(base))
    # the text MLPs too (their activation is the text config's); the loss is a causal LM's only
    assert set(model.tritonkit_report.replaced) == {"attention", "norms", "rope", "mlp"}, model.tritonkit_report
    with _fallback_warned() if bidirectional else contextlib.nullcontext():
        ours = run(model)
    # the vision tower's (8, non-causal), the text's sliding (16) unless bidirectional blocks, the full (32)
    assert set(calls) == {(8, 8, False), (32, 32, False)} | (set() if bidirectional else {(16, 16, False)}), calls
    assert {4, 16, 32} <= set(rotated), rotated  # the vision's two axes of 4 each, the text's heads
    _assert_matches(ours, ref, theirs)


def _gemma4_audio():
    """Gemma 4 with an audio tower (no vision tower) before the text layers of
    _gemma4_multimodal: frames of 8 features, two stride-2 convolutions (4 frames a soft token),
    two conformer layers of 4 heads of 8 attending in chunks of 4 with 4 keys before and 1 after.
    The base is SDPA: under eager, transformers' audio attention reads its additive float mask as
    a bool one, inverted (huggingface/transformers#48818); SDPA's bool mask is the one it is
    written for, and the one the patched model's mask function gives it."""
    audio = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, subsampling_conv_channels=[8, 4],
                 conv_kernel_size=3, attention_chunk_size=4, attention_context_left=5, attention_context_right=1,
                 output_proj_dims=24, initializer_range=0.5)
    return _gemma4_conditional("sdpa", {}, audio_config=audio, audio_token_id=5, boa_token_id=6, eoa_token_index=7)


def test_gemma4_audio_matches_unpatched(calls, monkeypatch):
    base = _gemma4_audio().train()
    # Two clips of 32 frames, the second's last 8 padding: 8 and 6 soft tokens inside text rows.
    features = torch.randn(2, 32, 8, device=DEVICE, dtype=torch.float16)
    features_mask = torch.ones(2, 32, dtype=torch.bool, device=DEVICE)
    features_mask[1, 24:] = False
    ids = torch.randint(8, 64, (2, 14), device=DEVICE)
    ids[:, 1], ids[0, 2:10], ids[0, 10], ids[1, 2:8], ids[1, 8] = 6, 5, 7, 5, 7
    labels = ids.clone()
    labels[0, :11], labels[1, :9] = -100, -100
    inputs = dict(input_ids=ids, input_features=features, input_features_mask=features_mask)

    def run(model):
        """(the audio tower's output, logits, loss, gradients by name)."""
        towers = []
        hook = model.model.audio_tower.register_forward_hook(lambda m, i, out: towers.append(out.last_hidden_state))
        with torch.no_grad():
            logits = model(**{**inputs, "input_features": features.to(model.dtype)}).logits
        hook.remove()
        model.zero_grad(set_to_none=True)
        loss = model(**{**inputs, "input_features": features.to(model.dtype)}, labels=labels).loss
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return towers[0], (logits, loss.detach(), grads)
    # float32, not float64: transformers' audio attention computes q and k in float32 and refuses
    # a float64 per_dim_scale; float32's error is still far below float16's.
    ref = run(copy.deepcopy(base).float())
    theirs = run(base)
    normed = []
    rms_norm = tritonkit.rms_norm
    monkeypatch.setattr(tritonkit, "rms_norm", lambda x, *args, **kwargs: normed.append(tuple(x.shape))
                        or rms_norm(x, *args, **kwargs))
    model = tkt.patch(copy.deepcopy(base))
    assert set(model.tritonkit_report.replaced) == {"attention", "norms", "rope", "mlp"}, model.tritonkit_report
    ours = run(model)
    # the tower's 9 norms a layer over its 8 soft tokens, twice (forward, then forward with labels),
    # and the audio embedder's norm without a weight over the 24 output features
    assert normed.count((2, 8, 32)) == 2 * 9 * 2 and (2, 8, 24) in normed, normed
    assert set(calls) == {(16, 16, False), (32, 32, False)}, calls  # the text's; the tower's attention is its own
    assert_close_to_reference(ours[0], ref[0], theirs[0], what="audio tower output")
    assert {n for n in ref[1][2] if ".audio_tower." in n} == {f"model.audio_tower.{n}" for n, _ in
                                                               base.model.audio_tower.named_parameters()}
    _assert_matches(ours[1], ref[1], theirs[1])


def test_fallback_mask_of_a_bidirectional_window():
    # The SDPA fallback's mask for a non-causal sliding call is transformers' bidirectional window
    # (keys within `sliding_window` either side), not the causal window's one-sided bound.
    from transformers import masking_utils as hf

    from tritonkit.transformers._masks import dense_mask
    theirs = hf.sdpa_mask(batch_size=1, q_length=9, kv_length=9,
                          mask_function=hf.sliding_window_bidirectional_mask_function(3), allow_is_causal_skip=False)
    assert torch.equal(dense_mask(1, 9, 9, "cpu", None, False, 3), theirs)
