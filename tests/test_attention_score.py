"""The score options of `ops/attention/score.py` beyond the mask and softcap: the bottom-right
alignment (FlashAttention-2's, and a KV cache's), ALiBi and learnable sinks, dense and packed,
with GQA, windows and softcap: forward, lse and the gradients of (o, lse) (and of the sinks)
against the float64 reference, torch's error in the same dtype as the yardstick; rows that see
no key; torch.compile(fullgraph=True); the description's folding; bad input.

Interpreter shapes are tiny (its blocks are 16-32 rows: ~20-70 rows cross several blocks)."""

import pytest
import torch

import tritonkit
from tritonkit.ops.attention import attention_reference, attention_varlen_reference
from tritonkit.ops.attention.score import Score, score_of
from _tolerance import assert_close_to_reference, eps_for
from test_attention import make_qkv, poison_outputs  # noqa: F401 (fixture)


def grads(fn, leaves, upstream):
    leaves = [t.detach().requires_grad_() for t in leaves]
    return torch.autograd.grad(fn(*leaves), leaves, upstream)


def check_against_reference(ours, reference, leaves):
    """o, lse and the gradients of (o, lse) under a random upstream, in each leaf (q, k, v and
    sinks where given), of ours(*leaves) against reference(*leaves, upcast=True) in float64, with
    the reference in q's dtype (reference(*leaves)) as the yardstick. Returns (o, lse)."""
    dtype = leaves[0].dtype
    out, lse = ours(*leaves)
    ref, ref_lse = reference(*leaves, upcast=True)
    same, same_lse = reference(*leaves)
    assert_close_to_reference(out, ref, same)
    assert_close_to_reference(lse, ref_lse, same_lse.float(), what="lse")
    upstream = (torch.randn_like(out), torch.randn_like(lse))
    got = grads(ours, leaves, upstream)
    wide = grads(reference, [t.double() for t in leaves], [u.double() for u in upstream])
    theirs = grads(reference, leaves, (upstream[0], upstream[1].to(dtype)))
    for name, a, w, t, leaf in zip(("dq", "dk", "dv", "dsinks"), got, wide, theirs, leaves):
        assert not a.isnan().any() and a.dtype == leaf.dtype, name
        assert_close_to_reference(a, w, t, eps=eps_for(dtype, gradient=True), what=name)
    return out, lse


def check_dense(q, k, v, sinks=None, **kw):
    """check_against_reference of tritonkit.attention with options kw."""
    def ours(*t):
        return tritonkit.attention(*t[:3], sinks=t[3] if len(t) > 3 else None, return_lse=True, **kw)

    def reference(*t, upcast=False):
        return attention_reference(*t[:3], sinks=t[3] if len(t) > 3 else None, upcast=upcast, return_lse=True,
                                   **kw)
    return check_against_reference(ours, reference, (q, k, v) if sinks is None else (q, k, v, sinks))


# (Nq, Nk, causal, window): why; every case aligned bottom-right
ALIGNED = {
    (20, 45, True, None): "fewer queries than keys: the last query sees every key (a cache's chunked prefill)",
    (1, 45, True, None): "one query (decode): it sees every key",
    (45, 20, True, None): "more queries than keys: the first 25 rows see no key",
    (20, 45, True, (7, 0)): "a causal sliding window from the end",
    (45, 20, False, (5, 3)): "both sides, shifted by Nk - Nq < 0",
    (37, 70, False, (-1, 0)): "right bound 0 is causal",
}


@pytest.mark.parametrize("Nq,Nk,causal,window", [pytest.param(*c, id=w) for c, w in ALIGNED.items()])
def test_bottom_right(Nq, Nk, causal, window, device):
    q, k, v = make_qkv(2, 4, 2, Nq, Nk, 32, torch.float16, device)
    check_dense(q, k, v, causal=causal, window=window, causal_alignment="bottom_right")


def test_bottom_right_rows_without_keys(device):
    # Under causal, rows i < Nq - Nk sit before key 0: output 0, lse -inf, no NaN anywhere.
    q, k, v = make_qkv(1, 2, 1, 40, 8, 16, torch.float16, device)
    out, lse = tritonkit.attention(q, k, v, causal=True, causal_alignment="bottom_right", return_lse=True)
    assert (out[:, :, :32] == 0).all() and torch.isneginf(lse[:, :, :32]).all()
    assert torch.isfinite(lse[:, :, 32:]).all()


