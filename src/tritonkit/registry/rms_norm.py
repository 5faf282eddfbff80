"""Catalogue entry for `tritonkit.rms_norm`: inspector passes, benchmark cases, sample and fuzz."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..ops.norms import rms_norm, rms_norm_bwd, rms_norm_fwd, rms_norm_reference
from . import InspectRequest
from ._norm_cases import compiled, inspect_inputs, liger, norm_entry, norm_fuzz, unfused

EPS = 1e-6


def eager_rms_norm(x, w, r):
    """The eager composition a model writes (Hugging Face's LlamaRMSNorm, statistics in
    float32), with the residual added before it."""
    return rms_norm_reference(x, w, EPS, residual=r, upcast=False)


def _liger():
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    return lambda x, w: LigerRMSNormFunction.apply(x, w, EPS)


def _providers():
    return {
        "tritonkit": lambda x, w, r: rms_norm(x, w, EPS, residual=r),
        "eager": eager_rms_norm,
        "torch native": unfused(lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS)),
        "torch.compile": compiled(eager_rms_norm),
        "Liger": liger(_liger),
    }


def _inspect_fwd(request: InspectRequest, device: torch.device) -> None:
    x, w = inspect_inputs(request, device)
    rms_norm_fwd(x, w, None, EPS, 0.0)


def _inspect_bwd(request: InspectRequest, device: torch.device) -> None:
    x, w = inspect_inputs(request, device)
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=device)
    rms_norm_bwd(torch.empty_like(x), None, x, w, rstd, 0.0)


def _sample(device: torch.device) -> tuple:
    # x a view at an odd offset with padded rows, a float32 weight with float16 x, a
    # residual, Gemma's offset.
    x = torch.randn(3, 5, 83, device=device, dtype=torch.float16)[:, :, 1:80]
    return x, torch.randn(79, device=device), torch.randn(3, 5, 79, device=device, dtype=torch.float16), EPS, 1.0


def _reference(x, weight, residual, eps, weight_offset, upcast=True):
    """rms_norm_reference on the op's positional arguments (OpEntry.reference)."""
    return rms_norm_reference(x, weight, eps, residual=residual, weight_offset=weight_offset, upcast=upcast)


ENTRY = norm_entry(
    "rms_norm", "RMSNorm over the last dim, optional fused residual add and (offset + weight); forward and backward",
    _inspect_fwd, _inspect_bwd, _providers, _sample, _reference,
    fuzz=norm_fuzz(rms_norm, rms_norm_reference, EPS, with_bias=False, with_offset=True, flat_row=1,
                   examples=(40, 40)))
