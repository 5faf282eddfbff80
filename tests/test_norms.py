"""tritonkit.rms_norm and tritonkit.layer_norm (and their modules) against float64
references, with torch's own error in the same dtype as the yardstick: forward, every
gradient (x, weight, bias, residual, and the gradient reaching h), odd sizes and layouts."""

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import tritonkit
from tritonkit import _counters
from tritonkit.ops.norms import _rows, layer_norm_reference, rms_norm_reference
from tritonkit.ops.norms._kernels import _finish_sums
from tritonkit.ops.norms.layer_norm import _LAYER_NORM
from tritonkit.ops.norms.rms_norm import _RMS_NORM
from tritonkit.registry._inputs import offset_view
from _tolerance import assert_close_to_reference, eps_for
from conftest import ON_GPU

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
FWD_LONG = _rows.MAX_FUSED_COLS["fwd"] + 1   # forward and backward both walk the row in chunks
BWD_LONG = _rows.MAX_FUSED_COLS["bwd"] + 1   # forward holds the row whole, backward chunks it

# (rows, hidden): why
SIZES = [
    ((3, 1)),           # hidden 1: LayerNorm's output is exactly the bias
    ((4, 2)),           # hidden 2: LayerNorm's xhat is +-1 up to eps, its dx eps-sized by cancellation
    ((9, 781)),         # a prime: masked columns, several rows a program, programs loop
    ((2, 3, 64)),       # short power-of-two rows packed many to a program, 3-d x
] + ([(8192, 4096), (4, 2048, 4096), (1000, 65536), (5, 131073)] if ON_GPU else [])
LONG = [
    ((3, BWD_LONG)),    # just past the backward's one-chunk limit
    ((2, FWD_LONG)),    # just past the forward's one-chunk limit: both walk chunks
]


