"""Patched forwards set on module instances (`patch(model)`), in a form pickle keeps.

A bound method pickles as the name of an attribute of its object (`getattr(module, "forward")`):
a whole model saved with torch.save and loaded again would find the class's own forward (the
patch silently gone) or no attribute at all. `set_forward` stores, instead, an `InstanceForward`
that pickles as the factory and arguments it was made from and is made again on load.
"""

from __future__ import annotations

import types
from collections.abc import Callable

import torch


class InstanceForward:
    """`factory(*args)` bound to `module`, called as its forward. `__wrapped__` is the bound
    function, so inspect.signature (transformers' Trainer reads the model's) sees its
    parameters; other attributes (what the patch notes on its forward) are the function's."""

    # Attributes of its own (not __slots__: torch.compile guards a called object's __dict__).
    _OWN = ("module", "factory", "args", "bound", "__wrapped__")

    def __init__(self, module: torch.nn.Module, factory: Callable, *args):
        self.module, self.factory, self.args = module, factory, args
        self.bound = self.__wrapped__ = types.MethodType(factory(*args), module)

    def __call__(self, *args, **kwargs):
        return self.bound(*args, **kwargs)

    def __getattr__(self, name: str):
        if name in InstanceForward._OWN:  # not set yet: no recursion through self.bound
            raise AttributeError(name)
        return getattr(self.bound, name)

    def __reduce__(self):
        return InstanceForward, (self.module, self.factory, *self.args)


def as_is(function: Callable) -> Callable:
    """The factory of a forward that is a module-level function already."""
    return function


def set_forward(module: torch.nn.Module, factory: Callable, *args) -> None:
    """module.forward = factory(*args) bound to module (factory and args picklable)."""
    module.forward = InstanceForward(module, factory, *args)
