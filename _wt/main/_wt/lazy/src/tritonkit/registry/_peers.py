"""Optional peers from other libraries, each listed only where it imports."""

from __future__ import annotations

from collections.abc import Callable


def liger(module: str, name: str) -> Callable | None:
    """A class or function of Liger Kernel (liger_kernel.<module>.<name>), or None when
    Liger is not installed or does not import here."""
    try:
        from importlib import import_module
        return getattr(import_module(f"liger_kernel.{module}"), name)
    except Exception:  # ImportError, or a Triton/CUDA mismatch inside Liger's imports
        return None
