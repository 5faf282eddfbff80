"""dQ beside dK/dV (concurrent_dq=True) against after it (False), whole backward, across the
CONCURRENT_DQ_MIN_WORK threshold; GPU time (do_bench) and host time a call of each; and the
D=64 forward at the short case on the Gluon kernel (gluon=True) against the Triton one."""
import os, time
os.environ.setdefault("TRITONKIT_AUTOTUNE", "0")
import torch, triton.testing
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from tritonkit.ops.attention import attention_bwd, attention_fwd
from tritonkit.ops.attention import plans

def host_us(f, n=30):
    for _ in range(3): f()
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): f()
    h = (time.perf_counter() - t) / n * 1e6; torch.cuda.synchronize(); return h

def ms(f): return triton.testing.do_bench(f, warmup=25, rep=100, return_mode="median")

cases = [((8, 16, 16, 1024, 64), False), ((8, 16, 16, 1024, 64), True), ((4, 16, 8, 2048, 128), True),
         ((4, 32, 32, 2048, 128), True), ((4, 32, 32, 2048, 128), False), ((1, 16, 8, 8192, 128), True),
         ((4, 32, 32, 4096, 128), True), ((4, 32, 32, 4096, 64), False)]
for (B, H, Hkv, N, D), causal in cases:
    q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    o, lse = attention_fwd(q, k, v, causal)
    work = B * H * N * (N // 2 if causal else N) * D
    r = {}
    for mode in (True, False):
        f = lambda mode=mode: attention_bwd(do, q, k, v, o, lse, causal, concurrent_dq=mode)
        r[mode] = (min(ms(f), ms(f)), host_us(f))
    print(f"B{B} H{H}/{Hkv} N{N} D{D} causal={causal} work 2^{work.bit_length() - 1}: concurrent {r[True][0]*1e3:.1f} us "
          f"(host {r[True][1]:.0f}), sequential {r[False][0]*1e3:.1f} us (host {r[False][1]:.0f}), "
          f"ratio {r[False][0] / r[True][0]:.3f}; default concurrent: {work >= plans.CONCURRENT_DQ_MIN_WORK}", flush=True)
    del q, k, v, do, o, lse

for causal in (False, True):
    q, k, v = (torch.randn(8, 16, 1024, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    flops = 4 * 8 * 16 * 1024 * 1024 * 64 * (0.5 if causal else 1)
    fs = {"triton": lambda: attention_fwd(q, k, v, causal, gluon=False),
          "gluon": lambda: attention_fwd(q, k, v, causal, gluon=True)}
    a, b = fs["triton"]()[0], fs["gluon"]()[0]
    print(f"fwd D=64 B8 H16 N1024 causal={causal}: gluon vs triton max diff {(a.float() - b.float()).abs().max().item():.3g}")
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        fs["cudnn"] = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        fs["cudnn"]()
        for rep in range(2):
            print("   " + "  ".join(f"{n} {flops / ms(f) / 1e9:.1f} TFLOP/s" for n, f in fs.items()), flush=True)
