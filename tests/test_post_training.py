"""The post-training losses over a linear head (GRPO family, DPO, SimPO, ORPO, KTO) against
their float64 references: the loss and its gradients for a random upstream gradient."""

import functools

import pytest
import torch

import tritonkit
from tritonkit.ops.cross_entropy.logprobs import linear_logprobs_reference
from tritonkit.ops.post_training import (dpo_loss_reference, grpo_loss_reference, kto_loss_reference,
                                         orpo_loss_reference, simpo_loss_reference)
from _losses import check_loss, head, masked_targets

F32, BF16 = torch.float32, torch.bfloat16


def policy_inputs(b, length, hidden, vocab, dtype, device, masked=((0, slice(3, None)), (2, 1))):
    h, w, bias = head((b, length), hidden, vocab, dtype, device, bias=True)
    target = masked_targets((b, length), vocab, device, masked)
    logp = linear_logprobs_reference(h, w, target, bias=bias).float()
    # Old and reference policies near the current one, as in training; garbage at unscored
    # places (a trainer's padding), which must never count.
    old = logp + 0.3 * torch.randn_like(logp)
    ref = logp + 0.3 * torch.randn_like(logp)
    unscored = target == -100
    old[unscored], ref[unscored] = 1e4, float("nan")
    return h, w, bias, target, old, ref


def check_grpo(h, w, bias, target, advantages, **options):
    ours = functools.partial(tritonkit.grpo_loss, target=target, advantages=advantages, chunk_tokens=4, **options)
    reference = functools.partial(grpo_loss_reference, target=target, advantages=advantages, **options)
    tensors = dict(hidden=h, weight=w) | ({"bias": bias} if bias is not None else {})
    return check_loss(ours, reference, tensors)


# (loss_type, extra options, dtype): each a reason
GRPO_CASES = [
    ("grpo", dict(beta=0.04), F32),                                  # per-sequence means; k3 KL
    ("bnpo", dict(beta=0.1, kl_estimator="k1", delta=1.3), F32),     # two-sided clipping, k1
    ("dr_grpo", dict(max_completion_length=9, epsilon_high=0.28), F32),
    ("dapo", dict(beta=0.1, kl_estimator="k2", entropy_coef=0.05, temperature=0.7), F32),
    ("dapo", dict(beta=0.04, entropy_coef=0.01, temperature=1.3), BF16),   # a bf16 model
    ("cispo", dict(epsilon_high=1.1, beta=0.04), F32),                # clipped, detached ratio weights
]


@pytest.mark.parametrize("loss_type,options,dtype", GRPO_CASES)
def test_grpo_token_level(loss_type, options, dtype, device):
    h, w, bias, target, old, ref = policy_inputs(3, 5, 16, 301, dtype, device)
    check_grpo(h, w, bias, target, torch.randn(3, device=device), old_logprobs=old, ref_logprobs=ref,
               loss_type=loss_type, **options)


def test_grpo_on_policy_per_token_advantages_and_weights(device):
    # old_logprobs None: every ratio is exactly 1, a tie of the two clipped terms (half the
    # gradient from each in torch's min); advantages per token; a per-token policy weight (the
    # vLLM importance ratio); dapo's normaliser given as a tensor.
    h, w, bias, target, _, ref = policy_inputs(3, 5, 8, 200, F32, device)
    weights = torch.rand(3, 5, device=device)
    check_grpo(h, w, None, target, torch.randn(3, 5, device=device), ref_logprobs=ref, beta=0.04,
               policy_weights=weights, num_items_in_batch=torch.tensor(17.0, device=device))


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_gspo_sequence_level(loss_type, device):
    h, w, bias, target, old, ref = policy_inputs(3, 5, 16, 301, F32, device)
    check_grpo(h, w, bias, target, torch.randn(3, device=device), old_logprobs=old, ref_logprobs=ref, beta=0.04,
               importance_sampling_level="sequence", loss_type=loss_type, entropy_coef=0.01)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_grpo_without_scored_tokens(level, device):
    # A micro-batch whose completions are all masked: loss 0, gradients 0, no NaN.
    h, w, bias, target, old, ref = policy_inputs(2, 3, 8, 50, F32, device, masked=((slice(None), slice(None)),))
    leaves = [t.clone().requires_grad_() for t in (h, w, bias)]
    loss = tritonkit.grpo_loss(leaves[0], leaves[1], target, torch.randn(2, device=device), bias=leaves[2],
                               old_logprobs=old, ref_logprobs=ref, beta=0.1, entropy_coef=0.1,
                               importance_sampling_level=level, loss_type="grpo")
    assert loss.item() == 0.0
    assert all(g.eq(0).all() for g in torch.autograd.grad(loss, leaves))


