"""`tritonkit inspect`: what a tritonkit op compiles to, for the input you have in mind.

The inspector asks the op's catalogue entry (`tritonkit.registry`) to build the input and
call the launcher with `record_launches(execute=False)`, so it sees the very kernel,
arguments, grid and meta-parameters the op would launch. Each recorded launch is then
specialised with Triton's own code (the binder that `JITFunction.run` builds: pointers
and ints divisible by 16 get `tt.divisibility = 16`, ints equal to 1 become constants)
and compiled for the target GPU with `triton.compile`, which needs no GPU. The PTX and
`ptxas -v` give the facts: global loads and stores by instruction and width, TMA and
cp.async, tensor-core instructions, registers, spills, shared memory and occupancy.

Python: `compile_report("add", offset=1)` returns a list of `KernelReport`.
Command line: `tritonkit inspect add --compare --offset 1 --explain` (see `--help`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from . import _runtime
from ._launch import Launch, record_launches

# Limits of one Hopper SM (H100 and H200 alike; CUDA occupancy calculator, compute capability 9.0).
REGISTERS_PER_SM = 65536
REGISTER_SUBPARTITIONS = 4            # the register file is split between the SM's 4 schedulers
REGISTER_UNIT = 256                   # registers are handed to a warp in units of 256
SHARED_PER_SM = 228 * 1024
SHARED_PER_BLOCK = 227 * 1024
SHARED_RESERVED_PER_BLOCK = 1024      # the driver keeps 1 KB of each block's shared memory
SHARED_UNIT = 128
MAX_WARPS_PER_SM = 64
MAX_BLOCKS_PER_SM = 32
H200_SMS = 132

EMIT_CHOICES = ("ttir", "ttgir", "llir", "ptx", "sass")
_DTYPES = {"fp32": torch.float32, "float32": torch.float32, "fp16": torch.float16,
           "float16": torch.float16, "half": torch.float16, "bf16": torch.bfloat16,
           "bfloat16": torch.bfloat16}


# ---------------------------------------------------------------------------------------
# The report, as data
# ---------------------------------------------------------------------------------------

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
    kind: str               # load, store, atomic, cp.async, tma load, tma store
    instruction: str        # ld.global.v4.b32, cp.async.cg.shared.global (16 B), ...
    bits: int | None        # bits moved by one instruction for one thread (None for TMA)
    count: int              # static count of such instructions in the PTX
    args: tuple[str, ...]   # the pointer arguments the address is computed from
    lines: tuple[str, ...]  # source lines (file:line) the instructions come from


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


# ---------------------------------------------------------------------------------------
# From a recorded Launch to Triton's compile inputs
# ---------------------------------------------------------------------------------------

def parse_arch(arch: str | int | None) -> int:
    """sm_90, sm90, sm_90a, 90 -> 90; None -> the local GPU's arch, else 90 (H100/H200)."""
    if arch is None:
        if not _runtime.INTERPRETED and torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return major * 10 + minor
        return 90
    if isinstance(arch, int):
        return arch
    match = re.fullmatch(r"(?:sm_?)?(\d+)a?", arch.strip().lower())
    if not match:
        raise ValueError(f"--arch {arch!r}: expected a form like sm_90")
    return int(match.group(1))


@functools.lru_cache(maxsize=None)
def _backend(arch: int):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    target = GPUTarget("cuda", arch, 32)
    return target, make_backend(target)


_compilable_cache: dict[Any, Any] = {}


def _compilable(obj: Any) -> Any:
    """The JITFunction Triton compiles for `obj`, which may be an interpreted kernel.

    Without a GPU, `@triton.jit` gives InterpretedFunctions; this rebuilds a JITFunction
    from the same Python function with the same options (once per function).
    """
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    if not isinstance(obj, InterpretedFunction):
        return obj
    if obj.fn not in _compilable_cache:
        _compilable_cache[obj.fn] = JITFunction(obj.fn, **obj.kwargs)
    return _compilable_cache[obj.fn]


@contextlib.contextmanager
def _jit_functions_visible(module_names: tuple[str, ...]):
    """While compiling, give the compiler the Triton language it expects.

    Under the interpreter two things stand in its way, and both are undone here for the
    duration of the compile, then put back exactly as they were found:
    - Triton's own library (tl.max, tl.sum, ...), tensor methods (x.sum()) and tritonkit's
      helper functions are InterpretedFunctions, which the compiler cannot call: they are
      swapped for the JITFunctions of `_compilable`.
    - Triton 3.6's interpreter leaves some of its patches of `triton.language.core` in
      place after a kernel that calls a @jit helper has run (a nested call patches the
      module and never restores it): those are replaced by the originals they wrap, or
      by the same name in `triton.language`.
    Nothing changes when kernels are compiled for a real GPU (no interpreter is involved).
    """
    import triton.language as tl
    from triton.language import core
    from triton.runtime.interpreter import InterpretedFunction

    swapped: list[tuple[Any, str, Any]] = []

    def swap(owner: Any, name: str, value: Any) -> None:
        swapped.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    with _swap_lock:
        try:
            modules = [m for n, m in list(sys.modules.items())
                       if m is not None and n.startswith(module_names)]
            owners = modules + [core.tensor, core.dtype, core.tensor_descriptor_base]
            for owner in owners:
                for name, value in list(vars(owner).items()):
                    if isinstance(value, InterpretedFunction):
                        swap(owner, name, _compilable(value))
                    elif _interpreter_leftover(name, value):
                        original = _original_of(name, value, tl)
                        if original is not None:
                            swap(owner, name, original)
            for name, value in list(vars(core.tensor).items()):
                cells = getattr(value, "__closure__", None) or ()
                target = next((c.cell_contents for c in cells
                               if isinstance(c.cell_contents, InterpretedFunction)), None)
                if target is not None:         # a tensor method forwarding to a jit function
                    swap(core.tensor, name, _compilable(target))
            yield
        finally:
            for owner, name, value in reversed(swapped):
                setattr(owner, name, value)


