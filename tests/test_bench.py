"""`tritonkit bench`, the main job. Without a GPU it is the first run: every op in the registry
checked through the interpreter against its float64 reference, a compiled kernel, and no
speed figures. With --interpreter-timings it runs the tiny cases through the interpreter and
must say so; every case gets a figure from every provider, written to JSON and a plot. The
host-time check that flags host-bound GPU cases is tested with stand-ins."""

import json
import os
import subprocess
import sys
import time
import warnings

import pytest
import torch

import tritonkit
from tritonkit import registry
from tritonkit.bench import runner, timing


@pytest.mark.skipif(not tritonkit.INTERPRETED, reason="the interpreter run of the main job")
def test_bench_runs_every_provider_and_writes_json_and_plot(tmp_path, capsys):
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    code = runner.main(["softmax", "--filter", "64x64", "--no-progress", "--json", str(out_json),
                        "--plot", str(out_png), "--interpreter-timings"])
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


BANNED = ("0.00x", "ceiling", "RuntimeWarning", "speedup", "Summary:")


@pytest.mark.skipif(not tritonkit.INTERPRETED, reason="the first run without a GPU")
def test_first_run_checks_every_op_and_shows_no_speed(capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert runner.main([]) == 0
    printed = capsys.readouterr().out
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    for banned in BANNED:
        assert banned not in printed, banned
    table = printed.split("2. What a kernel")[0]
    for name, entry in registry.entries().items():
        if entry.reference is not None:
            assert f"\n{name} " in table and "forward" in table, name
        else:
            assert "not checked: " in table and name in table
    assert "ld.global.v4.b32" in printed and "sm_90" in printed      # the inspect sample
    assert "Speed needs a CUDA GPU" in printed


@pytest.mark.skipif(not tritonkit.INTERPRETED, reason="the first run without a GPU")
def test_first_run_command_is_quiet_and_quick(tmp_path):
    # The README's first command as a newcomer runs it: nothing on stderr, in under 90 s
    # (a cold Triton cache, so the inspect sample compiles from scratch).
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tritonkit", "bench"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert time.perf_counter() - start < 90
    assert done.stderr == "", done.stderr
    for banned in BANNED:
        assert banned not in done.stdout, banned


def test_bench_rejects_unknown_ops(capsys):
    with pytest.raises(SystemExit):
        runner.main(["matmul"])
    assert "unknown op(s) matmul" in capsys.readouterr().err


@pytest.mark.skipif(not tritonkit.INTERPRETED, reason="the first run's listing; on a GPU `blocks` runs the whole bench")
def test_blocks_names_the_block_ops(capsys):
    # `tritonkit bench blocks` stands for the block ops; on the CPU the first run checks them.
    assert runner.main(["blocks"]) == 0
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines()
            if line and not line[0].isspace() and line.split()[0] in registry.entries()]
    assert rows == list(runner.GROUPS["blocks"])


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


def _stand_in_driver(monkeypatch, clear) -> None:
    """Triton's active driver replaced by one whose benchmark cache `clear()` clears."""
    from triton import runtime

    class Driver:
        @staticmethod
        def get_empty_cache_for_benchmark():
            return "cache"

        @staticmethod
        def clear_cache(cache):
            assert cache == "cache"
            clear()

    monkeypatch.setattr(type(runtime.driver), "active", property(lambda self: Driver), raising=False)


def test_l2_clear_time(monkeypatch):
    # Timed with events around the clear that do_bench runs, each clear inside its own pair.
    log, clock = [], iter(range(1000))

    class Event:
        def __init__(self, enable_timing):
            self.at = None

        def record(self):
            self.at = next(clock)
            log.append("record")

        def elapsed_time(self, end):
            return float(end.at - self.at)

    def clear():
        next(clock)
        log.append("clear")

    monkeypatch.setattr(timing._runtime, "INTERPRETED", False)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    _stand_in_driver(monkeypatch, clear)
    assert timing.l2_clear_ms() == 2.0  # each pair: record, clear, record
    assert log[:4] == ["clear", "record", "clear", "record"] and log.count("clear") == 21
    monkeypatch.setattr(timing._runtime, "INTERPRETED", True)
    assert timing.l2_clear_ms() is None


def test_graphed_time_of_a_call(monkeypatch):
    # n calls captured after n clears, less a graph of the n clears alone, over n; the two
    # graphs replayed in turn, each between its own pair of events.
    clock, log = [0.0], []
    call_ms, clear_ms = 0.25, 0.07

    class Event:
        def __init__(self, enable_timing):
            self.at = None

        def record(self):
            self.at = clock[0]

        def elapsed_time(self, end):
            return end.at - self.at

    class Graph:
        capturing = None

        def __init__(self):
            self.work = []

        def replay(self):
            clock[0] += sum(self.work)

    class Capture:
        def __init__(self, graph):
            self.graph = graph

        def __enter__(self):
            Graph.capturing = self.graph

        def __exit__(self, *exc):
            Graph.capturing = None

    def call():
        log.append("captured" if Graph.capturing else "warm-up")
        if Graph.capturing:
            Graph.capturing.work.append(call_ms)

    class Stream:
        def wait_stream(self, other):
            pass

    monkeypatch.setattr(timing._runtime, "INTERPRETED", False)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", Capture)
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: Capture(None))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    _stand_in_driver(monkeypatch, lambda: Graph.capturing.work.append(clear_ms))
    assert timing.graphed_ms(call, estimate_ms=0.5) == pytest.approx(call_ms)
    calls = int(timing.GRAPH_SPAN_MS / 0.5)
    assert log == ["warm-up"] * 3 + ["captured"] * calls
    log.clear()
    timing.graphed_ms(call, estimate_ms=1e3)  # a long call: still the fewest calls a graph holds
    assert log.count("captured") == timing.GRAPH_CALLS[0]

    # A call that cannot be captured: the error goes on, and each CUDA generator gets a clean
    # copy of its state back (a failed capture leaves them marked as capturing).
    class Generator:
        def __init__(self, name):
            self.name, self.state = name, name

        def clone_state(self):
            return Generator(f"{self.name} copy")

        def graphsafe_set_state(self, other):
            self.state = other.name

    generators = (Generator("gen0"), Generator("gen1"))
    monkeypatch.setattr(torch.cuda, "default_generators", generators)

    def uncapturable():
        if Graph.capturing:
            raise RuntimeError("operation not permitted when stream is capturing")

    with pytest.raises(RuntimeError, match="not permitted"):
        timing.graphed_ms(uncapturable, estimate_ms=0.5)
    assert [g.state for g in generators] == ["gen0 copy", "gen1 copy"]
    monkeypatch.setattr(timing._runtime, "INTERPRETED", True)
    assert timing.graphed_ms(call, 0.5) is None


