"""The order attention's passes hand out a dense causal pass's tiles
(`tritonkit.ops.attention.order.longest_first_span`; the Gluon kernels' LONGEST_FIRST and
HEAD_SPAN, the Triton kernels' HEAD_SPAN): head after head, or every head's longest tiles first
within spans of a few heads.

On any machine: the rule's choice at the shapes it was measured on (BENCHMARKS.md), what each
pass's launch carries, that the Gluon kernels compile both ways for sm_90, and that the Triton
kernels give bitwise the same results in every order (through the interpreter, or compiled on
a GPU). On a Hopper GPU (gpu-marked): the same for the Gluon kernels. The order moves tiles
between SMs and nothing else.
"""

import pytest
import torch

from tritonkit.ops.attention.gluon import attention_bwd as gluon_bwd
from tritonkit.ops.attention.gluon import attention_fwd as gluon_fwd
from tritonkit.inspector.gluon import compile_sm90
from tritonkit.ops.attention import attention_bwd, attention_fwd, order, plans
from tritonkit.ops.attention.score import Score

from test_gluon_attention import needs_hopper
from test_gluon_attention_bwd import DKDV_SPILL_BOUND

SMS = 132   # an H100 / H200

# (pass, batch x heads of the pass, its tiles a head) -> the span chosen (0: head after head),
# with the measured TFLOP/s of the whole backward or the pass, bf16, D=128 unless noted, in
# spans of 8 heads against head after head:
MEASURED = [
    ("config A's layer, B4 H16/8 N2048", 64, 16, 8),          # backward 566.9 against 503.3
    ("config A's dK/dV", 32, 16, 8),
    ("config B's layer, B1 H16/8 N8192", 16, 64, 8),          # backward 664.9 against 589.4
    ("config B's dK/dV", 8, 64, 8),
    ("B4 H32 N4096", 128, 32, 8),                             # backward 613.7 against 603.8
    ("B8 H16 N1024", 128, 8, 8),                              # forward 340.1 against 332.7
    ("D=256 forward, B4 H16 N4096", 64, 32, 8),               # 614.4 against 587.0
    # Many tiles an SM: little tail left, and a span's K and V outgrow L2.
    ("B4 H32 N16384", 128, 128, 0),                           # backward 664.0 against 691.1
    ("D=64 three consumers, B2 H32 N16384", 64, 86, 0),       # forward 460.3 against 470.3
]


@pytest.mark.parametrize("name, heads, blocks, span", MEASURED, ids=[m[0] for m in MEASURED])
def test_rule_at_measured_shapes(name, heads, blocks, span):
    assert order.longest_first_span(True, False, False, heads, blocks, SMS) == span


def test_rule_only_for_dense_causal_without_window():
    assert order.longest_first_span(True, False, False, 8, 16, SMS) == 8
    assert order.longest_first_span(False, False, False, 8, 16, SMS) == 0    # tiles of one length
    assert order.longest_first_span(True, True, False, 8, 16, SMS) == 0      # a window: the same
    assert order.longest_first_span(True, False, True, 8, 16, SMS) == 0      # packed: their own order


def test_span_divides_the_heads():
    for heads in range(1, 70):
        span = order.longest_first_span(True, False, False, heads, 4, SMS)
        assert 1 <= span <= order.LONGEST_FIRST_SPAN_HEADS and heads % span == 0
    assert order.longest_first_span(True, False, False, 12, 4, SMS) == 6


def _inputs(B, H, Hkv, N, D):
    q = torch.empty(B, H, N, D, dtype=torch.bfloat16)
    k = torch.empty(B, Hkv, N, D, dtype=torch.bfloat16)
    return q, k, torch.empty(B, H, N)


def _named(kernel, args) -> dict:
    return dict(zip(kernel.arg_names, args))


@pytest.mark.parametrize("B, H, Hkv, N, span, kv_span",
                         [(1, 16, 8, 8192, 8, 8), (4, 6, 3, 1000, 8, 6), (4, 32, 32, 16384, 0, 0)])
def test_each_pass_carries_its_order(B, H, Hkv, N, span, kv_span):
    q, k, lse = _inputs(B, H, Hkv, N, 128)
    for causal in (True, False):
        score = Score(causal=causal)
        fwd = gluon_fwd.launch_args(q, k, k, q, lse, 0.1, score)
        dq = gluon_bwd.dq_launch_args(q, q, k, k, q, q, lse, lse, None, 0.1, score)
        dkdv = gluon_bwd.dkdv_launch_args(q, q, k, k, k, k, lse, lse, 0.1, score)
        for kernel, (_, args, kwargs), chosen in ((gluon_fwd._attn_fwd_kernel, fwd, span),
                                                  (gluon_bwd._dq_kernel, dq, span),
                                                  (gluon_bwd._dkdv_kernel, dkdv, kv_span)):
            chosen = chosen if causal else 0
            assert kwargs["LONGEST_FIRST"] is (chosen > 0)
            assert _named(kernel, args)["tiling"][-1] == max(chosen, 1)          # HEAD_SPAN


