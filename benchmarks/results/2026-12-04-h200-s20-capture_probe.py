"""Which providers of the short attention cases (B=8 H=16 N=1024 D=64) can be captured in a CUDA
graph: each provider's graphed_ms, or its error; after each, a random draw on the device, which
a failed capture left refusing before graphed_ms restored the generators' states.
    PYTHONPATH=src python3 benchmarks/results/2026-12-04-h200-s20-capture_probe.py"""
import traceback

import torch

from tritonkit import registry
from tritonkit.bench.timing import graphed_ms, time_ms

device = torch.device("cuda")
for case in registry.entries()["attention"].bench_cases(True):
    if "N=1024 D=64" not in case.label:
        continue
    providers = case.setup(device)
    for name, fn in providers.items():
        ms = time_ms(fn)
        try:
            graphed = graphed_ms(fn, ms)
            result = f"graphed {graphed * 1e3:.1f} us"
        except Exception as err:
            lines = traceback.format_exception(err)
            result = f"NOT captured: {type(err).__name__}: {str(err).splitlines()[0][:160]}\n" + "".join(lines[-6:])
        try:
            torch.randn(4, device=device)
            rng = "rng ok"
        except Exception as err:
            rng = f"rng broken: {err}"
        print(f"{case.label:28s} {name:14s} eager {ms * 1e3:7.1f} us  {result}  [{rng}]", flush=True)
    del providers
    torch.cuda.empty_cache()
