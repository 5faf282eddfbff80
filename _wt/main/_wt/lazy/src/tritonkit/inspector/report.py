"""The inspector's report, as data: one `KernelReport` per compiled kernel, and its parts."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ArgInfo:
    """One kernel argument and how Triton specialised it."""
    name: str
    kind: str                       # pointer, int, float, bool, constexpr, tensor descriptor, none
    type: str                       # Triton's signature type: *fp32, i32, constexpr, tensordesc<...>
    value: str                      # the value, or for a tensor its dtype, shape and strides
    divisible_by_16: bool | None = None   # ints and pointers: got tt.divisibility = 16
    equal_to_1: bool = False              # an int argument that Triton turned into the constant 1
    bytes_past_16: int | None = None      # pointers and descriptor bases: data_ptr % 16
    element_size: int | None = None

    @property
    def specialisation(self) -> str:
        if self.kind == "pointer" or self.kind == "tensor descriptor":
            if self.bytes_past_16 is None:
                return ""
            if self.bytes_past_16 == 0:
                return "16-byte aligned (tt.divisibility=16)"
            elements = self.bytes_past_16 // (self.element_size or 1)
            return (f"NOT 16-byte aligned: {self.bytes_past_16} bytes "
                    f"({elements} element{'s' * (elements != 1)}) past a boundary")
        if self.equal_to_1:
            return "== 1, compiled in as a constant"
        if self.kind == "int":
            return "divisible by 16" if self.divisible_by_16 else "not divisible by 16"
        if self.kind == "constexpr":
            return "constexpr"
        return ""


@dataclass
class MemOp:
    """Global-memory instructions of one kind, width and argument, counted in the PTX."""
    kind: str               # load, store, atomic, cp.async, tma load, tma store, tma reduce
    instruction: str        # ld.global.v4.b32, cp.async.cg.shared.global (16 B), ...
    bits: int | None        # bits moved by one instruction for one thread (None for TMA)
    count: int              # static count of such instructions in the PTX
    args: tuple[str, ...]   # the pointer arguments the address is computed from
    lines: tuple[str, ...]  # source lines (file:line) the instructions come from


@dataclass
class LoopSync:
    """How one innermost loop of the PTX synchronises, counted in its body (static counts)."""
    label: str              # the PTX label the loop branches back to, e.g. $L__BB0_2
    lines: int              # PTX lines in the body
    cta_barriers: int       # bar.sync / barrier.sync at which every warp of the block meets
    wgmma: int              # wgmma.mma_async instructions
    wgmma_waits: tuple[int, ...]  # wgmma.wait_group N, in order: N products may stay in flight
    mbarrier_waits: int     # mbarrier try_wait loops (TMA arrivals and the like)


@dataclass
class Partition:
    """One partition of a warp-specialized (Gluon) kernel: its warps and register budget."""
    name: str               # the function the kernel's gl.warp_specialize names for it
    role: str               # "default" (the kernel's own warps) or "worker N"
    warps: int
    registers: int | None   # what setmaxnreg gives each of its threads (None: not found)


@dataclass
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    percent: float
    limited_by: str
    by_registers: int
    by_shared: int
    by_warps: int
    arithmetic: list[str]


@dataclass
class KernelReport:
    op: str
    pass_name: str
    launch: str                       # the Launch's name, e.g. "add", "softmax_bwd"
    kernel: str                       # the kernel's function name
    source: str                       # file:line of the kernel
    arch: int
    input: dict[str, Any]             # shape, dtype, offset, causal as requested
    grid: tuple[int, ...]
    num_warps: int
    num_stages: int
    num_ctas: int
    config_source: str                # "launcher", or how the autotuner's config was picked
    args: list[ArgInfo]
    constexprs: dict[str, str]
    memory: list[MemOp]
    tma: bool
    cp_async: bool
    tensor_cores: dict[str, int]      # {"wgmma": n, "mma": n}: PTX instruction counts
    sass_memory: dict[str, int]       # SASS opcodes for global/shared traffic and MMA -> count
    registers: int
    spill_stores: int                 # bytes, from ptxas -v
    spill_loads: int
    stack_bytes: int
    shared_bytes: int
    occupancy: Occupancy
    compile_seconds: float
    loops: list[LoopSync] = field(default_factory=list)   # innermost PTX loops and their sync
    language: str = "triton"          # the kernel's language: "triton" or "gluon"
    path: str | None = None           # the op's dispatch: the kernel family it chose for this pass
    path_reason: str | None = None    # ... and why (from the launcher's PathChoice)
    path_of: str | None = None        # ... for what, e.g. "attention forward"
    partitions: list[Partition] = field(default_factory=list)   # warp specialization, if any
    setmaxnreg: list[tuple[str, int]] = field(default_factory=list)   # ("inc"/"dec", registers), PTX order
    wgmma_waits: dict[int, int] = field(default_factory=dict)   # pending groups N -> wait_group N count
    mbarrier_waits: int = 0           # mbarrier try_wait instructions in the whole PTX
    asm: dict[str, Any] = field(default_factory=dict, repr=False)

    def arg(self, name: str) -> ArgInfo:
        return next(a for a in self.args if a.name == name)

    def loads(self, arg: str | None = None) -> list[MemOp]:
        return [m for m in self.memory if m.kind in ("load", "cp.async", "tma load")
                and (arg is None or arg in m.args)]

    def stores(self, arg: str | None = None) -> list[MemOp]:
        return [m for m in self.memory if m.kind in ("store", "tma store")
                and (arg is None or arg in m.args)]

    def load_widths(self, arg: str | None = None) -> set[int]:
        return {m.bits for m in self.loads(arg) if m.bits is not None}

    def ir(self, name: str) -> str:
        if name == "sass":
            from triton.tools.disasm import get_sass
            return get_sass(self.asm["cubin"])
        return self.asm[name]

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "asm"}
        data = json.loads(json.dumps(data, default=_jsonable))
        for entry, arg in zip(data["args"], self.args):
            entry["specialisation"] = arg.specialisation
        return data


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return str(value)