def _poison(device, nbytes=1 << 22):
    """Fill memory the allocator hands out next with NaN, so an output element a kernel
    forgets to write shows up instead of reading as a lucky zero."""
    torch.full((nbytes // 4,), float("nan"), device=device)


def _call(norm, x, weight, bias, residual, eps, weight_offset):
    if norm == "rms":
        return tritonkit.rms_norm(x, weight, eps, residual=residual, weight_offset=weight_offset)
    return tritonkit.layer_norm(x, weight, bias, eps, residual=residual)


def _reference(norm, x, weight, bias, residual, eps, weight_offset, upcast):
    if norm == "rms":
        return rms_norm_reference(x, weight, eps, residual=residual, weight_offset=weight_offset, upcast=upcast)
    return layer_norm_reference(x, weight, bias, eps, residual=residual, upcast=upcast)


def check(norm, x, *, weight=None, bias=None, residual=None, eps=1e-5, weight_offset=0.0, backward=True):
    """Forward and gradients of every tensor input (random upstream gradients on y and h)
    against the float64 reference, relative to torch's eager composition in x's dtype."""
    bias = bias if norm == "layer" else None
    inputs = {"x": x, "weight": weight, "bias": bias, "residual": residual}
    present = {k: v for k, v in inputs.items() if v is not None}

    def run(fn, cast):
        leaves = {k: cast(v).detach().requires_grad_(backward) for k, v in present.items()}
        args = [leaves.get(k) for k in inputs]
        out = fn(*args, eps, weight_offset)
        return leaves, (out if isinstance(out, tuple) else (out,))

    _poison(x.device)
    leaves, ours = run(lambda *a: _call(norm, *a), lambda t: t)
    _, ref = run(lambda *a: _reference(norm, *a, upcast=True), lambda t: t.double())
    _, theirs = run(lambda *a: _reference(norm, *a, upcast=False), lambda t: t)
    assert ours[0].dtype == x.dtype and ours[0].shape == x.shape and ours[0].is_contiguous()
    for name, a, r, t in zip(("y", "h"), ours, ref, theirs):
        assert_close_to_reference(a, r, t, what=name)
    if residual is not None:
        assert ours[1].dtype == x.dtype
        if x.dtype != torch.bfloat16 or ON_GPU:  # the interpreter's bf16 casts truncate
            assert torch.equal(ours[1], x + residual), "h must be bitwise torch's x + residual"
    if not backward:
        return
    upstream = [torch.randn_like(o) for o in ours]

    _poison(x.device)
    got = torch.autograd.grad(ours, list(leaves.values()), upstream)
    ref_leaves, ref = run(lambda *a: _reference(norm, *a, upcast=True), lambda t: t.double())
    want = torch.autograd.grad(ref, list(ref_leaves.values()), [u.double() for u in upstream])
    same_leaves, theirs = run(lambda *a: _reference(norm, *a, upcast=False), lambda t: t)
    same = torch.autograd.grad(theirs, list(same_leaves.values()), upstream)
    dx_eps = eps_for(x.dtype, gradient=True)
    if norm == "rms" and x.shape[-1] == 1:
        # A row of one element: y = h / sqrt(h^2 + eps) * w, so dx = g * w * (1 - xhat^2) * rstd
        # with 1 - xhat^2 = eps / (h^2 + eps). Any float32 evaluation of the general formula
        # g - xhat * mean(g * xhat) (ours and torch's autograd alike) subtracts two terms of
        # size |g| to leave one of size |g| * eps / h^2: one unit roundoff u of the terms
        # becomes a relative error of u * h^2 / eps in dx. Which of the two lands nearer on
        # a handful of elements is luck, so both are allowed that one amplified roundoff.
        h = x.double() if residual is None else x.double() + residual.double()
        dx_eps = max(dx_eps, 2.0 ** -24 * h.square().max().item() / eps)
    if norm == "layer" and x.shape[-1] == 2:
        # A row of two elements: xhat = +-sqrt(var / (var + eps)), so the general formula
        # g - mean(g) - xhat * mean(g * xhat) cancels three terms of size |g| down to
        # |g| * eps / (var + eps): a few float32 roundoffs of those terms (up to 8 allowed)
        # become a relative error of about u * var / eps in dx, for ours and torch's alike.
        h = x.double() if residual is None else x.double() + residual.double()
        dx_eps = max(dx_eps, 8 * 2.0 ** -24 * h.var(-1, unbiased=False).max().item() / eps)
    for name, g, w, s in zip(present, got, want, same):
        assert g.dtype == present[name].dtype and g.shape == present[name].shape, name
        tol = dx_eps if name in ("x", "residual") else eps_for(g.dtype, gradient=True)
        assert_close_to_reference(g, w, s, eps=tol, what=f"d{name}")


def _params(hidden, dtype, device, bias=True):
    w = torch.randn(hidden, device=device, dtype=dtype)
    return w, (torch.randn(hidden, device=device, dtype=dtype) if bias else None)


def check_size(norm, shape, with_residual, dtype, device):
    x = torch.randn(shape, device=device, dtype=dtype) * 2 + 0.5
    w, b = _params(shape[-1], dtype, device)
    residual = torch.randn_like(x) if with_residual else None
    check(norm, x, weight=w, bias=b, residual=residual)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_residual", [False, True])
@pytest.mark.parametrize("shape", SIZES)
@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_sizes(norm, shape, with_residual, dtype, device):
    if ON_GPU and shape[-1] > 65536 and dtype != torch.bfloat16:
        pytest.skip("the longest rows once, in bf16")
    check_size(norm, shape, with_residual, dtype, device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", LONG)
@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_long_rows(norm, shape, dtype, device):
    # Rows walked in chunks (kept to a few cases: slow under the interpreter).
    check_size(norm, shape, True, dtype, device)


def _layouts(device, dtype, hidden=97):
    """x views the kernels must read in place (or copy, for leading dims that do not
    collapse to two): an odd element offset, rows with padding, a non-unit column stride,
    transposed leading dims, and leading dims in no mergeable order."""
    return {
        "odd offset": offset_view((6, hidden), dtype, device, 1),
        "padded rows": torch.randn(6, hidden + 5, device=device, dtype=dtype)[:, 3:hidden + 3],
        "column stride": torch.randn(hidden, 6, device=device, dtype=dtype).t(),
        "transposed batch": torch.randn(5, 3, hidden, device=device, dtype=dtype).transpose(0, 1),
        "three row dims": torch.randn(2, 3, 4, hidden, device=device, dtype=dtype).permute(1, 0, 2, 3),
        "expanded rows": torch.randn(1, hidden, device=device, dtype=dtype).expand(4, hidden),
    }


@pytest.mark.parametrize("layout", list(_layouts("cpu", torch.float32)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_layouts(norm, dtype, layout, device):
    x = _layouts(device, dtype)[layout]
    w, b = _params(x.shape[-1], dtype, device)
    # The residual in a different layout from x (odd offset) so both row walks are exercised.
    residual = offset_view(x.shape, dtype, device, 3)
    check(norm, x, weight=w, bias=b, residual=residual)
    check(norm, x, weight=w, bias=b)


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_upstream_gradient_layouts(norm, device):
    # Gradients arriving as views: expanded (what .sum() sends back) and transposed.
    x = torch.randn(3, 5, 40, device=device, requires_grad=True)
    w = torch.randn(40, device=device, requires_grad=True)
    r = torch.randn(3, 5, 40, device=device, requires_grad=True)
    y, h = _call(norm, x, w, None, r, 1e-5, 0.0)
    dy = torch.randn(5, 3, 40, device=device).transpose(0, 1)
    dh = torch.ones(1, 1, 1, device=device).expand(3, 5, 40)
    got = torch.autograd.grad((y, h), (x, w, r), (dy, dh))
    x64, w64, r64 = (t.detach().double().requires_grad_() for t in (x, w, r))
    y64, h64 = _reference(norm, x64, w64, None, r64, 1e-5, 0.0, upcast=True)
    want = torch.autograd.grad((y64, h64), (x64, w64, r64), (dy.double(), dh.double()))
    for g, ref in zip(got, want):
        torch.testing.assert_close(g, ref.float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_weight_variants(dtype, device):
    x = torch.randn(7, 300, device=device, dtype=dtype)
    w = torch.randn(300, device=device, dtype=dtype) * 0.1
    check("rms", x)                                           # no weight
    check("rms", x, weight=w, weight_offset=1.0)              # Gemma's (1 + w)
    check("rms", x, weight=w, weight_offset=1.0, residual=torch.randn_like(x), eps=1e-6)
    # float32 weights with 16-bit activations (autocast-style training): x's dtype out.
    check("rms", x, weight=w.float(), residual=torch.randn_like(x))


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_affine_variants(dtype, device):
    x = torch.randn(7, 300, device=device, dtype=dtype) * 3 + 2   # a mean far from 0
    w, b = _params(300, dtype, device)
    check("layer", x)                                          # neither
    check("layer", x, weight=w)                                # no bias
    check("layer", x, bias=b, residual=torch.randn_like(x))    # bias without weight
    check("layer", x, weight=w.float(), bias=b.float())        # float32 affine, 16-bit x


def test_mixed_dtypes_match_torch_native(device):
    # float32 weight and bias with bf16 x: the result has x's dtype (as F.rms_norm gives, and
    # F.layer_norm where it takes the mix: torch 2.11 refuses it), computed in float32 and
    # rounded once. Torch's yardstick is therefore its float32 norm rounded to bf16, a form
    # every torch version accepts.
    x = torch.randn(4, 64, device=device, dtype=torch.bfloat16)
    w, b = torch.randn(64, device=device), torch.randn(64, device=device)
    cases = {
        "rms_norm": (tritonkit.rms_norm(x, w, 1e-6), rms_norm_reference(x, w, 1e-6),
                     F.rms_norm(x.float(), (64,), w, 1e-6)),
        "layer_norm": (tritonkit.layer_norm(x, w, b), layer_norm_reference(x, w, b),
                       F.layer_norm(x.float(), (64,), w, b)),
    }
    for name, (ours, ref, theirs) in cases.items():
        assert ours.dtype == torch.bfloat16, name
        assert_close_to_reference(ours, ref, theirs.to(torch.bfloat16), what=name)


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_weight_gradients_are_deterministic(norm, device):
    # Partial sums per program, then a fixed-order sum: the same bits every time.
    x = torch.randn(37, 200, device=device, requires_grad=True)
    w = torch.randn(200, device=device, requires_grad=True)
    dy = torch.randn(37, 200, device=device)
    runs = [torch.autograd.grad(_call(norm, x, w, None, None, 1e-5, 0.0), (x, w), dy) for _ in range(3)]
    assert all(torch.equal(a, b) for run in runs[1:] for a, b in zip(run, runs[0]))


def _counters_left_at_zero(device):
    assert all(not c.any() for c in _counters._CACHE.values() if c.device.type == device.type)


@pytest.mark.parametrize("programs", [1, 3, 5, 17])
@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_weight_gradients_over_program_counts(norm, programs, monkeypatch, device):
    # dW and dB are summed in the backward's one launch: in groups (the last program of a
    # group to finish sums its group's partial rows), then over groups. Program counts that
    # make one group, several, and a last group short of members, each run twice in a row
    # (the second finds the counters the first left: at zero) and on both row paths.
    monkeypatch.setattr(_rows, "backward_programs", lambda device, n_blocks, num_warps: min(n_blocks, programs))
    _rows.bwd_plan.cache_clear()  # plans hold the program count
    try:
        _over_program_counts(norm, programs, device)
    finally:
        _rows.bwd_plan.cache_clear()


def _over_program_counts(norm, programs, device):
    for shape in [(75, 600)] + ([(3, BWD_LONG)] if programs == 3 else []):
        x = torch.randn(shape, device=device, requires_grad=True)
        w, b = (torch.randn(shape[-1], device=device, requires_grad=True) for _ in range(2))
        dy = torch.randn(shape, device=device)
        runs = [torch.autograd.grad(_call(norm, x, w, b, None, 1e-5, 0.0), (x, w, b) if norm == "layer" else (x, w), dy)
                for _ in range(2)]
        assert all(torch.equal(a, b) for a, b in zip(*runs))
        _counters_left_at_zero(device)
        check(norm, x.detach(), weight=w.detach(), bias=b.detach())
        if norm == "layer":  # a bias without weight: dB alone
            check(norm, x.detach(), bias=b.detach())
        _counters_left_at_zero(device)


@triton.jit
def _finish_in_order(order_ptr, values_ptr, part_ptr, dw_ptr, db_ptr, count_ptr, n_programs, n_cols,
                     GROUP: tl.constexpr, SUM_COLS: tl.constexpr, BLOCK: tl.constexpr):
    # Program i plays the backward's program order[i]: it writes that program's dW and dB
    # partial rows (from values), then finishes as the backward does. The interpreter runs
    # programs one after another, so `order` is the order in which they finish.
    pid = tl.load(order_ptr + tl.program_id(0))
    part_rows = n_programs + tl.cdiv(n_programs, GROUP)
    cols = tl.arange(0, BLOCK)
    ok = cols < n_cols
    for s in range(2):
        row = tl.load(values_ptr + (s * n_programs + pid) * n_cols + cols, mask=ok)
        tl.store(part_ptr + (s * part_rows + pid) * n_cols + cols, row, mask=ok)
    _finish_sums(part_ptr, part_ptr + part_rows * n_cols, dw_ptr, db_ptr, count_ptr, pid, n_programs, n_cols,
                 True, True, GROUP, SUM_COLS)


@pytest.mark.parametrize("n_programs", [7, 11])
def test_partial_sums_do_not_depend_on_which_program_finishes_last(n_programs, device):
    # Whichever program takes a group's or the last ticket, the sums are added in one fixed
    # order: the same bits for every finishing order.
    n_cols = 45
    group, sum_cols = _rows.sum_plan(n_programs, n_cols, 4)
    values = torch.randn(2, n_programs, n_cols, device=device)
    orders = [torch.arange(n_programs), torch.arange(n_programs).flip(0)]
    orders += [torch.randperm(n_programs) for _ in range(3)]
    results = []
    for order in orders:
        part = torch.full((2, n_programs + -(-n_programs // group), n_cols), float("nan"), device=device)
        dw, db = (torch.full((n_cols,), float("nan"), device=device, dtype=torch.float16) for _ in range(2))
        counters = _counters.zeroed_counters(torch.device(device))
        _finish_in_order[(n_programs,)](order.to(device=device, dtype=torch.int32), values, part, dw, db, counters,
                                        n_programs, n_cols, GROUP=group, SUM_COLS=sum_cols, BLOCK=64)
        assert not counters.any()
        results.append((dw, db))
    for dw, db in results:
        assert torch.equal(dw, results[0][0]) and torch.equal(db, results[0][1])
    torch.testing.assert_close(results[0][0].float(), values[0].sum(0), atol=1e-2, rtol=1e-3)
    torch.testing.assert_close(results[0][1].float(), values[1].sum(0), atol=1e-2, rtol=1e-3)


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_empty_inputs(norm, device):
    x = torch.randn(0, 16, device=device, requires_grad=True)
    w = torch.randn(16, device=device, requires_grad=True)
    y = _call(norm, x, w, None, None, 1e-5, 0.0)
    assert y.shape == (0, 16)
    dx, dw = torch.autograd.grad(y, (x, w), torch.randn_like(y))
    assert dx.shape == (0, 16) and torch.equal(dw, torch.zeros_like(w))


def test_zero_rows_without_eps_follow_torch(device):
    # A zero row with eps = 0 is 0 * inf = NaN in torch; the same here, and nowhere else.
    x = torch.randn(3, 8, device=device)
    x[1] = 0
    ours = tritonkit.rms_norm(x, None, 0.0)
    assert torch.equal(torch.isnan(ours), torch.isnan(F.rms_norm(x, (8,), None, 0.0)))


def test_torch_compile_fullgraph(device):
    # Both norms are custom ops: dynamo keeps them whole, forward and backward.
    torch._dynamo.reset()

    def block(x, r, w, b):
        y, h = tritonkit.rms_norm(x, w, 1e-6, residual=r, weight_offset=1.0)
        return tritonkit.layer_norm(y * 2, w, b, residual=h)

    leaves = [torch.randn(4, 9, 96, device=device, requires_grad=True) for _ in range(2)]
    leaves += [torch.randn(96, device=device, requires_grad=True) for _ in range(2)]
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    outs = compiled(*leaves)
    eager = block(*leaves)
    ups = [torch.randn_like(o) for o in outs]
    got = torch.autograd.grad(outs, leaves, ups) + outs
    for got, want in zip(got, torch.autograd.grad(eager, leaves, ups) + eager):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("op", ["rms", "layer"])
def test_custom_op_registrations(op, device):
    x = torch.randn(3, 5, 33, device=device, requires_grad=True)
    w = torch.randn(33, device=device, requires_grad=True)
    r = torch.randn(3, 5, 33, device=device, requires_grad=True)
    if op == "rms":
        torch.library.opcheck(_RMS_NORM.forward_op, (x, w, r, 1e-6, 1.0))
        torch.library.opcheck(_RMS_NORM.forward_op, (x, None, None, 1e-6, 0.0))
    else:
        torch.library.opcheck(_LAYER_NORM.forward_op, (x, w, w, r, 1e-5))
        torch.library.opcheck(_LAYER_NORM.forward_op, (x, None, w, None, 1e-5))


# ---------------------------------------------------------------------------------------
# Modules
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [8, (3, 8)])
@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm_module_matches_torch_and_loads_its_checkpoints(shape, affine, device):
    theirs = torch.nn.RMSNorm(shape, eps=1e-6, elementwise_affine=affine, device=device)
    ours = tritonkit.nn.RMSNorm(shape, eps=1e-6, elementwise_affine=affine, device=device)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    if affine:
        with torch.no_grad():
            theirs.weight.normal_()
    ours.load_state_dict(theirs.state_dict())       # torch -> tritonkit
    x = torch.randn(2, 5, *((shape,) if isinstance(shape, int) else shape), device=device)
    torch.testing.assert_close(ours(x), theirs(x))
    theirs.load_state_dict(ours.state_dict())       # tritonkit -> torch
    # eps=None means the dtype's epsilon, as torch's module says.
    torch.testing.assert_close(tritonkit.nn.RMSNorm(shape, device=device)(x), torch.nn.RMSNorm(shape, device=device)(x))


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_module_matches_torch_and_loads_its_checkpoints(bias, affine, device):
    theirs = torch.nn.LayerNorm((4, 6), elementwise_affine=affine, bias=bias, device=device)
    ours = tritonkit.nn.LayerNorm((4, 6), elementwise_affine=affine, bias=bias, device=device)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_()
    ours.load_state_dict(theirs.state_dict())
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(3, 4, 6, device=device, requires_grad=True)
    torch.testing.assert_close(ours(x), theirs(x))
    up = torch.randn(3, 4, 6, device=device)
    params = list(ours.parameters())
    got = torch.autograd.grad(ours(x), [x, *params], up)
    want = torch.autograd.grad(theirs(x), [x, *theirs.parameters()], up)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_modules_fuse_the_residual(device):
    norm = tritonkit.nn.RMSNorm(32, weight_offset=1.0, device=device)
    assert torch.equal(norm.weight, torch.zeros(32, device=device))  # Gemma: scale starts at 1
    x, r = torch.randn(2, 3, 32, device=device), torch.randn(2, 3, 32, device=device)
    y, h = norm(x, r)
    torch.testing.assert_close(h, x + r)
    torch.testing.assert_close(y, F.rms_norm(x + r, (32,), eps=torch.finfo(x.dtype).eps))
    y, h = tritonkit.nn.LayerNorm(32, device=device)(x, r)
    torch.testing.assert_close(y, F.layer_norm(x + r, (32,)))
    with pytest.raises(ValueError, match="x has shape"):
        norm(torch.randn(2, 31, device=device))


# ---------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------

def test_bad_input_names_the_argument(device):
    x = torch.randn(4, 16, device=device)
    w = torch.randn(16, device=device)
    cases = [
        (TypeError, "x must be a torch.Tensor", lambda: tritonkit.rms_norm([1.0], w)),
        (TypeError, "x has dtype int32", lambda: tritonkit.rms_norm(x.int(), w)),
        (ValueError, "x must have at least one dim", lambda: tritonkit.layer_norm(x[0, 0], None)),
        (ValueError, r"weight has shape \(15,\)", lambda: tritonkit.rms_norm(x, w[:15])),
        (ValueError, r"weight has shape \(4, 16\)", lambda: tritonkit.rms_norm(x, x)),
        (ValueError, r"bias has shape \(8,\)", lambda: tritonkit.layer_norm(x, w, w[:8])),
        (TypeError, "bias has dtype int64", lambda: tritonkit.layer_norm(x, w, w.long())),
        (ValueError, "residual has shape", lambda: tritonkit.rms_norm(x, w, residual=x[:2])),
        (TypeError, "residual has dtype float16", lambda: tritonkit.layer_norm(x, w, residual=x.half())),
        (ValueError, "eps must be finite and >= 0", lambda: tritonkit.rms_norm(x, w, -1e-6)),
        (ValueError, "eps must be finite and >= 0", lambda: tritonkit.layer_norm(x, w, None, float("nan"))),
        (TypeError, "eps must be a float", lambda: tritonkit.rms_norm(x, w, "1e-6")),
        (ValueError, "weight_offset .* needs a weight", lambda: tritonkit.rms_norm(x, None, weight_offset=1.0)),
        (TypeError, "weight_offset must be a float", lambda: tritonkit.rms_norm(x, w, weight_offset=None)),
    ]
    for error, message, call in cases:
        with pytest.raises(error, match=message):
            call()
    # The same checks while torch.compile traces (the custom op's own fake does not check).
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"weight has shape \(15,\)"):
        torch.compile(lambda a, b: tritonkit.rms_norm(a, b), fullgraph=True, backend="aot_eager")(x, w[:15])


@pytest.mark.gpu
def test_int32_overflowing_offsets(device):
    # 2^31 + elements: row offsets must be int64 in both passes.
    rows, hidden = 65537, 32768
    x = torch.randn(rows, hidden, device=device, dtype=torch.bfloat16)
    w = torch.randn(hidden, device=device, dtype=torch.bfloat16)
    y = tritonkit.rms_norm(x, w)
    for i in (0, rows // 2, rows - 1):
        torch.testing.assert_close(y[i], rms_norm_reference(x[i:i + 1], w, upcast=False)[0], atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("is_rms", [True, False])
def test_forward_rule_bounds_the_elements_a_thread_holds(is_rms):
    # Every width a forward program holds whole: its warps cover the row with at most
    # MAX_PER_THREAD_FWD elements a thread (LayerNorm at 16384 columns on 8 warps held 64 in 148
    # registers, one block an SM), and stay within a block's 32 warps.
    cap = _rows.MAX_PER_THREAD_FWD["rms" if is_rms else "layer"]
    for n_cols in [1, 3, 512, 1000, 4096, 8191, 8192, 12000, _rows.MAX_FUSED_COLS["fwd"]]:
        block_m, block_n, one_chunk, num_warps = _rows.row_config(64, n_cols, "fwd", is_rms)
        assert one_chunk and block_n >= n_cols
        assert 4 <= num_warps <= 32 and block_m * block_n <= 32 * num_warps * max(cap, _rows.PER_THREAD["fwd"])
    assert _rows.row_config(64, 16384, "fwd", False)[3] == 16
