"""tritonkit.add against torch: values, shapes, dtypes, layouts, errors, gradients."""

import pytest
import torch

import tritonkit
from tritonkit.ops.add import add_reference
from _tolerance import assert_close_to_reference
from conftest import ON_GPU

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# one element; odd; just past a 16-element vector group; prime past a block; large on GPU
SIZES = [1, 781, 17, 65537] + ([16 * 1024 * 1024 + 3] if ON_GPU else [])


def check_add(x, y, out=None):
    expected = x + y
    result = tritonkit.add(x, y, out=out)
    assert result.shape == expected.shape and result.dtype == expected.dtype
    if expected.dtype == torch.bfloat16 and tritonkit.INTERPRETED:
        # The interpreter truncates fp32 -> bf16 instead of rounding: compare by error.
        assert_close_to_reference(result, add_reference(x, y).to(torch.float64), expected)
    else:
        # fp32 arithmetic rounded once, as torch does: bit-identical.
        assert torch.equal(result, expected)
    return result


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_contiguous(n, dtype, device):
    check_add(torch.randn(n, device=device, dtype=dtype), torch.randn(n, device=device, dtype=dtype))


@pytest.mark.parametrize("offset", range(1, 16))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_views_at_odd_offsets(offset, dtype, device):
    n = 1000 + offset
    buf_x = torch.randn(n + 16, device=device, dtype=dtype)
    buf_y = torch.randn(n + 16, device=device, dtype=dtype)
    # x and y misaligned by different amounts; out also misaligned.
    out_buf = torch.full((n + 16,), float("nan"), device=device, dtype=dtype)
    x, y, out = buf_x[offset:offset + n], buf_y[(offset * 7) % 16:(offset * 7) % 16 + n], out_buf[offset:offset + n]
    check_add(x, y, out=out)
    assert torch.isnan(out_buf[:offset]).all() and torch.isnan(out_buf[offset + n:]).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_transposed_and_step_sliced(dtype, device):
    a = torch.randn(67, 130, device=device, dtype=dtype)
    b = torch.randn(130, 67, device=device, dtype=dtype)
    check_add(a.t(), b)
    check_add(a[::3, 1::2], b.t()[::3, 1::2])
    c = torch.randn(5, 6, 7, 8, 9, device=device, dtype=dtype)
    check_add(c.permute(4, 2, 0, 3, 1)[:, :6:2], c.permute(4, 2, 0, 3, 1)[:, 1::2])


@pytest.mark.parametrize("shapes", [((5, 1, 7), (3, 1)), ((4, 1), (1, 9)), ((2, 3, 4, 5, 6, 7), (6, 1)), ((3,), ())])
def test_broadcasting(shapes, device):
    x = torch.randn(shapes[0], device=device)
    y = torch.randn(shapes[1], device=device)
    check_add(x, y)
    check_add(y, x)


def test_many_unmergeable_dims(device):
    # Six dims that no stride pattern merges: the launcher's contiguous-copy path.
    x = torch.randn(3, 4, 5, 6, 7, 8, device=device).permute(5, 3, 1, 0, 2, 4)[:, ::2]
    y = torch.randn(7, 3, 5, 8, 4, 3, device=device).permute(3, 1, 4, 5, 2, 0)
    check_add(x, y)


@pytest.mark.parametrize("dx,dy,expected", [
    (torch.float16, torch.float32, torch.float32),
    (torch.bfloat16, torch.float16, torch.float32),
    (torch.bfloat16, torch.float32, torch.float32),
])
def test_type_promotion(dx, dy, expected, device):
    result = check_add(torch.randn(100, device=device, dtype=dx), torch.randn(100, device=device, dtype=dy))
    assert result.dtype == expected


def test_zero_dim_tensors_act_as_scalars(device):
    x = torch.randn(33, device=device, dtype=torch.float16)
    scalar = torch.tensor(1.5, device=device)  # a 0-d fp32 tensor does not promote fp16
    assert check_add(x, scalar).dtype == torch.float16
    assert check_add(scalar, torch.randn((), device=device)).shape == ()
    # A 0-d CPU tensor beside a device tensor, on either side, as torch allows.
    check_add(x, torch.tensor(2.25))
    check_add(torch.tensor(2.25), x)


def test_gradient_of_a_cpu_scalar_beside_a_device_tensor(device):
    # The 0-d CPU operand's gradient comes back on the CPU, summed, as torch.add's does.
    x = torch.randn(5, 7, device=device, requires_grad=True)
    s = torch.tensor(0.5, requires_grad=True)
    up = torch.randn(5, 7, device=device)
    ours = torch.autograd.grad(tritonkit.add(x, s), (x, s), up)
    theirs = torch.autograd.grad(x + s, (x, s), up)
    for a, b in zip(ours, theirs):
        assert a.device == b.device and a.shape == b.shape
        torch.testing.assert_close(a, b)


def test_empty(device):
    check_add(torch.randn(0, 5, device=device), torch.randn(5, device=device))


def test_out_is_written_everywhere(device):
    x, y = torch.randn(3, 257, device=device), torch.randn(3, 257, device=device)
    out = torch.full((3, 257), float("nan"), device=device)
    assert tritonkit.add(x, y, out=out) is out
    assert torch.equal(out, x + y)
    strided_out = torch.full((257, 3), float("nan"), device=device).t()
    check_add(x, y, out=strided_out)


