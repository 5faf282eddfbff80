"""tritonkit.cross_entropy and tritonkit.linear_cross_entropy against float64 references, with
torch's own error in the same dtype as the yardstick."""

import pytest
import torch

import tritonkit
from tritonkit.ops.cross_entropy import (cross_entropy_bwd, cross_entropy_fwd, cross_entropy_reference,
                                         linear_cross_entropy_fwd, linear_cross_entropy_reference)
from tritonkit.ops.cross_entropy import linear
from tritonkit.ops.cross_entropy.kernel import Finish, launch_rows
from tritonkit.ops.cross_entropy.linear import _LINEAR_CROSS_ENTROPY, chunk_tokens_for
from tritonkit._counters import zeroed_counters
from tritonkit._launch import record_launches
from _cuda_graphs import capture
from _tolerance import assert_close_to_reference, eps_for
from conftest import ON_GPU

REDUCTIONS = ["mean", "sum", "none"]
IGNORE = -100


def make_target(rows, n_classes, ignored, device, dtype=torch.int64):
    """Class indices with no, some (every third, the first included) or all rows ignored."""
    target = torch.randint(0, n_classes, (rows,), device=device, dtype=dtype)
    if ignored == "some":
        target[::3] = IGNORE
    elif ignored == "all":
        target[:] = IGNORE
    return target


def upstream_like(loss):
    return torch.randn_like(loss)


def grads_of(loss, inputs, up):
    return torch.autograd.grad(loss, inputs, up)


def leaf(t):
    return t.detach().requires_grad_()


# --------------------------------------------------------------------------------------------
# cross_entropy on logits

# (rows, classes, label_smoothing, softcap, ignored): each a reason
CE_CASES = [
    (1, 1, 0.0, None, "none"),          # one class: loss 0, gradient 0
    (7, 1000, 0.0, None, "some"),       # classes not a multiple of any block
    (5, 997, 0.1, None, "some"),        # prime classes, label smoothing with ignored rows
    (4, 300, 0.2, 5.0, "none"),         # softcap and smoothing together
    (6, 50, 0.1, 2.0, "all"),           # every row ignored: mean is 0/0 = NaN, gradient 0
    (3, 9000, 0.0, 30.0, "some"),       # more classes than one block (several steps a row)
] + ([(4096, 128256, 0.1, 30.0, "some"), (8192, 32000, 0.0, None, "none")] if ON_GPU else [])


def check_cross_entropy(logits, target, reduction, ls, softcap, **kwargs):
    opts = dict(ignore_index=IGNORE, label_smoothing=ls, reduction=reduction, softcap=softcap)
    x = leaf(logits)
    loss = tritonkit.cross_entropy(x, target, **opts, **kwargs)
    assert loss.dtype == logits.dtype
    x_torch, x64 = leaf(logits), leaf(logits.double())
    theirs = cross_entropy_reference(x_torch, target, **opts, upcast=False)
    ref = cross_entropy_reference(x64, target, **opts)
    assert_close_to_reference(loss, ref, theirs)
    up = upstream_like(loss)
    (ours_grad,) = grads_of(loss, x, up)
    (theirs_grad,) = grads_of(theirs, x_torch, up)
    (ref_grad,) = grads_of(ref, x64, up.double())
    assert_close_to_reference(ours_grad, ref_grad, theirs_grad, eps=eps_for(logits.dtype, True), what="grad")
    return loss, ours_grad


