"""A launch as data, so that `tritonkit inspect` sees exactly what a launcher would run.

Launchers build `Launch` objects and call them. Inside `record_launches()` each call is
also appended to a list (and, with execute=False, not run), which lets the inspector
compile the very kernel, arguments and meta-parameters the op would launch, without a GPU.

Launch cost. `kernel[grid](...)` spends several times the host time of the compiled kernel's
own launcher (binding, specialising every argument, cache-key strings; BENCHMARKS.md has the
figures, from benchmarks/sweep_elementwise.py overhead). Small inputs are bound by that host
time, so compiled launches are cached here under a key that
holds everything Triton specialises on (see `_specialization_key`) and later calls go
straight to the compiled launcher. An autotuned kernel joins them once it has chosen its
config for a key (the launch then names its kernel and that config); a kernel's pre-run
hooks run first, as in Triton. The first call of each key, the interpreter, a profiler's
launch hooks and argument types the key does not know take Triton's own path, and so does
every launch under a Triton outside the range this path is verified with (see
`_triton_version`: the path reads Triton internals; it says so once). A `LaunchTemplate`,
kept by launchers that plan their calls per layout, skips even the key once bound.
"""

from __future__ import annotations

import contextlib
import marshal
import operator
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch

from ._runtime import INTERPRETED  # first: it may switch on the interpreter before triton loads

import triton  # noqa: E402
from triton.runtime.autotuner import Autotuner  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

try:  # Gluon's host descriptor: Triton's fields plus the shared-memory layout it is read into
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor  # noqa: E402
except ImportError:  # a Triton without Gluon
    GluonTensorDescriptor = TensorDescriptor

from . import _triton_version  # noqa: E402
from ._cuda_context import make_current  # noqa: E402

try:
    from triton import knobs  # noqa: E402
except ImportError:  # a Triton without knobs is outside the verified range: no fast path there
    knobs = None

_recorders: list[tuple["Recording", bool, int | None]] = []
MAX_CACHED_LAUNCHES = 4096  # per kernel; keys hold exact shapes, so start afresh past this many
_PLAIN = (int, float, bool, type(None))  # arguments a key may hold by value
# ... and tuples of them, nested or not (a kernel's strides or shape, one parameter), which
# Triton takes apart and specialises element by element. The key holds them marshalled
# (`_specialization_key`).
_VALUED = (*_PLAIN, tuple)
_DESCRIPTORS = (TensorDescriptor, GluonTensorDescriptor)
# The kernel classes whose launches the cached path takes: Triton's and Gluon's JIT functions
# (a Gluon kernel differs in how it is parsed, not in how its compiled launcher is called).
_JIT_CLASSES = ("JITFunction", "GluonJITFunction")


