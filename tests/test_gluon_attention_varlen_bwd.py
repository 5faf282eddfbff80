"""The Gluon attention backward over packed sequences (`attention_varlen_bwd` on Hopper): its
dQ and dK/dV kernels compiled for sm_90 on the CPU, the dispatch's choice, and on a Hopper GPU
the gradients against the float64 reference's (torch's error in the same dtype the yardstick)
and against the Triton backward, bitwise run to run; lengths that end mid-block, empty
sequences, sequences without keys or without queries, Nq != Nk, GQA/MQA, softcap, lse's
upstream gradient, float16."""

import pytest
import torch

from tritonkit._launch import record_launches
from tritonkit.ops.attention.gluon import attention_bwd as gluon_bwd
from tritonkit.inspector.gluon import HOPPER_SHARED_LIMIT, compile_sm90
from tritonkit.ops.attention import attention_varlen_bwd, attention_varlen_fwd, attention_varlen_reference, paths
from tritonkit.ops.attention.score import Score

from _tolerance import assert_close_to_reference, eps_for
from test_attention_varlen import cu, grads
from test_gluon_attention_varlen import LENGTHS, _packed, _views, needs_hopper

# ptxas spills a few loop-invariant values of the dK/dV kernel (the sequence's bounds beside
# the dense kernel's); bounded as the dense kernel's DKDV_SPILL_BOUND and SPLIT_SPILL_BOUND
# (ptxas, sm_90, packed: 8 bytes at D=64 causal, 12-52 at 128, 16-52 at 256).
VARLEN_DKDV_SPILL_BOUND = {64: 16, 128: 128, 256: 64}


def _compiled(kernel: str, D: int, causal: bool, softcap: float = 0.0, window_left: int = -1):
    cu_q = cu((100, 200, 1, 400, 299), "cpu")
    q, k = _views(1000, 4, D), _views(1000, 2, D)
    lse = torch.empty(1, 4, 1000)
    score = Score(causal=causal, window_left=window_left, softcap=softcap)
    if kernel == "dkdv":
        _, args, kwargs = gluon_bwd.dkdv_launch_args(q, q, k, k, k, k, lse, lse, D ** -0.5, score, cu_q=cu_q,
                                                     cu_k=cu_q)
        return compile_sm90(gluon_bwd._dkdv_kernel, args, kwargs), kwargs
    _, args, kwargs = gluon_bwd.dq_launch_args(q, q, k, k, q, q, lse, lse, None, D ** -0.5, score, cu_q=cu_q,
                                               cu_k=cu_q)
    return compile_sm90(gluon_bwd._dq_kernel, args, kwargs), kwargs


