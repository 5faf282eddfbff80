"""Short backwards: the bench read B4 H32 N1024 D128 causal at 0.64 ms (full 0.45) and B8 H16
N1024 D64 causal at 0.40 ms (0.19 in a filtered run before). For each shape: autograd.grad (as
the bench times it), attention_bwd on each path, cuDNN; do_bench (median, us) and host us a call."""
import os, time
os.environ.setdefault("TRITONKIT_AUTOTUNE", "0")
import torch, torch.nn.functional as F, triton.testing
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
    h = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return h


def bench_us(f):
    return triton.testing.do_bench(f, warmup=25, rep=100, return_mode="median") * 1e3


for B, H, N, D, causal in ((4, 32, 1024, 128, True), (4, 32, 1024, 128, False), (8, 16, 1024, 64, True),
                           (8, 16, 1024, 64, False), (4, 32, 2048, 128, True)):
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn_like(q)
    out = tritonkit.attention(q, k, v, causal=causal)
    o, lse = attention_fwd(q.detach(), k.detach(), v.detach(), causal)
    rows = {"autograd.grad": lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)}
    for g in (True, False):
        rows[f"attention_bwd gluon={g}"] = (
            lambda g=g: attention_bwd(do, q.detach(), k.detach(), v.detach(), o, lse, causal, gluon=g))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    rows["cuDNN autograd.grad"] = lambda: torch.autograd.grad(ref, (q, k, v), do, retain_graph=True)
    for name, f in rows.items():
        try:
            b = bench_us(f)
            print(f"B{B} H{H} N{N} D{D} causal={causal} {name}: {b:.1f} us, host {host_us(f):.1f} us", flush=True)
        except Exception as e:
            print(f"B{B} H{H} N{N} D{D} causal={causal} {name}: {type(e).__name__}: {str(e)[:120]}", flush=True)
    del q, k, v, out, ref
