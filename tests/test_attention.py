"""tritonkit.attention, forward: against a float64 reference, with SDPA's error as the yardstick.

Under the interpreter (CPU), bf16 operands of tl.dot are upcast to fp32 inside the kernel
(Triton 3.6's interpreter multiplies two bf16 operands wrongly; the launcher sets the
kernel's DOT_FP32 flag there only), and fp32 -> bf16 casts truncate, so bf16 results are
checked with the wider eps of `_tolerance.eps_for`. On the GPU the real bf16 tensor-core
path runs with the ordinary eps. SDPA runs its math backend on the CPU for the forward
(see `sdpa` for the gradients' yardstick).
"""

import contextlib
import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tritonkit
from tritonkit.ops import attention as attention_module
from tritonkit.ops.attention import attention_fwd, attention_reference
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
    original = attention_module._empty_like_order

    def poisoned(like, shape, dtype):
        return original(like, shape, dtype).fill_(float("nan"))

    monkeypatch.setattr(attention_module, "_empty_like_order", poisoned)
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
        ((good[0], good[1], t(1, 2, 8, 48)), ValueError, "v has head_dim 48"),
        ((good[0], good[1], t(1, 2, 9, 32)), ValueError, "v has"),
        ((t(1, 4, 8, 12), t(1, 2, 8, 12), t(1, 2, 8, 12)), ValueError, "head_dim 12"),
        ((t(1, 4, 8, 264), t(1, 2, 8, 264), t(1, 2, 8, 264)), ValueError, "head_dim 264"),
        ((t(1, 4, 8, 36), t(1, 2, 8, 36), t(1, 2, 8, 36)), ValueError, "head_dim 36"),
        ((good[0], t(1, 2, 0, 32), t(1, 2, 0, 32)), ValueError, "k has sequence length 0"),
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
