"""Issue 16's short case, B=8 H=16 N=1024 D=64: where the autograd backward's time goes.
For causal and full: do_bench of autograd.grad (as the bench times it), of attention_bwd called
directly (dQ on a side stream or not), host time a call of each, and cuDNN's autograd.grad."""
import os
import time

os.environ.setdefault("TRITONKIT_AUTOTUNE", "0")
import torch
import torch.nn.functional as F
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

import tritonkit
from tritonkit.ops.attention import attention_bwd, attention_fwd


def host_us(f, n=50):
    for _ in range(5):
        f()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        f()
    host = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return host


def bench_us(f):
    return triton.testing.do_bench(f, warmup=25, rep=100, return_mode="median") * 1e3


for causal in (True, False):
    torch.manual_seed(0)
    q, k, v = (torch.randn(8, 16, 1024, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn_like(q)
    out = tritonkit.attention(q, k, v, causal=causal)
    f_auto = lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
    o, lse = attention_fwd(q.detach(), k.detach(), v.detach(), causal)
    rows = {"autograd.grad": f_auto}
    for conc in (None, True, False):
        rows[f"attention_bwd concurrent_dq={conc}"] = (
            lambda conc=conc: attention_bwd(do, q.detach(), k.detach(), v.detach(), o, lse, causal, concurrent_dq=conc))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    rows["cuDNN autograd.grad"] = lambda: torch.autograd.grad(ref, (q, k, v), do, retain_graph=True)
    for name, f in rows.items():
        b = bench_us(f)
        h = host_us(f)
        b2 = bench_us(f)
        print(f"causal={causal} {name}: do_bench {b:.1f} / {b2:.1f} us, host {h:.1f} us a call", flush=True)
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            attention_bwd(do, q.detach(), k.detach(), v.detach(), o, lse, causal, concurrent_dq=False)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        attention_bwd(do, q.detach(), k.detach(), v.detach(), o, lse, causal, concurrent_dq=False)
    print(f"causal={causal} attention_bwd sequential, CUDA graph replay: {bench_us(g.replay):.1f} us", flush=True)
