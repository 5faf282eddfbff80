"""From a recorded Launch to a compiled kernel for sm_XX, the way Triton itself would.

Resolves autotune and heuristics wrappers to the config the launch would use, specialises
the arguments with Triton's own binder, and runs `triton.compile` for the target (no GPU
needed). Under the interpreter, Triton's language is made compilable for the duration.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

from .. import _runtime
from .._launch import Launch, record_launches, tuner_key
from .assembly import (_loop_sync, _memory_ops, _partitions, _ptxas_usage, _sass_counts, _setmaxnreg,
                       _ttgir_arg_names, _wgmma_waits)
from .report import LoopSync, MemOp, Partition


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
    """Walk autotune/heuristics wrappers the way their run() methods would, then run the
    kernel's pre-run hooks as JITFunction.run does."""
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
    for hook in getattr(kernel, "pre_run_hooks", ()):  # as JITFunction.run: e.g. sizes descriptors
        hook(*launch.args, **kwargs)
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
    key = tuner_key(tuner, args, kwargs)
    cached = tuner.cache.get(key)
    if cached is not None:
        return cached, f"autotune: the config this process already tuned for key {key}"
    tuner.nargs = named
    try:
        # Pruned as for the GPU: inside record_launches(execute=False) the ops' pruners see
        # their GPU fixed configs (to put first), not the interpreter's.
        with record_launches(execute=False):
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
# Compiling
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
    loops: list[LoopSync]
    gluon: bool                       # compiled from Gluon (GluonASTSource)
    partitions: list[Partition]       # warp specialization, if any
    setmaxnreg: list[tuple[str, int]]
    wgmma_waits: dict[int, int]
    mbarrier_waits: int


# The modules whose Triton functions a Gluon kernel calls (Gluon's library wraps Triton's):
# under the interpreter they hold InterpretedFunctions, swapped for compilable ones meanwhile.
GLUON_MODULES = ("triton.language", "triton.experimental.gluon", "tritonkit")


def is_gluon(kernel: Any) -> bool:
    """Whether `kernel` is a Gluon kernel (@gluon.jit), which `ast_source` must parse as Gluon."""
    from triton.experimental.gluon._runtime import GluonJITFunction
    return isinstance(kernel, GluonJITFunction)


def ast_source(kernel: Any, signature: dict, constexprs: dict, attrs: dict) -> Any:
    """What `triton.compile` compiles `kernel` from: `GluonASTSource` for a Gluon kernel,
    Triton's `ASTSource` for a @triton.jit one."""
    if is_gluon(kernel):
        from triton.experimental.gluon._runtime import GluonASTSource
        return GluonASTSource(kernel, signature, constexprs, attrs)
    from triton.compiler import ASTSource
    return ASTSource(kernel, signature, constexprs, attrs)


def frontend(launch: Launch, arch: int = 90) -> str:
    """Run a recorded launch through what Triton does before any GPU code exists: the binder
    that specialises its arguments, the key of the compiled kernel (Triton's dependency finder
    reads every function it calls) and the lowering of its Python to TTIR, for sm_`arch`.
    Returns the TTIR. Seconds where a full compile takes tens, so the tests can run it for every
    kernel of every op: the interpreter runs what this stage refuses (module globals that are
    not constexprs, nested tuple targets, parameter names Triton's binder reserves)."""
    from triton._C.libtriton import ir

    resolved = _resolve(launch)
    _, _, options, signature, constexprs, attrs = _specialise(resolved, launch.args, arch)
    target, backend = _backend(arch)
    jit = resolved.jit
    src = ast_source(jit, signature, constexprs, attrs)
    modules = (*GLUON_MODULES, jit.fn.__module__) if is_gluon(jit) else ("triton.language", "tritonkit",
                                                                          jit.fn.__module__)
    with _jit_functions_visible(modules):
        src.hash()
        options = backend.parse_options(options.__dict__)
        context = ir.context()
        ir.load_dialects(context)
        backend.load_dialects(context)
        module = src.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(),
                             context)
    return str(module)


_compiled_cache: dict[tuple, _Compiled] = {}


def _compile(jit, signature, constexprs, attrs, options, arch: int) -> _Compiled:
    """Compile for sm_`arch`: a @triton.jit kernel from Triton's ASTSource, a Gluon kernel from
    GluonASTSource (`ast_source`), which parses it as Gluon."""
    import triton

    target, _ = _backend(arch)
    gluon = is_gluon(jit)
    src = ast_source(jit, signature, constexprs, attrs)
    with _jit_functions_visible((*GLUON_MODULES, jit.fn.__module__) if gluon else
                                ("triton.language", "tritonkit", jit.fn.__module__)):
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
                      # wgmma with its A operand a register list ({...}) rather than a
                      # shared-memory descriptor
                      "wgmma_register_a": len(re.findall(r"\bwgmma\.mma_async[^;]*\}\s*,\s*\{", ptx)),
                      "mma": len(re.findall(r"\bmma\.sync", ptx))},
        sass_memory=_sass_counts(asm["cubin"]),
        ptxas=_ptxas_usage(ptx, arch, options),
        seconds=time.perf_counter() - start,
        loops=_loop_sync(ptx, kernel.metadata.num_warps * 32),
        gluon=gluon,
        partitions=_partitions(asm["ttgir"], ptx, jit.fn),
        setmaxnreg=_setmaxnreg(ptx),
        wgmma_waits=_wgmma_waits(ptx),
        mbarrier_waits=len(re.findall(r"\bmbarrier\.try_wait", ptx)),
    )
    return _compiled_cache[key]
