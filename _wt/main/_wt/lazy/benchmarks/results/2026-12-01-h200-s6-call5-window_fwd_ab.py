"""The causal window-1024 forward, Gluon against Triton, alternately in one process (32/8 heads, D=128, bf16);
N=4096 measured first and again last, and at B=4."""
import torch, triton.testing
from tritonkit.ops.attention import attention_fwd
W = 1024
for B, N in ((1, 4096), (1, 8192), (1, 16384), (4, 4096), (1, 4096)):
    q = torch.randn(B, 32, N, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, 8, N, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    a, b = attention_fwd(q, k, v, True, None, W, gluon=True), attention_fwd(q, k, v, True, None, W, gluon=False)
    err = (a[0].float() - b[0].float()).abs().max().item()
    pairs = sum(min(i, W) + 1 for i in range(N))
    flop = 4 * B * 32 * pairs * 128
    res = {}
    for _ in range(3):
        for g in (True, False):
            ms = triton.testing.do_bench(lambda: attention_fwd(q, k, v, True, None, W, gluon=g), warmup=25, rep=100)
            res.setdefault(g, []).append(ms)
    gl_ms, tr_ms = min(res[True]), min(res[False])
    print(f"B={B} N={N} window {W}: gluon {gl_ms:.3f} ms ({flop / gl_ms / 1e9:.0f} TFLOP/s) {['%.3f' % x for x in res[True]]} "
          f"triton {tr_ms:.3f} ms ({flop / tr_ms / 1e9:.0f})  gluon/triton {tr_ms / gl_ms:.3f}x  max|diff| {err:.3g}", flush=True)
