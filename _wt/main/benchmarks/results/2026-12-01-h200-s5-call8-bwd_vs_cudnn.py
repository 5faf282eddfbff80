"""tritonkit's attention backward (the dispatch's path) against cuDNN's, alternately, in one process."""
import torch, triton.testing
from torch.nn.attention import sdpa_kernel, SDPBackend
from tritonkit.ops.attention import attention_fwd, attention_bwd
for (B, H, Hkv, N, causal) in [(4, 32, 32, 4096, True), (4, 32, 32, 4096, False), (1, 16, 8, 8192, True),
                               (4, 32, 32, 16384, True), (4, 32, 8, 2048, True)]:
    q = torch.randn(B, H, N, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, N, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    o, lse = attention_fwd(q, k, v, causal)
    qc, kc, vc = (t.clone().requires_grad_() for t in (q, k, v))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = torch.nn.functional.scaled_dot_product_attention(qc, kc, vc, is_causal=causal, enable_gqa=H != Hkv)
    flop = 2.5 * 4 * B * H * N * N * 128 * (0.5 if causal else 1.0)
    res = {}
    for _ in range(2):
        for g in (True, False):
            res.setdefault(g, []).append(triton.testing.do_bench(lambda: attention_bwd(do, q, k, v, o, lse, causal, gluon=g), warmup=20, rep=200))
        res.setdefault("cudnn", []).append(triton.testing.do_bench(lambda: out.backward(do, retain_graph=True), warmup=20, rep=200))
    t, tr, c = min(res[True]), min(res[False]), min(res["cudnn"])
    print(f"bwd B{B} H{H}/{Hkv} N{N} D128 {'causal' if causal else 'full'}: Gluon {t:.3f} ms ({flop / t / 1e9:.0f} TFLOP/s) "
          f"Triton {tr:.3f} ({flop / tr / 1e9:.0f}) cuDNN {c:.3f} ms ({flop / c / 1e9:.0f})  Gluon/cuDNN {c / t:.3f}x "
          f"Gluon/Triton {tr / t:.3f}x", flush=True)