def test_graphed_figures_reach_the_table_and_summary():
    rows = [runner.Measurement("rms_norm", "fwd+bwd 8x8", "g", p, "GB/s", 64.0, ms, 1.0 / ms, "", 0.2, None, None,
                               g, 1.0 / g) for p, ms, g in (("tritonkit", 0.20, 0.10), ("torch native", 0.19, 0.15))]
    entry = registry.entries()["rms_norm"]
    table = runner._case_table(entry, {"fwd+bwd 8x8": rows}, ceiling=100.0, same_bytes={})
    line = next(line for line in table.splitlines() if "CUDA graph" in line)
    assert "tritonkit 10 (0.100)" in line and "torch native 6.667 (0.150)" in line
    assert line.endswith("tritonkit 1.50x torch native")
    summary = runner._summary(rows, {"GB/s": 100.0}).splitlines()
    assert summary[-1].split()[-1] == "1.50" and summary[-1].split()[-3] == "0.95"


@pytest.mark.parametrize("autocast", [False, True])
def test_bench_train_tiny(autocast, tmp_path, capsys):
    # `tritonkit bench train` without a GPU: the tiny config, tritonkit beside HF eager from the
    # same weights and batches; with --autocast the weights are float32 and each forward runs in
    # a bf16 autocast region. Both steps train (finite losses), and the JSON says which it was.
    pytest.importorskip("transformers")
    from tritonkit.bench import train
    out = tmp_path / "train.json"
    args = ["--config", "tiny", "--provider", "hf eager", "--provider", "tritonkit", "--steps", "1", "--warmup", "0",
            "--json", str(out)]
    assert train.main(args + (["--autocast"] if autocast else [])) == 0
    text = capsys.readouterr().out
    assert ("float32 weights, bf16 autocast" in text) == autocast
    data = json.loads(out.read_text())
    assert data["autocast"] == autocast
    losses = [r["loss"] for r in data["results"]]
    assert len(losses) == 2 and all(loss is not None and 0 < loss < 20 for loss in losses), data["results"]
    assert abs(losses[0] - losses[1]) < 0.05 * losses[0]   # the same model, the same batch


def test_progress_is_never_silent_for_long():
    # A step longer than the heartbeat gets lines while it runs, each saying how long so far
    # and (from the steps done, weighted) about how long is left.
    import io

    from tritonkit._progress import Progress, duration

    out = io.StringIO()
    with Progress(total=3, stream=out, heartbeat=0.25) as progress:
        with progress.step("first"):
            time.sleep(0.4)
        with progress.step("second", weight=2):
            time.sleep(1.0)
    lines = out.getvalue().splitlines()
    second = [line for line in lines if line.startswith("   ... second: 1 s so far (33% done")]
    assert len(second) >= 2 and all(line.startswith("   ... first: 1 s so far") for line in lines
                                    if line not in second), lines
    assert "left)" in second[0]
    quiet = io.StringIO()
    with Progress(total=1, stream=quiet, heartbeat=0.1, enabled=False) as progress, progress.step("x"):
        progress.say("not said")
        time.sleep(0.3)
    assert quiet.getvalue() == ""
    assert [duration(s) for s in (0.2, 40, 100, 600)] == ["1 s", "40 s", "2 min", "10 min"]


@pytest.mark.skipif(not tritonkit.INTERPRETED, reason="the first run without a GPU")
def test_first_run_says_how_long_and_shows_each_op_as_it_is_checked(capsys, monkeypatch):
    # Each op's rows are printed before the next op is checked, so the table grows as it goes.
    from tritonkit.bench import first_run

    seen = []
    real = first_run.accuracy_rows

    def rows(name, entry, device):
        seen.append(capsys.readouterr().out)
        return real(name, entry, device)

    monkeypatch.setattr(first_run, "accuracy_rows", rows)
    monkeypatch.setattr(first_run, "inspect_sample", lambda names: "(inspect sample)")
    assert runner.main(["softmax", "swiglu"]) == 0
    printed = "".join(seen) + capsys.readouterr().out
    assert "It takes about" in seen[0] and "on an idle 2-core machine" in seen[0]
    assert seen[1].startswith("softmax ") and "swiglu " not in "".join(seen[:2])
    assert "\nswiglu " in printed
