"""tritonkit.swiglu and tritonkit.geglu against float64 references, with torch's own error as
the yardstick: separate and packed [gate, up] inputs, odd sizes and layouts, gradients."""

import pytest
import torch

import tritonkit
from tritonkit.ops import gated as gated_module
from tritonkit.ops.gated import geglu_reference, swiglu_reference
from _tolerance import assert_close_to_reference, eps_for
from conftest import ON_GPU

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# name -> (ours, reference(gate, up, upcast)): the three activations
OPS = {
    "swiglu": (tritonkit.swiglu, swiglu_reference),
    "geglu_tanh": (lambda g, u=None: tritonkit.geglu(g, u, "tanh"),
                   lambda g, u=None, upcast=True: geglu_reference(g, u, "tanh", upcast)),
    "geglu_none": (lambda g, u=None: tritonkit.geglu(g, u, approximate="none"),
                   lambda g, u=None, upcast=True: geglu_reference(g, u, "none", upcast)),
}
# (shape of gate, why)
SHAPES = [
    (1, 1),             # one element, hidden 1
    (7, 1),             # hidden 1, several rows in one program
    (3, 37),            # odd hidden, rows packed several to a program
    (2, 5, 13),         # three dims, primes
    (4, 2049),          # just past a 2048-column block: 512-wide blocks, a masked last one per row
    (1, 3 * 4096),      # whole tiles, no mask at all
    (),                 # 0-d (separate inputs only)
] + ([(8192, 14336), (3, 1_000_003), (4099, 11008)] if ON_GPU else [])


def _grads(f, tensors, upstream):
    leaves = [t.detach().requires_grad_() for t in tensors]
    out = f(*leaves)
    return out, torch.autograd.grad(out, leaves, upstream)


def check(name, gate, up=None):
    """Forward and the gradients of every input (random upstream) against float64."""
    ours_f, ref_f = OPS[name]
    inputs = (gate,) if up is None else (gate, up)
    out = ours_f(*inputs)
    ref = ref_f(*inputs)
    assert out.dtype == gate.dtype and out.is_contiguous()
    assert_close_to_reference(out, ref, ref_f(*inputs, upcast=False))
    upstream = torch.randn_like(out)
    _, ours = _grads(ours_f, inputs, upstream)
    _, theirs = _grads(lambda *t: ref_f(*t, upcast=False), inputs, upstream)
    _, exact = _grads(ref_f, [t.double() for t in inputs], upstream.double())
    for i, (o, t, e) in enumerate(zip(ours, theirs, exact)):
        assert o.shape == inputs[i].shape and o.dtype == inputs[i].dtype
        assert_close_to_reference(o, e, t, eps=eps_for(gate.dtype, gradient=True), what=f"grad {i}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", OPS)
