"""tritonkit.softmax against a float64 reference, with torch's own error as the yardstick."""

import pytest
import torch

import tritonkit
from tritonkit._launch import record_launches
from tritonkit.ops import softmax as softmax_module
from tritonkit.ops.softmax import softmax_reference
from _tolerance import assert_close_to_reference, eps_for
from conftest import ON_GPU

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
LONG = softmax_module.MAX_FUSED_COLS + 1   # the first row length that takes the split path (few rows)

# (shape, dim, why)
SHAPES = [
    ((1, 1), -1),            # one element
    ((1, 781), -1),          # one odd row
    ((37, 1000), -1),        # several rows per program, masked columns
    ((5, 1024), -1),         # a power-of-two row: no column mask
    ((3, 7, 65), 1),         # softmax along a middle dim (strided rows)
    ((9, 4), 0),             # along dim 0
    ((2, LONG), -1),         # just past the one-pass limit: chunked rows
    ((2, 3 * softmax_module.CHUNK_COLS + 5), -1),
] + ([((4096, 4096), -1), ((3, 1_000_003), -1), ((1823, 781), 0)] if ON_GPU else [])


def check_forward(x, dim):
    out = tritonkit.softmax(x, dim)
    assert out.dtype == x.dtype and out.shape == x.shape
    assert_close_to_reference(out, softmax_reference(x, dim), torch.softmax(x, dim))
    return out


def check_backward(x, dim):
    x = x.detach().requires_grad_()
    grad = torch.randn_like(x)
    (ours,) = torch.autograd.grad(tritonkit.softmax(x, dim), x, grad)
    (theirs,) = torch.autograd.grad(torch.softmax(x, dim), x, grad)
    x64 = x.detach().double().requires_grad_()
    (ref,) = torch.autograd.grad(torch.softmax(x64, dim), x64, grad.double())
    assert_close_to_reference(ours, ref, theirs, eps=eps_for(x.dtype, gradient=True), what="grad")
    # The backward kernel alone, fed torch's own forward output: the tight bound in every dtype.
    y = torch.softmax(x.detach(), dim)
    alone = softmax_module.softmax_bwd(grad, y, dim)
    assert_close_to_reference(alone, ref, torch._softmax_backward_data(grad, y, dim, x.dtype),
                              what="backward kernel")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", SHAPES)
def test_forward(shape, dim, dtype, device):
    check_forward(torch.randn(shape, device=device, dtype=dtype) * 3, dim)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", SHAPES)
def test_backward(shape, dim, dtype, device):
    check_backward(torch.randn(shape, device=device, dtype=dtype) * 3, dim)


