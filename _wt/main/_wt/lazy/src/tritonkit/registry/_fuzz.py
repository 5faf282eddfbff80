"""Inputs for the alignment fuzz: sizes at the edges, and views that break alignment.

Each op's registry entry declares `FuzzCase`s; a case draws its inputs through `FuzzInputs`
(sizes, dtypes, layouts), runs the op, and returns `Comparison`s (ours, the float64
reference, torch's own result in the same dtype). tests/test_fuzz_alignment.py runs every
case of every entry under hypothesis, which supplies the draws through the `Draw` methods;
hypothesis stays a test dependency, so nothing here imports it.

A layout is how a tensor sits in memory: an element offset 0..15 into its buffer (so the
data pointer lands anywhere relative to a 16-byte boundary), an order of dimensions in
memory (transposes), and a step per dimension (step slices).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ._accuracy import Comparison, _as_tuple

# Edge sizes: 1, small primes, powers of two and one past them (a block and one more).
EDGE = (1, 2, 3, 7, 13, 16, 31, 64, 127, 128, 129)
BLOCK_EDGE = (781, 1000, 1021, 1024, 1025, 4096, 4097)
BLOCK_EDGE_GPU = (65537, 1 << 20)
FLOATS = (torch.float32, torch.float16, torch.bfloat16)
HALVES = (torch.float16, torch.bfloat16)


class Draw(Protocol):
    """The choices a fuzz case makes; the test maps each onto a hypothesis strategy."""
    def integer(self, low: int, high: int) -> int: ...          # low..high inclusive
    def choice(self, options: Sequence[Any]) -> Any: ...
    def boolean(self) -> bool: ...
    def permutation(self, items: Sequence[Any]) -> list: ...


@dataclass(frozen=True)
class Layout:
    offset: int               # elements between the buffer's start and the view's
    order: tuple[int, ...]    # the view's dims from outermost to innermost in memory
    steps: tuple[int, ...]    # step slice per memory dim

    def innermost(self, dim: int) -> "Layout":
        """The same layout with `dim` moved innermost in memory."""
        return Layout(self.offset, tuple(d for d in self.order if d != dim) + (dim,), self.steps)


class FuzzInputs:
    """What a fuzz case draws its inputs from, on `device`; `on_gpu` allows larger sizes."""

    def __init__(self, draw: Draw, device: torch.device, on_gpu: bool):
        self.draw, self.device, self.on_gpu = draw, device, on_gpu
        self.edge = EDGE
        self.block_edge = BLOCK_EDGE + (BLOCK_EDGE_GPU if on_gpu else ())
        self.max_elements = (1 << 24) if on_gpu else 40_000
        # Tensor values follow from the draws, so a failure hypothesis reports replays exactly.
        self.generator = torch.Generator(device=device).manual_seed(draw.integer(0, 2**31 - 1))

    def layout(self, ndim: int) -> Layout:
        offset = self.draw.integer(0, 15)
        order = tuple(self.draw.permutation(range(ndim))) if ndim > 1 else (0,)
        steps = tuple(self.draw.choice((1, 1, 1, 2, 3)) for _ in range(ndim))
        return Layout(offset, order, steps)

    def shape(self, max_dims: int, last_sizes: Sequence[int] | None = None) -> list[int]:
        """1..max_dims sizes: edge sizes, one of them from `last_sizes` (default: edge and
        block-edge sizes), at most `max_elements` in all, in a drawn order."""
        last_sizes = last_sizes or self.edge + self.block_edge
        ndim = self.draw.integer(1, max_dims)
        shape = [self.draw.choice(self.edge) for _ in range(ndim - 1)]
        shape.append(self.draw.choice(last_sizes))
        while len(shape) > 1 and numel(shape) > self.max_elements:
            shape.pop(0)
        if numel(shape) > self.max_elements:
            shape = [self.max_elements]
        return list(self.draw.permutation(shape))

    def view(self, shape: Sequence[int], dtype: torch.dtype, layout: Layout | None = None,
             scale: float = 1.0) -> torch.Tensor:
        """A random tensor of `shape` laid out as `layout` says (drawn when None), inside a
        larger buffer."""
        layout = layout or self.layout(len(shape))
        stored = [shape[d] * layout.steps[i] for i, d in enumerate(layout.order)]
        size = numel(stored)
        buffer = torch.randn(size + layout.offset + 15, device=self.device, generator=self.generator)
        buffer = buffer.to(dtype) * scale
        base = buffer[layout.offset:layout.offset + size].view(stored)
        sliced = base[tuple(slice(None, None, step) for step in layout.steps)]
        view = sliced.permute(*[layout.order.index(d) for d in range(len(shape))])
        assert tuple(view.shape) == tuple(shape)
        return view

    def randn(self, shape: Sequence[int], dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
        """A contiguous random tensor from the same generator."""
        return torch.randn(tuple(shape), device=self.device, generator=self.generator).to(dtype) * scale


@dataclass(frozen=True)
class FuzzCase:
    name: str                                           # "forward", "backward"
    examples: int                                       # hypothesis examples in CI
    run: Callable[[FuzzInputs], list[Comparison]]


def compare_outputs(what: str, names: Sequence[str], ours, reference, same) -> list[Comparison]:
    """One Comparison per output: ours, the float64 reference, and torch in its own dtypes
    (rounded to ours's dtype: float32 cos beside bfloat16 q computes in float32)."""
    return [Comparison(f"{name}: {what}", o, r, t.to(o.dtype))
            for name, o, r, t in zip(names, _as_tuple(ours), _as_tuple(reference), _as_tuple(same))]


def compare_gradients(what: str, inputs: dict[str, torch.Tensor], ours: Callable, reference: Callable,
                      upstream: Sequence[torch.Tensor]) -> list[Comparison]:
    """The gradients of `inputs` (name -> tensor) for the `upstream` gradients of the outputs:
    through ours(**inputs), through reference(**inputs, upcast=True) on float64 copies, and
    through reference(**inputs, upcast=False) in the inputs' own dtypes (torch's yardstick);
    the tolerance follows the narrowest of the inputs' dtypes."""
    def grads(f, cast):
        leaves = {name: cast(t).detach().requires_grad_() for name, t in inputs.items()}
        outs = _as_tuple(f(**leaves))
        return torch.autograd.grad(outs, list(leaves.values()),
                                   [cast(u).to(o.dtype) for u, o in zip(upstream, outs)])

    def same(t):
        return t

    exact = grads(lambda **a: reference(**a, upcast=True), lambda t: t.double())
    theirs = grads(lambda **a: reference(**a, upcast=False), same)
    found = grads(ours, same)
    for (name, t), g in zip(inputs.items(), found):
        assert g.shape == t.shape and g.dtype == t.dtype, f"d{name}: {g.dtype} {tuple(g.shape)}"
    narrowest = max((t.dtype for t in inputs.values()), key=lambda d: torch.finfo(d).eps)
    return [Comparison(f"d{name}: {what}", o, e, t, gradient=True, precision=narrowest)
            for name, o, e, t in zip(inputs, found, exact, theirs)]


def numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def describe(t: torch.Tensor) -> str:
    """dtype, shape, strides and how far the data pointer sits past a 16-byte boundary."""
    return (f"{str(t.dtype).removeprefix('torch.')} {tuple(t.shape)} strides {tuple(t.stride())} "
            f"offset {t.storage_offset()} ({t.data_ptr() % 16} B past 16)")
