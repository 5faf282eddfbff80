"""tritonkit.attention with sliding windows, a logit softcap and the returned log-sum-exp:
forward, lse and gradients (of o and of lse) against float64 references built from the dense
formula with an explicit mask, with torch's own error in the same dtype as the yardstick;
rows that see no key; key blocks outside every window never read; determinism; bad input.

Interpreter shapes are tiny (its fixed blocks are 16-32 rows, so ~40-70 rows cross several
blocks and every kind of edge); the GPU adds longer ones.
"""

import pytest
import torch

import tritonkit
from tritonkit.ops.attention import attention_fwd, attention_reference
from _tolerance import assert_close_to_reference, eps_for
from conftest import ON_GPU
from test_attention import make_qkv, poison_outputs  # noqa: F401 (fixture)

# (Nq, Nk, causal, window): why
WINDOWS = {
    (45, 45, False, (5, -1)): "left only",
    (45, 45, False, (-1, 4)): "right only",
    (45, 45, False, (6, 3)): "both sides",
    (45, 45, False, (0, 0)): "0: each query sees its own key only",
    (45, 45, False, (100, 100)): "wider than the sequence: no mask",
    (45, 45, True, (7, 0)): "causal sliding window (the decoder layer)",
    (45, 45, True, (7, 9)): "causal with a right side (folded away)",
    (45, 45, True, (-1, -1)): "causal, window unbounded on both sides",
    (37, 70, False, (3, 20)): "Nq < Nk",
    (70, 37, True, (5, 0)): "Nq > Nk + left: the last rows see no key",
    (70, 30, False, (2, -1)): "Nq > Nk, left only: empty rows without causal",
}
if ON_GPU:
    WINDOWS.update({
        (1024, 1024, True, (256, 0)): "a longer sliding window",
        (777, 1500, False, (300, 300)): "ragged, both sides",
    })
WINDOW_PARAMS = [pytest.param(*case, id=why) for case, why in WINDOWS.items()]


def grads(fn, leaves, upstream):
    leaves = [t.detach().requires_grad_() for t in leaves]
    outs = fn(*leaves)
    return torch.autograd.grad(outs, leaves, upstream)


def check(q, k, v, causal=False, window=None, softcap=None, scale=None, backward=True):
    """Forward, lse and the gradients of (o, lse) under a random upstream against the float64
    reference; torch's error in the inputs' dtype is the yardstick."""
    kw = dict(window=window, softcap=softcap)
    out, lse = tritonkit.attention(q, k, v, causal=causal, scale=scale, return_lse=True, **kw)
    ref, ref_lse = attention_reference(q, k, v, causal, scale, return_lse=True, **kw)
    same, same_lse = attention_reference(q, k, v, causal, scale, upcast=False, return_lse=True, **kw)
    assert out.dtype == q.dtype and lse.dtype == torch.float32 and lse.shape == q.shape[:3]
    assert_close_to_reference(out, ref, same)
    assert_close_to_reference(lse, ref_lse, same_lse.float(), what="lse")
    if not backward:
        return out, lse
    upstream = (torch.randn_like(q), torch.randn_like(lse))
    ours = grads(lambda *t: tritonkit.attention(*t, causal=causal, scale=scale, return_lse=True, **kw),
                 (q, k, v), upstream)
    wide = grads(lambda *t: attention_reference(*t, causal, scale, upcast=False, return_lse=True, **kw),
                 [t.double() for t in (q, k, v)], [u.double() for u in upstream])
    theirs = grads(lambda *t: attention_reference(*t, causal, scale, upcast=False, return_lse=True, **kw),
                   (q, k, v), (upstream[0], upstream[1].to(q.dtype)))
    for name, a, w, t in zip(("dq", "dk", "dv"), ours, wide, theirs):
        assert not a.isnan().any(), name
        assert_close_to_reference(a, w, t, eps=eps_for(q.dtype, gradient=True), what=name)
    return out, lse


@pytest.mark.parametrize("Nq,Nk,causal,window", WINDOW_PARAMS)
def test_window(Nq, Nk, causal, window, device):
    q, k, v = make_qkv(1, 4, 2, Nq, Nk, 32, torch.float16, device)
    check(q, k, v, causal, window)


@pytest.mark.parametrize("causal,window", [(False, (6, 3)), (True, (7, 0)), (True, (5, 0))])
def test_window_bf16(causal, window, device):
    q, k, v = make_qkv(1, 4, 2, 70, 37 if window == (5, 0) else 70, 32, torch.bfloat16, device)
    check(q, k, v, causal, window)