def _interpreter_leftover(name: str, value: Any) -> bool:
    if name == "static_print" and value is print:
        return True
    fn = value.func if isinstance(value, functools.partial) else value
    return (callable(fn) and not isinstance(fn, type)
            and getattr(fn, "__module__", None) == "triton.runtime.interpreter")


def _original_of(name: str, value: Any, tl: Any) -> Any:
    """What an interpreter patch replaced: the builtin it wraps, else tl's own `name`."""
    while (getattr(value, "__kwdefaults__", None) or {}).get("member") is not None:
        value = value.__kwdefaults__["member"]
        if not _interpreter_leftover(name, value):
            return value
    fallback = getattr(tl, name, None)
    return None if fallback is None or _interpreter_leftover(name, fallback) else fallback


_swap_lock = threading.RLock()


@dataclass
class _Resolved:
    jit: Any                  # the JITFunction to compile
    kwargs: dict[str, Any]    # constexprs and launch options, as JITFunction.run receives them
    config_source: str
    grid: tuple[int, ...]


def _resolve(launch: Launch) -> _Resolved:
    """Walk autotune/heuristics wrappers the way their run() methods would."""
    from triton.runtime.autotuner import Autotuner, Heuristics

    kernel = launch.kernel
    kwargs = dict(launch.constexprs, **launch.launch_options())
    source = "launcher"
    while isinstance(kernel, (Autotuner, Heuristics)):
        named = dict(zip(kernel.arg_names, launch.args))
        if isinstance(kernel, Heuristics):
            for name, rule in kernel.values.items():
                kwargs[name] = rule({**named, **kwargs})
        else:
            config, source = _autotune_choice(kernel, launch.args, kwargs)
            if config.pre_hook is not None:   # e.g. sets a tensor descriptor's block shape
                config.pre_hook({**named, **kwargs, **config.all_kwargs()})
            kwargs.update(config.all_kwargs())
        kernel = kernel.fn
    grid = launch.grid
    if callable(grid):
        named = dict(zip(kernel.arg_names, launch.args))
        grid = grid({**named, **kwargs})
    grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
    return _Resolved(_compilable(kernel), kwargs, source, grid)


def _autotune_choice(tuner: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[Any, str]:
    """The config Autotuner.run would use: its cached choice, else the first candidate."""
    n = len(tuner.configs)
    if n == 1:
        return tuner.configs[0], "autotune: its only config"
    named = dict(zip(tuner.arg_names, args))
    everything = {**named, **kwargs}
    key = [everything[k] for k in tuner.keys if k in everything]
    key += [str(v.dtype) for k, v in everything.items() if k in tuner.arg_names and hasattr(v, "dtype")]
    key = tuple(key)
    cached = tuner.cache.get(key)
    if cached is not None:
        return cached, f"autotune: the config this process already tuned for key {key}"
    tuner.nargs = named
    try:
        candidates = tuner.prune_configs(kwargs)
    finally:
        tuner.nargs = None
    if tuner.cache_results and _read_tuning_cache(tuner, key, candidates):
        return tuner.cache[key], f"autotune: the config an earlier run tuned and cached on disk for key {key}"
    note = f"{len(candidates)} left after pruning" if len(candidates) != n else "none pruned"
    return candidates[0], (f"autotune: NOT benchmarked here; the first of {n} configs ({note}); "
                           "a tuned run may pick another")


class _NotTunedYet(Exception):
    pass


def _read_tuning_cache(tuner: Any, key: tuple, candidates: list) -> bool:
    """Triton's own on-disk tuning cache (Autotuner.check_disk_cache), read without tuning:
    the benchmark it would run on a miss raises instead. Needs the GPU driver; without one,
    or on a miss, there is nothing to read."""
    def refuse_to_benchmark():
        raise _NotTunedYet

    try:
        return bool(tuner.check_disk_cache(key, candidates, refuse_to_benchmark))
    except Exception:       # a miss, no driver (CPU), or a config with a pre-hook: not cached
        return False


def _specialise(resolved: _Resolved, args: tuple, arch: int):
    """Triton's own specialisation of these arguments: the binder JITFunction.run uses."""
    from triton import knobs
    from triton.runtime.jit import create_function_from_signature

    jit = resolved.jit
    target, backend = _backend(arch)
    binder = create_function_from_signature(jit.signature, jit.params, backend)
    kwargs = dict(resolved.kwargs)
    kwargs["debug"] = kwargs.get("debug", jit.debug) or knobs.runtime.debug
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound, specialization, options)
    return bound, specialization, options, signature, constexprs, attrs


# ---------------------------------------------------------------------------------------
# Compiling and reading the result
# ---------------------------------------------------------------------------------------

@dataclass
class _Compiled:
    asm: dict[str, Any]
    metadata: Any
    memory: list[MemOp]
    tensor_cores: dict[str, int]
    sass_memory: dict[str, int]
    ptxas: dict[str, int]
    seconds: float


_compiled_cache: dict[tuple, _Compiled] = {}


