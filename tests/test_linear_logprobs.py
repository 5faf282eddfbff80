"""tritonkit.linear_logprobs against its float64 reference, forward and the gradients for random
upstream gradients of both outputs, with torch's own error in the same dtype as the yardstick."""

import pytest
import torch

import tritonkit
from tritonkit.ops.cross_entropy.logprobs import linear_logprobs_bwd, linear_logprobs_fwd, linear_logprobs_reference
from _tolerance import assert_close_to_reference, eps_for
from conftest import ON_GPU

IGNORE = -100


def head(tokens, hidden, vocab, dtype, device, bias=True):
    h = torch.randn(tokens, hidden, device=device, dtype=dtype)
    w = (torch.randn(vocab, hidden, device=device) / hidden ** 0.5 * 3).to(dtype)
    b = torch.randn(vocab, device=device, dtype=dtype) if bias else None
    return h, w, b


def targets(shape, vocab, ignored, device, dtype=torch.int64):
    """Class indices with no, some (every third, the first included) or all ignored."""
    t = torch.randint(0, vocab, shape, device=device, dtype=dtype)
    flat = t.view(-1)
    if ignored == "some":
        flat[::3] = IGNORE
    elif ignored == "all":
        flat[:] = IGNORE
    return t


def check(h, w, b, target, *, temperature=1.0, softcap=None, entropy=True, chunk_tokens=None, upstream=("logp", "entropy")):
    """Ours, torch in h's dtype and the float64 reference: outputs, then the gradients of every
    input for random upstream gradients of the outputs named in `upstream`."""
    opts = dict(temperature=temperature, softcap=softcap, ignore_index=IGNORE, return_entropy=entropy)
    tensors = [h, w] + ([b] if b is not None else [])

    def run(fn, cast, **kw):
        leaves = [cast(t).detach().requires_grad_() for t in tensors]
        out = fn(leaves[0], leaves[1], target, bias=leaves[2] if b is not None else None, **opts, **kw)
        return leaves, out if entropy else (out,)

    ours_in, ours = run(tritonkit.linear_logprobs, lambda t: t, chunk_tokens=chunk_tokens)
    torch_in, theirs = run(linear_logprobs_reference, lambda t: t, upcast=False)
    ref_in, ref = run(linear_logprobs_reference, torch.Tensor.double)
    for name, o, t, r in zip(("logp", "entropy"), ours, theirs, ref):
        assert o.dtype == torch.float32 and o.shape == target.shape
        assert_close_to_reference(o, r, t, eps=eps_for(torch.float32) * 10, what=name)
    names = ("logp", "entropy")[:len(ours)]
    pick = [i for i, n in enumerate(names) if n in upstream]
    ups = [torch.randn(target.shape, device=h.device) for _ in pick]
    grads = [torch.autograd.grad([outs[i] for i in pick], leaves, [u.to(outs[i].dtype) for u, i in zip(ups, pick)])
             for outs, leaves in ((ours, ours_in), (theirs, torch_in), (ref, ref_in))]
    for name, o, t, r in zip(("hidden", "weight", "bias"), *grads):
        assert o.dtype == h.dtype and o.shape == r.shape
        assert_close_to_reference(o, r, t, eps=eps_for(h.dtype, True), what=f"grad {name}")
    return ours, grads[0]


F32, BF16 = torch.float32, torch.bfloat16
# (tokens, hidden, vocab, chunk_tokens, bias, temperature, softcap, ignored, dtype): each a reason
CASES = [
    (1, 1, 1, None, False, 1.0, None, "none", F32),      # one of everything: logp 0, entropy 0
    (7, 13, 1000, 3, True, 0.7, None, "some", F32),      # chunk boundaries 3 + 3 + 1, temperature < 1
    (7, 13, 1000, 3, True, 0.7, None, "some", BF16),     # the same from a bf16 model
    (9, 16, 997, None, False, 1.3, 3.0, "some", F32),    # prime vocabulary, softcap then temperature
    (9, 16, 997, None, False, 1.3, 3.0, "some", BF16),
    (3, 8, 9000, 2, True, 1.0, None, "none", F32),       # vocabulary over one block of the row kernel
] + ([(4096, 2048, 151936, None, False, 0.9, None, "some", BF16)] if ON_GPU else [])


