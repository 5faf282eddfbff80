"""tritonkit.flash_attn, FlashAttention-2's interface: each function's output, softmax_lse and
gradients against float64 references in FlashAttention-2's layouts and conventions, with torch's
error in the same dtype as the yardstick; its masks against masks written out by hand from
FlashAttention-2's documented examples and window rules; packed qkv/kv as views at odd offsets;
what raises; bert_padding; torch.compile. FlashAttention-2's own test file runs through
tests/fa2/run.py."""

import pytest
import torch

from tritonkit.flash_attn import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                                  flash_attn_reference, flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                                  flash_attn_varlen_qkvpacked_func, flash_attn_varlen_reference,
                                  flash_attn_with_kvcache)
from tritonkit.flash_attn.arguments import fa2_window
from tritonkit.flash_attn.bert_padding import index_first_axis, pad_input, unpad_input
from _tolerance import assert_close_to_reference, eps_for

INF = float("inf")


def randn(*shape, dtype=torch.float16, device="cpu", offset=0):
    """A fresh random tensor; with offset, a view starting `offset` elements into its storage."""
    flat = torch.randn(offset + torch.Size(shape).numel(), dtype=dtype, device=device)
    return flat[offset:].view(shape)


def grads(fn, leaves, upstream):
    leaves = [t.detach().requires_grad_() for t in leaves]
    return torch.autograd.grad(fn(*leaves), leaves, upstream)


def check(ours, reference, leaves, what=""):
    """ours(*leaves) -> (out, lse); reference(*leaves, upcast) -> (out, lse). Output and lse
    against float64, then the gradients of both (a random upstream for each) against float64,
    each within twice torch's own error in the inputs' dtype."""
    dtype = leaves[0].dtype
    out, lse = ours(*leaves)
    ref, ref_lse = reference(*leaves, True)
    same, same_lse = reference(*leaves, False)
    assert out.dtype == dtype and lse.dtype == torch.float32
    assert_close_to_reference(out, ref, same, what=f"{what} out")
    assert_close_to_reference(lse, ref_lse, same_lse.float(), what=f"{what} lse")
    # Rows that see no key: output 0, lse +inf, zero gradients.
    upstream = (torch.randn_like(out), torch.randn_like(lse).nan_to_num(posinf=0.0))
    mine = grads(lambda *t: ours(*t), leaves, upstream)
    wide = grads(lambda *t: reference(*t, False), [t.double() for t in leaves], [u.double() for u in upstream])
    theirs = grads(lambda *t: reference(*t, False), leaves, (upstream[0], upstream[1].to(dtype)))
    for i, (a, w, t) in enumerate(zip(mine, wide, theirs)):
        assert a.shape == leaves[i].shape and not a.isnan().any(), f"{what} grad {i}"
        assert_close_to_reference(a, w, t, eps=eps_for(dtype, gradient=True), what=f"{what} grad {i}")
    return out, lse


def dense_check(q, k, v, **options):
    def ours(q, k, v):
        out, lse, s = flash_attn_func(q, k, v, 0.0, return_attn_probs=True, **options)
        assert s.numel() == 0 and s.dtype == q.dtype
        return out, lse

    def reference(q, k, v, upcast):
        return flash_attn_reference(q, k, v, upcast=upcast, **options)
    return check(ours, reference, (q, k, v), str(options))


# (batch, seqlen_q, seqlen_k, nheads, nheads_k, headdim), options, why
DENSE = [
    pytest.param((2, 5, 19, 4, 2, 32), dict(causal=True), id="fewer queries than keys, causal: bottom-right, GQA"),
    pytest.param((2, 23, 7, 4, 4, 40), dict(causal=True), id="more queries than keys: rows 0-15 see no key"),
    pytest.param((1, 17, 26, 3, 1, 59), dict(window_size=(3, 2)), id="a window both sides, MQA, an odd head dim"),
    pytest.param((2, 30, 9, 2, 1, 16), dict(window_size=(2, -1)),
                 id="left window, right unbounded, Nq > 2 Nk: FA2's right = Nk"),
    pytest.param((1, 12, 12, 2, 2, 64), dict(causal=True, window_size=(4, 7)), id="sliding window, right under causal"),
    pytest.param((2, 9, 33, 2, 2, 32), dict(softcap=5.0, softmax_scale=0.3), id="softcap and a scale of its own"),
    pytest.param((1, 16, 16, 4, 2, 32), dict(softcap=-1.0), id="softcap <= 0 is off, as in FA2"),
]


