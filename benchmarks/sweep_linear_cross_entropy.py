"""Chunk-size sweep for linear_cross_entropy on a GPU (developer tool, not a test).

The chunk size trades time (grad_weight's addmm is bound by memory below ~330 tokens on the
H200) against memory (one chunk of logits). Times forward+backward and measures the peak
memory beyond the inputs for several chunk_tokens at the Llama-3-8B head, beside Liger's
figure when Liger imports (benchmarks/profile_linear_cross_entropy.py breaks one down by kernel):
  PYTHONPATH=src python3 benchmarks/sweep_linear_cross_entropy.py
"""

from __future__ import annotations

import torch
import triton.testing

import tritonkit
from tritonkit.bench.timing import peak_extra_bytes
from tritonkit.registry._peers import liger

T, H, V = 8192, 4096, 128256


def measure(fn):
    ms = triton.testing.do_bench(fn, warmup=5, rep=50, return_mode="median")
    return ms, peak_extra_bytes(fn) / 2**30


def main():
    h = torch.randn(T, H, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(V, H, device="cuda", dtype=torch.bfloat16) / H ** 0.5).requires_grad_()
    target = torch.randint(0, V, (T,), device="cuda")
    flops = 6 * T * H * V
    for tokens in (128, 256, 384, 448, 512, 768, 1024, 2048):
        ms, gib = measure(lambda: torch.autograd.grad(
            tritonkit.linear_cross_entropy(h, w, target, chunk_tokens=tokens), (h, w)))
        print(f"chunk_tokens {tokens:>4} ({tokens * V * 2 / 2**20:6.1f} MiB of logits): {ms:7.2f} ms "
              f"{flops / ms / 1e9:6.0f} TFLOP/s peak {gib:.3f} GiB")
    loss_cls = liger("transformers.fused_linear_cross_entropy", "LigerFusedLinearCrossEntropyLoss")
    if loss_cls is not None:
        loss_fn = loss_cls()
        ms, gib = measure(lambda: torch.autograd.grad(loss_fn(w, h, target), (h, w)))
        print(f"Liger: {ms:7.2f} ms {flops / ms / 1e9:6.0f} TFLOP/s peak {gib:.3f} GiB")


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
