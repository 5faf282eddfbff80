"""tritonkit.gated_linear against float64 references, with torch's own error as the yardstick,
and against the unfused swiglu/geglu + F.linear it replaces: its bits, and the memory it
does not keep (h is recomputed by the backward kernel, bitwise as the forward made it)."""

import pytest
import torch
import torch.nn.functional as F

import tritonkit
from tritonkit._launch import record_launches
from tritonkit.ops import gated as gated_module
from tritonkit.ops.gated_linear import gated_linear_bwd, gated_linear_reference
from _tolerance import assert_close_to_reference, eps_for
from conftest import ON_GPU

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
ACTIVATIONS = ["silu", "gelu_tanh", "gelu"]
# The unfused form each activation replaces.
UNFUSED = {"silu": tritonkit.swiglu, "gelu_tanh": lambda g, u: tritonkit.geglu(g, u, "tanh"),
           "gelu": lambda g, u: tritonkit.geglu(g, u, "none")}
# (leading dims of gate, I, out features, why). Outputs of a dozen elements or more: in a
# handful, the final rounding of y (the same for torch) decides a norm-wise error by chance.
SHAPES = [
    ((1,), 16, 16),        # one token
    ((13,), 1, 16),        # I = 1 (a dozen tokens: a 1-element gradient is one bf16 rounding by chance)
    ((7,), 13, 5),         # primes
    ((2, 5), 37, 3),       # leading dims (B, N, I)
    ((3,), 2049, 7),       # just past a 2048-column block: 512-wide blocks, a masked last one per row
    ((2,), 3072, 31),      # a row longer than a block: one row a program, 1024-wide blocks
    ((0,), 8, 3),          # no tokens: zero weight and bias gradients
] + ([((4099,), 11008, 129), ((2, 2048), 14336, 256)] if ON_GPU else [])


def _grads(f, tensors, upstream):
    leaves = [t.detach().requires_grad_() for t in tensors]
    return torch.autograd.grad(f(*leaves), leaves, upstream)


def check(gate, up, weight, bias=None, activation="silu"):
    """Forward and the gradients of every input (a random upstream) against float64, each
    within twice torch's own error in the same dtype."""
    inputs = [t for t in (gate, up, weight, bias) if t is not None]

    def call(f, **kw):
        def run(*ts):
            it = iter(ts)
            g, u = next(it), (next(it) if up is not None else None)
            w = next(it)
            return f(g, u, w, next(it) if bias is not None else None, activation=activation, **kw)
        return run

    ours_f = call(tritonkit.gated_linear)
    out = ours_f(*inputs)
    assert out.dtype == gate.dtype and out.is_contiguous()
    assert out.shape == (*gate.shape[:-1], weight.shape[0])
    assert_close_to_reference(out, call(gated_linear_reference)(*inputs),
                              call(gated_linear_reference, upcast=False)(*inputs))
    upstream = torch.randn_like(out)
    ours = _grads(ours_f, inputs, upstream)
    theirs = _grads(call(gated_linear_reference, upcast=False), inputs, upstream)
    exact = _grads(call(gated_linear_reference), [t.double() for t in inputs], upstream.double())
    for i, (o, t, e) in enumerate(zip(ours, theirs, exact)):
        assert o.shape == inputs[i].shape and o.dtype == inputs[i].dtype
        assert_close_to_reference(o, e, t, eps=eps_for(gate.dtype, gradient=True), what=f"grad {i}")


def _weights(width, out, dtype, device, bias):
    weight = torch.randn(out, width, device=device, dtype=dtype) / max(1, width) ** 0.5
    return weight, (torch.randn(out, device=device, dtype=dtype) if bias else None)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_separate(activation, shape, dtype, bias, device):
    lead, width, out = shape
    gate = torch.randn(*lead, width, device=device, dtype=dtype) * 3
    check(gate, torch.randn(*lead, width, device=device, dtype=dtype), *_weights(width, out, dtype, device, bias),
          activation=activation)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_packed(activation, shape, dtype, device):
    # Phi-3's form: one (..., 2I) [gate, up] tensor, its gradient one tensor of that shape.
    lead, width, out = shape
    packed = torch.randn(*lead, 2 * width, device=device, dtype=dtype) * 2
    check(packed, None, *_weights(width, out, dtype, device, bias=len(lead) > 1), activation=activation)


