"""tritonkit under torch.distributed: two processes, gloo on the CPU with the kernels through
the interpreter; NCCL, one GPU a rank, where the kernels run compiled (skipped with fewer
than two GPUs).

One pair of worker processes (spawned once for the file, a free port on 127.0.0.1) serves
every test: a test hands each rank a worker function below; the worker checks its own
results against the single-process computation and raises on a mismatch, which fails the
test with the worker's traceback. Starting processes that import torch costs seconds, so
they are started once and each worker covers several cases.
"""

from __future__ import annotations

import os
import queue
import socket
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import tritonkit
from _tolerance import assert_close_to_reference, eps_for

WORLD = 2
TASK_TIMEOUT_S = 240  # one worker function on both ranks, on a loaded machine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DEVICE_TYPE = "cpu" if tritonkit.INTERPRETED else "cuda"


def _serve(rank: int, world: int, port: int, tasks, results) -> None:
    init = dict(init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    if DEVICE_TYPE == "cuda":
        torch.cuda.set_device(rank)
        torch.set_default_device(f"cuda:{rank}")  # the workers' tensors
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off on shared hosts
        dist.init_process_group("nccl", device_id=torch.device("cuda", rank), **init)
    else:
        dist.init_process_group("gloo", **init)
    try:
        while (task := tasks.get()) is not None:
            worker, args = task
            torch.manual_seed(0)  # the same full tensors on every rank
            try:
                worker(rank, world, *args)
                results.put((rank, None))
            except BaseException:
                results.put((rank, traceback.format_exc()))
    finally:
        dist.destroy_process_group()


class _Workers:
    """`world` processes in one gloo group, running the worker functions they are given."""

    def __init__(self, world: int):
        context = mp.get_context("spawn")
        self.world = world
        self.tasks = [context.Queue() for _ in range(world)]
        self.results = context.Queue()
        port = _free_port()
        self.processes = [context.Process(target=_serve, args=(rank, world, port, self.tasks[rank], self.results),
                                          daemon=True) for rank in range(world)]
        for process in self.processes:
            process.start()

    def run(self, worker, *args) -> None:
        for tasks in self.tasks:
            tasks.put((worker, args))
        errors = []
        for _ in range(self.world):
            try:
                rank, error = self.results.get(timeout=TASK_TIMEOUT_S)
            except queue.Empty:
                self.close(force=True)
                pytest.fail(f"{worker.__name__}: no answer from every rank in {TASK_TIMEOUT_S} s")
            if error is not None:
                errors.append(f"rank {rank}:\n{error}")
                if len(errors) == 1:  # the other rank may wait forever on the failed one
                    try:
                        rank, error = self.results.get(timeout=30)
                        if error is not None:
                            errors.append(f"rank {rank}:\n{error}")
                    except queue.Empty:
                        self.close(force=True)
                    break
        if errors:
            pytest.fail(f"{worker.__name__} failed\n" + "\n".join(errors), pytrace=False)

    def alive(self) -> bool:
        return all(p.is_alive() for p in self.processes)

    def close(self, force: bool = False) -> None:
        for process, tasks in zip(self.processes, self.tasks):
            if force:
                process.terminate()
            else:
                tasks.put(None)
        for process in self.processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()


_POOL: list[_Workers] = []


@pytest.fixture(scope="module")
def _pool():
    yield _POOL
    for workers in _POOL:
        workers.close()
    _POOL.clear()


@pytest.fixture
def run_on_ranks(_pool):
    """run_on_ranks(worker, *args): worker(rank, world, *args) on every rank of the group."""
    if DEVICE_TYPE == "cuda" and torch.cuda.device_count() < WORLD:
        pytest.skip(f"needs {WORLD} GPUs (one a rank), found {torch.cuda.device_count()}")

    def run(worker, *args):
        if not _pool or not _pool[-1].alive():
            _pool.append(_Workers(WORLD))
        _pool[-1].run(worker, *args)
    return run


# ---------------------------------------------------------------------------------------
# Ring attention
# ---------------------------------------------------------------------------------------

def _ring_attention_worker(rank: int, world: int, cases) -> None:
    from tritonkit.distributed import ring_attention, shard_for_ring, unshard_from_ring
    from tritonkit.ops.attention import attention_reference

    for i, (B, H, Hkv, N, D, causal, dtype) in enumerate(cases):
        q = torch.randn(B, H, N, D, dtype=dtype)
        k, v = (torch.randn(B, Hkv, N, D, dtype=dtype) for _ in range(2))
        do = torch.randn(B, H, N, D, dtype=dtype)
        shards = [shard_for_ring(t).requires_grad_() for t in (q, k, v)]
        out = ring_attention(*shards, causal=causal)
        grads = torch.autograd.grad(out, shards, shard_for_ring(do))
        if i == 0:  # the same call again gives the same bits (every sum in a fixed order)
            out2 = ring_attention(*shards, causal=causal)
            grads2 = torch.autograd.grad(out2, shards, shard_for_ring(do))
            assert torch.equal(out, out2) and all(torch.equal(a, b) for a, b in zip(grads, grads2)), \
                "not deterministic"

        what = f"B={B} H={H} Hkv={Hkv} N={N} D={D} causal={causal} {dtype}"
        full = [t.detach().requires_grad_() for t in (q, k, v)]
        ref = attention_reference(*full, causal)
        ref_grads = torch.autograd.grad(ref, full, do.double())
        same = attention_reference(*full, causal, upcast=False)
        same_grads = torch.autograd.grad(same, full, do)
        assert_close_to_reference(unshard_from_ring(out), ref, same, what=f"output {what}")
        for name, g, r, t in zip("qkv", grads, ref_grads, same_grads):
            assert_close_to_reference(unshard_from_ring(g), r, t, eps=eps_for(dtype, gradient=True),
                                      what=f"d{name} {what}")


def test_ring_attention_matches_single_process(run_on_ranks):
    cases = [
        (1, 4, 2, 64, 16, True, torch.float16),    # GQA, causal, load-balanced layout
        (2, 2, 2, 36, 32, False, torch.float16),   # not causal; chunks of 9 (odd, past no block)
        (1, 2, 1, 44, 16, True, torch.bfloat16),   # MQA, chunks of 11
    ]
    run_on_ranks(_ring_attention_worker, cases)


def test_ring_attention_bad_input():
    from tritonkit.distributed import ring_attention

    q = torch.randn(1, 2, 6, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="^q holds 5"):
        ring_attention(q[:, :, :5], q[:, :, :5], q[:, :, :5], causal=True)
    with pytest.raises(ValueError, match="^k holds 4"):
        ring_attention(q, q[:, :, :4], q[:, :, :4], causal=False)
    with pytest.raises(ValueError, match="^v has shape"):
        ring_attention(q, q, q[:, :1], causal=False)
    with pytest.raises(ValueError, match="^k must be 4-D"):
        ring_attention(q, q[0], q[0], causal=False)
    with pytest.raises(TypeError, match="^v must be a torch.Tensor"):
        ring_attention(q, q, None, causal=False)


# ---------------------------------------------------------------------------------------
# DTensor: tritonkit ops on sharded inputs equal the ops on the full tensors
# ---------------------------------------------------------------------------------------

def _dtensor_worker(rank: int, world: int) -> None:
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor, init_device_mesh

    mesh = init_device_mesh(DEVICE_TYPE, (world,))

    def check(fn, inputs, placements, grad=True, what="", exact=True):
        """fn on DTensors placed as given equals fn on the full tensors, bit for bit, forward
        and backward (grad: True for every float input, or the indices of those that get
        a gradient); a result reduced across ranks (a Partial loss, a replicated
        weight's gradient), or with exact=False (a kernel that blocks its work by the row count),
        up to float32 rounding. Returns the DTensor outputs."""
        wants = [bool(grad) and t.is_floating_point() and (grad is True or i in grad) for i, t in enumerate(inputs)]
        full = [t.detach().requires_grad_(w) for t, w in zip(inputs, wants)]
        dts = [distribute_tensor(t.detach(), mesh, [p]).requires_grad_(w) for t, p, w in zip(inputs, placements, wants)]
        expected, out = fn(*full), fn(*dts)
        expected, out = (expected, out) if isinstance(out, tuple) else ((expected,), (out,))

        def same(ours, ref, name):
            reduced = not exact or any(p.is_partial() for p in ours.placements) or ref.dim() == 0
            ours = ours.full_tensor()
            ok = torch.allclose(ours, ref, rtol=1e-5, atol=1e-6) if reduced else torch.equal(ours, ref)
            assert ok, f"{what}: {name} differs (max {(ours - ref).abs().max().item():.2e})"

        for i, (o, e) in enumerate(zip(out, expected)):
            same(o, e, f"output {i}")
        if grad:
            upstream = [torch.randn_like(e) for e in expected]
            wrt = [(d, f) for d, f in zip(dts, full) if f.requires_grad]
            expected_grads = torch.autograd.grad(expected, [f for _, f in wrt], upstream)
            grads = torch.autograd.grad(out, [d for d, _ in wrt],
                                        [distribute_tensor(u, mesh, [Replicate() if p.is_partial() else p
                                                                     for p in o.placements])
                                         for u, o in zip(upstream, out)])
            for i, (g, e) in enumerate(zip(grads, expected_grads)):
                same(g, e, f"gradient of input {i}")
        return out

    x = torch.randn(4, 6, 10)
    # add: elementwise, a broadcast operand replicated
    out, = check(tritonkit.add, [x, torch.randn(10)], [Shard(1), Replicate()], what="add, broadcast")
    assert out.placements == (Shard(1),)
    check(tritonkit.add, [x, torch.randn_like(x)], [Shard(0), Shard(0)], what="add")
    # softmax and the norms: rows split across ranks (sequence parallelism shards the tokens)
    for d in (0, 1):
        out, = check(lambda t: tritonkit.softmax(t, -1), [x], [Shard(d)], what=f"softmax Shard({d})")
        assert out.placements == (Shard(d),)
    w = torch.randn(10)
    out, = check(lambda t, w: tritonkit.rms_norm(t, w), [x, w], [Shard(1), Replicate()], what="rms_norm")
    assert out.placements == (Shard(1),)
    check(lambda t, w, r: tritonkit.rms_norm(t, w, residual=r), [x, w, torch.randn_like(x)],
          [Shard(1), Replicate(), Shard(1)], what="rms_norm, residual")
    check(lambda t, w, b: tritonkit.layer_norm(t, w, b), [x, w, torch.randn(10)], [Shard(0), Replicate(), Replicate()],
          what="layer_norm")
    # swiglu: tensor parallelism shards the MLP's intermediate (last) dim
    gate, up = torch.randn(2, 6, 16), torch.randn(2, 6, 16)
    out, = check(tritonkit.swiglu, [gate, up], [Shard(2), Shard(2)], what="swiglu")
    assert out.placements == (Shard(2),)
    # gated_linear: the tokens (weight replicated, its gradient Partial), or the intermediate
    # dim as a row-parallel down projection (the output Partial)
    down = torch.randn(8, 16)
    out, = check(tritonkit.gated_linear, [gate, up, down, torch.randn(8)], [Shard(1), Shard(1), Replicate(),
                 Replicate()], what="gated_linear, tokens", exact=False)
    assert out.placements == (Shard(1),)
    out, = check(tritonkit.gated_linear, [gate, up, down], [Shard(2), Shard(2), Shard(1)],
                 what="gated_linear, intermediate", exact=False)
    assert out.placements == (Partial(),)
    # attention and RoPE: tensor parallelism shards the heads (GQA: H and Hkv alike); batch
    q = torch.randn(2, 4, 12, 16, dtype=torch.float16)
    k, v = (torch.randn(2, 2, 12, 16, dtype=torch.float16) for _ in range(2))
    for d in (1, 0):
        out, = check(lambda *a: tritonkit.attention(*a, causal=True), [q, k, v], [Shard(d)] * 3,
                     what=f"attention Shard({d})")
        assert out.placements == (Shard(d),)
    # packed sequences: heads sharded, the tokens and cu_seqlens whole on each rank
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)
    packed = [t.transpose(1, 2).reshape(-1, t.shape[1], 16)[:12].contiguous() for t in (q, k, v)]
    out, = check(lambda q, k, v, c: tritonkit.attention_varlen(q, k, v, c, c, 7, 7, causal=True),
                 [*packed, cu], [Shard(1), Shard(1), Shard(1), Replicate()], what="attention_varlen Shard(1)")
    assert out.placements == (Shard(1),)
    refused_varlen = [distribute_tensor(t, mesh, [Shard(0)]) for t in packed]
    cos, sin = torch.randn(12, 16), torch.randn(12, 16)
    outs = check(lambda q, k, c, s: tritonkit.rope(q, k, c, s), [q.float(), k.float(), cos, sin],
                 [Shard(1), Shard(1), Replicate(), Replicate()], grad=(0, 1), what="rope")
    assert [o.placements for o in outs] == [(Shard(1),)] * 2
    # linear cross-entropy: tokens sharded, weight replicated, summed loss (Partial)
    hidden, weight, target = torch.randn(12, 16), torch.randn(32, 16), torch.randint(0, 32, (12,))
    loss, = check(lambda h, w, t: tritonkit.linear_cross_entropy(h, w, t, reduction="sum"), [hidden, weight, target],
                  [Shard(0), Replicate(), Shard(0)], what="linear_cross_entropy", exact=False)
    assert loss.placements == (Partial(),)
    # ... and the vocabulary: the weight's rows (and the bias) sharded, 37 rows over 2 ranks
    # (19 and 18), the loss replicated; in chunks of 5 tokens, with ignored targets
    vocab_target = torch.randint(0, 37, (12,))
    vocab_target[[2, 7]] = -100
    for reduction, options in (("mean", {}), ("sum", {"label_smoothing": 0.1}), ("none", {"softcap": 3.0}),
                               ("mean", {"label_smoothing": 0.2, "softcap": 2.0})):
        loss, = check(lambda h, w, t, b: tritonkit.linear_cross_entropy(h, w, t, bias=b, reduction=reduction,
                                                                         chunk_tokens=5, **options),
                      [hidden, torch.randn(37, 16), vocab_target, torch.randn(37)],
                      [Replicate(), Shard(0), Replicate(), Shard(0)], what=f"linear_cross_entropy, vocabulary, "
                      f"{reduction} {options}", exact=False)
        assert loss.placements == (Replicate(),)
    _vocab_parallel_bf16(mesh)

    def refused(fn, message):
        try:
            fn()
        except ValueError as e:
            assert message in str(e), f"error {e!r} lacks {message!r}"
        else:
            raise AssertionError(f"no ValueError containing {message!r}")

    refused(lambda: tritonkit.softmax(distribute_tensor(x, mesh, [Shard(2)]), -1),
            "x is sharded along dim 2 (Shard(2))")
    refused(lambda: tritonkit.attention(*(distribute_tensor(t, mesh, [Shard(2)]) for t in (q, k, v))),
            "tritonkit.distributed.ring_attention")
    refused(lambda: tritonkit.attention(*(distribute_tensor(t, mesh, [Shard(3)]) for t in (q, k, v))),
            "q is sharded along dim 3")
    refused(lambda: tritonkit.rms_norm(distribute_tensor(x, mesh, [Shard(2)]), distribute_tensor(w, mesh, [Replicate()])),
            "x is sharded along dim 2")
    refused(lambda: tritonkit.linear_cross_entropy(*(distribute_tensor(t, mesh, [p]) for t, p in zip(
        (hidden, weight, target), (Replicate(), Shard(1), Replicate())))), "hidden dim (dim 1) may not be sharded")
    refused(lambda: tritonkit.linear_cross_entropy(*(distribute_tensor(t, mesh, [p]) for t, p in zip(
        (hidden, weight, target), (Shard(0), Shard(0), Shard(0))))), "hidden and target must be replicated")
    refused(lambda: tritonkit.cross_entropy(distribute_tensor(torch.randn(12, 32), mesh, [Shard(1)]),
                                            distribute_tensor(target, mesh, [Replicate()])),
            "vocabulary may not be sharded here")
    refused(lambda: tritonkit.linear_cross_entropy(*(distribute_tensor(t, mesh, [p]) for t, p in zip(
        (hidden, weight, target), (Shard(0), Replicate(), Shard(0))))), "reduction='mean'")
    refused(lambda: tritonkit.swiglu(distribute_tensor(torch.randn(2, 6, 32), mesh, [Shard(2)])), "packed gate")
    refused(lambda: tritonkit.gated_linear(*(distribute_tensor(t, mesh, [p]) for t, p in zip(
        (gate, up, down, torch.randn(8)), (Shard(2), Shard(2), Shard(1), Replicate())))), "without a bias")
    refused(lambda: tritonkit.attention_varlen(*refused_varlen, distribute_tensor(cu, mesh, [Replicate()]),
                                               distribute_tensor(cu, mesh, [Replicate()]), 7, 7),
            "packed tokens and cu_seqlens stay whole")
    mqa = torch.randn(2, 1, 12, 16, dtype=torch.float16)
    refused(lambda: tritonkit.attention(*(distribute_tensor(t, mesh, [Shard(1)]) for t in (q, mqa, mqa))),
            "k has 1 heads, sharded over 2 ranks")