def test_alignment_is_irrelevant_for_equal_lengths(device):
    # Nq == Nk: both alignments are one mask, and the description folds them into one kernel.
    q, k, v = make_qkv(1, 2, 2, 33, 33, 16, torch.float16, device)
    a = tritonkit.attention(q, k, v, causal=True, window=(5, 0))
    b = tritonkit.attention(q, k, v, causal=True, window=(5, 0), causal_alignment="bottom_right")
    assert torch.equal(a, b)
    assert score_of(True, 5, -1, 0.0, 33, 33, bottom_right=True, equal_lengths=True) == \
        score_of(True, 5, -1, 0.0, 33, 33)


@pytest.mark.parametrize("per_batch", [False, True], ids=["slope a head", "slope a (batch, head)"])
@pytest.mark.parametrize("causal,align,softcap", [(False, "top_left", None), (True, "bottom_right", None),
                                                  (True, "bottom_right", 20.0)])
def test_alibi(per_batch, causal, align, softcap, device):
    q, k, v = make_qkv(2, 4, 2, 27, 50, 32, torch.float16, device)
    slopes = torch.rand((2, 4) if per_batch else (4,), device=device)
    check_dense(q, k, v, causal=causal, causal_alignment=align, alibi_slopes=slopes, softcap=softcap)


@pytest.mark.parametrize("causal,window,Nq,Nk", [(False, None, 33, 33), (True, None, 33, 33),
                                                 (True, (6, 0), 40, 40), (True, None, 45, 20)])
def test_sinks(causal, window, Nq, Nk, device):
    # gpt-oss: a logit a head joins each row's denominator; GQA; rows without keys (45 > 20,
    # bottom-right) get o = 0 and lse = the sink, and their sink's gradient from dlse alone.
    q, k, v = make_qkv(2, 4, 2, Nq, Nk, 32, torch.float16, device)
    sinks = torch.randn(4, device=device)
    align = "bottom_right" if Nq != Nk else "top_left"
    out, lse = check_dense(q, k, v, sinks=sinks, causal=causal, window=window, causal_alignment=align)
    if Nq > Nk:
        torch.testing.assert_close(lse[:, :, :Nq - Nk], sinks[None, :, None].expand(2, 4, Nq - Nk))


def test_sinks_bf16_parameter_gets_its_gradient_in_its_dtype(device):
    q, k, v = make_qkv(1, 2, 1, 20, 20, 16, torch.bfloat16, device)
    sinks = torch.randn(2, device=device, dtype=torch.bfloat16, requires_grad=True)
    tritonkit.attention(q, k, v, causal=True, sinks=sinks).float().sum().backward()
    assert sinks.grad.dtype == torch.bfloat16 and torch.isfinite(sinks.grad).all()


def test_sinks_without_keys(device):
    q, k, v = make_qkv(1, 2, 2, 5, 0, 16, torch.float16, device)
    sinks = torch.randn(2, device=device, requires_grad=True)
    out, lse = tritonkit.attention(q, k, v, sinks=sinks, return_lse=True)
    assert (out == 0).all() and torch.equal(lse, sinks.detach()[None, :, None].expand(1, 2, 5))
    (g,) = torch.autograd.grad(lse.sum(), sinks)
    torch.testing.assert_close(g, torch.full_like(g, 5.0))     # d lse / d sink = 1 for each of 5 rows


def packed(lens_q, lens_k, H, Hkv, D, device):
    cq = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], dtype=torch.int32, device=device)
    ck = torch.tensor([0, *torch.tensor(lens_k).cumsum(0).tolist()], dtype=torch.int32, device=device)
    q = torch.randn(int(cq[-1]), H, D, dtype=torch.float16, device=device)
    k = torch.randn(int(ck[-1]), Hkv, D, dtype=torch.float16, device=device)
    v = torch.randn(int(ck[-1]), Hkv, D, dtype=torch.float16, device=device)
    return q, k, v, cq, ck


@pytest.mark.parametrize("kw", [
    dict(causal=True, causal_alignment="bottom_right"),
    dict(causal=True, window=(4, 0), causal_alignment="bottom_right"),
    dict(alibi_slopes="per sequence", causal=True, causal_alignment="bottom_right"),
    dict(sinks=True, causal=True),
], ids=["bottom-right", "bottom-right window", "ALiBi per sequence", "sinks"])
def test_varlen(kw, device):
    # Sequences whose query and key lengths differ both ways, one without queries, one without keys.
    q, k, v, cq, ck = packed([7, 30, 0, 12], [20, 9, 5, 0], 4, 2, 32, device)
    kw = dict(kw)
    if kw.get("alibi_slopes") == "per sequence":
        kw["alibi_slopes"] = torch.rand(4, 4, device=device)
    if kw.pop("sinks", False):
        kw["sinks"] = torch.randn(4, device=device)
    sinks = kw.pop("sinks", None)
    leaves = (q, k, v) if sinks is None else (q, k, v, sinks)

    def ours(*t):
        return tritonkit.attention_varlen(*t[:3], cq, ck, 30, 20, sinks=t[3] if len(t) > 3 else None,
                                          return_lse=True, **kw)

    def reference(*t, upcast=False):
        return attention_varlen_reference(*t[:3], cq, ck, sinks=t[3] if len(t) > 3 else None, upcast=upcast,
                                          return_lse=True, **kw)
    check_against_reference(ours, reference, leaves)


