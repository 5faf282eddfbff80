"""tritonkit under TRL's fused LM head (tritonkit.integrations.trl) against TRL's own kernel:
the same per-token log-probabilities, entropies and gradients through a small Hugging Face
model. Needs TRL (requirements-cpu.txt pins the version the adapter is made for)."""

import copy

import pytest
import torch

trl_utils = pytest.importorskip("trl.trainer.utils")

from tritonkit import linear_logprobs  # noqa: E402
from tritonkit.integrations import trl as adapter  # noqa: E402


@pytest.fixture
def tritonkit_head():
    adapter.use_tritonkit()
    yield
    adapter.restore_trl()


def tiny_model(device):
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=301, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    return LlamaForCausalLM(config).to(device)


def scored(model, input_ids, labels, temperature, outputs):
    """TRL's fused forward: per-token outputs, and the gradients of a GRPO-like objective."""
    trl_utils.add_fused_lm_head(model, temperature=temperature, outputs=outputs)
    out = model(input_ids=input_ids, labels=labels, fused_lm_head=True)
    objective = -(out.log_probs * torch.linspace(-1, 1, out.log_probs.shape[-1])).sum()
    if out.entropy is not None:
        objective = objective - 0.1 * out.entropy.sum()
    params = [model.lm_head.weight, model.model.embed_tokens.weight, model.model.norm.weight]
    return out, torch.autograd.grad(objective, params)


def test_same_logprobs_entropy_and_gradients_as_trl(device, monkeypatch):
    calls = []
    monkeypatch.setattr(adapter, "linear_logprobs", lambda *a, **k: calls.append(1) or linear_logprobs(*a, **k))
    model = tiny_model(device)
    input_ids = torch.randint(0, 301, (2, 9), device=device)
    labels = input_ids.clone()
    labels[:, :4] = -100       # the prompt
    labels[1, 7:] = -100       # padding after a shorter completion
    theirs, their_grads = scored(copy.deepcopy(model), input_ids, labels, 0.7, ("log_probs", "entropy"))
    adapter.use_tritonkit()
    try:
        assert trl_utils._ChunkedLogProbFunction is adapter.TritonkitLogProbFunction
        ours, our_grads = scored(copy.deepcopy(model), input_ids, labels, 0.7, ("log_probs", "entropy"))
    finally:
        adapter.restore_trl()
    assert trl_utils._ChunkedLogProbFunction is not adapter.TritonkitLogProbFunction
    assert calls   # tritonkit computed ours
    torch.testing.assert_close(ours.log_probs, theirs.log_probs, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.entropy, theirs.entropy, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.loss, theirs.loss)
    for o, t in zip(our_grads, their_grads):
        torch.testing.assert_close(o, t, rtol=1e-4, atol=1e-6)


def test_scale_softcap_and_what_falls_back(device, tritonkit_head):
    # The logit scale and softcap folded into linear_logprobs's softcap and temperature; the
    # mean logit from a matrix-vector product; metrics tritonkit does not make go to TRL's.
    theirs_fn, ours_fn = adapter.TritonkitLogProbFunction.fallback, adapter.TritonkitLogProbFunction
    hidden = torch.randn(6, 16, device=device)
    weight = torch.randn(301, 16, device=device) / 2
    bias = torch.randn(301, device=device)
    targets = torch.randint(0, 301, (6,), device=device)
    for softcap, outputs in ((5.0, ("log_probs", "entropy")), (None, ("log_probs", "mean_logits"))):
        args = (hidden, weight, bias, targets, 0.7, 64, softcap, 2.0, outputs)
        for o, t in zip(ours_fn.apply(*args), theirs_fn.apply(*args)):
            assert (o is None) == (t is None)
            if o is not None:
                torch.testing.assert_close(o, t, rtol=1e-5, atol=1e-5)
    args = (hidden, weight, bias, targets, 1.0, 64, None, 1.0, ("log_probs", "is_top1"))
    for o, t in zip(ours_fn.apply(*args), theirs_fn.apply(*args)):
        assert (o is None and t is None) or torch.equal(o, t)
