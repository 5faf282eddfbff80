"""The norms' launches kept per input layout, as bound `LaunchTemplate`s (`tritonkit._templates`).

The key of a template here holds everything that decides the launch:
- the pass and the device;
- the scalar tail, exact values (Triton specialises ints on == 1 and % 16; the kernels'
  strides, shapes, eps and weight_offset are all in it), and the sign of weight_offset (a
  key compares floats as Python does, and 0.0 == -0.0, but w + -0.0 keeps a weight's -0.0);
- each input tensor's presence, dtype and whether its data starts on a 16-byte boundary
  (`head_layout`). The outputs (and the backward's partial sums and counters) are fresh
  allocations of the dtypes and presence that the inputs decide (and the bias's dtype,
  which the backward's dB takes): keying them again would only cost time on every call;
- what the launcher adds of its own (the backward's program count, which sets its grid and
  partial-sum rows).
Grid, constexprs and warps follow from those (`_rows.fwd_plan`, `_rows.bwd_plan`).
"""

from __future__ import annotations

from ..._templates import Templates, head_layout

__all__ = ["clear", "head_layout", "template"]

_TEMPLATES = Templates()
template = _TEMPLATES.get
clear = _TEMPLATES.clear  # tests that change what a plan holds call this
