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
    assert timing.host_bound_note(0.010, None, 0.080) == ""
    # The GPU clears L2 for 80 us before each timed call: host time up to that never shows.
    assert timing.host_bound_note(0.037, 0.056, 0.080) == ""
    assert timing.host_bound_note(0.200, 0.210, 0.080) != ""   # up to 130 us of 200 idle
    note = timing.host_bound_note(0.100, 0.200, 0.080)
    assert note.startswith("host-bound: 200 us of host time a call, 120 us more than the L2 clear")
    assert timing.host_bound_note(0.100, 0.085, 0.080) == ""   # 5 us possible wait: under 10%
    assert timing.host_bound_note(0.100, 0.095, 0.080) != ""   # 15 us: over 10%
    assert timing.host_bound_note(0.100, 0.015, None) != ""    # clear unknown: taken as none


def test_l2_clear_time(monkeypatch):
    # Timed with events around the clear that do_bench runs, each clear inside its own pair.
    from triton import runtime
    log, clock = [], iter(range(1000))

    class Event:
        def __init__(self, enable_timing):
            self.at = None

        def record(self):
            self.at = next(clock)
            log.append("record")

        def elapsed_time(self, end):
            return float(end.at - self.at)

    class Driver:
        @staticmethod
        def get_empty_cache_for_benchmark():
            return "cache"

        @staticmethod
        def clear_cache(cache):
            assert cache == "cache"
            next(clock)
            log.append("clear")

    monkeypatch.setattr(timing._runtime, "INTERPRETED", False)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(type(runtime.driver), "active", property(lambda self: Driver), raising=False)
    assert timing.l2_clear_ms() == 2.0  # each pair: record, clear, record
    assert log[:4] == ["clear", "record", "clear", "record"] and log.count("clear") == 21
    monkeypatch.setattr(timing._runtime, "INTERPRETED", True)
    assert timing.l2_clear_ms() is None
