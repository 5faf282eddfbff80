"""The Gluon (Hopper) attention forward.

Gluon kernels do not run under Triton's interpreter. On any machine the kernels are compiled
for sm_90 and their structure is pinned (warp partitions and their setmaxnreg budgets, wgmma
waits that leave a product in flight, no spills, shared memory within Hopper's 227 KB).
Correctness is checked on a Hopper GPU (gpu-marked): against the float64 reference and
against the Triton path, whose backward consumes the same lse; with a softcap too.
"""

import math
import re

import pytest
import torch

from tritonkit._counters import zeroed_counters
from tritonkit.ops.attention.gluon import attention_fwd as gluon_fwd, host
from tritonkit.inspector.gluon import HOPPER_SHARED_LIMIT, compile_sm90
from tritonkit.ops.attention import attention_fwd, attention_reference
from tritonkit.ops.attention.score import Score

from _tolerance import assert_close_to_reference


def _compiled(D: int, causal: bool, Nq: int = 333, Nk: int = 517, softcap: float = 0.0, window_left: int = -1):
    q = torch.empty(2, 4, Nq, D, dtype=torch.bfloat16)
    k = torch.empty(2, 2, Nk, D, dtype=torch.bfloat16)
    v = torch.empty_like(k)
    o, lse = torch.empty_like(q), torch.empty(2, 4, Nq)
    grid, args, kwargs = gluon_fwd.launch_args(q, k, v, o, lse, D ** -0.5,
                                               Score(causal=causal, window_left=window_left, softcap=softcap))
    kernel = compile_sm90(gluon_fwd._attn_fwd_kernel, args, kwargs)
    kernel.consumers = kwargs["CONSUMERS"]
    return kernel


def _named(args) -> dict:
    """The launch's positional arguments by the kernel's parameter names."""
    return dict(zip(gluon_fwd._attn_fwd_kernel.arg_names, args))


# A causal mask's left window: its masked blocks also keep rows that have seen no key yet
# finite, which costs the D=128 kernel a few bytes of spills (12 stored, 8 loaded, ptxas sm_90).
WINDOW_SPILL_BOUND = {64: 0, 128: 16, 256: 0}


@pytest.mark.parametrize("D", [64, 128, 256])
def test_window_structure_for_sm90(D):
    _check_structure(_compiled(D, True, window_left=100), D, WINDOW_SPILL_BOUND[D])
    # With Gemma's cap too, from the fixed reference: no running maximum to keep finite, no spills.
    _check_structure(_compiled(D, True, softcap=50.0, window_left=100), D)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128, 256])
def test_structure_for_sm90(D, causal):
    kernel = _compiled(D, causal)
    _check_structure(kernel, D)
    assert "tanh.approx" not in kernel.ptx          # the softcap's code is constexpr-guarded away
    # Causal tiles are handed out by a counter in global memory (the producer's atomic add; the
    # last program's exchange puts the counters back to zero); full attention's round-robin
    # needs no atomics at all.
    atomics = set(re.findall(r"atom\.global\.[\w.]+", kernel.ptx))
    if causal:
        assert any(".add." in a for a in atomics) and any(".exch." in a for a in atomics)
    else:
        assert not atomics


# The causal forward at D=64 takes three consumers from THREE_CONSUMERS_CAUSAL_ROWS rows; at 160
# registers its masked blocks (the diagonal's) spill (120 bytes stored and loaded with the causal
# tiles' order `ops.attention.order`, 108 without; ptxas sm_90),
# measured faster than two consumers all the same (BENCHMARKS.md).
CAUSAL_THREE_CONSUMERS_SPILL_BOUND = 124


def test_consumer_count():
    rows = gluon_fwd.THREE_CONSUMERS_CAUSAL_ROWS
    causal = Score(causal=True)
    assert gluon_fwd.consumer_count(64, Score(), 1) == 3
    assert gluon_fwd.consumer_count(64, causal, rows - 1) == 2
    assert gluon_fwd.consumer_count(64, causal, rows) == 3
    assert gluon_fwd.consumer_count(64, Score(softcap=50.0), 1) == 2
    assert gluon_fwd.consumer_count(64, Score(causal=True, window_left=100), rows) == 2
    assert gluon_fwd.consumer_count(128, Score(), rows) == 2 and gluon_fwd.consumer_count(256, causal, rows) == 2