@pytest.mark.parametrize("ls", [0.0, 0.1])
def test_confident_rows_keep_their_small_loss(ls, device):
    # Large logits (magnitude ~30) with the target ahead by 8-12: each row's loss is ~1e-5 to
    # 1e-3 (with smoothing, the smoothing term dominates), well below one rounding of the
    # log-sum-exp. A loss taken as lse - z_t loses it to cancellation; measured from the max,
    # as torch's log_softmax does, it keeps torch's accuracy.
    rows, classes = 64, 50
    target = torch.randint(0, classes, (rows,), device=device)
    logits = 30 + torch.randn(rows, classes, device=device)
    logits[torch.arange(rows), target] += 8 + 4 * torch.rand(rows, device=device)
    ours = tritonkit.cross_entropy(logits, target, reduction="none", label_smoothing=ls)
    ref = cross_entropy_reference(logits, target, reduction="none", label_smoothing=ls)
    theirs = torch.nn.functional.cross_entropy(logits, target, reduction="none", label_smoothing=ls)
    assert_close_to_reference(ours, ref, theirs, what="cross_entropy, confident rows")
    # the same rows as a linear head (exactly: hidden is the identity, so hidden @ weight^T is logits)
    hidden, weight = torch.eye(rows, device=device), logits.t().contiguous()
    lce = tritonkit.linear_cross_entropy(hidden, weight, target, reduction="none", label_smoothing=ls)
    lce_ref = linear_cross_entropy_reference(hidden, weight, target, reduction="none", label_smoothing=ls)
    lce_torch = linear_cross_entropy_reference(hidden, weight, target, reduction="none", label_smoothing=ls,
                                               upcast=False)
    assert_close_to_reference(lce, lce_ref, lce_torch, what="linear_cross_entropy, confident rows")


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_large_logits_keep_their_small_probabilities(reduction, device):
    # Logits of magnitude ~1e4 a few apart: the log-sum-exp rounds at ~1e-3 there, so a gradient
    # taken as exp(z - lse) carries that rounding into every probability (a relative error of
    # ~1e-3 in the small ones); measured from the max, exp((z - m) - log s), it keeps torch's
    # accuracy. Two and three classes, where the small probabilities weigh most.
    for classes in (2, 3):
        rows = 16
        logits = 1e4 * (1 + torch.rand(rows, 1, device=device)) + 4 * torch.randn(rows, classes, device=device)
        target = torch.randint(0, classes, (rows,), device=device)
        check_cross_entropy(logits, target, reduction, 0.0, None)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,classes,ls,softcap,ignored", CE_CASES)
def test_cross_entropy(rows, classes, ls, softcap, ignored, dtype, reduction, device):
    logits = torch.randn(rows, classes, device=device, dtype=dtype) * 4
    target = make_target(rows, classes, ignored, device)
    loss, grad = check_cross_entropy(logits, target, reduction, ls, softcap)
    if ignored == "all":
        assert grad.eq(0).all()
        if reduction == "mean":
            assert loss.isnan()


def test_cross_entropy_layouts(device):
    # Views at odd element offsets, transposed and sliced logits, int32 targets, 1-D logits.
    for offset in (1, 3):
        buf = torch.randn(5 * 301 + offset, device=device)
        target = make_target(5, 301, "some", device, torch.int32)
        check_cross_entropy(buf[offset:].view(5, 301), target, "mean", 0.1, None)
    base = torch.randn(301, 12, device=device)
    check_cross_entropy(base.t(), make_target(12, 301, "some", device), "none", 0.0, 3.0)
    check_cross_entropy(base[::2, 1::3].t(), make_target(4, 151, "none", device), "sum", 0.0, None)
    x = leaf(torch.randn(40, device=device))
    ours = tritonkit.cross_entropy(x, torch.tensor(7, device=device), label_smoothing=0.1)
    ref = torch.nn.functional.cross_entropy(x.double(), torch.tensor(7, device=device), label_smoothing=0.1)
    torch.testing.assert_close(ours.double(), ref, rtol=1e-6, atol=1e-6)  # a float32 loss
    assert tritonkit.cross_entropy(x, torch.tensor(3, device=device), reduction="none").shape == ()


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_class_dim_one(reduction, device):
    # torch's (N, C, d1, ..., dk) form: classes along dim 1, a target per position; the class
    # dim strided (a copy) and innermost in memory (a view of (N, d, C) logits).
    target = torch.randint(0, 37, (3, 5, 4), device=device)
    target[0, 1] = IGNORE
    check_cross_entropy(torch.randn(3, 37, 5, 4, device=device), target, reduction, 0.1, None)
    inner = torch.randn(3, 9, 37, device=device).transpose(1, 2)
    check_cross_entropy(inner, torch.randint(0, 37, (3, 9), device=device), reduction, 0.0, 2.0)
    with pytest.raises(ValueError, match=r"take a target of shape \(3, 5, 4\)"):
        tritonkit.cross_entropy(torch.randn(3, 37, 5, 4, device=device), target[:, :, :2])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_inplace_backward(reduction, device):
    logits = torch.randn(9, 700, device=device, dtype=torch.bfloat16)
    target = make_target(9, 700, "some", device)
    opts = dict(reduction=reduction, label_smoothing=0.05, softcap=4.0)
    x = leaf(logits)
    loss = tritonkit.cross_entropy(x, target, **opts)
    up = upstream_like(loss)
    (want,) = grads_of(loss, x, up)
    producer = leaf(logits)
    x = producer * 1.0  # a non-leaf buffer, as a model's head output is
    loss = tritonkit.cross_entropy(x, target, inplace_backward=True, **opts)
    loss.backward(up, retain_graph=True)
    assert torch.equal(producer.grad, want)
    assert torch.equal(x.detach(), want)  # the gradient was written over the logits
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward(up)


