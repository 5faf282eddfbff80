"""The causal window-1024 backward through the Gluon kernels and through the Triton kernels,
alternately in one process (B=1, 32/8 heads, D=128, bf16), with the mask's pairs as FLOPs."""
import torch, triton.testing
from tritonkit.ops.attention import attention_fwd, attention_bwd
W = 1024
for N in (4096, 8192, 16384, 32768):
    q = torch.randn(1, 32, N, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 8, N, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    o, lse = attention_fwd(q, k, v, True, None, W)
    pairs = sum(min(i, W) + 1 for i in range(N))
    flop = 2.5 * 4 * 32 * pairs * 128
    res = {}
    for _ in range(2):
        for g in (True, False):
            ms = triton.testing.do_bench(lambda: attention_bwd(do, q, k, v, o, lse, True, None, W, gluon=g), warmup=20, rep=200)
            res.setdefault(g, []).append(ms)
    gl_ms, tr_ms = min(res[True]), min(res[False])
    print(f"N={N} window {W}: gluon {gl_ms:.3f} ms ({flop / gl_ms / 1e9:.0f} TFLOP/s)  triton {tr_ms:.3f} ms "
          f"({flop / tr_ms / 1e9:.0f})  gluon/triton {tr_ms / gl_ms:.3f}x", flush=True)
