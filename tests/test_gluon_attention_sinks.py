"""Learnable sinks (gpt-oss) on the Gluon (Hopper) attention kernels: the forward folds each
head's sink into its rows' sums after the walk (`gluon.score.Scores.with_sink`); the backward
passes read it in lse, so they are the kernels compiled without sinks, and d(sinks) comes from
the delta the dQ pass forms (`ops.attention.sinks`), rows of packed sequences without keys
included.

On any machine: the dispatch sends calls with sinks to the Gluon kernels on an sm_90 target, the
forward compiles for sm_90 within the same registers, and the backward launches the same kernels
as without sinks. On a Hopper GPU (gpu-marked): o, lse and every gradient, d(sinks) included,
through `tritonkit.attention` against the float64 reference (torch's error in the same dtype the
yardstick), with the Gluon path asserted; sinks that outweigh every key, a softcap's fixed
reference, windows, GQA, packed sequences with empty ones, and bitwise run to run.
"""

import pytest
import torch

import tritonkit
from tritonkit._launch import record_launches
from tritonkit.inspector.gluon import compile_sm90
from tritonkit.ops.attention import attention_bwd, attention_fwd, attention_varlen_reference
from tritonkit.ops.attention.gluon import attention_fwd as gluon_fwd
from tritonkit.ops.attention.score import Score

from _tolerance import assert_close_to_reference, eps_for
from test_attention_score import check_dense
from test_attention_varlen import cu, grads
from test_gluon_attention import _check_structure, needs_hopper


def _recorded(D, causal=True, window_left=-1, softcap=0.0, sinks=True, N=1024):
    """The launches of a forward and a backward with (or without) sinks, recorded on CPU tensors
    for an sm_90 target (on the GPU's tensors where one is present, whose launchers refuse CPU
    tensors), and the path choices made."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    q = torch.empty(1, 8, N, D, dtype=torch.bfloat16, device=device)
    k = torch.empty(1, 2, N, D, dtype=torch.bfloat16, device=device)
    s = torch.empty(8, dtype=torch.float32, device=device) if sinks else None
    o, lse = torch.empty_like(q), torch.empty(1, 8, N, device=device)
    with record_launches(execute=False, capability=90) as launches:
        attention_fwd(q, k, k, causal, None, window_left, softcap=softcap, sinks=s)
        attention_bwd(o, q, k, k, o, lse, causal, None, window_left, softcap=softcap, sinks=s)
    return launches


@pytest.mark.parametrize("D, window_left, softcap", [(128, -1, 0.0), (256, -1, 0.0), (128, 200, 0.0),
                                                      (128, -1, 50.0)])
def test_dispatch_takes_sinks_to_gluon(D, window_left, softcap):
    launches = _recorded(D, window_left=window_left, softcap=softcap)
    assert [c.path for _, c in launches.choices] == ["gluon", "gluon"], [c.reason for _, c in launches.choices]
    names = [launch.name for launch in launches]
    assert names[0] == "attention_fwd_gluon" and "attention_bwd_dkdv_gluon" in names
    # The forward is compiled for the sinks; the backward's passes are the kernels without them.
    without = _recorded(D, window_left=window_left, softcap=softcap, sinks=False)
    assert launches[0].constexprs["SCORE"].sinks and not without[0].constexprs["SCORE"].sinks
    passes = [launch for launch in launches[1:] if launch.name != "attention_sinks_grad"]
    assert len(passes) == len(launches) - 2          # d(sinks): one launch of its own
    for ours, theirs in zip(passes, without[1:], strict=True):
        assert ours.name == theirs.name
        if ours.name.endswith("_gluon"):     # (at D=256 the dQ pass is Triton's)
            assert ours.constexprs == theirs.constexprs


@pytest.mark.parametrize("D", [64, 128, 256])
def test_forward_with_sinks_compiles_for_sm90(D):
    # The sink's fold runs once a tile, after the walk: no spills, same structure as without.
    q = torch.empty(2, 4, 333, D, dtype=torch.bfloat16)
    k = torch.empty(2, 2, 517, D, dtype=torch.bfloat16)
    o, lse = torch.empty_like(q), torch.empty(2, 4, 333)
    grid, args, kwargs = gluon_fwd.launch_args(q, k, k, o, lse, D ** -0.5, Score(causal=False, sinks=True),
                                               sinks=torch.empty(4))
    kernel = compile_sm90(gluon_fwd._attn_fwd_kernel, args, kwargs)
    kernel.consumers = kwargs["CONSUMERS"]
    _check_structure(kernel, D)


# ---------------------------------------------------------------------------------------
# On a Hopper GPU
# ---------------------------------------------------------------------------------------

def _gluon_checked(fn):
    """fn() with every path choice recorded: each must be the Gluon kernels'."""
    with record_launches() as launches:
        out = fn()
    assert launches.choices and all(c.path == "gluon" for _, c in launches.choices), \
        [c.reason for _, c in launches.choices]
    return out