def test_cross_entropy_launchers(device):
    # The passes on their own: the backward kernel fed the forward's lse, scalar upstream.
    logits = torch.randn(6, 333, device=device)
    target = make_target(6, 333, "some", device)
    loss, lse, count = cross_entropy_fwd(logits, target, IGNORE, 0.0, "sum", None, False)
    assert lse.dtype == torch.float64   # the row's max and the log of its sum, both kept
    torch.testing.assert_close(lse.float(), torch.logsumexp(logits, -1))
    assert count.dtype == torch.int64 and count.item() == (target != IGNORE).sum().item()
    grad = cross_entropy_bwd(torch.tensor(2.0, device=device), logits, target, lse, IGNORE, 0.0, "sum", None)
    x = leaf(logits)
    (want,) = torch.autograd.grad(2.0 * torch.nn.functional.cross_entropy(x, target, reduction="sum"), x)
    torch.testing.assert_close(grad, want)


@pytest.mark.parametrize("rows,classes,ignored", [(37, 300, "none"), (37, 300, "some"), (37, 300, "all"),
                                                   (1100, 3, "some")])   # past the reduction's 1024-row step
def test_forward_finishes_in_its_one_launch(rows, classes, ignored, device):
    # The forward's kernel also counts the targets, checks them and reduces the loss (a small
    # input is bound by host time a launch), and leaves the shared counters at zero.
    logits = torch.randn(rows, classes, device=device)
    target = make_target(rows, classes, ignored, device)
    # Past 1024 rows only the reducing reductions have a step to cross (each row a program
    # under the interpreter: seconds a reduction).
    for reduction in REDUCTIONS if rows <= 1024 else [r for r in REDUCTIONS if r != "none"]:
        with record_launches() as launches:
            loss, lse, count = cross_entropy_fwd(logits, target, IGNORE, 0.0, reduction, None, False)
        assert [launch.name for launch in launches] == ["cross_entropy_fwd"]
        assert count.item() == (target != IGNORE).sum().item()
        assert not zeroed_counters(logits.device).any()
        opts = dict(ignore_index=IGNORE, reduction=reduction)
        ref = cross_entropy_reference(logits, target, **opts)
        if ignored == "all" and reduction == "mean":
            assert loss.isnan()    # 0 / 0, as torch's mean over no targets
        else:
            assert_close_to_reference(loss, ref, cross_entropy_reference(logits, target, **opts, upcast=False))


