"""tritonkit.attention, backward: gradients through torch.autograd.grad with a random
upstream gradient, against float64 reference gradients, with SDPA's error as the yardstick;
determinism; the module API; and the torch.compile(fullgraph=True) trace.

Interpreter notes as in test_attention.py: bf16 operands of tl.dot are widened to fp32
under the interpreter only, and its truncating bf16 casts get the wider gradient eps.
"""

import copy
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import tritonkit
from tritonkit._launch import record_launches
from tritonkit.ops import attention as attention_module
from tritonkit.ops.attention import attention_bwd, attention_fwd, attention_reference
from tritonkit.ops.attention.score import Score
from tritonkit.registry.attention import packed_qkv
from _tolerance import assert_close_to_reference, eps_for
from conftest import ON_GPU
from test_attention import CASE_PARAMS, DTYPES, PATH_CASES, _layout, make_qkv, poison_outputs, sdpa  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[1]


def grads(fn, leaves, upstream):
    leaves = [t.detach().requires_grad_() for t in leaves]
    return torch.autograd.grad(fn(*leaves), leaves, upstream)


def reference_grads(q, k, v, causal, do, scale=None):
    """dq, dk, dv of the float64 reference, and SDPA's in the inputs' dtype (the yardstick)."""
    wide = grads(lambda *t: attention_reference(*t, causal, scale, upcast=False),
                 [t.double() for t in (q, k, v)], do.double())
    theirs = grads(lambda *t: sdpa(*t, causal, scale, flash_first=True), (q, k, v), do)
    return wide, theirs


def check_backward(q, k, v, causal, upstream=None, scale=None):
    upstream = torch.randn_like(q) if upstream is None else upstream
    ours = grads(lambda *t: tritonkit.attention(*t, causal=causal, scale=scale), (q, k, v), upstream)
    wide, theirs = reference_grads(q, k, v, causal, upstream, scale)
    for name, a, ref, b, like in zip(("dq", "dk", "dv"), ours, wide, theirs, (q, k, v)):
        assert a.dtype == like.dtype and a.shape == like.shape, name
        assert_close_to_reference(a, ref, b, eps=eps_for(q.dtype, gradient=True), what=name)
    return ours


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,causal", CASE_PARAMS)
def test_backward(B, H, Hkv, Nq, Nk, D, causal, dtype, device):
    if Nk == 2 and dtype == torch.bfloat16 and tritonkit.INTERPRETED:
        pytest.skip("the interpreter truncates O to bf16 (up to an ulp low); the cancelling dS of a "
                    "2-key row amplifies that past eps. Compiled runs round to nearest.")
    check_backward(*make_qkv(B, H, Hkv, Nq, Nk, D, dtype, device), causal)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_packed_qkv_at_odd_offset(dtype, causal, device):
    # One gradient for the whole packed projection buffer, which starts at an odd element:
    # dq, dk, dv are scattered back into its interleaved (B, N, 3, H, D) layout.
    q, k, v = packed_qkv(1, 2, 45, 32, dtype, device, offset=1)
    storage = q._base.detach().requires_grad_()
    offset, shape, strides = q.storage_offset(), q.shape, (q.stride(), k.stride(), v.stride())
    upstream = torch.randn(shape, dtype=dtype, device=device)

    def views(buffer):
        return [buffer.as_strided(shape, st, offset + i * shape[-1] * shape[1]) for i, st in enumerate(strides)]

    def through(fn, buffer):
        return torch.autograd.grad(fn(*views(buffer)), buffer, upstream)[0]

    assert torch.equal(views(storage)[1], k)
    ours = through(lambda *t: tritonkit.attention(*t, causal=causal), storage)
    theirs = through(lambda *t: sdpa(*t, causal, flash_first=True), storage)
    wide = storage.detach().double().requires_grad_()
    ref = torch.autograd.grad(attention_reference(*views(wide), causal, upcast=False), wide, upstream.double())[0]
    assert_close_to_reference(ours, ref, theirs, eps=eps_for(dtype, gradient=True), what="d(packed qkv)")


@pytest.mark.parametrize("dtype", DTYPES)
def test_transposed_layouts_and_strided_upstream(dtype, device):
    B, H, Hkv, N, D = 2, 4, 2, 50, 32
    q = torch.randn(B, N, H, D, dtype=dtype, device=device).transpose(1, 2)
    k = torch.randn(B, Hkv, N, 2 * D, dtype=dtype, device=device)[..., D:]
    v = torch.randn(B, Hkv, D, N, dtype=dtype, device=device).transpose(-1, -2)
    upstream = torch.randn(B, H, D, N, dtype=dtype, device=device).transpose(-1, -2)  # not unit-stride
    dq, dk, dv = check_backward(q, k, v, causal=True, upstream=upstream)
    assert dq.transpose(1, 2).is_contiguous()  # gradients follow their inputs' memory order


