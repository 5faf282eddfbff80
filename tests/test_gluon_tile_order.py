"""The order the Gluon attention kernels hand out a dense causal pass's tiles
(`tritonkit.gluon.host.longest_first`, the kernels' LONGEST_FIRST): head after head, or every
head's longest tiles first.

On any machine: the rule's choice at the shapes it was measured on (BENCHMARKS.md), what each
pass's launch carries, and that the kernels compile both ways for sm_90. On a Hopper GPU
(gpu-marked): the order moves tiles between SMs and nothing else, so both orders give bitwise
the same outputs and gradients.
"""

import pytest
import torch

from tritonkit.gluon import attention_bwd as gluon_bwd
from tritonkit.gluon import attention_fwd as gluon_fwd
from tritonkit.gluon import host
from tritonkit.gluon.compile import compile_sm90

from test_gluon_attention import needs_hopper
from test_gluon_attention_bwd import DKDV_SPILL_BOUND

SMS = 132   # an H100 / H200

# (pass, batch x heads of the pass, its tiles a head) -> the order chosen. Longest first where
# it measured faster (head after head in brackets, TFLOP/s of the pass alone, bf16, D=128):
MEASURED = [
    ("config A forward, B4 H16 N2048", 64, 16, True),              # 464.9 (445.2)
    ("config A dK/dV, B4 Hkv8 N2048", 32, 16, True),               # 569.5 (469.5)
    ("config B forward, B1 H16 N8192", 16, 64, True),              # 577.8 (542.9)
    ("config B dK/dV, B1 Hkv8 N8192", 8, 64, True),                # 631.9 (540.7)
    ("GQA 32/8 dK/dV, B4 Hkv8 N4096", 32, 32, True),               # 593.6 (563.8)
    # More heads than half the SMs: K and V no longer shared in L2 by the programs in flight.
    ("GQA 32/8 forward, B4 H32 N4096", 128, 32, False),            # 504.8 (537.0)
    ("B4 H32 N4096 dQ", 128, 32, False),                           # 517.4 (631.1)
    ("B8 H16 N1024 forward", 128, 8, False),                       # 307.1 (330.3)
    # Many tiles an SM: head after head leaves little tail.
    ("D=64 three consumers, B2 H32 N16384", 64, 86, False),        # 432.3 (459.9)
    ("D=256 forward, B4 H16 N4096", 64, 32, False),                # 537.3 (580.4)
]


@pytest.mark.parametrize("name, heads, blocks, chosen", MEASURED, ids=[m[0] for m in MEASURED])
def test_rule_at_measured_shapes(name, heads, blocks, chosen):
    assert host.longest_first(True, -1, False, heads, blocks, SMS) is chosen


def test_rule_only_for_dense_causal_without_window():
    assert host.longest_first(True, -1, False, 8, 16, SMS)
    assert not host.longest_first(False, -1, False, 8, 16, SMS)       # tiles of one length
    assert not host.longest_first(True, 512, False, 8, 16, SMS)       # a window: the same
    assert not host.longest_first(True, -1, True, 8, 16, SMS)         # packed: their own order


def _inputs(B, H, Hkv, N, D):
    q = torch.empty(B, H, N, D, dtype=torch.bfloat16)
    k = torch.empty(B, Hkv, N, D, dtype=torch.bfloat16)
    return q, k, torch.empty(B, H, N)


# (B, H, Hkv, N, forward's and dQ's order, dK/dV's): config B's layer; then 128 query heads
# (forward and dQ head after head) over 32 kv heads (dK/dV longest first); then 128 of each.
@pytest.mark.parametrize("B, H, Hkv, N, query_order, key_order",
                         [(1, 16, 8, 8192, True, True), (4, 32, 8, 4096, False, True), (4, 32, 32, 4096, False, False)])
def test_each_pass_carries_its_order(B, H, Hkv, N, query_order, key_order):
    q, k, lse = _inputs(B, H, Hkv, N, 128)
    for causal in (True, False):
        _, _, fwd = gluon_fwd.launch_args(q, k, k, q, lse, causal, 0.1)
        _, _, dq = gluon_bwd.dq_launch_args(q, q, k, k, q, q, lse, lse, None, causal, 0.1)
        _, _, dkdv = gluon_bwd.dkdv_launch_args(q, q, k, k, k, k, lse, lse, causal, 0.1)
        assert fwd["LONGEST_FIRST"] is dq["LONGEST_FIRST"] is (query_order and causal)
        assert dkdv["LONGEST_FIRST"] is (key_order and causal)


@pytest.mark.parametrize("order", [False, True])
def test_compiles_both_ways_for_sm90(order, monkeypatch):
    # The order is a constexpr: each value is its own kernel, within the passes' spill bounds.
    monkeypatch.setattr(host, "LONGEST_FIRST_MAX_TILES_PER_SM", SMS if order else 0)
    q, k, lse = _inputs(1, 4, 2, 700, 128)
    launches = [(gluon_fwd._attn_fwd_kernel, gluon_fwd.launch_args(q, k, k, q, lse, True, 0.1), 0),
                (gluon_bwd._dq_kernel, gluon_bwd.dq_launch_args(q, q, k, k, q, q, lse, lse, None, True, 0.1), 0),
                (gluon_bwd._dkdv_kernel, gluon_bwd.dkdv_launch_args(q, q, k, k, k, k, lse, lse, True, 0.1),
                 DKDV_SPILL_BOUND[128])]
    for kernel, (_, args, kwargs), spill_bound in launches:
        assert kwargs["LONGEST_FIRST"] is order
        usage = compile_sm90(kernel, args, kwargs).spills()
        assert usage["spill_stores"] <= spill_bound and usage["spill_loads"] <= spill_bound


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("B, H, Hkv, N, D", [(2, 4, 2, 1000, 128), (1, 8, 8, 777, 64), (2, 4, 4, 300, 256)])
def test_orders_agree_bitwise(B, H, Hkv, N, D, monkeypatch):
    torch.manual_seed(0)
    q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    results = []
    for order in (False, True):
        monkeypatch.setattr(host, "LONGEST_FIRST_MAX_TILES_PER_SM", 1 << 20 if order else 0)
        fwd = gluon_fwd.ForwardLaunch(q, k, True, D ** -0.5)
        bwd = gluon_bwd.BackwardLaunches(q, k, True, D ** -0.5)
        assert fwd.template.constexprs["LONGEST_FIRST"] is order
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
