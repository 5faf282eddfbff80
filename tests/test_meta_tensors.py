"""Every op on meta tensors, as torch's own ops take them (shape inference, a model built on
the meta device, memory planning): outputs and gradients with the shapes, dtypes and layouts
the same call gives on real tensors, and no kernel launched."""

import pytest
import torch

import tritonkit
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
def test_meta_tensors_follow_the_real_call(name):
    fn, shapes = _cases()[name]
    torch.manual_seed(0)
    real = [torch.randn(*s, dtype=BF16).requires_grad_() for s in shapes]
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