def test_broadcast_upstream_gradient(device):
    # out.sum() sends back an expanded gradient: every stride 0.
    q, k, v = make_qkv(1, 2, 1, 33, 20, 16, torch.float16, device)
    check_backward(q, k, v, causal=False, upstream=torch.ones((), dtype=q.dtype, device=device).expand(q.shape))


def test_backward_is_deterministic(device):
    # GQA: dk and dv are sums over the group's query heads, taken in a fixed order.
    q, k, v = make_qkv(2, 4, 1, 77, 90, 64, torch.bfloat16, device)
    upstream = torch.randn_like(q)
    first = grads(lambda *t: tritonkit.attention(*t, causal=True), (q, k, v), upstream)
    second = grads(lambda *t: tritonkit.attention(*t, causal=True), (q, k, v), upstream)
    assert all(torch.equal(a, b) for a, b in zip(first, second))


@pytest.mark.parametrize("path", ["tensor descriptors", "pointers"])
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,causal", PATH_CASES)
def test_backward_paths(B, H, Hkv, Nq, Nk, D, causal, path, device):
    # The backward launcher alone, its streamed tiles (Q, dO for dK/dV; K, V for dQ) read
    # through tensor descriptors or through pointers: ragged blocks, padded D, GQA, causal.
    q, k, v = make_qkv(B, H, Hkv, Nq, Nk, D, torch.float16, device)
    do = torch.randn_like(q)
    o, lse = attention_fwd(q, k, v, causal)
    with record_launches() as launches:
        ours = attention_bwd(do, q, k, v, o, lse, causal, tma=path == "tensor descriptors")
    assert [launch.constexprs.get("USE_TMA") for launch in launches[1:]] == [path == "tensor descriptors"] * 2
    wide, theirs = reference_grads(q, k, v, causal, do)
    for name, a, ref, b in zip(("dq", "dk", "dv"), ours, wide, theirs):
        assert_close_to_reference(a, ref, b, eps=eps_for(q.dtype, gradient=True), what=f"{name} ({path})")


@pytest.mark.parametrize("path", ["tensor descriptors", "pointers"])
def test_backward_never_reads_past_the_end(path, device):
    # Every operand is the first rows of a taller buffer whose extra rows hold NaN (Nq=37 and
    # Nk=50 of 64 rows a head): a streamed tile that read past the end, or into the next head,
    # would turn a gradient NaN.
    B, H, D = 1, 2, 32

    def rows_of_nan_buffer(n):
        t = torch.full((B, H, 64, D), float("nan"), dtype=torch.float16, device=device)
        t[:, :, :n] = torch.randn(B, H, n, D, dtype=torch.float16, device=device)
        return t[:, :, :n]

    q, do = rows_of_nan_buffer(37), rows_of_nan_buffer(37)
    k, v = rows_of_nan_buffer(50), rows_of_nan_buffer(50)
    o, lse = attention_fwd(q, k, v, False)
    ours = attention_bwd(do, q, k, v, o, lse, False, tma=path == "tensor descriptors")
    wide, theirs = reference_grads(q, k, v, False, do)
    for name, a, ref, b in zip(("dq", "dk", "dv"), ours, wide, theirs):
        assert_close_to_reference(a, ref, b, eps=eps_for(q.dtype, gradient=True), what=f"{name} ({path})")


BWD_TMA_LAYOUTS = {  # layout -> (dK/dV reads q, dO through descriptors, dQ reads k, v through them)
    "contiguous (B, H, N, D)": (True, True),
    "(B, N, H, D) memory, transposed views": (True, True),
    "packed qkv at offset 8": (True, True),
    "packed qkv at offset 1": (False, False),
    "k rows 68 elements apart (136 B)": (True, False),
    "k broadcast over the batch (stride 0)": (True, False),
    "q head dim not innermost (copied)": (True, True),
}


