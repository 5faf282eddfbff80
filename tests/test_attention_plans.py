"""Attention's launch plans (ops/attention/plans.py): a call's checks and choices are made on
its layout's first call and kept. A plan must never serve a call it was not made for: a
changed shape, stride, alignment, dtype or flag gets its own, giving what a call that builds
its plan gives; bad input raises as before, also after good calls of the same layout; the
cache stays bounded; and a call that finds its plan launches (and records) exactly what a
call that builds it does, on the Hopper paths too (recorded for sm_90 on CPU tensors)."""

import gc
import weakref

import pytest
import torch
from triton.tools.tensor_descriptor import TensorDescriptor

import tritonkit
from tritonkit import _launch
from tritonkit.ops.attention import plan_keys
from tritonkit.ops.attention import (attention_bwd, attention_fwd, attention_reference, attention_varlen_bwd,
                                     attention_varlen_fwd)
from tritonkit.ops import attention as attention_module
from tritonkit.ops.attention import plans
from tritonkit.registry.attention import packed_qkv
from test_attention import make_qkv, poison_outputs  # noqa: F401 (fixture)


@pytest.fixture(autouse=True)
def _no_plans():
    plans.clear()
    yield
    plans.clear()


def _fresh(*tensors):
    """Copies of these tensors in the same layout (strides and storage offset), new memory."""
    out = []
    for t in tensors:
        storage = torch.empty(t.untyped_storage().nbytes() // t.element_size(), dtype=t.dtype, device=t.device)
        copy = storage.as_strided(t.shape, t.stride(), t.storage_offset())
        copy.copy_(t)
        out.append(copy)
    return out


def _built_forward(q, k, v, causal=False, scale=None, window_left=-1, window_right=-1, softcap=0.0, config=None,
                   tma=None, gluon=None):
    """attention_fwd through a plan built for the call (and not kept)."""
    score_args = (causal, scale, window_left, window_right, softcap, False)
    return plans.build_forward(q, k, v, score_args, None, None, config, tma, gluon).run(q, k, v)


def _equal(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype
        assert torch.equal(a, b)


def test_a_kept_plan_gives_what_building_it_gives(device):
    q, k, v = make_qkv(1, 4, 2, 40, 40, 32, torch.float16, device)
    do = torch.randn_like(q)
    o, lse = attention_fwd(q, k, v, True)
    first = (o, lse, *attention_bwd(do, q, k, v, o, lse, True))
    assert len(plans._PLANS) == 2
    q2, k2, v2, do2 = _fresh(q, k, v, do)  # same layout, new memory
    o2, lse2 = attention_fwd(q2, k2, v2, True)
    again = (o2, lse2, *attention_bwd(do2, q2, k2, v2, o2, lse2, True))
    assert len(plans._PLANS) == 2 and all(a.data_ptr() != b.data_ptr() for a, b in zip(first, again))
    _equal(again, first)
    # outputs of one plan are never shared between calls
    assert attention_fwd(q, k, v, True)[0].data_ptr() != attention_fwd(q, k, v, True)[0].data_ptr()


def _variants(device):
    """(name, q, k, v, flags): calls that each differ from the first in one thing a plan holds."""
    q, k, v = make_qkv(1, 4, 2, 40, 40, 32, torch.float16, device)
    causal = dict(causal=True)
    return [("base", q, k, v, causal),
            ("another length", q[:, :, :33], k, v, causal),
            ("q a view of every other row", make_qkv(1, 4, 2, 80, 40, 32, torch.float16, device)[0][:, :, ::2], k, v,
             causal),
            ("(B, N, H, D) memory", q.transpose(1, 2).contiguous().transpose(1, 2), k, v, causal),
            ("q head dim not innermost (copied)", q.transpose(-1, -2).contiguous().transpose(-1, -2), k, v, causal),
            ("bf16", q.bfloat16(), k.bfloat16(), v.bfloat16(), causal),
            ("no mask", q, k, v, dict(causal=False)),
            ("scale", q, k, v, dict(causal=True, scale=0.3)),
            ("scale 1 (an int)", q, k, v, dict(causal=True, scale=1)),
            ("scale 1.0", q, k, v, dict(causal=True, scale=1.0)),
            ("window", q, k, v, dict(causal=True, window_left=7)),
            ("softcap", q, k, v, dict(causal=True, softcap=5.0)),
            ("pointers", q, k, v, dict(causal=True, tma=False))]


def test_each_layout_and_flag_gets_its_own_plan(device):
    variants = _variants(device)
    for count, (name, q, k, v, flags) in enumerate(variants, 1):
        planned = attention_fwd(q, k, v, **flags)
        assert len(plans._PLANS) == count, name  # a new plan for every variant
        _equal(planned, _built_forward(q, k, v, **flags))
    for name, q, k, v, flags in variants:  # each finds its own again
        _equal(attention_fwd(q, k, v, **flags), _built_forward(q, k, v, **flags))
    assert len(plans._PLANS) == len(variants)


def test_alignment_is_part_of_the_layout(device):
    # One buffer, one shape and strides: 16 bytes in, the views read through descriptors; 2
    # bytes in, through pointers. A plan of the first must not serve the second.
    with _launch.record_launches(execute=False) as launches:
        attention_fwd(*packed_qkv(1, 2, 40, 32, torch.bfloat16, device, offset=8), True)
        attention_fwd(*packed_qkv(1, 2, 40, 32, torch.bfloat16, device, offset=1), True)
        attention_fwd(*packed_qkv(1, 2, 40, 32, torch.bfloat16, device, offset=8), True)
    assert [launch.constexprs["USE_TMA"] for launch in launches] == [True, False, True]
    assert len(plans._PLANS) == 2
    q, k, v = packed_qkv(1, 2, 40, 32, torch.float16, device, offset=1)
    _equal(attention_fwd(q, k, v, True), _built_forward(q, k, v, True))


def test_the_setting_and_the_recording_are_part_of_the_key(monkeypatch, device):
    q, k, v = make_qkv(1, 2, 2, 40, 40, 32, torch.bfloat16, device)

    def recorded(**recording):
        with _launch.record_launches(execute=False, **recording) as launches:
            attention_fwd(q, k, v, True)
        (launch,) = launches
        return launch
    fixed = recorded()
    monkeypatch.setenv("TRITONKIT_AUTOTUNE", "1")
    tuned = recorded()
    assert fixed.kernel is attention_module._attn_fwd_kernel and tuned.kernel is attention_module._attn_fwd_tuned
    monkeypatch.setenv("TRITONKIT_AUTOTUNE", "0")
    assert recorded(capability=90).kernel is fixed.kernel  # D=32: the Triton forward on Hopper too
    with _launch.record_launches(execute=True) as launches:  # runs: the interpreter's tiles
        attention_fwd(q, k, v, True)
    if tritonkit.INTERPRETED:  # compiled, the launches run are the GPU tiles recorded above
        assert launches[0].constexprs["BLOCK_M"] != fixed.constexprs["BLOCK_M"]
    assert len(plans._PLANS) == 4


def test_bad_input_raises_after_good_calls_of_its_layout(device):
    q, k, v = make_qkv(1, 2, 2, 24, 24, 16, torch.float16, device)
    o, lse = attention_fwd(q, k, v, True)
    attention_bwd(torch.randn_like(q), q, k, v, o, lse, True)
    attention_fwd(q, k, v, True, 1)           # plans for the ints that True equals
    attention_fwd(q, k, v, True, None, 1)
    kept = len(plans._PLANS)
    bad = {  # (call, error type, message)
        "k's dtype": (lambda: attention_fwd(q, k.bfloat16(), v, True), TypeError, "k has dtype"),
        "q not a tensor": (lambda: attention_fwd(q.tolist(), k, v, True), TypeError, "q must be a torch.Tensor"),
        "scale True (== 1)": (lambda: attention_fwd(q, k, v, True, True), TypeError, "scale must be a float"),
        "scale a list": (lambda: attention_fwd(q, k, v, True, [0.5]), TypeError, "scale must be a float"),
        "scale NaN": (lambda: attention_fwd(q, k, v, True, float("nan")), ValueError, "scale must be finite"),
        "window True (== 1)": (lambda: attention_fwd(q, k, v, True, None, True), TypeError, "window_left"),
        "window below -1": (lambda: attention_fwd(q, k, v, True, None, -2), ValueError, "window_left"),
        "softcap negative": (lambda: attention_fwd(q, k, v, True, None, -1, -1, -1.0), ValueError, "softcap"),
        "tma=True on an unaligned view": (
            lambda: attention_fwd(*packed_qkv(1, 2, 24, 16, torch.float16, device, offset=1), True, tma=True),
            ValueError, "tensor descriptors"),
        "do's shape": (lambda: attention_bwd(torch.randn_like(q)[:, :1], q, k, v, o, lse, True), ValueError,
                       "do has shape"),
        "lse's dtype": (lambda: attention_bwd(torch.randn_like(q), q, k, v, o, lse.double(), True), TypeError,
                        "lse has dtype"),
    }
    for name, (call, error, message) in bad.items():
        for _ in range(2):  # a refused call keeps nothing, so it is refused again
            with pytest.raises(error, match=message):
                call()
    assert len(plans._PLANS) == kept


def test_cu_seqlens_values_are_checked_on_every_call(device):
    if device.type != "cpu":
        pytest.skip("cu_seqlens' values are read where that costs nothing: CPU tensors")
    q, k, v = (torch.randn(30, 2, 16, dtype=torch.float16) for _ in range(3))
    cu = torch.tensor([0, 10, 30], dtype=torch.int32)
    o, lse = attention_varlen_fwd(q, k, v, cu, cu, True)
    attention_varlen_bwd(torch.randn_like(o), q, k, v, o, lse, cu, cu, True)
    for bad, message in ((torch.tensor([0, 20, 10], dtype=torch.int32), "must not decrease"),
                         (torch.tensor([0, 10, 29], dtype=torch.int32), "ends at 29"),
                         (torch.tensor([1, 10, 30], dtype=torch.int32), "must start at 0")):
        with pytest.raises(ValueError, match=message):
            attention_varlen_fwd(q, k, v, bad, cu, True)
        with pytest.raises(ValueError, match=message):
            attention_varlen_bwd(torch.randn_like(o), q, k, v, o, lse, cu, bad, True)
    other = torch.tensor([0, 25, 30], dtype=torch.int32)  # new values, the same layout: the same plans
    kept = len(plans._PLANS)
    planned = attention_varlen_fwd(q, k, v, other, other, True)
    up = torch.randn_like(o)
    grads = attention_varlen_bwd(up, q, k, v, *planned, other, other, True)
    assert len(plans._PLANS) == kept
    score = ((True, None, -1, -1, 0.0, False), None, None)   # score_args, alibi_slopes, sinks
    _equal(planned, plans.build_varlen_forward(q, k, v, other, other, *score, None, None, None).run(q, k, v, other,
                                                                                                 other))
    _equal(grads, plans.build_varlen_backward(up, q, k, v, *planned, other, other, *score, None, None, None, None,
                                              None, None).run(up, q, k, v, *planned, None, other, other)[:3])


def test_plans_are_bounded_and_hold_no_tensor(monkeypatch, device):
    monkeypatch.setattr(plan_keys, "MAX_PLANS", 4)
    q, k, v = make_qkv(1, 1, 1, 40, 40, 16, torch.float16, device)
    for n in range(1, 12):
        attention_fwd(q[:, :, :n], k, v, True)
        assert len(plans._PLANS) <= 4
    # nothing of a call outlives it through the plans
    refs = [weakref.ref(t) for t in (q, k, v)]
    o, lse = attention_fwd(q, k, v, True)
    attention_bwd(torch.randn_like(o), q, k, v, o, lse, True)
    refs += [weakref.ref(o), weakref.ref(lse)]
    del q, k, v, o, lse
    gc.collect()
    assert all(ref() is None for ref in refs)


def test_eager_roads_build_each_plan_once(monkeypatch, device):
    q, k, v = make_qkv(1, 4, 2, 40, 40, 32, torch.float16, device, requires_grad=True)
    up = torch.randn_like(q)
    first = [tritonkit.attention(q, k, v, causal=True)]
    first += torch.autograd.grad(first[0], (q, k, v), up)
    for name in ("build_forward", "build_backward"):
        monkeypatch.setattr(plans, name, lambda *args, name=name: pytest.fail(f"{name} ran again"))
    again = [tritonkit.attention(q, k, v, causal=True)]
    again += torch.autograd.grad(again[0], (q, k, v), up)
    _equal(again, first)
    with torch.no_grad():
        _equal([tritonkit.attention(q, k, v, causal=True)], first[:1])


# ---------------------------------------------------------------------------------------
# What a call records: a kept plan against a plan built for the call (sm_90 and others)
# ---------------------------------------------------------------------------------------

def _describe(recording, names: dict) -> list:
    """The recording as comparable data: each launch's kernel, grid, constexprs, options and
    arguments, tensors and descriptor bases named by the call's tensor their data is
    (`names`: data_ptr -> name; "internal" for the launcher's own, e.g. delta); and the
    choices with the launch count before each."""
    def arg(a):
        if isinstance(a, torch.Tensor):
            return ("tensor", names.get(a.data_ptr(), "internal"), a.dtype)
        if isinstance(a, TensorDescriptor) or type(a).__name__ == "TensorDescriptor":
            return ("descriptor", names.get(a.base.data_ptr(), "internal"), a.base.dtype, list(a.shape),
                    list(a.strides), list(a.block_shape), a.padding, str(getattr(a, "layout", None)))
        return a
    launches = [(launch.name, launch.kernel, launch.grid, [arg(a) for a in launch.args], launch.constexprs,
                 launch.num_warps, launch.num_stages) for launch in recording]
    return [launches, list(recording.choices)]


def _recorded_call(launcher, tensors: dict, flags: tuple, capability):
    """Record (not run) one call; its description, its outputs' names included."""
    with _launch.record_launches(execute=False, capability=capability) as recording:
        outs = launcher(*tensors.values(), *flags)
    names = {t.data_ptr(): name for name, t in tensors.items()}
    names.update({t.data_ptr(): f"out{i}" for i, t in enumerate(outs)})
    return _describe(recording, names), outs


def test_head_dim_256_backward_takes_the_gluon_dkdv_pass(device):
    # At D=256 the dispatch (and gluon=True) runs the preprocess, the Gluon dK/dV kernel (the
    # head dim split between its warpgroups) and the Triton dQ pass; gluon=False the Triton three.
    q, k, v = packed_qkv(1, 2, 96, 256, torch.bfloat16, device)
    o, lse = attention_fwd(q, k, v, True, gluon=False)
    do = torch.randn_like(o)
    names = {}
    for gluon in (True, None, False):
        with _launch.record_launches(execute=False, capability=90) as recording:
            attention_bwd(do, q, k, v, o, lse, True, gluon=gluon)
        names[gluon] = [launch.name for launch in recording]
        assert [c.path for _, c in recording.choices] == ["triton" if gluon is False else "gluon"]
    assert names[True] == names[None] == ["attention_bwd_preprocess", "attention_bwd_dkdv_gluon", "attention_bwd_dq"]
    assert names[False] == ["attention_bwd_preprocess", "attention_bwd_dkdv", "attention_bwd_dq"]


HOPPER_CASES = {  # name -> (B, H, Hkv, N, D, (causal, scale, window_left), what the forward and backward take)
    "D=128 causal: Gluon forward and backward": (1, 4, 2, 200, 128, (True,), ("gluon", "gluon")),
    "D=128 full: Gluon forward and backward": (1, 4, 2, 200, 128, (False,), ("gluon", "gluon")),
    "D=128 causal window: Gluon forward and backward": (1, 4, 2, 200, 128, (True, None, 50), ("gluon", "gluon")),
    "D=64 causal (train_lm's layer): Triton, descriptors": (2, 4, 2, 96, 64, (True,), ("triton", "triton")),
    "D=256 causal: Gluon forward, Gluon dK/dV with the Triton dQ": (1, 2, 1, 96, 256, (True,), ("gluon", "gluon")),
}


@pytest.mark.parametrize("capability", [90, None])
@pytest.mark.parametrize("case", list(HOPPER_CASES))
def test_kept_plans_record_what_built_plans_record(case, capability, device):
    B, H, Hkv, N, D, mask, paths = HOPPER_CASES[case]
    # packed qkv as a model's projection lays it out (q, k, v views, 16-byte aligned)
    q, k, v = packed_qkv(B, H, N, D, torch.bfloat16, device)
    k, v = k[:, :Hkv], v[:, :Hkv]
    kept = []
    for build in (True, False, False):  # a call that builds the plans, then two that find them
        if build:
            plans.clear()
        q, k, v = _fresh(q, k, v)
        fwd, (o, lse) = _recorded_call(attention_fwd, dict(q=q, k=k, v=v), mask, capability)
        do = torch.randn_like(o)
        bwd, _ = _recorded_call(attention_bwd, dict(do=do, q=q, k=k, v=v, o=o, lse=lse), mask, capability)
        kept.append((fwd, bwd))
    assert kept[1] == kept[0] and kept[2] == kept[0]
    (fwd, bwd) = kept[0]
    # Without a stated target, a recording on CUDA tensors targets the GPU they are on.
    target = capability if capability is not None else _launch.target_capability(q.device)
    want = paths if target == 90 else ("triton", "triton")
    assert [c.path for _, c in fwd[1]] == [want[0]] and [c.path for _, c in bwd[1]] == [want[1]]
    # The Triton backward's choice follows its preprocess launch; the Gluon one has none (its
    # dQ pass, launched first, forms delta), except at D=256, where the Gluon dK/dV pass runs
    # between the Triton preprocess and dQ pass.
    gluon_dq = want[1] == "gluon" and D != 256
    assert bwd[1][0][0] == (0 if gluon_dq else 1)
    names = [launch[0] for launch in fwd[0] + bwd[0]]
    if want[0] == "gluon":
        assert names[0] == "attention_fwd_gluon"
    if gluon_dq:
        assert names[1:] == ["attention_bwd_dq_gluon", "attention_bwd_dkdv_gluon"]
    elif want[1] == "gluon":
        assert names[1:] == ["attention_bwd_preprocess", "attention_bwd_dkdv_gluon", "attention_bwd_dq"]
    else:
        assert names[-3:] == ["attention_bwd_preprocess", "attention_bwd_dkdv", "attention_bwd_dq"]
        _, _, _, args, constexprs, _, _ = bwd[0][1]  # dK/dV: Q and dO through descriptors
        assert constexprs["USE_TMA"] and [a[:2] for a in args[:4]] == [
            ("descriptor", "q"), ("tensor", "k"), ("tensor", "v"), ("descriptor", "do")]


@pytest.mark.gpu
@pytest.mark.parametrize("tma", [None, False])
def test_bound_templates_launch_the_same_bits(tma, monkeypatch, device):
    # Compiled kernels only: after a layout's first calls, every launch of the Triton kernels
    # goes through its plan's bound template (no Launch key is made) and gives the bits the
    # Launch path gave, forward and backward, with dQ on the current stream and beside dK/dV.
    # (The Gluon kernels, which Hopper would take for this backward, launch through the keyed
    # cache each call.)
    monkeypatch.setenv("TRITONKIT_AUTOTUNE", "0")
    q, k, v = packed_qkv(8, 4, 256, 64, torch.bfloat16, device)
    k, v = k[:, :2], v[:, :2]  # train_lm's layer: 4 query heads over 2 kv heads
    do = torch.randn_like(q)

    def step():
        o, lse = attention_fwd(q, k, v, True, tma=tma, gluon=False)
        return (o, lse, *attention_bwd(do, q, k, v, o, lse, True, tma=tma, gluon=False),
                *attention_bwd(do, q, k, v, o, lse, True, tma=tma, concurrent_dq=True, gluon=False))
    first = step()
    torch.testing.assert_close(first[0], attention_reference(q, k, v, True).to(q.dtype), atol=2e-2, rtol=2e-2)
    _equal(first[5:], first[2:5])  # beside dK/dV or after it: the same gradients
    step()  # binds what the first call compiled

    def no_key(*args, **kwargs):
        raise AssertionError("a launch of a kept plan went through a Launch")
    monkeypatch.setattr(_launch, "_specialization_key", no_key)
    for _ in range(2):
        _equal(step(), first)


def test_eager_backward_keys_the_upstream_layout(device):
    # The eager road's backward finds its plan by the forward's plan and do's layout: one
    # graph, upstream gradients of three layouts, each gives what the launcher gives.
    q, k, v = make_qkv(1, 4, 2, 40, 40, 32, torch.float16, device, requires_grad=True)
    o = tritonkit.attention(q, k, v, causal=True)
    up = torch.randn_like(o)
    for do in (up, up.transpose(1, 2).contiguous().transpose(1, 2), up[:, :1].expand_as(up)):
        got = torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
        saved = [t.detach() for t in (q, k, v, o)]
        lse = attention_fwd(*saved[:3], True)[1]
        score = ((True, None, -1, -1, 0.0, False), None, None)   # score_args, alibi_slopes, sinks
        _equal(got, plans.build_backward(do, *saved, lse, *score, None, None, None, None, None,
                                         None).run(do, *saved, lse, None)[:3])