def test_kernel_flags_out_of_range_targets(device):
    # On a GPU the flag feeds a device-side assert; on the CPU the launcher refuses such
    # targets first, so the kernel's flag is checked here on its own.
    logits = torch.randn(9, 40, device=device)
    for bad, ok_expected in ((None, 1), (40, 0), (-1, 0)):
        target = make_target(9, 40, "some", device)
        if bad is not None:
            target[4] = bad
        ok = torch.full((), -7, dtype=torch.int32, device=device)
        count = torch.empty((), dtype=torch.int64, device=device)
        finish = Finish(zeroed_counters(logits.device).view(torch.int64), count, ok, None, "none")
        launch_rows(logits, target, IGNORE, 0.0, None, loss=torch.empty(9, device=device), finish=finish)
        assert ok.item() == ok_expected
        assert count.item() == ((target != IGNORE) & (target >= 0) & (target < 40)).sum().item()
        assert not zeroed_counters(logits.device).any()


# --------------------------------------------------------------------------------------------
# linear_cross_entropy

# (tokens, hidden, vocabulary, chunk_tokens, bias, label_smoothing, softcap, ignored)
LCE_CASES = [
    (1, 1, 1, None, False, 0.0, None, "none"),      # one of everything
    (7, 13, 1000, None, True, 0.0, None, "some"),   # odd hidden, one chunk
    (7, 13, 1000, 3, True, 0.1, None, "some"),      # chunk boundaries: 3 + 3 + 1 tokens
    (9, 32, 997, 4, False, 0.1, 3.0, "some"),       # prime vocabulary, smoothing and softcap
    (5, 16, 300, 2, True, 0.0, 10.0, "all"),        # every token ignored
    (6, 8, 9000, 5, False, 0.0, None, "none"),      # vocabulary over one block
] + ([(8192, 4096, 32000, None, True, 0.1, 30.0, "some"), (3000, 1024, 128256, None, False, 0.0, None, "some")]
     if ON_GPU else [])


def lce_inputs(tokens, hidden, vocab, bias, dtype, device):
    h = torch.randn(tokens, hidden, device=device, dtype=dtype)
    w = torch.randn(vocab, hidden, device=device, dtype=dtype) / hidden ** 0.5 * 3
    b = torch.randn(vocab, device=device, dtype=dtype) if bias else None
    return h, w, b


def check_lce(h, w, target, b, reduction, ls, softcap, chunk_tokens=None):
    opts = dict(ignore_index=IGNORE, label_smoothing=ls, reduction=reduction, softcap=softcap)
    inputs = [leaf(h), leaf(w)] + ([leaf(b)] if b is not None else [])
    loss = tritonkit.linear_cross_entropy(inputs[0], inputs[1], target, bias=inputs[2] if b is not None else None,
                                          chunk_tokens=chunk_tokens, **opts)
    assert loss.dtype == torch.float32
    theirs_in = [leaf(t) for t in inputs]
    ref_in = [leaf(t.double()) for t in inputs]
    theirs = linear_cross_entropy_reference(*theirs_in[:2], target, bias=theirs_in[2] if b is not None else None,
                                            **opts, upcast=False)
    ref = linear_cross_entropy_reference(*ref_in[:2], target, bias=ref_in[2] if b is not None else None, **opts)
    assert_close_to_reference(loss, ref, theirs, eps=eps_for(torch.float32))
    up = upstream_like(loss)
    ours_g = grads_of(loss, inputs, up)
    theirs_g = grads_of(theirs, theirs_in, up)
    ref_g = grads_of(ref, ref_in, up.double())
    for name, o, t, r in zip(("hidden", "weight", "bias"), ours_g, theirs_g, ref_g):
        assert o.dtype == h.dtype and o.shape == r.shape
        assert_close_to_reference(o, r, t, eps=eps_for(h.dtype, True), what=f"grad {name}")
    return loss, ours_g


# sum takes mean's path with another scale: fp32 alone is enough for it
@pytest.mark.parametrize("dtype,reduction", [(torch.float32, "mean"), (torch.float32, "sum"), (torch.float32, "none"),
                                             (torch.bfloat16, "mean"), (torch.bfloat16, "none")])
