"""Issue 15's packed bar asks the packed forward/backward for 0.9x of the dense causal rate at
N=4096. What the lengths cost apart from packing: in one process, TFLOP/s counted on the pairs
each causal mask keeps, of (a) 16 lognormal sequences of mean 1024 packed (the bench's case),
(b) 16 sequences of exactly 1024 packed, (c) dense B=16 N=1024, (d) dense B=4 N=4096; 32/8 heads,
D=128, bf16, forward (no grad) and backward (autograd.grad)."""
import os
os.environ.setdefault("TRITONKIT_AUTOTUNE", "0")
import torch, triton.testing
import tritonkit
from tritonkit.registry.attention_varlen import cu_seqlens, lognormal_lengths

H, HKV, D = 32, 8, 128


def rate(flops, f):
    return flops / (triton.testing.do_bench(f, warmup=10, rep=50, return_mode="median") * 1e-3) / 1e12


def report(name, lengths, run):
    pairs = sum(n * (n + 1) // 2 for n in lengths)
    fwd_flops = 4 * H * D * pairs
    q, k, v, call = run()
    with torch.no_grad():
        f = rate(fwd_flops, call)
    out = call()
    do = torch.randn_like(out)
    b = rate(2.5 * fwd_flops, lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True))
    print(f"{name}: fwd {f:.0f} TFLOP/s, bwd {b:.0f} TFLOP/s (total {sum(lengths)} tokens)", flush=True)


def packed(lengths):
    def run():
        T = sum(lengths)
        q = torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k, v = (torch.randn(T, HKV, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
        cu, m = cu_seqlens(lengths, q.device), max(lengths)
        return q, k, v, lambda: tritonkit.attention_varlen(q, k, v, cu, cu, m, m, causal=True)
    return run


def dense(B, N):
    def run():
        q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k, v = (torch.randn(B, HKV, N, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
        return q, k, v, lambda: tritonkit.attention(q, k, v, causal=True)
    return run


report("packed, 16 lognormal (mean 1024)", lognormal_lengths(16, 1024), packed(lognormal_lengths(16, 1024)))
report("packed, 16 x 1024", [1024] * 16, packed([1024] * 16))
report("dense B=16 N=1024", [1024] * 16, dense(16, 1024))
report("dense B=4 N=4096", [4096] * 4, dense(4, 4096))
report("packed, 4 x 4096", [4096] * 4, packed([4096] * 4))
