"""Generation through the patched attention, with each cache transformers ships, against the
unpatched model.

Tiny float16 models (the attention kernels take float16/bfloat16; the interpreter's float16 is
exact enough, its bf16 dot is not) with large random weights, so that a key seen or missed
moves the logits far past float16's rounding. Each test records which road every attention call
took (a kernel, or SDPA and why), so a pass proves the kernels ran. The unpatched reference runs
in float64 with SDPA; Gemma 2's in float32 with transformers' eager attention, the only one
that caps the scores (its float32 softmax turns a float64 mask's minimum into -inf, whose
padding rows then poison later layers), a thousand times float16's precision either way.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import tritonkit

transformers = pytest.importorskip("transformers")

import tritonkit.transformers as tkt  # noqa: E402
from tritonkit.transformers import _attention  # noqa: E402

from _tolerance import assert_close_to_reference  # noqa: E402

DEVICE = tritonkit.default_device()
TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
            eos_token_id=2, initializer_range=0.5)
WINDOW = 8  # shorter than the sequences below: sliding caches drop keys and roll


def _config(family: str):
    t = transformers
    hybrid = ["sliding_attention", "full_attention"]
    return {
        "llama": lambda: t.LlamaConfig(**TINY),
        "mistral": lambda: t.MistralConfig(**TINY, sliding_window=WINDOW),  # every layer sliding
        "qwen2": lambda: t.Qwen2Config(**TINY, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1),
        "qwen3": lambda: t.Qwen3Config(**TINY),
        "gemma2": lambda: t.Gemma2Config(**TINY, query_pre_attn_scalar=16, sliding_window=WINDOW,
                                         attn_logit_softcapping=50.0, final_logit_softcapping=30.0),
        "gemma3": lambda: t.Gemma3TextConfig(**TINY, query_pre_attn_scalar=16, sliding_window=WINDOW,
                                             layer_types=hybrid),
        "phi3": lambda: t.Phi3Config(**TINY, partial_rotary_factor=0.5),
    }[family]()


# The families since Qwen3-MoE (mixtures of experts, sinks, MLA, OLMo): test_transformers_families.py
FAMILIES = ["gemma2", "gemma3", "llama", "mistral", "phi3", "qwen2", "qwen3"]
# Offloading moves layers between the GPU and the host on CUDA streams: it runs on a GPU only.
CACHES = ["dynamic", "static", pytest.param("offloaded", marks=pytest.mark.gpu),
          pytest.param("offloaded_static", marks=pytest.mark.gpu)]


def _cache(kind: str, config):
    from transformers import DynamicCache, StaticCache
    return {
        "dynamic": lambda: DynamicCache(config=config),  # sliding layers keep the last window - 1 keys
        "unsized": lambda: DynamicCache(),  # every layer keeps every key, sliding or not
        "static": lambda: StaticCache(config, max_cache_len=16),  # unfilled slots past the tokens
        "offloaded": lambda: DynamicCache(config=config, offloading=True),
        "offloaded_static": lambda: StaticCache(config, max_cache_len=16, offloading=True),
    }[kind]()


ATTENTION = {part: part == "attention" for part in tkt.PARTS}  # the others run the interpreter's kernels slowly


def _models(family: str, parts=ATTENTION, dtype=torch.float16):
    """(unpatched, patched, the reference), the same weights; the first two in `dtype`."""
    torch.manual_seed(0)
    reference = "eager" if family == "gemma2" else "sdpa"
    base = transformers.AutoModelForCausalLM.from_config(_config(family), attn_implementation=reference).eval()
    ref = copy.deepcopy(base).to(DEVICE, torch.float32 if family == "gemma2" else torch.float64)
    base = base.to(DEVICE, dtype)
    return base, tkt.patch(copy.deepcopy(base), **parts), ref


@pytest.fixture
def roads(monkeypatch):
    """Each attention call's road: "kernel", or the reason it ran SDPA."""
    seen = []

    def spy(fn, road):
        def call(*args, **kwargs):
            seen.append(road(*args))
            return fn(*args, **kwargs)
        return call
    monkeypatch.setattr(tritonkit, "attention", spy(tritonkit.attention, lambda *a: "kernel"))
    monkeypatch.setattr(tritonkit, "attention_varlen", spy(tritonkit.attention_varlen, lambda *a: "kernel"))
    monkeypatch.setattr(_attention, "_warn_fallback", spy(_attention._warn_fallback, lambda module, why: why))
    return seen


def _feed(model, cache, ids, mask, chunks, roads=()):
    """The logits of each chunk of `ids`, fed one after the other into `cache` (a prefill, then
    chunks of several queries after cached keys, chunked prefill, or of one, decoding), each with
    the roads its attention calls took."""
    out, start = [], 0
    for n in chunks:
        seen = mask[:, :start + n]
        positions = (seen.cumsum(-1) - 1).clamp(min=0)[:, start:]  # generate's numbering of left-padded rows
        before = len(roads)
        with torch.no_grad():
            logits = model(input_ids=ids[:, start:start + n], attention_mask=seen, position_ids=positions,
                           past_key_values=cache, use_cache=True).logits
        out.append((logits, list(roads[before:])))
        start += n
    return out