@pytest.mark.parametrize("tokens,hidden,vocab,chunk,bias,ls,softcap,ignored", LCE_CASES)
def test_linear_cross_entropy(tokens, hidden, vocab, chunk, bias, ls, softcap, ignored, dtype, reduction, device):
    h, w, b = lce_inputs(tokens, hidden, vocab, bias, dtype, device)
    target = make_target(tokens, vocab, ignored, device)
    loss, grads = check_lce(h, w, target, b, reduction, ls, softcap, chunk)
    if ignored == "all":
        assert all(g.eq(0).all() for g in grads)
        if reduction == "mean":
            assert loss.isnan()


def test_linear_cross_entropy_layouts(device):
    # hidden at odd element offsets, a transposed (column-major) weight, a strided bias, int32
    # targets, leading dims on hidden and target.
    for offset in (1, 5):
        buf = torch.randn(2 * 5 * 24 + offset, device=device)
        h = buf[offset:].view(2, 5, 24)
        w = torch.randn(24, 301, device=device).t()
        b = torch.randn(2 * 301, device=device)[::2]
        target = make_target(10, 301, "some", device, torch.int32).view(2, 5)
        check_lce(h, w, target, b, "none", 0.1, None)
        check_lce(h, w, target, b, "mean", 0.0, 2.0, chunk_tokens=3)


def test_chunk_sizes_agree(device):
    # Every chunk size gives the same loss and nearly the same gradients (only the order of the
    # grad_weight accumulation differs).
    h, w, b = lce_inputs(11, 32, 500, True, torch.float32, device)
    target = make_target(11, 500, "some", device)
    results = [linear_cross_entropy_fwd(h, w, target, b, IGNORE, 0.1, "mean", 5.0, True, True, True, chunk)
               for chunk in (None, 1, 4, 11, 64)]
    for other in results[1:]:
        for a, c in zip(results[0], other):
            torch.testing.assert_close(a, c)


def test_default_chunk_follows_the_memory_target():
    assert chunk_tokens_for(8192, 128256, 2) == 2048   # 512 MiB of bf16 logits
    assert chunk_tokens_for(8192, 32000, 2) == 8192     # the whole batch: one chunk
    assert chunk_tokens_for(8192, 4_000_000, 4) == 128  # never below one GEMM tile
    assert chunk_tokens_for(7, 1000, 4) == 7