def test_compiled(device):
    # The options travel through the custom op: one graph, the same values as eager.
    q, k, v = make_qkv(1, 4, 2, 20, 35, 16, torch.float16, device)
    slopes, sinks = torch.rand(4, device=device), torch.randn(4, device=device, requires_grad=True)

    def f(q, k, v, sinks):
        return tritonkit.attention(q, k, v, causal=True, causal_alignment="bottom_right", alibi_slopes=slopes,
                                   sinks=sinks).float().square().sum()
    leaves = [t.detach().requires_grad_() for t in (q, k, v)] + [sinks]
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    got = torch.autograd.grad(compiled(*leaves), leaves)
    want = torch.autograd.grad(f(*leaves), leaves)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_description_folds():
    # Bounds that hide no key fold away, aligned as asked: bottom-right, left >= Nk - 1 sees key 0
    # from every row and right >= Nq - 1 the last key; nothing left to align drops the alignment.
    assert score_of(False, 44, -1, 0.0, 20, 45, bottom_right=True) == Score()
    assert score_of(False, 43, -1, 0.0, 20, 45, bottom_right=True).window_left == 43
    assert score_of(False, -1, 19, 0.0, 20, 45, bottom_right=True) == Score()
    assert score_of(False, -1, 18, 0.0, 20, 45, bottom_right=True).bottom_right
    assert score_of(False, -1, -1, 0.0, 20, 45, bottom_right=True, alibi=1).bottom_right


@pytest.mark.parametrize("kw,error,words", [
    (dict(causal="no"), TypeError, "causal"),
    (dict(return_lse=1), TypeError, "return_lse"),
    (dict(causal_alignment="bottom-right"), ValueError, "causal_alignment"),
    (dict(causal_alignment=True), TypeError, "causal_alignment"),
    (dict(alibi_slopes=torch.ones(3)), ValueError, "alibi_slopes"),
    (dict(alibi_slopes=[1.0] * 4), TypeError, "alibi_slopes"),
    (dict(sinks=torch.ones(2, 4)), ValueError, "sinks"),
    (dict(sinks=torch.ones(4, dtype=torch.int32)), TypeError, "sinks"),
    (dict(alibi_slopes=torch.ones(4, requires_grad=True)), ValueError, "alibi_slopes requires grad"),
])
def test_bad_input(kw, error, words, device):
    q, k, v = make_qkv(1, 4, 2, 8, 8, 16, torch.float16, device)
    kw = {key: (val.detach().to(device).requires_grad_(val.requires_grad) if isinstance(val, torch.Tensor) else val)
          for key, val in kw.items()}
    with pytest.raises(error, match=words):
        tritonkit.attention(q, k, v, **kw)


def test_kernels_with_every_option_compile_for_hopper():
    # The interpreter runs what the GPU compiler refuses (plain-float globals, nested tuple
    # targets in a kernel: both were seen): compile every pass with every score option on, as a
    # GPU launch would, for sm_90 on the CPU.
    from tritonkit._launch import record_launches
    from tritonkit.inspector.api import kernel_report
    from tritonkit.ops.attention import attention_bwd, attention_fwd

    # CPU tensors, or where a GPU is present (whose launchers refuse CPU tensors) its own:
    # recorded, not run, either way.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    q, k, v = make_qkv(2, 4, 2, 40, 64, 64, torch.float16, device)
    options = dict(bottom_right=True, alibi_slopes=torch.rand(2, 4, device=device),
                   sinks=torch.randn(4, device=device))
    with record_launches(execute=False, capability=90) as launches:
        o, lse = attention_fwd(q, k, v, True, None, 16, -1, 30.0, **options)
        attention_bwd(torch.randn_like(q), q, k, v, torch.randn_like(q), torch.randn(2, 4, 40, device=device), True,
                      None, 16, -1,
                      30.0, None, **options)
    compiled = {launch.name: kernel_report(launch, 90) for launch in launches}
    assert set(compiled) >= {"attention_fwd", "attention_bwd_dkdv", "attention_bwd_dq"}, set(compiled)
    for name, report in compiled.items():
        assert "alibi=2" in report.constexprs.get("SCORE", "alibi=2"), name