def test_long_causal_structure_for_sm90():
    Nq = gluon_fwd.THREE_CONSUMERS_CAUSAL_ROWS + 5          # ragged: not a multiple of 192
    kernel = _compiled(64, True, Nq=Nq, Nk=Nq + 300)
    assert kernel.consumers == 3
    _check_structure(kernel, 64, CAUSAL_THREE_CONSUMERS_SPILL_BOUND)


@pytest.mark.parametrize("D", [64, 128, 256])
def test_softcap_structure_for_sm90(D):
    # The softcap (Gemma 2's 50) in the same structure: one tanh.approx.f32 a score, the
    # instruction the Triton kernels use on the GPU, within the same registers (no spills).
    kernel = _compiled(D, True, softcap=50.0)
    _check_structure(kernel, D)
    assert "tanh.approx.f32" in kernel.ptx
    # Its qk_scale is the tanh's input factor scale / c (the cap folded in, as the Triton path's).
    q = torch.empty(1, 2, 64, D, dtype=torch.bfloat16)
    _, args, kwargs = gluon_fwd.launch_args(q, q, q, q, torch.empty(1, 2, 64), 0.125, Score(causal=True, softcap=50.0))
    assert kwargs["SCORE"].softcap == 50.0 and _named(args)["qk_scale"] == 0.125 / 50.0
    # In bfloat16 the softmax measures p from a fixed reference (no running row maximum: no
    # max.f32 in the consumers' score loop).
    assert kwargs["FIXED_MAX"] == gluon_fwd.fixed_reference(50.0, torch.bfloat16) > 0
    assert "max.f32" not in kernel.ptx and "max.NaN.f32" not in kernel.ptx
    assert re.search(r"max(\.NaN)?\.f32", _compiled(D, True, softcap=80.0).ptx)


@pytest.mark.parametrize("softcap", [0.5, 5.0, 30.0, 41.6, 50.0, gluon_fwd.FIXED_REFERENCE_MAX_CAP])
def test_fixed_reference_keeps_p_normal(softcap):
    # Every base-2 score lies in [-C, C], C = c log2 e; p = 2^(score - R) must stay normal and
    # far from overflow: within [2^-120, 2^30].
    R = gluon_fwd.fixed_reference(softcap, torch.bfloat16)
    C = softcap * math.log2(math.e)
    assert R > 0 and -C - R >= -120 - 1e-9 and C - R <= 30 + 1e-9


def test_fixed_reference_only_where_it_holds():
    # A running maximum past the cap bound, in float16 (its range would flush or overflow p)
    # and without a softcap.
    assert gluon_fwd.fixed_reference(gluon_fwd.FIXED_REFERENCE_MAX_CAP * 1.001, torch.bfloat16) == 0.0
    assert gluon_fwd.fixed_reference(80.0, torch.bfloat16) == 0.0
    assert gluon_fwd.fixed_reference(50.0, torch.float16) == 0.0
    assert gluon_fwd.fixed_reference(0.0, torch.bfloat16) == 0.0


def _check_structure(kernel, D, spill_bound=0):
    ttgir = kernel.asm["ttgir"]
    # The default partition (consumer warpgroup 0) and workers: the other 4-warp consumers and
    # the 1-warp producer, with the register budgets that sum within 64K per SM.
    consumers = kernel.consumers
    regs = host.consumer_regs(consumers)
    assert "ttg.warp_specialize" in ttgir
    assert re.findall(r"num_warps\((\d+)\)", ttgir) == ["4"] * (consumers - 1) + ["1"]
    assert f"requestedRegisters = array<i32: {', '.join([str(regs)] * (consumers - 1))}, 24>" in ttgir
    budgets = {n for _, n in kernel.setmaxnreg()}
    assert {regs, host.PRODUCER_REGS} <= budgets
    assert (regs * consumers + host.PRODUCER_REGS) * 128 <= 65536
    # S(j) is retired while P(j-1) V(j-1) stays in flight: a wait with one group pending.
    waits = kernel.wgmma_waits()
    assert 1 in waits and 0 in waits
    assert kernel.ptx.count("wgmma.mma_async") > 0
    # TMA loads and the TMA store of O.
    assert "cp.async.bulk.tensor.4d.shared::cluster.global" in kernel.ptx
    assert "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group" in kernel.ptx
    usage = kernel.spills()
    assert usage["spill_stores"] <= spill_bound and usage["spill_loads"] <= spill_bound
    assert usage["stack"] <= spill_bound
    block_n, stages, o_buffer = gluon_fwd.tile_config(D)
    ring = 2 * stages * block_n * D * 2
    assert ring + (1 + o_buffer) * consumers * 64 * D * 2 <= kernel.shared <= HOPPER_SHARED_LIMIT