@dataclass
class Launch:
    name: str                      # which pass: "add", "softmax_fwd", "attention_bwd_dkdv", ...
    kernel: Any                    # a triton JITFunction (or InterpretedFunction)
    grid: tuple[int, ...]
    args: tuple[Any, ...]          # positional runtime arguments
    constexprs: dict[str, Any] = field(default_factory=dict)
    num_warps: int | None = 4      # None for an autotuned kernel, whose config sets them
    num_stages: int | None = 3

    def __call__(self) -> None:
        self.launch()

    def launch(self) -> "_Ran | None":
        """Record and (unless a recording says not to) run the launch. Returns how it ran
        where that can be repeated without Triton's path (`_Ran`, for `LaunchTemplate`): the
        cached compiled launcher of its specialisation key ran, or Triton's path compiled
        one that the cache now holds. None otherwise."""
        execute = True
        for launches, run, _ in _recorders:
            launches.append(self)
            execute = execute and run
        if not execute:
            return None
        device = _device_of(self.args)
        if device is not None and device.type == "meta":
            # The ops take meta tensors through their fakes; a launcher called with them would
            # hand the kernel null pointers.
            raise ValueError(f"{self.name}: its tensors are on the meta device, which has no data to launch on "
                             "(the public ops take meta tensors; their launchers do not)")
        if device is None or device.type != "cuda":
            return self._run(None)
        current = torch.cuda.current_device()
        if device.index is None or device.index == current:
            return self._run(current)
        # Triton launches on the current device; torch ops follow their tensors instead.
        with torch.cuda.device(device):
            return self._run(device.index)

    def _run(self, device: int | None) -> "_Ran | None":
        """Launch on `device` (a CUDA index, now current; None: not a CUDA launch, or no
        tensor to say which, and the key asks the driver)."""
        if INTERPRETED:
            # The interpreter evaluates masked-off lanes too (-inf - -inf, exp of garbage) and
            # numpy warns about them, though the kernels never store those lanes.
            with np.errstate(all="ignore"):
                self.kernel[self.grid](*self.args, **self.constexprs, **self.launch_options())
            return None
        if device is not None:
            make_current(device)
        direct = None if not _fast_path_verified() or _launch_hooks_set() else self._direct()
        if direct is None:
            self.kernel[self.grid](*self.args, **self.constexprs, **self.launch_options())
            return None
        kernel, args = direct.kernel, direct.args
        for hook in kernel.pre_run_hooks:  # as JITFunction.run does before it specialises
            hook(*args, **direct.constexprs, **direct.launch_options())
        key = _specialization_key(direct, device)
        cache = _cache_of(kernel) if key is not None else None
        compiled = cache.compiled.get(key) if key is not None else None
        if compiled is None:
            # Triton's own path (it runs the pre-run hooks again: they must be idempotent,
            # as tritonkit's are: they set descriptors' tile shapes).
            result = kernel[direct.grid](*args, **direct.constexprs, **direct.launch_options())
            if (key is None or not hasattr(result, "packed_metadata")
                    or set(direct.constexprs) != set(cache.constexpr_names)):
                return None
            if len(cache.compiled) >= MAX_CACHED_LAUNCHES:
                cache.compiled.clear()
            cache.compiled[key] = result
            return _Ran(key[0], result, direct, cache.constexpr_values(direct.constexprs))
        grid = direct.grid + (1,) * (3 - len(direct.grid))
        device = key[0]  # _specialization_key puts the current device first
        stream = _driver().get_current_stream(device)
        constexpr_values = cache.constexpr_values(direct.constexprs)
        compiled.run(grid[0], grid[1], grid[2], stream, compiled.function, compiled.packed_metadata,
                     None, None, None, *args, *constexpr_values)
        return _Ran(device, compiled, direct, constexpr_values)

    def _direct(self) -> "Launch | None":
        """This launch as a plain JITFunction launch with a tuple grid, which the cached path
        can take: itself, or, for an autotuned kernel that has already chosen its config for
        these arguments, its kernel with that config's meta-parameters and launch options.
        None where only Triton's own path knows what to run (no choice made yet, heuristics,
        configs with pre-hooks or options the cached path does not pass)."""
        kernel = self.kernel
        if isinstance(kernel, Autotuner):
            config = tuned_config(kernel, self.args, self.constexprs)
            if (config is None or config.pre_hook is not None or config.num_ctas != 1
                    or config.maxnreg is not None or getattr(config, "ir_override", None) is not None):
                return None
            constexprs = {**self.constexprs, **config.kwargs}
            grid = self.grid
            if callable(grid):
                grid = grid({**dict(zip(kernel.arg_names, self.args)), **constexprs})
            return Launch(self.name, kernel.fn, tuple(grid), self.args, constexprs,
                          config.num_warps, config.num_stages)._direct()
        if type(kernel).__name__ not in _JIT_CLASSES or not isinstance(self.grid, tuple):
            return None
        return self

    def launch_options(self) -> dict[str, int]:
        return {k: v for k, v in (("num_warps", self.num_warps), ("num_stages", self.num_stages))
                if v is not None}


