"""The launch templates that rope, the gated activations, add and softmax keep per layout
(tritonkit._templates): inputs that Triton would compile differently (dtype, a pointer off a
16-byte boundary, another layout) never share a template, and a layout's later calls reuse
its own. (The norms' are tested in test_norm_plans.py.) On the GPU a template binds after
its first call and later calls launch its compiled kernel straight; under the interpreter
it never binds, so the results tests there check the plain path and these tests the keys."""

import pytest
import torch

import tritonkit
from tritonkit import _templates
from tritonkit.ops import gated, rope
from tritonkit.registry._inputs import offset_view


@pytest.fixture
def used(monkeypatch):
    """The templates the launchers take, in call order."""
    taken = []
    get = _templates.Templates.get

    def recording(self, key, build, *args):
        found = get(self, key, build, *args)
        taken.append(found)
        return found

    monkeypatch.setattr(_templates.Templates, "get", recording)
    return taken


def _distinct(used, variants):
    for i, what in enumerate(variants):
        others = [w for j, w in enumerate(variants) if j != i and used[j] is used[i]]
        assert not others, f"{what} shares a template with {others}"


def _gated_variants(device):
    def t(dtype=torch.float32, offset=0, shape=(6, 40)):
        return offset_view(shape, dtype, device, offset)
    return {
        "base": (t(), t()),
        "bfloat16": (t(torch.bfloat16), t(torch.bfloat16)),
        "misaligned gate": (t(offset=1), t()),
        "misaligned up": (t(), t(offset=1)),
        "packed": (t(shape=(6, 80)), None),
        "packed, misaligned": (t(shape=(6, 80), offset=1), None),
        "other shape": (t(shape=(7, 40)), t(shape=(7, 40))),
    }


@pytest.mark.parametrize("fn", [tritonkit.swiglu, tritonkit.geglu])
def test_gated_layouts_take_their_own_templates(fn, used, device):
    variants = _gated_variants(device)
    for gate, up in variants.values():
        fn(gate, up)
    assert len(used) == len(variants)
    _distinct(used, list(variants))
    for gate, up in _gated_variants(device).values():  # fresh tensors of the same layouts reuse them
        fn(gate, up)
    assert used[len(variants):] == used[:len(variants)]


def test_gated_backward_takes_its_own_template(used, device):
    gate, up = (torch.randn(6, 40, device=device, requires_grad=True) for _ in range(2))
    torch.autograd.grad(tritonkit.swiglu(gate, up), (gate, up), torch.randn(6, 40, device=device))
    assert [t.name for t in used] == ["gated_fwd", "gated_bwd"]
    misaligned = offset_view((6, 40), torch.float32, device, 1)
    torch.autograd.grad(tritonkit.swiglu(gate, up), (gate, up), misaligned)
    assert used[2] is used[0] and used[3] is not used[1]


def _rope_variants(device):
    def t(shape, dtype=torch.float32, offset=0):
        return offset_view(shape, dtype, device, offset)
    q, k, cs = (2, 4, 8, 32), (2, 2, 8, 32), (2, 8, 32)
    return {
        "base": (t(q), t(k), t(cs), t(cs)),
        "bfloat16": (t(q, torch.bfloat16), t(k, torch.bfloat16), t(cs), t(cs)),
        "bfloat16 cos and sin": (t(q), t(k), t(cs, torch.bfloat16), t(cs, torch.bfloat16)),
        "misaligned q": (t(q, offset=1), t(k), t(cs), t(cs)),
        "misaligned k": (t(q), t(k, offset=1), t(cs), t(cs)),
        "misaligned sin": (t(q), t(k), t(cs), t(cs, offset=1)),
        "other shape": (t((2, 4, 9, 32)), t((2, 2, 9, 32)), t((2, 9, 32)), t((2, 9, 32))),
    }


def test_rope_layouts_take_their_own_templates(used, device):
    variants = _rope_variants(device)
    for args in variants.values():
        tritonkit.rope(*args)
    assert len(used) == len(variants)
    _distinct(used, list(variants))
    for args in _rope_variants(device).values():
        tritonkit.rope(*args)
    assert used[len(variants):] == used[:len(variants)]


def test_plans_forget_their_templates(used, device):
    # The templates live in the plans' caches: clearing a plan cache (the sweeps do, to try
    # other tiles) leaves no template of the old tiles behind.
    gate, up = torch.randn(6, 40, device=device), torch.randn(6, 40, device=device)
    tritonkit.swiglu(gate, up)
    gated._plan.cache_clear()
    tritonkit.swiglu(gate, up)
    q, k, cs = (torch.randn(shape, device=device) for shape in ((2, 4, 8, 32), (2, 2, 8, 32), (8, 32)))
    tritonkit.rope(q, k, cs, cs)
    rope._plan.cache_clear()
    rope._checked_plan.cache_clear()
    tritonkit.rope(q, k, cs, cs)
    assert used[0] is not used[1] and used[2] is not used[3]


def _add_variants(device):
    def t(shape=(6, 40), dtype=torch.float32, offset=0):
        return offset_view(shape, dtype, device, offset)
    return {
        "base": lambda: tritonkit.add(t(), t()),
        "bfloat16": lambda: tritonkit.add(t(dtype=torch.bfloat16), t(dtype=torch.bfloat16)),
        "promoted": lambda: tritonkit.add(t(dtype=torch.bfloat16), t()),
        "misaligned x": lambda: tritonkit.add(t(offset=1), t()),
        "misaligned y": lambda: tritonkit.add(t(), t(offset=1)),
        "misaligned out": lambda: tritonkit.add(t(), t(), out=t(offset=2)),
        "broadcast": lambda: tritonkit.add(t(), t((40,))),
        "transposed": lambda: tritonkit.add(t().t(), t().t()),
    }


def _softmax_variants(device):
    def t(shape=(6, 40), dtype=torch.float32, offset=0):
        return offset_view(shape, dtype, device, offset)
    return {
        "base": lambda: tritonkit.softmax(t(), -1),
        "bfloat16": lambda: tritonkit.softmax(t(dtype=torch.bfloat16), -1),
        "misaligned": lambda: tritonkit.softmax(t(offset=1), -1),
        "dim 0": lambda: tritonkit.softmax(t(), 0),
        "other shape": lambda: tritonkit.softmax(t((7, 40)), -1),
    }


@pytest.mark.parametrize("variants", [_add_variants, _softmax_variants])
def test_add_and_softmax_layouts_take_their_own_templates(variants, used, device):
    calls = variants(device)
    for call in calls.values():
        call()
    assert len(used) == len(calls)
    _distinct(used, list(calls))
    for call in variants(device).values():
        call()
    assert used[len(calls):] == used[:len(calls)]


def test_softmax_backward_takes_its_own_template(used, device):
    x = torch.randn(6, 40, device=device, requires_grad=True)
    torch.autograd.grad(tritonkit.softmax(x, -1), x, torch.randn(6, 40, device=device))
    assert [t.name for t in used] == ["softmax_fwd", "softmax_bwd"]
