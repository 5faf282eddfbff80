"""cross_entropy at 4096x32000 read 855 GB/s fwd+bwd against 3639 at 8192x128256: which pass,
which shapes, and does the column block matter? GPU time (do_bench median) and host time a call."""
import time
import torch
import triton.testing
from tritonkit.ops.cross_entropy import kernel as K
from tritonkit.ops.cross_entropy.logits import cross_entropy, cross_entropy_fwd, cross_entropy_bwd


def host_us(f, n=50):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        f()
    h = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return h


for rows, classes in ((8192, 128256), (4096, 128256), (8192, 32000), (4096, 32000), (16384, 32000)):
    logits = torch.randn(rows, classes, device="cuda", dtype=torch.bfloat16).requires_grad_()
    target = torch.randint(0, classes, (rows,), device="cuda")
    nbytes = rows * classes * 2
    loss, lse = cross_entropy_fwd(logits.detach(), target)
    g = torch.ones((), device="cuda")
    for block in (8192, 4096, 2048):
        K.MAX_BLOCK = block
        runs = {
            "fwd": (lambda: cross_entropy_fwd(logits.detach(), target), nbytes),
            "bwd": (lambda: cross_entropy_bwd(g, logits.detach(), target, lse), 2 * nbytes),
            "fwd+bwd": (lambda: torch.autograd.grad(cross_entropy(logits, target), logits), 3 * nbytes),
        }
        for name, (f, b) in runs.items():
            ms = triton.testing.do_bench(f, warmup=10, rep=50, return_mode="median")
            print(f"{rows}x{classes} block {block} {name}: {ms * 1e3:.1f} us, {b / ms / 1e6:.0f} GB/s, "
                  f"host {host_us(f):.0f} us", flush=True)
    K.MAX_BLOCK = 8192
    del logits