class _Ran(NamedTuple):
    """How a launch ran through the cached path: on CUDA device `device` (or the driver's
    for CPU stand-ins), `compiled` (a Triton CompiledKernel) launched as `direct` (itself, or
    an autotuned kernel's chosen config resolved), with its constexprs' values in order."""
    device: int
    compiled: Any
    direct: Launch
    constexpr_values: tuple


class LaunchTemplate:
    """A launch made again and again with new leading arguments: the kernel, grid, trailing
    arguments, constexprs and options are fixed, and each call gives the rest (the call's
    tensors and tensor descriptors). Launchers that plan per input layout keep these
    (ops/attention/plans.py).

    A call inside record_launches(), under a profiler's launch hooks, or before a compiled
    launcher is known goes through a plain `Launch` (recorded, keyed, Triton's path where
    needed). Once one has run through the cached path, the template is bound to that
    compiled kernel, and later calls launch it straight: no Launch, no specialisation key,
    no cache lookup. That is right only while the key would come out the same, which is the
    caller's contract: every call's leading arguments have the types, dtypes, 16-byte
    alignment and descriptor blocks of the call that bound it (a plan keyed by those of its
    inputs, whose outputs are fresh allocations, which torch's allocators align to 64
    bytes or more). Checked on every call: no recording, no launch hooks, the verified
    Triton, the bound device current, and for an autotuned kernel that its choices are still
    those it chose from (replacing its `cache` unbinds). The kernel's pre-run hooks run on
    every call, as in Triton, unless they left the binding call's descriptors as they were
    (the caller built them with the tiles the hooks give)."""

    __slots__ = ("name", "kernel", "grid", "tail", "constexprs", "num_warps", "num_stages", "_bound")

    def __init__(self, name: str, kernel: Any, grid: Any, tail: tuple, constexprs: dict[str, Any],
                 num_warps: int | None = 4, num_stages: int | None = 3):
        self.name, self.kernel, self.grid, self.tail = name, kernel, grid, tail
        self.constexprs, self.num_warps, self.num_stages = constexprs, num_warps, num_stages
        self._bound: tuple | None = None

    def __call__(self, *head: Any) -> None:
        bound = self._bound
        if bound is not None and not _recorders:
            device, cuda, run, function, metadata, grid, rest, hooks, choices = bound
            current = torch.cuda.current_device() if cuda else _driver().get_current_device()
            if (current == device and (choices is None or self.kernel.cache is choices)
                    and not _launch_hooks_set() and _triton_version.supported()):
                if cuda:
                    make_current(device)
                if hooks is not None:
                    hooks((*head, *self.tail))
                run(grid[0], grid[1], grid[2], _driver().get_current_stream(device), function, metadata,
                    None, None, None, *head, *rest)
                return
        self._bound = None
        launch = self.as_launch(head)
        blocks = [a.block_shape for a in head if isinstance(a, _DESCRIPTORS)]
        ran = launch.launch()
        if ran is not None:
            self._bound = self._binding(ran, head, blocks)

    def as_launch(self, head: tuple) -> Launch:
        """The plain Launch of a call with these leading arguments."""
        return Launch(self.name, self.kernel, self.grid, (*head, *self.tail), self.constexprs,
                      self.num_warps, self.num_stages)

    def _binding(self, ran: _Ran, head: tuple, blocks: list) -> tuple:
        direct = ran.direct
        compiled = ran.compiled
        device = _device_of(direct.args)
        hooks = None
        if blocks != [a.block_shape for a in head if isinstance(a, _DESCRIPTORS)]:
            functions, meta = tuple(direct.kernel.pre_run_hooks), {**direct.constexprs, **direct.launch_options()}

            def hooks(args):
                for hook in functions:
                    hook(*args, **meta)
        grid = direct.grid + (1,) * (3 - len(direct.grid))
        choices = self.kernel.cache if isinstance(self.kernel, Autotuner) else None
        return (ran.device, device is not None and device.type == "cuda", compiled.run, compiled.function,
                compiled.packed_metadata, grid, (*self.tail, *ran.constexpr_values), hooks, choices)