def test_separate(name, shape, dtype, device):
    gate = torch.randn(shape, device=device, dtype=dtype) * 3
    check(name, gate, torch.randn(shape, device=device, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [s for s in SHAPES if s])
@pytest.mark.parametrize("name", OPS)
def test_packed(name, shape, dtype, device):
    packed = torch.randn(*shape[:-1], 2 * shape[-1], device=device, dtype=dtype) * 2
    check(name, packed)


@pytest.mark.parametrize("offset", [1, 3, 7])
@pytest.mark.parametrize("name", OPS)
def test_views_at_odd_offsets_and_strides(name, offset, device):
    buf = torch.randn(2 * 9 * 50 + offset, device=device, dtype=torch.float16)
    packed = buf[offset:].view(9, 100)
    check(name, packed)                               # packed, at an odd element offset
    check(name, packed[:, :50], packed[:, 50:])       # the two halves passed separately
    check(name, packed[:, :40].t(), packed[:, 50:90].t())  # transposed: columns strided
    check(name, packed[:8:2, 1:60:3], packed[1::2, :59:3])  # stepped in both dims
    wide = torch.randn(2, 3, 4, 5, 6, device=device, dtype=torch.float16)
    check(name, wide.permute(4, 2, 0, 3, 1), torch.randn(6, 4, 2, 5, 3, device=device, dtype=torch.float16))
    # ^ five dims that no stride pattern merges: the contiguous-copy fallback


def test_packed_gradient_is_one_tensor_in_place_of_the_pair(device):
    x = torch.randn(6, 20, device=device, requires_grad=True)
    (grad,) = torch.autograd.grad(tritonkit.swiglu(x), x, torch.randn(6, 10, device=device))
    assert grad.shape == x.shape and grad.is_contiguous()


@pytest.mark.gpu
def test_float32_forward_is_torchs_bits(device):
    # PRECISE: torch's expression with CUDA's expf and correctly rounded division.
    gate, up = torch.randn(2, 1000, 4099, device=device) * 4, torch.randn(1000, 4099, device=device)
    assert torch.equal(tritonkit.swiglu(gate[0], up), torch.nn.functional.silu(gate[0]) * up)
    packed = gate[1, :, 1:]  # halves of 2049 columns, at an odd element offset
    assert torch.equal(tritonkit.swiglu(packed), torch.nn.functional.silu(packed[:, :2049]) * packed[:, 2049:])


@pytest.mark.gpu
def test_past_int32_offsets(device):
    # 2**31 + 2 elements in each half of a packed input: offsets need 64 bits.
    n = (1 << 30) + 1
    x = torch.empty(2, 2 * n, device=device, dtype=torch.bfloat16).normal_()
    out = tritonkit.swiglu(x)
    torch.testing.assert_close(out[:, -5:], swiglu_reference(x[:, n - 5:n], x[:, -5:]).to(out.dtype))
    torch.testing.assert_close(out[:, :5], swiglu_reference(x[:, :5], x[:, n:n + 5]).to(out.dtype))


@pytest.mark.parametrize("name", ["swiglu", "geglu"])
def test_torch_compile_fullgraph(name, device):
    f = tritonkit.swiglu if name == "swiglu" else (lambda g, u=None: tritonkit.geglu(g, u, approximate="none"))

    def block(x, g, u):
        return f(x).sum() + f(g, u).square().sum()

    x = torch.randn(5, 18, device=device, requires_grad=True)
    g = torch.randn(7, 11, device=device, requires_grad=True)
    u = torch.randn(7, 11, device=device, requires_grad=True)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    want = torch.autograd.grad(block(x, g, u), (x, g, u))
    got = torch.autograd.grad(compiled(x, g, u), (x, g, u))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", ["swiglu", "geglu"])
def test_two_dtypes_promote_as_torch_does(name, device):
    # float32 gate with bfloat16 up (and the other way round): torch's eager product promotes to
    # float32; so does the op, and each input's gradient comes back in its own dtype.
    for gate_dtype, up_dtype in ((torch.float32, torch.bfloat16), (torch.bfloat16, torch.float32)):
        gate = torch.randn(5, 33, device=device, dtype=gate_dtype, requires_grad=True)
        up = torch.randn(5, 33, device=device, dtype=up_dtype, requires_grad=True)
        out = getattr(tritonkit, name)(gate, up)
        reference = swiglu_reference if name == "swiglu" else geglu_reference
        eager, ref = reference(gate, up, upcast=False), reference(gate.double(), up.double())
        assert out.dtype == eager.dtype == torch.float32
        assert_close_to_reference(out, ref, eager, eps=eps_for(torch.bfloat16))
        grads = torch.autograd.grad(out, (gate, up), torch.ones_like(out))
        assert [g.dtype for g in grads] == [gate_dtype, up_dtype]


def test_bad_input_names_the_argument(device):
    x = torch.randn(4, 6, device=device)
    with pytest.raises(ValueError, match="gate"):
        tritonkit.swiglu(torch.randn(4, 5, device=device))  # packed with an odd last dim
    with pytest.raises(ValueError, match="gate"):
        tritonkit.swiglu(torch.tensor(1.0, device=device))  # packed but 0-d
    with pytest.raises(ValueError, match="up"):
        tritonkit.swiglu(x, torch.randn(4, 5, device=device))
    with pytest.raises(TypeError, match="gate"):
        tritonkit.geglu(x.long(), x)
    with pytest.raises(TypeError, match="gate"):
        tritonkit.swiglu([1.0, 2.0])
    with pytest.raises(ValueError, match="approximate"):
        tritonkit.geglu(x, x, approximate="sigmoid")
    with pytest.raises(ValueError, match="grad_out"):
        gated_module.swiglu_bwd(torch.randn(4, 4, device=device), x, None)


def test_tile_config():
    # Llama-3's intermediate size splits into whole 2048-column blocks, one row a program (two
    # measured 6-11% slower on packed [gate, up] rows); Llama-2-7B's 11008 and Qwen2-1.5B's
    # 8960 into 1024-wide blocks, which pad them less; short rows share a program.
    assert gated_module._tile_config(8192, 14336) == (1, 2048, 4)
    assert gated_module._tile_config(1, 1 << 27) == (1, 2048, 4)
    assert gated_module._tile_config(8192, 11008) == (1, 1024, 4)
    assert gated_module._tile_config(8192, 8960) == (1, 1024, 4)
    assert gated_module._tile_config(8192, 5632) == (1, 2048, 4)   # 1024-wide blocks pad it no less
    assert gated_module._tile_config(100, 3) == (128, 4, 4)


def test_masked_lanes_raise_no_warnings(device):
    # The interpreter evaluates masked lanes too: they must not make floating-point warnings.
    # (Gates far below -10 overflow exp(-g) legitimately, to the right limit, and numpy warns.)
    import warnings
    x = torch.randn(37, 2 * 13, device=device) * 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for name in OPS:
            check(name, x)
