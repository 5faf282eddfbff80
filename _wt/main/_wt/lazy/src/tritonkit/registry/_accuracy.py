"""Error of a result against a float64 reference, beside torch's own error in the same dtype.

Shared by the tests (which bound ours by torch's), the registry's fuzz cases and the CPU
first run of `tritonkit bench` (which prints both). `check_sample` runs an op's registry
sample through the op and its `*_reference`, forward and backward.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from . import OpEntry


@dataclass
class Comparison:
    """One result of ours beside the float64 reference and torch's result in our dtype."""
    what: str                 # "forward", "grad x", "softmax dim=1: x float16 (3, 7) ..."
    ours: torch.Tensor
    reference: torch.Tensor   # float64
    torch: torch.Tensor       # torch's own computation in the dtype ours has
    gradient: bool = False    # a gradient (tolerances are wider: backward passes cancel)
    # The narrowest dtype the result was computed from, where narrower than its own (a float32
    # weight gradient of bfloat16 activations): the tolerance follows it.
    precision: torch.dtype | None = None
    # Roundings of the result's dtype it may carry: 1 for a result rounded (or, by Triton's
    # interpreter, truncated from float32 to bfloat16) once; a sum of terms each rounded first
    # (an intermediate cast before a product) carries 1 + the sum's condition number
    # ||sum |terms||| / ||sum terms||, each term's rounding amplified by it.
    roundings: float = 1.0


def mismatch(out: torch.Tensor, ref: torch.Tensor) -> str | None:
    """Why `out` cannot be compared with `ref` (NaN or infinities where ref has none), or None."""
    out64, ref64 = out.double(), ref.double()
    nan_ref = torch.isnan(ref64)
    if not torch.equal(torch.isnan(out64), nan_ref):
        return "NaNs differ from the reference"
    infinite = ~torch.isfinite(ref64) & ~nan_ref
    if not torch.equal(out64[infinite], ref64[infinite]) or not torch.isfinite(out64[torch.isfinite(ref64)]).all():
        return "infinities differ from the reference"
    return None


def condition(magnitudes: torch.Tensor, ref: torch.Tensor) -> float:
    """||magnitudes|| / ||ref|| over the entries where ref is finite, for a ref that sums terms
    and magnitudes the same sums of their absolute values: how much the sums amplify an error
    relative to each term. ||magnitudes|| alone where ref is all zero (`relative_error` then
    measures the absolute error)."""
    finite = torch.isfinite(ref)
    scale = ref[finite].double().norm().item()
    size = magnitudes[finite].double().norm().item()
    return size / scale if scale > 0 else size


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| over the entries where ref is finite (the absolute error where
    ref is all zero); inf where NaN or infinities sit elsewhere than in ref."""
    if mismatch(out, ref) is not None:
        return float("inf")
    out64, ref64 = out.double(), ref.double()
    finite = torch.isfinite(ref64)
    diff = (out64[finite] - ref64[finite]).norm().item()
    scale = ref64[finite].norm().item()
    return diff / scale if scale > 0 else diff


def check_sample(entry: OpEntry, device: torch.device, seed: int = 0) -> list[Comparison]:
    """The entry's sample through its op and its reference: the outputs, and the gradient of
    every floating-point tensor argument for a random upstream gradient (when the op has one).
    The reference runs on float64 copies of the arguments, and in their own dtypes for torch."""
    from .._op import DECLARED

    op = DECLARED[entry.op]
    args = entry.sample(device)
    generator = torch.Generator(device=device).manual_seed(seed)

    def leaves(wide: bool) -> list:
        return [a.detach().to(torch.float64 if wide else a.dtype).requires_grad_()
                if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]

    ours_in, same_in, wide_in = leaves(False), leaves(False), leaves(True)
    # The op may return more than its reference (attention's log-sum-exp): the reference's
    # outputs are the ones compared, and the differentiable ones carry the gradient.
    refs = _as_tuple(entry.reference(*wide_in, upcast=True))
    outs = [_as_tuple(op(*ours_in))[:len(refs)], _as_tuple(entry.reference(*same_in, upcast=False)), refs]
    single = len(refs) == 1
    found = [Comparison("forward" if single else f"output {i}", o.detach(), r.detach(), t.detach())
             for i, (o, t, r) in enumerate(zip(*outs))]
    differentiable = [i for i, o in enumerate(outs[0]) if o.requires_grad]
    if not differentiable:
        return found
    upstream = [torch.randn(outs[0][i].shape, generator=generator, device=device) for i in differentiable]
    grads = []
    for out, inputs in zip(outs, (ours_in, same_in, wide_in)):
        tensors = [a for a in inputs if isinstance(a, torch.Tensor) and a.requires_grad]
        grads.append(torch.autograd.grad([out[i] for i in differentiable], tensors,
                                         [g.to(out[i].dtype) for g, i in zip(upstream, differentiable)],
                                         allow_unused=True))
    names = list(inspect.signature(op.forward).parameters)
    positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point()]
    # Arguments the op does not differentiate (rope's cos and sin) have no gradient of ours.
    found += [Comparison(f"grad {names[i]}", o, r, t, gradient=True)
              for i, o, t, r in zip(positions, *grads) if o is not None]
    return found


def _as_tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)
