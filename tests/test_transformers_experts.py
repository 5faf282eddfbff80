"""tritonkit.transformers for the mixture-of-experts families: their routed experts through
tritonkit.moe_experts (transformers' experts interface), against the unpatched model with
transformers' eager experts, the unpatched model in float64 as the reference (logits, loss and
every parameter's gradient within twice the float32 model's own error). Tiny random configs,
two layers, float32 (the experts' products run through the interpreter on the CPU)."""

from __future__ import annotations

import copy

import pytest
import torch

import tritonkit

transformers = pytest.importorskip("transformers")

import tritonkit.transformers as tkt  # noqa: E402

from _tolerance import assert_close_to_reference, eps_for  # noqa: E402

DEVICE = tritonkit.default_device()
SMALL = dict(vocab_size=100, hidden_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _configs():
    t = transformers
    return {
        "qwen3_moe": lambda: t.Qwen3MoeConfig(**SMALL, head_dim=12, intermediate_size=64, moe_intermediate_size=24,
                                              num_experts=5, num_experts_per_tok=2, norm_topk_prob=True),
        "mixtral": lambda: t.MixtralConfig(**SMALL, intermediate_size=24, num_local_experts=4, num_experts_per_tok=2),
        # gpt-oss: biases, the clamped activation on interleaved gate/up, both weights stored transposed
        "gpt_oss": lambda: t.GptOssConfig(**SMALL, head_dim=12, intermediate_size=24, num_local_experts=4,
                                          num_experts_per_tok=2, sliding_window=8),
        # DeepSeek-V3: a dense first layer, then routed experts beside a shared one (MLA: as many kv heads)
        "deepseek_v3": lambda: t.DeepseekV3Config(**{**SMALL, "num_key_value_heads": 4}, intermediate_size=64,
                                                  moe_intermediate_size=24, n_routed_experts=4, num_experts_per_tok=2,
                                                  n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1,
                                                  kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8,
                                                  qk_nope_head_dim=8, v_head_dim=8),
    }


def _config(family: str):
    return _configs()[family]()


@pytest.fixture(autouse=True)
def _restore():
    yield
    tkt.unpatch_classes()


def _model(family: str):
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(_config(family), attn_implementation="eager",
                                                         experts_implementation="eager").to(DEVICE).train()


def _run(model, ids):
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    return out.logits.detach(), out.loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family", sorted(_configs()))
def test_experts_match_unpatched(family):
    base = _model(family)
    ids = torch.randint(3, 100, (1, 12), device=DEVICE)
    ref = _run(copy.deepcopy(base).double(), ids)
    theirs = _run(base, ids)
    model = tkt.patch(copy.deepcopy(base), **{part: False for part in tkt.PARTS})  # the experts alone
    report = model.tritonkit_report
    assert "experts" in report.replaced and model.config._experts_implementation == "tritonkit", report
    assert report.left == {part: "not requested" for part in tkt.PARTS}, report
    ours = _run(model, ids)
    assert_close_to_reference(ours[0], ref[0], theirs[0], what="logits")
    assert_close_to_reference(ours[1], ref[1], theirs[1], what="loss")
    assert set(ours[2]) == set(ref[2])
    for name in ref[2]:
        assert_close_to_reference(ours[2][name], ref[2][name], theirs[2][name], eps=eps_for(torch.float32, True),
                                  what=f"grad {name}")


def test_experts_implementation_argument_and_patch_classes():
    # transformers' own switch, the family-wide default of patch_classes, and its undoing;
    # experts=False leaves them.
    built = transformers.AutoModelForCausalLM.from_config(_config("mixtral"), experts_implementation="tritonkit")
    assert built.config._experts_implementation == "tritonkit"
    report = tkt.patch_classes("mixtral")
    assert "experts" in report.replaced
    assert transformers.AutoModelForCausalLM.from_config(_config("mixtral")).config._experts_implementation == \
        "tritonkit"
    tkt.unpatch_classes("mixtral")
    assert transformers.AutoModelForCausalLM.from_config(_config("mixtral")).config._experts_implementation != \
        "tritonkit"
    left = tkt.patch(_model("qwen3_moe"), experts=False)
    assert left.tritonkit_report.left["experts"] == "not requested"
    assert left.config._experts_implementation == "eager"
    with pytest.raises(TypeError, match="experts"):
        tkt.patch(_model("qwen3_moe"), experts="yes")