def _vocab_parallel_bf16(mesh) -> None:
    """The vocabulary-parallel linear cross-entropy in bfloat16 against the float64 reference,
    within torch's own bfloat16 error (its reduction order differs from the unsharded op's)."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from tritonkit.ops.cross_entropy.linear import linear_cross_entropy_reference

    torch.manual_seed(1)  # the same draws on every rank
    h, w, b = torch.randn(40, 32, dtype=torch.bfloat16), torch.randn(101, 32, dtype=torch.bfloat16), torch.randn(101)
    b = b.bfloat16()
    t = torch.randint(0, 101, (40,))
    t[:3] = -100
    options = dict(reduction="none", label_smoothing=0.1, softcap=5.0)
    leaves = [distribute_tensor(x, mesh, [p]).requires_grad_() for x, p in ((h, Replicate()), (w, Shard(0)),
                                                                             (b, Shard(0)))]
    loss = tritonkit.linear_cross_entropy(leaves[0], leaves[1], distribute_tensor(t, mesh, [Replicate()]),
                                          bias=leaves[2], **options)
    g = torch.randn(40)
    ours = [loss, *torch.autograd.grad(loss, leaves, distribute_tensor(g, mesh, [Replicate()]))]
    ours = [x.full_tensor() for x in ours]
    results = {}
    for name, upcast, cast in (("float64", True, torch.Tensor.double), ("torch", False, torch.Tensor.clone)):
        xs = [cast(x).requires_grad_() for x in (h, w, b)]
        out = linear_cross_entropy_reference(xs[0], xs[1], t, bias=xs[2], upcast=upcast, **options)
        results[name] = [out, *torch.autograd.grad(out, xs, g.to(out.dtype))]
    for what, o, ref, theirs in zip(("loss", "grad hidden", "grad weight", "grad bias"), ours, results["float64"],
                                    results["torch"]):
        assert_close_to_reference(o.to(theirs.dtype), ref, theirs, eps_for(torch.bfloat16, gradient=what != "loss"),
                                  what=f"vocabulary-parallel linear_cross_entropy, bf16: {what}")


def test_dtensor_ops_match_unsharded(run_on_ranks):
    run_on_ranks(_dtensor_worker)


def test_every_custom_op_has_a_sharding_rule():
    from tritonkit.distributed.sharding import unregistered_ops

    assert unregistered_ops() == [], ("give each of these ops' declarations a rule (Op(..., forward_sharding=..., "
                                      "backward_sharding=...), see tritonkit/_sharding.py)")


# ---------------------------------------------------------------------------------------
# FSDP2: examples/train_fsdp.py on two ranks equals one rank with the same data
# ---------------------------------------------------------------------------------------

def _load_example(name: str):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fsdp_worker(rank: int, world: int, patch: str) -> None:
    example = _load_example("train_fsdp")
    common = ["--config", "tiny", "--steps", "2", "--warmup", "0", "--quiet", "--patch", patch]
    sharded = example.train(example.parse_args(common))
    # One rank alone (a group of itself) with world micro-batches a step sees the same data.
    solos = [dist.new_group([r]) for r in range(world)]
    solo = example.train(example.parse_args(common + ["--grad-accum", str(world)]), group=solos[rank])
    assert sharded["world"] == world and solo["world"] == 1
    assert torch.allclose(torch.tensor(sharded["losses"]), torch.tensor(solo["losses"]), rtol=1e-5, atol=0), \
        f"losses: {sharded['losses']} (FSDP over {world}) vs {solo['losses']} (one rank)"
    named = dict(solo["model"].named_parameters())
    for name, p in sharded["model"].named_parameters():
        ours, ref = p.full_tensor(), named[name].full_tensor()
        assert torch.allclose(ours, ref, rtol=1e-5, atol=1e-7), \
            f"{name}: max difference {(ours - ref).abs().max().item():.3e} after 2 steps"


def test_fsdp_training_matches_one_process(run_on_ranks):
    pytest.importorskip("transformers", reason="the FSDP example trains a Hugging Face Llama")
    run_on_ranks(_fsdp_worker, "tritonkit")


# ---------------------------------------------------------------------------------------
# Mixture of experts: expert parallelism (all-to-all), and DTensor tokens
# ---------------------------------------------------------------------------------------

def _moe_full(world: int, tokens: int):
    """The same full tensors on every rank: (hidden, indices, routing weights, gate_up, down,
    gate_up_bias, down_bias) for world * tokens tokens, 3 experts a rank, gpt-oss's layout."""
    hidden, width, experts, k = 20, 12, 3 * world, 2
    x = torch.randn(world * tokens, hidden)
    indices = torch.rand(world * tokens, experts).topk(k, dim=1).indices
    indices[3, 1] = experts  # routed nowhere
    weights = torch.randn(world * tokens, k).softmax(-1)
    return [x, indices, weights, torch.randn(experts, 2 * width, hidden) / 4, torch.randn(experts, hidden, width) / 3,
            torch.randn(experts, 2 * width), torch.randn(experts, hidden)]