def _specialization_key(launch: Launch, device: int | None = None) -> tuple | None:
    """A key that determines everything Triton 3.6 specialises a compiled kernel on. Triton
    looks at each argument's type; at each tensor's dtype and whether its address is 16-byte
    aligned; at each tensor descriptor's dtype and block; at whether each int is 1, a multiple
    of 16, and inside int32 or int64. This key holds the argument types, the tensors' dtype
    and alignment, the descriptors' dtype and block, and every other argument's exact value
    (finer than needed: a new shape takes Triton's own path once), the constexprs, launch
    options and device (the current one, given by the caller that made it current, or asked of
    the driver); the kernel itself holds the cache (`_cache_of`). It runs on every
    launch, so where each kind of argument sits is worked out once per (kernel, argument
    types). None (take Triton's path) for anything but a plain JITFunction given all its
    arguments as tensors, tensor descriptors, ints, floats, bools, None or tuples (a Gluon
    kernel counts as one). The kernel's pre-run hooks, which may change its arguments
    (descriptors' tile shapes), must have run."""
    kernel, args = launch.kernel, launch.args
    if type(kernel).__name__ not in _JIT_CLASSES:
        return None
    cache = _cache_of(kernel)
    types = tuple(map(type, args))
    layout = cache.layouts.get(types)
    if layout is None:
        layout = cache.layouts[types] = _argument_layout(cache.constexpr_names, len(kernel.params), types)
    if layout is False:
        return None
    tensor_positions, descriptor_positions, plain_values, tuple_positions = layout
    # (Comprehensions into lists, not generators: this runs on every launch.)
    tensors = tuple([(args[i].dtype, args[i].data_ptr() % 16 == 0) for i in tensor_positions])
    descriptors = tuple([_descriptor_key(args[i]) for i in descriptor_positions]) if descriptor_positions else ()
    bundled = b""
    if tuple_positions:
        # Tuples as bytes: (1, 16), (True, 16) and (1.0, 16) are equal tuples, which Triton
        # compiles differently, and marshal tells them apart, nested tuples included (version
        # 2 writes no back-references, so equal tuples give equal bytes). A tuple holding a
        # tensor does not marshal: Triton's path.
        try:
            bundled = marshal.dumps(tuple([args[i] for i in tuple_positions]), 2)
        except ValueError:
            return None
    device = _driver().get_current_device() if device is None else device
    return (device, types, tensors, descriptors, plain_values(args), bundled,
            tuple(launch.constexprs.items()), launch.num_warps, launch.num_stages)


class _KernelCache:
    """Launch state of one kernel, kept on the kernel object so that it lives and dies with
    it (a cache keyed by id() could hand one kernel's state to a later kernel at that id)."""

    def __init__(self, kernel: Any):
        self.constexpr_names = names = _constexpr_names(kernel)
        # constexprs dict -> their values in the kernel's order, as the compiled launcher takes them
        self.constexpr_values = (operator.itemgetter(*names) if names and len(names) > 1
                                 else (lambda constexprs, name=names[0]: (constexprs[name],)) if names
                                 else (lambda constexprs: ()))
        self.layouts: dict[tuple[type, ...], tuple | bool] = {}
        self.compiled: dict[tuple, Any] = {}  # specialisation key -> triton CompiledKernel


