"""tritonkit.rope against a float64 Hugging Face-style reference, with torch's own error as the
yardstick: both rotations, partial rotary, GQA, every cos/sin shape, packed qkv views, gradients."""

import importlib.util
from pathlib import Path

import pytest
import torch

import tritonkit
from tritonkit.ops import rope as rope_module
from tritonkit.ops.rope import rope_reference
from tritonkit.registry.rope import hf_inputs
from _tolerance import assert_close_to_reference, eps_for
from conftest import ON_GPU

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def make_cos_sin(batch, seq, rot, interleaved, dtype, device, shape="bnr"):
    """cos, sin as a rotary embedding makes them (each pair's angle twice), in one of the
    accepted shapes: "bnr" (B, N, R), "b1nr" (B, 1, N, R), "nr" (N, R), "1nr" (1, N, R)."""
    angles = torch.rand(batch, seq, rot // 2, device=device) * 6.0
    emb = angles.repeat_interleave(2, -1) if interleaved else torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    if shape == "b1nr":
        return cos.unsqueeze(1), sin.unsqueeze(1)
    if shape == "nr":
        return cos[0], sin[0]
    if shape == "1nr":
        return cos[:1], sin[:1]
    return cos, sin


def check(q, k, cos, sin, interleaved=False):
    """Forward, and the gradients of q and k for random upstream gradients, against float64."""
    q_rot, k_rot = tritonkit.rope(q, k, cos, sin, interleaved=interleaved)
    ref_q, ref_k = rope_reference(q, k, cos, sin, interleaved)
    # torch in the inputs' dtypes, rounded to q's and k's as rope returns them (float32 cos
    # beside bfloat16 q computes in float32)
    same_q, same_k = (t.to(like.dtype) for t, like in zip(rope_reference(q, k, cos, sin, interleaved, upcast=False),
                                                         (q, k)))
    assert q_rot.dtype == q.dtype and k_rot.dtype == k.dtype
    assert_close_to_reference(q_rot, ref_q, same_q, what="q")
    assert_close_to_reference(k_rot, ref_k, same_k, what="k")
    up_q, up_k = torch.randn_like(q_rot), torch.randn_like(k_rot)

    def grads(f, a, b):
        a, b = a.detach().requires_grad_(), b.detach().requires_grad_()
        return torch.autograd.grad(f(a, b), (a, b), (up_q.to(a.dtype), up_k.to(b.dtype)))

    ours = grads(lambda a, b: tritonkit.rope(a, b, cos, sin, interleaved=interleaved), q, k)
    theirs = grads(lambda a, b: rope_reference(a, b, cos, sin, interleaved, upcast=False), q, k)
    exact = grads(lambda a, b: rope_reference(a, b, cos, sin, interleaved), q.double(), k.double())
    for name, o, t, e in zip(("dq", "dk"), ours, theirs, exact):
        assert_close_to_reference(o, e, t, eps=eps_for(q.dtype, gradient=True), what=name)
    return q_rot, k_rot


# (B, H, Hkv, N, D, R, why)
SHAPES = [
    (1, 1, 1, 1, 2, 2, "one position, D=2"),
    (2, 4, 2, 7, 16, 16, "GQA, odd N"),
    (1, 3, 3, 13, 10, 4, "partial rotary, D not a power of two, primes"),
    (2, 5, 1, 5, 12, 12, "multi-query; R/2 = 6 masks the tile"),
    (1, 2, 2, 3, 8, 6, "partial rotary with R/2 odd"),
    (1, 70, 3, 3, 64, 64, "more q heads than one tile holds: the head loop"),
] + ([(4, 32, 8, 2048, 128, 128, "Llama-3-8B"), (1, 32, 32, 4097, 80, 32, "Phi-2 partial")] if ON_GPU else [])


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,H,Hkv,N,D,R,why", SHAPES)
def test_packed_projection_views(B, H, Hkv, N, D, R, why, dtype, interleaved, device):
    # q and k as Hugging Face makes them: one projection at an odd offset, per-head views transposed.
    q, k, _, _ = hf_inputs(B, H, Hkv, N, D, dtype, device, offset=3)
    cos, sin = make_cos_sin(B, N, R, interleaved, dtype, device)
    q_rot, _ = check(q, k, cos, sin, interleaved)
    if H > 1 and N > 1:  # the output keeps the input's (B, N, H, D) memory order
        assert q_rot.stride(1) < q_rot.stride(2) and q_rot.stride(3) == 1


@pytest.mark.parametrize("shape", ["bnr", "b1nr", "nr", "1nr"])
def test_each_cos_sin_shape(shape, device):
    q = torch.randn(2, 4, 9, 16, device=device)  # plain contiguous (B, H, N, D)
    k = torch.randn(2, 2, 9, 16, device=device)
    cos, sin = make_cos_sin(2, 9, 16, False, torch.float32, device, shape)
    q_rot, k_rot = check(q, k, cos, sin)
    assert q_rot.is_contiguous() and k_rot.is_contiguous()


def test_qkv_packed_in_one_buffer_and_strided_views(device):
    # qkv (B, N, (H + 2 Hkv) * D) with q, k at their offsets; k with a stepped sequence dim;
    # cos in float32 beside bfloat16 q, k; cos, sin transposed (not contiguous).
    B, H, Hkv, N, D = 2, 4, 2, 11, 32
    qkv = torch.randn(B, N, (H + 2 * Hkv) * D + 1, device=device, dtype=torch.bfloat16)[..., 1:]
    q = qkv[..., :H * D].view(B, N, H, D).transpose(1, 2)
    k = qkv[..., H * D:(H + Hkv) * D].view(B, N, Hkv, D).transpose(1, 2)
    cos, sin = make_cos_sin(B, N, D, False, torch.float32, device)
    check(q, k, cos, sin)
    long_k = torch.randn(B, Hkv, 2 * N, D, device=device, dtype=torch.bfloat16)[:, :, ::2]
    cos_t = cos.transpose(0, 1).contiguous().transpose(0, 1)
    sin_t = sin.transpose(0, 1).contiguous().transpose(0, 1)
    check(q, long_k, cos_t, sin_t)
    check(q.transpose(2, 3).contiguous().transpose(2, 3), k, cos, sin)  # head dim strided


def test_arbitrary_cos_sin_are_rotated_by_the_formula(device):
    # cos, sin whose two halves (or pair members) differ: the forward is the formula, and the
    # backward its exact transpose (not a rotation by -sin).
    q = torch.randn(1, 2, 5, 8, device=device)
    k = torch.randn(1, 1, 5, 8, device=device)
    cos, sin = torch.randn(5, 8, device=device), torch.randn(5, 8, device=device)
    for interleaved in (False, True):
        check(q, k, cos, sin, interleaved)


def test_gradient_of_one_output_only(device):
    q = torch.randn(1, 2, 4, 8, device=device, requires_grad=True)
    k = torch.randn(1, 1, 4, 8, device=device, requires_grad=True)
    cos, sin = make_cos_sin(1, 4, 8, False, torch.float32, device)
    q_rot, _ = tritonkit.rope(q, k, cos, sin)
    dq, dk = torch.autograd.grad(q_rot.sum(), (q, k), allow_unused=True)
    ref_q, _ = rope_reference(q, k, cos, sin, upcast=False)
    torch.testing.assert_close(dq, torch.autograd.grad(ref_q.sum(), q)[0])
    assert dk is None or not dk.any()


def test_torch_compile_fullgraph(device):
    def block(q, k, cos, sin):
        q_rot, k_rot = tritonkit.rope(q, k, cos, sin)
        q2, k2 = tritonkit.rope(q, k, cos, sin, interleaved=True)
        return (q_rot * k_rot.repeat_interleave(2, 1)).sum() + q2.square().sum() + k2.sum()

    q, k, cos, sin = hf_inputs(2, 4, 2, 5, 16, torch.float32, device, offset=1)
    q, k = q.detach().requires_grad_(), k.detach().requires_grad_()
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    want = torch.autograd.grad(block(q, k, cos, sin), (q, k))
    got = torch.autograd.grad(compiled(q, k, cos, sin), (q, k))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_bad_input_names_the_argument(device):
    q = torch.randn(1, 4, 6, 8, device=device)
    k = torch.randn(1, 2, 6, 8, device=device)
    cos, sin = make_cos_sin(1, 6, 8, False, torch.float32, device)
    cases = [
        ((q, k, torch.randn(1, 6, 10, device=device), torch.randn(1, 6, 10, device=device)), ValueError, "cos"),  # R > D
        ((q, k, cos[..., :5], sin[..., :5]), ValueError, "cos"),                        # R odd
        ((q, k, cos[:, :5], sin[:, :5]), ValueError, "cos"),                            # N mismatch
        ((q, k, cos.expand(3, 6, 8), sin.expand(3, 6, 8)), ValueError, "cos"),          # B mismatch
        ((q, k, cos.unsqueeze(2).expand(1, 6, 2, 8), sin.unsqueeze(2)), ValueError, "sin"),
        ((q, k, cos.unsqueeze(1).expand(1, 2, 6, 8), sin.unsqueeze(1).expand(1, 2, 6, 8)), ValueError, "cos"),
        ((q, k, cos, sin[..., :6]), ValueError, "sin"),
        ((q, k.half(), cos, sin), TypeError, "k"),
        ((q, k[:, :, :5], cos, sin), ValueError, "k"),
        ((q[0], k, cos, sin), ValueError, "q"),
        ((q.long(), k, cos, sin), TypeError, "q"),
        ((q, k, cos.long(), sin), TypeError, "cos"),
    ]
    for args, error, name in cases:
        with pytest.raises(error, match=name):
            tritonkit.rope(*args)
    with pytest.raises(ValueError, match="cos or sin"):
        tritonkit.rope(q, k, cos.requires_grad_(), sin)


def _sweep_tiles():
    """The tiles benchmarks/sweep_rope.py times on the GPU (None: the default)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "sweep_rope.py"
    spec = importlib.util.spec_from_file_location("sweep_rope", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TILES


@pytest.mark.parametrize("tile", _sweep_tiles(), ids=str)
def test_each_swept_tile(tile, device):
    # Every tile the sweep times, forward and backward through the launchers, on shapes that
    # make each tile mask: fewer heads than a tile holds (3 kv heads), positions that do not
    # fill the last block (122 = 2 x 61, 11, 7), a persistent grid whose programs walk several
    # blocks (one "SM" under the interpreter), partial rotary with R/2 odd, both rotations.
    from tritonkit._launch import record_launches

    for (B, H, Hkv, N, D, R), interleaved in (((2, 2, 1, 61, 8, 8), False), ((1, 6, 3, 11, 16, 16), True),
                                              ((1, 4, 1, 7, 12, 6), False)):
        q, k, _, _ = hf_inputs(B, H, Hkv, N, D, torch.float32, device, offset=1)
        cos, sin = torch.randn(N, R, device=device), torch.randn(N, R, device=device)  # halves differ
        ref_q, ref_k = rope_reference(q, k, cos, sin, interleaved)
        same_q, same_k = rope_reference(q, k, cos, sin, interleaved, upcast=False)
        with record_launches() as launches:
            q_rot, k_rot = rope_module.rope_fwd(q, k, cos, sin, interleaved, tile)
        if tile is not None and tile.programs_per_sm and N == 61 and not ON_GPU:
            assert launches[0].grid[0] < -(-B * N // tile.positions), "no program walks two blocks"
        assert_close_to_reference(q_rot, ref_q, same_q, what=f"q, {tile}")
        assert_close_to_reference(k_rot, ref_k, same_k, what=f"k, {tile}")
        up_q, up_k = torch.randn_like(q_rot), torch.randn_like(k_rot)
        leaves = q.double().requires_grad_(), k.double().requires_grad_()
        exact = torch.autograd.grad(rope_reference(*leaves, cos, sin, interleaved), leaves, (up_q, up_k))
        dq, dk = rope_module.rope_bwd(up_q, up_k, cos, sin, interleaved, tile)
        for name, ours, want in (("dq", dq, exact[0]), ("dk", dk, exact[1])):
            torch.testing.assert_close(ours.double(), want, rtol=1e-5, atol=1e-5, msg=f"{name}, {tile}")


def test_bad_tile_names_the_field(device):
    q, k = torch.randn(1, 2, 3, 8, device=device), torch.randn(1, 1, 3, 8, device=device)
    cos, sin = make_cos_sin(1, 3, 8, False, torch.float32, device)
    RopeTile = rope_module.RopeTile
    cases = [(RopeTile(3, 8), ValueError, "positions"), (RopeTile(4, 0), ValueError, "heads"),
             (RopeTile(4, 8, 6), ValueError, "num_warps"), (RopeTile(4, 8, 64), ValueError, "num_warps"),
             (RopeTile(4, 8, 4, -1), ValueError, "programs_per_sm"), (RopeTile(4.0, 8), TypeError, "positions"),
             (RopeTile(4, True), TypeError, "heads"), ((4, 8, 4), TypeError, "tile")]
    for tile, error, name in cases:
        with pytest.raises(error, match=name):
            rope_module.rope_fwd(q, k, cos, sin, False, tile)


def test_default_tile():
    # Llama-3-8B (32/8 heads): tiles of k's 8 heads, 8 positions a program; without GQA every
    # head at a position in one tile, two positions.
    assert rope_module.default_tile(4 * 2048, 32, 8, 128) == rope_module.RopeTile(8, 8, 4, 0)
    assert rope_module.default_tile(4 * 2048, 32, 32, 128).positions == 2
    assert rope_module.default_tile(100, 2, 1, 16).positions == 128  # small heads: positions stack


def test_masked_lanes_read_nothing_past_the_inputs(device):
    # Positions past the last (a partly filled BLOCK_S) must not load cos, sin or q: NaN
    # placed right after every input stays out of the results, and the interpreter, which
    # evaluates masked lanes too, raises no floating-point warnings.
    import warnings

    def tight(shape):
        numel = 1
        for s in shape:
            numel *= s
        buf = torch.full((numel + 64,), float("nan"), device=device)
        buf[:numel] = torch.randn(numel, device=device)
        return buf[:numel].view(shape)

    q, k = tight((2, 3, 7, 12)), tight((2, 1, 7, 12))
    cos, sin = tight((2, 7, 8)), tight((2, 7, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for interleaved in (False, True):
            q_rot, k_rot = tritonkit.rope(q, k, cos, sin, interleaved=interleaved)
            assert not q_rot.isnan().any() and not k_rot.isnan().any()
