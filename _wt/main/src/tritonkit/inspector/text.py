"""The report as text: one kernel (`format_report`), two inputs side by side
(`format_compare`), and plain sentences about what it means (`explain`)."""

from __future__ import annotations

from collections import Counter

from .hopper import H200_SMS
from .report import ArgInfo, KernelReport, LoopSync, MemOp


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
    cores = report.tensor_cores
    used = []
    if cores.get("wgmma"):
        from_registers = cores.get("wgmma_register_a", 0)
        used.append(f"wgmma x{cores['wgmma']}" + (f" ({from_registers} with A in registers)" if from_registers else ""))
    if cores.get("mma"):
        used.append(f"mma x{cores['mma']}")
    return ", ".join(used) if used else "none"


def format_report(report: KernelReport) -> str:
    lines = [f"kernel {report.kernel}  ({report.op} {report.pass_name}, launch {report.launch!r}, {report.source})",
             f"  grid {report.grid} · {report.num_warps} warps ({report.num_warps * 32} threads) · "
             + ("" if report.language == "gluon" else f"{report.num_stages} stage{'s' * (report.num_stages != 1)} · ")
             + f"{report.num_ctas} CTA/cluster · config from {report.config_source}",
             *_path_lines(report),
             "  arguments (Triton's specialisation)"]
    for a in report.args:
        lines.append(f"    {a.name:<16} {a.type:<12} {a.value:<44} {a.specialisation}".rstrip())
    lines.append("  global memory, by PTX instruction (static count in the kernel)")
    lines += _memory_lines(report)
    descriptors = [a.name for a in report.args if a.kind == "tensor descriptor"]
    lines.append(f"  TMA (cp.async.bulk.tensor): {'yes' if report.tma else 'no'}"
                 f"{' (tensor descriptors: ' + ', '.join(descriptors) + ')' if descriptors else ''} · "
                 f"cp.async: {'yes' if report.cp_async else 'no'} · tensor cores: {_tensor_core_text(report)}")
    if report.sass_memory:
        lines.append("  SASS: " + ", ".join(f"{k} x{v}" for k, v in report.sass_memory.items()))
    lines += _warp_specialization_lines(report)
    if report.loops:
        lines.append("  innermost loops (PTX; static counts in each loop body)")
        lines += [f"    {loop.label:<12} {_loop_text(loop)}" for loop in report.loops]
    lines.append(f"  resources: {report.registers} registers/thread, spills {report.spill_stores} B stored / "
                 f"{report.spill_loads} B loaded, stack {report.stack_bytes} B, shared {report.shared_bytes} B/block")
    lines.append(f"  occupancy on sm_{report.arch} (H100/H200 limits):")
    lines += [f"    {text}" for text in report.occupancy.arithmetic]
    blocks = report.grid[0] * report.grid[1] * report.grid[2]
    if report.occupancy.blocks_per_sm:
        waves = blocks / (report.occupancy.blocks_per_sm * H200_SMS)
        lines.append(f"    grid of {blocks} blocks on {H200_SMS} SMs = {waves:.2f} waves")
    return "\n".join(lines)


def _path_lines(report: KernelReport) -> list[str]:
    if report.path is None:
        return []
    return [f"  path: {report.path} ({report.path_of}: {report.path_reason}) · this kernel is "
            f"{'Gluon' if report.language == 'gluon' else 'Triton'}"]


