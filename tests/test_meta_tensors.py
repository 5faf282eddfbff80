"""Every op on meta tensors, as torch's own ops take them (shape inference, a model built on
the meta device, memory planning): outputs and gradients with the shapes, dtypes and layouts
the same call gives on real tensors, and no kernel launched."""

import pytest
import torch

import tritonkit
from tritonkit import registry
from tritonkit._launch import record_launches

BF16 = torch.bfloat16


def _cases():
    cu = torch.tensor([0, 3, 3, 9], dtype=torch.int32)
    target = torch.tensor([1, 4, -100, 0, 9, 2])
    return {
        "rms_norm": (lambda x, w, r: tritonkit.rms_norm(x, w, residual=r), ((6, 16), (16,), (6, 16))),
        "layer_norm": (lambda x, w, b: tritonkit.layer_norm(x, w, b), ((2, 3, 16), (16,), (16,))),
        "rope": (lambda q, k, c, s: tritonkit.rope(q, k, c.detach(), s.detach()),
                 ((1, 4, 5, 16), (1, 2, 5, 16), (5, 8), (5, 8))),
        "swiglu": (lambda g, u: tritonkit.swiglu(g, u), ((6, 24), (6, 24))),
        "geglu packed": (lambda g: tritonkit.geglu(g), ((6, 48),)),
        "softmax": (lambda x: tritonkit.softmax(x), ((6, 24),)),
        "add": (lambda x, y: tritonkit.add(x, y), ((6, 24), (24,))),
        "attention": (lambda q, k, v: tritonkit.attention(q, k, v, causal=True, return_lse=True),
                      ((2, 4, 9, 16), (2, 2, 9, 16), (2, 2, 9, 16))),
        "attention_varlen": (lambda q, k, v: tritonkit.attention_varlen(q, k, v, cu.to(q.device), cu.to(q.device),
                                                                        6, 6, causal=True),
                             ((9, 4, 16), (9, 2, 16), (9, 2, 16))),
        "linear_cross_entropy": (lambda h, w: tritonkit.linear_cross_entropy(h, w, target.to(h.device)),
                                 ((6, 16), (10, 16))),
        "cross_entropy": (lambda z: tritonkit.cross_entropy(z, target.to(z.device), reduction="none"), ((6, 10),)),
        "gated_linear": (lambda g, u, w: tritonkit.gated_linear(g, u, w), ((6, 24), (6, 24), (8, 24))),
    }


def _flat(out):
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("name", list(_cases()))
def test_meta_tensors_follow_the_real_call(name, device):
    fn, shapes = _cases()[name]
    torch.manual_seed(0)
    real = [torch.randn(*s, dtype=BF16, device=device).requires_grad_() for s in shapes]
    meta = [torch.empty(*s, dtype=BF16, device="meta").requires_grad_() for s in shapes]
    want = _flat(fn(*real))
    with record_launches(execute=False) as launches:
        got = _flat(fn(*meta))
    assert not launches, launches
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.is_meta and (g.shape, g.dtype, g.stride()) == (w.shape, w.dtype, w.stride()), (g, w)
    upstream = [torch.ones_like(w) for w in want if w.requires_grad]
    want_grads = torch.autograd.grad([w for w in want if w.requires_grad], real, upstream, allow_unused=True)
    got_grads = torch.autograd.grad([g for g in got if g.requires_grad], meta,
                                    [torch.ones_like(g) for g in got if g.requires_grad], allow_unused=True)
    for g, w in zip(got_grads, want_grads):
        assert (g is None) == (w is None)
        assert g is None or (g.is_meta and (g.shape, g.dtype) == (w.shape, w.dtype))


