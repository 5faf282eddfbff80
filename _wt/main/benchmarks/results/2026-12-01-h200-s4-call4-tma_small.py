# GPU time (CUDA graphs: no host time) of attention's passes through descriptors and pointers at
# examples/train_lm.py's layer, and at a few small shapes.
import torch, triton
from tritonkit.ops import attention as A
def views(B, H, Hkv, N, D):
    qkv = torch.randn(B, N, (H + 2 * Hkv) * D, device="cuda", dtype=torch.bfloat16)
    q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
    return [t.unflatten(-1, (n, D)).transpose(1, 2) for t, n in ((q, H), (k, Hkv), (v, Hkv))]
for shape in [(64, 4, 2, 256, 64), (8, 16, 16, 1024, 64), (4, 32, 8, 512, 128), (64, 4, 2, 256, 128)]:
    q, k, v = views(*shape)
    o, lse = A.attention_fwd(q, k, v, True)
    do = torch.randn_like(o)
    row = []
    for tma in (None, False):
        f = lambda: A.attention_fwd(q, k, v, True, tma=tma)
        b = lambda: A.attention_bwd(do, q, k, v, o, lse, True, tma=tma)
        f(); b(); torch.cuda.synchronize()
        tf = triton.testing.do_bench_cudagraph(f, rep=50); tb = triton.testing.do_bench_cudagraph(b, rep=50)
        row.append(f"{'descriptors' if tma is None else 'pointers'} fwd {tf*1e3:.1f} us bwd {tb*1e3:.1f} us")
    print(shape, " | ".join(row), flush=True)