def tuner_key(tuner: Autotuner, args: tuple, kwargs: dict[str, Any]) -> tuple:
    """The key under which `tuner` (a triton.autotune wrapper) keeps its choice for a call
    with these positional arguments and keyword meta-parameters, as Autotuner.run in Triton
    3.6 builds it: the values of its key arguments, then the dtype of every named argument
    that has one, in call order. Where each part sits is worked out once per argument types
    and keyword names (the key is made on every launch of an autotuned kernel)."""
    values = (*args, *kwargs.values())
    plan_key = (tuple(map(type, values)), len(args), tuple(kwargs))
    plans = tuner.__dict__.setdefault("_tritonkit_key_plans", {})
    plan = plans.get(plan_key)
    if plan is None:
        plan = plans[plan_key] = _tuner_key_plan(tuner, *plan_key)
    if plan is False:  # argument types the plan cannot vouch for: Autotuner.run's own way
        named = {k: v for k, v in {**dict(zip(tuner.arg_names, args)), **kwargs}.items() if k in tuner.arg_names}
        return tuple([named[k] for k in tuner.keys if k in named]
                     + [str(v.dtype) for v in named.values() if hasattr(v, "dtype")])
    key_positions, dtype_positions = plan
    return (*(values[i] for i in key_positions), *(str(values[i].dtype) for i in dtype_positions))


def _tuner_key_plan(tuner: Autotuner, types: tuple[type, ...], n_args: int,
                    kwarg_names: tuple[str, ...]) -> tuple | bool:
    """For `tuner_key`: (positions of the key's values, positions of the arguments whose dtype
    joins it) in (*args, *kwargs.values()); False unless every value is a tensor, a tensor
    descriptor, a plain value or a tuple, types that settle whether it has a dtype (tensors only)."""
    if not all(issubclass(t, (torch.Tensor, *_DESCRIPTORS)) or t in _VALUED for t in types):
        return False
    names = (*tuner.arg_names[:n_args], *kwarg_names)
    named = [i for i, name in enumerate(names) if name in tuner.arg_names]
    position = {names[i]: i for i in named}
    return (tuple(position[k] for k in tuner.keys if k in position),
            tuple(i for i in named if issubclass(types[i], torch.Tensor)))


def tuned_config(tuner: Autotuner, args: tuple, kwargs: dict[str, Any]) -> Any:
    """The config `tuner` would launch these arguments with without tuning again (its only
    config, or the choice it made for their key in this process), else None."""
    if len(tuner.configs) == 1:
        return tuner.configs[0]
    return tuner.cache.get(tuner_key(tuner, args, kwargs))


def _cache_of(kernel: Any) -> _KernelCache:
    cache = getattr(kernel, "_tritonkit_launch_cache", None)
    if cache is None:
        cache = kernel._tritonkit_launch_cache = _KernelCache(kernel)
    return cache


def _argument_layout(constexpr_names: tuple[str, ...] | None, n_params: int,
                     types: tuple[type, ...]) -> tuple | bool:
    """(tensor positions, descriptor positions, a getter of the other arguments' values, tuple
    positions) for a kernel called with arguments of these types; False when the key cannot
    describe the call (arguments missing, an argument of another type)."""
    if constexpr_names is None or len(types) + len(constexpr_names) != n_params:
        return False
    tensors = tuple(i for i, t in enumerate(types) if issubclass(t, torch.Tensor))
    descriptors = tuple(i for i, t in enumerate(types) if issubclass(t, _DESCRIPTORS))
    plain = tuple(i for i, t in enumerate(types) if t in _PLAIN)
    tuples = tuple(i for i, t in enumerate(types) if t is tuple)
    if len(tensors) + len(descriptors) + len(plain) + len(tuples) != len(types):
        return False
    if len(plain) > 1:
        return tensors, descriptors, operator.itemgetter(*plain), tuples
    return tensors, descriptors, (lambda args, i=plain[0]: (args[i],)) if plain else (lambda args: ()), tuples


def _descriptor_key(desc: TensorDescriptor) -> tuple:
    """What Triton 3.6 specialises a host tensor descriptor on: its dtype and block (the
    signature type tensordesc<fp32[1, 1, 64, 128]>), and a Gluon descriptor's shared-memory
    layout (a frozen dataclass); base, shape and strides are passed at launch. (A
    TensorDescriptor is a mutable dataclass, so it cannot be a key itself.)"""
    return ("tensordesc", desc.base.dtype, tuple(desc.block_shape), desc.padding, getattr(desc, "layout", None))


