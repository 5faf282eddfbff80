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
    if INTERPRETED:
        if _SWITCHED_TOO_LATE:
            raise RuntimeError(
                "tritonkit's kernels run through Triton's interpreter here, which must be switched on "
                "before triton is first imported, but triton was imported earlier. Import tritonkit "
                "before triton, or start Python with TRITON_INTERPRET=1 in the environment.")
        if t.device.type != "cpu":
            raise ValueError(f"{name} is on {t.device}, but tritonkit runs through the Triton "
                             "interpreter here and needs CPU tensors")
    elif t.device.type != "cuda":
        raise ValueError(f"{name} is on {t.device}; tritonkit's kernels need CUDA tensors")
