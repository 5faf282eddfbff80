"""Catalogue entry for `tritonkit.layer_norm`: inspector passes, benchmark cases, sample and fuzz."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..ops.norms import layer_norm, layer_norm_bwd, layer_norm_fwd, layer_norm_reference
from . import InspectRequest
from ._norm_cases import compiled, inspect_inputs, liger, norm_entry, norm_fuzz, unfused

EPS = 1e-5


def eager_layer_norm(x, w, r):
    """The eager composition (mean, variance and affine map in float32), with the residual
    added before it. The bench cases pass a weight and no bias (as Liger's is benchmarked
    with its own zero bias, every provider gets the same work)."""
    return layer_norm_reference(x, w, None, EPS, residual=r, upcast=False)


def _liger():
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction
    return lambda x, w: LigerLayerNormFunction.apply(x, w, torch.zeros_like(w), EPS)


def _providers():
    return {
        "tritonkit": lambda x, w, r: layer_norm(x, w, None, EPS, residual=r),
        "eager": eager_layer_norm,
        "torch native": unfused(lambda x, w: F.layer_norm(x, (x.shape[-1],), w, None, EPS)),
        "torch.compile": compiled(eager_layer_norm),
        "Liger": liger(_liger),
    }


def _inspect_fwd(request: InspectRequest, device: torch.device) -> None:
    x, w = inspect_inputs(request, device)
    layer_norm_fwd(x, w, w, None, EPS)


def _inspect_bwd(request: InspectRequest, device: torch.device) -> None:
    x, w = inspect_inputs(request, device)
    stats = torch.empty((2, *x.shape[:-1]), dtype=torch.float32, device=device)
    layer_norm_bwd(torch.empty_like(x), None, x, w, w, stats[0], stats[1])


def _sample(device: torch.device) -> tuple:
    # x transposed (two row dims), bfloat16 weight and bias with float32 x, a residual.
    x = torch.randn(5, 3, 70, device=device).transpose(0, 1)
    w, b = torch.randn(2, 70, device=device, dtype=torch.bfloat16)
    return x, w, b, torch.randn(3, 5, 70, device=device), EPS


def _reference(x, weight, bias, residual, eps, upcast=True):
    """layer_norm_reference on the op's positional arguments (OpEntry.reference)."""
    return layer_norm_reference(x, weight, bias, eps, residual=residual, upcast=upcast)


ENTRY = norm_entry(
    "layer_norm", "LayerNorm over the last dim, optional fused residual add; forward and backward",
    _inspect_fwd, _inspect_bwd, _providers, _sample, _reference,
    fuzz=norm_fuzz(layer_norm, layer_norm_reference, EPS, with_bias=True, with_offset=False, flat_row=2,
                   examples=(40, 40)))
