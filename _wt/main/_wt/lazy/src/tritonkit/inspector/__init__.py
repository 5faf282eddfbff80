"""`tritonkit inspect`: what a tritonkit op compiles to, for the input you have in mind.

The inspector asks the op's catalogue entry (`tritonkit.registry`) to build the input and
call the launcher with `record_launches(execute=False)`, so it sees the very kernel,
arguments, grid and meta-parameters the op would launch. Each recorded launch is then
specialised with Triton's own code (the binder that `JITFunction.run` builds: pointers
and ints divisible by 16 get `tt.divisibility = 16`, ints equal to 1 become constants)
and compiled for the target GPU with `triton.compile`, which needs no GPU. The PTX and
`ptxas -v` give the facts: global loads and stores by instruction and width, TMA and
cp.async, tensor-core instructions, registers, spills, shared memory and occupancy.

It calls Triton internals (the binder, `JITFunction._pack_args`, `ASTSource`): verified with
the Triton range in `tritonkit._triton_version`; under another Triton it says so once and
tries, and a failure inside those internals names the version.

Python: `compile_report("add", offset=1)` returns a list of `KernelReport`.
Command line: `tritonkit inspect add --compare --offset 1 --explain` (see `--help`).
"""

from .api import available_ops, compile_report, kernel_report, record
from .arguments import _value_text  # tests compare constexpr text with it
from .cli import build_parser, main
from .compiling import parse_arch
from .hopper import occupancy
from .report import ArgInfo, KernelReport, MemOp, Occupancy
from .text import explain, format_compare, format_report

__all__ = ["ArgInfo", "KernelReport", "MemOp", "Occupancy", "available_ops", "build_parser",
           "compile_report", "explain", "format_compare", "format_report", "kernel_report", "main",
           "occupancy", "parse_arch", "record"]