def test_partial_requires_grad(device):
    # A frozen head (weight without grad) and no-grad calls compute only what is asked.
    h, w, _ = lce_inputs(6, 16, 200, False, torch.float32, device)
    target = make_target(6, 200, "some", device)
    x = leaf(h)
    loss = tritonkit.linear_cross_entropy(x, w, target)
    (gh,) = torch.autograd.grad(loss, x)
    x64 = leaf(h.double())
    (want,) = torch.autograd.grad(linear_cross_entropy_reference(x64, w, target), x64)
    torch.testing.assert_close(gh.double(), want, rtol=1e-4, atol=1e-6)
    with torch.no_grad():
        assert tritonkit.linear_cross_entropy(leaf(h), leaf(w), target).grad_fn is None
    _, _, grad_h, grad_w, grad_b = linear_cross_entropy_fwd(h, w, target, None, IGNORE, 0.0, "mean", None,
                                                           True, False, False)
    assert grad_h.shape == h.shape and grad_w.numel() == 0 and grad_b.numel() == 0


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_roads_agree_for_saved_gradients(reduction, device):
    # Mean and sum scale the forward's saved gradients: in place on the eager road, into new
    # tensors through the custom op (as under torch.compile). The same bits either way.
    h, w, b = lce_inputs(7, 12, 400, True, torch.bfloat16, device)
    target = make_target(7, 400, "some", device)
    results = []
    for call in (_LINEAR_CROSS_ENTROPY, _LINEAR_CROSS_ENTROPY.forward_op):
        inputs = [leaf(h), leaf(w), leaf(b)]
        loss = call(inputs[0], inputs[1], target, inputs[2], IGNORE, 0.1, reduction, 3.0, True, True, True, 3)[0]
        results.append((loss, *torch.autograd.grad(loss, inputs, torch.tensor(1.7, device=device))))
    for a, c in zip(*results):
        assert torch.equal(a, c)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_upstream_one_returns_the_saved_gradients(reduction, device, monkeypatch):
    # loss.backward()'s upstream 1: the eager backward hands back the very tensors the forward
    # made (no copy, no pass over grad_weight, no second weight-sized buffer), into .grad too.
    made = []
    chunked = linear._chunked

    def spy(*args, **kwargs):
        out = chunked(*args, **kwargs)
        made.append([g.data_ptr() for g in out])
        return out

    monkeypatch.setattr(linear, "_chunked", spy)
    h, w, b = lce_inputs(7, 12, 400, True, torch.bfloat16, device)
    target = make_target(7, 400, "some", device)
    inputs = [leaf(h), leaf(w), leaf(b)]
    grads = torch.autograd.grad(tritonkit.linear_cross_entropy(*inputs[:2], target, bias=inputs[2],
                                                               reduction=reduction, chunk_tokens=3), inputs)
    assert [g.data_ptr() for g in grads] == made[-1]
    tritonkit.linear_cross_entropy(*inputs[:2], target, bias=inputs[2], reduction=reduction,
                                   chunk_tokens=3).backward()
    assert [t.grad.data_ptr() for t in inputs] == made[-1]
    for ours, again in zip(grads, (t.grad for t in inputs)):
        assert torch.equal(ours, again)