@pytest.mark.parametrize("offset", [1, 3])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_views_at_odd_offsets_and_strides(activation, offset, device):
    dtype = torch.float16
    buf = torch.randn(9 * 100 + offset, device=device, dtype=dtype)
    packed = buf[offset:].view(9, 100)
    weight = torch.randn(7 * 50 + offset, device=device, dtype=dtype)[offset:].view(7, 50) / 7
    bias = torch.randn(14 + offset, device=device, dtype=dtype)[offset::2]
    check(packed, None, weight, bias, activation)                          # packed, at an odd offset
    check(packed[:, :50], packed[:, 50:], weight, bias, activation)        # the halves passed separately
    check(packed[:, :40].t(), packed[:, 50:90].t(), weight[:, :9], None, activation)  # transposed gate, up
    check(packed[:8:2, 1:60:3], packed[1::2, :59:3], weight.t()[:20].t(), bias, activation)  # stepped; weight^T
    wide = torch.randn(2, 3, 4, 5, 6, device=device, dtype=dtype)
    check(wide.permute(4, 2, 0, 3, 1), torch.randn(6, 4, 2, 5, 3, device=device, dtype=dtype),
          weight[:, :3], bias, activation)  # five dims no stride pattern merges: the contiguous-copy fallback


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_unfused_forms_bits(activation, dtype, device):
    # The same F.linear and autograd's own products, and h bitwise the gated kernel's: gated_linear
    # gives exactly the bits of the unfused form it replaces, forward and every gradient.
    unfused = UNFUSED[activation]
    for packed, lead, transposed in ((False, (37,), False), (True, (2, 19), False), (False, (3, 4), True)):
        gate = torch.randn(*lead, 90 if packed else 45, device=device, dtype=dtype)
        up = None if packed else torch.randn(*lead, 45, device=device, dtype=dtype)
        weight = torch.randn(45, 23, device=device, dtype=dtype).t() if transposed else \
            torch.randn(23, 45, device=device, dtype=dtype)
        bias = torch.randn(23, device=device, dtype=dtype)
        inputs = [t for t in (gate, up, weight, bias) if t is not None]

        def ours(*t):
            return tritonkit.gated_linear(t[0], None if packed else t[1], t[-2], t[-1], activation=activation)

        def theirs(*t):
            return F.linear(unfused(t[0], None) if packed else unfused(t[0], t[1]), t[-2], t[-1])

        assert torch.equal(ours(*inputs), theirs(*inputs))
        upstream = torch.randn(*lead, 23, device=device, dtype=dtype)
        for o, t in zip(_grads(ours, inputs, upstream), _grads(theirs, inputs, upstream)):
            assert torch.equal(o, t) and o.stride() == t.stride()


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_h_from_the_backward_kernel_is_the_forwards_bits(activation, dtype, packed, device):
    # STORE_H: the backward launch writes h = act(gate) * up with the forward's expression,
    # into a tensor of its own or over dout (as gated_linear does), and dgate, dup unchanged.
    code = gated_module._ACTIVATIONS[activation]
    for shape in ((1, 1), (5, 37), (3, 4097), (2, 3, 2049)):
        n = shape[-1]
        gate = torch.randn(*shape[:-1], 2 * n if packed else n, device=device, dtype=dtype) * 3
        up = None if packed else torch.randn(shape, device=device, dtype=dtype)
        h = gated_module.gated_fwd(gate, up, code)
        dout = torch.randn(shape, device=device, dtype=dtype)
        plain = gated_module._gated_bwd_checked(dout, gate, up, code)
        apart = torch.full(shape, float("nan"), device=device, dtype=dtype)  # poisoned: every element written
        grads = gated_module._gated_bwd_checked(dout, gate, up, code, h=apart)
        assert torch.equal(apart, h)
        in_place = dout.clone()
        grads_in_place = gated_module._gated_bwd_checked(in_place, gate, up, code, h=in_place)
        assert torch.equal(in_place, h)
        for a, b, c in zip(plain, grads, grads_in_place):
            assert torch.equal(a, b) and torch.equal(a, c)


