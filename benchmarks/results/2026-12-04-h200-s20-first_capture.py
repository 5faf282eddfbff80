"""In a fresh process, capture (torch's default "global" mode) the short non-causal attention
backward (B=8 H=16 N=1024 D=64) of the providers in the order given, each on a freshly built
case; "step" stands for a whole tritonkit forward+backward, as a training step is captured.
    PYTHONPATH=src python3 benchmarks/results/2026-12-04-h200-s20-first_capture.py step|NAME..."""
import sys

import torch

import tritonkit
from tritonkit import registry

device = torch.device("cuda")
case = next(c for c in registry.entries()["attention"].bench_cases(True) if c.label == "bwd N=1024 D=64")


def capture(fn, calls=4):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except Exception as err:
        return f"failed: {str(err).splitlines()[0][:90]}"
    graph.replay()
    torch.cuda.synchronize()
    return "ok"


for name in sys.argv[1:]:
    if name == "step":
        q, k, v = (torch.randn(8, 16, 1024, 64, device=device, dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        do = torch.randn(8, 16, 1024, 64, device=device, dtype=torch.bfloat16)
        result = capture(lambda: torch.autograd.grad(tritonkit.attention(q, k, v), (q, k, v), do))
    else:
        result = capture(case.setup(device)[name])
    print(f"{' '.join(sys.argv[1:])}: {name} {result}", flush=True)