# Head dim 256 has a Gluon dK/dV kernel only (the Triton dQ pass runs beside it).
KERNEL_HEAD_DIMS = [("dkdv", 64), ("dkdv", 128), ("dkdv", 256), ("dq", 64), ("dq", 128)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kernel, D", KERNEL_HEAD_DIMS)
def test_varlen_structure_for_sm90(kernel, D, causal):
    compiled, kwargs = _compiled(kernel, D, causal)
    assert kwargs["VARLEN"]
    usage = compiled.spills()
    bound = VARLEN_DKDV_SPILL_BOUND[D] if kernel == "dkdv" else 0
    assert usage["spill_stores"] <= bound and usage["spill_loads"] <= bound
    assert compiled.shared <= HOPPER_SHARED_LIMIT
    waits = set(compiled.wgmma_waits())
    # Products still overlap as in the dense kernels (at D=256 the dK/dV pass retires each pair
    # before handing P^T or dS^T over: waits for zero, as dense).
    assert waits == {0} if gluon_bwd.split_head_dim(D) else {0, 1} <= waits
    # TMA for whole blocks; masked pointer stores for a sequence's last rows (dQ) or keys (dK, dV).
    assert "cp.async.bulk.tensor.4d.shared::cluster.global" in compiled.ptx
    assert "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group" in compiled.ptx
    assert "st.global" in compiled.ptx


def test_varlen_softcap_structure_for_sm90():
    for kernel in ("dkdv", "dq"):
        compiled, _ = _compiled(kernel, 128, True, softcap=50.0)
        assert "tanh.approx.f32" in compiled.ptx
        assert compiled.spills()["spill_stores"] <= (VARLEN_DKDV_SPILL_BOUND[128] if kernel == "dkdv" else 0)


def test_varlen_dispatch_for_sm90():
    # The inspector's target: the choice made on an H100/H200, without a GPU.
    T, H = 4000, 4
    flags, window = Score(True, -1, -1, 0.0), Score(True, 100, -1, 0.0)
    with record_launches(execute=False, capability=90):
        chosen = {}
        for D in (128, 256):
            q, k = _views(T, H, D), _views(T, 2, D)
            lse = torch.empty(1, H, T)
            choose = lambda flags, gluon, D=D, q=q, k=k, lse=lse: paths.gluon_backward(  # noqa: E731
                q, q, k, k, q, lse, D ** -0.5, flags, (5, False), None, None, None, gluon, 2**40)
            chosen[D] = choose(flags, None)
            if D == 128:
                windowed = choose(window, None)
                with pytest.raises(ValueError, match="packed sequences with a sliding window"):
                    choose(window, True)
    assert chosen[128].path == "gluon" and "5 packed sequences" in chosen[128].reason
    assert windowed.path == "triton" and "packed sequences with a sliding window" in windowed.reason
    # Head dim 256: the Gluon dK/dV pass beside the Triton preprocess and dQ pass, as dense.
    assert chosen[256].path == "gluon" and "the dQ pass in Triton" in chosen[256].reason
    # One cu_seqlens for queries and keys: a causal mask's left window runs on the Gluon kernels.
    q, k = _views(T, H, 128), _views(T, 2, 128)
    with record_launches(execute=False, capability=90):
        one_cu = paths.gluon_backward(q, q, k, k, q, torch.empty(1, H, T), 128 ** -0.5, window, (5, True), None,
                                      None, None, None, 2**40)
    assert one_cu.path == "gluon" and "5 packed sequences, left window 100" in one_cu.reason
    # Head dim 64 with few multiply-adds: packed calls take the Gluon kernels (measured as fast or
    # faster), where dense ones of that size keep the Triton kernels.
    q, k = _views(T, H, 64), _views(T, 2, 64)
    with record_launches(execute=False, capability=90):
        small = [paths.gluon_backward(q, q, k, k, q, torch.empty(1, H, T), 0.125, flags, varlen, None, None, None,
                                      None, 2**30) for varlen in ((5, False), None)]
    assert [choice.path for choice in small] == ["gluon", "triton"]


# ---------------------------------------------------------------------------------------
# On a Hopper GPU
# ---------------------------------------------------------------------------------------

def _check(q, k, v, cq, ck, causal, softcap=0.0, with_dlse=False, window_left=-1):
    """The Gluon backward's gradients (from the Gluon forward's o and lse) against the float64
    reference's, the Triton backward's, and its own second run."""
    mask = dict(window_left=window_left, softcap=softcap)
    o, lse = attention_varlen_fwd(q, k, v, cq, ck, causal, **mask)
    do = torch.randn_like(q)
    dlse = torch.randn_like(lse) if with_dlse else None
    got = attention_varlen_bwd(do, q, k, v, o, lse, cq, ck, causal, dlse=dlse, gluon=True, **mask)
    kw = dict(softcap=softcap or None, upcast=False, return_lse=True,
              window=(window_left, 0) if window_left >= 0 else None)
    reference = lambda *t: attention_varlen_reference(*t, cq, ck, causal, **kw)  # noqa: E731
    up = torch.zeros_like(lse) if dlse is None else dlse
    wide = grads(reference, [t.double() for t in (q, k, v)], (do.double(), up.double()))
    same = grads(reference, (q, k, v), (do, up.to(q.dtype)))
    for name, ours, ref, torch_grad, like in zip(("dq", "dk", "dv"), got, wide, same, (q, k, v)):
        assert ours.dtype == like.dtype and ours.shape == like.shape and not ours.isnan().any(), name
        assert_close_to_reference(ours, ref, torch_grad, eps=eps_for(q.dtype, gradient=True), what=name)
    triton_grads = attention_varlen_bwd(do, q, k, v, o, lse, cq, ck, causal, dlse=dlse, gluon=False, **mask)
    for name, ours, theirs in zip(("dq", "dk", "dv"), got, triton_grads):
        torch.testing.assert_close(ours.float(), theirs.float(), atol=3e-2, rtol=3e-2, msg=name)
    again = attention_varlen_bwd(do, q, k, v, o, lse, cq, ck, causal, dlse=dlse, gluon=True, **mask)
    assert all(torch.equal(a, b) for a, b in zip(got, again))
    return got


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128, 256])      # 256: the Gluon dK/dV pass beside the Triton dQ pass
@pytest.mark.parametrize("lens_q, lens_k", [pytest.param(*c, id=why) for c, why in LENGTHS.items()])
def test_varlen_backward(lens_q, lens_k, D, causal):
    _check(*_packed(lens_q, lens_k, 4, 2, D), causal)


@pytest.mark.gpu
@needs_hopper
def test_varlen_backward_sequences_without_keys_or_queries():
    # Sequence 1 has queries and no keys: their dq is 0. Sequence 2 has keys and no queries:
    # their dk and dv are 0. Never NaN.
    q, k, v, cq, ck = _packed((40, 200, 0, 7), (30, 0, 150, 9), 4, 1, 128)
    for causal in (False, True):
        dq, dk, dv = _check(q, k, v, cq, ck, causal)
        assert torch.all(dq[40:240] == 0) and torch.all(dk[30:180] == 0) and torch.all(dv[30:180] == 0)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("D", [128, 256])
@pytest.mark.parametrize("softcap", [30.0, 50.0])
def test_varlen_backward_softcap(softcap, D):
    _check(*_packed((300, 1, 130, 1000), None, 8, 2, D), True, softcap)


@pytest.mark.gpu
@needs_hopper
def test_varlen_backward_lse_gradient_float16_mqa():
    _check(*_packed((129, 640, 3, 1023), None, 6, 1, 128, torch.float16), True, with_dlse=True)
    _check(*_packed((129, 640, 3, 1023), None, 8, 2, 64), False, with_dlse=True)


@pytest.mark.gpu
@needs_hopper
def test_varlen_backward_many_short_sequences():
    lens = torch.randint(1, 300, (200,), generator=torch.Generator().manual_seed(0)).tolist()
    _check(*_packed(lens, None, 16, 4, 128), True)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("window_left", [0, 1, 100, 200, 2000])
def test_varlen_backward_causal_window(window_left, D):
    # A causal mask's left window over one cu_seqlens for queries and keys.
    q, k, v, cq, _ = _packed((300, 1, 130, 64, 129, 1000), None, 4, 2, D)
    _check(q, k, v, cq, cq, True, window_left=window_left)


def test_varlen_window_structure_for_sm90():
    # The window's bounds in the packed kernels: within the same spill bounds as without.
    dkdv, _ = _compiled("dkdv", 128, True, window_left=100)
    dq, kwargs = _compiled("dq", 128, True, window_left=100)
    assert kwargs["VARLEN"] and kwargs["SCORE"].window_left == 100
    assert dkdv.spills()["spill_stores"] <= VARLEN_DKDV_SPILL_BOUND[128] and dq.spills()["spill_stores"] == 0