@pytest.mark.parametrize("shape,options", DENSE)
def test_flash_attn_func(shape, options, device):
    B, Nq, Nk, H, Hkv, D = shape
    dense_check(randn(B, Nq, H, D, device=device), randn(B, Nk, Hkv, D, device=device),
                randn(B, Nk, Hkv, D, device=device), **options)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("per_batch", [False, True], ids=["slopes (H,)", "slopes (B, H)"])
def test_alibi(causal, per_batch, device):
    B, H = 2, 4
    slopes = torch.rand((B, H) if per_batch else (H,), device=device) * 0.3
    dense_check(randn(B, 13, H, 32, device=device), randn(B, 21, 2, 32, device=device),
                randn(B, 21, 2, 32, device=device), causal=causal, alibi_slopes=slopes)


def test_bf16_softcap_window_tensor(device):
    # FA2's own tests pass the window as a tensor and scale q into the softcap's range.
    q = randn(2, 20, 4, 64, dtype=torch.bfloat16, device=device) * 5
    k, v = (randn(2, 27, 2, 64, dtype=torch.bfloat16, device=device) for _ in range(2))
    dense_check(q, k, v, causal=True, window_size=torch.tensor([6, 3]), softcap=5.0)


def explicit(q, k, v, seen):
    """float64 attention of q (B, Nq, H, D) over k, v (B, Nk, H, D) where seen (Nq, Nk) says
    which keys each query sees; lse +inf and output 0 on rows that see none."""
    s = torch.einsum("bihd,bjhd->bhij", q.double(), k.double()) / q.shape[-1] ** 0.5
    s = s.masked_fill(~seen, -INF)
    lse = s.logsumexp(-1)
    p = torch.exp(s - lse.clamp_min(-1e300)[..., None])
    return torch.einsum("bhij,bjhd->bihd", p, v.double()), lse.masked_fill(lse == -INF, INF)


# seqlen_q, seqlen_k, options, the keys each query sees: FA2's docstring examples and its rules
MASKS = {
    "causal 2 x 5 (FA2's docstring)": (2, 5, dict(causal=True), [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]),
    "causal 5 x 2 (FA2's docstring)": (5, 2, dict(causal=True), [[0, 0], [0, 0], [0, 0], [1, 0], [1, 1]]),
    "window (1, 0) 3 x 4": (3, 4, dict(window_size=(1, 0)), [[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]),
    # left 0 >= 0 and right -1: FA2 makes right = Nk = 2; query i sits at i - 4 and sees keys
    # i - 4 to i - 2 (unbounded on the right, rows 0 and 1 would see both keys).
    "window (0, -1) 6 x 2": (6, 2, dict(window_size=(0, -1)),
                             [[0, 0], [0, 0], [1, 0], [1, 1], [1, 1], [0, 1]]),
    # a side >= Nk is unbounded, whatever the other.
    "window (-1, 2) 3 x 2": (3, 2, dict(window_size=(-1, 2)), [[1, 1], [1, 1], [1, 1]]),
}


@pytest.mark.parametrize("case", MASKS.values(), ids=MASKS.keys())
def test_masks_written_out(case, device):
    Nq, Nk, options, seen = case
    q, k, v = randn(1, Nq, 2, 16, device=device), randn(1, Nk, 2, 16, device=device), randn(1, Nk, 2, 16, device=device)
    out, lse, _ = flash_attn_func(q, k, v, causal=options.get("causal", False),
                                  window_size=options.get("window_size", (-1, -1)), return_attn_probs=True)
    ref, ref_lse = explicit(q, k, v, torch.tensor(seen, dtype=torch.bool, device=device))
    assert torch.equal(lse.isinf(), ref_lse.isinf())
    assert (lse[lse.isinf()] > 0).all()
    torch.testing.assert_close(out.double(), ref, atol=2e-3, rtol=0)
    torch.testing.assert_close(lse.double(), ref_lse, atol=1e-3, rtol=0)


def test_fa2_window_rules():
    assert fa2_window((-1, -1), False, 10) == (-1, -1)
    assert fa2_window((-1, -1), True, 10) == (-1, 0)
    assert fa2_window((3, 4), True, 10) == (3, 0)
    assert fa2_window((10, 4), False, 10) == (-1, 4)            # a side >= Nk: unbounded
    assert fa2_window((3, -1), False, 10) == (3, 10)            # left bounded: right = Nk
    assert fa2_window((3, 12), False, 10) == (3, 10)
    assert fa2_window((-5, 2), False, 10) == (-1, 2)            # any negative: unbounded
    assert fa2_window(torch.tensor([2, 5]), False, torch.tensor(10)) == (2, 5)
    with pytest.raises(TypeError, match="window_size"):
        fa2_window(3, False, 10)
    with pytest.raises(TypeError, match="window_size"):
        fa2_window((1.5, 2), False, 10)


def test_kvpacked_and_qkvpacked_views(device):
    """Packed projections read in place at an odd element offset; the packed gradient is one
    tensor, equal to the unpacked function's gradients stacked."""
    B, N, Nk, H, Hkv, D = 2, 11, 14, 4, 2, 32
    q = randn(B, N, H, D, device=device, offset=3)
    kv = randn(B, Nk, 2, Hkv, D, device=device, offset=5)
    qkv = randn(B, N, 3, H, D, device=device, offset=7)

    def kv_ref(q, kv, upcast):
        return flash_attn_reference(q, kv[:, :, 0], kv[:, :, 1], causal=True, upcast=upcast)

    def qkv_ref(qkv, upcast):
        return flash_attn_reference(*qkv.unbind(2), window_size=(2, 3), upcast=upcast)

    check(lambda q, kv: flash_attn_kvpacked_func(q, kv, causal=True, return_attn_probs=True)[:2], kv_ref, (q, kv),
          "kvpacked")
    check(lambda qkv: flash_attn_qkvpacked_func(qkv, window_size=(2, 3), return_attn_probs=True)[:2], qkv_ref,
          (qkv,), "qkvpacked")
    out = flash_attn_qkvpacked_func(qkv)
    assert out.shape == (B, N, H, D) and out.is_contiguous()  # FA2's layout, in its memory order
    torch.testing.assert_close(out, flash_attn_func(*qkv.unbind(2)), atol=0, rtol=0)


def cu(lengths, device):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)


