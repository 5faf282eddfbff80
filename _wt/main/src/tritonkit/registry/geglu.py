"""Catalogue entry for `tritonkit.geglu`: the cases, passes and fuzz of `registry/swiglu.py` with
GELU (tanh approximation, as Gemma and Liger use it) in place of SiLU."""

from __future__ import annotations

import torch

from ..ops.gated import GELU_TANH, geglu, geglu_reference
from . import OpEntry
from .swiglu import bench_cases, fuzz_cases, inspect_passes, sample


def _eager(gate: torch.Tensor, up: torch.Tensor | None = None) -> torch.Tensor:
    return geglu_reference(gate, up, "tanh", upcast=False)


def _sample(device: torch.device) -> tuple:
    gate, up = sample(device)
    return gate, up, "none"


ENTRY = OpEntry(
    name="geglu",
    summary="gelu(gate) * up (tanh or erf), separate or packed [gate, up]; forward and backward",
    passes=inspect_passes(GELU_TANH),
    bench_cases=lambda on_gpu: bench_cases("geglu", geglu, _eager, on_gpu),
    peers=("eager", "torch.compile", "Liger"),
    op="geglu",
    sample=_sample,
    reference=geglu_reference,
    fuzz=fuzz_cases(geglu, geglu_reference, (("tanh",), ("none",)), examples=(40, 40)),
)
