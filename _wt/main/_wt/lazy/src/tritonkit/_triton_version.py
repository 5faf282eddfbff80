"""Which Triton versions tritonkit's uses of Triton internals are verified with.

Two parts of tritonkit reach past Triton's public API:
- the cached-launcher fast path (`_launch.py`): a compiled kernel's `run` with its packed
  metadata, `JITFunction.params`, `Autotuner.cache`/`configs`/`keys`, the launch hooks in
  `triton.knobs`, and what Triton specialises a kernel on (the key must hold all of it);
- the inspector (`tritonkit.inspector`): `JITFunction._pack_args`, the binder Triton builds
  (`create_function_from_signature`), `ASTSource` and `triton.compile` for a target, and the
  interpreter's patches of `triton.language`.

Both are verified with Triton 3.6 (3.6.0: the CPU interpreter and inspector in CI, the
compiled kernels and benchmarks on the H200); pyproject pins `triton>=3.6,<3.7` to match.
On any other version the launchers take Triton's own launch path (`kernel[grid](...)`, a
few microseconds more host time a launch, same results) and the inspector still tries; each
says so once, with a `TritonVersionWarning`.
"""

from __future__ import annotations

import functools
import re
import warnings

import triton

SUPPORTED = ((3, 6), (3, 7))   # [first, last) major.minor verified
TRITON_VERSION: str = triton.__version__

_warned: set[str] = set()


class TritonVersionWarning(UserWarning):
    """tritonkit runs with a Triton version its fast paths are not verified with."""


class UnsupportedTriton(RuntimeError):
    """A use of Triton internals failed under a Triton outside the verified range."""


def parse(version: str) -> tuple[int, int]:
    """(major, minor) of a version string such as "3.6.0" or "3.7.0+git1234"; (0, 0) if unreadable."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def supported(version: str | None = None) -> bool:
    """Whether `version` (default: the Triton that is imported) is in the verified range.
    Asked on every launch, so the answer is kept per version string."""
    return _in_range(TRITON_VERSION if version is None else version)


@functools.lru_cache(maxsize=8)
def _in_range(version: str) -> bool:
    first, end = SUPPORTED
    return first <= parse(version) < end


def supported_range() -> str:
    (a, b), (c, d) = SUPPORTED
    return f">={a}.{b},<{c}.{d}"


def warn_once(part: str, consequence: str) -> None:
    """Say once per `part` that this Triton is outside the verified range, and what follows."""
    if part in _warned:
        return
    _warned.add(part)
    warnings.warn(f"tritonkit's {part} is verified with triton{supported_range()}, but triton "
                  f"{TRITON_VERSION} is installed: {consequence}", TritonVersionWarning, stacklevel=3)