@pytest.mark.parametrize("tma", [True, False], ids=["descriptors", "pointers"])
@pytest.mark.parametrize("causal,window", [(False, (6, 3)), (True, (5, 0)), (False, (2, -1))])
def test_window_paths(causal, window, tma, device):
    # Both load paths, forward and backward, through the launchers (the forward's lse too).
    from tritonkit.ops.attention import attention_bwd
    q, k, v = make_qkv(2, 2, 1, 70, 37, 48, torch.float16, device)
    out, lse = attention_fwd(q, k, v, causal, None, *window, tma=tma)
    ref, ref_lse = attention_reference(q, k, v, causal, window=window, return_lse=True)
    same = attention_reference(q, k, v, causal, window=window, upcast=False)
    assert_close_to_reference(out, ref, same)
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
    do = torch.randn_like(q)
    got = attention_bwd(do, q, k, v, out, lse, causal, None, *window, tma=tma)
    want = attention_bwd(do, q, k, v, out, lse, causal, None, *window, tma=not tma)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_softcap(causal, dtype, device):
    # Large logits (scale 1) so that the cap bends them; GQA; Nq != Nk.
    q, k, v = make_qkv(1, 4, 2, 45, 53, 32, dtype, device)
    check(q, k, v, causal, softcap=5.0, scale=1.0)


def test_softcap_with_window_and_negative_scale(device):
    q, k, v = make_qkv(1, 2, 2, 45, 45, 64, torch.float16, device)
    check(q, k, v, True, window=(9, 0), softcap=3.0, scale=-0.5)


def test_rows_that_see_no_key(device):
    # Queries 13.. see no key (left window 3, top-left aligned, only 10 keys): o = 0, lse =
    # -inf, zero gradients, and no NaN anywhere, on both load paths.
    q, k, v = make_qkv(1, 2, 1, 40, 10, 32, torch.float16, device)
    for tma in (True, False):
        out, lse = attention_fwd(q, k, v, False, None, 3, -1, tma=tma)
        assert torch.equal(out[:, :, 13:], torch.zeros_like(out[:, :, 13:]))
        assert torch.isneginf(lse[:, :, 13:]).all() and torch.isfinite(lse[:, :, :13]).all()
    dq, dk, dv = grads(lambda *t: tritonkit.attention(*t, window=(3, -1), return_lse=True), (q, k, v),
                       (torch.randn_like(q), torch.randn(1, 2, 40, device=device)))
    assert not any(t.isnan().any() for t in (dq, dk, dv))
    assert torch.equal(dq[:, :, 13:], torch.zeros_like(dq[:, :, 13:]))


def test_key_blocks_outside_every_window_are_never_read(device):
    # 32 queries with window (2, 2) see keys 0..33 at most; keys 128.. (past the first key
    # block of every tile, 128 keys at most) hold NaN. A kernel that loaded their blocks would
    # spread the NaN (0 * NaN in P V); the gradients of those keys are 0 (no query sees them).
    q, k, v = make_qkv(1, 2, 2, 32, 256, 32, torch.float16, device)
    k[:, :, 128:], v[:, :, 128:] = float("nan"), float("nan")
    for tma in (True, False):
        out, _ = attention_fwd(q, k, v, False, None, 2, 2, tma=tma)
        ref = attention_reference(q, k[:, :, :128], v[:, :, :128], window=(2, 2))
        assert_close_to_reference(out, ref, attention_reference(q, k[:, :, :128], v[:, :, :128], upcast=False,
                                                               window=(2, 2)))
    dq, dk, dv = grads(lambda *t: tritonkit.attention(*t, window=(2, 2)), (q, k, v), torch.randn_like(q))
    assert not dq.isnan().any()
    assert torch.equal(dk[:, :, 128:], torch.zeros_like(dk[:, :, 128:]))


def _merge(o1, lse1, o2, lse2):
    """Two partial attentions over disjoint key sets, merged exactly through their lse."""
    lse = torch.logaddexp(lse1, lse2)
    w1, w2 = torch.exp(lse1 - lse)[..., None], torch.exp(lse2 - lse)[..., None]
    return o1.float() * w1 + o2.float() * w2, lse