@pytest.mark.parametrize("tokens,hidden,vocab,chunk,bias,temperature,softcap,ignored,dtype", CASES)
def test_linear_logprobs(tokens, hidden, vocab, chunk, bias, temperature, softcap, ignored, dtype, device):
    h, w, b = head(tokens, hidden, vocab, dtype, device, bias)
    target = targets((tokens,), vocab, ignored, device)
    (logp, entropy), _ = check(h, w, b, target, temperature=temperature, softcap=softcap, chunk_tokens=chunk)
    ignored_rows = target == IGNORE
    assert logp[ignored_rows].eq(0).all() and entropy[ignored_rows].eq(0).all()


def test_fp16_and_one_output(device):
    # fp16 weights; the logp alone (no entropy kept); an entropy returned but given no gradient.
    h, w, b = head(5, 16, 300, torch.float16, device)
    target = targets((5,), 300, "some", device)
    check(h, w, b, target, entropy=False, chunk_tokens=2)
    check(h, w, b, target, upstream=("logp",))
    check(h, w, b, target, upstream=("entropy",), temperature=0.5)


def test_all_ignored_gives_zeros(device):
    # A micro-batch with no completion token: zeros forward and backward, no NaN.
    h, w, b = head(4, 8, 50, torch.float32, device)
    target = targets((2, 2), 50, "all", device)
    leaves = [t.clone().requires_grad_() for t in (h.view(2, 2, 8), w, b)]
    logp, entropy = tritonkit.linear_logprobs(leaves[0], leaves[1], target, bias=leaves[2], return_entropy=True)
    assert logp.eq(0).all() and entropy.eq(0).all()
    grads = torch.autograd.grad((logp * 3 + entropy).sum(), leaves)
    assert all(g.eq(0).all() for g in grads)


def test_layouts_and_sequences_of_one(device):
    # hidden at odd element offsets with leading dims (B, 1): sequences of one token; a
    # transposed weight; a strided bias; int32 targets.
    for offset in (1, 5):
        h = torch.randn(3 * 24 + offset, device=device)[offset:].view(3, 1, 24)
        w = torch.randn(24, 301, device=device).t()
        b = torch.randn(2 * 301, device=device)[::2]
        target = targets((3, 1), 301, "some", device, torch.int32)
        check(h, w, b, target, temperature=2.0, chunk_tokens=2)


def test_backward_launcher_takes_either_upstream(device):
    h, w, b = head(6, 8, 100, torch.float32, device)
    target = targets((6,), 100, "some", device)
    logp, entropy, lse = linear_logprobs_fwd(h, w, target, b, 1.0, None, IGNORE, True)
    g = torch.randn(6, device=device)
    only_logp = linear_logprobs_bwd(g, None, h, w, target, b, lse, entropy, 1.0, None, IGNORE)
    both = linear_logprobs_bwd(g, torch.zeros_like(g), h, w, target, b, lse, entropy, 1.0, None, IGNORE)
    for a, c in zip(only_logp, both):
        torch.testing.assert_close(a, c)
    with pytest.raises(TypeError, match="lse"):
        linear_logprobs_bwd(g, None, h, w, target, b, lse.float(), entropy)
    with pytest.raises(ValueError, match="grad_entropy"):
        linear_logprobs_bwd(g, g[:2], h, w, target, b, lse, entropy)


def test_autocast_casts_the_head(device):
    # Under autocast the float32 head runs in the region's dtype, as F.linear does.
    h, w, _ = head(5, 16, 200, torch.float32, device, bias=False)
    target = targets((5,), 200, "some", device)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        inside = tritonkit.linear_logprobs(h, w, target)
    cast = tritonkit.linear_logprobs(h.bfloat16(), w.bfloat16(), target)
    assert torch.equal(inside, cast)


def test_bad_input(device):
    h, w, b = head(4, 8, 50, torch.float32, device)
    target = targets((4,), 50, "none", device)
    lp = tritonkit.linear_logprobs
    with pytest.raises(ValueError, match="temperature"):
        lp(h, w, target, temperature=0.0)
    with pytest.raises(ValueError, match="softcap"):
        lp(h, w, target, softcap=-1.0)
    with pytest.raises(TypeError, match="weight"):
        lp(h, w.double(), target)
    with pytest.raises(ValueError, match="weight"):
        lp(h, w[:, :5], target)
    with pytest.raises(ValueError, match="target"):
        lp(h, w, target[:3])
    with pytest.raises(TypeError, match="target"):
        lp(h, w, target.float())
    with pytest.raises(ValueError, match="bias"):
        lp(h, w, target, bias=b[:7])
    with pytest.raises(ValueError, match="chunk_tokens"):
        lp(h, w, target, chunk_tokens=0)
    if not ON_GPU:
        bad = target.clone()
        bad[0] = 50
        with pytest.raises(ValueError, match="target"):
            lp(h, w, bad)
