"""tritonkit.attention, forward: against a float64 reference, with SDPA's error as the yardstick.

Under the interpreter (CPU), bf16 operands of tl.dot are widened to fp32 (Triton 3.6's
interpreter multiplies two bf16 operands wrongly; tritonkit._runtime mends its dot there
only), and fp32 -> bf16 casts truncate, so bf16 results are
checked with the wider eps of `_tolerance.eps_for`. On the GPU the real bf16 tensor-core
path runs with the ordinary eps. SDPA runs its math backend on the CPU for the forward
(see `sdpa` for the gradients' yardstick).
"""

import contextlib
import math

import pytest
import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.tools.tensor_descriptor import TensorDescriptor

import tritonkit
from tritonkit._launch import record_launches
from tritonkit.ops.attention.score import Score
from tritonkit.ops import attention as attention_module
from tritonkit.ops.attention import plans as attention_plans
from tritonkit.ops.attention import TileConfig, attention_fwd, attention_reference
from tritonkit.registry.attention import packed_qkv
from _tolerance import assert_close_to_reference, eps_for
from conftest import ON_GPU

DTYPES = [torch.float16, torch.bfloat16]

# (B, H, Hkv, Nq, Nk, D, causal): why
CASES = {
    (1, 1, 1, 1, 1, 16, False): "one query, one key",
    (1, 2, 2, 1, 67, 64, True): "one query row, causal: it sees key 0 only",
    (1, 1, 1, 2, 2, 16, True): "two rows, causal: dS of a 2-key row cancels",
    (2, 2, 2, 17, 17, 16, True): "the smallest head dim; one ragged block",
    (1, 2, 2, 67, 130, 80, False): "Nq != Nk; D=80 padded to a 128 block",
    (1, 2, 2, 130, 67, 96, True): "causal, Nq > Nk: rows past Nk see every key",
    (1, 2, 2, 67, 130, 128, True): "causal, Nq < Nk: keys past Nq are never seen",
    (1, 4, 1, 64, 64, 32, True): "multi-query; lengths a multiple of every block (no tail)",
    (2, 4, 2, 97, 97, 64, False): "grouped-query, ragged",
}
if ON_GPU:
    CASES.update({
        (2, 4, 2, 1024, 1024, 128, True): "past the largest block, causal GQA",
        (1, 4, 4, 4096, 4096, 64, False): "a long sequence, D=64",
        (1, 2, 2, 2049, 3001, 256, True): "D=256, ragged long lengths",
        (1, 2, 1, 1000, 4096, 40, False): "D=40 (pad to 64), Nk > Nq",
    })
CASE_PARAMS = [pytest.param(*case, id=why) for case, why in CASES.items()]


@pytest.fixture(autouse=True)
def poison_outputs(monkeypatch):
    """Every output tensor the launchers allocate starts as NaN: an element the kernel
    fails to write shows up as a NaN the reference does not have."""
    original = attention_plans._empty

    def poisoned(shape, stride, dtype, device):
        return original(shape, stride, dtype, device).fill_(float("nan"))

    monkeypatch.setattr(attention_plans, "_empty", poisoned)
    monkeypatch.setenv("TRITONKIT_AUTOTUNE", "0")  # tests run the fixed config, never the tuner


def make_qkv(B, H, Hkv, Nq, Nk, D, dtype, device, requires_grad=False):
    q = torch.randn(B, H, Nq, D, dtype=dtype, device=device)
    k = torch.randn(B, Hkv, Nk, D, dtype=dtype, device=device)
    v = torch.randn(B, Hkv, Nk, D, dtype=dtype, device=device)
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


def sdpa(q, k, v, causal, scale=None, math_backend=not ON_GPU, flash_first=False):
    """torch's own attention in the inputs' dtype: the math backend on the CPU, SDPA's own
    choice on the GPU. flash_first: torch's FlashAttention where it takes the inputs (on the
    CPU too), the yardstick for gradients. A FlashAttention backward computes
    delta = rowsum(dO * O) from the half-precision O it saved, as ours does; with few keys
    and cancelling terms that rounding shows in dq and dk (torch's CPU flash backward and
    ours erred 2.9e-3 on a 2-key fp16 case where the math backend erred 2.5e-4)."""
    if flash_first:
        ctx = sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]) if not ON_GPU else contextlib.nullcontext()
    else:
        ctx = sdpa_kernel(SDPBackend.MATH) if math_backend else contextlib.nullcontext()
    with ctx:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                              enable_gqa=q.shape[1] != k.shape[1])