def _store_h(launches) -> list[bool]:
    return [launch.constexprs["STORE_H"] for launch in launches if launch.name == "gated_bwd"]


def test_frozen_weight_skips_h_and_the_weight_product(monkeypatch, device):
    # LoRA and frozen layers: no dweight, so neither the h store nor the product; dgate, dup and
    # dbias are bitwise those of a trained weight.
    gate, up = (torch.randn(6, 33, device=device) for _ in range(2))
    weight, bias = _weights(33, 9, torch.float32, device, bias=True)
    upstream = torch.randn(6, 9, device=device)
    products = []
    mm = torch.mm
    monkeypatch.setattr(torch, "mm", lambda *a, **k: products.append(a[0].shape) or mm(*a, **k))

    def grads(*tensors):
        leaves = [t.detach().requires_grad_(t is not weight or train) for t in tensors]
        wrt = [t for t in leaves if t.requires_grad]
        with record_launches() as launches:
            out = torch.autograd.grad(tritonkit.gated_linear(*leaves), wrt, upstream)
        return out, _store_h(launches)

    train = True
    trained, store = grads(gate, up, weight, bias)
    assert store == [True] and len(products) == 2
    products.clear()
    train = False
    frozen, store = grads(gate, up, weight, bias)
    assert store == [False] and len(products) == 1
    dgate, dup, _, dbias = trained
    for a, b in zip((dgate, dup, dbias), frozen):
        assert torch.equal(a, b)


def test_only_the_weight_trained(device):
    # Inputs that need no gradient (frozen earlier layers): no dh, h from the forward kernel.
    gate, up = (torch.randn(2, 5, 21, device=device) for _ in range(2))
    weight = (torch.randn(8, 21, device=device) / 5).requires_grad_()
    upstream = torch.randn(2, 5, 8, device=device)
    with record_launches() as launches:
        (ours,) = torch.autograd.grad(tritonkit.gated_linear(gate, up, weight), weight, upstream)
    assert _store_h(launches) == []
    (theirs,) = torch.autograd.grad(F.linear(tritonkit.swiglu(gate, up), weight), weight, upstream)
    assert torch.equal(ours, theirs)


def _saved(fn, *args):
    """The tensors autograd saved while fn(*args) ran: (their total bytes, their data pointers)."""
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        fn(*args)
    return sum(t.numel() * t.element_size() for t in saved), {t.data_ptr() for t in saved}


