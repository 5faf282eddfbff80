"""The forward at issue 16's short shape (B=8 H=16 N=1024 D=64) per kernel family and tile, beside
SDPA's cuDNN in the same process (developer tool, not a test; one variant a process, since a
layout's launch plan is made once):

  PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/short_attention_tiles.py dispatch|triton|two-consumers

dispatch: the op's own choice (the Gluon forward's three-consumer tile for full attention);
triton: the Triton kernels (gluon=False); two-consumers: the Gluon forward with two consumer
warpgroups (128-row tiles, `consumer_count` replaced). N=1024 is 5 1/3 three-consumer tiles a
head, so its last tile holds 64 rows of 192; B=4 H=32 N=4096 (21 1/3) is the control.
TFLOP/s 4 B H N^2 D, halved causal; launchers timed (`bench.timing.time_ms`), outputs checked
against cuDNN's.
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tritonkit.bench.timing import time_ms
from tritonkit.ops.attention.gluon import attention_fwd as gluon_fwd
from tritonkit.ops.attention import attention_fwd

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("variant", choices=("dispatch", "triton", "two-consumers"))
variant = parser.parse_args().variant
if variant == "two-consumers":
    gluon_fwd.consumer_count = lambda *args, **kwargs: 2
gluon = {"dispatch": None, "triton": False, "two-consumers": True}[variant]
for B, H, N, causal in ((8, 16, 1024, False), (8, 16, 1024, True), (4, 32, 4096, False)):
    q, k, v = (torch.randn(B, H, N, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    flops = 4 * B * H * N * N * 64 * (0.5 if causal else 1.0)
    ours = lambda: attention_fwd(q, k, v, causal, gluon=gluon)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        cudnn = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    diff = (ours()[0] - ref).abs().max().item()
    rates = [flops / time_ms(ours) / 1e9 for _ in range(3)]
    print(f"{variant:14s} B{B} H{H} N={N}{' causal' if causal else '       '}  ours {max(rates):6.1f} "
          f"({', '.join(f'{r:.0f}' for r in rates)})  cuDNN {flops / cudnn / 1e9:6.1f}  max |diff| {diff:.2e}")
