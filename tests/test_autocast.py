"""The matrix-product ops inside torch.autocast: float32 inputs are cast to the region's dtype
first, as torch's SDPA and F.linear cast theirs, and the gradients come back in float32.

Each op is compared with torch's own op under the same autocast region (the yardstick) and with
the float64 reference of the cast inputs (what autocast means), forward and every gradient.
"""

import pytest
import torch
import torch.nn.functional as F

import tritonkit
from tritonkit.ops.attention import attention_reference, attention_varlen_reference
from tritonkit.ops.gated_linear import gated_linear_reference
from _tolerance import assert_close_to_reference, eps_for

BF16 = torch.bfloat16


def _leaves(*shapes, device, scale=1.0):
    return [(scale * torch.randn(*s, device=device)).requires_grad_() for s in shapes]


def _cast64(tensors):
    """The inputs as autocast hands them to the op, in float64, as leaves of the reference."""
    return [t.detach().to(BF16).double().requires_grad_() for t in tensors]


def _check(ours_fn, torch_fn, ref_fn, inputs, device):
    with torch.autocast(device.type, dtype=BF16):
        out = ours_fn(*inputs)
        theirs = torch_fn(*inputs)
    assert out.dtype == theirs.dtype, (out.dtype, theirs.dtype)
    # What autocast means: the op on the inputs cast to the region's dtype, bit for bit.
    assert torch.equal(out, ours_fn(*(t.detach().to(BF16) for t in inputs)))
    ref_inputs = _cast64(inputs)
    ref = ref_fn(*ref_inputs)
    assert_close_to_reference(out.double(), ref, theirs.double(), eps=eps_for(BF16))
    upstream = torch.randn_like(ref)
    ours_g = torch.autograd.grad(out, inputs, upstream.to(out.dtype))
    theirs_g = torch.autograd.grad(theirs, inputs, upstream.to(theirs.dtype))
    ref_g = torch.autograd.grad(ref, ref_inputs, upstream)
    for i, (a, r, b) in enumerate(zip(ours_g, ref_g, theirs_g)):
        assert a.dtype == b.dtype == torch.float32, (i, a.dtype, b.dtype)
        assert_close_to_reference(a.double(), r, b.double(), eps=eps_for(BF16, gradient=True),
                                  what=f"gradient of input {i}")


@pytest.mark.parametrize("causal", [False, True])
def test_attention(causal, device):
    torch.manual_seed(0)
    inputs = _leaves((2, 4, 37, 32), (2, 2, 37, 32), (2, 2, 37, 32), device=device)
    _check(lambda q, k, v: tritonkit.attention(q, k, v, causal=causal),
           lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True),
           lambda q, k, v: attention_reference(q, k, v, causal),
           inputs, device)


def test_attention_varlen(device):
    torch.manual_seed(1)
    cu = torch.tensor([0, 5, 5, 19, 30], dtype=torch.int32, device=device)
    inputs = _leaves((30, 4, 16), (30, 2, 16), (30, 2, 16), device=device)

    def sdpa_per_sequence(q, k, v):  # torch's yardstick: SDPA on each sequence, under the region
        outs = [q.new_zeros(0, q.shape[1], q.shape[2], dtype=BF16)]
        for s, e in zip(cu[:-1].tolist(), cu[1:].tolist()):
            if e > s:
                qs, ks, vs = (t[s:e].transpose(0, 1)[None] for t in (q, k, v))
                outs.append(F.scaled_dot_product_attention(qs, ks, vs, is_causal=True,
                                                           enable_gqa=True)[0].transpose(0, 1))
        return torch.cat(outs)

    _check(lambda q, k, v: tritonkit.attention_varlen(q, k, v, cu, cu, 14, 14, causal=True), sdpa_per_sequence,
           lambda q, k, v: attention_varlen_reference(q, k, v, cu, cu, True), inputs, device)