# query lengths, key lengths, options, why
VARLEN = [
    pytest.param((3, 0, 17, 1), (9, 4, 6, 1), dict(causal=True),
                 id="uneven, an empty query sequence, Nq > Nk: rows without keys"),
    pytest.param((5, 8, 2), (0, 13, 2), dict(), id="an empty key sequence: output 0, lse +inf"),
    pytest.param((12, 7), (12, 20), dict(window_size=(2, 1), softcap=4.0), id="window and softcap per sequence"),
    pytest.param((9, 4, 10), (9, 11, 3), dict(causal=True, alibi_slopes="per sequence"),
                 id="ALiBi (batch, H), bottom-right"),
]


@pytest.mark.parametrize("lens_q,lens_k,options", VARLEN)
def test_flash_attn_varlen_func(lens_q, lens_k, options, device):
    H, Hkv, D = 4, 2, 32
    options = dict(options)
    if options.get("alibi_slopes") == "per sequence":
        options["alibi_slopes"] = torch.rand(len(lens_q), H, device=device) * 0.3
    cq, ck = cu(lens_q, device), cu(lens_k, device)
    mq, mk = max(lens_q), max(lens_k)

    def ours(q, k, v):
        out, lse, s = flash_attn_varlen_func(q, k, v, cq, ck, mq, mk, 0.0, return_attn_probs=True, **options)
        assert s.numel() == 0
        return out, lse

    def reference(q, k, v, upcast):
        return flash_attn_varlen_reference(q, k, v, cq, ck, mk, upcast=upcast, **options)
    q = randn(sum(lens_q), H, D, device=device)
    k, v = randn(sum(lens_k), Hkv, D, device=device), randn(sum(lens_k), Hkv, D, device=device)
    out, lse = check(ours, reference, (q, k, v), f"{lens_q} {lens_k}")
    assert out.shape == q.shape and lse.shape == (H, sum(lens_q))


def test_varlen_packed_views(device):
    lens = (6, 1, 9)
    c, m, H, D = cu(lens, device), max(lens), 2, 16
    q = randn(sum(lens), H, D, device=device, offset=1)
    kv = randn(sum(lens), 2, H, D, device=device, offset=3)
    qkv = randn(sum(lens), 3, H, D, device=device, offset=5)

    def kv_ref(q, kv, upcast):
        return flash_attn_varlen_reference(q, *kv.unbind(1), c, c, m, causal=True, upcast=upcast)

    def qkv_ref(qkv, upcast):
        return flash_attn_varlen_reference(*qkv.unbind(1), c, c, m, causal=True, upcast=upcast)

    check(lambda q, kv: flash_attn_varlen_kvpacked_func(q, kv, c, c, m, m, causal=True, return_attn_probs=True)[:2],
          kv_ref, (q, kv), "varlen kvpacked")
    check(lambda qkv: flash_attn_varlen_qkvpacked_func(qkv, c, m, causal=True, return_attn_probs=True)[:2],
          qkv_ref, (qkv,), "varlen qkvpacked")


