"""Attention (the Triton kernels), softmax and add timings of the tritonkit on PYTHONPATH, with SDPA
cuDNN and torch's own ops as the in-process yardstick: run it in two checkouts within one GPU call
to compare a change (a refactor must leave these within noise).

    (cd old && PYTHONPATH=src python3 ../benchmarks/before_after.py before)
    PYTHONPATH=src python3 benchmarks/before_after.py after
"""
import argparse, torch, tritonkit, triton
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F
from tritonkit.ops.attention import attention_fwd, attention_bwd
parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("label", help="the name printed before each row (before, after)")
label = parser.parse_args().label
def fwd(*a, **kw):
    # Checkouts older than the Gluon dispatch have no gluon= argument.
    try: return attention_fwd(*a, gluon=False, **kw)
    except TypeError: return attention_fwd(*a, **kw)
def bwd(*a, **kw):
    try: return attention_bwd(*a, gluon=False, **kw)
    except TypeError: return attention_bwd(*a, **kw)
def ms(f): return triton.testing.do_bench(f, warmup=25, rep=100)
rows = []
for B, H, N, D, causal in [(4, 32, 4096, 128, False), (4, 32, 4096, 128, True), (4, 32, 16384, 128, True), (4, 32, 4096, 64, False), (4, 16, 4096, 256, False), (8, 16, 1024, 64, False)]:
    q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    do = torch.randn_like(q)
    fl = 4 * B * H * N * N * D * (0.5 if causal else 1.0)
    o, lse = fwd(q, k, v, causal)
    t_f = ms(lambda: fwd(q, k, v, causal)); t_b = ms(lambda: bwd(do, q, k, v, o, lse, causal))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        c_f = ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    rows.append(f"{label:6s} attn B{B} H{H} N{N} D{D} {'causal' if causal else 'full  '}: fwd {fl/t_f/1e9:6.0f} TF/s (cuDNN {fl/c_f/1e9:4.0f})  bwd {2.5*fl/t_b/1e9:6.0f} TF/s")
for shape, dt in [((4096, 4096), torch.float32), ((4096, 32768), torch.bfloat16), ((16, 1 << 20), torch.float32)]:
    x = torch.randn(*shape, device="cuda", dtype=dt)
    t = ms(lambda: tritonkit.softmax(x, -1)); tn = ms(lambda: torch.softmax(x, -1))
    rows.append(f"{label:6s} softmax {shape} {dt}: {2*x.numel()*x.element_size()/t/1e6:6.0f} GB/s (torch.softmax {2*x.numel()*x.element_size()/tn/1e6:5.0f})")
x = torch.randn(1 << 28, device="cuda"); y = torch.randn_like(x)
t = ms(lambda: tritonkit.add(x, y)); tn = ms(lambda: torch.add(x, y))
rows.append(f"{label:6s} add 2^28 fp32: {3*x.numel()*4/t/1e6:6.0f} GB/s (torch.add {3*x.numel()*4/tn/1e6:5.0f})")
print("\n".join(rows), flush=True)
