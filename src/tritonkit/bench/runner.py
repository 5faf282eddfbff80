"""Run catalogue cases side by side, print the tables, write JSON and a plot.

Without a CUDA device there is no speed to measure: `tritonkit bench` then checks every op
through the interpreter and shows a compiled kernel instead (`first_run`), unless asked for
the interpreter's timings (--interpreter-timings, for testing this runner)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass

import torch

from .. import _runtime
from .._progress import Progress
from ..registry import BenchCase, OpEntry, entries
from .timing import (HOST_CHECK_BELOW_MS, copy_ceiling_gbs, graphed_ms, held_bytes, host_bound_note, host_ms,
                     l2_clear_ms, matmul_ceiling_tflops, peak_extra_bytes, time_ms)


@dataclass
class Measurement:
    op: str
    case: str
    group: str
    provider: str
    unit: str
    size: float
    ms: float | None          # None: the provider failed or could not run this case
    rate: float | None        # GB/s or TFLOP/s
    note: str = ""
    host_ms: float | None = None  # host time a call, measured for short cases on a GPU
    peak_bytes: int | None = None  # peak memory a call allocates beyond its inputs (BenchCase.memory)
    held_bytes: int | None = None  # memory a call's result keeps after it returns (BenchCase.held)
    graphed_ms: float | None = None  # GPU time a call replayed from a CUDA graph (short cases on a GPU)
    graphed_rate: float | None = None


def _measure_case(op: str, case: BenchCase, device: torch.device, clear: float | None = None) -> list[Measurement]:
    """Every provider of one case; `clear`: the GPU ms of the L2 clear before each timed call."""
    def rate_of(ms):
        return case.work / (ms * 1e-3) / (1e9 if case.unit == "GB/s" else 1e12) if ms else None

    def row(provider, ms=None, note="", host=None, peak=None, held=None, graphed=None):
        return Measurement(op, case.label, case.group, provider, case.unit, case.size, ms, rate_of(ms), note, host,
                           peak, held, graphed, rate_of(graphed))

    if device.type == "cuda" and case.bytes_in_flight:
        free, _ = torch.cuda.mem_get_info()
        if case.bytes_in_flight > 0.8 * free:
            return [row("tritonkit", note="skipped: does not fit in free GPU memory")]
    try:
        providers = case.setup(device)
    except torch.OutOfMemoryError:
        return [row("tritonkit", note="skipped: out of memory building inputs")]
    measured = {}
    for name, fn in providers.items():
        try:
            ms = time_ms(fn)
            host = host_ms(fn) if ms < HOST_CHECK_BELOW_MS else None
            peak = peak_extra_bytes(fn) if case.memory else None
            held = held_bytes(fn) if case.held else None
            measured[name] = (ms, host_bound_note(ms, host, clear), host, peak, held)
        except Exception as err:  # a peer that cannot run a case must not end the run
            measured[name] = (None, f"failed: {_first_line(err)}", None, None, None)
        _release(device)
    # A case that any provider runs in a short time: each provider's GPU time apart from
    # its host's, so that the host-bound ones compare by their kernels too.
    short = case.graphed and any(host is not None for _, _, host, _, _ in measured.values())
    results = []
    for name, (ms, note, host, peak, held) in measured.items():
        graphed = None
        if short and ms is not None:
            try:
                graphed = graphed_ms(providers[name], ms)
            except Exception as err:
                note = "; ".join(filter(None, (note, f"not captured in a CUDA graph: {_first_line(err)}")))
            _release(device)
        results.append(row(name, ms, note, host, peak, held, graphed))
    del providers
    return results


def _release(device: torch.device) -> None:
    # One provider's cached blocks must not crowd the next one's inputs and workspaces.
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _first_line(err: Exception) -> str:
    return f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:80]}"


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _seed_table(rows: list[Measurement], eager: str) -> str:
    by = {m.provider: m for m in rows}
    ours, base = by.get("tritonkit"), by.get(eager)
    if not ours or not base or ours.ms is None or base.ms is None:
        return ""
    return (f"Matrix Size: {rows[0].case}\n"
            f"PyTorch Eager Time ({eager}): {base.ms:.4f} ms\n"
            f"Triton Kernel Time (tritonkit): {ours.ms:.4f} ms (Speedup: {base.ms / ours.ms:.2f}x)\n")


# Measurement fields of memory, and the words that introduce them under a case's row.
_MEMORY_LINES = (("peak_bytes", "peak memory beyond the inputs"),
                 ("held_bytes", "held after the call (output and what its graph saved for the backward)"))


def _case_table(entry: OpEntry, measured: dict[str, list[Measurement]], ceiling: float,
                same_bytes: dict[str, float]) -> str:
    providers = ["tritonkit", *entry.peers]
    for rows in measured.values():
        providers += [m.provider for m in rows if m.provider not in providers]
    unit = next(iter(measured.values()))[0].unit
    head = f"{'case':<28}" + "".join(f"{p[:18]:>21}" for p in providers)
    head += "".join(f"{'vs ' + p[:11]:>16}" for p in providers[1:]) + f"{'% ceiling':>11}"
    lines = [f"{entry.name}: {unit} (ms), speedup of tritonkit over each peer, tritonkit as % of the "
             f"measured {'copy' if unit == 'GB/s' else 'matmul'} ceiling ({ceiling:.0f} {unit})", head]
    for label, rows in measured.items():
        by = {m.provider: m for m in rows}
        cells = []
        for p in providers:
            m = by.get(p)
            cells.append(f"{m.rate:.4g} ({m.ms:.3f})"
                         if m and m.ms else "n/a")
        ours = by.get("tritonkit")
        ratios = [(_fmt(by[p].ms / ours.ms, 2) + "x") if ours and ours.ms and p in by and by[p].ms else "-"
                  for p in providers[1:]]
        pct = _fmt(100 * ours.rate / ceiling, 0) + "%" if ours and ours.rate else "-"
        lines.append(f"{label:<28}" + "".join(f"{c:>21}" for c in cells)
                     + "".join(f"{r:>16}" for r in ratios) + f"{pct:>11}")
        if label in same_bytes and ours and ours.rate:
            lines.append(f"    a copy of the same bytes: {same_bytes[label]:.0f} GB/s; tritonkit at "
                         f"{100 * ours.rate / same_bytes[label]:.0f}% of it")
        graphed = _graphed_line(by, providers, unit)
        if graphed:
            lines.append(graphed)
        for field, what in _MEMORY_LINES:
            figures = [f"{p} {getattr(by[p], field) / 2**30:.2f}" for p in providers
                       if p in by and getattr(by[p], field) is not None]
            if figures:
                lines.append(f"    {what}, GiB: " + ", ".join(figures))
        for m in rows:
            if m.note:
                lines.append(f"    {m.provider}: {m.note}")
    return "\n".join(lines)


def _best_peer(rows, rate: str) -> Measurement | None:
    """The peer in `rows` of the highest `rate` (a Measurement field), None if none has one."""
    return max((m for m in rows if m.provider != "tritonkit" and getattr(m, rate)),
               key=lambda m: getattr(m, rate), default=None)


def _graphed_line(by: dict[str, Measurement], providers: list[str], unit: str) -> str:
    """The providers' figures replayed from a CUDA graph, where the case has them."""
    graphed = [by[p] for p in providers if p in by and by[p].graphed_ms]
    if not graphed:
        return ""
    line = ("    from a CUDA graph (the GPU's time alone), " + unit + " (ms): "
            + ", ".join(f"{m.provider} {m.graphed_rate:.4g} ({m.graphed_ms:.3f})" for m in graphed))
    ours, best = by.get("tritonkit"), _best_peer(graphed, "graphed_rate")
    if ours and ours.graphed_rate and best:
        line += f"; tritonkit {ours.graphed_rate / best.graphed_rate:.2f}x {best.provider}"
    return line


