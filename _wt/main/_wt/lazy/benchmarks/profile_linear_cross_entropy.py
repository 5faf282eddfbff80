"""Per-kernel profile of linear_cross_entropy forward+backward on a GPU (developer tool, not a test).

For each chunk size: the median time of `loss.backward()` (upstream 1, .grad set to None
before each call), the peak memory beyond the inputs after the forward and over
forward+backward, what the forward leaves held, whether the backward returned the forward's
gradient buffers (no copy), and a torch.profiler table of the device kernels of one
forward+backward (count, total and mean per kernel name). Then the three cuBLAS products alone
at each chunk size, beside the logits product written transposed (W @ h_c^T) and both through
cuBLASLt, to show what the GEMMs reach at that shape outside the op:
  PYTHONPATH=src python3 benchmarks/profile_linear_cross_entropy.py [--chunks 256,384,448,512,1024]
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
import triton.testing
from torch.profiler import ProfilerActivity, profile

import tritonkit
from tritonkit.ops.cross_entropy import linear

GIB = 2 ** 30


def median_ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=5, rep=100, return_mode="median")


def step(h, w, target, chunk):
    h.grad = w.grad = None
    tritonkit.linear_cross_entropy(h, w, target, chunk_tokens=chunk).backward()


def memory(h, w, target, chunk):
    """Peaks beyond the inputs (GiB): after the forward, held after it, over forward+backward;
    and whether .grad holds the very buffers the forward made."""
    made = []
    chunked = linear._chunked

    def spy(*args, **kwargs):
        out = chunked(*args, **kwargs)
        made.append([None if g is None else g.data_ptr() for g in out[:2]])
        return out

    h.grad = w.grad = None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    linear._chunked = spy
    try:
        loss = tritonkit.linear_cross_entropy(h, w, target, chunk_tokens=chunk)
        torch.cuda.synchronize()
        fwd_peak, held = torch.cuda.max_memory_allocated() - base, torch.cuda.memory_allocated() - base
        loss.backward()
        torch.cuda.synchronize()
    finally:
        linear._chunked = chunked
    total_peak = torch.cuda.max_memory_allocated() - base
    same = made[-1] == [h.grad.data_ptr(), w.grad.data_ptr()]
    return fwd_peak / GIB, held / GIB, total_peak / GIB, same


def kernel_table(fn, calls: int = 3) -> list[tuple[str, float, float, float]]:
    """(name, launches per call, ms per call, mean us per launch) of every device kernel and
    memset/memcpy, largest total first."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    total, count = defaultdict(float), defaultdict(int)
    for evt in prof.events():
        if evt.device_type == torch.autograd.DeviceType.CUDA:
            total[evt.name] += evt.time_range.elapsed_us()
            count[evt.name] += 1
    rows = [(name, count[name] / calls, total[name] / calls / 1e3, total[name] / count[name]) for name in total]
    return sorted(rows, key=lambda r: -r[2])


def gemms(h, w, chunk):
    """TFLOP/s of the three products at one chunk, as the op calls them, and of the logits
    product written transposed."""
    T, V = min(chunk, h.shape[0]), w.shape[0]
    hc = h.detach()[:T]
    wd = w.detach()
    logits = torch.randn(T, V, device=h.device, dtype=h.dtype)
    logits_t = torch.empty(V, T, device=h.device, dtype=h.dtype)
    gh = torch.empty_like(hc)
    gw = torch.empty_like(wd)
    flop = 2 * T * wd.shape[1] * V
    cases = {
        "logits hc @ W^T (op)": lambda: torch.mm(hc, wd.t(), out=logits),
        "logits^T W @ hc^T": lambda: torch.mm(wd, hc.t(), out=logits_t),
        "grad_hidden dl @ W": lambda: torch.mm(logits, wd, out=gh),
        "grad_weight += dl^T @ hc": lambda: gw.addmm_(logits.t(), hc),
        "grad_weight = dl^T @ hc": lambda: torch.mm(logits.t(), hc, out=gw),
    }
    rates = {name: flop / median_ms(fn) / 1e9 for name, fn in cases.items()}
    library = torch.backends.cuda.preferred_blas_library()
    try:
        torch.backends.cuda.preferred_blas_library("cublaslt")
        rates["logits (cuBLASLt)"] = flop / median_ms(cases["logits hc @ W^T (op)"]) / 1e9
        rates["logits^T (cuBLASLt)"] = flop / median_ms(cases["logits^T W @ hc^T"]) / 1e9
    finally:
        torch.backends.cuda.preferred_blas_library(library)
    return rates


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--chunks", default="256,384,448,512,1024",
                        help="comma-separated chunk_tokens; 0 for the default")
    parser.add_argument("--top", type=int, default=12, help="kernels listed per chunk size")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    T, H, V = args.tokens, args.hidden, args.vocab
    h = torch.randn(T, H, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(V, H, device="cuda", dtype=torch.bfloat16) / H ** 0.5).requires_grad_()
    target = torch.randint(0, V, (T,), device="cuda")
    target[::16] = -100
    flops = 6 * T * H * V
    grads_gib = (V * H + T * H) * 2 / GIB
    print(f"T={T} H={H} V={V} bf16; the gradients alone are {grads_gib:.3f} GiB; "
          f"a chunk token of logits is {V * 2 / 2**10:.1f} KiB")
    for chunk in (int(c) or None for c in args.chunks.split(",")):
        tokens = chunk or linear.chunk_tokens_for(T, V, 2)
        fn = lambda: step(h, w, target, chunk)  # noqa: E731
        ms = median_ms(fn)
        fwd_peak, held, peak, same = memory(h, w, target, chunk)
        print(f"\n== chunk_tokens {tokens} ({'default' if chunk is None else 'given'}): {ms:.2f} ms, "
              f"{flops / ms / 1e9:.0f} TFLOP/s; peak forward {fwd_peak:.3f} GiB, held after it {held:.3f}, "
              f"peak forward+backward {peak:.3f} GiB (chunk buffer {tokens * V * 2 / GIB:.3f}); "
              f"backward returned the forward's buffers: {same}")
        print(f"{'launches':>8} {'ms/call':>8} {'us each':>8}  kernel")
        for name, n, total_ms, mean_us in kernel_table(fn)[:args.top]:
            print(f"{n:8.1f} {total_ms:8.3f} {mean_us:8.1f}  {name[:110]}")
        print("GEMMs alone at this chunk (TFLOP/s): " +
              ", ".join(f"{name} {rate:.0f}" for name, rate in gemms(h, w, tokens).items()))


if __name__ == "__main__":
    main()