def test_return_layouts(device):
    q, k, v = randn(2, 7, 4, 16, device=device), randn(2, 9, 2, 16, device=device), randn(2, 9, 2, 16, device=device)
    out = flash_attn_func(q, k, v)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 7, 4, 16)
    out, lse, s = flash_attn_func(q, k, v, return_attn_probs=True)
    assert lse.shape == (2, 4, 7) and lse.dtype == torch.float32 and s.shape == (0,) and s.dtype == q.dtype
    c = cu((7, 7), device)
    out, lse, s = flash_attn_varlen_func(q.flatten(0, 1), q.flatten(0, 1), q.flatten(0, 1), c, c, 7, 7,
                                         return_attn_probs=True)
    assert out.shape == (14, 4, 16) and lse.shape == (4, 14) and s.shape == (0,)


def test_what_raises(device):
    q = randn(1, 4, 2, 16, device=device)
    c = cu((4,), device)
    with pytest.raises(NotImplementedError, match="dropout_p"):
        flash_attn_func(q, q, q, 0.1)
    with pytest.raises(NotImplementedError, match="dropout_p"):
        flash_attn_varlen_qkvpacked_func(torch.stack([q[0]] * 3, 1), c, 4, 0.17)
    with pytest.raises(NotImplementedError, match="block_table"):
        flash_attn_varlen_func(q[0], q[0], q[0], c, c, 4, 4, block_table=torch.zeros(1, 1, dtype=torch.int32))
    with pytest.raises(NotImplementedError, match="flash_attn_with_kvcache"):
        flash_attn_with_kvcache(q, q, q)
    with pytest.raises(TypeError, match="causal"):
        flash_attn_func(q, q, q, causal="yes")
    with pytest.raises(TypeError, match="deterministic"):
        flash_attn_func(q, q, q, deterministic=1)
    with pytest.raises(TypeError, match="window_size"):
        flash_attn_func(q, q, q, window_size=4)
    with pytest.raises(TypeError, match="softcap"):
        flash_attn_func(q, q, q, softcap="50")
    with pytest.raises(ValueError, match="q must be 4-d"):
        flash_attn_func(q[0], q, q)
    with pytest.raises(ValueError, match="qkv must have 3 at dim 2"):
        flash_attn_qkvpacked_func(randn(1, 4, 2, 2, 16, device=device))
    with pytest.raises(ValueError, match="kv must be 4-d"):
        flash_attn_varlen_kvpacked_func(q[0], q[0], c, c, 4, 4)


def test_compiled_fullgraph(device):
    q, k, v = randn(1, 9, 4, 32, device=device), randn(1, 13, 2, 32, device=device), randn(1, 13, 2, 32, device=device)
    upstream = torch.randn(1, 9, 4, 32, dtype=q.dtype, device=device)

    def fn(q, k, v):
        return flash_attn_func(q, k, v, 0.0, causal=True, window_size=(5, 0), softcap=8.0)
    eager = grads(fn, (q, k, v), upstream)
    compiled = grads(torch.compile(fn, fullgraph=True), (q, k, v), upstream)
    for a, b in zip(eager, compiled):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    torch.testing.assert_close(torch.compile(fn, fullgraph=True)(q, k, v), fn(q, k, v), atol=0, rtol=0)


def test_bert_padding(device):
    B, N = 3, 6
    x = torch.randn(B, N, 2, 5, device=device, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]], device=device)
    unused = torch.tensor([[0, 0, 0, 1, 0, 0], [0] * 6, [1, 0, 0, 0, 0, 0]], device=device)
    rows, indices, cu_seqlens, max_seqlen, seqused = unpad_input(x, mask, unused)
    assert indices.tolist() == [0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12]
    assert cu_seqlens.dtype == torch.int32 and cu_seqlens.tolist() == [0, 4, 10, 11]
    assert max_seqlen == 6 and isinstance(max_seqlen, int)
    assert seqused.dtype == torch.int32 and seqused.tolist() == [3, 6, 0]
    torch.testing.assert_close(rows, x.flatten(0, 1)[indices])
    torch.testing.assert_close(index_first_axis(x.flatten(0, 1), indices), rows)
    back = pad_input(rows, indices, B, N)
    kept = (mask + unused).bool()[..., None, None]
    torch.testing.assert_close(back, x * kept)
    upstream = torch.randn_like(back)
    (dx,) = torch.autograd.grad(back, x, upstream)
    torch.testing.assert_close(dx, upstream * kept)
