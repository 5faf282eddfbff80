"""Where kernels run: compiled on a CUDA GPU, or through Triton's interpreter on the CPU.

Triton decides between compiling and interpreting when a kernel is decorated, from
TRITON_INTERPRET. So this module must run before any `@triton.jit` in tritonkit is
evaluated: `tritonkit/__init__.py` imports it first. Asking torch whether CUDA is
available does no work on a GPU, so `import tritonkit` stays safe on a laptop.
"""

from __future__ import annotations

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
    """True when triton's language was imported before the interpreter was switched on: its
    own @jit helpers (tl.max, tl.sum, ...) are then compiled-mode functions that the
    interpreter cannot call, and every kernel would fail inside Triton."""
    standard = sys.modules.get("triton.language.standard")
    return standard is not None and type(standard.max).__name__ != "InterpretedFunction"


INTERPRETED: bool = _choose_interpreter()
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
                "tritonkit's kernels run through Triton's interpreter here, which must be switched on "
                "before triton is first imported, but triton was imported earlier. Import tritonkit "
                "before triton, or start Python with TRITON_INTERPRET=1 in the environment.")
        if device.type != "cpu":
            raise ValueError(f"{name} is on {device}, but tritonkit runs through the Triton "
                             "interpreter here and needs CPU tensors")
    elif device.type != "cuda":
        raise ValueError(f"{name} is on {device}; tritonkit's kernels need CUDA tensors")


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
