"""The order an attention pass hands out its tiles (both paths: the Gluon kernels'
LONGEST_FIRST and HEAD_SPAN, `gluon.common._ordered_tile`; the Triton kernels' HEAD_SPAN,
`mask._program_tile`), and the SM count it is chosen for."""

from __future__ import annotations

import functools

import torch

# A dense causal pass hands out its tiles longest first within spans of this many heads
# (`longest_first_span`), where it has at most LONGEST_FIRST_MAX_TILES_PER_SM tiles an SM
# (BENCHMARKS.md has the orders and spans measured against each other).
LONGEST_FIRST_SPAN_HEADS = 8
LONGEST_FIRST_MAX_TILES_PER_SM = 32


def longest_first_span(causal: bool, window: bool, varlen: bool, heads: int, blocks: int, sms: int) -> int:
    """The order a pass hands out its tiles: heads (batch x heads of the pass) of `blocks` tiles
    each, on sms SMs. 0 for head after head; otherwise the span of heads (a divisor of heads)
    within which every head's k-th longest tile goes before anyone's (k+1)-th, spans in turn
    (the Gluon kernels' LONGEST_FIRST and HEAD_SPAN, `gluon.common._ordered_tile`; the Triton
    kernels' HEAD_SPAN, `mask._program_tile`).

    Head after head, the programs running together walk the same head or two, so its K and V
    (the dQ pass's too; Q and dO in the dK/dV pass) are read from L2 by all of them. Under a
    causal mask that order also leaves the last head's longest tiles for the end of the grid,
    where they run with few SMs busy beside them: a tail of about one longest tile, some
    2 sms / (heads x blocks) of the pass. Longest first over every head removes the tail but
    spreads the programs in flight over as many heads as there are SMs, each read by about one
    program, whose K and V then come from HBM. Within spans of LONGEST_FIRST_SPAN_HEADS heads,
    a span's last tiles are its shortest and some sixteen programs read each head: the tail
    goes and the reuse stays. Taken under a causal mask without a window, up to
    LONGEST_FIRST_MAX_TILES_PER_SM tiles an SM, past which the tail is a few percent and long
    heads' K and V outgrow L2 across a span (measured slower at 42 and 124 tiles an SM). Full
    attention's and a window's tiles are of one length; packed sequences have their own order
    (heads together)."""
    if not causal or window or varlen or heads * blocks > LONGEST_FIRST_MAX_TILES_PER_SM * sms:
        return 0
    return max(d for d in range(1, min(heads, LONGEST_FIRST_SPAN_HEADS) + 1) if heads % d == 0)


@functools.lru_cache(maxsize=None)
def num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 132      # no GPU (the interpreter; the inspector compiling for sm_90): an H100/H200's
    return torch.cuda.get_device_properties(device).multi_processor_count
