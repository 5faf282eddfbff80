"""One catalogue of the public ops, read by `tritonkit bench` and `tritonkit inspect`.

Each op has an entry module here (`registry/<op>.py` defining `ENTRY`) that says how to
build its inputs, which passes (launcher calls) it has, and which benchmark cases and
peers it is measured against. Adding an op means adding one entry module and its name
to `_ENTRY_MODULES`; neither command, nor the cross-op tests (autograd roads, alignment
fuzz), keeps a hand-written list of its own.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ._fuzz import FuzzCase

_ENTRY_MODULES = ("add", "softmax", "attention", "attention_varlen", "rms_norm", "layer_norm", "rope", "swiglu",
                  "geglu", "gated_linear", "cross_entropy", "linear_cross_entropy", "linear_logprobs", "grpo_loss",
                  "distill_loss", "moe_experts")


@dataclass
class InspectRequest:
    """What `tritonkit inspect` was asked to compile: the input the user has in mind."""
    shape: tuple[int, ...] | None = None    # None: the entry's default shape
    dtype: torch.dtype | None = None
    offset: int = 0                          # element offset of the view into its buffer
    causal: bool = False
    tma: bool | None = None                  # False: the pointer path even where TMA is allowed
    path: str | None = None                  # one of the entry's `paths` to force; None: the dispatch's choice


@dataclass
class BenchCase:
    label: str                               # "4096x4096 fp32"
    group: str                               # rows of one plot / one table section
    unit: str                                # "GB/s" or "TFLOP/s"
    work: float                              # bytes moved or flops done, for the unit above
    size: float                              # x-axis value for plots (elements, sequence length)
    # Builds the inputs on a device and returns {provider name: zero-argument callable}.
    # A provider that cannot run this case (memory, unsupported) is left out of the dict.
    setup: Callable[[torch.device], dict[str, Callable[[], Any]]]
    seed_table: bool = False                 # also print the seed's "Matrix Size" table
    bytes_in_flight: int = 0                 # inputs + outputs, to skip cases that do not fit
    memory: bool = False                     # also report each provider's peak memory beyond its inputs
    held: bool = False                       # also report what each provider's result keeps allocated
                                             # (a forward's output and what its graph saved for backward)
    # Short cases are also timed from a CUDA graph. Not a call that runs the backward of an
    # autograd graph built before it: torch fails the first capture of such a call in a process,
    # whichever op made the graph, where a call that runs its own forward first captures.
    graphed: bool = True


@dataclass
class OpEntry:
    name: str
    summary: str
    # pass name -> function(request) that builds inputs on the inspector's device and calls
    # the op's launcher(s) for that pass; the inspector records the launches it makes.
    passes: dict[str, Callable[[InspectRequest, torch.device], None]]
    # (on_gpu) -> the benchmark cases; on the CPU interpreter, tiny shapes.
    bench_cases: Callable[[bool], list[BenchCase]]
    baseline: str = "tritonkit"               # the provider the ratios are computed for
    peers: tuple[str, ...] = field(default_factory=tuple)
    # The name of the op declared to tritonkit._op (its DECLARED key), and (device) -> a small
    # set of that op's positional arguments, tensors at awkward layouts: the cross-op tests
    # (the three autograd roads, for one) run every op through these.
    op: str | None = None
    sample: Callable[[torch.device], tuple] | None = None
    # The op's pure-torch `<op>_reference(*args, upcast=...)`, taking the Op's positional
    # arguments: `tritonkit bench` without a GPU checks the sample against it (float64, and
    # torch's own error in the sample's dtype beside ours).
    reference: Callable[..., Any] | None = None
    # The alignment fuzz's cases for this op (registry/_fuzz.py, tests/test_fuzz_alignment.py).
    fuzz: tuple[FuzzCase, ...] = ()
    # The kernel families the op's dispatch chooses between ("gluon", "triton"), which
    # `tritonkit inspect --path` can force; empty for an op with one family of kernels.
    paths: tuple[str, ...] = ()


def two_pass_entry(name: str, summary: str, inspect: tuple[Callable, Callable],
                   fuzz: tuple[tuple[int, Callable], tuple[int, Callable]], **fields: Any) -> OpEntry:
    """The entry of the op declared as `name` that has a forward and a backward pass: the
    inspector's passes "fwd" and "bwd" (`inspect`), the fuzz cases "forward" and "backward"
    ((examples, draw) each); `fields`, the rest of OpEntry's."""
    return OpEntry(name=name, summary=summary, passes={"fwd": inspect[0], "bwd": inspect[1]}, op=name,
                   fuzz=(FuzzCase("forward", *fuzz[0]), FuzzCase("backward", *fuzz[1])), **fields)


def entries() -> dict[str, OpEntry]:
    found = {}
    for module_name in _ENTRY_MODULES:
        module = importlib.import_module(f"{__name__}.{module_name}")
        found[module.ENTRY.name] = module.ENTRY
    return found


def get(name: str) -> OpEntry:
    all_entries = entries()
    if name not in all_entries:
        raise ValueError(f"unknown op {name!r}; known: {', '.join(all_entries)}")
    return all_entries[name]