def _compile(jit, signature, constexprs, attrs, options, arch: int) -> _Compiled:
    import triton
    from triton.compiler import ASTSource

    target, _ = _backend(arch)
    src = ASTSource(jit, signature, constexprs, attrs)
    with _jit_functions_visible(("triton.language", "tritonkit", jit.fn.__module__)):
        key = (src.hash(), options.hash(), arch)
        if key in _compiled_cache:
            return _compiled_cache[key]
        start = time.perf_counter()
        kernel = triton.compile(src, target=target, options=options.__dict__)
    asm = dict(kernel.asm)
    ptx = asm["ptx"]
    _compiled_cache[key] = _Compiled(
        asm=asm, metadata=kernel.metadata,
        memory=_memory_ops(ptx, _ttgir_arg_names(asm["ttgir"])),
        tensor_cores={"wgmma": len(re.findall(r"\bwgmma\.mma_async", ptx)),
                      "mma": len(re.findall(r"\bmma\.sync", ptx))},
        sass_memory=_sass_counts(asm["cubin"]),
        ptxas=_ptxas_usage(ptx, arch, options),
        seconds=time.perf_counter() - start,
    )
    return _compiled_cache[key]


def _ttgir_arg_names(ttgir: str) -> list[tuple[str, str]]:
    """(name, MLIR type) of the compiled function's arguments, in PTX parameter order.

    Triton names each argument by a location; a tensor descriptor becomes several
    arguments that all carry the descriptor's name.
    """
    header = re.search(r"tt\.func public @\w+\((.*)\) attributes", ttgir)
    if not header:
        return []
    return [(name, ty) for ty, name in
            re.findall(r"%[\w.$-]+: (.*?)(?: \{[^{}]*\})? loc\(\"([^\"]+)\"\(#loc\d*\)\)", header.group(1))]


_INSTRUCTION = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.:]*)\s+([^;]*);", re.M)
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+", re.M)
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]+)"', re.M)
_TYPE_BITS = re.compile(r"^[bfus](\d+)$")


