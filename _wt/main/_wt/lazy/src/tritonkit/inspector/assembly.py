"""What the compiled kernel says: global memory ops in the PTX, SASS counts, `ptxas -v` usage."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections import Counter
from typing import Any

from .report import LoopSync, MemOp, Partition


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
        return "tma reduce"
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
        elif kind in ("tma store", "tma reduce"):
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


# bar.sync / barrier.sync, with its thread count if it has one. Without one, or with the
# block's thread count, every warp of the block meets there; with fewer (bar.sync 0, 128) only
# those threads do: a warp-specialized kernel's barrier inside one warpgroup.
_BARRIER = re.compile(r"\b(?:bar|barrier)\.sync(?:\.aligned)?\s+\w+\s*(?:,\s*(\d+))?\s*;")
_LABEL = re.compile(r"^(\$L__BB\d+_\d+):")
_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$L__BB\d+_\d+);")


def _loop_sync(ptx: str, block_threads: int | None = None) -> list[LoopSync]:
    """The innermost loops of a PTX listing (a branch back to a label above it closes one)
    and how each synchronises. Labels of inline-asm wait loops (`waitLoop:`) are not PTX
    basic blocks and do not count as loops; their try_wait instructions count as mbarrier
    waits of the loop around them. A barrier with a thread count short of `block_threads` is
    not CTA-wide."""
    lines = ptx.splitlines()
    labels = {}
    loops = []
    for i, line in enumerate(lines):
        found = _LABEL.match(line.strip())
        if found:
            labels[found.group(1)] = i
        branch = _BRANCH.search(line)
        if branch and branch.group(1) in labels and labels[branch.group(1)] < i:
            loops.append((labels[branch.group(1)], i, branch.group(1)))
    innermost = [(a, b, name) for a, b, name in loops
                 if not any(a <= c and d <= b and (c, d) != (a, b) for c, d, _ in loops)]
    out = []
    for a, b, name in innermost:
        body = "\n".join(lines[a:b + 1])
        out.append(LoopSync(
            label=name, lines=b - a + 1,
            cta_barriers=sum(1 for count in _BARRIER.findall(body)
                             if not count or (block_threads is not None and int(count) >= block_threads)),
            wgmma=len(re.findall(r"\bwgmma\.mma_async", body)),
            wgmma_waits=tuple(int(n) for n in re.findall(r"\bwgmma\.wait_group\.sync\.aligned\s+(\d+)", body)),
            mbarrier_waits=len(re.findall(r"\bmbarrier\.try_wait", body)),
        ))
    return out


_SETMAXNREG = re.compile(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)")
_WGMMA_WAIT = re.compile(r"\bwgmma\.wait_group\.sync\.aligned\s+(\d+)")


def _setmaxnreg(ptx: str) -> list[tuple[str, int]]:
    """('inc' or 'dec', registers) of each setmaxnreg in the PTX, in order."""
    return [(d, int(n)) for d, n in _SETMAXNREG.findall(ptx)]


def _wgmma_waits(ptx: str) -> dict[int, int]:
    """wgmma.wait_group N -> how many there are in the PTX: N of a warpgroup's products may
    stay in flight past each (N > 0: it goes on while its latest products run)."""
    return dict(sorted(Counter(int(n) for n in _WGMMA_WAIT.findall(ptx)).items()))


def _partitions(ttgir: str, ptx: str, fn: Any) -> list[Partition]:
    """The partitions of a warp-specialized kernel (`ttg.warp_specialize`), default first:
    the function each runs (from the kernel's gl.warp_specialize call), its warps and its
    register budget. Workers' budgets are the TTGIR's requestedRegisters, which Triton lowers
    to a setmaxnreg at each worker's entry; the default partition's is the setmaxnreg that the
    default warps run between the two named barriers (barrier.sync 1) at which all warps
    meet when the partitions start. Empty for a kernel that is not warp-specialized."""
    if "ttg.warp_specialize" not in ttgir:
        return []
    worker_warps = [int(n) for n in re.findall(r"^\s*partition\d+\(.*\) num_warps\((\d+)\)", ttgir, re.M)]
    requested = re.search(r"requestedRegisters = array<i32: ([\d, ]+)>", ttgir)
    worker_regs = [int(n) for n in requested.group(1).split(",")] if requested else [None] * len(worker_warps)
    default_warps = re.search(r'"ttg.num-warps" = (\d+)', ttgir)
    entry = re.search(r"barrier\.sync\s+1;\s*setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+);\s*"
                      r"barrier\.sync\s+1;", ptx)
    names = _partition_functions(fn, len(worker_warps) + 1)
    names += [f"partition{i}" for i in range(len(names), len(worker_warps) + 1)]
    parts = [Partition(names[0], "default", int(default_warps.group(1)) if default_warps else 4,
                       int(entry.group(1)) if entry else None)]
    for i, (warps, regs) in enumerate(zip(worker_warps, worker_regs)):
        parts.append(Partition(names[i + 1], f"worker {i}", warps, regs))
    return parts


def _partition_functions(fn: Any, count: int) -> list[str]:
    """The functions named by the kernel's gl.warp_specialize([(f, args), ...], ...) call of
    `count` partitions (the first such call in its Python source; a kernel may hold one call
    per constexpr branch), in order (the first is the default partition's)."""
    import ast
    import inspect
    import textwrap
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "warp_specialize"
                and node.args and isinstance(node.args[0], (ast.List, ast.Tuple))):
            names = [ast.unparse(item.elts[0]) for item in node.args[0].elts
                     if isinstance(item, ast.Tuple) and item.elts]
            if len(names) == count:
                return names
    return []