def lse_reference(q, k, causal, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    k = k.double().repeat_interleave(q.shape[1] // k.shape[1], 1)
    s = (q.double() @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril(), float("-inf"))
    return torch.logsumexp(s, dim=-1)


def check_forward(q, k, v, causal, scale=None, math_backend=not ON_GPU):
    out = tritonkit.attention(q, k, v, causal=causal, scale=scale)
    assert out.dtype == q.dtype and out.shape == q.shape
    assert_close_to_reference(out, attention_reference(q, k, v, causal, scale),
                              sdpa(q, k, v, causal, scale, math_backend))
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,causal", CASE_PARAMS)
def test_forward(B, H, Hkv, Nq, Nk, D, causal, dtype, device):
    q, k, v = make_qkv(B, H, Hkv, Nq, Nk, D, dtype, device)
    check_forward(q, k, v, causal)
    _, lse = attention_fwd(q, k, v, causal)
    assert lse.dtype == torch.float32 and lse.shape == (B, H, Nq)
    torch.testing.assert_close(lse.double(), lse_reference(q, k, causal), atol=2e-3, rtol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_packed_qkv_at_odd_offset(dtype, causal, device):
    # q, k, v: views into one (B, N, 3, H, D) projection that starts one element into its
    # buffer (the seed's crashing pointer): misaligned bases, row stride 3*H*D.
    q, k, v = packed_qkv(2, 2, 67, 64, dtype, device, offset=1)
    assert q.data_ptr() % 16 != 0
    check_forward(q, k, v, causal)


@pytest.mark.parametrize("dtype", DTYPES)
def test_transposed_and_strided_layouts(dtype, device):
    B, H, Hkv, N, D = 2, 4, 2, 50, 32
    q = torch.randn(B, N, H, D, dtype=dtype, device=device).transpose(1, 2)        # (B, N, H, D) memory
    k = torch.randn(B, Hkv, N, 2 * D, dtype=dtype, device=device)[..., D:]          # row stride 2D, offset D
    v = torch.randn(B, Hkv, D, N, dtype=dtype, device=device).transpose(-1, -2)     # head dim not unit-stride
    out = check_forward(q, k, v, causal=True)
    # the output follows q's memory order, so (B, N, H*D) is a free view
    assert out.transpose(1, 2).is_contiguous()


@pytest.mark.parametrize("scale", [0.3, 2.0, -0.25])
def test_explicit_scale(scale, device):
    # 2.0: sharp, large logits (the online max must keep exp2 in range); -0.25: a negative
    # scale. The yardstick is SDPA's math backend everywhere: its fused GPU kernels return
    # non-finite values for a negative scale.
    q, k, v = make_qkv(1, 2, 2, 40, 70, 32, torch.float16, device)
    check_forward(q, k, v, causal=False, scale=scale, math_backend=True)


def test_forward_is_deterministic(device):
    q, k, v = make_qkv(2, 4, 2, 77, 77, 64, torch.bfloat16, device)
    first = tritonkit.attention(q, k, v, causal=True)
    second = tritonkit.attention(q, k, v, causal=True)
    assert torch.equal(first, second)


def test_no_queries(device):
    q, k, v = make_qkv(2, 2, 1, 0, 5, 16, torch.float16, device)
    assert tritonkit.attention(q, k, v).shape == (2, 2, 0, 16)


@pytest.mark.parametrize("compiled", [False, True])
def test_no_keys(device, compiled):
    # An empty key sequence, as torch's SDPA takes it: every row sees no key, so o = 0 (SDPA's
    # result too), lse = -inf, dq = 0, and dk, dv are empty (the outputs start as NaN here).
    q, k, v = make_qkv(2, 4, 2, 7, 0, 32, torch.bfloat16, device, requires_grad=True)
    fn = lambda q, k, v: tritonkit.attention(q, k, v, causal=True, return_lse=True)  # noqa: E731
    out, lse = (torch.compile(fn, fullgraph=True) if compiled else fn)(q, k, v)
    assert torch.equal(out, sdpa(q, k, v, True, math_backend=True)) and torch.equal(out, torch.zeros_like(q))
    assert lse.shape == (2, 4, 7) and torch.isneginf(lse).all()
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    assert torch.equal(dq, torch.zeros_like(q)) and dk.shape == k.shape and dv.shape == v.shape


def _bad_inputs(device):
    def t(*shape, dtype=torch.float16):
        return torch.randn(*shape, device=device).to(dtype)
    good = (t(1, 4, 8, 32), t(1, 2, 8, 32), t(1, 2, 8, 32))
    return [
        ((t(1, 4, 8, 32).tolist(), *good[1:]), TypeError, "q must be a torch.Tensor"),
        ((t(1, 4, 8, 32, dtype=torch.float32), *good[1:]), TypeError, "q has dtype float32"),
        ((good[0], t(1, 2, 8, 32, dtype=torch.bfloat16), good[2]), TypeError, "k has dtype bfloat16"),
        ((t(4, 8, 32), *good[1:]), ValueError, "q must be 4-d"),
        ((good[0], t(2, 2, 8, 32), t(2, 2, 8, 32)), ValueError, "k has batch 2"),
        ((good[0], t(1, 3, 8, 32), t(1, 3, 8, 32)), ValueError, "do not divide"),
        ((good[0], t(1, 2, 8, 40), t(1, 2, 8, 40)), ValueError, "k has head_dim 40"),
        ((good[0], good[1], t(1, 2, 8, 520)), ValueError, "v has head_dim 520"),
        ((good[0], good[1], t(1, 2, 9, 32)), ValueError, "v has"),
        ((t(1, 4, 8, 0), t(1, 2, 8, 0), t(1, 2, 8, 0)), ValueError, "q has head_dim 0"),
        ((t(1, 4, 8, 520), t(1, 2, 8, 520), t(1, 2, 8, 520)), ValueError, "q has head_dim 520"),
    ]


def test_bad_inputs_name_the_argument(device):
    for args, error, text in _bad_inputs(device):
        with pytest.raises(error, match=text):
            tritonkit.attention(*args)
    q, k, v = make_qkv(1, 2, 2, 8, 8, 32, torch.float16, device)
    with pytest.raises(TypeError, match="scale"):
        tritonkit.attention(q, k, v, scale="big")


@pytest.mark.gpu
def test_devices_must_match(device):
    q, k, v = make_qkv(1, 2, 2, 8, 8, 32, torch.float16, device)
    with pytest.raises(ValueError):
        tritonkit.attention(q, k.cpu(), v)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_head_dim_not_innermost(dtype, device):
    # Regression: K stored transposed (sequence stride 1, head-dim stride 130) at an odd
    # offset gave relative error ~1 compiled on the H200 (found by the alignment fuzz);
    # the launcher now copies such operands. Forward and backward against float64.
    buffer_q = torch.randn(9000, dtype=dtype, device=device)
    buffer_k = torch.randn(9000, dtype=dtype, device=device)
    buffer_v = torch.randn(30000, dtype=dtype, device=device)
    q = buffer_q.as_strided((1, 1, 127, 32), (1, 2, 64, 2), 8)
    k = buffer_k.as_strided((1, 1, 65, 32), (130, 8320, 1, 130), 7)
    v = buffer_v.as_strided((1, 1, 65, 32), (64, 128, 384, 1), 11)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = tritonkit.attention(*leaves)
    grad = torch.randn_like(out)
    ours = torch.autograd.grad(out, leaves, grad)
    same = [t.detach().requires_grad_() for t in (q, k, v)]
    torch_out = attention_reference(*same, upcast=False)
    theirs = torch.autograd.grad(torch_out, same, grad)
    wide = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = attention_reference(*wide)
    refs = torch.autograd.grad(ref, wide, grad.double())
    assert_close_to_reference(out, ref, torch_out)
    for name, a, r, b in zip(("dq", "dk", "dv"), ours, refs, theirs):
        assert_close_to_reference(a, r, b, eps=eps_for(dtype, gradient=True), what=name)


def test_expanded_sequence_dim(device):
    # k and v broadcast along the sequence (stride 0): rows overlap, the launcher copies them.
    q = torch.randn(1, 2, 37, 32, dtype=torch.float16, device=device)
    k = torch.randn(1, 2, 1, 32, dtype=torch.float16, device=device).expand(1, 2, 41, 32)
    v = torch.randn(1, 2, 41, 32, dtype=torch.float16, device=device)
    out = tritonkit.attention(q, k, v)
    assert_close_to_reference(out, attention_reference(q, k, v), attention_reference(q, k, v, upcast=False))


# ---------------------------------------------------------------------------------------
# The tensor-descriptor (TMA) forward: which inputs take it, and what every path computes.
# The interpreter reads host-side and in-kernel descriptors as TMA does (zero fill out of
# bounds), so on the CPU these run the very kernel code of each path.
# ---------------------------------------------------------------------------------------

def recorded_fwd(q, k, v, **kwargs):
    """The forward's one launch for these inputs, recorded without running (the GPU's view,
    as `tritonkit inspect` sees it: GPU tile configs, TRITONKIT_AUTOTUNE=0 from the fixture)."""
    with record_launches(execute=False) as launches:
        attention_fwd(q, k, v, **kwargs)
    (launch,) = launches
    return launch


def _buffer_view(shape, strides, device, offset=0, dtype=torch.bfloat16):
    size = offset + 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    return torch.randn(size, dtype=dtype, device=device).as_strided(shape, strides, offset)


def _layout(name, device="cpu"):
    """(q, k, v) in a named layout on `device`, bf16, B=2, H=4 over Hkv=2, N=40, D=64."""
    B, H, Hkv, N, D = 2, 4, 2, 40, 64
    if name == "contiguous (B, H, N, D)":
        return make_qkv(B, H, Hkv, N, N, D, torch.bfloat16, device)
    if name == "(B, N, H, D) memory, transposed views":
        return [torch.randn(B, N, h, D, dtype=torch.bfloat16, device=device).transpose(1, 2) for h in (H, Hkv, Hkv)]
    if name.startswith("packed qkv at offset"):
        return packed_qkv(B, H, N, D, torch.bfloat16, device, offset=int(name.split()[-1]))
    q, k, v = make_qkv(B, H, Hkv, N, N, D, torch.bfloat16, device)
    if name == "k rows 68 elements apart (136 B)":
        k = torch.randn(B, Hkv, N, D + 4, dtype=torch.bfloat16, device=device)[..., :D]
    elif name == "v heads 8 bytes off a 16-byte multiple apart":
        v = _buffer_view((B, Hkv, N, D), (Hkv * (N * D + 4), N * D + 4, D, 1), device)
    elif name == "k broadcast over the batch (stride 0)":
        k = torch.randn(1, Hkv, N, D, dtype=torch.bfloat16, device=device).expand(B, Hkv, N, D)
    elif name == "q head dim not innermost (copied)":
        q = torch.randn(B, H, D, N, dtype=torch.bfloat16, device=device).transpose(-1, -2)
    return q, k, v


TMA_LAYOUTS = {  # layout -> whether the forward reads it through tensor descriptors
    "contiguous (B, H, N, D)": True,
    "(B, N, H, D) memory, transposed views": True,
    "packed qkv at offset 0": True,
    "packed qkv at offset 8": True,     # 16 bytes in: aligned again
    "packed qkv at offset 1": False,    # the seed's crashing pointer
    "packed qkv at offset 4": False,
    "k rows 68 elements apart (136 B)": False,
    "v heads 8 bytes off a 16-byte multiple apart": False,
    "k broadcast over the batch (stride 0)": False,
    "q head dim not innermost (copied)": True,  # the launcher's contiguous copy is aligned
}


@pytest.mark.parametrize("name", list(TMA_LAYOUTS))
def test_tma_path_is_taken_only_where_the_host_check_allows(name, device):
    # The Triton forward's choice (on Hopper the Gluon kernel takes the aligned ones at D=64).
    q, k, v = _layout(name, device)
    launch = recorded_fwd(q, k, v, gluon=False)
    want = TMA_LAYOUTS[name]
    assert launch.constexprs["USE_TMA"] is want
    Q, K, V = launch.args[:3]
    assert all(isinstance(t, TensorDescriptor) is want for t in (Q, K, V))
    assert attention_module._tma_ok(*(attention_module._head_dim_innermost(t) for t in (q, k, v))) is want
    if want:  # the real 4-d tensors, their own strides, one (batch, head) tile at a time
        block_m, block_n = launch.constexprs["BLOCK_M"], launch.constexprs["BLOCK_N"]
        block_d = launch.constexprs["HEAD"].qk
        assert Q.block_shape == [1, 1, block_m, block_d] and K.block_shape == [1, 1, block_n, block_d]
        for desc, t in zip((K, V), (k, v)):
            assert desc.base is t and desc.shape == list(t.shape) and desc.strides == list(t.stride())


@pytest.mark.parametrize("name", list(TMA_LAYOUTS))
def test_descriptors_built_unchecked_are_what_tritons_checks_accept(name, device):
    # `_descriptor` skips TensorDescriptor's own checks, repeating `_tma_ok`'s: every operand
    # `_tma_ok` passes must also pass Triton's checks, giving an equal descriptor, and every
    # one it refuses must fail them or fall outside what the hardware documents.
    for t in (attention_module._head_dim_innermost(t) for t in _layout(name, device)):
        try:
            checked = TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, 32, 64])
        except AssertionError:
            checked = None
        if attention_module._tma_ok(t):
            assert checked is not None and attention_module._descriptor(t, 32, 64) == checked
            # what launch plans build: a maker per layout, for any tensor of that layout
            assert attention_module._descriptor_maker(t, 32, 64)(t) == checked
        elif checked is not None:  # Triton's checks pass a broadcast (stride 0) dim; TMA does not
            assert 0 in t.stride()


def test_tma_can_be_refused_or_insisted_on(device):
    q, k, v = _layout("contiguous (B, H, N, D)", device)
    assert recorded_fwd(q, k, v, tma=False).constexprs["USE_TMA"] is False
    assert recorded_fwd(q, k, v, tma=True, gluon=False).constexprs["USE_TMA"] is True
    with pytest.raises(ValueError, match="tensor descriptors"):
        recorded_fwd(*_layout("packed qkv at offset 1", device), tma=True)


def test_tma_needs_hopper(monkeypatch):
    capability = {"value": (8, 0)}
    monkeypatch.setattr(attention_module.torch.cuda, "get_device_capability", lambda device: capability["value"])
    attention_module._has_tma.cache_clear()
    try:
        assert not attention_module._has_tma(torch.device("cuda", 0))      # A100: no TMA
        attention_module._has_tma.cache_clear()
        capability["value"] = (9, 0)
        assert attention_module._has_tma(torch.device("cuda", 0))          # H100/H200
        assert attention_module._has_tma(torch.device("cpu"))              # interpreter, inspector
    finally:
        attention_module._has_tma.cache_clear()


def test_descriptors_take_the_tile_of_the_config_that_launches():
    # The autotuner picks BLOCK_M/BLOCK_N after the launcher built the descriptors: the
    # kernel's pre-run hook reshapes them (Triton compiles for the block shape they carry).
    q, k, v = (torch.randn(1, 2, 64, 64, dtype=torch.float16) for _ in range(3))
    descs = [attention_module._descriptor(t, 16, 64) for t in (q, k, v)]
    head = attention_module.head_tiles(64, 64)
    attention_module._fit_descriptors(*descs, USE_TMA=True, BLOCK_M=128, BLOCK_N=64, HEAD=head)
    assert [d.block_shape for d in descs] == [[1, 1, 128, 64], [1, 1, 64, 64], [1, 1, 64, 64]]
    assert attention_module._fit_descriptors in attention_module._attn_fwd_kernel.pre_run_hooks


def test_fixed_forward_tile_follows_head_dim_and_keys_a_row_sees(device):
    # The GPU's fixed TMA forward tiles (recorded, not run): one-warpgroup 64-row tiles at
    # D=64 and, at D=128, where rows see up to 2048 keys (half the length when causal);
    # 128-row tiles where they see more.
    def tile(D, N, causal=False):
        q = torch.empty(1, 2, N, D, dtype=torch.bfloat16, device=device)  # never read: only recorded
        launch = recorded_fwd(q, q, q, causal=causal, gluon=False)  # the Triton kernel's tiles
        assert launch.constexprs["USE_TMA"]
        return launch.constexprs["BLOCK_M"], launch.constexprs["BLOCK_N"], launch.num_warps
    assert tile(64, 4096) == tile(64, 16384, True) == (64, 128, 4)
    assert tile(128, 1000) == tile(128, 2048) == tile(128, 4096, True) == (64, 64, 4)
    assert tile(128, 2049) == tile(128, 16384) == tile(128, 8192, True) == (128, 128, 8)
    assert tile(256, 512) == (128, 64, 8)


@pytest.mark.parametrize("N, causal", [(2048, False), (4096, True), (16384, False)])
def test_tuner_tries_the_fixed_tile_first(N, causal, monkeypatch, device):
    # The autotuner's pruner puts the fixed tile of the call's length first, reading the
    # lengths from the runtime arguments as Autotuner.prune_configs passes them.
    monkeypatch.setenv("TRITONKIT_AUTOTUNE", "1")
    q = torch.empty(1, 2, N, 128, dtype=torch.bfloat16, device=device)  # only recorded
    launch = recorded_fwd(q, q, q, causal=causal, gluon=False)  # the Triton kernel's tuner
    tuner = launch.kernel
    tuner.nargs = dict(zip(tuner.arg_names, launch.args))
    try:
        with record_launches(execute=False):  # the GPU's configs, as `tritonkit inspect` sees them
            first = tuner.prune_configs(launch.constexprs)[0]
            want = attention_module.fixed_configs(128, attention_module._row_keys(N, N, causal))["fwd_tma"]
    finally:
        tuner.nargs = None
    assert first == want.triton_config() and want.block_m == (128 if N == 16384 else 64)


def test_tuner_tries_the_configs_of_the_chosen_path():
    with record_launches(execute=False):  # the GPU's fixed configs
        for block_d, n_bucket in [(d, n) for d in (64, 128, 256) for n in (1024, 16384)]:
            named = {"Nq": n_bucket, "Nk": n_bucket}  # runtime arguments reach the pruner by name
            head = attention_module.head_tiles(block_d, block_d)
            tma = attention_module._prune_fwd(attention_module._attn_fwd_tuned.configs, named,
                                              HEAD=head, USE_TMA=True, SCORE=Score())
            pointer = attention_module._prune_fwd(attention_module._attn_fwd_tuned.configs, named,
                                                  HEAD=head, USE_TMA=False, SCORE=Score())
            fixed = attention_module.fixed_configs(block_d, n_bucket)
            assert tma[0] == fixed["fwd_tma"].triton_config() and pointer[0] == fixed["fwd"].triton_config()
            assert tma and {str(c) for c in tma} <= {str(c.triton_config()) for c in attention_module.autotune_configs("fwd_tma")}
            assert {str(c) for c in pointer} <= {str(c.triton_config()) for c in attention_module.autotune_configs("fwd")}
    assert "USE_TMA" in attention_module._attn_fwd_tuned.keys


# (B, H, Hkv, Nq, Nk, D, causal): ragged blocks, padded head dims, GQA, both masks
PATH_CASES = [(2, 4, 2, 67, 130, 80, False), (1, 2, 2, 130, 67, 96, True), (1, 4, 1, 64, 64, 32, True),
              (1, 2, 2, 17, 17, 16, False)]
PATHS = {  # path -> attention_fwd keyword arguments
    "tensor descriptors": dict(tma=True),
    "pointers": dict(tma=False),
}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,causal", PATH_CASES)
def test_forward_paths(B, H, Hkv, Nq, Nk, D, causal, path, device):
    q, k, v = make_qkv(B, H, Hkv, Nq, Nk, D, torch.float16, device)
    out, lse = attention_fwd(q, k, v, causal, **PATHS[path])
    assert_close_to_reference(out, attention_reference(q, k, v, causal), sdpa(q, k, v, causal))
    torch.testing.assert_close(lse.double(), lse_reference(q, k, causal), atol=2e-3, rtol=1e-4)


@pytest.mark.parametrize("path", list(PATHS))
def test_rows_past_the_end_are_never_read(path, device):
    # k and v are the first 50 rows of 64 per head; the 14 rows after them hold NaN. A tile
    # that reached past row 50 (or into the next head) would turn the output NaN.
    B, H, N, D = 1, 2, 50, 32
    q = torch.randn(B, H, 37, D, dtype=torch.float16, device=device)
    k, v = (torch.full((B, H, 64, D), float("nan"), dtype=torch.float16, device=device) for _ in range(2))
    k[:, :, :N], v[:, :, :N] = torch.randn(2, B, H, N, D, dtype=torch.float16, device=device)
    k, v = k[:, :, :N], v[:, :, :N]
    out, _ = attention_fwd(q, k, v, False, **PATHS[path])
    assert_close_to_reference(out, attention_reference(q, k, v), sdpa(q, k, v, False))


@pytest.mark.parametrize("name", ["(B, N, H, D) memory, transposed views", "packed qkv at offset 8"])
def test_model_layouts_through_descriptors(name, device):
    q, k, v = _layout(name, device)
    assert attention_module._tma_ok(q, k, v)
    check_forward(q, k, v, causal=True)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("D", [64, 128, 256])
def test_every_tensor_descriptor_config(D, device):
    # Every config the TMA path's tuner may pick, against the pointer path's fixed config.
    q, k, v = make_qkv(1, 4, 2, 333, 333, D, torch.bfloat16, device)
    ref, _ = attention_fwd(q, k, v, True, tma=False)
    configs = attention_module._prune_fwd(attention_module._attn_fwd_tuned.configs, {},
                                          HEAD=attention_module.head_tiles(D, D), USE_TMA=True, SCORE=Score())
    tiles = [TileConfig(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) for c in configs]
    for cfg in tiles:
        try:
            out, _ = attention_fwd(q, k, v, True, config=cfg, tma=True)
        except triton.runtime.errors.OutOfResources:
            continue  # the pruning's shared-memory estimate is rough; the tuner skips these too
        torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2, msg=f"{cfg}")