@pytest.mark.parametrize("name", list(BWD_TMA_LAYOUTS))
def test_backward_tma_per_pass_follows_the_host_check(name, device):
    # Each pass of the Triton backward decides for the operands it streams; a mixed case (dK/dV
    # through descriptors, dQ through pointers) must be as right as the others.
    q, k, v = _layout(name, device)
    do = torch.randn(q.shape, dtype=q.dtype, device=device)
    o, lse = attention_fwd(q, k, v, True)
    with record_launches() as launches:
        ours = attention_bwd(do, q, k, v, o, lse, True, gluon=False)
    assert tuple(launch.constexprs["USE_TMA"] for launch in launches[1:]) == BWD_TMA_LAYOUTS[name]
    if name == "k rows 68 elements apart (136 B)":
        wide, theirs = reference_grads(q, k, v, True, do)
        for label, a, ref, b in zip(("dq", "dk", "dv"), ours, wide, theirs):
            assert_close_to_reference(a, ref, b, eps=eps_for(q.dtype, gradient=True), what=label)


def test_backward_tma_refused_where_inputs_do_not_allow_it(device):
    q, k, v = (t.detach() for t in packed_qkv(1, 2, 24, 16, torch.float16, device, offset=1))
    do = torch.randn_like(q)
    o, lse = attention_fwd(q, k, v, False)
    with record_launches() as launches:
        attention_bwd(do, q, k, v, o, lse, False)  # silently through pointers
    assert [launch.constexprs.get("USE_TMA") for launch in launches[1:]] == [False, False]
    with pytest.raises(ValueError, match="tensor descriptors"):
        attention_bwd(do, q, k, v, o, lse, False, tma=True)


def test_backward_descriptors_take_the_tile_of_the_config_that_launches():
    q, k, v, do = (torch.randn(1, 2, 64, 64, dtype=torch.float16) for _ in range(4))
    descs = [attention_module._descriptor(t, 16, 64) for t in (q, k, v, do)]
    head = attention_module.head_tiles(64, 64)
    attention_module._fit_dkdv_descriptors(*descs, USE_TMA=True, BLOCK_M=32, BLOCK_N=128, HEAD=head)
    assert [d.block_shape for d in descs] == [[1, 1, 32, 64], [1, 1, 16, 64], [1, 1, 16, 64], [1, 1, 32, 64]]
    attention_module._fit_dq_descriptors(*descs, USE_TMA=True, BLOCK_M=32, BLOCK_N=128, HEAD=head)
    assert [d.block_shape for d in descs[1:3]] == [[1, 1, 128, 64], [1, 1, 128, 64]]
    assert attention_module._fit_dkdv_descriptors in attention_module._attn_bwd_dkdv_kernel.pre_run_hooks
    assert attention_module._fit_dq_descriptors in attention_module._attn_bwd_dq_kernel.pre_run_hooks
    for tuned in (attention_module._attn_bwd_dkdv_tuned, attention_module._attn_bwd_dq_tuned):
        assert "USE_TMA" in tuned.keys


@pytest.mark.gpu
def test_concurrent_dq_matches_sequential(device):
    # dQ on a side stream beside dK/dV gives bitwise the gradients of the two passes in turn,
    # and the current stream sees them without a synchronize (GQA and causal: every pass busy).
    q, k, v = make_qkv(2, 8, 2, 1000, 1100, 128, torch.bfloat16, device)
    do = torch.randn_like(q)
    o, lse = attention_fwd(q, k, v, True)
    sequential = attention_bwd(do, q, k, v, o, lse, True, concurrent_dq=False)
    for _ in range(3):
        concurrent = attention_bwd(do, q, k, v, o, lse, True, concurrent_dq=True)
        sums = [t.float().sum() for t in concurrent]   # read on the current stream at once
        assert all(torch.equal(a, b) for a, b in zip(concurrent, sequential))
        assert all(torch.equal(s, t.float().sum()) for s, t in zip(sums, sequential))


def test_backward_launcher_alone(device):
    # The backward kernels fed our forward's saved tensors, with no autograd in between.
    q, k, v = make_qkv(1, 2, 2, 40, 40, 32, torch.float16, device)
    do = torch.randn_like(q)
    o, lse = attention_fwd(q, k, v, True)
    dq, dk, dv = attention_bwd(do, q, k, v, o, lse, True)
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
    with pytest.raises(ValueError, match="do has shape"):
        attention_bwd(do[:, :1], q, k, v, o, lse, True)
    with pytest.raises(ValueError, match="lse has shape"):
        attention_bwd(do, q, k, v, o, lse[:, :1], True)
    with pytest.raises(TypeError, match="lse has dtype"):
        attention_bwd(do, q, k, v, o, lse.half(), True)


def test_custom_op_registrations(device):
    q, k, v = make_qkv(1, 2, 1, 24, 18, 16, torch.float16, device, requires_grad=True)
    torch.library.opcheck(torch.ops.tritonkit.attention_fwd.default, (q, k, v, True, 0.25))


