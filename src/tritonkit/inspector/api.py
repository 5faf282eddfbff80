"""The Python API: the catalogue's ops, their recorded launches, and a report per kernel."""

from __future__ import annotations

import importlib
import os
from typing import Any

import torch

from .. import _runtime, _triton_version
from .._launch import Launch, PathChoice, Recording, record_launches
from .._progress import Progress, duration
from .arguments import _describe_args
from .compiling import _compile, _resolve, _specialise, parse_arch
from .hopper import occupancy
from .report import KernelReport

# Compiling one kernel for a GPU target on an idle CPU core: about 4 s for an attention kernel,
# 1 s for an elementwise one. For the estimate given before anything has compiled.
_IDLE_SECONDS_PER_KERNEL = 4

_DTYPES = {"fp32": torch.float32, "float32": torch.float32, "fp16": torch.float16,
           "float16": torch.float16, "half": torch.float16, "bf16": torch.bfloat16,
           "bfloat16": torch.bfloat16}


def available_ops() -> dict[str, Any]:
    """The catalogue's entries; an entry module listed there but not written yet is skipped."""
    from .. import registry
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


def record(op: str, pass_name: str, request: Any, device: torch.device | None = None,
           arch: int | None = None) -> Recording:
    """The launches one pass of an op makes for this request on an sm_`arch` GPU (the
    inspector's target; default: this GPU's, else sm_90), recorded without running, with the
    path choices its launchers made (`.choices`). The inputs live on this machine's device
    (the CPU without a GPU); launchers that choose kernels by GPU generation ask
    `_launch.target_capability`, which answers `arch` while this records."""
    entry = _entry(op)
    device = device or _runtime.default_device()
    with record_launches(execute=False, capability=parse_arch(arch)) as launches:
        entry.passes[pass_name](request, device)
    return launches


def _choice_for(launches: Recording, index: int) -> PathChoice | None:
    """The path choice launch `index` was made under: the last made before it, else (a
    launch both paths share, made before the choice) the first made after it."""
    before = [c for at, c in launches.choices if at <= index]
    return before[-1] if before else next((c for _, c in launches.choices), None)


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
                   arch: str | int | None = None, tma: bool | None = None,
                   path: str | None = None, progress: bool = False) -> list[KernelReport]:
    """Compile every kernel the op's pass(es) would launch for this input; one report each.

    pass_: a pass name from the op's catalogue entry ("fwd", "bwd") or "all".
    shape, dtype: the input; None gives the entry's default. offset: the input is a view
    that many elements into its buffer. arch: "sm_90" by default (the local GPU's if any).
    tma: False asks ops that have a tensor-descriptor path for their pointer path instead.
    path: one of the entry's kernel families ("gluon", "triton" for attention) to force; None
    compiles what the op's dispatch chooses for this input on the target.
    progress: say on stderr how many kernels compile and about how long it takes, and keep
    saying so while one compiles (compiling runs on the CPU and can take minutes on a busy one).
    """
    from ..registry import InspectRequest

    entry = _entry(op)
    passes = list(entry.passes) if pass_ in ("all", None) else [pass_]
    for name in passes:
        if name not in entry.passes:
            raise ValueError(f"{op} has no pass {name!r}; it has: {', '.join(entry.passes)}")
    if path is not None and path not in entry.paths:
        raise ValueError(f"--path {path!r}: {op} has " + (f"the paths {', '.join(entry.paths)}" if entry.paths
                                                           else "one family of kernels, no paths to choose"))
    target = parse_arch(arch)
    request = InspectRequest(shape=tuple(shape) if shape else None, dtype=_dtype(dtype),
                             offset=offset, causal=causal, tma=tma, path=path)
    asked = {"shape": list(shape) if shape else None, "dtype": _dtype_name(request.dtype),
             "offset": offset, "causal": causal, "tma": tma, "path": path}
    recorded = [(name, record(op, name, request, arch=target)) for name in passes]
    todo = [(name, launches, i) for name, launches in recorded for i in range(len(launches))]
    reports = []
    with Progress(len(todo), expected=_IDLE_SECONDS_PER_KERNEL * len(todo), enabled=progress) as meter:
        meter.say(f"compiling {len(todo)} kernel{'s' if len(todo) != 1 else ''} of {op}"
                  f"{f' at offset {offset}' if offset else ''} for sm_{target} on the "
                  f"CPU: about {duration(_IDLE_SECONDS_PER_KERNEL * len(todo))} on an idle machine, longer on a "
                  "busy one (Triton keeps them cached: a second run is quicker)")
        for name, launches, i in todo:
            launch = launches[i]
            with meter.step(f"compiling {launch.name} ({op} {name})"):
                reports.append(kernel_report(launch, target, op=op, pass_name=name, asked=asked,
                                             choice=_choice_for(launches, i)))
    return reports


def kernel_report(launch: Launch, arch: int = 90, op: str = "", pass_name: str = "",
                  asked: dict[str, Any] | None = None, choice: PathChoice | None = None) -> KernelReport:
    """Specialise and compile one recorded launch for `arch`, and read the result; `choice`:
    the dispatch's path choice the launch was made under, if any."""
    verified = _triton_version.supported()
    if not verified:
        _triton_version.warn_once("inspector", "it calls Triton internals and may fail or misread "
                                  "what Triton compiled")
    try:
        resolved = _resolve(launch)
        bound, specialization, options, signature, constexprs, attrs = _specialise(resolved, launch.args, arch)
        compiled = _compile(resolved.jit, signature, constexprs, attrs, options, arch)
    except (AttributeError, ImportError, KeyError, TypeError) as err:
        if verified:
            raise
        raise _triton_version.UnsupportedTriton(
            f"the inspector needs triton{_triton_version.supported_range()} (it calls Triton internals); "
            f"with triton {_triton_version.TRITON_VERSION} it failed: {type(err).__name__}: {err}") from err
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
        compile_seconds=compiled.seconds, asm=compiled.asm, loops=compiled.loops,
        language="gluon" if compiled.gluon else "triton",
        path=choice and choice.path, path_reason=choice and choice.reason, path_of=choice and choice.what,
        partitions=compiled.partitions, setmaxnreg=compiled.setmaxnreg, wgmma_waits=compiled.wgmma_waits,
        mbarrier_waits=compiled.mbarrier_waits,
    )


def _dtype_name(dtype: torch.dtype | None) -> str | None:
    return None if dtype is None else {torch.float32: "fp32", torch.float16: "fp16",
                                       torch.bfloat16: "bf16"}.get(dtype, str(dtype))
