"""`tritonkit bench` without a CUDA device: what can be learned on a CPU.

Timings of the interpreter say nothing about a GPU, so instead of them this prints
1. every selected op's registry sample run through Triton's interpreter, each output and
   gradient checked against the op's float64 reference, with torch's own error in the same
   dtype beside ours (`registry._accuracy.check_sample`);
2. a sample of `tritonkit inspect`: a kernel compiled for sm_90 on the CPU;
3. one line saying that speed needs a CUDA GPU.
Ops come from the registry: an entry with `op`, `sample` and `reference` is checked.
"""

from __future__ import annotations

import time

import torch

from .. import _runtime
from ..registry import OpEntry
from ..registry._accuracy import check_sample, relative_error


def _shape(t: torch.Tensor) -> str:
    return "x".join(map(str, t.shape)) or "scalar"


def accuracy_table(selected: dict[str, OpEntry], device: torch.device) -> tuple[str, list[str]]:
    """The table of errors, and the ops left out (with why)."""
    rows, left_out = [], []
    for name, entry in selected.items():
        if entry.op is None or entry.sample is None or entry.reference is None:
            missing = [f for f in ("op", "sample", "reference") if getattr(entry, f) is None]
            left_out.append(f"{name} (its registry entry has no {', '.join(missing)})")
            continue
        torch.manual_seed(0)
        for i, c in enumerate(check_sample(entry, device)):
            rows.append((name if i == 0 else "", c.what, str(c.ours.dtype).removeprefix("torch."), _shape(c.ours),
                         f"{relative_error(c.ours, c.reference):.1e}", f"{relative_error(c.torch, c.reference):.1e}"))
    head = ("op", "result", "dtype", "shape", "tritonkit error", "torch error")
    widths = [max(len(r[i]) for r in [head, *rows]) + 2 for i in range(len(head))]
    lines = ["".join(cell.ljust(w) if i < 4 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
             for r in [head, *rows]]
    return "\n".join(lines), left_out


def inspect_sample(names: list[str]) -> str:
    """`tritonkit inspect add --compare --offset 1` when add is selected (what a misaligned
    view does to the loads), else the first selected op's first pass at its default input."""
    from ..inspector import compile_report, format_compare, format_report
    from ..registry import entries

    if "add" in names:
        command = "tritonkit inspect add --compare --offset 1"
        aligned, offset = compile_report("add", offset=0), compile_report("add", offset=1)
        body = format_compare(aligned, offset, "offset 0 (aligned)", "offset 1") + (
            "\n(a view one element past a 16-byte boundary gets its own compiled variant, with 32-bit\n"
            " loads where the aligned one has 128-bit ones: correct, only more memory instructions)")
    else:
        name = names[0]
        pass_ = next(iter(entries()[name].passes))
        command = f"tritonkit inspect {name} --pass {pass_}"
        body = "\n\n".join(format_report(r) for r in compile_report(name, pass_=pass_))
    return f"$ {command}\n{body}"


def main(selected: dict[str, OpEntry]) -> int:
    device = _runtime.default_device()
    start = time.perf_counter()
    print("tritonkit bench: no CUDA device here, so no speed to measure. Kernels run through Triton's\n"
          "interpreter on the CPU instead, which shows whether they compute the right thing, and the\n"
          "compiler shows what they would run on a Hopper GPU.\n")
    print("1. Each op on a small sample at an awkward layout (strided, transposed, broadcast), through\n"
          "   the interpreter: relative error ||ours - ref|| / ||ref|| against a float64 reference,\n"
          "   beside torch's own error in the same dtype (ours should be of the same order).\n")
    table, left_out = accuracy_table(selected, device)
    print(table)
    if left_out:
        print("not checked: " + "; ".join(left_out))
    print("\n2. What a kernel compiles to, for sm_90 (H100/H200), compiled here on the CPU:\n")
    try:
        print(inspect_sample(list(selected)))
    except Exception as err:  # ptxas missing, say: the checks above still stand
        print(f"(the inspector could not compile here: {type(err).__name__}: {str(err).splitlines()[0][:120]})")
    print("\n   More: tritonkit inspect --help (docs/inspect.md).")
    print(f"\n3. Speed needs a CUDA GPU: there `tritonkit bench` times every op beside its peers "
          f"(docs/bench.md).\n\n(done in {time.perf_counter() - start:.0f} s)")
    return 0
