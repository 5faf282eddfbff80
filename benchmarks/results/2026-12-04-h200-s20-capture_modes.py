"""The short non-causal attention backward (B=8 H=16 N=1024 D=64; its autograd graph built
eagerly, autograd.grad timed) captured in a CUDA graph per provider, under torch's default
capture_error_mode "global" and under "thread_local", each provider on a freshly built case, in
both orders; then the same with the forward inside the captured call.
    PYTHONPATH=src python3 benchmarks/results/2026-12-04-h200-s20-capture_modes.py"""
import torch
from triton import runtime

from tritonkit import registry

device = torch.device("cuda")
case = next(c for c in registry.entries()["attention"].bench_cases(True) if c.label == "bwd N=1024 D=64")


def capture(fn, mode, calls=8):
    cache = runtime.driver.active.get_empty_cache_for_benchmark()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    clean = [g.clone_state() for g in torch.cuda.default_generators]
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, capture_error_mode=mode):
            for _ in range(calls):
                runtime.driver.active.clear_cache(cache)
                fn()
    except Exception as err:
        for g, s in zip(torch.cuda.default_generators, clean):
            g.graphsafe_set_state(s)
        return f"failed: {str(err).splitlines()[0][:90]}"
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    torch.cuda.synchronize()
    return f"ok {start.elapsed_time(end) / calls * 1e3:.0f} us a call with its clear"


for order in (("global", "thread_local"), ("thread_local", "global")):
    for mode in order:
        names = list(case.setup(device))
        for name in names:
            providers = case.setup(device)
            print(f"{mode:12s} {name:14s} {capture(providers[name], mode)}", flush=True)
            del providers
            torch.cuda.empty_cache()
    print("--", flush=True)

# The forward inside the captured call: a training step's shape.
q, k, v = (torch.randn(8, 16, 1024, 64, device=device, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
do = torch.randn(8, 16, 1024, 64, device=device, dtype=torch.bfloat16)
import tritonkit  # noqa: E402
import torch.nn.functional as F  # noqa: E402
for name, f in (("tritonkit", lambda: tritonkit.attention(q, k, v)),
                ("sdpa", lambda: F.scaled_dot_product_attention(q, k, v))):
    step = lambda f=f: torch.autograd.grad(f(), (q, k, v), do)  # noqa: E731
    for mode in ("global", "thread_local"):
        print(f"fwd+bwd {mode:12s} {name:10s} {capture(step, mode)}", flush=True)
