"""cProfile of the autograd backward of tritonkit.attention at B=8 H=16 N=1024 D=64 causal and full (host time)."""
import cProfile, pstats, time, torch, os
os.environ.setdefault("TRITONKIT_AUTOTUNE", "0")
import tritonkit
for causal in (True, False):
    q, k, v = (torch.randn(8, 16, 1024, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    out = tritonkit.attention(q, k, v, causal=causal)
    do = torch.randn_like(out)
    f = lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
    for _ in range(20): f()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(100): f()
    host = (time.perf_counter() - t) / 100 * 1e6
    torch.cuda.synchronize()
    gpu = (time.perf_counter() - t) / 100 * 1e6
    print(f"causal={causal}: host {host:.1f} us/call, with the GPU {gpu:.1f}", flush=True)
    pr = cProfile.Profile(); pr.enable()
    for _ in range(100): f()
    pr.disable(); torch.cuda.synchronize()
    pstats.Stats(pr).sort_stats("cumulative").print_stats(25)
