"""Capturing a test's step in a CUDA graph, as torch's documentation asks."""

from __future__ import annotations

from collections.abc import Callable

import torch


def capture(step: Callable[[], tuple]) -> tuple[torch.cuda.CUDAGraph, tuple]:
    """(graph, the outputs its replays write): `step` warmed up (compiled) twice on a side
    stream, then captured."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    return graph, captured
