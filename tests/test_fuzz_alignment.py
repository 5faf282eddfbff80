"""Property-based fuzzing of every public op over layouts that break alignment.

Each example builds its inputs as views into a larger buffer: a random element offset
0..15 (so the data pointer sits anywhere relative to a 16-byte boundary), a random
order of dimensions in memory (transposes), random step slices, and sizes chosen to hit
edges (1, primes, one past a block). Every result must match a float64 reference within
the error torch itself makes in the same dtype (`_tolerance`), and nothing may raise.

Through the interpreter in CI with a bounded number of examples; on the GPU machine the
kernels run compiled, and TRITONKIT_FUZZ_EXAMPLES=500 gives a longer search.
"""

from __future__ import annotations

import math
import os
import zlib

import pytest

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tritonkit
from tritonkit.ops import softmax as softmax_module
from _tolerance import assert_close_to_reference, eps_for, relative_error
from conftest import ON_GPU



def fuzz(examples: int):
    """Hypothesis settings: `examples` per test in CI (sized so the file runs in about a
    minute through the interpreter), or TRITONKIT_FUZZ_EXAMPLES for every test. CI runs
    a fixed sequence of examples (derandomize) so that a red run is reproducible."""
    examples = int(os.environ.get("TRITONKIT_FUZZ_EXAMPLES", examples))
    return settings(max_examples=examples, deadline=None, derandomize=bool(os.environ.get("CI")),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


FLOATS = [torch.float32, torch.float16, torch.bfloat16]
HALVES = [torch.float16, torch.bfloat16]
# Edge sizes: 1, small primes, powers of two and one past them (a block and one more).
EDGE = [1, 2, 3, 7, 13, 16, 31, 64, 127, 128, 129]
BLOCK_EDGE = [781, 1000, 1021, 1024, 1025, 4096, 4097] + ([65537, 1 << 20] if ON_GPU else [])
MAX_ELEMENTS = (1 << 24) if ON_GPU else 40_000
DEVICE = tritonkit.default_device()


def fuzz_eps(dtype: torch.dtype, gradient: bool = False) -> float:
    """`_tolerance.eps_for`, widened for bf16 under the interpreter to one bf16 ulp (2**-7):
    its fp32 -> bf16 casts truncate, and a truncated result is off by up to one ulp per
    element. When the output is dominated by a few large entries (a peaked softmax row) the
    relative error of the whole tensor gets close to that bound (7.1e-3 seen for a 781-long
    row at 3x randn, where the result was bit-for-bit the truncated fp32 softmax)."""
    eps = eps_for(dtype, gradient=gradient)
    if dtype == torch.bfloat16 and tritonkit.INTERPRETED:
        eps = max(eps, 2.0 ** -7)
    return eps


def seed_from(case) -> None:
    """Tensor values follow from the example, so a failure hypothesis reports replays exactly."""
    torch.manual_seed(zlib.crc32(repr(case).encode()))


@st.composite
def layouts(draw, ndim: int):
    """How a tensor of `ndim` dims sits in memory: element offset, dim order, steps."""
    offset = draw(st.integers(0, 15))
    order = draw(st.permutations(range(ndim))) if ndim > 1 else [0]
    steps = [draw(st.sampled_from([1, 1, 1, 2, 3])) for _ in range(ndim)]
    return offset, list(order), steps


def make_view(shape, dtype, layout, scale: float = 1.0) -> torch.Tensor:
    """A random tensor of `shape` laid out as `layout` says, inside a larger buffer."""
    offset, order, steps = layout
    stored = [shape[d] * steps[i] for i, d in enumerate(order)]
    numel = 1
    for s in stored:
        numel *= s
    buffer = torch.randn(numel + offset + 15, device=DEVICE, dtype=torch.float32).to(dtype) * scale
    base = buffer[offset:offset + numel].view(stored)
    sliced = base[tuple(slice(None, None, step) for step in steps)]
    view = sliced.permute(*[order.index(d) for d in range(len(shape))])
    assert tuple(view.shape) == tuple(shape)
    return view


def describe(t: torch.Tensor) -> str:
    return (f"{str(t.dtype).removeprefix('torch.')} {tuple(t.shape)} strides {tuple(t.stride())} "
            f"offset {t.storage_offset()} ({t.data_ptr() % 16} B past 16)")


@st.composite
def shapes(draw, max_dims: int, last_sizes=EDGE + BLOCK_EDGE):
    ndim = draw(st.integers(1, max_dims))
    shape = [draw(st.sampled_from(EDGE)) for _ in range(ndim - 1)]
    shape.append(draw(st.sampled_from(last_sizes)))
    while len(shape) > 1 and _numel(shape) > MAX_ELEMENTS:
        shape.pop(0)
    if _numel(shape) > MAX_ELEMENTS:
        shape = [MAX_ELEMENTS]
    return draw(st.permutations(shape))


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


# ---------------------------------------------------------------------------------------
# add
# ---------------------------------------------------------------------------------------

@st.composite
def add_cases(draw):
    shape = list(draw(shapes(3)))
    x_dtype = draw(st.sampled_from(FLOATS))
    y_dtype = draw(st.sampled_from([x_dtype, x_dtype] + FLOATS))     # mostly the same dtype
    # y may broadcast: some dims of size 1, or fewer leading dims.
    y_shape = [1 if draw(st.booleans()) and draw(st.booleans()) else s for s in shape]
    y_shape = y_shape[draw(st.integers(0, len(y_shape) - 1)):]
    x_layout = draw(layouts(len(shape)))
    y_layout = draw(layouts(len(y_shape)))
    out_layout = draw(st.none() | layouts(len(shape)))
    return shape, x_dtype, y_dtype, y_shape, x_layout, y_layout, out_layout


@fuzz(150)
@given(case=add_cases())
def test_fuzz_add(case):
    seed_from(case)
    shape, x_dtype, y_dtype, y_shape, x_layout, y_layout, out_layout = case
    x = make_view(shape, x_dtype, x_layout)
    y = make_view(y_shape, y_dtype, y_layout)
    expected_dtype = torch.result_type(x, y)
    if out_layout is None:
        out = tritonkit.add(x, y)
    else:
        target = make_view(shape, expected_dtype, out_layout).fill_(float("nan"))   # poison
        out = tritonkit.add(x, y, out=target)
        assert out.data_ptr() == target.data_ptr()
    assert out.dtype == expected_dtype and tuple(out.shape) == tuple(shape)
    note = f"x {describe(x)}, y {describe(y)}"
    # torch's own x + y, and float64: add rounds once from float32 exactly as torch does.
    assert_close_to_reference(out, x.double() + y.double(), x + y, eps=fuzz_eps(out.dtype),
                              what=f"add: {note}")


# ---------------------------------------------------------------------------------------
# softmax, forward and backward
# ---------------------------------------------------------------------------------------

LONG_ROW = softmax_module.MAX_FUSED_COLS + 1      # the first length that takes the split path


@st.composite
def softmax_cases(draw):
    rows_last = EDGE + BLOCK_EDGE + [LONG_ROW]
    shape = list(draw(shapes(3, last_sizes=rows_last)))
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    if shape[dim] == LONG_ROW or _numel(shape) > MAX_ELEMENTS:
        # keep the split path cheap: a long row, and at most a couple of them
        shape = [min(s, 2) if i != dim % len(shape) else s for i, s in enumerate(shape)]
    dtype = draw(st.sampled_from(FLOATS))
    return shape, dim, dtype, draw(layouts(len(shape))), draw(layouts(len(shape)))


@fuzz(100)
@given(case=softmax_cases())
def test_fuzz_softmax_forward(case):
    seed_from(case)
    shape, dim, dtype, x_layout, _ = case
    x = make_view(shape, dtype, x_layout, scale=3.0)
    out = tritonkit.softmax(x, dim)
    assert out.dtype == dtype and out.shape == x.shape
    assert_close_to_reference(out, torch.softmax(x.double(), dim), torch.softmax(x, dim), eps=fuzz_eps(dtype),
                              what=f"softmax dim={dim}: x {describe(x)}")


@fuzz(100)
@given(case=softmax_cases())
def test_fuzz_softmax_backward(case):
    seed_from(case)
    shape, dim, dtype, y_layout, grad_layout = case
    # y = softmax(x) by torch, copied into a view with its own layout; so is the gradient.
    x = torch.randn(shape, device=DEVICE, dtype=torch.float32).to(dtype) * 3
    y = make_view(shape, dtype, y_layout).copy_(torch.softmax(x, dim))
    grad = make_view(shape, dtype, grad_layout)
    dx = softmax_module.softmax_bwd(grad, y, dim)
    y64, g64 = y.double(), grad.double()
    reference = y64 * (g64 - (y64 * g64).sum(dim, keepdim=True))
    torch_same = torch._softmax_backward_data(grad.contiguous(), y.contiguous(), dim, dtype)
    assert_close_to_reference(dx, reference, torch_same, eps=fuzz_eps(dtype, gradient=True),
                              what=f"softmax backward dim={dim}: y {describe(y)}, grad {describe(grad)}")


# ---------------------------------------------------------------------------------------
# attention, forward and backward (once its public function exists)
# ---------------------------------------------------------------------------------------

HAS_ATTENTION = hasattr(tritonkit, "attention")
needs_attention = pytest.mark.skipif(not HAS_ATTENTION, reason="tritonkit.attention has not landed")
SEQ = [1, 2, 7, 16, 17, 31, 33, 64, 65] + ([127, 129, 1000] if ON_GPU else [])


@st.composite
def attention_cases(draw):
    batch = draw(st.integers(1, 2))
    kv_heads = draw(st.integers(1, 2))
    heads = kv_heads * draw(st.sampled_from([1, 2]))
    nq, nk = draw(st.sampled_from(SEQ)), draw(st.sampled_from(SEQ))
    head_dim = draw(st.sampled_from([16, 24, 32, 40, 64] + ([128, 256] if ON_GPU else [])))
    dtype = draw(st.sampled_from(HALVES))
    causal = draw(st.booleans())
    layouts_ = [draw(layouts(4)) for _ in range(4)]          # q, k, v, upstream gradient
    # the head dim stays innermost more often than not, as in real projections
    layouts_ = [(off, order if draw(st.booleans()) else _head_dim_last(order), steps)
                for off, order, steps in layouts_]
    return batch, heads, kv_heads, nq, nk, head_dim, dtype, causal, layouts_


def _head_dim_last(order):
    return [d for d in order if d != 3] + [3]


def _attention_inputs(case):
    batch, heads, kv_heads, nq, nk, head_dim, dtype, causal, (lq, lk, lv, lg) = case
    q = make_view((batch, heads, nq, head_dim), dtype, lq)
    k = make_view((batch, kv_heads, nk, head_dim), dtype, lk)
    v = make_view((batch, kv_heads, nk, head_dim), dtype, lv)
    grad = make_view((batch, heads, nq, head_dim), dtype, lg)
    return q, k, v, grad, causal


def _attention_torch(q, k, v, causal, upcast: bool):
    from tritonkit.ops.attention import attention_reference
    return attention_reference(q, k, v, causal=causal, upcast=upcast)


def _attention_note(q, k, v, causal) -> str:
    return f"causal={causal} q {describe(q)} k {describe(k)} v {describe(v)}"


@needs_attention
@fuzz(40)
@given(case=attention_cases())
def test_fuzz_attention_forward(case):
    seed_from(case)
    q, k, v, _, causal = _attention_inputs(case)
    out = tritonkit.attention(q, k, v, causal=causal)
    assert out.dtype == q.dtype and out.shape == q.shape
    reference = _attention_torch(q, k, v, causal, upcast=True)
    assert_close_to_reference(out, reference, _attention_torch(q, k, v, causal, upcast=False),
                              eps=fuzz_eps(q.dtype), what=f"attention: {_attention_note(q, k, v, causal)}")


def _flash_recipe_grads(q, k, v, o, grad, causal):
    """float64 gradients computed the way a flash backward computes them: delta = rowsum(dO * O)
    from the forward output O as stored (rounded to q's dtype). Their gap to the exact gradient is
    the algorithm's own error in that dtype, which SDPA's unfused math does not share; on tiny,
    nearly one-hot rows it can be several times torch's error (dP - delta cancels)."""
    q, k, v, o, do = (t.detach().double() for t in (q, k, v, o, grad))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril(), float("-inf"))
    p = torch.softmax(s, -1)
    ds = p * (do @ v.transpose(-1, -2) - (do * o).sum(-1, keepdim=True))
    dq, dk, dv = ds @ k * scale, ds.transpose(-1, -2) @ q * scale, p.transpose(-1, -2) @ do
    fold = lambda t: t.view(t.shape[0], -1, group, *t.shape[2:]).sum(2)
    return dq, fold(dk), fold(dv)


@needs_attention
@fuzz(25)
@given(case=attention_cases())
def test_fuzz_attention_backward(case):
    seed_from(case)
    q, k, v, grad, causal = _attention_inputs(case)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = tritonkit.attention(*leaves, causal=causal)
    ours = torch.autograd.grad(out, leaves, grad)
    recipe = _flash_recipe_grads(q, k, v, out, grad, causal)
    same = [t.detach().requires_grad_() for t in (q, k, v)]
    theirs = torch.autograd.grad(_attention_torch(*same, causal, upcast=False), same, grad)
    wide = [t.detach().double().requires_grad_() for t in (q, k, v)]
    reference = torch.autograd.grad(_attention_torch(*wide, causal, upcast=False), wide, grad.double())
    note = _attention_note(q, k, v, causal)
    for name, a, ref, b, c in zip(("dq", "dk", "dv"), ours, reference, theirs, recipe):
        # The yardstick is the larger of torch's error and the flash recipe's own error.
        yardstick = max((b, c), key=lambda t: relative_error(t, ref))
        assert_close_to_reference(a, ref, yardstick, eps=fuzz_eps(q.dtype, gradient=True),
                                  what=f"attention {name}: {note}")
