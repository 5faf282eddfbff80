"""Capturing a test's step in a CUDA graph, as torch's documentation asks."""

from __future__ import annotations

from collections.abc import Callable

import torch

from tritonkit._graphs import warm_up


def capture(step: Callable[[], tuple]) -> tuple[torch.cuda.CUDAGraph, tuple]:
    """(graph, the outputs its replays write): `step` warmed up (compiled) twice on a side
    stream, then captured."""
    warm_up(step, 2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    return graph, captured