@pytest.mark.parametrize("scale", [0.37, -2.0, 0.0])
def test_upstream_scale_is_exact(scale, device):
    # Any other upstream gradient: the gradients for 1, multiplied in float32 and rounded once
    # (what torch's own multiply by the fp32 scale gives), still in the forward's tensors.
    h, w, b = lce_inputs(7, 12, 400, True, torch.bfloat16, device)
    target = make_target(7, 400, "some", device)
    inputs = [leaf(h), leaf(w), leaf(b)]
    ones = torch.autograd.grad(tritonkit.linear_cross_entropy(*inputs[:2], target, bias=inputs[2]), inputs)
    up = torch.tensor(scale, device=device)
    scaled = torch.autograd.grad(tritonkit.linear_cross_entropy(*inputs[:2], target, bias=inputs[2]), inputs, up)
    for one, ours in zip(ones, scaled):
        assert torch.equal(ours, (one.float() * up).to(one.dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_device_scale_kernel(dtype, device):
    # What a captured backward multiplies with: the scale read on the device, each element a
    # float32 product rounded once (the interpreter truncates to bf16/fp16: one step at most),
    # into a new tensor of the gradient's layout or in place; a transposed gradient too.
    from tritonkit.ops.cross_entropy.scale import scale_by
    grad = torch.randn(37, 300, device=device).to(dtype).t()  # dense, not contiguous
    scale = torch.tensor(-0.37, device=device)
    want = (grad.float() * scale).to(dtype)
    step = 0.0 if dtype == torch.float32 else torch.finfo(dtype).eps
    out = scale_by(grad, scale)
    assert out.stride() == grad.stride()
    assert ((out.float() - want.float()).abs() <= step * want.float().abs()).all()
    if ON_GPU:
        assert torch.equal(out, want)
    same = grad.clone()
    assert scale_by(same, scale, out=same) is same and torch.equal(same, out)
    with pytest.raises(ValueError, match="dense"):
        scale_by(torch.randn(8, 8, device=device)[:, ::2], scale)


@pytest.mark.gpu
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_mean_and_sum_capture_in_a_cuda_graph(reduction, device):
    # The backward scales the forward's gradients by the upstream scalar. Read on the host
    # that would be a sync, which a capture refuses: while capturing it is read on the device.
    h, w, b = lce_inputs(200, 64, 1000, True, torch.bfloat16, device)
    target = make_target(200, 1000, "some", device)
    inputs = [leaf(h), leaf(w), leaf(b)]
    up = torch.tensor(0.5, device=device)

    def step():
        loss = tritonkit.linear_cross_entropy(*inputs[:2], target, bias=inputs[2], reduction=reduction,
                                              chunk_tokens=64)
        return (loss, *torch.autograd.grad(loss, inputs, up))

    graph, captured = capture(step)
    with torch.no_grad():
        for t in inputs:
            t.copy_(torch.randn_like(t))
        up.fill_(-1.5)
    graph.replay()
    torch.cuda.synchronize()
    for got, want in zip(captured, step()):
        assert torch.equal(got, want)


@pytest.mark.gpu
def test_compiled_with_cuda_graphs(device):
    # torch.compile(mode="reduce-overhead") captures the forward and the backward graphs.
    from torch._dynamo.utils import counters
    h, w, b = lce_inputs(200, 64, 1000, True, torch.bfloat16, device)
    target = make_target(200, 1000, "some", device)
    compiled = torch.compile(lambda h_, w_, b_: tritonkit.linear_cross_entropy(h_, w_, target, bias=b_),
                             mode="reduce-overhead", fullgraph=True)
    skips = counters["inductor"]["cudagraph_skips"]
    for _ in range(3):  # warm-up, recording, replay
        inputs = [leaf(torch.randn_like(h)), leaf(w), leaf(b)]
        got = [compiled(*inputs) * 1.0]
        got += torch.autograd.grad(got[0], inputs)
        eager = [leaf(t.detach()) for t in inputs]
        want = [tritonkit.linear_cross_entropy(eager[0], eager[1], target, bias=eager[2])]
        want += torch.autograd.grad(want[0], eager)
        for a, c in zip(got, want):
            torch.testing.assert_close(a, c, rtol=0, atol=0)
    assert counters["inductor"]["cudagraph_skips"] == skips


def test_second_backward(device):
    # After an upstream of 1 the saved gradients are untouched and a second backward through
    # the same graph is right; after another upstream they were scaled in place: refused.
    h, w, _ = lce_inputs(4, 8, 100, False, torch.float32, device)
    x = leaf(h)
    loss = tritonkit.linear_cross_entropy(x, w, make_target(4, 100, "none", device))
    (first,) = torch.autograd.grad(loss, x, retain_graph=True)
    first = first.clone()
    (second,) = torch.autograd.grad(loss, x, retain_graph=True)
    assert torch.equal(first, second)
    torch.autograd.grad(loss, x, torch.tensor(2.0, device=device), retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(loss, x)


def test_module(device):
    h, w, b = lce_inputs(2 * 7, 16, 300, True, torch.float32, device)
    h = h.view(2, 7, 16)
    target = make_target(14, 300, "some", device).view(2, 7)
    loss_fn = tritonkit.nn.LinearCrossEntropyLoss(ignore_index=IGNORE, label_smoothing=0.1, reduction="none",
                                                   softcap=20, chunk_tokens=4)  # an int softcap is a float option too
    assert loss_fn.state_dict() == {} and list(loss_fn.parameters()) == []
    assert loss_fn.state_dict().keys() == torch.nn.CrossEntropyLoss().state_dict().keys()
    ours = loss_fn(h, w, target, b)
    want = linear_cross_entropy_reference(h, w, target, bias=b, ignore_index=IGNORE, label_smoothing=0.1,
                                          reduction="none", softcap=20.0)
    assert ours.shape == (2, 7)
    torch.testing.assert_close(ours.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_torch_compile_fullgraph(reduction, device):
    h, w, b = lce_inputs(6, 16, 300, True, torch.float32, device)
    target = make_target(6, 300, "some", device)
    logits = torch.randn(6, 300, device=device)

    def step(h, w, b, logits):
        lce = tritonkit.linear_cross_entropy(h, w, target, bias=b, label_smoothing=0.1, reduction=reduction,
                                             softcap=5.0)
        ce = tritonkit.cross_entropy(logits, target, reduction=reduction, softcap=5.0, inplace_backward=True)
        return (lce.sum() + ce.sum()) * 1.5

    # Inductor, not only aot_eager: its lowering builds a signature from each op's schema, which
    # must not name two arguments alike (the backward's grad_ tensors and the want_ flags).
    compiled = torch.compile(step, fullgraph=True, backend="inductor")
    results = []
    for fn in (step, compiled):
        inputs = [leaf(t) for t in (h, w, b)] + [leaf(logits.clone())]  # the eager call overwrites it
        out = fn(*inputs)
        results.append((out, *torch.autograd.grad(out, inputs)))
    for a, c in zip(*results):
        torch.testing.assert_close(a, c)


def test_bad_input(device):
    h, w, b = lce_inputs(4, 8, 50, True, torch.float32, device)
    target = make_target(4, 50, "none", device)
    lce = tritonkit.linear_cross_entropy
    with pytest.raises(ValueError, match="weight"):
        lce(h, w[:, :7], target)
    with pytest.raises(TypeError, match="weight"):
        lce(h, w.double(), target)
    with pytest.raises(TypeError, match="target"):
        lce(h, w, target.float())
    with pytest.raises(ValueError, match="target"):
        lce(h, w, target[:3])
    with pytest.raises(ValueError, match="bias"):
        lce(h, w, target, bias=b[:10])
    with pytest.raises(ValueError, match="reduction"):
        lce(h, w, target, reduction="max")
    with pytest.raises(ValueError, match="label_smoothing"):
        lce(h, w, target, label_smoothing=1.5)
    with pytest.raises(ValueError, match="softcap"):
        lce(h, w, target, softcap=0.0)
    with pytest.raises(ValueError, match="chunk_tokens"):
        lce(h, w, target, chunk_tokens=0)
    with pytest.raises(TypeError, match="chunk_tokens"):
        lce(h, w, target, chunk_tokens=2.0)
    logits = torch.randn(4, 50, device=device)
    with pytest.raises(TypeError, match="target"):
        tritonkit.cross_entropy(logits, target.to(torch.int16))
    with pytest.raises(ValueError, match="target"):
        tritonkit.cross_entropy(logits, target[:2])
    with pytest.raises(ValueError, match="logits"):
        tritonkit.cross_entropy(logits.view(2, 2, 50), target.view(2, 2))
    with pytest.raises(ValueError, match="logits"):
        tritonkit.cross_entropy(logits[:1].expand(4, 50), target, inplace_backward=True)
    # The backward launcher on its own: the forward's float64 lse, one a row, and its count.
    _, lse, count = cross_entropy_fwd(logits, target)
    one = torch.ones((), device=device)
    with pytest.raises(TypeError, match="lse"):
        cross_entropy_bwd(one, logits, target, lse.float())
    with pytest.raises(ValueError, match="lse"):
        cross_entropy_bwd(one, logits, target, lse[:3])
    with pytest.raises(TypeError, match="count"):
        cross_entropy_bwd(one, logits, target, lse, count=count.float())
    with pytest.raises(ValueError, match="count"):
        cross_entropy_bwd(one, logits, target, lse, count=count.reshape(1))


@pytest.mark.skipif(ON_GPU, reason="on a GPU out-of-range targets raise a device-side assert, which ends the process")
def test_target_out_of_range(device):
    h, w, _ = lce_inputs(4, 8, 50, False, torch.float32, device)
    for bad in (50, -1):
        target = make_target(4, 50, "some", device)
        target[1] = bad
        with pytest.raises(ValueError, match="target"):
            tritonkit.linear_cross_entropy(h, w, target)
        with pytest.raises(ValueError, match="target"):
            tritonkit.cross_entropy(torch.randn(4, 50, device=device), target)
