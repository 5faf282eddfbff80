"""The Gluon attention forward over packed sequences (`attention_varlen_fwd` on Hopper): its
kernel's structure compiled for sm_90 on the CPU, the dispatch's choice, and on a Hopper GPU
its outputs against float64 references of each sequence on its own (torch's error in the
same dtype the yardstick) and against the Triton kernel; lengths that end mid-tile, empty
sequences, sequences without keys, Nq != Nk, GQA, softcap, causal left windows, float16,
determinism."""

import pytest
import torch

from tritonkit._launch import record_launches
from tritonkit.ops.attention.gluon import attention_fwd as gluon_fwd
from tritonkit.inspector.gluon import HOPPER_SHARED_LIMIT, compile_sm90
from tritonkit.ops.attention import attention_varlen_fwd, attention_varlen_reference, paths
from tritonkit.ops.attention.score import Score

from _tolerance import assert_close_to_reference
from test_attention_varlen import cu


def _views(T: int, heads: int, D: int) -> torch.Tensor:
    # The (1, H, T, D) view of a packed (T, H, D) tensor, as the varlen plans launch on.
    return torch.empty(T, heads, D, dtype=torch.bfloat16).permute(1, 0, 2).unsqueeze(0)


def _compiled(D: int, causal: bool, softcap: float = 0.0):
    lengths = (100, 200, 1, 400, 299)
    cu_q = cu(lengths, "cpu")
    q, k, v, o = _views(1000, 4, D), _views(1000, 2, D), _views(1000, 2, D), _views(1000, 4, D)
    grid, args, kwargs = gluon_fwd.launch_args(q, k, v, o, torch.empty(1, 4, 1000), D ** -0.5,
                                               Score(causal=causal, softcap=softcap), cu_q=cu_q, cu_k=cu_q)
    kernel = compile_sm90(gluon_fwd._attn_fwd_kernel, args, kwargs)
    return kernel, kwargs


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128, 256])
def test_varlen_structure_for_sm90(D, causal):
    kernel, kwargs = _compiled(D, causal)
    # Tiles of unequal length, handed out by the dynamic schedule whether causal or not.
    assert kwargs["VARLEN"] and kwargs["DYNAMIC"]
    usage = kernel.spills()
    assert usage["spill_stores"] == usage["spill_loads"] == usage["stack"] == 0
    assert kernel.shared <= HOPPER_SHARED_LIMIT
    # TMA loads and stores for whole row blocks, masked stores for a sequence's last rows.
    assert "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group" in kernel.ptx
    assert "st.global" in kernel.ptx


def test_varlen_dispatch_for_sm90():
    # The inspector's target: the choice made on an H100/H200, without a GPU.
    T, H, D = 4000, 4, 128
    q, k = _views(T, H, D), _views(T, 2, D)
    with record_launches(execute=False, capability=90):
        chosen = paths.gluon_forward(q, k, k, D ** -0.5, Score(True, -1, -1, 0.0), (5, False), None, None, None)
        windowed = paths.gluon_forward(q, k, k, D ** -0.5, Score(True, 1000, -1, 0.0), (5, False), None, None, None)
        short = paths.gluon_forward(q, k, k, D ** -0.5, Score(True, -1, -1, 0.0), (20, False), None, None, None)
        forced = paths.gluon_forward(q, k, k, D ** -0.5, Score(True, -1, -1, 0.0), (20, False), None, None, True)
    assert chosen.path == "gluon" and "5 packed sequences" in chosen.reason
    # Sequences of 200 rows on average: the Triton forward unless asked for the Gluon one.
    assert short.path == "triton" and "200 query rows on average" in short.reason
    assert forced.path == "gluon"
    assert windowed.path == "triton" and "packed sequences with a sliding window" in windowed.reason
    with pytest.raises(ValueError, match="packed sequences with a sliding window"), \
            record_launches(execute=False, capability=90):
        paths.gluon_forward(q, k, k, D ** -0.5, Score(True, 1000, -1, 0.0), (5, False), None, None, True)
    # One cu_seqlens for queries and keys (varlen's second field): every row sees itself, so a
    # causal mask's left window runs on the Gluon kernel; another window does not.
    with record_launches(execute=False, capability=90):
        one_cu = paths.gluon_forward(q, k, k, D ** -0.5, Score(True, 1000, -1, 0.0), (5, True), None, None, None)
        right = paths.gluon_forward(q, k, k, D ** -0.5, Score(False, 1000, 1000, 0.0), (5, True), None, None, None)
    assert one_cu.path == "gluon" and "5 packed sequences, left window 1000" in one_cu.reason
    assert right.path == "triton" and "packed sequences with a sliding window" in right.reason
    # A 100-key window: a walk too short for the Gluon forward (the Triton one measured faster).
    with record_launches(execute=False, capability=90):
        narrow = paths.gluon_forward(q, k, k, D ** -0.5, Score(True, 100, -1, 0.0), (5, True), None, None, None)
    assert narrow.path == "triton" and "about 101 keys a row" in narrow.reason


# ---------------------------------------------------------------------------------------
# On a Hopper GPU
# ---------------------------------------------------------------------------------------

def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


needs_hopper = pytest.mark.skipif(not _hopper(), reason="needs a Hopper (sm_90) GPU")

