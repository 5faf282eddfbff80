"""The three roads of tritonkit._op.Op: while torch.compile traces, the custom op; eagerly
with a gradient to record, the op's plain autograd.Function; without one, the launcher. The
roads must give bitwise the same results, and the eager ones must not pass through the
custom op (its dispatch is the host time they exist to save). Every op in the registry with
a `sample` is covered."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import tritonkit
from tritonkit import registry
from tritonkit._op import DECLARED
from _cuda_graphs import capture
from test_attention import make_qkv

SAMPLED = [name for name, entry in registry.entries().items() if entry.sample is not None]


def _declared(name):
    return DECLARED[registry.get(name).op]


def _leaves(args):
    return [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
            for a in args]


def _sampled_leaves(name, device):
    """The op's registry sample as fresh leaves, and those of them that require a gradient."""
    args = _leaves(registry.get(name).sample(device))
    return args, [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]


def _run(call, args, upstream_seed):
    """The call's outputs and the gradients of every floating-point tensor argument, for a
    random upstream gradient on each differentiable output."""
    leaves = _leaves(args)
    outs = call(*leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    grad_outs = [o for o in outs if o.requires_grad]
    torch.manual_seed(upstream_seed)
    inputs = [a for a in leaves if isinstance(a, torch.Tensor) and a.requires_grad]
    grads = torch.autograd.grad(grad_outs, inputs, [torch.randn_like(o) for o in grad_outs], allow_unused=True)
    return [*outs, *grads]


def test_every_declared_op_has_a_sample():
    assert set(DECLARED) <= {registry.get(name).op for name in SAMPLED}


@pytest.mark.parametrize("name", SAMPLED)
def test_roads_agree(name, device):
    op = _declared(name)
    args = registry.get(name).sample(device)
    eager = _run(op, args, 1)
    through_op = _run(lambda *a: op.returned(a, op.forward_op(*a)), args, 1)
    assert len(eager) == len(through_op)
    for a, b in zip(eager, through_op):
        if a is None or b is None:
            assert a is None and b is None
            continue
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", SAMPLED)
def test_every_op_is_deterministic(name, device):
    # The same inputs twice: the same bits, forward and every gradient (the backward passes sum
    # in a fixed order, no atomics). Through the interpreter this holds trivially; compiled on a
    # GPU it is what the kernels' reductions promise.
    op = _declared(name)
    args = registry.get(name).sample(device)
    first, second = _run(op, args, 2), _run(op, args, 2)
    for a, b in zip(first, second):
        assert (a is None and b is None) or torch.equal(a, b)


@pytest.mark.parametrize("name", SAMPLED)
def test_eager_calls_do_not_dispatch_the_custom_ops(name, monkeypatch, device):
    op = _declared(name)

    def refuse(*args, **kwargs):
        raise AssertionError(f"eager call of {name} went through its custom op")

    monkeypatch.setattr(op, "forward_op", refuse)
    args, inputs = _sampled_leaves(name, device)
    outs = op(*args)
    first = outs[0] if isinstance(outs, tuple) else outs
    assert first.grad_fn is not None and type(first.grad_fn).__name__.startswith(op.function.__name__)
    torch.autograd.grad(first, inputs, torch.randn_like(first), allow_unused=True)
    with torch.no_grad():  # the launcher alone
        outs = op(*args)
        first = outs[0] if isinstance(outs, tuple) else outs
        assert first.grad_fn is None


class _ZeroFills(TorchDispatchMode):
    """Records the aten ops that make or fill zeros."""

    NAMES = ("zeros", "zeros_like", "fill_", "zero_", "new_zeros")

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.split(".")[0] in self.NAMES:
            self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


# rope's backward kernel rotates both gradients: an unused k_rot's zero gradient is its input.
@pytest.mark.parametrize("name", [name for name in SAMPLED if name != "rope"])
def test_backward_of_the_first_output_makes_no_zero_gradients(name, device):
    # Autograd gives a Function's unused outputs zero gradients unless told not to
    # (ctx.set_materialize_grads(False)): an allocation and a fill per output and call, a
    # weight-sized one for linear_cross_entropy's saved gradients.
    op = _declared(name)
    args, inputs = _sampled_leaves(name, device)

    def first_output():
        outs = op(*args)
        return outs[0] if isinstance(outs, tuple) else outs

    # A first call makes what an op keeps for later calls (the norms' zeroed ticket counters).
    warm = first_output()
    torch.autograd.grad(warm, inputs, torch.ones_like(warm), allow_unused=True)
    first = first_output()
    upstream = torch.randn_like(first)
    with _ZeroFills() as mode:
        torch.autograd.grad(first, inputs, upstream, allow_unused=True)
    assert mode.seen == []


@pytest.mark.parametrize("tracing_mode", ["fake", "real"])
def test_make_fx_records_the_custom_ops(tracing_mode, device):
    # Tracers that intercept torch ops (make_fx here; torch.export and FakeTensorMode work
    # the same way) must see the custom ops, not kernel launches on tensors without data.
    from torch.fx.experimental.proxy_tensor import make_fx

    def model(x, q):
        return tritonkit.add(tritonkit.softmax(x, -1), x), tritonkit.attention(q, q, q, causal=True)

    x = torch.randn(4, 40, device=device)
    q = torch.randn(1, 2, 24, 16, device=device, dtype=torch.float16)
    graph = make_fx(model, tracing_mode=tracing_mode)(x, q)
    for name in ("tritonkit.softmax_fwd", "tritonkit.add", "tritonkit.attention_fwd"):
        assert name in graph.code, (name, graph.code)
    if tracing_mode == "real":  # the traced graph runs and matches the eager call
        for got, want in zip(graph(x, q), model(x, q)):
            assert torch.equal(got, want)


def test_fake_tensors_get_fake_results(device):
    # On the device the ops accept: CPU tensors only under the interpreter, CUDA ones on a GPU.
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    with FakeTensorMode():
        x = torch.empty(3, 50, device=device)
        q = torch.empty(2, 4, 33, 32, dtype=torch.bfloat16, device=device).transpose(1, 2).contiguous().transpose(1, 2)
        outs = (tritonkit.softmax(x, 0), tritonkit.add(x, x[0]), tritonkit.attention(q, q[:, :2], q[:, :2]))
    assert all(isinstance(t, FakeTensor) for t in outs)
    assert outs[0].shape == (3, 50) and outs[1].shape == (3, 50)
    assert outs[2].shape == q.shape and outs[2].dtype == torch.bfloat16 and outs[2].stride() == q.stride()


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_activation_checkpointing(use_reentrant, device):
    # torch.utils.checkpoint reruns the forward during the backward (both of its modes):
    # the gradients must be bitwise those of the plain run.
    from torch.utils.checkpoint import checkpoint

    def leaves():
        torch.manual_seed(5)
        return (torch.randn(1, 2, 40, 32, dtype=torch.float16, device=device, requires_grad=True),
                torch.randn(6, 50, device=device, requires_grad=True))

    def block(q, x):
        o = tritonkit.attention(q, q, q, causal=True)
        return o.float().sum() + tritonkit.softmax(tritonkit.add(x, x), -1).pow(2).sum()

    q, x = leaves()
    block(q, x).backward()
    want = (q.grad, x.grad)
    q, x = leaves()
    checkpoint(block, q, x, use_reentrant=use_reentrant).backward()
    assert all(torch.equal(got, ref) for got, ref in zip((q.grad, x.grad), want))


@pytest.mark.parametrize("op", ["softmax", "attention"])
def test_second_derivatives_are_refused_not_wrong(op, device):
    # The backward kernels are not themselves differentiable: asking for a gradient of a
    # gradient must fail loudly, not return one that misses terms.
    if op == "softmax":
        leaves = [torch.randn(3, 20, device=device, requires_grad=True)]
        out = tritonkit.softmax(leaves[0], -1)
    else:
        leaves = make_qkv(1, 2, 2, 16, 16, 16, torch.float16, device, requires_grad=True)
        out = tritonkit.attention(*leaves)
    grads = torch.autograd.grad(out, leaves, torch.randn_like(out), create_graph=True)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(sum(g.float().sum() for g in grads), leaves)


def test_add_backward_is_differentiable(device):
    # add's backward is torch ops (sums over broadcast dims), so it differentiates further.
    x = torch.randn(4, 1, device=device, requires_grad=True)
    y = torch.randn(4, 6, device=device, requires_grad=True)
    up = torch.randn(4, 6, device=device, requires_grad=True)
    (dx,) = torch.autograd.grad(tritonkit.add(x, y), x, up, create_graph=True)
    (ours,) = torch.autograd.grad((dx * dx).sum(), up)
    (dx_ref,) = torch.autograd.grad(x + y, x, up, create_graph=True)
    (theirs,) = torch.autograd.grad((dx_ref * dx_ref).sum(), up)
    torch.testing.assert_close(ours, theirs)


@pytest.mark.gpu
@pytest.mark.parametrize("name", SAMPLED)
def test_forward_and_backward_replay_in_a_cuda_graph(name, device):
    # torch.compile(mode="reduce-overhead") and hand-written training steps capture whole
    # steps in CUDA graphs: every launch (Triton's, a side stream, host tensor descriptors
    # passed by value) must capture and replay to the eager result, for every op.
    op = _declared(name)
    args, inputs = _sampled_leaves(name, device)

    def step():
        outs = op(*args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        grad_outs = [o for o in outs if o.requires_grad]
        torch.manual_seed(3)
        ups = [torch.ones_like(o) for o in grad_outs]
        return (*outs, *torch.autograd.grad(grad_outs, inputs, ups, allow_unused=True))

    graph, captured = capture(step)
    with torch.no_grad():  # new values in the same buffers, then replay
        for t in inputs:
            t.copy_(torch.randn_like(t))
    graph.replay()
    torch.cuda.synchronize()
    for got, want in zip(captured, step()):
        assert (got is None and want is None) or torch.equal(got, want)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_ops_on_a_gpu_that_is_not_the_current_one():
    # Triton launches on the current device; tensors on another GPU must still be computed
    # there (the launch switches device, as torch's own ops do), forward and backward.
    assert torch.cuda.current_device() == 0
    other = torch.device("cuda", 1)
    q, k, v = make_qkv(1, 4, 2, 200, 200, 64, torch.bfloat16, other, requires_grad=True)
    x = torch.randn(30, 500, device=other, requires_grad=True)
    up = torch.randn_like(q)
    ours = (tritonkit.attention(q, k, v, causal=True), tritonkit.softmax(x, -1), tritonkit.add(x, x))
    grads = torch.autograd.grad(ours, (q, k, v, x), (up, torch.ones_like(x), torch.ones_like(x)))
    assert all(t.device == other for t in (*ours, *grads))
    with torch.cuda.device(other):  # the same calls with that GPU current
        want = (tritonkit.attention(q, k, v, causal=True), tritonkit.softmax(x, -1), tritonkit.add(x, x))
        want_grads = torch.autograd.grad(want, (q, k, v, x), (up, torch.ones_like(x), torch.ones_like(x)))
    for got, ref in zip((*ours, *grads), (*want, *want_grads)):
        assert torch.equal(got, ref)
