"""Where kernels run: compiled on a CUDA GPU, or through Triton's interpreter on the CPU.

Triton decides between compiling and interpreting when a kernel is decorated, from
TRITON_INTERPRET. So this module must run before any `@triton.jit` in tritonkit is
evaluated: `tritonkit/__init__.py` imports it first. Asking torch whether CUDA is
available does no work on a GPU, so `import tritonkit` stays safe on a laptop.

Triton's own language functions (tl.max, tl.sum, tl.cdiv, ...) are decorated when triton is
first imported, which other libraries may do before tritonkit (transformers does, when a
model class is imported). Those made for compiling are remade here for the interpreter, so
the order of imports does not matter.
"""

from __future__ import annotations

import functools
import os
import sys

import torch


def _choose_interpreter() -> bool:
    requested = os.environ.get("TRITON_INTERPRET")
    if requested is not None:
        return requested not in ("", "0")
    if torch.cuda.is_available():
        return False
    os.environ["TRITON_INTERPRET"] = "1"
    return True


def _switched_too_late() -> bool:
    """True when triton's language was imported before the interpreter was switched on and
    its own @jit helpers (tl.max, tl.sum, ...) are still compiled-mode functions, which the
    interpreter cannot call: every kernel would fail inside Triton."""
    standard = sys.modules.get("triton.language.standard")
    return standard is not None and type(standard.max).__name__ != "InterpretedFunction"


def _interpret_triton_language() -> None:
    """Remake for the interpreter the @jit functions of triton's language that an earlier
    import of triton made for compiling, as `triton.jit` makes them under TRITON_INTERPRET=1:
    the same Python functions, as InterpretedFunctions, in every triton module that holds
    them, and as methods of tl.tensor (`x.sum()`), which call them. Where these Triton
    internals differ, nothing is changed and `_switched_too_late` still says so."""
    try:
        import triton.language as tl
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction
    except ImportError:
        return
    remade: dict[int, object] = {}

    def interpreted(fn: JITFunction) -> object:
        if id(fn) not in remade:
            remade[id(fn)] = InterpretedFunction(fn.fn)
        return remade[id(fn)]

    for name, module in list(sys.modules.items()):
        if module is None or not (name == "triton" or name.startswith("triton.")):
            continue
        for attr, value in list(vars(module).items()):
            if type(value) is JITFunction:
                setattr(module, attr, interpreted(value))
    for attr, value in list(vars(tl.tensor).items()):
        if type(value) is JITFunction:
            setattr(tl.tensor, attr, _tensor_method(interpreted(value)))


def _tensor_method(fn):
    """A tl.tensor method forwarding to `fn`, as triton binds its free functions to tensors."""
    def method(*args, **kwargs):
        return fn(*args, **kwargs)
    method.__name__ = fn.__name__
    return method


INTERPRETED: bool = _choose_interpreter()
if INTERPRETED and _switched_too_late():
    _interpret_triton_language()
_SWITCHED_TOO_LATE: bool = INTERPRETED and _switched_too_late()


def default_device() -> torch.device:
    """The device tritonkit's kernels run on: the current GPU, or the CPU under the interpreter."""
    return torch.device("cpu") if INTERPRETED else torch.device("cuda", torch.cuda.current_device())


def describe() -> str:
    if INTERPRETED:
        return ("Triton interpreter on the CPU (no CUDA device): results are exact, "
                "timings are NOT GPU timings")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return f"compiled for {props.name} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs)"


def check_device(name: str, t: torch.Tensor) -> None:
    """Refuse tensors on a device where the kernels cannot run, naming the argument."""
    check_device_of(name, t.device)


def check_device_of(name: str, device: torch.device) -> None:
    """check_device for a tensor known by its device alone. Meta tensors pass: they reach the
    ops' fakes only (`_op.tracing`), never a launch."""
    if device.type == "meta":
        return
    if INTERPRETED:
        if _SWITCHED_TOO_LATE:
            raise RuntimeError(
                "tritonkit's kernels run through Triton's interpreter here (no CUDA device), but triton "
                "was imported before tritonkit (by your code or by another library) and this Triton "
                f"({_triton_version()}) could not be switched over afterwards. Start Python with "
                "TRITON_INTERPRET=1 in the environment, or import tritonkit first.")
        problem = _interpreter_numpy_problem()
        if problem:
            raise RuntimeError(problem)
        if device.type != "cpu":
            raise ValueError(f"{name} is on {device}, but tritonkit runs through the Triton "
                             "interpreter here and needs CPU tensors")
    elif device.type != "cuda":
        raise ValueError(f"{name} is on {device}; tritonkit's kernels need CUDA tensors")


def _triton_version() -> str:
    import triton
    return triton.__version__


# Triton 3.6's interpreter reads loop bounds and other scalars out of one-element arrays with
# int(), which numpy 2.4 refuses ("only 0-dimensional arrays can be converted to Python
# scalars"): kernels with such loops fail inside the interpreter. pyproject bounds numpy.
_INTERPRETER_NUMPY_BELOW = (2, 4)


def _interpreter_numpy_problem() -> str | None:
    """The error to give, once the interpreter is about to run, when the installed numpy is
    one this Triton's interpreter fails with; None when it is fine."""
    import numpy
    return _numpy_problem(numpy.__version__, _triton_version())


@functools.lru_cache(maxsize=4)
def _numpy_problem(numpy_version: str, triton_version: str) -> str | None:
    from ._triton_version import parse
    if parse(triton_version) != (3, 6) or parse(numpy_version) < _INTERPRETER_NUMPY_BELOW:
        return None
    bound = ".".join(map(str, _INTERPRETER_NUMPY_BELOW))
    return (f"tritonkit's kernels run through Triton's interpreter here (no CUDA device), and Triton "
            f"{triton_version}'s interpreter fails with numpy {bound} and later; numpy {numpy_version} is "
            f"installed. Install an earlier numpy: pip install 'numpy<{bound}'")


def _interpreter_dots_take_bf16_as_numbers() -> None:
    """Make the interpreter's tl.dot right for bfloat16 operands, once, for every kernel.

    Triton 3.6's interpreter stores bfloat16 tensors as their uint16 bits and hands those
    bits to numpy.matmul as integers (InterpreterBuilder.create_dot), so a dot of two bf16
    tiles comes out wrong. Here bf16 operands are widened to float32 first, through the
    interpreter's own cast: bf16 values are exact in float32 and the product is accumulated
    in float32, as tensor cores do. Compiled kernels are untouched (kernels call tl.dot
    plainly; `tritonkit inspect` compiles what a GPU runs). Where the interpreter lacks
    these internals nothing is changed (and bf16 dots are as that Triton computes them).
    """
    try:
        import triton.language as tl
        from triton.runtime.interpreter import InterpreterBuilder
    except ImportError:
        return
    original = getattr(InterpreterBuilder, "create_dot", None)
    if original is None or getattr(original, "widens_bf16", False) or not hasattr(InterpreterBuilder, "cast_impl"):
        return

    def create_dot(self, a, b, *rest):
        if a.dtype.scalar == tl.bfloat16:
            a = self.cast_impl(a, tl.float32)
        if b.dtype.scalar == tl.bfloat16:
            b = self.cast_impl(b, tl.float32)
        return original(self, a, b, *rest)

    create_dot.widens_bf16 = True
    InterpreterBuilder.create_dot = create_dot


if INTERPRETED and not _SWITCHED_TOO_LATE:
    _interpreter_dots_take_bf16_as_numbers()