@pytest.mark.parametrize("longest", [False, True])
def test_compiles_both_ways_for_sm90(longest, monkeypatch):
    # The order is a constexpr: each value is its own kernel, within the passes' spill bounds.
    monkeypatch.setattr(order, "LONGEST_FIRST_MAX_TILES_PER_SM", SMS if longest else -1)
    q, k, lse = _inputs(1, 4, 2, 700, 128)
    causal = Score(causal=True)
    launches = [(gluon_fwd._attn_fwd_kernel, gluon_fwd.launch_args(q, k, k, q, lse, 0.1, causal), 0),
                (gluon_bwd._dq_kernel, gluon_bwd.dq_launch_args(q, q, k, k, q, q, lse, lse, None, 0.1, causal), 0),
                (gluon_bwd._dkdv_kernel, gluon_bwd.dkdv_launch_args(q, q, k, k, k, k, lse, lse, 0.1, causal),
                 DKDV_SPILL_BOUND[128])]
    for kernel, (_, args, kwargs), spill_bound in launches:
        assert kwargs["LONGEST_FIRST"] is longest
        usage = compile_sm90(kernel, args, kwargs).spills()
        assert usage["spill_stores"] <= spill_bound and usage["spill_loads"] <= spill_bound


@pytest.mark.gpu
@needs_hopper
# several spans of 8 heads (dK/dV: 2 of 8 kv heads), spans of 6 heads, and the D=256 dK/dV pass
@pytest.mark.parametrize("B, H, Hkv, N, D", [(4, 8, 4, 1000, 128), (1, 12, 12, 777, 64), (2, 4, 4, 300, 256)])
def test_orders_agree_bitwise(B, H, Hkv, N, D, monkeypatch):
    torch.manual_seed(0)
    q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    results = []
    for longest in (False, True):
        monkeypatch.setattr(order, "LONGEST_FIRST_MAX_TILES_PER_SM", 1 << 20 if longest else -1)
        fwd = gluon_fwd.ForwardLaunch(q, k, D ** -0.5, Score(causal=True))
        bwd = gluon_bwd.BackwardLaunches(q, k, D ** -0.5, Score(causal=True))
        assert fwd.template.constexprs["LONGEST_FIRST"] is longest
        o, lse = torch.empty_like(q), torch.empty(B, H, N, device="cuda")
        fwd(q, k, v, o, lse)
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        if bwd.dq is None:      # D=256: the dK/dV pass from delta formed here
            delta = (o.float() * do.float()).sum(-1)
            bwd.run_dkdv(do, q, k, v, lse, delta, dk, dv)
            results.append((o, lse, dk, dv))
        else:
            dq = torch.empty_like(q)
            bwd(do, q, k, v, o, lse, None, dq, dk, dv)
            results.append((o, lse, dq, dk, dv))
    for a, b in zip(*results):
        assert torch.equal(a, b)


# spans of 6 of 12 heads (forward and dQ) and 6 kv heads (dK/dV); a ragged last tile
@pytest.mark.parametrize("B, H, Hkv, N, D", [(3, 4, 2, 200, 32)])
def test_triton_orders_agree_bitwise(B, H, Hkv, N, D, device, monkeypatch):
    monkeypatch.setenv("TRITONKIT_AUTOTUNE", "0")   # both orders on the same fixed tiles, also on a GPU
    q = torch.randn(B, H, N, D, device=device, dtype=torch.float16)
    k, v = (torch.randn(B, Hkv, N, D, device=device, dtype=torch.float16) for _ in range(2))
    do = torch.randn_like(q)
    results = []
    for longest in (False, True):
        monkeypatch.setattr(order, "LONGEST_FIRST_MAX_TILES_PER_SM", 1 << 20 if longest else -1)
        assert plans._head_span(Score(causal=True), None, B * H, 4, q.device) == (6 if longest else 0)
        plans.clear()
        o, lse = attention_fwd(q, k, v, True, gluon=False)
        results.append((o, lse, *attention_bwd(do, q, k, v, o, lse, True, gluon=False)))
    plans.clear()
    for a, b in zip(*results):
        assert torch.equal(a, b)
