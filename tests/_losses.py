"""Checking a post-training loss against its float64 reference: the loss and the gradients of
its differentiable inputs for a random upstream gradient, with torch's own error in the same
dtype (the reference with upcast=False) as the yardstick."""

import torch

from _tolerance import assert_close_to_reference, eps_for


def head(tokens_shape, hidden, vocab, dtype, device, bias=False, scale=3.0):
    """hidden states of tokens_shape + (hidden,), a head (vocab, hidden) and its bias."""
    h = torch.randn(*tokens_shape, hidden, device=device).to(dtype)
    w = (torch.randn(vocab, hidden, device=device) / hidden ** 0.5 * scale).to(dtype)
    b = torch.randn(vocab, device=device).to(dtype) if bias else None
    return h, w, b


def masked_targets(shape, vocab, device, masked=()):
    """Random tokens with ignore_index (-100) at the (sequence, slice) places in `masked`."""
    t = torch.randint(0, vocab, shape, device=device)
    for where in masked:
        t[where] = -100
    return t


def check_loss(ours, reference, tensors: dict, *, loss_eps=1e-5, upstream=None):
    """ours(**tensors) and reference(**tensors, upcast=...) on leaves: the loss, then the
    gradient of every tensor for the upstream gradient (a random one of the loss's shape when
    None). Returns our loss and gradients."""
    def run(fn, cast, **kw):
        leaves = {k: cast(t).detach().requires_grad_() for k, t in tensors.items()}
        return leaves, fn(**leaves, **kw)

    ours_in, out = run(ours, lambda t: t)
    same_in, same = run(reference, lambda t: t, upcast=False)
    ref_in, ref = run(reference, torch.Tensor.double, upcast=True)
    assert out.dtype == torch.float32 and out.shape == ref.shape
    assert torch.isfinite(out).all()
    assert_close_to_reference(out, ref, same, eps=loss_eps, what="loss")
    up = torch.randn(out.shape, device=out.device) * 1.5 if upstream is None else upstream
    grads = [torch.autograd.grad(o, list(leaves.values()), up.to(o.dtype))
             for o, leaves in ((out, ours_in), (same, same_in), (ref, ref_in))]
    for name, o, t, r in zip(tensors, *grads):
        dtype = tensors[name].dtype
        assert o.dtype == dtype and o.shape == r.shape
        assert_close_to_reference(o, r, t, eps=eps_for(dtype, True), what=f"grad {name}")
    return out, grads[0]
