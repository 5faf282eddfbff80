"""tritonkit.distill_loss (forward KL, reverse KL, generalized JSD between a student's and a
teacher's head) against its float64 reference, forward and the student's gradients."""

import functools

import pytest
import torch

import tritonkit
from tritonkit.ops.post_training import distill_loss_reference, linear_distill_loss_fwd
from _losses import check_loss, head, masked_targets

F32, BF16 = torch.float32, torch.bfloat16


def check_distill(tokens, hidden, teacher_hidden, vocab, dtype, device, *, bias=True, masked=((slice(None, None, 3),),),
                  target=True, **options):
    h, w, b = head(tokens, hidden, vocab, dtype, device, bias=bias)
    th, tw, tb = head(tokens, teacher_hidden, vocab, dtype, device, bias=bias)
    t = masked_targets(tokens, vocab, device, masked) if target else None
    common = dict(teacher_hidden=th, teacher_weight=tw, teacher_bias=tb, target=t, **options)
    tensors = dict(hidden=h, weight=w) | ({"bias": b} if bias else {})
    return check_loss(functools.partial(tritonkit.distill_loss, chunk_tokens=3, **common),
                      functools.partial(distill_loss_reference, **common), tensors)


# (kind, beta, reduction, temperature, dtype): each a reason
CASES = [
    ("forward_kl", 0.5, "mean", 1.0, F32),   # gradient written in the statistics pass
    ("forward_kl", 0.5, "none", 0.7, F32),   # recomputed in the backward, per-token upstream
    ("reverse_kl", 0.5, "mean", 1.3, F32),
    ("reverse_kl", 0.5, "none", 1.0, F32),
    ("jsd", 0.3, "sum", 0.8, F32),
    ("jsd", 0.5, "none", 1.0, F32),
    ("jsd", 1.0, "mean", 1.0, F32),          # beta 1: TRL's reverse KL
    ("jsd", 0.5, "mean", 1.0, BF16),
    ("forward_kl", 0.5, "none", 1.0, BF16),
]


@pytest.mark.parametrize("kind,beta,reduction,temperature,dtype", CASES)
def test_distill_loss(kind, beta, reduction, temperature, dtype, device):
    # The teacher narrower than the student; 7 tokens in chunks of 3; every third unscored.
    loss, _ = check_distill((7,), 16, 12, 301, dtype, device, kind=kind, beta=beta, reduction=reduction,
                            temperature=temperature)
    if reduction == "none":
        assert loss[::3].eq(0).all()


def test_vocabulary_over_a_block_and_sequences(device):
    # (B, L) tokens, a vocabulary past one block of the row kernel, no target (all scored).
    check_distill((1, 2), 8, 8, 8500, F32, device, bias=False, target=False, kind="jsd", beta=0.5)


def test_nothing_scored(device):
    h, w, _ = head((4,), 8, 50, F32, device)
    th, tw, _ = head((4,), 8, 50, F32, device)
    target = torch.full((4,), -100, device=device)
    for reduction in ("mean", "none"):
        leaves = [h.clone().requires_grad_(), w.clone().requires_grad_()]
        loss = tritonkit.distill_loss(*leaves, th, tw, target=target, reduction=reduction)
        assert loss.eq(0).all()
        assert all(g.eq(0).all() for g in torch.autograd.grad(loss.sum(), leaves))


def test_layouts_and_teacher_without_gradient(device):
    # hidden at an odd element offset, a transposed student weight, a teacher that requires grad
    # (frozen anyway: no gradient reaches it).
    h = torch.randn(5 * 16 + 3, device=device)[3:].view(5, 16)
    w = torch.randn(16, 200, device=device).t()
    th, tw, _ = head((5,), 8, 200, F32, device)
    tw.requires_grad_()
    common = dict(teacher_hidden=th, teacher_weight=tw, kind="reverse_kl")
    check_loss(functools.partial(tritonkit.distill_loss, **common), functools.partial(distill_loss_reference, **common),
               dict(hidden=h, weight=w))
    loss = tritonkit.distill_loss(h.requires_grad_(), w, th, tw)
    assert loss.grad_fn is not None
    (g,) = torch.autograd.grad(loss, tw, allow_unused=True)
    assert g is None


def test_bad_input(device):
    h, w, _ = head((4,), 8, 50, F32, device)
    th, tw, _ = head((4,), 6, 50, F32, device)
    with pytest.raises(ValueError, match="kind"):
        tritonkit.distill_loss(h, w, th, tw, kind="tvd")
    with pytest.raises(ValueError, match="beta"):
        tritonkit.distill_loss(h, w, th, tw, beta=1.5)
    with pytest.raises(ValueError, match="teacher_weight"):
        tritonkit.distill_loss(h, w, th, tw[:40])
    with pytest.raises(ValueError, match="teacher_hidden"):
        tritonkit.distill_loss(h, w, th[:3], tw)
    with pytest.raises(ValueError, match="reduction"):
        tritonkit.distill_loss(h, w, th, tw, reduction="batchmean")
    with pytest.raises(ValueError, match="target"):
        linear_distill_loss_fwd(h, w, torch.zeros(3, dtype=torch.int64), None, th, tw, None)