def test_descriptor_is_what_the_checked_constructor_makes():
    # host.descriptor skips the Gluon descriptor's own checks (the kernels' refusal made them):
    # it must give what the checking constructor gives, on views as on whole tensors.
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    assert host._UNCHECKED       # the Triton this runs with has the fields host sets
    packed = torch.empty(2, 300, 3, 4, 64, dtype=torch.bfloat16)
    for t, rows in ((torch.empty(2, 4, 100, 128, dtype=torch.float16), 64), (packed[:, :, 1].transpose(1, 2), 128)):
        made = host.descriptor(t, rows)
        checked = TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, t.shape[-1]], made.layout)
        assert type(made) is TensorDescriptor and made.base is t
        assert vars(made) == vars(checked)


def test_not_supported_off_hopper():
    q = torch.randn(1, 2, 64, 64, dtype=torch.bfloat16)
    assert not gluon_fwd.supported(q, q, q)


# ---------------------------------------------------------------------------------------
# On a Hopper GPU
# ---------------------------------------------------------------------------------------

def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


needs_hopper = pytest.mark.skipif(not _hopper(), reason="needs a Hopper (sm_90) GPU")


def _lse_reference(q, k, causal, scale):
    group = q.shape[1] // k.shape[1]
    s = (q.double() @ k.double().repeat_interleave(group, dim=1).transpose(-1, -2)) * scale
    if causal:
        seen = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~seen, float("-inf"))
    return torch.logsumexp(s, dim=-1)


def _check(q, k, v, causal, scale=None):
    assert gluon_fwd.supported(q, k, v, Score(causal=causal), scale)
    o, lse = attention_fwd(q, k, v, causal, scale, gluon=True)
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    ref = attention_reference(q, k, v, causal, s)
    assert_close_to_reference(o, ref, attention_reference(q, k, v, causal, s, upcast=False))
    assert lse.dtype == torch.float32 and lse.shape == q.shape[:3]
    torch.testing.assert_close(lse.double(), _lse_reference(q, k, causal, s), atol=2e-3, rtol=0)
    # The Triton path: same contract, same layout; its backward reads this lse.
    o_t, lse_t = attention_fwd(q, k, v, causal, scale, gluon=False)
    assert o.stride() == o_t.stride()
    torch.testing.assert_close(lse, lse_t, atol=2e-3, rtol=0)
    torch.testing.assert_close(o.float(), o_t.float(), atol=2e-2, rtol=2e-2)


def _qkv(B, H, Hkv, Nq, Nk, D, dtype=torch.bfloat16):
    q = torch.randn(B, H, Nq, D, dtype=dtype, device="cuda")
    k = torch.randn(B, Hkv, Nk, D, dtype=dtype, device="cuda")
    v = torch.randn(B, Hkv, Nk, D, dtype=dtype, device="cuda")
    return q, k, v


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("B, H, Hkv, Nq, Nk", [
    (2, 4, 2, 333, 333),       # ragged (not a multiple of any block), GQA
    (1, 2, 2, 200, 515),       # Nq < Nk
    (3, 4, 1, 515, 200),       # Nq > Nk (causal rows past Nk see every key), MQA
    (4, 2, 2, 128, 128),       # exact blocks, B=4
    (1, 2, 1, 1, 77),          # one query row
    (1, 2, 2, 2111, 2111),     # many laps of the K/V ring
    (4, 16, 8, 777, 777),      # 448 tiles: each persistent program takes several
])
def test_matches_reference_and_triton(B, H, Hkv, Nq, Nk, D, causal):
    _check(*_qkv(B, H, Hkv, Nq, Nk, D), causal)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("B, H, Hkv, Nq, Nk", [
    (1, 2, 1, 8197, 8197),     # ragged (192-row tiles, 128-key blocks), MQA
    (1, 4, 2, 8192, 8500),     # Nq < Nk, GQA
    (1, 2, 2, 8300, 8200),     # Nq > Nk: rows past Nk see every key
])
def test_long_causal_d64_three_consumers(B, H, Hkv, Nq, Nk):
    # The causal forward at D=64 from THREE_CONSUMERS_CAUSAL_ROWS rows runs 192-row tiles.
    assert Nq >= gluon_fwd.THREE_CONSUMERS_CAUSAL_ROWS and gluon_fwd.consumer_count(64, Score(causal=True), Nq) == 3
    _check(*_qkv(B, H, Hkv, Nq, Nk, 64), True)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("window", [-1, 200])
