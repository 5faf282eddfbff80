"""`tritonkit inspect attention` on the Gluon path: which path an input takes and why, and the
structure of the Gluon kernels compiled for sm_90 on the CPU (GluonASTSource).

The inspector records the launches on CPU tensors for an sm_90 target, so the dispatch makes
the choice it would make on an H100/H200; each Gluon kernel is compiled once per module
(compiles take a few seconds; `compile_report` also caches compiled kernels).
"""

import functools
import json

import pytest

from tritonkit import _launch
from tritonkit.ops.attention.gluon import attention_fwd as gluon_fwd, host
from tritonkit.inspector.gluon import HOPPER_SHARED_LIMIT
from tritonkit.inspector import compile_report, explain, format_report, main, record
from tritonkit.registry import InspectRequest
from tritonkit.ops.attention.score import Score

import torch

from test_gluon_attention_bwd import DKDV_SPILL_BOUND   # the dK/dV kernel's spills, pinned there

SEQ = 333       # ragged: not a multiple of any block


@functools.lru_cache(maxsize=None)
def _reports(pass_: str, D: int, causal: bool) -> tuple:
    return tuple(compile_report("attention", pass_=pass_, shape=(2, 4, SEQ, D), dtype="bf16", causal=causal,
                                arch="sm_90"))


def _by_launch(reports) -> dict:
    return {r.launch: r for r in reports}


def _check_warp_specialized(report, spill_bound: int = 0, consumers: int = 2):
    assert report.language == "gluon" and report.path == "gluon", (report.kernel, report.path, report.path_reason)
    consumer, producer = host.consumer_regs(consumers), host.PRODUCER_REGS
    # The default partition and the workers before the last are 4-warp consumer warpgroups, the
    # last worker the 1-warp producer; whole warpgroups launch (registers move between them).
    # The default partition keeps what the workers leave of 64K registers (at or above theirs).
    parts = [(p.role, p.warps, p.registers) for p in report.partitions]
    assert parts[1:] == [(f"worker {i}", 4, consumer) for i in range(consumers - 1)] + [
        (f"worker {consumers - 1}", 1, producer)], report.partitions
    assert parts[0][:2] == ("default", 4) and parts[0][2] >= consumer, report.partitions
    assert report.partitions[-1].name.endswith("producer") and report.num_warps == 4 * (consumers + 1)
    assert {("dec", producer), ("inc", consumer)} <= set(report.setmaxnreg), report.setmaxnreg
    # Products left in flight past a wait, and waits that drain them.
    assert report.wgmma_waits.get(1, 0) > 0 and report.wgmma_waits.get(0, 0) > 0, report.wgmma_waits
    assert report.mbarrier_waits > 0 and report.tma and report.tensor_cores["wgmma"] > 0
    assert report.spill_stores <= spill_bound and report.spill_loads <= spill_bound, report.spill_stores
    assert 0 < report.shared_bytes <= HOPPER_SHARED_LIMIT
    # Inside the key loops the warpgroups do not meet at CTA-wide barriers.
    assert report.loops and all(loop.cta_barriers == 0 for loop in report.loops if loop.wgmma)
    text, sentences = format_report(report), " ".join(explain(report))
    assert "path: gluon" in text and f"warp specialization: {consumers + 1} partitions" in text
    assert f"{report.partitions[-1].name:<16} worker {consumers - 1}  1 warp" in text
    assert "takes the Gluon path" in sentences and "warp-specialized" in sentences
    assert f"drops to {producer} registers" in sentences and "leave products in flight" in sentences


@pytest.mark.parametrize("D", [64, 128])
def test_forward_with_one_query_row_compiles(D):
    # One row (Nq = 1, which Triton may pass as a constant): every warpgroup but the first has
    # no rows in the only tile; the kernel must still lower (a change that lets the compiler
    # drop those warpgroups' products failed here, notes/gluon_attention.md).
    (report,) = compile_report("attention", pass_="fwd", shape=(1, 2, 1, D), dtype="bf16", arch="sm_90")
    consumers = gluon_fwd.consumer_count(D, Score(), 1)
    assert report.launch == "attention_fwd_gluon" and report.language == "gluon"
    assert [p.warps for p in report.partitions] == [4] * consumers + [1], report.partitions
    assert report.spill_stores == 0 and report.tensor_cores["wgmma"] > 0


