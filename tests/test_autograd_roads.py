"""The three roads of tritonkit._autograd: while torch.compile traces, the custom op; eagerly
with a gradient to record, the op's plain autograd.Function; without one, the launcher. The
roads must give bitwise the same results, and the eager ones must not pass through the
custom op (its dispatch is the host time they exist to save)."""

import pytest
import torch

import tritonkit
from tritonkit.ops import add as add_module
from tritonkit.ops import attention as attention_module
from tritonkit.ops import softmax as softmax_module
from test_attention import make_qkv


def _forbid(monkeypatch, module, name):
    def refuse(*args, **kwargs):
        raise AssertionError(f"eager call went through the custom op {name}")
    monkeypatch.setattr(module, name, refuse)


def _fresh_leaves(*tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


def _roads(public, op, inputs, upstream_of):
    """Output and input gradients through the public function (eager) and through the op."""
    results = []
    for run in (public, op):
        leaves = _fresh_leaves(*inputs)
        out = run(*leaves)
        results.append((out, *torch.autograd.grad(out, leaves, upstream_of(out))))
    return results


def _assert_same(eager, through_op):
    for a, b in zip(eager, through_op):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b)


def test_softmax_roads_agree(device):
    x = torch.randn(5, 3, 77, device=device)[:, 1:]  # a strided view
    up = torch.randn(5, 2, 77, device=device)
    eager, through_op = _roads(lambda t: tritonkit.softmax(t, 1), lambda t: softmax_module._softmax_fwd_op(t, 1),
                               (x,), lambda out: up)
    _assert_same(eager, through_op)


def test_add_roads_agree(device):
    x = torch.randn(4, 1, 9, device=device)
    y = torch.randn(3, 1, device=device, dtype=torch.float16)
    up = torch.randn(4, 3, 9, device=device)
    eager, through_op = _roads(tritonkit.add, add_module._add_op, (x, y), lambda out: up)
    _assert_same(eager, through_op)


def test_attention_roads_agree(device):
    q, k, v = make_qkv(1, 4, 2, 37, 45, 32, torch.float16, device)
    up = torch.randn_like(q)
    eager, through_op = _roads(lambda *t: tritonkit.attention(*t, causal=True),
                               lambda *t: attention_module._attention_fwd_op(*t, True, 32 ** -0.5)[0],
                               (q, k, v), lambda out: up)
    _assert_same(eager, through_op)


def test_eager_calls_do_not_dispatch_the_custom_ops(monkeypatch, device):
    for module, name in ((softmax_module, "_softmax_fwd_op"), (softmax_module, "_softmax_bwd_op"),
                         (add_module, "_add_op"), (attention_module, "_attention_fwd_op"),
                         (attention_module, "_attention_bwd_op")):
        _forbid(monkeypatch, module, name)
    x = torch.randn(3, 40, device=device, requires_grad=True)
    q, k, v = make_qkv(1, 2, 1, 24, 24, 16, torch.float16, device, requires_grad=True)
    for out, leaves in ((tritonkit.softmax(x, -1), [x]), (tritonkit.add(x, x), [x]),
                        (tritonkit.attention(q, k, v), [q, k, v])):
        assert out.grad_fn is not None
        torch.autograd.grad(out, leaves, torch.randn_like(out))
    with torch.no_grad():  # the launcher alone
        assert tritonkit.attention(q, k, v).grad_fn is None
        assert tritonkit.softmax(x, -1).grad_fn is None


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
def test_forward_and_backward_replay_in_a_cuda_graph(device):
    # torch.compile(mode="reduce-overhead") and hand-written training steps capture whole
    # steps in CUDA graphs: every launch (Triton's, the backward's side stream, the host
    # tensor descriptors passed by value) must capture and replay to the eager result.
    q, k, v = make_qkv(2, 4, 2, 300, 300, 64, torch.bfloat16, device, requires_grad=True)
    x = torch.randn(64, 1000, device=device, requires_grad=True)
    up, up_x = torch.randn_like(q), torch.randn_like(x)

    def step():
        out = tritonkit.attention(q, k, v, causal=True)
        y = tritonkit.add(tritonkit.softmax(x, -1), x)
        return (out, y, *torch.autograd.grad((out, y), (q, k, v, x), (up, up_x)))

    side = torch.cuda.Stream()  # warm-up (compiles) on a side stream, as torch's docs ask
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    with torch.no_grad():  # new values in the same buffers, then replay
        for t in (q, k, v, x, up, up_x):
            t.copy_(torch.randn_like(t))
    graph.replay()
    torch.cuda.synchronize()
    for got, want in zip(captured, step()):
        assert torch.equal(got, want)


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