@pytest.mark.gpu
def test_autotuned_forward_reaches_the_cached_launcher_with_the_same_bits(monkeypatch, device):
    # Users autotune by default. The first call tunes (Triton's path), the second launches the
    # choice through Triton's path and caches it, later ones take the cached launcher: all
    # must give the same bits. Two candidate configs keep the tuning short.
    if device.type != "cuda":
        pytest.skip("needs a CUDA device (the interpreter never autotunes)")
    tuner = attention_module._attn_fwd_tuned
    two = [c.triton_config() for c in (TileConfig(64, 128, 4, 2), TileConfig(128, 64, 8, 3))]
    monkeypatch.setattr(tuner, "configs", [c for c in tuner.configs if c in two])
    monkeypatch.setattr(tuner, "cache", type(tuner.cache)(tuner.cache.at))  # no choice made yet
    monkeypatch.setenv("TRITONKIT_AUTOTUNE", "1")
    q, k, v = make_qkv(1, 4, 2, 300, 300, 64, torch.bfloat16, device)
    outs = [attention_fwd(q, k, v, True) for _ in range(2)]
    assert len(tuner.configs) == 2 and len(tuner.cache) == 1

    def triton_path(*args, **kwargs):
        raise AssertionError("a launch took Triton's path after the choice was cached")
    monkeypatch.setattr(tuner, "run", triton_path)
    monkeypatch.setattr(attention_module._attn_fwd_kernel, "run", triton_path)
    outs += [attention_fwd(q, k, v, True) for _ in range(2)]
    for o, lse in outs[1:]:
        assert torch.equal(o, outs[0][0]) and torch.equal(lse, outs[0][1])
    want = attention_reference(q, k, v, True).to(q.dtype)
    torch.testing.assert_close(outs[0][0], want, atol=2e-2, rtol=2e-2)