def _to_meta(a):
    if not isinstance(a, torch.Tensor):
        return a
    # The same sizes, strides and offset in a meta buffer as large as the real one.
    base = torch.empty(a.untyped_storage().nbytes() // a.element_size(), dtype=a.dtype, device="meta")
    return base.as_strided(a.shape, a.stride(), a.storage_offset()).requires_grad_(a.requires_grad)


@pytest.mark.parametrize("name", [n for n, e in registry.entries().items() if e.sample is not None])
def test_fakes_give_the_real_layouts(name, device):
    # Each op's registry sample (an awkward layout: views at odd offsets, transposed, packed
    # projections) on meta tensors: the fake's outputs have the real call's strides, which a
    # compiled graph relies on (a compiled graph that assumed other strides would read the
    # outputs wrongly).
    from tritonkit._op import DECLARED
    op = DECLARED[registry.get(name).op]
    args = registry.get(name).sample(device)
    want = _flat(op(*args))
    got = _flat(op(*(_to_meta(a) for a in args)))
    for g, w in zip(got, want):
        assert g.is_meta and (g.shape, g.dtype, g.stride()) == (w.shape, w.dtype, w.stride()), (name, g, w)


@pytest.mark.parametrize("layout", ["bhnd", "bnhd", "packed qkv", "one row", "one head"])
def test_attention_fake_follows_q_memory_order(layout, device):
    B, H, N, D = 2, 4, 7, 16
    if layout == "bhnd":
        q = k = v = torch.randn(B, H, N, D, dtype=BF16, device=device)
    elif layout == "packed qkv":
        q, k, v = torch.randn(B, N, 3, H, D, dtype=BF16, device=device).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    else:
        n, h = (1, H) if layout == "one row" else (N, 1) if layout == "one head" else (N, H)
        q = k = v = torch.randn(B, n, h, D, dtype=BF16, device=device).transpose(1, 2)
    for causal in (False, True):
        want = tritonkit.attention(q, k, v, causal=causal, return_lse=True)
        got = tritonkit.attention(*(_to_meta(t) for t in (q, k, v)), causal=causal, return_lse=True)
        for g, w in zip(got, want):
            assert (g.shape, g.stride()) == (w.shape, w.stride()), (layout, g.stride(), w.stride())


def test_launchers_refuse_meta_tensors():
    # The public op maps meta tensors to shapes; a launcher called directly has nothing to launch on.
    from tritonkit.ops.attention import attention_fwd
    from tritonkit.ops.norms.rms_norm import rms_norm_fwd
    q = torch.empty(1, 2, 8, 16, dtype=BF16, device="meta")
    with pytest.raises(ValueError, match="meta device"):
        attention_fwd(q, q, q)
    with pytest.raises(ValueError, match="meta device"):
        rms_norm_fwd(torch.empty(4, 8, dtype=BF16, device="meta"), None, None, 1e-6, 0.0)


@pytest.mark.parametrize("name", ["add", "rms_norm", "attention", "cross_entropy", "linear_cross_entropy"])
def test_one_meta_tensor_among_real_ones_is_refused(name, device):
    # Meta tensors take the fakes' road, which computes no data: with real tensors beside them
    # the devices differ, and the error names the argument (torch's own ops refuse the mix too).
    real = lambda *s: torch.randn(*s, dtype=BF16, device=device)  # noqa: E731
    meta = lambda *s, dtype=BF16: torch.empty(*s, dtype=dtype, device="meta")  # noqa: E731
    call, arg = {
        "add": (lambda: tritonkit.add(real(4), meta(4)), "y"),
        "rms_norm": (lambda: tritonkit.rms_norm(real(4, 8), meta(8)), "weight"),
        "attention": (lambda: tritonkit.attention(real(1, 2, 4, 16), real(1, 2, 4, 16), meta(1, 2, 4, 16)), "v"),
        "cross_entropy": (lambda: tritonkit.cross_entropy(real(4, 10), meta(4, dtype=torch.long)), "target"),
        "linear_cross_entropy": (lambda: tritonkit.linear_cross_entropy(real(4, 8), meta(10, 8),
                                                                        torch.zeros(4, dtype=torch.long, device=device)),
                                 "weight"),
    }[name]
    with pytest.raises(ValueError, match=f"{arg} is on meta"):
        call()