@pytest.mark.parametrize("offset", range(1, 16))
def test_views_at_odd_offsets(offset, device):
    # The one-pass rows at every offset; the chunked rows (seconds each under the interpreter)
    # at offsets 1-4, every 16-byte alignment class of a float32 view (the others repeat them).
    for n_cols in (301, LONG) if offset <= 4 else (301,):
        buf = torch.randn(3 * n_cols + offset, device=device)
        x = buf[offset:offset + 3 * n_cols].view(3, n_cols)
        check_forward(x, -1)
        check_backward(x, -1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_transposed_and_sliced(dtype, device):
    base = torch.randn(130, 67, device=device, dtype=dtype)
    for x, dim in [(base.t(), -1), (base.t(), 0), (base[::3, 1::2], -1), (base[5:, :60:7].t(), 1)]:
        check_forward(x, dim)
        check_backward(x, dim)
    long = torch.randn(2 * LONG, 3, device=device, dtype=dtype)[::2].t()  # long strided rows
    check_forward(long, -1)
    check_backward(long, -1)


def test_many_row_dims(device):
    # Five dims, non-mergeable after the permute: the contiguous-copy fallback.
    x = torch.randn(3, 4, 5, 6, 7, device=device).permute(4, 2, 0, 3, 1)[:, ::2]
    check_forward(x, 2)
    check_backward(x, 2)


@pytest.mark.parametrize("n_cols", [10, LONG])
def test_minus_infinity(n_cols, device):
    x = torch.randn(4, n_cols, device=device)
    x[0] = -float("inf")                     # whole row: NaN, as torch gives
    x[1, : n_cols // 2] = -float("inf")      # half a row, including whole chunks
    x[2, ::3] = -float("inf")
    out = tritonkit.softmax(x, -1)
    torch.testing.assert_close(out, torch.softmax(x, -1), equal_nan=True)
    assert torch.isnan(out[0]).all()


@pytest.mark.parametrize("path", ["held", "split"])
def test_each_long_row_path(path, monkeypatch, device):
    # The same rows held whole by one program, and split into chunks.
    x = torch.randn(5, LONG + 3, device=device)
    grad = torch.randn_like(x)
    if path == "held":
        monkeypatch.setattr(softmax_module, "MAX_FUSED_COLS", 1 << 20)
    elif path == "split":
        # The smallest lag the schedule allows (one row of chunks): stats and applies interleave.
        monkeypatch.setattr(softmax_module, "LAG_BYTES", 1)
    softmax_module._row_config.cache_clear()
    try:
        with record_launches() as launches:
            out = softmax_module.softmax_fwd(x, -1)
            dx = softmax_module.softmax_bwd(grad, out, -1)
    finally:
        softmax_module._row_config.cache_clear()
    if path == "split":
        assert [launch.name for launch in launches] == ["softmax_fwd_chunks", "softmax_bwd_chunks"]
    else:
        assert [launch.name for launch in launches] == ["softmax_fwd", "softmax_bwd"]
    assert_close_to_reference(out, softmax_reference(x, -1), torch.softmax(x, -1))
    y = torch.softmax(x, -1)
    ref = torch._softmax_backward_data(grad.double(), y.double(), -1, torch.float64)
    assert_close_to_reference(softmax_module.softmax_bwd(grad, y, -1), ref,
                              torch._softmax_backward_data(grad, y, -1, x.dtype), what="backward kernel")
    assert dx.shape == x.shape


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n_cols", [300, 512])
def test_reload_path(dtype, n_cols, monkeypatch, device):
    # 16-bit rows held in their own dtype and read twice (RELOAD), here switched on for short
    # rows: forward, backward, a view at an odd offset, -inf and NaN entries, a strided dim.
    monkeypatch.setattr(softmax_module, "RELOAD_COLS", 1)
    softmax_module._row_config.cache_clear()
    try:
        base = torch.randn(7 * n_cols + 3, device=device, dtype=dtype)
        x = base[3:].view(7, n_cols)
        x[1, ::5] = -float("inf")
        x[4, n_cols // 3] = float("nan")   # a NaN row, as torch gives
        with record_launches() as launches:
            check_forward(x, -1)
            check_backward(x, -1)
            check_forward(x.t(), 0)
        assert launches and all(launch.constexprs["RELOAD"] for launch in launches)
        assert {launch.name for launch in launches} == {"softmax_fwd", "softmax_bwd"}
    finally:
        softmax_module._row_config.cache_clear()


def test_zero_dim_and_empty(device):
    scalar = torch.randn((), device=device)
    torch.testing.assert_close(tritonkit.softmax(scalar, 0), torch.softmax(scalar, 0))
    empty = torch.randn(0, 5, device=device)
    assert tritonkit.softmax(empty, -1).shape == (0, 5)


def test_bad_input(device):
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        tritonkit.softmax([1.0, 2.0])
    with pytest.raises(TypeError, match="x has dtype int64"):
        tritonkit.softmax(torch.arange(4, device=device))
    with pytest.raises(ValueError, match="dim=2 is out of range"):
        tritonkit.softmax(torch.randn(3, 4, device=device), 2)
    with pytest.raises(TypeError, match="dim must be an int"):
        tritonkit.softmax(torch.randn(3, 4, device=device), 1.0)


def test_every_element_written(device):
    x = torch.randn(3, 999, device=device)
    out = torch.full_like(x, float("nan"))
    softmax_module._launch_rows(x, x, out, 1, backward=False)
    assert not torch.isnan(out).any()


@pytest.mark.gpu
def test_million_element_rows_bf16():
    check_forward(torch.randn(4, 1_048_576 + 7, device="cuda", dtype=torch.bfloat16), -1)


def test_torch_compile_fullgraph_traces_softmax(device):
    # softmax is a torch custom op: dynamo keeps it whole (no graph break), forward and backward.
    torch._dynamo.reset()
    x = torch.randn(6, 333, device=device, requires_grad=True)
    compiled = torch.compile(lambda t: tritonkit.softmax(t, -1) * 3, fullgraph=True, backend="aot_eager")
    out = compiled(x)
    grad = torch.randn_like(out)
    (ours,) = torch.autograd.grad(out, x, grad)
    (theirs,) = torch.autograd.grad(torch.softmax(x, -1) * 3, x, grad)
    torch.testing.assert_close(out, torch.softmax(x, -1) * 3)
    torch.testing.assert_close(ours, theirs)


def test_custom_op_registrations(device):
    x = torch.randn(3, 5, 7, device=device, requires_grad=True)
    torch.library.opcheck(softmax_module._SOFTMAX.forward_op, (x, 1))
    y = torch.softmax(x.detach(), 1)
    torch.library.opcheck(softmax_module._SOFTMAX.backward_op, (torch.randn_like(y), y, 1))
