"""tritonkit.attention_varlen: packed variable-length sequences against float64 references
of each sequence on its own (the dense formula with an explicit mask), with torch's error in
the same dtype as the yardstick; forward, lse, gradients of both; both load paths; sequences
of 1, 2 and prime lengths, one long among many short, empty ones, GQA, Nq != Nk per sequence;
no recompilation across batches under torch.compile; bad input."""

import pytest
import torch

import tritonkit
from tritonkit.ops.attention import attention_varlen_bwd, attention_varlen_fwd, attention_varlen_reference
from _tolerance import assert_close_to_reference, eps_for
from conftest import ON_GPU

# (query lengths, key lengths or None for the same): why
LENGTHS = {
    ((1,), None): "one sequence of one token",
    ((2, 1), None): "lengths 2 and 1",
    ((3, 5, 7, 11, 13), None): "primes: every sequence ragged against the blocks",
    ((61, 1, 2, 1, 3, 1, 2), None): "one long among many short",
    ((0, 5, 0, 0, 7, 0), None): "empty sequences, first and last too",
    ((7, 33, 2), (9, 3, 0)): "queries and keys of different lengths; an empty key sequence",
}
if ON_GPU:
    LENGTHS.update({
        ((1000, 3, 517, 2048, 64), None): "longer sequences",
    })
LENGTH_PARAMS = [pytest.param(*case, id=why) for case, why in LENGTHS.items()]


def cu(lengths, device):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)


def packed(lens_q, lens_k, H, Hkv, D, dtype, device):
    lens_k = lens_q if lens_k is None else lens_k
    q = torch.randn(sum(lens_q), H, D, dtype=dtype, device=device)
    k = torch.randn(sum(lens_k), Hkv, D, dtype=dtype, device=device)
    v = torch.randn(sum(lens_k), Hkv, D, dtype=dtype, device=device)
    return q, k, v, cu(lens_q, device), cu(lens_k, device), max(lens_q, default=0), max(lens_k, default=0)


def grads(fn, leaves, upstream):
    leaves = [t.detach().requires_grad_() for t in leaves]
    return torch.autograd.grad(fn(*leaves), leaves, upstream)


def check(q, k, v, cq, ck, mq, mk, causal=False, window=None, softcap=None):
    kw = dict(causal=causal, window=window, softcap=softcap)
    out, lse = tritonkit.attention_varlen(q, k, v, cq, ck, mq, mk, return_lse=True, **kw)
    ref, ref_lse = attention_varlen_reference(q, k, v, cq, ck, return_lse=True, **kw)
    same, same_lse = attention_varlen_reference(q, k, v, cq, ck, upcast=False, return_lse=True, **kw)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (q.shape[1], q.shape[0])
    assert_close_to_reference(out, ref, same)
    assert_close_to_reference(lse, ref_lse, same_lse.float(), what="lse")
    upstream = (torch.randn_like(q), torch.randn_like(lse))
    ours = grads(lambda *t: tritonkit.attention_varlen(*t, cq, ck, mq, mk, return_lse=True, **kw), (q, k, v),
                 upstream)
    wide = grads(lambda *t: attention_varlen_reference(*t, cq, ck, upcast=False, return_lse=True, **kw),
                 [t.double() for t in (q, k, v)], [u.double() for u in upstream])
    theirs = grads(lambda *t: attention_varlen_reference(*t, cq, ck, upcast=False, return_lse=True, **kw),
                   (q, k, v), (upstream[0], upstream[1].to(q.dtype)))
    for name, a, w, t in zip(("dq", "dk", "dv"), ours, wide, theirs):
        assert a.shape == w.shape and not a.isnan().any(), name
        assert_close_to_reference(a, w, t, eps=eps_for(q.dtype, gradient=True), what=name)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lens_q,lens_k", LENGTH_PARAMS)
def test_varlen(lens_q, lens_k, causal, device):
    check(*packed(lens_q, lens_k, 4, 2, 32, torch.float16, device), causal=causal)


def test_varlen_bf16_window_softcap(device):
    args = packed((17, 40, 2, 29), None, 4, 1, 64, torch.bfloat16, device)
    check(*args, causal=True, window=(6, 0), softcap=5.0)
    check(*args, window=(3, 9))


@pytest.mark.parametrize("tma", [True, False], ids=["descriptors", "pointers"])
def test_varlen_paths(tma, device):
    # Both load paths agree with each other (TMA tiles reach into the next sequence; the masks
    # must hide it) and with the reference.
    q, k, v, cq, ck, _, _ = packed((5, 40, 1, 0, 23), None, 2, 1, 48, torch.float16, device)
    out, lse = attention_varlen_fwd(q, k, v, cq, ck, True, tma=tma)
    ref = attention_varlen_reference(q, k, v, cq, ck, True)
    assert_close_to_reference(out, ref, attention_varlen_reference(q, k, v, cq, ck, True, upcast=False))
    do = torch.randn_like(q)
    got = attention_varlen_bwd(do, q, k, v, out, lse, cq, ck, True, tma=tma)
    want = attention_varlen_bwd(do, q, k, v, out, lse, cq, ck, True, tma=not tma)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=2e-3, rtol=2e-3)


def test_strided_packed_qkv(device):
    # q, k, v: views into one (T, 3, H, D) projection, one element into its buffer.
    lens = (9, 30, 4)
    T, H, D = sum(lens), 2, 32
    qkv = torch.randn(T * 3 * H * D + 1, dtype=torch.float16, device=device)[1:].view(T, 3, H, D)
    c = cu(lens, device)
    check(qkv[:, 0], qkv[:, 1], qkv[:, 2], c, c, max(lens), max(lens), causal=True)


