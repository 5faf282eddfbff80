"""`tritonkit bench`, the main job: on the CPU machine it runs tiny cases through the
interpreter and must say so; every case gets a figure from every provider, written to JSON
and a plot. The host-time check that flags host-bound GPU cases is tested with stand-ins."""

import json

import pytest
import torch

import tritonkit
from tritonkit.bench import runner, timing


@pytest.mark.skipif(not tritonkit.INTERPRETED, reason="the interpreter run of the main job")
def test_bench_runs_every_provider_and_writes_json_and_plot(tmp_path, capsys):
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    code = runner.main(["softmax", "--filter", "64x64", "--no-progress", "--json", str(out_json),
                        "--plot", str(out_png)])
    printed = capsys.readouterr().out
    assert code == 0
    assert "NOT GPU timings" in printed and "Summary:" in printed
    report = json.loads(out_json.read_text())
    rows = report["results"]
    assert {r["case"] for r in rows} == {"64x64 fp32", "64x64 bf16"}
    for case in ("64x64 fp32", "64x64 bf16"):
        providers = {r["provider"]: r for r in rows if r["case"] == case}
        assert {"tritonkit", "naive eager", "torch native", "torch.compile"} <= set(providers)
        for r in providers.values():
            assert r["ms"] > 0 and r["rate"] > 0 and r["host_ms"] is None, r
    assert report["ceilings"]["GB/s"] > 0
    assert out_png.stat().st_size > 1000


def test_bench_rejects_unknown_ops(capsys):
    with pytest.raises(SystemExit):
        runner.main(["matmul"])
    assert "unknown op(s) matmul" in capsys.readouterr().err


def test_host_time_of_a_call(monkeypatch):
    # On a GPU: calls queued back to back, the GPU synchronised only before and after.
    calls, syncs = [], []
    monkeypatch.setattr(timing._runtime, "INTERPRETED", False)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: syncs.append(len(calls)))
    host = timing.host_ms(lambda: calls.append(1))
    assert len(calls) == timing.HOST_CALLS and syncs == [0, timing.HOST_CALLS]
    assert 0 <= host < 1.0
    monkeypatch.setattr(timing._runtime, "INTERPRETED", True)
    assert timing.host_ms(lambda: calls.append(1)) is None  # interpreter calls are synchronous


def test_host_bound_note():
    assert timing.host_bound_note(0.010, None) == ""
    assert timing.host_bound_note(0.010, 0.006) == ""          # host under 70% of the timed call
    note = timing.host_bound_note(0.010, 0.0095)
    assert note.startswith("host-bound: 10 us of host time a call against 10 us timed")