def _split_operands(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def _memory_kind(opcode: str) -> str | None:
    if opcode.startswith("cp.async.bulk.tensor"):
        return "tma store" if ".global.shared" in opcode else "tma load"
    if opcode.startswith("cp.reduce.async.bulk.tensor"):
        return "tma store"
    if opcode.startswith("cp.async.") and ".global" in opcode and "bulk" not in opcode:
        return "cp.async"
    if opcode.startswith("ld.global"):
        return "load"
    if opcode.startswith("st.global"):
        return "store"
    if opcode.startswith(("atom.global", "red.global")):
        return "atomic"
    return None


def _memory_ops(ptx: str, arg_names: list[tuple[str, str]]) -> list[MemOp]:
    """Every global memory instruction in the PTX, grouped by kind, width and argument.

    Each address register is traced back through the instructions that define it to the
    kernel parameters it comes from; values loaded from memory end the trace (an index
    read from memory is data, not where the pointer came from).
    """
    files = dict(_FILE.findall(ptx))
    defs: dict[str, list[str]] = {}
    events = []                                  # (position, kind, opcode, operands)
    for match in _INSTRUCTION.finditer(ptx):
        opcode, operands = match.group(1), _split_operands(match.group(2))
        kind = _memory_kind(opcode)
        if kind is not None:
            events.append((match.start(), kind, opcode, operands))
        if not operands or opcode.startswith(("st.", "bra", "red.", "cp.", "bar", "fence", "ret", "wgmma.fence")):
            continue
        dests = re.findall(r"%[\w]+", operands[0])
        sources = [] if opcode.startswith(("ld.global", "ld.shared", "atom.")) else \
            re.findall(r"%\w+|\w+_param_\d+", " ".join(operands[1:]))
        for dest in dests:
            defs.setdefault(dest, []).extend(sources)

    params_of: dict[str, frozenset[int]] = {}

    def trace(token: str) -> frozenset[int]:
        found = re.search(r"_param_(\d+)$", token)
        if found:
            return frozenset({int(found.group(1))})
        if token in params_of:
            return params_of[token]
        params_of[token] = frozenset()            # breaks loops through phi moves
        result: set[int] = set()
        for source in defs.get(token, ()):
            result |= trace(source)
        params_of[token] = frozenset(result)
        return params_of[token]

    pointer_params = {i for i, (_, ty) in enumerate(arg_names) if "!tt.ptr" in ty or "tensordesc" in ty}
    locs = [(m.start(), files.get(m.group(1), "?"), int(m.group(2))) for m in _LOC.finditer(ptx)]
    grouped: dict[tuple, list[str]] = {}
    for position, kind, opcode, operands in events:
        addresses = [op for op in operands if op.startswith("[")]
        if kind == "tma load":
            addresses = addresses[1:2]
        elif kind == "tma store":
            addresses = addresses[:1]
        elif kind == "cp.async":
            addresses = addresses[1:2]
        params: set[int] = set()
        for address in addresses:
            for register in re.findall(r"%\w+|\w+_param_\d+", address):
                params |= trace(register)
        names = tuple(sorted({arg_names[p][0] for p in params & pointer_params if p < len(arg_names)}))
        instruction, bits = _instruction_width(kind, opcode, operands)
        line = _line_before(locs, position)
        grouped.setdefault((kind, instruction, bits, names), []).append(line)
    return [MemOp(kind, instruction, bits, len(lines), names,
                  tuple(sorted({l for l in lines if l}, key=_line_sort_key)))
            for (kind, instruction, bits, names), lines in grouped.items()]


def _instruction_width(kind: str, opcode: str, operands: list[str]) -> tuple[str, int | None]:
    # Cache and eviction hints (.L1::evict_last, .L2::cache_hint) do not change the width.
    parts = [p for p in opcode.split(".") if "::" not in p and not p.startswith("L2")]
    if kind == "cp.async":
        size = next((int(op, 0) for op in operands[2:3] if re.fullmatch(r"0x[0-9a-f]+|\d+", op)), None)
        return f"{'.'.join(parts)} ({size} B)", size * 8 if size else None
    if kind.startswith("tma"):
        return ".".join(parts[:4]), None
    vector = next((int(p[1:]) for p in parts if re.fullmatch(r"v\d+", p)), 1)
    bits = next((int(m.group(1)) for p in parts if (m := _TYPE_BITS.match(p))), None)
    return ".".join(parts), vector * bits if bits else None


def _line_before(locs: list[tuple[int, str, int]], position: int) -> str:
    best = ""
    for start, path, line in locs:
        if start > position:
            break
        if line:
            best = f"{os.path.basename(path)}:{line}"
    return best


def _line_sort_key(text: str) -> tuple[str, int]:
    name, _, line = text.rpartition(":")
    return name, int(line) if line.isdigit() else 0


_SASS_OPS = re.compile(r"\b(LDGSTS|LDG|STG|UTMALDG|UTMASTG|UBLKCP|ATOMG|REDG|RED|HGMMA|HMMA|LDSM|LDL|STL)"
                       r"((?:\.[A-Za-z0-9_]+)*)(?=[\s;])")


_SASS_WIDTH = re.compile(r"E|128|64|U8|S8|U16|S16")


def _sass_counts(cubin: bytes) -> dict[str, int]:
    """Global/local memory and tensor-core SASS instructions, by opcode and width suffix."""
    from triton.tools.disasm import get_sass
    try:
        sass = get_sass(cubin)
    except (OSError, subprocess.CalledProcessError):
        return {}
    counts: Counter[str] = Counter()
    for line in sass.splitlines():
        match = _SASS_OPS.search(line.split(";")[0])
        if match:
            suffixes = match.group(2).split(".")[1:]
            if match.group(1) in ("HGMMA", "HMMA"):      # keep the tile shape: HGMMA.64x128x16
                widths = suffixes[:1]
            else:
                widths = [s for s in suffixes if _SASS_WIDTH.fullmatch(s)]
            counts[".".join([match.group(1), *widths])] += 1
    return dict(sorted(counts.items()))


def _ptxas_usage(ptx: str, arch: int, options: Any) -> dict[str, int]:
    """Registers, spills, stack and barriers from `ptxas -v`, run the way Triton runs it."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability
    ptxas = get_ptxas(arch).path
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "kernel.ptx")
        with open(source, "w") as handle:
            handle.write(ptx)
        extra = options.ptx_options.split(" ") if options.ptx_options else []
        result = subprocess.run([ptxas, "-lineinfo", "-v", *extra, f"--gpu-name={sm_arch_from_capability(arch)}",
                                 source, "-o", os.path.join(tmp, "kernel.o")],
                                capture_output=True, text=True, check=False)
    log = result.stdout + result.stderr

    def number(pattern: str) -> int:
        found = re.search(pattern, log)
        return int(found.group(1)) if found else 0

    return {"registers": number(r"Used (\d+) registers"),
            "stack": number(r"(\d+) bytes stack frame"),
            "spill_stores": number(r"(\d+) bytes spill stores"),
            "spill_loads": number(r"(\d+) bytes spill loads")}


def occupancy(registers: int, shared: int, num_warps: int) -> Occupancy:
    """Blocks of this kernel that fit on one Hopper SM at once, with the arithmetic."""
    regs_per_warp = -(-max(registers, 1) * 32 // REGISTER_UNIT) * REGISTER_UNIT
    warps_per_partition = (REGISTERS_PER_SM // REGISTER_SUBPARTITIONS) // regs_per_warp
    by_registers = warps_per_partition * REGISTER_SUBPARTITIONS // num_warps
    shared_per_block = -(-shared // SHARED_UNIT) * SHARED_UNIT + SHARED_RESERVED_PER_BLOCK
    by_shared = SHARED_PER_SM // shared_per_block if shared <= SHARED_PER_BLOCK else 0
    by_warps = MAX_WARPS_PER_SM // num_warps
    limits = {"warps": by_warps, "registers": by_registers, "shared memory": by_shared,
              "the 32-block cap": MAX_BLOCKS_PER_SM}
    blocks = min(limits.values())
    limited_by = min(limits, key=limits.get) if blocks < MAX_BLOCKS_PER_SM else "the 32-block cap"
    warps = blocks * num_warps
    arithmetic = [
        f"registers: {registers}/thread x 32 = {registers * 32}/warp, rounded up to {regs_per_warp} "
        f"(units of {REGISTER_UNIT}); each of 4 quarters of the SM holds "
        f"{REGISTERS_PER_SM // REGISTER_SUBPARTITIONS} // {regs_per_warp} = {warps_per_partition} warps, "
        f"so {warps_per_partition * REGISTER_SUBPARTITIONS} warps // {num_warps} per block = {by_registers} blocks",
        (f"shared memory: {shared} B/block, rounded to {SHARED_UNIT} B, + 1 KB reserved = {shared_per_block} B; "
         f"{SHARED_PER_SM} // {shared_per_block} = {by_shared} blocks")
        if shared <= SHARED_PER_BLOCK else
        f"shared memory: {shared} B/block is more than the {SHARED_PER_BLOCK} B a block may have: cannot launch",
        f"warps: {MAX_WARPS_PER_SM} // {num_warps} = {by_warps} blocks; at most {MAX_BLOCKS_PER_SM} blocks per SM",
        f"=> {blocks} blocks x {num_warps} warps = {warps} of {MAX_WARPS_PER_SM} warps "
        f"= {100 * warps / MAX_WARPS_PER_SM:.0f}% occupancy, limited by {limited_by}",
    ]
    return Occupancy(blocks, warps, 100 * warps / MAX_WARPS_PER_SM, limited_by,
                     by_registers, by_shared, by_warps, arithmetic)


# ---------------------------------------------------------------------------------------
# Arguments as Triton saw them
# ---------------------------------------------------------------------------------------

def _describe_args(jit, bound: dict[str, Any], specialization: list) -> list[ArgInfo]:
    infos = []
    for param, (name, value), (ty, attr) in zip(jit.params, bound.items(), specialization):
        infos.append(_describe_arg(name, value, ty, attr, param.is_constexpr))
    return infos


def _describe_arg(name: str, value: Any, ty: Any, attr: Any, declared_constexpr: bool) -> ArgInfo:
    if isinstance(value, torch.Tensor):
        return ArgInfo(name, "pointer", str(ty), _tensor_text(value),
                       divisible_by_16=attr == "D", bytes_past_16=value.data_ptr() % 16,
                       element_size=value.element_size())
    if hasattr(value, "base") and hasattr(value, "block_shape"):          # TensorDescriptor
        base = value.base
        return ArgInfo(name, "tensor descriptor", str(ty),
                       f"{_tensor_text(base)} block {list(value.block_shape)}",
                       bytes_past_16=base.data_ptr() % 16, element_size=base.element_size())
    if declared_constexpr:
        return ArgInfo(name, "constexpr", "constexpr", _value_text(value))
    if ty == "constexpr":                    # an int equal to 1, or None
        return ArgInfo(name, "int" if value is not None else "none", "constexpr", _value_text(value),
                       equal_to_1=value == 1)
    if isinstance(value, bool):
        return ArgInfo(name, "bool", str(ty), str(value))
    if isinstance(value, int):
        return ArgInfo(name, "int", str(ty), str(value), divisible_by_16=attr == "D")
    if isinstance(value, float):
        return ArgInfo(name, "float", str(ty), repr(value))
    return ArgInfo(name, type(value).__name__, str(ty), _value_text(value))


def _tensor_text(t: torch.Tensor) -> str:
    return (f"{str(t.dtype).removeprefix('torch.')} {tuple(t.shape)} strides {tuple(t.stride())}"
            + (f" offset {t.storage_offset()}" if t.storage_offset() else ""))


def _value_text(value: Any) -> str:
    name = getattr(value, "name", None)
    if name is not None and type(value).__name__ == "dtype":
        return str(name)
    return str(getattr(value, "value", value))


# ---------------------------------------------------------------------------------------
# The Python API
# ---------------------------------------------------------------------------------------

def available_ops() -> dict[str, Any]:
    """The catalogue's entries; an entry module listed there but not written yet is skipped."""
    from . import registry
    try:
        return registry.entries()
    except ModuleNotFoundError:
        found = {}
        for module_name in registry._ENTRY_MODULES:
            try:
                module = importlib.import_module(f"{registry.__name__}.{module_name}")
            except ModuleNotFoundError as err:
                if err.name and err.name.startswith(registry.__name__):
                    continue
                raise
            found[module.ENTRY.name] = module.ENTRY
        return found


def record(op: str, pass_name: str, request: Any, device: torch.device | None = None) -> list[Launch]:
    """The launches one pass of an op makes for this request, recorded without running."""
    entry = _entry(op)
    device = device or _runtime.default_device()
    with record_launches(execute=False) as launches:
        entry.passes[pass_name](request, device)
    return launches


def _entry(op: str):
    entries = available_ops()
    if op not in entries:
        raise ValueError(f"unknown op {op!r}; known: {', '.join(entries)}")
    return entries[op]


def _dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype.lower() not in _DTYPES:
        raise ValueError(f"dtype {dtype!r}: expected fp32, fp16 or bf16")
    return _DTYPES[dtype.lower()]


def compile_report(op: str, pass_: str = "all", shape: tuple[int, ...] | None = None,
                   dtype: str | torch.dtype | None = None, offset: int = 0, causal: bool = False,
                   arch: str | int | None = None) -> list[KernelReport]:
    """Compile every kernel the op's pass(es) would launch for this input; one report each.

    pass_: a pass name from the op's catalogue entry ("fwd", "bwd") or "all".
    shape, dtype: the input; None gives the entry's default. offset: the input is a view
    that many elements into its buffer. arch: "sm_90" by default (the local GPU's if any).
    """
    from .registry import InspectRequest

    entry = _entry(op)
    passes = list(entry.passes) if pass_ in ("all", None) else [pass_]
    for name in passes:
        if name not in entry.passes:
            raise ValueError(f"{op} has no pass {name!r}; it has: {', '.join(entry.passes)}")
    target = parse_arch(arch)
    request = InspectRequest(shape=tuple(shape) if shape else None, dtype=_dtype(dtype),
                             offset=offset, causal=causal)
    asked = {"shape": list(shape) if shape else None, "dtype": _dtype_name(request.dtype),
             "offset": offset, "causal": causal}
    reports = []
    for name in passes:
        for launch in record(op, name, request):
            reports.append(kernel_report(launch, target, op=op, pass_name=name, asked=asked))
    return reports


def kernel_report(launch: Launch, arch: int = 90, op: str = "", pass_name: str = "",
                  asked: dict[str, Any] | None = None) -> KernelReport:
    """Specialise and compile one recorded launch for `arch`, and read the result."""
    resolved = _resolve(launch)
    bound, specialization, options, signature, constexprs, attrs = _specialise(resolved, launch.args, arch)
    compiled = _compile(resolved.jit, signature, constexprs, attrs, options, arch)
    meta = compiled.metadata
    usage = compiled.ptxas
    fn = resolved.jit.fn
    args = _describe_args(resolved.jit, bound, specialization)
    return KernelReport(
        op=op, pass_name=pass_name, launch=launch.name, kernel=fn.__name__,
        source=f"{os.path.relpath(fn.__code__.co_filename)}:{fn.__code__.co_firstlineno}",
        arch=arch, input=asked or {}, grid=resolved.grid,
        num_warps=meta.num_warps, num_stages=meta.num_stages, num_ctas=meta.num_ctas,
        config_source=resolved.config_source, args=args,
        constexprs={a.name: a.value for a in args if a.kind == "constexpr"},
        memory=compiled.memory,
        tma=any(m.kind.startswith("tma") for m in compiled.memory),
        cp_async=any(m.kind == "cp.async" for m in compiled.memory),
        tensor_cores=compiled.tensor_cores, sass_memory=compiled.sass_memory,
        registers=usage["registers"], spill_stores=usage["spill_stores"],
        spill_loads=usage["spill_loads"], stack_bytes=usage["stack"], shared_bytes=meta.shared,
        occupancy=occupancy(usage["registers"], meta.shared, meta.num_warps),
        compile_seconds=compiled.seconds, asm=compiled.asm,
    )


def _dtype_name(dtype: torch.dtype | None) -> str | None:
    return None if dtype is None else {torch.float32: "fp32", torch.float16: "fp16",
                                       torch.bfloat16: "bf16"}.get(dtype, str(dtype))


# ---------------------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------------------

def _memory_lines(report: KernelReport) -> list[str]:
    rows = sorted(report.memory, key=lambda m: (m.kind not in ("load", "cp.async", "tma load"),
                                               m.args, -(m.bits or 0)))
    out = []
    for m in rows:
        who = ", ".join(m.args) or "(no pointer argument found)"
        width = f"{m.bits}-bit" if m.bits else "bulk tensor"
        where = f"  [{', '.join(m.lines[:3])}{', ...' if len(m.lines) > 3 else ''}]" if m.lines else ""
        out.append(f"    {who:<16} {m.kind:<9} {m.instruction:<34} x{m.count:<4} {width}{where}")
    return out or ["    (none)"]


def _tensor_core_text(report: KernelReport) -> str:
    used = [f"{name} x{n}" for name, n in report.tensor_cores.items() if n]
    return ", ".join(used) if used else "none"


def format_report(report: KernelReport) -> str:
    lines = [f"kernel {report.kernel}  ({report.op} {report.pass_name}, launch {report.launch!r}, {report.source})",
             f"  grid {report.grid} · {report.num_warps} warps ({report.num_warps * 32} threads) · "
             f"{report.num_stages} stage{'s' * (report.num_stages != 1)} · {report.num_ctas} CTA/cluster · config from {report.config_source}",
             "  arguments (Triton's specialisation)"]
    for a in report.args:
        lines.append(f"    {a.name:<16} {a.type:<12} {a.value:<44} {a.specialisation}".rstrip())
    lines.append("  global memory, by PTX instruction (static count in the kernel)")
    lines += _memory_lines(report)
    lines.append(f"  TMA (cp.async.bulk.tensor): {'yes' if report.tma else 'no'} · "
                 f"cp.async: {'yes' if report.cp_async else 'no'} · tensor cores: {_tensor_core_text(report)}")
    if report.sass_memory:
        lines.append("  SASS: " + ", ".join(f"{k} x{v}" for k, v in report.sass_memory.items()))
    lines.append(f"  resources: {report.registers} registers/thread, spills {report.spill_stores} B stored / "
                 f"{report.spill_loads} B loaded, stack {report.stack_bytes} B, shared {report.shared_bytes} B/block")
    lines.append(f"  occupancy on sm_{report.arch} (H100/H200 limits):")
    lines += [f"    {text}" for text in report.occupancy.arithmetic]
    blocks = report.grid[0] * report.grid[1] * report.grid[2]
    if report.occupancy.blocks_per_sm:
        waves = blocks / (report.occupancy.blocks_per_sm * H200_SMS)
        lines.append(f"    grid of {blocks} blocks on {H200_SMS} SMs = {waves:.2f} waves")
    return "\n".join(lines)


def _pointer_loads(report: KernelReport, name: str) -> list[MemOp]:
    return [m for m in report.memory if name in m.args and m.kind in ("load", "store", "cp.async", "atomic")]


def _widest(ops: list[MemOp]) -> MemOp | None:
    ops = [m for m in ops if m.bits]
    return max(ops, key=lambda m: (m.bits, m.count)) if ops else None


def _narrowest(ops: list[MemOp]) -> MemOp | None:
    ops = [m for m in ops if m.bits]
    return min(ops, key=lambda m: (m.bits, -m.count)) if ops else None


def _access_word(ops: list[MemOp]) -> str:
    kinds = {m.kind for m in ops}
    if kinds <= {"store"}:
        return "stores"
    if kinds <= {"load", "cp.async"}:
        return "loads"
    return "loads and stores"


def explain(report: KernelReport, aligned: KernelReport | None = None) -> list[str]:
    """Plain sentences about one kernel; with `aligned`, what the offset-0 input got instead."""
    out = []
    ints_not_16 = [a for a in report.args if a.kind == "int" and not a.equal_to_1 and a.divisible_by_16 is False]
    for a in report.args:
        if a.kind == "tensor descriptor":
            out.append(f"{a.name} is a tensor descriptor (TMA): its tiles move with cp.async.bulk.tensor; "
                       "the launcher must only build one for a 16-byte aligned base and 16-byte aligned strides.")
            continue
        if a.kind != "pointer":
            continue
        ops = _pointer_loads(report, a.name)
        if not ops:
            if any(a.name in m.args for m in report.memory):
                out.append(f"{a.name} is read and written through TMA/bulk copies, not per-thread loads.")
            continue
        word = _access_word(ops)
        narrow, wide = _narrowest(ops), _widest(ops)
        element_bits = 8 * (a.element_size or 4)
        if wide is None:
            continue
        if sum(m.count for m in ops) == 1 and not a.bytes_past_16:
            out.append(f"{a.name}: each thread {word[:-1]}s a single {wide.bits}-bit value here "
                       f"({wide.instruction}; one value per program or one element per thread), "
                       "so there is nothing to vectorise.")
            continue
        if a.bytes_past_16:
            size = (f"{wide.bits}-bit scalar {word}" if wide.bits <= element_bits
                    else f"at most {wide.bits}-bit {word}")
            sentence = (f"{a.name} is a view {a.bytes_past_16} bytes past a 16-byte boundary, so Triton "
                        f"did not mark it divisible by 16 and its {word} are {size.removesuffix(' ' + word)}"
                        f" ({_instructions_text(ops)})")
            better = _widest(_pointer_loads(aligned, a.name)) if aligned else None
            if better and better.bits > wide.bits:
                sentence += (f"; pass a contiguous aligned tensor (offset 0, or .clone()) to get "
                             f"{better.bits}-bit {word} ({better.instruction}), as the aligned input does.")
            elif wide.bits <= element_bits:
                sentence += ("; pass a contiguous tensor that starts on a 16-byte boundary (e.g. .clone()) "
                             "to allow 128-bit vector accesses.")
            else:
                sentence += "."
            out.append(sentence)
        elif wide.bits >= 128:
            out.append(f"{a.name} is 16-byte aligned, so its {word} are {wide.bits}-bit vector accesses "
                       f"({wide.instruction}, {wide.bits // element_bits} elements each)"
                       + (f"; the narrower ones ({_instructions_text([m for m in ops if m.bits < wide.bits])}) "
                          "are for tails or other code paths." if narrow.bits < wide.bits else "."))
        else:
            reason = ("either each thread holds fewer than 16 contiguous bytes of it in this kernel's layout, "
                      "or the compiler cannot prove that neighbouring elements are contiguous and 16-byte "
                      "aligned (a strided or broadcast view, or a stride not known to be a multiple of 16"
                      + (f"; integers here not divisible by 16: "
                         f"{', '.join(f'{i.name}={i.value}' for i in ints_not_16)}" if ints_not_16 else "")
                      + ")")
            out.append(f"{a.name} is 16-byte aligned but its {word} are only {wide.bits}-bit "
                       f"({_instructions_text(ops)}): {reason}.")
    misaligned = [a for a in report.args if a.kind == "pointer" and a.bytes_past_16]
    if misaligned and aligned is not None:
        ours = sum(m.count for a in misaligned for m in _pointer_loads(report, a.name))
        theirs = sum(m.count for a in misaligned for m in _pointer_loads(aligned, a.name))
        ratio = f" ({ours} instructions instead of {theirs})" if ours != theirs else ""
        out.append("This is Triton's safety net: the 16-byte hint comes from the real pointer at each launch, "
                   "so a misaligned view gets its own compiled variant with narrower accesses: correct, "
                   f"only more memory instructions{ratio}. A kernel that promised alignment with "
                   "tl.multiple_of would issue 128-bit accesses on this pointer, which can fault with a misaligned-address error.")
    if report.tma:
        out.append("Loads of whole tiles go through TMA (cp.async.bulk.tensor), which needs 16-byte aligned "
                   "bases and strides.")
    elif report.cp_async:
        out.append("Tiles are staged into shared memory with cp.async, pipelined over "
                   f"{report.num_stages} stages.")
    if report.tensor_cores.get("wgmma"):
        out.append(f"Matrix products use Hopper's warp-group tensor-core instruction wgmma.mma_async "
                   f"({report.tensor_cores['wgmma']} in the PTX).")
    elif report.tensor_cores.get("mma"):
        out.append(f"Matrix products use mma.sync tensor-core instructions ({report.tensor_cores['mma']}); "
                   "on Hopper wgmma would be faster.")
    if report.spill_stores or report.spill_loads:
        out.append(f"Registers spill: {report.spill_stores} bytes stored to and {report.spill_loads} bytes "
                   "loaded from local memory per thread; a smaller block or fewer stages would avoid it.")
    occ = report.occupancy
    out.append(f"Each thread uses {report.registers} registers and each block {report.shared_bytes} bytes of shared "
               f"memory, so {occ.blocks_per_sm} blocks of {report.num_warps} warps fit on an SM "
               f"({occ.percent:.0f}% occupancy, limited by {occ.limited_by}).")
    if aligned is not None and aligned.registers != report.registers:
        same = aligned.occupancy.percent == occ.percent
        out.append(f"The aligned input's kernel needs {aligned.registers} registers per thread instead of "
                   f"{report.registers}" + (", which leaves occupancy the same." if same else
                   f" ({aligned.occupancy.percent:.0f}% occupancy instead of {occ.percent:.0f}%)."))
    return out


def _instructions_text(ops: list[MemOp]) -> str:
    counts: Counter[str] = Counter()
    for m in ops:
        counts[m.instruction] += m.count
    return ", ".join(f"{name} x{n}" for name, n in counts.most_common())


def _memory_summary(report: KernelReport, name: str) -> str:
    ops = [m for m in report.memory if name in m.args]
    return _instructions_text(ops) if ops else "-"


def format_compare(left: list[KernelReport], right: list[KernelReport], left_label: str,
                   right_label: str) -> str:
    blocks = []
    for a, b in zip(left, right):
        rows: list[tuple[str, str, str]] = [("", left_label, right_label)]
        for arg_a, arg_b in zip(a.args, b.args):
            if arg_a.kind in ("pointer", "tensor descriptor") or arg_a.specialisation != arg_b.specialisation:
                rows.append((arg_a.name, _short_spec(arg_a), _short_spec(arg_b)))
        pointer_names = [x.name for x in a.args if x.kind in ("pointer", "tensor descriptor")]
        for name in pointer_names:
            rows.append((f"  {name} accesses", _memory_summary(a, name), _memory_summary(b, name)))
        rows += [
            ("TMA / cp.async", f"{_yes(a.tma)} / {_yes(a.cp_async)}", f"{_yes(b.tma)} / {_yes(b.cp_async)}"),
            ("tensor cores", _tensor_core_text(a), _tensor_core_text(b)),
            ("SASS global", _sass_global(a), _sass_global(b)),
            ("registers/thread", str(a.registers), str(b.registers)),
            ("spills (B st/ld)", f"{a.spill_stores}/{a.spill_loads}", f"{b.spill_stores}/{b.spill_loads}"),
            ("shared/block", f"{a.shared_bytes} B", f"{b.shared_bytes} B"),
            ("warps / stages", f"{a.num_warps} / {a.num_stages}", f"{b.num_warps} / {b.num_stages}"),
            ("occupancy", _occ_text(a), _occ_text(b)),
        ]
        width0 = max(len(r[0]) for r in rows)
        width1 = max(len(r[1]) for r in rows)
        title = f"{a.kernel} ({a.op} {a.pass_name}, launch {a.launch!r}) on sm_{a.arch}"
        table = [title] + [f"  {r[0]:<{width0}}  {r[1]:<{width1}}  {r[2]}" for r in rows]
        blocks.append("\n".join(table))
    if len(left) != len(right):
        blocks.append(f"(the two inputs launch different numbers of kernels: {len(left)} and {len(right)})")
    return "\n\n".join(blocks)


def _short_spec(arg: ArgInfo) -> str:
    if arg.kind in ("pointer", "tensor descriptor"):
        if arg.bytes_past_16 is None:
            return "?"
        return "16-byte aligned" if arg.bytes_past_16 == 0 else f"{arg.bytes_past_16} B past 16-byte boundary"
    return f"{arg.value} ({arg.specialisation})" if arg.specialisation else arg.value


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _sass_global(report: KernelReport) -> str:
    items = [f"{k} x{v}" for k, v in report.sass_memory.items() if k.startswith(("LDG", "STG", "UTMA"))]
    return ", ".join(items) or "-"


def _occ_text(report: KernelReport) -> str:
    occ = report.occupancy
    return f"{occ.percent:.0f}% ({occ.blocks_per_sm} blocks/SM, {occ.limited_by})"


# ---------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------

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
        common = dict(pass_=opts.pass_, shape=opts.shape, dtype=opts.dtype, causal=opts.causal, arch=arch)
        if opts.compare:
            offset = opts.offset or 1
            left = compile_report(opts.op, offset=0, **common)
            right = compile_report(opts.op, offset=offset, **common)
        else:
            offset = opts.offset
            left, right = [], compile_report(opts.op, offset=offset, **common)
    except (ValueError, TypeError) as err:
        print(f"tritonkit inspect: {err}", file=sys.stderr)
        return 2

    if opts.json:
        data: dict[str, Any] = {"op": opts.op, "arch": f"sm_{arch}", "interpreted": _runtime.INTERPRETED}
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
    first = next((a for r in reports for a in r.args if a.kind == "pointer"), None)
    if opts.shape or opts.dtype or first is None:
        shape = "x".join(map(str, opts.shape)) if opts.shape else "default shape"
        what = [shape, opts.dtype or "default dtype"]
    else:                                   # the entry's defaults: say what they were
        what = [f"input {first.name}: {first.value.split(' offset')[0]}"]
    parts = [f"tritonkit inspect {opts.op}", f"pass {opts.pass_}", *what]
    if opts.compare:
        parts.append(f"offset 0 vs offset {offset}")
    elif offset:
        parts.append(f"offset {offset}")
    if opts.causal:
        parts.append("causal")
    where = "compiled on the CPU, no GPU used" if _runtime.INTERPRETED else _runtime.describe()
    return " · ".join(parts) + f"\ntarget sm_{arch} ({where})"