@pytest.mark.parametrize("softcap", [None, 5.0])
def test_merging_two_halves_of_the_keys_by_lse(softcap, device):
    # Attention over keys [0, 40) and over [40, 67), merged by their lse, is attention over
    # all 67 keys: forward and backward (the merged gradients flow through both lse).
    q, k, v = make_qkv(1, 4, 2, 67, 67, 32, torch.float16, device)
    split = 40

    def merged(q, k, v):
        o1, lse1 = tritonkit.attention(q, k[:, :, :split], v[:, :, :split], softcap=softcap, return_lse=True)
        o2, lse2 = tritonkit.attention(q, k[:, :, split:], v[:, :, split:], softcap=softcap, return_lse=True)
        return _merge(o1, lse1, o2, lse2)

    out, lse = merged(q, k, v)
    full, full_lse = tritonkit.attention(q, k, v, softcap=softcap, return_lse=True)
    torch.testing.assert_close(out, full.float(), atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(lse, full_lse, atol=1e-4, rtol=1e-4)
    upstream = torch.randn_like(out)
    ours = grads(lambda *t: merged(*t)[0], (q, k, v), upstream)
    want = grads(lambda *t: tritonkit.attention(*t, softcap=softcap).float(), (q, k, v), upstream)
    for a, b in zip(ours, want):
        torch.testing.assert_close(a.float(), b.float(), atol=5e-3, rtol=5e-3)


def test_lse_gradient_against_finite_differences(device):
    # d/de of sum(w * lse(q + e u, k + e u_k)) at e = 0, by central differences of the float64
    # reference, against our backward's <dq, u> + <dk, u_k> (lse alone carries the gradient).
    q, k, v = make_qkv(1, 2, 1, 33, 40, 32, torch.float16, device)
    w = torch.randn(1, 2, 33, device=device)
    u, u_k = torch.randn_like(q, dtype=torch.float64), torch.randn_like(k, dtype=torch.float64)
    kw = dict(causal=True, window=(9, 0), softcap=4.0)
    dq, dk, _ = grads(lambda *t: tritonkit.attention(*t, return_lse=True, **kw)[1], (q, k, v), w)

    def f(e):
        lse = attention_reference(q.double() + e * u, k.double() + e * u_k, v.double(), kw["causal"],
                                  window=kw["window"], softcap=kw["softcap"], return_lse=True)[1]
        return (w.double() * lse).sum().item()
    e = 1e-4
    numeric = (f(e) - f(-e)) / (2 * e)
    analytic = (dq.double() * u).sum().item() + (dk.double() * u_k).sum().item()
    assert abs(analytic - numeric) <= 2e-2 * abs(numeric) + 1e-2, (analytic, numeric)


def test_backward_is_deterministic(device):
    q, k, v = make_qkv(1, 4, 2, 70, 70, 32, torch.bfloat16, device)
    upstream = (torch.randn_like(q), torch.randn(1, 4, 70, device=device))
    f = lambda *t: tritonkit.attention(*t, causal=True, window=(11, 0), softcap=8.0, return_lse=True)  # noqa: E731
    first = grads(f, (q, k, v), upstream)
    for a, b in zip(first, grads(f, (q, k, v), upstream)):
        assert torch.equal(a, b)


def test_compiled_graph_holds_window_softcap_and_lse(device):
    q, k, v = make_qkv(1, 2, 1, 40, 40, 32, torch.float16, device, requires_grad=True)

    def f(q, k, v):
        out, lse = tritonkit.attention(q, k, v, causal=True, window=(7, 0), softcap=6.0, return_lse=True)
        return out.float().sum() + lse.sum()
    backend = "inductor" if ON_GPU else "aot_eager"
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    got = torch.autograd.grad(compiled(q, k, v), (q, k, v))
    want = torch.autograd.grad(f(q, k, v), (q, k, v))
    for a, b in zip(got, want):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(window=(-2, 0)), ValueError, "window"),
    (dict(window=(3, -5)), ValueError, "window"),
    (dict(window=(3,)), TypeError, "window"),
    (dict(window=(1.5, 2)), TypeError, "window"),
    (dict(window=5), TypeError, "window"),
    (dict(softcap=0.0), ValueError, "softcap"),
    (dict(softcap=-1.0), ValueError, "softcap"),
    (dict(softcap=float("inf")), ValueError, "softcap"),
    (dict(softcap="5"), TypeError, "softcap"),
])
def test_bad_window_or_softcap_names_the_argument(kwargs, error, words, device):
    q, k, v = make_qkv(1, 2, 2, 8, 8, 16, torch.float16, device)
    with pytest.raises(error, match=words):
        tritonkit.attention(q, k, v, **kwargs)


def test_custom_op_registrations_with_window_and_softcap(device):
    q, k, v = make_qkv(1, 2, 1, 24, 18, 16, torch.float16, device, requires_grad=True)
    torch.library.opcheck(torch.ops.tritonkit.attention_fwd.default, (q, k, v, True, 0.25, 5, -1, 3.0))


@pytest.mark.gpu
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal,window,softcap", [(True, (256, 0), None), (True, None, 50.0),
                                                    (False, (300, 100), 30.0)])
def test_head_dims_compiled(D, causal, window, softcap, device):
    # The compiled kernels at the head dims and tiles the GPU uses (GQA 8/2, ragged N).
    q, k, v = make_qkv(2, 8, 2, 1000, 1000, D, torch.bfloat16, device)
    check(q, k, v, causal, window, softcap)