def _warp_specialization_lines(report: KernelReport) -> list[str]:
    lines = []
    if report.partitions:
        used = sum(p.warps for p in report.partitions)
        lines.append(f"  warp specialization: {len(report.partitions)} partitions, {used} warps used, "
                     f"{report.num_warps} launched (whole warpgroups)")
        lines += [f"    {p.name:<16} {p.role:<9} {p.warps} warp{'s' * (p.warps != 1)}  "
                  f"{'?' if p.registers is None else p.registers} registers/thread (setmaxnreg)"
                  for p in report.partitions]
    if report.setmaxnreg:
        lines.append("  setmaxnreg (PTX order): " + ", ".join(f"{d} {n}" for d, n in report.setmaxnreg))
    if report.wgmma_waits or report.mbarrier_waits:
        waits = ", ".join(f"wait_group {n} x{c}" for n, c in report.wgmma_waits.items()) or "none"
        inflight = sum(c for n, c in report.wgmma_waits.items() if n > 0)
        lines.append(f"  wgmma waits: {waits} ({inflight} leave products in flight) · "
                     f"mbarrier waits: {report.mbarrier_waits} (try_wait, whole kernel)")
    return lines


def _loop_text(loop: LoopSync) -> str:
    waits = f", wgmma.wait_group {list(loop.wgmma_waits)}" if loop.wgmma_waits else ""
    return (f"{loop.lines} lines: {loop.cta_barriers} CTA-wide barrier{'s' * (loop.cta_barriers != 1)} "
            f"(bar.sync), {loop.mbarrier_waits} mbarrier wait{'s' * (loop.mbarrier_waits != 1)}, "
            f"wgmma x{loop.wgmma}{waits}")


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
    out = _path_sentences(report)
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
        from_registers = report.tensor_cores.get("wgmma_register_a", 0)
        out.append(f"Matrix products use Hopper's warp-group tensor-core instruction wgmma.mma_async "
                   f"({report.tensor_cores['wgmma']} in the PTX"
                   + (f"; {from_registers} take their A operand from registers, the others read both operands "
                      "from shared memory" if from_registers else "") + ").")
    elif report.tensor_cores.get("mma"):
        out.append(f"Matrix products use mma.sync tensor-core instructions ({report.tensor_cores['mma']}); "
                   "on Hopper wgmma would be faster.")
    out += _warp_specialization_sentences(report)
    alike: dict[tuple, list[str]] = {}
    for loop in report.loops:
        if loop.wgmma:
            drains = loop.wgmma_waits.count(0)
            inflight = len(loop.wgmma_waits) - drains
            alike.setdefault((loop.wgmma, drains, inflight, loop.cta_barriers), []).append(loop.label)
    for (wgmma, drains, inflight, barriers), labels in alike.items():
        where = (f"The loop at {labels[0]} issues" if len(labels) == 1
                 else f"The loops at {', '.join(labels)} each issue")
        sentence = f"{where} {wgmma} wgmma instructions an iteration"
        if inflight:
            sentence += (f"; {_times(inflight)} an iteration a wait leaves products in flight (wgmma.wait_group N > 0), "
                         "so the warpgroup's work after it runs while its latest products are still on the tensor "
                         "cores" + (f", and {_times(drains)} it drains them all (wgmma.wait_group 0)" if drains else ""))
        elif drains:
            sentence += (f"; {_times(drains)} an iteration its "
                         "warps wait until none of their products is in flight (wgmma.wait_group 0) "
                         "before using one, so a warpgroup gives the tensor cores nothing to do while "
                         "its work between products (a softmax, say) runs")
        if barriers and report.num_warps > 4:
            sentence += (f"; {barriers} CTA-wide barrier{'s' * (barriers != 1)} an iteration keep the "
                         f"block's {report.num_warps // 4} warpgroups in step, so one warpgroup's "
                         "non-matrix work cannot hide under another's products (one warpgroup a block, "
                         "with two blocks an SM, lets the blocks drift apart)")
        out.append(sentence + ".")
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


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _path_sentences(report: KernelReport) -> list[str]:
    if report.path is None:
        return []
    sentence = f"The {report.path_of} takes the {report.path.capitalize()} path: {report.path_reason}."
    if report.path == "gluon" and report.language != "gluon":
        sentence += f" This kernel ({report.kernel}) is a Triton kernel that both paths run."
    elif report.path == "triton" and report.op == "attention":
        sentence += " (--path gluon compiles the Gluon kernels instead, where they can take the input.)"
    return [sentence]