def _check_steps(family, kind, ids, mask, chunks, roads, dtype=torch.float16):
    """Each step's logits against the unpatched model's (the tokens that are not padding); the
    roads each step's attention calls took."""
    base, patched, ref = _models(family, dtype=dtype)
    expected = _feed(ref, _cache(kind, ref.config), ids, mask, chunks)
    theirs = _feed(base, _cache(kind, base.config), ids, mask, chunks)
    del roads[:]
    ours = _feed(patched, _cache(kind, patched.config), ids, mask, chunks, roads)
    start = 0
    for n, (o, _), (r, _), (t, _) in zip(chunks, ours, expected, theirs):
        valid = mask[:, start:start + n].bool()
        assert_close_to_reference(o[valid], r[valid], t[valid], what=f"{family} {kind} logits of tokens {start}..")
        start += n
    return [step for _, step in ours]


@pytest.mark.parametrize("kind", CACHES)
@pytest.mark.parametrize("family", FAMILIES)
def test_cache_steps_match_unpatched(family, kind, roads):
    _padded_steps(family, kind, roads)


def test_unsized_cache_with_padding(roads):
    # Every key kept under a sliding window, padding: a decoding query sees its window's keys only.
    _padded_steps("mistral", "unsized", roads)


def _padded_steps(family, kind, roads):
    # A left-padded batch: a prefill of 6 tokens, a chunk of 3 after them, two decoding steps.
    # The 11 tokens pass the window (sliding caches drop and roll keys) and stay under a static
    # cache's 16 slots (the slots past the tokens are unfilled).
    ids = torch.randint(3, TINY["vocab_size"], (2, 11), device=DEVICE)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    ids[mask == 0] = 0
    steps = _check_steps(family, kind, ids, mask, [6, 3, 1, 1], roads)
    assert steps == [["kernel"] * TINY["num_hidden_layers"]] * 4, steps


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_float32_cache_steps_run_sdpa_exactly(family, roads):
    # float32 calls run SDPA, with the mask placed in a static cache's buffer as the kernels' is.
    ids = torch.randint(3, TINY["vocab_size"], (2, 11), device=DEVICE)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    steps = _check_steps(family, "static", ids, mask, [6, 3, 1, 1], roads, dtype=torch.float32)
    assert all(road.startswith("dtype torch.float32") for step in steps for road in step) and len(roads) == 8


@pytest.mark.parametrize("family,kind", [("llama", "static"), ("mistral", "static"), ("qwen2", "unsized")])
def test_chunked_prefill_runs_the_kernels(family, kind, roads):
    # Without padding every step runs the kernels: a chunk of 4 queries after 5 cached keys, a
    # sliding layer's chunk and decode past its window (an unsized cache keeps every key).
    ids = torch.randint(3, TINY["vocab_size"], (2, 11), device=DEVICE)
    steps = _check_steps(family, kind, ids, torch.ones_like(ids), [5, 4, 1, 1], roads)
    assert steps == [["kernel"] * TINY["num_hidden_layers"]] * 4, steps


GREEDY = dict(max_new_tokens=4, do_sample=False, pad_token_id=0)


def _prompts(model, kind):
    """Left-padded prompts whose greedy choices in `model` all win by a margin well past the
    patched model's float16 rounding (about 0.05 here): the tokens, not ties, are compared."""
    for seed in range(50):
        torch.manual_seed(seed)
        ids = torch.randint(3, TINY["vocab_size"], (2, 7), device=DEVICE)
        mask = torch.ones_like(ids)
        mask[0, :2] = 0
        ids[mask == 0] = 0
        out = model.generate(ids, attention_mask=mask, cache_implementation=kind, output_logits=True,
                             return_dict_in_generate=True, **GREEDY)
        top = torch.stack(out.logits).float().topk(2).values
        if (top[..., 0] - top[..., 1]).min() > 0.25:
            return ids, mask, out.sequences
    raise AssertionError("no prompts without near-ties")


@pytest.mark.parametrize("kind", CACHES)
@pytest.mark.parametrize("family", FAMILIES)
def test_generate_same_tokens(family, kind, roads):
    base, patched, _ = _models(family)
    ids, mask, expected = _prompts(base, kind)
    del roads[:]
    got = patched.generate(ids, attention_mask=mask, cache_implementation=kind, **GREEDY)
    assert torch.equal(got, expected), (got, expected)
    assert roads == ["kernel"] * len(roads) and len(roads) == GREEDY["max_new_tokens"] * TINY["num_hidden_layers"]


