"""The norms' launch templates kept per layout (ops/norms/_plans.py): layouts that must not
share a template get their own, a layout's later calls reuse its template, and results stay
those of the float64 reference while calls alternate between layouts."""

import pytest
import torch

import tritonkit
from tritonkit.ops.norms import _plans, _rows, layer_norm_bwd, layer_norm_fwd, rms_norm_bwd, rms_norm_fwd
from tritonkit.registry._inputs import offset_view
from conftest import ON_GPU
from test_norms import _params, check

ROWS, HIDDEN = 6, 40


@pytest.fixture
def used(monkeypatch):
    """The templates the launchers take, in call order (the cache emptied first)."""
    _plans.clear()
    taken = []

    def recording(key, build, *args):
        found = _plans.template(key, build, *args)
        taken.append(found)
        return found

    monkeypatch.setattr(_rows, "template", recording)
    yield taken
    _plans.clear()


def _x(device, dtype=torch.float32, offset=0, row_stride=HIDDEN):
    """x of (ROWS, HIDDEN): `offset` elements into its buffer, rows `row_stride` apart."""
    buffer = offset_view((ROWS * row_stride,), dtype, device, offset)
    return buffer.view(ROWS, row_stride)[:, :HIDDEN]


def _fwd(norm, x, weight, residual=None, eps=1e-5, weight_offset=0.0, bias=None):
    if norm == "rms":
        return rms_norm_fwd(x, weight, residual, eps, weight_offset)
    return layer_norm_fwd(x, weight, bias, residual, eps)


def _variants(device):
    """(what differs, keyword arguments of _fwd) for layouts that must each take their own
    template; the first is the base every other differs from in one thing."""
    w = torch.randn(HIDDEN, device=device)
    return [
        ("base", dict(x=_x(device), weight=w)),
        ("dtype", dict(x=_x(device, torch.bfloat16), weight=w.bfloat16())),
        ("residual", dict(x=_x(device), weight=w, residual=_x(device))),
        ("no weight", dict(x=_x(device), weight=None)),
        ("misaligned x", dict(x=_x(device, offset=1), weight=w)),
        ("misaligned weight", dict(x=_x(device), weight=offset_view((HIDDEN,), torch.float32, device, 1))),
        ("eps", dict(x=_x(device), weight=w, eps=1e-3)),
        ("row stride", dict(x=_x(device, row_stride=HIDDEN + 8), weight=w)),
        ("row stride, same alignment", dict(x=_x(device, row_stride=HIDDEN + 16), weight=w)),
    ]


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_forward_layouts_take_their_own_templates(norm, used, device):
    variants = _variants(device)
    for _, kwargs in variants:
        _fwd(norm, **kwargs)
    assert len(used) == len(variants)
    for i, (what, _) in enumerate(variants):
        others = [w for j, (w, _) in enumerate(variants) if j != i and used[j] is used[i]]
        assert not others, f"{what} shares a template with {others}"


def test_weight_offset_takes_its_own_template(used, device):
    x, w = _x(device), torch.randn(HIDDEN, device=device)
    for offset in (0.0, 1.0, -0.0):
        rms_norm_fwd(x, w, None, 1e-5, offset)
    assert len({id(t) for t in used}) == 3


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_repeated_calls_reuse_the_template(norm, used, device):
    variants = _variants(device)
    for _ in range(3):
        for _, kwargs in variants:
            # Fresh tensors of the same layout: a key holds the layout, never the data.
            _fwd(norm, **{k: v.clone() if k == "residual" else v for k, v in kwargs.items()})
    first = used[:len(variants)]
    assert all(t is first[i % len(variants)] for i, t in enumerate(used))
    assert len(_plans._TEMPLATES) == len(variants)


def _bwd(norm, dy, dh, h, weight, stats, bias=None):
    if norm == "rms":
        return rms_norm_bwd(dy, dh, h, weight, stats[-1], 0.0)
    return layer_norm_bwd(dy, dh, h, weight, bias, *stats)


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_backward_layouts_take_their_own_templates(norm, used, device):
    w = torch.randn(HIDDEN, device=device)
    h = _x(device)
    stats = _fwd(norm, h, w)[2:]
    used.clear()
    variants = {
        "base": (_x(device), None, h, w),
        "misaligned dy": (_x(device, offset=1), None, h, w),
        "strided dy": (_x(device, row_stride=HIDDEN + 8), None, h, w),
        "dh given": (_x(device), _x(device), h, w),
        "no weight": (_x(device), None, h, None),
    }
    if norm == "layer":  # dB takes the bias's dtype
        variants["bias"] = (_x(device), None, h, w, stats, w)
        variants["bfloat16 bias"] = (_x(device), None, h, w, stats, w.bfloat16())
    variants = {what: args if len(args) > 4 else (*args, stats) for what, args in variants.items()}
    for args in variants.values():
        _bwd(norm, *args)
    assert len({id(t) for t in used}) == len(variants)
    for args in variants.values():
        _bwd(norm, *args)
    assert used[len(variants):] == used[:len(variants)]


def test_backward_program_count_takes_its_own_template(used, monkeypatch, device):
    x = torch.randn(75, 600, device=device, requires_grad=True)
    for programs in (1, 3):
        monkeypatch.setattr(_rows, "backward_programs", lambda device, n_blocks, num_warps: min(n_blocks, programs))
        _rows.bwd_plan.cache_clear()
        torch.autograd.grad(tritonkit.rms_norm(x), x, torch.randn_like(x))
    _rows.bwd_plan.cache_clear()
    grids = [t.grid for t in used if t.name == "rms_norm_bwd"]
    assert grids == [(1,), (3,)]


def test_cache_starts_afresh_past_its_size(used, monkeypatch, device):
    monkeypatch.setattr(_plans._TEMPLATES, "limit", 2)
    for eps in (1e-5, 1e-4, 1e-3, 1e-2):
        rms_norm_fwd(_x(device), None, None, eps, 0.0)
        assert len(_plans._TEMPLATES) <= 2


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_results_through_alternating_layouts(norm, used, device):
    # Each layout several times, interleaved with the others, forward and backward against
    # the float64 reference: a template launched with another layout's arguments shows here
    # (on a GPU, where templates bind after their first call, as a wrong specialisation).
    w, b = _params(HIDDEN, torch.float32, device)
    layouts = [
        dict(x=_x(device), weight=w, bias=b),
        dict(x=_x(device, row_stride=HIDDEN + 8), weight=w, bias=b, eps=1e-2),  # the tail alone differs
        dict(x=_x(device, offset=1), weight=w, bias=b, residual=_x(device, offset=3)),
        dict(x=_x(device, torch.bfloat16, row_stride=HIDDEN + 8), weight=w.bfloat16()),
        dict(x=_x(device), bias=b, eps=1e-2),
    ]
    for _ in range(3):
        for kwargs in layouts:
            check(norm, **kwargs)
    assert len(used) > len({id(t) for t in used}), "no template was reused"


@pytest.mark.gpu
def test_templates_bind_on_the_gpu(used, device):
    x, w = _x(device), torch.randn(HIDDEN, device=device)
    results = [rms_norm_fwd(x, w, None, 1e-5, 0.0)[0] for _ in range(3)]
    assert ON_GPU and used[0]._bound is not None
    assert all(torch.equal(r, results[0]) for r in results)