def _sinks(H, scale=1.0):
    return (torch.randn(H, device="cuda") * scale).to(torch.bfloat16)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("D", [128, 256])
@pytest.mark.parametrize("B, H, Hkv, N, causal, window, sink_scale", [
    (2, 4, 2, 333, True, None, 1.0),        # ragged, GQA
    (1, 8, 1, 1100, True, None, 1.0),       # MQA
    (2, 4, 4, 777, False, None, 1.0),       # full attention
    (1, 4, 2, 1100, True, (200, 0), 1.0),   # gpt-oss's sliding layers
    (1, 4, 2, 515, True, None, 30.0),       # sinks far above and below every score
])
def test_sinks_on_gluon_match_reference(B, H, Hkv, N, causal, window, sink_scale, D):
    q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16)
    _gluon_checked(lambda: check_dense(q, k, v, _sinks(H, sink_scale), causal=causal, window=window))


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("H, Hkv, causal", [(4, 4, False), (8, 2, True)])
def test_sinks_on_gluon_d64_three_consumers(H, Hkv, causal):
    # At D=64 the Gluon forward runs only its three-warpgroup tile (full attention, causal from
    # 8192 rows) and the Gluon backward from 2^34 multiply-adds: sizes where both do.
    q = torch.randn(1, H, 8192, 64, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, Hkv, 8192, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    _gluon_checked(lambda: check_dense(q, k, v, _sinks(H), causal=causal))


@pytest.mark.gpu
@needs_hopper
def test_sinks_with_softcap_fixed_reference():
    # Gemma-2-style cap in bfloat16: the walk measures p from a fixed reference, which a sink's
    # unbounded logit must not break (the sink is folded after the walk).
    q, k, v = (torch.randn(1, 4, 700, 128, device="cuda", dtype=torch.bfloat16) * 3 for _ in range(3))
    assert gluon_fwd.fixed_reference(50.0, q.dtype) > 0
    sinks = torch.tensor([60.0, -60.0, 0.0, 45.0], device="cuda", dtype=torch.bfloat16)
    _gluon_checked(lambda: check_dense(q, k, v, sinks, causal=True, softcap=50.0))


@pytest.mark.gpu
@needs_hopper
def test_sinks_on_gluon_deterministic():
    q, k, v = (torch.randn(2, 8, 1500, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    sinks = _sinks(8).requires_grad_()
    runs = []
    for _ in range(2):
        out = tritonkit.attention(q, k, v, causal=True, sinks=sinks)
        runs.append((out, *torch.autograd.grad(out.square().sum(), (q, k, v, sinks))))
    assert all(torch.equal(a, b) for a, b in zip(*runs))


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("lengths_q, lengths_k", [
    ((600, 1, 900, 329), None),
    ((400, 0, 900, 700), (500, 300, 0, 650)),     # an empty sequence and one without keys
])
def test_varlen_sinks_on_gluon(lengths_q, lengths_k):
    H, Hkv, D = 4, 2, 128
    lengths_k = lengths_k or lengths_q
    q = torch.randn(sum(lengths_q), H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(sum(lengths_k), Hkv, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    cq, ck = cu(lengths_q, "cuda"), cu(lengths_k, "cuda")
    sinks = _sinks(H)

    def ours(*t):
        return tritonkit.attention_varlen(*t[:3], cq, ck, max(lengths_q), max(lengths_k), causal=False,
                                          sinks=t[3], return_lse=True)

    def reference(*t, upcast=False):
        return attention_varlen_reference(*t[:3], cq, ck, causal=False, sinks=t[3], upcast=upcast,
                                          return_lse=True)

    out, lse = _gluon_checked(lambda: ours(q, k, v, sinks))
    ref, ref_lse = reference(q, k, v, sinks, upcast=True)
    assert_close_to_reference(out, ref, reference(q, k, v, sinks)[0])
    assert_close_to_reference(lse, ref_lse, reference(q, k, v, sinks)[1].float(), what="lse")
    # lse's upstream gradient reaches the sinks through rows without keys (lse = the sink there).
    upstream = (torch.randn_like(out), torch.randn_like(lse))
    leaves = (q, k, v, sinks)
    got = _gluon_checked(lambda: grads(ours, leaves, upstream))
    wide = grads(reference, [t.double() for t in leaves], [u.double() for u in upstream])
    theirs = grads(reference, leaves, (upstream[0], upstream[1].to(q.dtype)))
    for name, a, w, t in zip(("dq", "dk", "dv", "dsinks"), got, wide, theirs):
        assert_close_to_reference(a, w, t, eps=eps_for(q.dtype, gradient=True), what=name)