def test_dynamic_schedule_leaves_its_counters_at_zero(window):
    # A causal forward hands its tiles out through two counters in global memory. Launched
    # again with the same arguments (a benchmark's repeats, a CUDA graph's replays) it must
    # find them back at zero, and give the same bits as the first launch.
    q, k, v = _qkv(4, 16, 8, 777, 777, 128)
    o, lse = torch.empty_like(q), torch.empty(4, 16, 777, device="cuda")
    grid, args, kwargs = gluon_fwd.launch_args(q, k, v, o, lse, 128 ** -0.5, Score(causal=True, window_left=window))
    named = _named(args)
    sched, n_tiles = named["SCHED"], -(-777 // 128) * 16 * 4
    assert kwargs["DYNAMIC"] and sched.dtype == torch.int32 and named["tiling"][1] == n_tiles and grid[0] < n_tiles
    kwargs = dict(kwargs)
    num_warps = kwargs.pop("num_warps")
    gluon_fwd._attn_fwd_kernel[grid](*args, **kwargs, num_warps=num_warps)
    first = o.clone(), lse.clone()
    assert torch.equal(sched, torch.zeros_like(sched))
    o.zero_(), lse.zero_()
    gluon_fwd._attn_fwd_kernel[grid](*args, **kwargs, num_warps=num_warps)
    assert torch.equal(o, first[0]) and torch.equal(lse, first[1])
    assert torch.equal(sched, torch.zeros_like(sched))
    o_t, lse_t = attention_fwd(q, k, v, True, None, window, gluon=False)
    torch.testing.assert_close(lse, lse_t, atol=2e-3, rtol=0)
    torch.testing.assert_close(o.float(), o_t.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@needs_hopper
def test_schedule_counters_one_pair_a_stream():
    # Launches on one stream reuse its pair of counters (each leaves them at zero); two streams
    # running at once must not share a pair, and a captured graph gets a pair of its own.
    device = torch.device("cuda")
    mine = zeroed_counters(device)
    assert zeroed_counters(device) is mine and torch.equal(mine, torch.zeros_like(mine))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert zeroed_counters(device) is not mine
    q, k, v = _qkv(2, 16, 8, 1500, 1500, 128)
    expected = attention_fwd(q, k, v, True, gluon=True)
    results = []
    streams = [torch.cuda.Stream() for _ in range(2)]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    for s in streams:  # both forwards in flight together, each on its own stream's counters
        with torch.cuda.stream(s):
            results.append(attention_fwd(q, k, v, True, gluon=True))
    torch.cuda.synchronize()
    for o, lse in results:
        assert torch.equal(o, expected[0]) and torch.equal(lse, expected[1])
    graph = torch.cuda.CUDAGraph()
    capture = torch.cuda.Stream()
    capture.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(capture):
        attention_fwd(q, k, v, True, gluon=True)        # warm-up outside the capture
        with torch.cuda.graph(graph, stream=capture):
            captured = attention_fwd(q, k, v, True, gluon=True)
    torch.cuda.current_stream().wait_stream(capture)
    for _ in range(2):
        graph.replay()
        attention_fwd(q, k, v, True, gluon=True)        # the same stream's pair, between replays
    torch.cuda.synchronize()
    assert torch.equal(captured[0], expected[0]) and torch.equal(captured[1], expected[1])


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("D", [64, 128])
def test_float16_negative_scale_and_packed_layout(D):
    q, k, v = _qkv(2, 4, 2, 300, 300, D, torch.float16)
    _check(q, k, v, True, scale=-0.3)
    # (B, N, H, D) in memory, as projections produce: heads interleaved along the sequence.
    qkv = torch.randn(2, 300, 3, 4, D, dtype=torch.bfloat16, device="cuda")
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    _check(q, k, v, False)


def _check_softcap(q, k, v, causal, softcap, scale=None):
    """The softcapped forward against the float64 reference (torch's error in the same dtype,
    with the same cap, the yardstick) and against the Triton path's softcap."""
    assert gluon_fwd.supported(q, k, v, Score(causal=causal, softcap=softcap), scale)
    o, lse = attention_fwd(q, k, v, causal, scale, softcap=softcap, gluon=True)
    kw = dict(softcap=softcap, return_lse=True)
    ref, ref_lse = attention_reference(q, k, v, causal, scale, **kw)
    same, same_lse = attention_reference(q, k, v, causal, scale, upcast=False, **kw)
    assert_close_to_reference(o, ref, same)
    assert lse.dtype == torch.float32 and lse.shape == q.shape[:3]
    assert_close_to_reference(lse, ref_lse, same_lse.float(), what="lse")
    # Both paths use tanh.approx.f32 and the same base-2 scores: lse (which the backward reads)
    # agrees as closely as without a softcap.
    o_t, lse_t = attention_fwd(q, k, v, causal, scale, softcap=softcap, gluon=False)
    torch.testing.assert_close(lse, lse_t, atol=2e-3, rtol=0)
    torch.testing.assert_close(o.float(), o_t.float(), atol=2e-2, rtol=2e-2)
    return o, lse


# (B, H, Hkv, Nq, Nk, D, causal, softcap, scale): the softcap cases of the forward and (at its
# head dims) the backward (tests/test_gluon_attention_bwd.py)
SOFTCAP_CASES = [
    (2, 4, 2, 333, 333, 128, True, 50.0, None),    # Gemma 2's cap, ragged, GQA
    (1, 2, 2, 200, 515, 128, False, 50.0, None),   # Nq < Nk, full
    (1, 2, 2, 200, 515, 128, True, 50.0, None),    # Nq < Nk, causal (keys no query sees)
    (3, 4, 1, 515, 200, 64, True, 30.0, None),     # D=64, Nq > Nk, MQA
    (3, 4, 1, 515, 200, 256, True, 30.0, None),    # D=256 (64-key blocks)
    (2, 4, 2, 300, 300, 128, True, 5.0, 1.0),      # scale 1, cap 5: most scores on the bent part
    (2, 4, 2, 300, 300, 128, False, 8.0, -0.5),    # a negative scale: tanh is odd, the max still on tanh
    (1, 2, 2, 1100, 1100, 128, True, 50.0, None),  # several laps of the rings
    (4, 16, 8, 777, 777, 128, False, 20.0, None),  # persistent programs taking several tiles
    (2, 4, 2, 333, 333, 128, True, 80.0, None),    # past FIXED_REFERENCE_MAX_CAP: a running maximum
    (2, 4, 2, 333, 333, 64, False, 51.9, None),    # just below it: the widest range of p
]


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("B, H, Hkv, Nq, Nk, D, causal, softcap, scale", SOFTCAP_CASES)
def test_softcap_matches_reference_and_triton(B, H, Hkv, Nq, Nk, D, causal, softcap, scale):
    _check_softcap(*_qkv(B, H, Hkv, Nq, Nk, D), causal, softcap, scale)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("B, H, Hkv, Nq, Nk, window", [
    (2, 4, 2, 333, 333, 100),     # ragged, GQA: rows whose window starts past the first key block
    (1, 2, 2, 1100, 1100, 64),
    (1, 2, 1, 700, 700, 0),       # the diagonal only: most rows see nothing in most masked blocks
    (1, 2, 2, 1100, 1100, 300),
    (1, 2, 2, 200, 515, 50),      # Nq < Nk
    (3, 4, 1, 515, 200, 320),     # Nq > Nk, MQA, every row still sees a key
    (4, 16, 8, 777, 777, 200),    # 448 tiles: each persistent program takes several
])
def test_window_matches_reference_and_triton(B, H, Hkv, Nq, Nk, D, window):
    # A causal mask's left window on the Gluon forward (the dispatch's choice where every row
    # sees a key) against the float64 reference, the Triton forward, and bitwise run to run.
    q, k, v = _qkv(B, H, Hkv, Nq, Nk, D)
    o, lse = _check_window(q, k, v, window)
    again = attention_fwd(q, k, v, True, None, window, gluon=True)
    assert torch.equal(o, again[0]) and torch.equal(lse, again[1])


def _check_window(q, k, v, window, softcap=0.0):
    """The Gluon forward with a causal left window (and a softcap) against the float64
    reference (torch's error in the same dtype, the yardstick) and the Triton forward."""
    o, lse = attention_fwd(q, k, v, True, None, window, softcap=softcap, gluon=True)
    kw = dict(window=(window, -1), softcap=softcap or None, return_lse=True)
    ref, ref_lse = attention_reference(q, k, v, True, None, **kw)
    same, same_lse = attention_reference(q, k, v, True, None, upcast=False, **kw)
    # The fixed reference rounds a row's largest p to bfloat16 too (fixed_reference's documented
    # price): 2^-9 relative where one key holds a row's weight, as on the diagonal (window 0),
    # where torch's own output is exact and so no yardstick.
    eps = 2.0 ** -9 if gluon_fwd.fixed_reference(softcap, q.dtype) else None
    assert_close_to_reference(o, ref, same, eps=eps)
    assert_close_to_reference(lse, ref_lse, same_lse.float(), what="lse")
    o_t, lse_t = attention_fwd(q, k, v, True, None, window, softcap=softcap, gluon=False)
    torch.testing.assert_close(lse, lse_t, atol=2e-3, rtol=0)
    torch.testing.assert_close(o.float(), o_t.float(), atol=2e-2, rtol=2e-2)
    return o, lse


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("B, H, Hkv, Nq, Nk, window", [
    (2, 4, 2, 333, 333, 100),     # rows whose window starts past the first key block
    (1, 2, 1, 700, 700, 0),       # the diagonal only
    (4, 16, 8, 777, 777, 200),    # persistent programs taking several tiles
])
def test_window_with_softcap(B, H, Hkv, Nq, Nk, D, window):
    # Gemma 2's sliding layers: a causal left window and Gemma's cap together, in bfloat16, so
    # from the fixed reference: rows that have seen no key yet add exactly zero (p = 2^-inf).
    _check_window(*_qkv(B, H, Hkv, Nq, Nk, D), window, softcap=50.0)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("softcap", [50.0, 5.0, 80.0])
def test_softcap_saturated_scores(causal, softcap):
    # Scores pinned at both ends of the cap: rows whose every score is near +c, rows near -c
    # (p at the ends of the fixed reference's range, 2^30 and 2^-120 for Gemma's cap), and
    # ordinary rows between, against the reference and the Triton path.
    _check_softcap(*saturated_qkv(), causal, softcap)


def saturated_qkv():
    """q, k, v (2, 4/2 heads, 300, 128, bfloat16) whose rows of scores saturate a cap: every
    third row all near +c (q = 30, k > 0.5), the next all near -c, the third ordinary."""
    q, k, v = _qkv(2, 4, 2, 300, 300, 128)
    k = k.abs() + 0.5
    sign = torch.tensor([1.0, -1.0, 0.0], device="cuda").repeat(100)[:, None]
    return torch.where(sign == 0, q, 30.0 * sign).to(q.dtype), k, v


@pytest.mark.gpu
@needs_hopper
def test_softcap_float16_and_deterministic():
    q, k, v = _qkv(2, 4, 2, 300, 300, 128, torch.float16)
    first = _check_softcap(q, k, v, True, 5.0, scale=1.0)
    second = attention_fwd(q, k, v, True, 1.0, softcap=5.0, gluon=True)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])


@pytest.mark.gpu
@needs_hopper
def test_deterministic_and_refuses_what_tma_cannot_read():
    q, k, v = _qkv(2, 4, 2, 700, 700, 128)
    first = attention_fwd(q, k, v, True, gluon=True)
    second = attention_fwd(q, k, v, True, gluon=True)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    buffer = torch.randn(1 + 2 * 4 * 64 * 128, dtype=torch.bfloat16, device="cuda")
    odd = buffer[1:].view(2, 4, 64, 128)                 # 2-byte offset: not 16-byte aligned
    assert not gluon_fwd.supported(odd, k, v)
    assert not gluon_fwd.supported(q[..., :96], k[..., :96], v[..., :96])   # D=96