# ---------------------------------------------------------------------------------------
# The module: tritonkit.nn.Attention
# ---------------------------------------------------------------------------------------

def torch_attention_module(module: tritonkit.nn.Attention, x: torch.Tensor) -> torch.Tensor:
    """The same layer in plain torch: the module's own weights, SDPA in place of the kernel."""
    q, k, v = module.split_heads(x)
    o = sdpa(q, k, v, module.causal, flash_first=True)
    return module.proj(o.transpose(1, 2).flatten(2))


def float64_module_grads(module: tritonkit.nn.Attention, x: torch.Tensor, upstream: torch.Tensor):
    """The layer's output and its gradients (x, then the parameters) in float64, through the
    float64 attention reference: the yardstick for the module tests."""
    ref_module = copy.deepcopy(module).double()
    x64 = x.detach().double().requires_grad_()
    q, k, v = ref_module.split_heads(x64)
    out = ref_module.proj(attention_reference(q, k, v, module.causal, upcast=False).transpose(1, 2).flatten(2))
    return out, torch.autograd.grad(out, [x64, *ref_module.parameters()], upstream.double())


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_nn_attention_matches_torch(kv_heads, device):
    torch.manual_seed(1)
    dtype = torch.bfloat16
    module = tritonkit.nn.Attention(128, 4, kv_heads, causal=True, bias=True, device=device, dtype=dtype)
    x = torch.randn(2, 37, 128, device=device, dtype=dtype, requires_grad=True)
    params = [x, *module.parameters()]
    out = module(x)
    upstream = torch.randn_like(out)
    ours = torch.autograd.grad(out, params, upstream)
    ref_out, ref = float64_module_grads(module, x, upstream)
    theirs_out = torch_attention_module(module, x)
    theirs = torch.autograd.grad(theirs_out, params, upstream)
    assert_close_to_reference(out, ref_out, theirs_out)
    names = ["x"] + [n for n, _ in module.named_parameters()]
    for name, a, r, b in zip(names, ours, ref, theirs):
        assert_close_to_reference(a, r, b, eps=eps_for(dtype, gradient=True), what=f"grad of {name}")


def test_nn_attention_under_autocast(device):
    # The usual training setup: float32 weights and inputs, bf16 autocast. The projections
    # hand the kernel bf16 q, k, v; ours must match the same layer with SDPA under the same
    # autocast, forward and every gradient.
    torch.manual_seed(2)
    module = tritonkit.nn.Attention(64, 4, 2, causal=True, device=device)
    x = torch.randn(2, 29, 64, device=device, requires_grad=True)
    params = [x, *module.parameters()]
    with torch.autocast(device.type, dtype=torch.bfloat16):
        out = module(x)
        theirs_out = torch_attention_module(module, x)
    assert out.dtype == theirs_out.dtype == torch.bfloat16
    upstream = torch.randn_like(out)
    ours = torch.autograd.grad(out, params, upstream)
    theirs = torch.autograd.grad(theirs_out, params, upstream)
    ref_out, ref = float64_module_grads(module, x, upstream)  # no autocast there
    assert_close_to_reference(out, ref_out, theirs_out)
    for name, a, r, b in zip(["x"] + [n for n, _ in module.named_parameters()], ours, ref, theirs):
        assert a.dtype == b.dtype == torch.float32, name
        assert_close_to_reference(a, r, b, eps=eps_for(torch.bfloat16, gradient=True), what=f"grad of {name}")


def test_nn_attention_refuses_bad_shapes():
    with pytest.raises(ValueError, match="num_heads"):
        tritonkit.nn.Attention(100, 3)
    with pytest.raises(ValueError, match="num_kv_heads"):
        tritonkit.nn.Attention(128, 4, 3)
    with pytest.raises(ValueError, match="head_dim 520"):
        tritonkit.nn.Attention(4 * 520, 4)


def test_compile_fullgraph_traces_forward_and_backward(device):
    # fullgraph=True fails on any graph break; the captured graphs must call our custom ops
    # (the kernels stay opaque to the compiler). aot_eager keeps CI fast; on the CPU the
    # compiled graph calls the interpreter.
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = {}

    def keep(name):
        def compiler(gm, example_inputs):
            graphs[name] = gm.code
            return make_boxed_func(gm.forward)
        return compiler

    torch._dynamo.reset()
    torch.manual_seed(2)
    module = tritonkit.nn.Attention(64, 4, 2, causal=True, device=device, dtype=torch.float16)
    x = torch.randn(2, 19, 64, device=device, dtype=torch.float16, requires_grad=True)
    compiled = torch.compile(module, fullgraph=True, backend=aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw")))
    try:
        out = compiled(x)
        upstream = torch.randn_like(out)
        got = torch.autograd.grad(out, [x, *module.parameters()], upstream)
    finally:
        torch._dynamo.reset()
    assert "tritonkit.attention_fwd" in graphs["fw"]
    assert "tritonkit.attention_bwd" in graphs["bw"]
    eager_out = module(x)
    want = torch.autograd.grad(eager_out, [x, *module.parameters()], upstream)
    torch.testing.assert_close(out, eager_out, atol=1e-3, rtol=1e-3)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=2e-3, rtol=2e-3)