def test_grpo_sequences_of_one_token_and_stats(device):
    h, w, bias, target, old, ref = policy_inputs(4, 1, 8, 97, F32, device, masked=((1, 0),))
    adv = torch.randn(4, device=device)
    check_grpo(h, w, bias, target, adv, old_logprobs=old, loss_type="grpo")
    loss, logp, entropy = tritonkit.grpo_loss(h, w, target, adv, bias=bias, old_logprobs=old, return_logprobs=True)
    want, want_entropy = tritonkit.linear_logprobs(h, w, target, bias=bias, return_entropy=True)
    assert torch.equal(logp, want) and torch.equal(entropy, want_entropy) and not logp.requires_grad


def test_grpo_bad_input(device):
    h, w, bias, target, old, ref = policy_inputs(2, 3, 8, 50, F32, device, masked=((0, 1),))
    adv = torch.randn(2, device=device)
    grpo = tritonkit.grpo_loss
    with pytest.raises(ValueError, match="loss_type"):
        grpo(h, w, target, adv, loss_type="ppo")
    with pytest.raises(ValueError, match="ref_logprobs"):
        grpo(h, w, target, adv, beta=0.1)
    with pytest.raises(ValueError, match="advantages"):
        grpo(h, w, target, adv[:1])
    with pytest.raises(ValueError, match="old_logprobs"):
        grpo(h, w, target, adv, old_logprobs=old[:, :2])
    with pytest.raises(ValueError, match="kl_estimator"):
        grpo(h, w, target, adv, kl_estimator="k4")
    with pytest.raises(ValueError, match="target"):
        grpo(h, w, target[:, :2], adv)
    with pytest.raises(ValueError, match="temperature"):
        grpo(h, w, target, adv, temperature=0)


# --------------------------------------------------------------------------------------------
# preference losses: 2B sequences, the chosen first

def pair_inputs(pairs, length, hidden, vocab, dtype, device, masked=((0, slice(3, None)), (3, slice(None, 2)))):
    h, w, _ = head((2 * pairs, length), hidden, vocab, dtype, device)
    return h, w, masked_targets((2 * pairs, length), vocab, device, masked)


def _dpo(fn, ref_chosen, ref_rejected):
    # The reference sums as positional arguments after target, as both functions take them.
    return lambda hidden, weight, target, **kw: fn(hidden, weight, target, ref_chosen, ref_rejected, **kw)


# (loss, options, dtype)
PREFERENCE_CASES = [
    ("dpo", dict(beta=0.2, label_smoothing=0.1, nll_alpha=0.5, temperature=0.9), F32),
    ("dpo", dict(loss_type="ipo"), F32),
    ("dpo", dict(loss_type="hinge", beta=0.02), F32),
    ("dpo", dict(beta=0.1), BF16),
    ("simpo", dict(gamma=0.3, nll_alpha=1.0), F32),
    ("simpo", dict(), BF16),
    ("orpo", dict(beta=0.2), F32),
    ("orpo", dict(), BF16),
]


@pytest.mark.parametrize("kind,options,dtype", PREFERENCE_CASES)
def test_preference_losses(kind, options, dtype, device):
    h, w, target = pair_inputs(2, 5, 16, 301, dtype, device)
    if kind == "dpo":
        ref_c, ref_r = torch.randn(2, device=device) - 20, torch.randn(2, device=device) - 20
        ours, reference = _dpo(tritonkit.dpo_loss, ref_c, ref_r), _dpo(dpo_loss_reference, ref_c, ref_r)
    else:
        ours = {"simpo": tritonkit.simpo_loss, "orpo": tritonkit.orpo_loss}[kind]
        reference = {"simpo": simpo_loss_reference, "orpo": orpo_loss_reference}[kind]
    check_loss(functools.partial(ours, target=target, chunk_tokens=3, **options),
               functools.partial(reference, target=target, **options), dict(hidden=h, weight=w))


def test_preference_pairs_without_scored_tokens(device):
    # A pair whose chosen completion is all masked: finite losses and gradients everywhere.
    h, w, target = pair_inputs(2, 4, 8, 100, F32, device, masked=((0, slice(None)),))
    zeros = torch.zeros(2, device=device)
    for loss_fn in (lambda *a: tritonkit.dpo_loss(*a, zeros, zeros), tritonkit.simpo_loss, tritonkit.orpo_loss):
        leaves = [h.clone().requires_grad_(), w.clone().requires_grad_()]
        loss = loss_fn(leaves[0], leaves[1], target)
        grads = torch.autograd.grad(loss, leaves)
        assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads)
        assert grads[0][0].eq(0).all()   # the masked sequence's hidden states get no gradient