def _plot(path: str, results: list[Measurement]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({m.group for m in results})
    fig, axes = plt.subplots(len(groups), 1, figsize=(8, 3.2 * len(groups)), squeeze=False)
    for ax, group in zip(axes[:, 0], groups):
        rows = [m for m in results if m.group == group and m.rate]
        for provider in dict.fromkeys(m.provider for m in rows):
            points = sorted((m.size, m.rate) for m in rows if m.provider == provider)
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=provider)
        ax.set_xscale("log", base=2)
        ax.set_title(group)
        ax.set_ylabel(rows[0].unit if rows else "")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[-1, 0].set_xlabel("elements (GB/s cases) or sequence length (TFLOP/s cases)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _summary(results: list[Measurement], ceilings: dict[str, float]) -> str:
    lines = ["", "Summary: tritonkit against the best peer in this run",
             f"{'case':<36}{'tritonkit':>12}{'best peer':>28}{'ratio':>8}{'%ceil':>7}{'graphed':>9}",
             "(GB/s for add and softmax, TFLOP/s for attention; ratio > 1 means tritonkit is faster; graphed: "
             "the ratio of the figures replayed from a CUDA graph, the host's time out, for short cases)"]
    cases = dict.fromkeys((m.op, m.case) for m in results)
    for op, case in cases:
        rows = [m for m in results if (m.op, m.case) == (op, case)]
        ours = next((m for m in rows if m.provider == "tritonkit"), None)
        best = _best_peer(rows, "rate")
        if not ours or not ours.rate:
            lines.append(f"{op + ' ' + case:<36}{'n/a':>12}")
            continue
        best_txt = f"{best.provider} {best.rate:.0f}" if best else "-"
        ratio = f"{ours.rate / best.rate:.2f}" if best else "-"
        ceil = ceilings.get(ours.unit)
        pct = f"{100 * ours.rate / ceil:.0f}%" if ceil else "-"
        best_graphed = _best_peer(rows, "graphed_rate")
        graphed = f"{ours.graphed_rate / best_graphed.graphed_rate:.2f}" if ours.graphed_rate and best_graphed else "-"
        lines.append(f"{op + ' ' + case:<36}{ours.rate:>12.4g}{best_txt:>28}{ratio:>8}{pct:>7}{graphed:>9}")
    return "\n".join(lines)


# Names that stand for several ops.
GROUPS = {"blocks": ("rms_norm", "layer_norm", "rope", "swiglu", "geglu", "gated_linear", "cross_entropy",
                    "linear_cross_entropy")}


def main(argv: list[str] | None = None) -> int:
    if argv and argv[0] == "train":  # whole training steps, not kernel calls: their own runner
        from .train import main as train_main
        return train_main(argv[1:])
    parser = argparse.ArgumentParser(prog="tritonkit bench", description=__doc__)
    parser.add_argument("ops", nargs="*", default=["all"],
                        help="op names, all, or blocks (the transformer block's ops besides attention); "
                             "`tritonkit bench train` runs whole training steps")
    parser.add_argument("--backward", action="store_true", help="attention: backward cases only")
    parser.add_argument("--forward", action="store_true", help="only forward cases")
    parser.add_argument("--filter", default="", help="only cases whose label contains this text")
    parser.add_argument("--json", metavar="PATH", help="write every figure as JSON")
    parser.add_argument("--plot", metavar="PATH.png", help="draw rate against size per provider")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--interpreter-timings", action="store_true",
                        help="without a GPU: time the tiny interpreter cases anyway (they say nothing "
                             "about kernel speed; for testing the runner)")
    args = parser.parse_args(argv)

    catalogue = entries()
    names = list(catalogue) if "all" in args.ops else [n for group in args.ops for n in GROUPS.get(group, (group,))]
    unknown = [n for n in names if n not in catalogue]
    if unknown:
        parser.error(f"unknown op(s) {', '.join(unknown)}; known: {', '.join(catalogue)}, "
                     f"{', '.join(GROUPS)}, all")

    device = _runtime.default_device()
    on_gpu = device.type == "cuda"
    if not on_gpu and not args.interpreter_timings:
        from .first_run import main as first_run
        return first_run({name: catalogue[name] for name in names})
    print(f"tritonkit bench: {_runtime.describe()}")
    if not on_gpu:
        print("NOTE: no CUDA device, so kernels run through Triton's interpreter on tiny shapes.\n"
              "      These timings are NOT GPU timings and say nothing about kernel speed.")
    selected = []
    for name in names:
        for case in catalogue[name].bench_cases(on_gpu):
            if args.filter and args.filter not in case.label:
                continue
            if args.backward and "bwd" not in case.group or args.forward and "bwd" in case.group:
                continue
            selected.append((catalogue[name], case))

    ceilings = {"GB/s": copy_ceiling_gbs(device)}
    if any(case.unit == "TFLOP/s" for _, case in selected):
        ceilings["TFLOP/s"] = matmul_ceiling_tflops(device)
    print("ceilings measured now: " + ", ".join(f"{v:.0f} {k}" for k, v in ceilings.items()) + "\n")
    clear = l2_clear_ms()
    if clear is not None:
        print(f"each timed call follows an L2 clear of {clear * 1e3:.0f} us on the GPU; host time beyond "
              "that can show in a figure, and is noted where it may\n")

    progress = None
    if not args.no_progress and sys.stderr.isatty():
        try:
            from tqdm import tqdm
            progress = tqdm(total=len(selected), desc="cases", file=sys.stderr, leave=False)
        except ImportError:
            pass
    results: list[Measurement] = []
    copy_same_bytes: dict[str, float] = {}
    # Through the interpreter a case can take long without a line: a heartbeat on stderr then.
    with Progress(len(selected), enabled=not (on_gpu or progress or args.no_progress)) as heartbeat:
        for op in dict.fromkeys(e.name for e, _ in selected):
            entry = catalogue[op]
            measured: dict[str, list[Measurement]] = {}
            same_bytes: dict[str, float] = {}
            for case in (c for e, c in selected if e.name == op):
                if case.unit == "GB/s" and on_gpu:
                    same_bytes[case.label] = copy_ceiling_gbs(device, case.work)
                if progress:
                    progress.set_postfix_str(f"{entry.name} {case.label}")
                with heartbeat.step(f"timing {entry.name} {case.label}"):
                    rows = _measure_case(entry.name, case, device, clear)
                measured[case.label] = rows
                results += rows
                if case.seed_table:
                    eager = "naive eager" if any(m.provider == "naive eager" for m in rows) else "torch native"
                    table = _seed_table(rows, eager)
                    if table:
                        (progress.write if progress else print)(table)
                if progress:
                    progress.update()
            if progress:
                progress.clear()
            unit = next(iter(measured.values()))[0].unit
            print(_case_table(entry, measured, ceilings[unit], same_bytes) + "\n")
            copy_same_bytes.update({f"{op} {label}": rate for label, rate in same_bytes.items()})
    if progress:
        progress.close()

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": _runtime.describe(), "ceilings": ceilings, "l2_clear_ms": clear,
                       "copy_same_bytes_gbs": copy_same_bytes,
                       "results": [asdict(m) for m in results]}, f, indent=1)
        print(f"wrote {args.json}")
    if args.plot:
        _plot(args.plot, results)
        print(f"wrote {args.plot}")
    print(_summary(results, ceilings))
    if not on_gpu:
        print("(interpreter run: these rates are not GPU timings; run on a CUDA machine to measure speed)")
    return 0
