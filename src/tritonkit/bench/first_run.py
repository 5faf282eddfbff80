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

import sys
import time

import torch

from .. import _runtime
from .._progress import Progress, duration
from ..registry import OpEntry, entries
from ..registry._accuracy import check_sample, relative_error


def _shape(t: torch.Tensor) -> str:
    return "x".join(map(str, t.shape)) or "scalar"


_HEAD = ("op", "result", "dtype", "shape", "tritonkit error", "torch error")
_WIDTHS = (22, 15, 10, 14, 17, 13)

# What checking one op through the interpreter costs, relative to a row op: attention's sample
# runs forward and backward kernels over several key blocks. Only the estimates of time left
# read these.
_WEIGHT = {"attention": 8, "attention_varlen": 8}
# `tritonkit bench` of every op on an idle 2-core machine: the checks, then one small compile.
_IDLE_SECONDS = 10


def _row(cells: tuple[str, ...]) -> str:
    return "".join(c.ljust(w) if i < 4 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, _WIDTHS)))


def accuracy_rows(name: str, entry: OpEntry, device: torch.device) -> list[str]:
    """The table's rows for one op: each output and gradient's error, ours and torch's."""
    torch.manual_seed(0)
    return [_row((name if i == 0 else "", c.what, str(c.ours.dtype).removeprefix("torch."), _shape(c.ours),
                  f"{relative_error(c.ours, c.reference):.1e}", f"{relative_error(c.torch, c.reference):.1e}"))
            for i, c in enumerate(check_sample(entry, device))]


def print_accuracy_table(selected: dict[str, OpEntry], device: torch.device) -> list[str]:
    """Print the table of errors op by op as each is checked; return the ops left out (with why)."""
    checked = {name: entry for name, entry in selected.items()
               if entry.op is not None and entry.sample is not None and entry.reference is not None}
    left_out = [f"{name} (its registry entry has no "
                f"{', '.join(f for f in ('op', 'sample', 'reference') if getattr(entry, f) is None)})"
                for name, entry in selected.items() if name not in checked]
    weights = {name: _WEIGHT.get(name, 1) for name in checked}
    print(_row(_HEAD))
    with Progress(sum(weights.values()), stream=sys.stdout) as progress:
        for name, entry in checked.items():
            with progress.step(f"checking {name}", weights[name]):
                rows = accuracy_rows(name, entry, device)
            progress.say("\n".join(rows))
    return left_out


def inspect_sample(names: list[str]) -> str:
    """`tritonkit inspect add --compare --offset 1` when add is selected (what a misaligned
    view does to the loads), else the first selected op's first pass at its default input."""
    from ..inspector import compile_report, format_compare, format_report

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
    share = sum(_WEIGHT.get(n, 1) for n in selected) / sum(_WEIGHT.get(n, 1) for n in entries())
    print(f"It takes about {duration(max(_IDLE_SECONDS * share, 5))} on an idle 2-core machine, longer on a "
          "busy one; each op's\nrows appear as it is checked.\n")
    print("1. Each op on a small sample at an awkward layout (strided, transposed, broadcast), through\n"
          "   the interpreter: relative error ||ours - ref|| / ||ref|| against a float64 reference,\n"
          "   beside torch's own error in the same dtype (ours should be of the same order).\n")
    left_out = print_accuracy_table(selected, device)
    if left_out:
        print("not checked: " + "; ".join(left_out))
    print("\n2. What a kernel compiles to, for sm_90 (H100/H200), compiled here on the CPU:\n", flush=True)
    try:
        with Progress(1, stream=sys.stdout) as progress, progress.step("compiling a kernel for sm_90"):
            sample = inspect_sample(list(selected))
        print(sample)
    except Exception as err:  # ptxas missing, say: the checks above still stand
        print(f"(the inspector could not compile here: {type(err).__name__}: {str(err).splitlines()[0][:120]})")
    print("\n   More: tritonkit inspect --help (docs/inspect.md).")
    print(f"\n3. Speed needs a CUDA GPU: there `tritonkit bench` times every op beside its peers "
          f"(docs/bench.md).\n\n(done in {time.perf_counter() - start:.0f} s)")
    return 0
