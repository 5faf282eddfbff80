"""cross_entropy with the forward in one launch (the kernel counts, checks and reduces): GPU
time (do_bench median) and host time a call of each pass and of forward+backward through
autograd, at the bench's shapes; the same script as 2026-12-01-h200-s8-call2-ce_shape_diag.py
at the default column block, for the forward's three outputs."""
import time
import torch
import triton.testing
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


for rows, classes in ((8192, 128256), (4096, 32000), (8192, 32000), (1024, 32000)):
    logits = torch.randn(rows, classes, device="cuda", dtype=torch.bfloat16).requires_grad_()
    target = torch.randint(0, classes, (rows,), device="cuda")
    nbytes = rows * classes * 2
    loss, lse, count = cross_entropy_fwd(logits.detach(), target)
    g = torch.ones((), device="cuda")
    runs = {
        "fwd": (lambda: cross_entropy_fwd(logits.detach(), target), nbytes),
        "bwd": (lambda: cross_entropy_bwd(g, logits.detach(), target, lse, count=count), 2 * nbytes),
        "fwd+bwd": (lambda: torch.autograd.grad(cross_entropy(logits, target), logits), 3 * nbytes),
        "torch fwd+bwd": (lambda: torch.autograd.grad(torch.nn.functional.cross_entropy(logits.float(), target),
                                                      logits), 3 * nbytes),
    }
    for name, (f, b) in runs.items():
        ms = triton.testing.do_bench(f, warmup=10, rep=50, return_mode="median")
        print(f"{rows}x{classes} {name}: {ms * 1e3:.1f} us, {b / ms / 1e6:.0f} GB/s, host {host_us(f):.0f} us",
              flush=True)
    del logits