@pytest.mark.parametrize("D, causal", [(128, False), (128, True), (256, False), (256, True), (64, False)])
def test_forward_takes_the_gluon_kernel_and_its_structure(D, causal):
    (report,) = _reports("fwd", D, causal)
    assert report.launch == "attention_fwd_gluon" and report.kernel == "_attn_fwd_kernel"
    assert report.path_of == "attention forward" and f"head dim {D}" in report.path_reason
    _check_warp_specialized(report, consumers=gluon_fwd.consumer_count(D, Score(causal=causal), SEQ))
    if D == 128:
        assert "P(j-1) V(j-1)" in " ".join(explain(report))


def test_backward_causal_d128_takes_the_gluon_kernels_and_their_structure():
    reports = _by_launch(_reports("bwd", 128, True))
    # Two launches: the dQ pass forms delta itself (the Triton path's preprocess does not run).
    assert set(reports) == {"attention_bwd_dkdv_gluon", "attention_bwd_dq_gluon"}
    _check_warp_specialized(reports["attention_bwd_dkdv_gluon"], spill_bound=DKDV_SPILL_BOUND[128])
    _check_warp_specialized(reports["attention_bwd_dq_gluon"])
    # The report counts the products whose A operand comes from registers: in dK/dV at D=128,
    # dV's and dK's (P^T and dS^T), a third of them; S^T's and dP^T's read K and V from shared memory.
    dkdv = reports["attention_bwd_dkdv_gluon"]
    assert dkdv.tensor_cores["wgmma_register_a"] * 3 == dkdv.tensor_cores["wgmma"] > 0
    assert f"({dkdv.tensor_cores['wgmma_register_a']} with A in registers)" in format_report(dkdv)
    assert "take their A operand from registers" in " ".join(explain(dkdv))


@pytest.mark.parametrize("D", [128, 256])
def test_softcap_takes_the_gluon_forward_with_the_tanh_instruction(D):
    # The softcap (the catalogue's 50) in the warp-specialized forward: the same partitions and
    # registers, no spills, one tanh.approx.f32 a score, the cap folded into qk_scale.
    (report,) = _reports("fwd_softcap", D, True)
    assert report.launch == "attention_fwd_gluon" and "softcap 50" in report.path_reason
    _check_warp_specialized(report)
    assert "softcap=50.0" in report.constexprs["SCORE"] and "tanh.approx.f32" in report.asm["ptx"]


def test_softcap_backward_causal_d128_takes_the_gluon_kernels():
    reports = _by_launch(_reports("bwd_softcap", 128, True))
    assert set(reports) == {"attention_bwd_dkdv_gluon", "attention_bwd_dq_gluon"}
    for launch, bound in (("attention_bwd_dkdv_gluon", DKDV_SPILL_BOUND[128]), ("attention_bwd_dq_gluon", 0)):
        report = reports[launch]
        _check_warp_specialized(report, spill_bound=bound)
        assert "softcap 50" in report.path_reason and "tanh.approx.f32" in report.asm["ptx"], launch


def _choice(pass_: str, **request) -> _launch.PathChoice:
    """The path the pass's dispatch chooses on sm_90, recorded without compiling."""
    launches = record("attention", pass_, InspectRequest(**request), arch=90)
    (choice,) = {c for _, c in launches.choices}
    return choice


