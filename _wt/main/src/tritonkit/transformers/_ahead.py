"""Results computed ahead of a module's call and left on the module until it is called.

Two replacements compute in one step what several modules of a layer compute apart: a decoder
layer's closing residual add computes the next layer's input norm with the sum (`_residual`),
and the first of a group of projections of one input computes the whole group (`_projections`).
The result for a module that runs later is left on that module together with the tensor it is
a function of; the module's patched forward takes it when called on that same tensor, unchanged
(its version counter; the identity alone under torch.compile, which cannot read versions), and
computes as usual otherwise, dropping what was left either way. It is left on the module, not
on the tensor, because torch.compile cannot set attributes on a custom op's output; a module
that is then not called keeps that one result until the next call that leaves one.
"""

from __future__ import annotations

import torch

_SLOT = "_tritonkit_ahead"  # on a module: (the input tensor, its version or None, the module's result)


def clear(module: torch.nn.Module) -> None:
    """An empty slot (also makes the lookup in `take` a plain attribute hit)."""
    object.__setattr__(module, _SLOT, None)


def leave(module: torch.nn.Module, source: torch.Tensor, result) -> None:
    setattr(module, _SLOT, (source, None if torch.compiler.is_compiling() else source._version, result))


def take(module: torch.nn.Module, source: torch.Tensor):
    """What was left on `module` for `source` (unchanged since), else None; the slot is emptied."""
    ahead = getattr(module, _SLOT, None)
    if ahead is None:
        return None
    setattr(module, _SLOT, None)
    left_for, version, result = ahead
    if left_for is not source or (version is not None and version != source._version):
        return None
    return result