# (query lengths, key lengths or None for the same): why
LENGTHS = {
    ((300, 1, 130, 64, 129, 1000), None): "lengths that end mid-tile, at a tile's edge and past it",
    ((0, 77, 0, 0, 250, 0), None): "empty sequences, first and last too",
    ((70, 333, 5), (90, 200, 0)): "queries and keys of different lengths; a sequence without keys",
    ((2048, 3, 517, 1500), None): "longer sequences, one of three tokens",
}


def _packed(lens_q, lens_k, H, Hkv, D, dtype=torch.bfloat16):
    lens_k = lens_q if lens_k is None else lens_k
    q = torch.randn(sum(lens_q), H, D, dtype=dtype, device="cuda")
    k = torch.randn(sum(lens_k), Hkv, D, dtype=dtype, device="cuda")
    v = torch.randn(sum(lens_k), Hkv, D, dtype=dtype, device="cuda")
    return q, k, v, cu(lens_q, "cuda"), cu(lens_k, "cuda")


def _check(q, k, v, cq, ck, causal, softcap=0.0, window_left=-1):
    o, lse = attention_varlen_fwd(q, k, v, cq, ck, causal, window_left=window_left, softcap=softcap, gluon=True)
    kw = dict(softcap=softcap or None, return_lse=True, window=(window_left, 0) if window_left >= 0 else None)
    ref, ref_lse = attention_varlen_reference(q, k, v, cq, ck, causal, **kw)
    same, same_lse = attention_varlen_reference(q, k, v, cq, ck, causal, upcast=False, **kw)
    # The fixed reference (bfloat16 with a cap) rounds a row's largest p too: 2^-9 relative
    # where one key holds a row (`fixed_reference`'s documented price; torch is exact there).
    eps = 2.0 ** -9 if gluon_fwd.fixed_reference(softcap, q.dtype) else None
    assert_close_to_reference(o, ref, same, eps=eps)
    assert_close_to_reference(lse, ref_lse, same_lse.float(), what="lse")
    o_t, lse_t = attention_varlen_fwd(q, k, v, cq, ck, causal, window_left=window_left, softcap=softcap,
                                      gluon=False)
    torch.testing.assert_close(lse, lse_t, atol=2e-3, rtol=0)
    torch.testing.assert_close(o.float(), o_t.float(), atol=2e-2, rtol=2e-2)
    return o, lse


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("lens_q, lens_k", [pytest.param(*c, id=why) for c, why in LENGTHS.items()])
def test_varlen_forward(lens_q, lens_k, D, causal):
    _check(*_packed(lens_q, lens_k, 4, 2, D), causal)


@pytest.mark.gpu
@needs_hopper
def test_varlen_rows_without_keys():
    # A sequence with queries and no keys: its rows are 0 with lse -inf (never NaN).
    q, k, v, cq, ck = _packed((40, 200, 7), (30, 0, 9), 4, 1, 128)
    for causal in (False, True):
        o, lse = _check(q, k, v, cq, ck, causal)
        assert torch.all(o[40:240] == 0) and torch.all(lse[:, 40:240] == float("-inf"))


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("softcap", [50.0, 80.0])
def test_varlen_softcap(softcap):
    _check(*_packed((300, 1, 130, 1000), None, 8, 2, 128), True, softcap)


@pytest.mark.gpu
@needs_hopper
def test_varlen_float16_mqa_and_deterministic():
    args = _packed((129, 640, 3, 1023), None, 6, 1, 128, torch.float16)
    first = _check(*args, True)
    second = attention_varlen_fwd(*args, True, gluon=True)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])


@pytest.mark.gpu
@needs_hopper
def test_varlen_many_short_sequences():
    # More tiles than programs, most of them short: the schedule's skipped tiles (past a
    # sequence's rows) and the persistent programs' many tiles.
    lens = torch.randint(1, 300, (200,), generator=torch.Generator().manual_seed(0)).tolist()
    _check(*_packed(lens, None, 16, 4, 128), True)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("window_left", [0, 1, 100, 200, 2000])
def test_varlen_causal_window(window_left, D):
    # A causal mask's left window over one cu_seqlens for queries and keys (each row sees
    # itself): windows of one key, shorter than a block, across blocks, and wider than any
    # sequence.
    q, k, v, cq, _ = _packed((300, 1, 130, 64, 129, 1000), None, 4, 2, D)
    _check(q, k, v, cq, cq, True, window_left=window_left)


def test_varlen_views_at_odd_offsets_take_the_triton_kernels():
    # q, k, v sliced out of one packed projection one element in: no tensor descriptor can read
    # them in place, so on an H100/H200 both passes choose the Triton kernels (whose GPU cases
    # with such views are in test_attention_varlen), never a TMA load of a misaligned base.
    T, H, D = 4000, 4, 128
    qkv = torch.empty(T, 2 * H * D + 1, dtype=torch.bfloat16)[:, 1:].view(T, 2 * H, D)
    q, k = (t.permute(1, 0, 2).unsqueeze(0) for t in (qkv[:, :H], qkv[:, H:]))
    assert q.data_ptr() % 16 != 0
    with record_launches(execute=False, capability=90):
        forward = paths.gluon_forward(q, k, k, D ** -0.5, Score(True, -1, -1, 0.0), (5, True), None, None, None)
        backward = paths.gluon_backward(q, q, k, k, q, torch.empty(1, H, T), D ** -0.5, Score(True, -1, -1, 0.0),
                                        (5, True), None, None, None, None, 2**40)
    assert forward.path == backward.path == "triton"
    assert "TMA" in forward.reason or "descriptor" in forward.reason, forward.reason