def _moe_worker(rank: int, world: int) -> None:
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor, init_device_mesh
    from tritonkit.distributed import moe_experts_ep
    from tritonkit.ops.moe import moe_experts_reference

    mesh = init_device_mesh(DEVICE_TYPE, (world,))
    options = dict(activation="gpt_oss", interleaved=True)
    tokens = 9
    full = _moe_full(world, tokens)
    mine = slice(rank * tokens, (rank + 1) * tokens)
    upstream = torch.randn(world * tokens, full[0].shape[1])
    float_at = (0, 2, 3, 4, 5, 6)

    def expert_parallel(indices):
        leaves = [t.detach().requires_grad_() for t in (full[0][mine], full[2][mine])]
        params = [distribute_tensor(t, mesh, [Shard(0)]).requires_grad_() for t in full[3:]]
        out = moe_experts_ep(leaves[0], indices[mine], leaves[1], *params, **options)
        grads = torch.autograd.grad(out, leaves + params, upstream[mine])
        return [out, *grads[:2], *(g.full_tensor() for g in grads[2:])]

    # Against the float64 per-expert loop on all tokens (within twice torch's float32 error):
    # this rank's output, hidden and routing-weight gradients, and every expert's gradients
    # (each rank's experts see the rows of every rank's tokens).
    for indices in (full[1], full[1] % 3):   # random; then every slot to rank 0's experts
        ours = expert_parallel(indices)
        assert all(torch.equal(a, b) for a, b in zip(ours, expert_parallel(indices))), "not deterministic"
        results = {}
        for name, upcast in (("float64", True), ("torch", False)):
            leaves = [full[i].detach().double().requires_grad_() if upcast else full[i].detach().requires_grad_()
                      for i in float_at]
            args = [leaves[0], indices, *leaves[1:]]
            out = moe_experts_reference(*args, **options, upcast=upcast)
            results[name] = [out, *torch.autograd.grad(out, leaves, upstream.to(out.dtype))]
        for what, o, ref, theirs in zip(("output", "grad hidden", "grad routing_weights", "grad gate_up_weight",
                                         "grad down_weight", "grad gate_up_bias", "grad down_bias"),
                                        ours, results["float64"], results["torch"]):
            if what in ("output", "grad hidden", "grad routing_weights"):
                ref, theirs = ref[mine], theirs[mine]
            assert_close_to_reference(o, ref, theirs, eps_for(torch.float32, gradient=what != "output"),
                                      what=f"moe_experts_ep: {what}")

    # DTensor through moe_experts itself: the tokens sharded, the experts replicated (their
    # gradients Partial); the experts sharded are refused, pointing to moe_experts_ep.
    placements = [Shard(0)] * 3 + [Replicate()] * 4
    dts = [distribute_tensor(t, mesh, [p]) for t, p in zip(full, placements)]
    dts = [d.requires_grad_() if i in float_at else d for i, d in enumerate(dts)]
    out = tritonkit.moe_experts(*dts, **options)
    assert out.placements == (Shard(0),)
    plain = [t.detach().requires_grad_() if i in float_at else t for i, t in enumerate(full)]
    expected = tritonkit.moe_experts(*plain, **options)
    assert torch.equal(out.full_tensor(), expected), "moe_experts on token shards differs"
    grads = torch.autograd.grad(out, [dts[i] for i in float_at], distribute_tensor(upstream, mesh, [Shard(0)]))
    expected_grads = torch.autograd.grad(expected, [plain[i] for i in float_at], upstream)
    for i, g, e in zip(float_at, grads, expected_grads):
        assert torch.allclose(g.full_tensor(), e, rtol=1e-5, atol=1e-6), f"moe_experts DTensor: gradient {i}"
    try:
        tritonkit.moe_experts(*dts[:3], *(distribute_tensor(t, mesh, [Shard(0)]) for t in full[3:]), **options)
    except ValueError as e:
        assert "moe_experts_ep" in str(e), e
    else:
        raise AssertionError("experts sharded by expert were not refused")


def test_moe_expert_parallel_and_dtensor_tokens(run_on_ranks):
    run_on_ranks(_moe_worker)
