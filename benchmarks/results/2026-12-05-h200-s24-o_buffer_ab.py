"""The Gluon forward with O staged in a shared buffer of its own, so that a tile's Q is released
once its last S product retires and the next tile's Q loads under the last block and the
epilogue (the branch `gluon-o-buffer`), against main (`2026-12-05-s24-o-buffer.patch` reversed),
one tree a process (PYTHONPATH picks it): the forward shapes of issue 16's bars that take the
Gluon kernels with head dim 64 or 128, through the dispatch and autograd's no-grad road, beside
SDPA's cuDNN; TFLOP/s medians of three rounds on the work needed, graphed (the GPU's time alone)
for the short shape; every output checked against SDPA's math backend in float32 first.
    PYTHONPATH=TREE/src python3 benchmarks/results/2026-12-05-h200-s24-o_buffer_ab.py [HEAD_DIM ...]
(the head dims to run, all by default)"""
import statistics
import sys

import torch
import torch.nn.functional as F

import tritonkit
from tritonkit.bench.timing import graphed_ms, time_ms
from tritonkit.registry.attention_varlen import cu_seqlens, lognormal_lengths

dev = torch.device("cuda")


def sdpa_cudnn(q, k, v, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])


# (B, H, Hkv, N, D, causal): the short shape (three warpgroups, 192-row tiles), the bars' N=4096
# and 16384 at D=128, D=64 full, and D=64 causal from 8192 rows (three warpgroups).
DENSE = [(8, 16, 16, 1024, 64, False), (4, 32, 32, 4096, 64, False), (4, 32, 32, 16384, 64, False),
         (2, 32, 32, 8192, 64, True), (4, 32, 32, 16384, 64, True),
         (4, 32, 32, 4096, 128, False), (4, 32, 32, 4096, 128, True), (4, 32, 32, 16384, 128, False),
         (4, 32, 32, 16384, 128, True), (4, 32, 8, 4096, 128, True)]
DIMS = {int(a) for a in sys.argv[1:]} or {64, 128}
with torch.no_grad():
    for B, H, Hkv, N, D, causal in (case for case in DENSE if case[4] in DIMS):
        q = torch.randn(B, H, N, D, dtype=torch.bfloat16, device=dev)
        k, v = (torch.randn(B, Hkv, N, D, dtype=torch.bfloat16, device=dev) for _ in range(2))
        if N <= 4096:
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                                 enable_gqa=H != Hkv)
            err = (tritonkit.attention(q, k, v, causal=causal).float() - ref).abs().max().item()
            del ref
        else:   # float32 math at these lengths is too large: against cuDNN
            err = (tritonkit.attention(q, k, v, causal=causal).float() - sdpa_cudnn(q, k, v, causal).float()).abs().max().item()
        assert err < 2e-2, (B, H, N, D, causal, err)
        flops = 4 * B * H * N * N * D * (0.5 if causal else 1.0)
        fns = {"tritonkit": lambda: tritonkit.attention(q, k, v, causal=causal),
               "cuDNN": lambda: sdpa_cudnn(q, k, v, causal)}
        # the short shape from CUDA graphs (the GPU's time alone, after an L2 clear each call)
        timer = (lambda fn: graphed_ms(fn, time_ms(fn))) if N <= 1024 else time_ms
        rates = {n: [] for n in fns}
        for r in range(3):
            for n in (list(fns)[::-1] if r % 2 else list(fns)):
                rates[n].append(flops / timer(fns[n]) / 1e9)
        med = {n: statistics.median(x) for n, x in rates.items()}
        print(f"B{B} H{H}/{Hkv} N{N} D{D} {'causal' if causal else 'full'}: tritonkit {med['tritonkit']:.1f}  "
              f"cuDNN {med['cuDNN']:.1f}  ({med['tritonkit'] / med['cuDNN']:.3f}x; max err {err:.1e})", flush=True)
        del q, k, v

    for D in sorted(DIMS, reverse=True):
        lengths = lognormal_lengths(16, 1024)
        cu = cu_seqlens(lengths, dev)
        total = sum(lengths)
        q = torch.randn(total, 32, D, dtype=torch.bfloat16, device=dev)
        k, v = (torch.randn(total, 8, D, dtype=torch.bfloat16, device=dev) for _ in range(2))
        m = max(lengths)
        out = tritonkit.attention_varlen(q, k, v, cu, cu, m, m, causal=True)
        start = 0
        for n in lengths:  # each sequence against SDPA's math backend
            s = slice(start, start + n)
            ref = F.scaled_dot_product_attention(*(t[s].transpose(0, 1).float() for t in (q, k, v)), is_causal=True,
                                                 enable_gqa=True).transpose(0, 1)
            assert (out[s].float() - ref).abs().max().item() < 2e-2
            start += n
        flops = sum(4 * 32 * n * n * D * 0.5 for n in lengths)
        rates = [flops / time_ms(lambda: tritonkit.attention_varlen(q, k, v, cu, cu, m, m, causal=True)) / 1e9
                 for _ in range(3)]
        print(f"packed 16 lognormal (mean 1024, {total} tokens) 32/8 D{D} causal: tritonkit "
              f"{statistics.median(rates):.1f}", flush=True)