def test_out_that_overlaps_its_inputs(device):
    # As torch: writing onto the very same elements of an input is fine, onto part of one is
    # refused (the result would depend on the order the kernel writes in), and so is an
    # output whose elements share memory.
    buffer = torch.randn(1001, device=device)
    x, y = buffer.clone(), torch.randn(1001, device=device)
    expected = x + y
    assert tritonkit.add(x, y, out=x) is x and torch.equal(x, expected)
    for view_out, view_x in ((buffer[:-1], buffer[1:]), (buffer[1:], buffer[:-1])):
        with pytest.raises(ValueError, match="out partly overlaps x"):
            tritonkit.add(view_x, torch.randn(1000, device=device), out=view_out)
        with pytest.raises(RuntimeError, match="single memory location"):
            torch.add(view_x, torch.randn(1000, device=device), out=view_out)
    with pytest.raises(ValueError, match="out partly overlaps y"):
        tritonkit.add(torch.randn(1000, device=device), buffer[:-1], out=buffer[1:])
    with pytest.raises(ValueError, match="out has elements that share memory"):
        tritonkit.add(y[:5], y[:5], out=torch.zeros(1, device=device).expand(5))
    # Interleaved columns of one buffer do not overlap: allowed, as torch allows them.
    pairs = torch.randn(300, 2, device=device)
    a, b = pairs[:, 0].clone(), pairs[:, 1].clone()
    tritonkit.add(pairs[:, 0], pairs[:, 1], out=pairs[:, 1])
    assert torch.equal(pairs[:, 1], a + b)


def test_bad_input_names_the_argument(device):
    x = torch.randn(4, device=device)
    with pytest.raises(TypeError, match="y must be a torch.Tensor"):
        tritonkit.add(x, 2.0)
    with pytest.raises(TypeError, match="x has dtype int32"):
        tritonkit.add(torch.ones(4, dtype=torch.int32, device=device), x)
    with pytest.raises(TypeError, match="y has dtype complex64"):
        tritonkit.add(x, torch.ones(4, dtype=torch.complex64, device=device))
    with pytest.raises(ValueError, match="do not broadcast"):
        tritonkit.add(x, torch.randn(5, device=device))
    with pytest.raises(ValueError, match="out has shape"):
        tritonkit.add(x, x, out=torch.empty(5, device=device))
    with pytest.raises(TypeError, match="out must be a torch.Tensor"):
        tritonkit.add(x, x, out=[0.0] * 4)
    other = torch.device("cpu") if ON_GPU else torch.device("meta")
    with pytest.raises(ValueError, match="y is on"):
        tritonkit.add(x, torch.randn(4, device=other))


def test_backward_sums_over_broadcast_dims(device):
    x = torch.randn(5, 1, 7, device=device, requires_grad=True)
    y = torch.randn(3, 1, device=device, requires_grad=True)
    grad = torch.randn(5, 3, 7, device=device)
    ours = torch.autograd.grad(tritonkit.add(x, y), (x, y), grad)
    theirs = torch.autograd.grad(x + y, (x, y), grad)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)


@pytest.mark.gpu
def test_more_than_2_pow_31_elements():
    n = 2**31 + 4099
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    out = tritonkit.add(x, y)
    tail = slice(n - 100_000, n)
    assert torch.equal(out[tail], x[tail] + y[tail])
    assert torch.equal(out[:100_000], x[:100_000] + y[:100_000])


def test_torch_compile_fullgraph_traces_add(device):
    # add is a torch custom op: dynamo keeps it whole (no graph break), forward and backward.
    torch._dynamo.reset()
    x = torch.randn(5, 1, 7, device=device, requires_grad=True)
    y = torch.randn(3, 1, device=device, dtype=torch.float16, requires_grad=True)
    compiled = torch.compile(lambda a, b: tritonkit.add(a, b) * 2, fullgraph=True, backend="aot_eager")
    out = compiled(x, y)
    grad = torch.randn_like(out)
    ours = torch.autograd.grad(out, (x, y), grad)
    theirs = torch.autograd.grad((x + y) * 2, (x, y), grad)
    assert torch.equal(out, (x + y) * 2)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)


def test_custom_op_registrations(device):
    from tritonkit.ops.add import _ADD
    x = torch.randn(4, 9, device=device, requires_grad=True)
    y = torch.randn(9, device=device, requires_grad=True)
    torch.library.opcheck(_ADD.forward_op, (x, y))


def test_out_refuses_autograd_as_torch_does(device):
    # Writing into out= records no gradient, so torch refuses it while autograd is on.
    x = torch.randn(4, 5, device=device, requires_grad=True)
    y = torch.randn(4, 5, device=device)
    for args, out in (((x, y), torch.empty(4, 5, device=device)), ((y, x), torch.empty(4, 5, device=device)),
                      ((y, y), torch.empty(4, 5, device=device, requires_grad=True))):
        for fn in (torch.add, tritonkit.add):
            with pytest.raises(RuntimeError, match=r"add\(\): functions with out=\.\.\. arguments don't support "
                                                   "automatic differentiation"):
                fn(*args, out=out)
    with torch.no_grad():
        out = torch.empty(4, 5, device=device)
        assert tritonkit.add(x, y, out=out) is out and torch.equal(out, x + y)
