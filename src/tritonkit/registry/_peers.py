"""Optional peers from other libraries, each listed only where it imports."""

from __future__ import annotations

from collections.abc import Callable

from ._inputs import peer_compile


def liger(module: str, name: str) -> Callable | None:
    """A class or function of Liger Kernel (liger_kernel.<module>.<name>), or None when
    Liger is not installed or does not import here."""
    try:
        from importlib import import_module
        return getattr(import_module(f"liger_kernel.{module}"), name)
    except Exception:  # ImportError, or a Triton/CUDA mismatch inside Liger's imports
        return None


def fwd_bwd_providers(grad_of: Callable[[Callable], Callable], ours: Callable, eager: Callable,
                      liger_call: Callable | None) -> dict[str, Callable]:
    """A loss's providers for one case, forward and backward: `grad_of(loss_fn)` is the call
    that takes the gradients of loss_fn on the case's inputs; tritonkit's loss, the eager one,
    torch.compile of the eager one, and Liger's call where it imports (`liger_call`)."""
    providers = {"tritonkit": grad_of(ours), "eager": grad_of(eager), "torch.compile": grad_of(peer_compile(eager))}
    if liger_call is not None:
        providers["Liger"] = liger_call
    return providers