def test_empty_key_sequence_rows(device):
    # Sequence 1 has 4 queries and no keys: o = 0, lse = -inf, zero gradients, no NaN.
    q, k, v, cq, ck, mq, mk = packed((3, 4, 5), (6, 0, 2), 2, 2, 16, torch.float16, device)
    out, lse = tritonkit.attention_varlen(q, k, v, cq, ck, mq, mk, return_lse=True)
    assert torch.equal(out[3:7], torch.zeros_like(out[3:7])) and torch.isneginf(lse[:, 3:7]).all()
    dq, dk, dv = grads(lambda *t: tritonkit.attention_varlen(*t, cq, ck, mq, mk, return_lse=True), (q, k, v),
                       (torch.randn_like(q), torch.randn_like(lse)))
    assert not any(t.isnan().any() for t in (dq, dk, dv)) and torch.equal(dq[3:7], torch.zeros_like(dq[3:7]))


def test_varlen_is_deterministic(device):
    q, k, v, cq, ck, mq, mk = packed((20, 45, 3), None, 4, 2, 32, torch.bfloat16, device)
    upstream = torch.randn_like(q)
    f = lambda *t: tritonkit.attention_varlen(*t, cq, ck, mq, mk, causal=True)  # noqa: E731
    first = grads(f, (q, k, v), upstream)
    assert all(torch.equal(a, b) for a, b in zip(first, grads(f, (q, k, v), upstream)))


def test_new_lengths_do_not_recompile(device):
    # Packed rows of one total length and sequence count, new lengths every batch, max_seqlen
    # as 0-d tensors (Python ints: torch.compile specializes on the first value, then
    # recompiles once; with dynamic=True it never does).
    from torch._dynamo.testing import CompileCounterWithBackend
    backend = "inductor" if ON_GPU else "aot_eager"
    for dynamic, as_tensor in ((None, True), (True, False)):
        counter = CompileCounterWithBackend(backend)

        @torch.compile(fullgraph=True, backend=counter, dynamic=dynamic)
        def step(q, k, v, cq, ck, mq, mk):
            out = tritonkit.attention_varlen(q, k, v, cq, ck, mq, mk, causal=True)
            return out.float().square().sum()

        for lens in ((5, 7, 4), (3, 10, 3), (1, 1, 14), (8, 0, 8)):
            q, k, v, cq, ck, mq, mk = packed(lens, None, 2, 1, 16, torch.float16, device)
            if as_tensor:
                mq, mk = torch.tensor(mq), torch.tensor(mk)
            leaves = [t.requires_grad_() for t in (q, k, v)]
            loss = step(*leaves, cq, ck, mq, mk)
            torch.autograd.grad(loss, leaves)
            want = tritonkit.attention_varlen(q, k, v, cq, ck, mq, mk, causal=True).float().square().sum()
            torch.testing.assert_close(loss, want)
        assert counter.frame_count == 1, (dynamic, as_tensor, counter.frame_count)


@pytest.mark.parametrize("change, error, words", [
    (lambda a: {**a, "cq": a["cq"].long()}, TypeError, "cu_seqlens_q"),
    (lambda a: {**a, "ck": a["ck"].float()}, TypeError, "cu_seqlens_k"),
    (lambda a: {**a, "cq": a["cq"].flip(0)}, ValueError, "cu_seqlens_q"),
    (lambda a: {**a, "cq": torch.tensor([0, 9, 5, 16], dtype=torch.int32)}, ValueError, "cu_seqlens_q"),
    (lambda a: {**a, "ck": torch.tensor([0, 5, 15], dtype=torch.int32)}, ValueError, "cu_seqlens_k"),
    (lambda a: {**a, "ck": torch.tensor([0, 5, 9, 17], dtype=torch.int32)}, ValueError, "cu_seqlens_k"),
    (lambda a: {**a, "cq": a["cq"][None]}, ValueError, "cu_seqlens_q"),
    (lambda a: {**a, "mq": 3.5}, TypeError, "max_seqlen_q"),
    (lambda a: {**a, "mk": -1}, ValueError, "max_seqlen_k"),
    (lambda a: {**a, "q": a["q"][None]}, ValueError, "q"),
    (lambda a: {**a, "window": (-3, 0)}, ValueError, "window"),
])
def test_bad_input_names_the_argument(change, error, words):
    # On the CPU, where the values of cu_seqlens are checked (see attention_varlen).
    q, k, v, cq, ck, mq, mk = packed((5, 4, 7), None, 2, 2, 16, torch.float16, torch.device("cpu"))
    if not tritonkit.INTERPRETED:
        pytest.skip("CPU tensors reach the kernels only under the interpreter")
    a = change(dict(q=q, k=k, v=v, cq=cq, ck=ck, mq=mq, mk=mk, window=None))
    with pytest.raises(error, match=words):
        tritonkit.attention_varlen(a["q"], a["k"], a["v"], a["cq"], a["ck"], a["mq"], a["mk"], window=a["window"])


def test_custom_op_registrations(device):
    q, k, v, cq, ck, _, _ = packed((5, 0, 11), None, 2, 1, 16, torch.float16, device)
    leaves = [t.requires_grad_() for t in (q, k, v)]
    torch.library.opcheck(torch.ops.tritonkit.attention_varlen_fwd.default, (*leaves, cq, ck, True, 0.25, 3, -1, 0.0))