def test_the_path_and_its_reason():
    aligned = dict(shape=(1, 2, 4096, 128), dtype=torch.bfloat16)
    assert _choice("fwd", **aligned).path == "gluon"
    assert _choice("bwd", causal=True, **aligned).path == "gluon"
    assert _choice("bwd", **aligned).path == "gluon"                          # full attention too
    assert _choice("fwd_softcap", **aligned).path == "gluon"                  # both paths take a softcap
    assert _choice("bwd_softcap", causal=True, **aligned).path == "gluon"
    window = _choice("bwd_window", causal=True, **aligned)                   # a causal left window
    assert window.path == "gluon" and "left window" in window.reason
    d64 = dict(aligned, shape=(1, 2, 4096, 64))
    assert _choice("fwd", **d64).path == "gluon"               # full, no softcap: three consumers
    long_rows = gluon_fwd.THREE_CONSUMERS_CAUSAL_ROWS
    assert _choice("fwd", causal=True, **dict(d64, shape=(1, 2, long_rows, 64))).path == "gluon"
    big_d64 = dict(aligned, shape=(4, 32, 4096, 64))          # backward work from 2^34 multiply-adds
    assert _choice("bwd", causal=True, **big_d64).path == "gluon"
    assert _choice("bwd", **big_d64).path == "gluon"
    d256 = _choice("bwd", causal=True, **dict(aligned, shape=(1, 2, 4096, 256)))     # the Gluon dK/dV pass
    assert d256.path == "gluon" and "dQ pass in Triton" in d256.reason
    cases = [
        (("fwd", dict(aligned, offset=1)), "q cannot be read by TMA in place"),   # a view at an odd offset
        (("fwd", dict(d64, causal=True)), "three-warpgroup tile"),             # causal, short rows
        (("fwd", dict(d64, causal=True, shape=(1, 2, long_rows - 1, 64))), "three-warpgroup tile"),
        (("fwd_softcap", d64), "three-warpgroup tile"),
        (("fwd_window", aligned), "a sliding window"),
        (("fwd", dict(aligned, shape=(1, 2, 4096, 96))), "head dim 96"),
        (("bwd", dict(aligned, shape=(1, 2, 4096, 96))), "head dim 96"),
        (("bwd", d64), "did not measure faster"),      # a short D=64 backward
        (("fwd", dict(aligned, path="triton")), "gluon=False"),
    ]
    for (pass_, request), reason in cases:
        choice = _choice(pass_, **request)
        assert choice.path == "triton" and reason in choice.reason, (pass_, request, choice)
    # Forcing the Gluon kernel where it cannot take the input names why.
    with pytest.raises(ValueError, match="a sliding window"):
        _choice("fwd_window", path="gluon", **aligned)
    forced = _choice("fwd", path="gluon", **dict(aligned, shape=(1, 2, 4096, 64)))
    assert forced.path == "gluon" and forced.reason.startswith("gluon=True")


def test_target_capability_is_the_recording_target_only_when_nothing_runs():
    cpu = torch.device("cpu")
    assert _launch.target_capability(cpu) is None
    with _launch.record_launches(execute=False, capability=90):
        assert _launch.target_capability(cpu) == 90
        with _launch.record_launches(execute=False, capability=80):
            assert _launch.target_capability(cpu) == 80
    with _launch.record_launches(execute=True, capability=90):     # launches run: the real device
        assert _launch.target_capability(cpu) is None
    assert _launch.target_capability(cpu) is None
    q = torch.empty(1, 2, 64, 128, dtype=torch.bfloat16)
    assert not gluon_fwd.supported(q, q, q) and "cpu" in gluon_fwd.refusal(q, q, q)


def test_cli_json_and_text_name_the_path(capsys):
    _reports("fwd", 128, False)          # compiled once for the module
    shape = f"2,4,{SEQ},128"
    assert main(["attention", "--pass", "fwd", "--shape", shape, "--dtype", "bf16", "--json", "--explain"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["paths"] == [{"pass": "fwd", "what": "attention forward", "path": "gluon",
                              "reason": data["kernels"][0]["path_reason"]}]
    kernel = data["kernels"][0]
    assert kernel["language"] == "gluon" and [p["warps"] for p in kernel["partitions"]] == [4, 4, 1]
    assert kernel["wgmma_waits"]["1"] > 0 and any("warp-specialized" in s for s in data["explain"][0])
    assert main(["attention", "--pass", "fwd", "--shape", shape, "--dtype", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "path (fwd, attention forward): gluon: sm_90 (Hopper), head dim 128" in out
    assert main(["add", "--path", "gluon"]) == 2
    assert "add has one family of kernels" in capsys.readouterr().err