def _warp_specialization_sentences(report: KernelReport) -> list[str]:
    """What the partitions, setmaxnreg, wgmma waits and mbarrier waits of a warp-specialized
    kernel mean."""
    parts = report.partitions
    if not parts:
        return []
    out = []
    listed = ", ".join(f"{p.name} ({p.role}, {p.warps} warp{'s' * (p.warps != 1)})" for p in parts)
    used = sum(p.warps for p in parts)
    out.append(f"The kernel is warp-specialized: {len(parts)} partitions run different code side by side, {listed}; "
               f"{used} warps work and {report.num_warps} are launched, since registers are handed out by "
               "warpgroup (4 warps) and every partition's warpgroup must be present to give them up.")
    if all(p.registers for p in parts):
        low = min(parts, key=lambda p: p.registers)
        high = [p for p in parts if p.registers > low.registers]
        budget = sum(-(-p.warps // 4) * 128 * p.registers for p in parts)
        if high:
            out.append(
                f"setmaxnreg moves registers between them: {low.name} ({low.warps} warp{'s' * (low.warps != 1)}) drops "
                f"to {low.registers} registers a thread and {' and '.join(p.name for p in high)} rise to "
                f"{'/'.join(str(p.registers) for p in high)}, so each of those warpgroups can keep its fp32 "
                f"accumulators in registers (a 64 x 128 fp32 tile over a warpgroup's 128 threads is 64 a thread) "
                f"while the other only issues copies and waits; {' + '.join(str(-(-p.warps // 4) * 128 * p.registers) for p in parts)}"
                f" = {budget} of the SM's 65536 registers (ptxas's {report.registers}/thread is the launch's even "
                "share, before setmaxnreg).")
    inflight = sum(c for n, c in report.wgmma_waits.items() if n > 0)
    drains = report.wgmma_waits.get(0, 0)
    if inflight:
        pending = ", ".join(f"wgmma.wait_group {n} x{c}" for n, c in report.wgmma_waits.items() if n > 0)
        example = (" In the attention forward the wait retires S(j) = Q K(j)^T, issued first, and leaves "
                   "P(j-1) V(j-1) of the previous key block running under block j's softmax." if report.op == "attention" and report.kernel == "_attn_fwd_kernel" else "")
        out.append(f"{inflight} of its {inflight + drains} wgmma waits leave products in flight ({pending}): a "
                   "warpgroup retires only its older products and goes on (to a softmax, say) while the product it "
                   f"issued last still runs on the tensor cores.{example}")
    if report.mbarrier_waits:
        out.append(f"{report.mbarrier_waits} mbarrier waits (try_wait): the partitions hand shared-memory buffers to "
                   "each other through mbarriers (a TMA load landed, a buffer released, a warpgroup's turn), not "
                   "CTA-wide barriers; bar.sync with a thread count (bar.sync N, 128) keeps one warpgroup in step.")
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
            ("path / language", f"{a.path or '-'} / {a.language}", f"{b.path or '-'} / {b.language}"),
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
        where = "16-byte aligned" if arg.bytes_past_16 == 0 else f"{arg.bytes_past_16} B past 16-byte boundary"
        return f"TMA descriptor, {where}" if arg.kind == "tensor descriptor" else where
    return f"{arg.value} ({arg.specialisation})" if arg.specialisation else arg.value


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _sass_global(report: KernelReport) -> str:
    items = [f"{k} x{v}" for k, v in report.sass_memory.items() if k.startswith(("LDG", "STG", "UTMA"))]
    return ", ".join(items) or "-"


def _occ_text(report: KernelReport) -> str:
    occ = report.occupancy
    return f"{occ.percent:.0f}% ({occ.blocks_per_sm} blocks/SM, {occ.limited_by})"