def test_dpo_returns_the_policy_sums(device):
    h, w, target = pair_inputs(2, 5, 8, 100, F32, device)
    zeros = torch.zeros(2, device=device)
    _, chosen, rejected = tritonkit.dpo_loss(h, w, target, zeros, zeros, return_logps=True)
    sums = linear_logprobs_reference(h, w, target).sum(-1)
    torch.testing.assert_close(torch.cat([chosen, rejected]).double(), sums, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="even"):
        tritonkit.dpo_loss(h[:3], w, target[:3], zeros, zeros)
    with pytest.raises(ValueError, match="ref_chosen_logps"):
        tritonkit.dpo_loss(h, w, target, zeros[:1], zeros)
    with pytest.raises(ValueError, match="loss_type"):
        tritonkit.dpo_loss(h, w, target, zeros, zeros, loss_type="sppo")


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_kto(dtype, device):
    h, w, target = pair_inputs(3, 4, 16, 201, dtype, device)
    desirable = torch.tensor([True, False, True, True, False, False], device=device)
    ref_logps = torch.randn(6, device=device) - 15
    kl = torch.tensor(0.7, device=device)

    def call(fn):
        return lambda hidden, weight, **kw: fn(hidden, weight, target, desirable, ref_logps, kl, beta=0.3,
                                               desirable_weight=1.2, undesirable_weight=0.8, temperature=1.1, **kw)

    check_loss(call(functools.partial(tritonkit.kto_loss, chunk_tokens=5)), call(kto_loss_reference),
               dict(hidden=h, weight=w))
    with pytest.raises(ValueError, match="desirable"):
        tritonkit.kto_loss(h, w, target, desirable[:2], ref_logps)


def test_torch_compile_fullgraph(device):
    # One graph holding every custom op of the post-training losses: the fused GRPO loss,
    # linear_logprobs with its entropy (and DPO on it), distillation with reduction "none"
    # (recomputed in the backward). Inductor, as users compile.
    h, w, bias, target, old, ref = policy_inputs(2, 3, 16, 301, F32, device, masked=((0, 2),))
    th, tw, _ = head((2, 3), 8, 301, F32, device)
    adv, scale = torch.randn(2, device=device), torch.randn(2, 3, device=device)
    zeros = torch.zeros(1, device=device)

    def step(h, w, bias):
        grpo = tritonkit.grpo_loss(h, w, target, adv, bias=bias, old_logprobs=old, ref_logprobs=ref, beta=0.04,
                                   entropy_coef=0.01)
        logp, entropy = tritonkit.linear_logprobs(h, w, target, bias=bias, temperature=0.8, return_entropy=True)
        dpo = tritonkit.dpo_loss(h, w, target, zeros, zeros, bias=bias)
        distill = tritonkit.distill_loss(h, w, th, tw, target=target, bias=bias, reduction="none")
        return grpo * 2.0 + (logp * scale).sum() - 0.1 * entropy.sum() + dpo + (distill * scale).sum()

    compiled = torch.compile(step, fullgraph=True, backend="inductor")
    results = []
    for fn in (step, compiled):
        leaves = [t.clone().requires_grad_() for t in (h, w, bias)]
        out = fn(*leaves)
        results.append((out, *torch.autograd.grad(out, leaves)))
    for a, c in zip(*results):
        torch.testing.assert_close(a, c)


def test_grpo_step_example_runs(capsys):
    # examples/grpo_step.py: sampling, rewards, advantages, the reference model's log-probabilities
    # and one optimizer step on a tiny random Llama.
    import importlib.util
    import pathlib
    pytest.importorskip("transformers")
    path = pathlib.Path(__file__).parents[1] / "examples" / "grpo_step.py"
    spec = importlib.util.spec_from_file_location("grpo_step", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main(["--steps", "2", "--prompts", "1", "--group", "2", "--completion-len", "4"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all("nan" not in line for line in lines)


def test_frozen_head(device):
    # A frozen LM head (LoRA, a frozen output layer): only hidden's gradient is made, the same as
    # with the head trained.
    h, w, bias, target, old, ref = policy_inputs(2, 4, 8, 100, F32, device, masked=((0, 3),))
    adv = torch.randn(2, device=device)
    for loss_fn in (lambda h_, w_: tritonkit.grpo_loss(h_, w_, target, adv, old_logprobs=old, ref_logprobs=ref,
                                                       beta=0.04),
                    lambda h_, w_: (tritonkit.linear_logprobs(h_, w_, target) * old.nan_to_num()).sum()):
        both = [h.clone().requires_grad_(), w.clone().requires_grad_()]
        (want, _) = torch.autograd.grad(loss_fn(*both), both)
        alone = h.clone().requires_grad_()
        (got,) = torch.autograd.grad(loss_fn(alone, w), alone)
        torch.testing.assert_close(got, want)