@pytest.mark.parametrize("bias", [False, True])
def test_linear_cross_entropy(bias, device):
    torch.manual_seed(2)
    target = torch.randint(0, 97, (45,), device=device)
    target[::7] = -100
    inputs = _leaves((45, 24), (97, 24), *([(97,)] if bias else []), device=device)

    def split(args):
        return args[0], args[1], (args[2] if bias else None)

    def ours(*args):
        h, w, b = split(args)
        return tritonkit.linear_cross_entropy(h, w, target, bias=b)

    def theirs(*args):
        h, w, b = split(args)
        return F.cross_entropy(F.linear(h, w, b).float(), target)

    def ref(*args):  # the cast inputs' logits rounded to bf16, as F.linear rounds them under autocast
        h, w, b = split(args)
        z = F.linear(h, w, b).to(BF16).double()
        return F.cross_entropy(z, target)

    _check(ours, theirs, ref, inputs, device)


def test_gated_linear(device):
    torch.manual_seed(3)
    inputs = _leaves((3, 11, 40), (3, 11, 40), (24, 40), (24,), device=device)
    _check(lambda g, u, w, b: tritonkit.gated_linear(g, u, w, b),
           lambda g, u, w, b: F.linear(F.silu(g) * u, w, b),
           lambda g, u, w, b: gated_linear_reference(g, u, w, b),
           inputs, device)


def test_compiled_under_autocast(device):
    # The casts are traced with the op: one graph, the same result as eager.
    torch.manual_seed(4)
    q, k, v = _leaves((1, 2, 20, 16), (1, 2, 20, 16), (1, 2, 20, 16), device=device)
    h, w = _leaves((12, 16), (30, 16), device=device)
    target = torch.randint(0, 30, (12,), device=device)

    def step(q, k, v, h, w):
        return tritonkit.attention(q, k, v, causal=True).float().square().mean() + \
            tritonkit.linear_cross_entropy(h, w, target)

    with torch.autocast(device.type, dtype=BF16):
        eager = step(q, k, v, h, w)
        compiled = torch.compile(step, fullgraph=True)(q, k, v, h, w)
    torch.testing.assert_close(compiled, eager)
    grads = torch.autograd.grad(compiled, (q, w))
    assert all(g.dtype == torch.float32 and g.isfinite().all() for g in grads)


@pytest.mark.parametrize("autocast", [True, False])
def test_compiled_without_asking_autocast_availability(autocast, device, monkeypatch):
    # Dynamo before torch 2.13 cannot trace torch.amp.is_autocast_available: a graph break,
    # an error under fullgraph=True. Such a dynamo is stood in for by a graph break there.
    available = torch.amp.is_autocast_available

    def untraceable(device_type):
        torch._dynamo.graph_break()
        return available(device_type)

    monkeypatch.setattr(torch.amp, "is_autocast_available", untraceable)
    torch._dynamo.reset()
    torch.manual_seed(5)
    q, k, v = _leaves((1, 2, 20, 16), (1, 2, 20, 16), (1, 2, 20, 16), device=device)

    def step(q, k, v):
        return tritonkit.attention(q, k, v, causal=True)

    with torch.autocast(device.type, dtype=BF16, enabled=autocast):
        args = (q, k, v) if autocast else (q.to(BF16), k.to(BF16), v.to(BF16))
        torch.testing.assert_close(torch.compile(step, fullgraph=True)(*args), step(*args))


def test_outside_autocast_nothing_is_cast(device):
    q = torch.randn(1, 2, 8, 16, device=device)
    with pytest.raises(TypeError, match="q has dtype float32"):
        tritonkit.attention(q, q, q)
    with torch.autocast(device.type, dtype=BF16, enabled=False):
        with pytest.raises(TypeError, match="q has dtype float32"):
            tritonkit.attention(q, q, q)
    h, w = torch.randn(4, 8, device=device), torch.randn(6, 8, device=device)
    assert tritonkit.linear_cross_entropy(h, w, torch.zeros(4, dtype=torch.long, device=device)).dtype == torch.float32
