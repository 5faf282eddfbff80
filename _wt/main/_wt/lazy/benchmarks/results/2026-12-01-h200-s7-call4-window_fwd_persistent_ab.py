"""The Gluon window forward with one tile per program (the launcher's grid for causal)
against a persistent grid (one program per SM, round-robin over tiles), alternately in one process."""
import torch, triton.testing
from tritonkit.gluon import attention_fwd as F
W = 1024
for B, N in ((1, 8192), (1, 16384), (1, 32768), (4, 4096)):
    q = torch.randn(B, 32, N, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, 8, N, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    o, lse = torch.empty_like(q), torch.empty(B, 32, N, device="cuda")
    grid, args, kwargs = F.launch_args(q, k, v, o, lse, True, 128 ** -0.5, 0.0, W)
    kwargs = dict(kwargs); nw = kwargs.pop("num_warps")
    grids = {"tile a program": grid, "persistent": (min(grid[0], F._num_sms(q.device)),)}
    outs = {}
    for name, g in grids.items():
        F._attn_fwd_kernel[g](*args, **kwargs, num_warps=nw); torch.cuda.synchronize(); outs[name] = o.clone()
    same = torch.equal(*outs.values())
    t = {n: min(triton.testing.do_bench(lambda g=g: F._attn_fwd_kernel[g](*args, **kwargs, num_warps=nw), warmup=25, rep=100)
                for _ in range(3)) for n, g in grids.items()}
    print(f"B={B} N={N}: " + "  ".join(f"{n} {ms:.3f} ms" for n, ms in t.items()) + f"  bitwise {same}", flush=True)