@pytest.mark.parametrize("packed", [False, True])
def test_saves_its_inputs_and_not_h(packed, device):
    # The unfused form keeps h = act(gate) * up for the product's backward; gated_linear keeps
    # only its inputs (gate, up and weight, which a training step holds anyway).
    n = 48
    gate = torch.randn(4, 6, 2 * n if packed else n, device=device, dtype=torch.bfloat16, requires_grad=True)
    up = None if packed else torch.randn(4, 6, n, device=device, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(16, n, device=device, dtype=torch.bfloat16, requires_grad=True)
    ours, pointers = _saved(tritonkit.gated_linear, gate, up, weight)
    unfused, _ = _saved(lambda g, u, w: F.linear(tritonkit.swiglu(g, u), w), gate, up, weight)
    h_bytes = 4 * 6 * n * 2
    assert ours == unfused - h_bytes, (ours, unfused)
    assert pointers <= {t.data_ptr() for t in (gate, up, weight) if t is not None}


def test_torch_compile_fullgraph(device):
    def block(g, u, w, b, packed):
        return (tritonkit.gated_linear(g, u, w, b, activation="gelu_tanh").square().sum()
                + tritonkit.gated_linear(packed, None, w).sum())

    g, u = (torch.randn(7, 11, device=device, requires_grad=True) for _ in range(2))
    packed = torch.randn(3, 22, device=device, requires_grad=True)
    w = torch.randn(5, 11, device=device, requires_grad=True)
    b = torch.randn(5, device=device, requires_grad=True)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    for frozen in (False, True):  # a frozen weight: the traced backward asks for no dweight
        w.requires_grad_(not frozen)
        wrt = [t for t in (g, u, w, b, packed) if t.requires_grad]
        want = torch.autograd.grad(block(g, u, w, b, packed), wrt)
        got = torch.autograd.grad(compiled(g, u, w, b, packed), wrt)
        for a, e in zip(got, want):
            torch.testing.assert_close(a, e, rtol=0, atol=0)


def test_bad_input_names_the_argument(device):
    x = torch.randn(4, 6, device=device)
    w = torch.randn(3, 6, device=device)
    other = torch.device("meta") if tritonkit.INTERPRETED else torch.device("cpu")
    with pytest.raises(TypeError, match="weight"):
        tritonkit.gated_linear(x, x, w.half())
    with pytest.raises(TypeError, match="weight"):
        tritonkit.gated_linear(x, x, [[1.0] * 6])
    with pytest.raises(ValueError, match="weight"):
        tritonkit.gated_linear(x, x, torch.randn(3, 5, device=device))
    with pytest.raises(ValueError, match="weight"):
        tritonkit.gated_linear(x, x, torch.randn(3, 2, 3, device=device))
    with pytest.raises(ValueError, match="weight"):
        tritonkit.gated_linear(x, x, w.to(other))
    with pytest.raises(TypeError, match="bias"):
        tritonkit.gated_linear(x, x, w, torch.randn(3, device=device, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="bias"):
        tritonkit.gated_linear(x, x, w, torch.randn(4, device=device))
    with pytest.raises(ValueError, match="bias"):
        tritonkit.gated_linear(x, x, w, torch.randn(3, device=device).to(other))
    with pytest.raises(ValueError, match="up"):
        tritonkit.gated_linear(x, torch.randn(4, 5, device=device), w)
    with pytest.raises(TypeError, match="weight"):  # fp16 and bf16 promote to fp32, as F.linear's input would
        tritonkit.gated_linear(x.half(), x.bfloat16(), w.half())
    with pytest.raises(ValueError, match="gate"):
        tritonkit.gated_linear(torch.randn(4, 5, device=device), None, w)  # packed with an odd last dim
    with pytest.raises(ValueError, match="gate"):
        tritonkit.gated_linear(torch.tensor(1.0, device=device), torch.tensor(1.0, device=device), w)
    with pytest.raises(ValueError, match="activation"):
        tritonkit.gated_linear(x, x, w, activation="relu")
    with pytest.raises(ValueError, match="grad_out"):
        gated_linear_bwd(torch.randn(4, 4, device=device), x, x, w, None, "silu")
    with pytest.raises(TypeError, match="grad_out"):
        gated_linear_bwd(torch.randn(4, 3, device=device).half(), x, x, w, None, "silu")


@pytest.mark.gpu
def test_past_int32_offsets(device):
    # h, dgate and dup of 2**31 + 2 elements: the kernel's offsets, h's store included, need 64 bits.
    n = (1 << 30) + 1
    gate, up = (torch.randn(2, n, device=device, dtype=torch.bfloat16).requires_grad_() for _ in range(2))
    weight = torch.randn(1, n, device=device, dtype=torch.bfloat16).requires_grad_()
    upstream = torch.randn(2, 1, device=device, dtype=torch.bfloat16)
    dgate, dup, dweight = torch.autograd.grad(tritonkit.gated_linear(gate, up, weight), (gate, up, weight), upstream)
    tail = slice(n - 5, n)
    h = tritonkit.swiglu(gate[:, tail], up[:, tail])
    torch.testing.assert_close(dweight[:, tail], (upstream.t().float() @ h.float()).to(torch.bfloat16))
    want = gated_module.swiglu_bwd(upstream @ weight[:, tail], gate[:, tail], up[:, tail])
    torch.testing.assert_close(dgate[:, tail], want[0])
    torch.testing.assert_close(dup[:, tail], want[1])