def test_generate_with_every_part(roads):
    # The whole patch (norms with the residual adds, rotary, MLP) in generate, Gemma 2's sandwich norms.
    base, patched, _ = _models("gemma2", parts={})
    ids, mask, expected = _prompts(base, "static")
    del roads[:]
    assert torch.equal(patched.generate(ids, attention_mask=mask, cache_implementation="static", **GREEDY), expected)
    assert roads == ["kernel"] * GREEDY["max_new_tokens"] * TINY["num_hidden_layers"], roads


def test_generate_through_attn_implementation(roads):
    # attn_implementation="tritonkit" alone (no patch), a static cache.
    base, _, _ = _models("llama")
    ids, mask, expected = _prompts(base, "static")
    del roads[:]
    base.set_attn_implementation("tritonkit")
    assert torch.equal(base.generate(ids, attention_mask=mask, cache_implementation="static", **GREEDY), expected)
    assert roads == ["kernel"] * GREEDY["max_new_tokens"] * TINY["num_hidden_layers"], roads


@pytest.mark.parametrize("overlay", ["or_mask_function", "and_mask_function", "block_sequence_ids"])
def test_mask_overlays(overlay, roads):
    # The causal mask with an overlay (a multimodal model's image tokens, a user's function): the
    # mask is transformers' own, and attention on it is what the sdpa implementation gives.
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import create_causal_mask
    B, N = 2, 6
    padding = torch.ones(B, N, dtype=torch.long, device=DEVICE)
    padding[0, :2] = 0
    extra = {"or_mask_function": lambda b, h, q, kv: kv == q + 1,  # each token also sees the next
             "and_mask_function": lambda b, h, q, kv: kv != 3,  # no token sees token 3
             "block_sequence_ids": torch.tensor([[-1, -1, 0, 0, 0, -1], [1, 1, -1, 2, 2, 2]], device=DEVICE)}
    masks = []
    for implementation in ("tritonkit", "sdpa"):
        config = _config("llama")
        config._attn_implementation = implementation
        masks.append(create_causal_mask(config, torch.zeros(B, N, 0, device=DEVICE), padding, None,
                                        **{overlay: extra[overlay]}))
    assert masks[0].shape == (B, 1, N, N) and torch.equal(masks[0], masks[1])
    layer = transformers.models.llama.modeling_llama.LlamaAttention(_config("llama"), 0).eval()
    q = torch.randn(B, 2, N, 16, dtype=torch.float16, device=DEVICE)
    k, v = (torch.randn(B, 1, N, 16, dtype=torch.float16, device=DEVICE) for _ in range(2))
    ours = _attention.tritonkit_attention_forward(layer, q, k, v, masks[0], scaling=0.25)[0]
    theirs = sdpa_attention_forward(layer, q, k, v, masks[1], scaling=0.25)[0]
    ref = sdpa_attention_forward(layer, q.double(), k.double(), v.double(), masks[1], scaling=0.25)[0]
    valid = padding.bool()  # rows of padding queries: undefined in transformers
    assert_close_to_reference(ours[valid], ref[valid], theirs[valid], what=f"attention with {overlay}")
    assert len(roads) == 1 and roads[0].startswith("a 4D mask"), roads


def test_fallback_warns_once_a_model_naming_why(roads):
    # A float32 model's attention runs SDPA: the report says so (attention is not "replaced"),
    # and its first call warns, naming why; a second model warns again; float16 runs the kernels.
    def model(dtype):
        torch.manual_seed(0)
        base = transformers.AutoModelForCausalLM.from_config(_config("llama")).to(DEVICE, dtype).eval()
        return tkt.patch(base, norms=False, rope=False, mlp=False, loss=False)
    ids = torch.randint(3, TINY["vocab_size"], (1, 5), device=DEVICE)

    def fallbacks(m, calls=2):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for _ in range(calls):
                with torch.no_grad():
                    m(input_ids=ids)
        return [str(w.message) for w in seen if issubclass(w.category, tkt.AttentionFallbackWarning)]

    first = model(torch.float32)
    report = first.tritonkit_report
    assert "attention" not in report.replaced and "float32" in report.left["attention"], report
    assert issubclass(tkt.AttentionFallbackWarning, UserWarning)  # shown by Python's default filters
    warned = fallbacks(first)
    assert len(warned) == 1 and "float32" in warned[0], warned
    assert len(fallbacks(model(torch.float32), calls=1)) == 1
    half = model(torch.float16)
    assert "tritonkit.attention" in half.tritonkit_report.replaced["attention"], half.tritonkit_report
    del roads[:]
    assert fallbacks(half) == [] and roads == ["kernel"] * 2 * TINY["num_hidden_layers"]


def test_report_head_dim_the_kernels_do_not_take():
    config = _config("llama")
    config.head_dim = 520  # the kernels take 1 to 512
    model = tkt.patch(transformers.AutoModelForCausalLM.from_config(config).half())
    assert "head dims 520" in model.tritonkit_report.left["attention"], model.tritonkit_report
    assert model.config._attn_implementation != "tritonkit"  # every call would run SDPA: the model's own stays