def test_train_lm_example_smoke():
    # The example script end to end at its tiniest: both backends train and report.
    start = time.perf_counter()
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "train_lm.py"), "--tiny", "--steps", "3"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert run.returncode == 0, run.stderr[-2000:]
    assert "tritonkit" in run.stdout and "sdpa" in run.stdout
    assert time.perf_counter() - start < 60


# ---------------------------------------------------------------------------------------
# GPU only: long sequences, memory, 64-bit offsets, every tuning config
# ---------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_long_sequence_backward(device):
    q, k, v = make_qkv(1, 2, 1, 16384, 16384, 128, torch.bfloat16, device)
    check_backward(q, k, v, causal=True)


@pytest.mark.gpu
def test_peak_memory_against_flash_attention(device):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k, v = make_qkv(1, 16, 16, 16384, 16384, 128, torch.bfloat16, device)
    upstream = torch.randn_like(q)

    def peak(fn):
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        torch.autograd.grad(fn(*leaves), leaves, upstream)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    ours = peak(lambda *t: tritonkit.attention(*t, causal=True))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        theirs = peak(lambda *t: F.scaled_dot_product_attention(*t, is_causal=True))
    assert ours <= 1.1 * theirs, (ours, theirs)


@pytest.mark.gpu
def test_int64_offsets(device):
    # 2**31 elements per tensor: batch offsets pass int32. Only the first and last batch
    # entries are checked against SDPA on those slices.
    B, H, N, D = 4096, 32, 128, 128
    q, k, v = make_qkv(B, H, H, N, N, D, torch.bfloat16, device)
    upstream = torch.randn_like(q)
    leaves = [t.requires_grad_() for t in (q, k, v)]
    out = tritonkit.attention(*leaves, causal=True)
    dq, dk, dv = torch.autograd.grad(out, leaves, upstream)
    for b in (0, B - 1):
        sl = [t.detach()[b:b + 1].requires_grad_() for t in (q, k, v)]
        ref = F.scaled_dot_product_attention(*sl, is_causal=True)
        ref_grads = torch.autograd.grad(ref, sl, upstream[b:b + 1])
        torch.testing.assert_close(out[b:b + 1], ref, atol=2e-2, rtol=2e-2)
        for ours, theirs in zip((dq, dk, dv), ref_grads):
            torch.testing.assert_close(ours[b:b + 1], theirs, atol=5e-2, rtol=5e-2)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("D", [64, 128, 256])
def test_every_tuning_config(D, device):
    # The autotuner may pick any config its pruning keeps: each must be right.
    q, k, v = make_qkv(1, 4, 2, 333, 333, D, torch.bfloat16, device)
    do = torch.randn_like(q)
    block_d = attention_module._block_d(D)
    ref_o, ref_lse = attention_fwd(q, k, v, True, config=attention_module.fixed_configs(block_d)["fwd"])
    ref = attention_bwd(do, q, k, v, ref_o, ref_lse, True)
    kinds = {"fwd": attention_module._prune_fwd, "dkdv": attention_module._prune_dkdv, "dq": attention_module._prune_dq}
    for kind, prune in kinds.items():
        kept = prune([c.triton_config() for c in attention_module.autotune_configs(kind)], {},
                     HEAD=attention_module.head_tiles(D, D), SCORE=Score())
        for c in kept:
            cfg = attention_module.TileConfig(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)
            if kind == "fwd":
                o, _ = attention_fwd(q, k, v, True, config=cfg)
                torch.testing.assert_close(o, ref_o, atol=2e-2, rtol=2e-2, msg=f"{kind} {cfg}")
            else:
                got = attention_bwd(do, q, k, v, ref_o, ref_lse, True,
                                    **{f"{kind}_config": cfg})
                pick = (1, 2) if kind == "dkdv" else (0,)
                for i in pick:
                    torch.testing.assert_close(got[i], ref[i], atol=5e-2, rtol=5e-2, msg=f"{kind} {cfg}")