def _constexpr_names(kernel: Any) -> tuple[str, ...] | None:
    """The kernel's constexpr parameters, in order (they must come last: the compiled
    launcher takes every parameter positionally). None when a constexpr has a default (the
    launch may omit it) or sits before a runtime parameter."""
    params = [p for p in kernel.params if p.is_constexpr]
    tail_ok = all(p.num >= len(kernel.params) - len(params) for p in params)
    return tuple(p.name for p in params) if tail_ok and not any(p.has_default for p in params) else None


def _device_of(args: tuple) -> torch.device | None:
    """The device of a launch's first tensor (or tensor descriptor's tensor) argument."""
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return arg.device
        if isinstance(arg, _DESCRIPTORS):
            return arg.base.device
    return None


def _driver():
    return triton.runtime.driver.active


def _fast_path_verified() -> bool:
    """Whether the imported Triton is one the cached path is verified with; if not, say so once."""
    if _triton_version.supported():
        return True
    _triton_version.warn_once("cached-launcher fast path", "launches take Triton's own path instead "
                              "(same kernels and results, a few microseconds more host time a launch)")
    return False


def _launch_hooks_set() -> bool:
    """Whether a profiler (proton, say) hooks launches. Triton 3.6 keeps the hooks in
    HookChain objects that are never None; an empty chain calls nothing."""
    runtime = knobs.runtime
    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
    return bool((enter is not None and getattr(enter, "calls", True))
                or (leave is not None and getattr(leave, "calls", True)))


def launches_execute() -> bool:
    """False inside record_launches(execute=False), where launches are only recorded (the
    inspector compiles them for a GPU, so launchers should pick their GPU configs)."""
    return all(run for _, run, _ in _recorders)


def recording_state() -> tuple:
    """(execute, capability) of each recording open now, innermost last: all that
    `launches_execute` and `target_capability` read of them, for launchers that keep their
    choices per call layout (ops/attention/plans.py). () when none is open."""
    return tuple([(run, capability) for _, run, capability in _recorders]) if _recorders else ()


def target_capability(device: torch.device) -> int | None:
    """The compute capability (major * 10 + minor, 90 for Hopper) that launches on `device`
    would run on, for launchers whose dispatch depends on the GPU generation; None where no
    compiled GPU code runs (a CPU tensor, or Triton's interpreter).

    Inside record_launches(execute=False, capability=...) it is that capability whatever the
    device: the inspector records, on CPU tensors, the launches an input would make on that
    GPU, and compiles them for it. Nothing is launched there, so the stated target can only
    change what is recorded, never what runs; outside such a recording this is the device's
    own capability."""
    if not launches_execute():
        stated = next((cap for _, _, cap in reversed(_recorders) if cap is not None), None)
        if stated is not None:
            return stated
    if device.type != "cuda" or INTERPRETED or not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return major * 10 + minor


@dataclass(frozen=True)
class PathChoice:
    """A launcher's choice between kernel families for one pass, and why (for the inspector)."""
    what: str       # the pass it chose for, e.g. "attention forward"
    path: str       # "gluon" or "triton"
    reason: str


class Recording(list):
    """The launches made inside record_launches(), in order; `choices` holds (number of
    launches recorded before it, PathChoice) for each path choice made meanwhile."""
    choices: list[tuple[int, PathChoice]]


def record_choice(choice: PathChoice) -> None:
    """Tell the recordings open now (if any) which path a launcher chose, and why."""
    for launches, _, _ in _recorders:
        launches.choices.append((len(launches), choice))


@contextlib.contextmanager
def record_launches(execute: bool = True, capability: int | None = None) -> Iterator[Recording]:
    """Collect every Launch made in this block; with execute=False the kernels do not run,
    and `capability` (e.g. 90) is the GPU that `target_capability` answers for meanwhile."""
    launches = Recording()
    launches.choices = []
    _recorders.append((launches, execute, capability))
    try:
        yield launches
    finally:
        _recorders.pop()  # recorders nest, so the innermost is last
