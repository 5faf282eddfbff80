"""The command `tritonkit inspect`: its arguments and what it prints."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from .. import _runtime
from .._triton_version import UnsupportedTriton
from .api import available_ops, compile_report
from .compiling import parse_arch
from .report import KernelReport
from .text import explain, format_compare, format_report

EMIT_CHOICES = ("ttir", "ttgir", "llir", "ptx", "sass")


def _parse_shape(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(s) for s in re.split(r"[,x× ]+", text.strip()) if s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape {text!r}: expected sizes like 4096,4096") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tritonkit inspect",
        description="Compile the kernel(s) a tritonkit op would launch for an input, with the "
                    "launcher's specialisation, and show what they became. Needs no GPU.")
    parser.add_argument("op", nargs="?", help="op name from the catalogue (add, softmax, attention, ...)")
    parser.add_argument("--pass", dest="pass_", default="all", help="fwd, bwd or all (default all)")
    parser.add_argument("--shape", type=_parse_shape, default=None, help="input shape, e.g. 4096,4096")
    parser.add_argument("--dtype", default=None, help="fp32, fp16 or bf16 (default: the op's)")
    parser.add_argument("--offset", type=int, default=0,
                        help="make the input a view N elements into its buffer (N=1: misaligned)")
    parser.add_argument("--causal", action="store_true", help="causal masking (attention)")
    parser.add_argument("--no-tma", dest="tma", action="store_false", default=None,
                        help="the pointer path even where the op could use tensor descriptors (attention fwd and bwd)")
    parser.add_argument("--path", choices=("gluon", "triton"), default=None,
                        help="force this family of kernels (attention: the Gluon kernels or the Triton ones); "
                             "default: what the op's dispatch chooses for this input on the target")
    parser.add_argument("--arch", default=None, help="target, e.g. sm_90 (default: this GPU, else sm_90)")
    parser.add_argument("--emit", choices=EMIT_CHOICES, help="print this IR of each kernel")
    parser.add_argument("--json", action="store_true", help="print the facts as JSON")
    parser.add_argument("--explain", action="store_true", help="add plain sentences about what it means")
    parser.add_argument("--compare", action="store_true",
                        help="compile the aligned input (offset 0) beside --offset N (default N=1)")
    parser.add_argument("--list", action="store_true", help="list the ops and passes that can be inspected")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    opts = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if opts.list or not opts.op:
        for name, entry in available_ops().items():
            print(f"{name:<12} passes: {', '.join(entry.passes):<10} {entry.summary}")
        return 0 if opts.list else 2
    try:
        arch = parse_arch(opts.arch)
        common = dict(pass_=opts.pass_, shape=opts.shape, dtype=opts.dtype, causal=opts.causal, arch=arch,
                      tma=opts.tma, path=opts.path, progress=True)
        if opts.compare:
            offset = opts.offset or 1
            left = compile_report(opts.op, offset=0, **common)
            right = compile_report(opts.op, offset=offset, **common)
        else:
            offset = opts.offset
            left, right = [], compile_report(opts.op, offset=offset, **common)
    except (ValueError, TypeError, UnsupportedTriton) as err:
        print(f"tritonkit inspect: {err}", file=sys.stderr)
        return 2

    if opts.json:
        data: dict[str, Any] = {"op": opts.op, "arch": f"sm_{arch}", "interpreted": _runtime.INTERPRETED,
                                "paths": [{"pass": name, "what": what, "path": path, "reason": reason}
                                          for (name, what), (path, reason) in _paths(right).items()]}
        if opts.compare:
            data["compare"] = {"offset 0": [r.to_dict() for r in left],
                               f"offset {offset}": [r.to_dict() for r in right]}
            if opts.explain:
                data["explain"] = [explain(b, a) for a, b in zip(left, right)]
        else:
            data["kernels"] = [r.to_dict() for r in right]
            if opts.explain:
                data["explain"] = [explain(r) for r in right]
        print(json.dumps(data, indent=1))
        return 0

    print(_heading(opts, arch, offset, right))
    if opts.compare:
        print()
        print(format_compare(left, right, "offset 0 (aligned)", f"offset {offset}"))
        if opts.explain:
            for a, b in zip(left, right):
                print(f"\nWhat it means for {b.kernel} (offset {offset}):")
                print("\n".join(f"  - {s}" for s in explain(b, a)))
    else:
        for report in right:
            print()
            print(format_report(report))
            if opts.explain:
                print("  what it means:")
                print("\n".join(f"    - {s}" for s in explain(report)))
    if opts.emit:
        for report in (left + right) if opts.compare else right:
            print(f"\n// ----- {report.kernel} ({report.op} {report.pass_name}, "
                  f"input offset {report.input.get('offset')}): {opts.emit} -----")
            print(report.ir(opts.emit))
    return 0


def _heading(opts: argparse.Namespace, arch: int, offset: int, reports: list[KernelReport]) -> str:
    first = next((a for r in reports for a in r.args if a.kind in ("pointer", "tensor descriptor")), None)
    if opts.shape or opts.dtype or first is None:
        shape = "x".join(map(str, opts.shape)) if opts.shape else "default shape"
        what = [shape, opts.dtype or "default dtype"]
    else:                                   # the entry's defaults: say what they were
        what = [f"input {first.name}: {first.value.split(' offset')[0].split(' block')[0]}"]
    parts = [f"tritonkit inspect {opts.op}", f"pass {opts.pass_}", *what]
    if opts.compare:
        parts.append(f"offset 0 vs offset {offset}")
    elif offset:
        parts.append(f"offset {offset}")
    if opts.causal:
        parts.append("causal")
    if opts.tma is False:
        parts.append("pointer path (--no-tma)")
    if opts.path:
        parts.append(f"--path {opts.path}")
    where = "compiled on the CPU, no GPU used" if _runtime.INTERPRETED else _runtime.describe()
    lines = [" · ".join(parts), f"target sm_{arch} ({where})"]
    lines += [f"path ({name}, {what}): {path}: {reason}" for (name, what), (path, reason) in _paths(reports).items()]
    return "\n".join(lines)


def _paths(reports: list[KernelReport]) -> dict[tuple[str, str], tuple[str, str]]:
    """(pass, what) -> (path, reason): each dispatch choice the reports were made under."""
    return {(r.pass_name, r.path_of): (r.path, r.path_reason) for r in reports if r.path}
