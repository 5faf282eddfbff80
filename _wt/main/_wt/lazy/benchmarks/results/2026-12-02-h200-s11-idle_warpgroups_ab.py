"""The Gluon forward's warpgroups whose rows all lie past Nq (a ragged last tile) passing their
turns and releasing K and V without computing (`_pass_tile`), against the kernel before it,
which ran the whole tile on zero rows. The old kernel is this module's source with the branch
taken out, written beside it for the run. One process, alternately; outputs bitwise compared.

    git apply benchmarks/results/2026-12-02-h200-s11-idle_warpgroups.patch   # not on main: dropped
    PYTHONPATH=src python3 benchmarks/results/2026-12-02-h200-s11-idle_warpgroups_ab.py
"""
import importlib
import pathlib
import statistics

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from tritonkit.gluon import attention_fwd as new

source = pathlib.Path(new.__file__).read_text()
branch = source[source.index("    if m0 + WG * BLOCK_M < Nq:\n"):source.index("    tma.store_wait(pendings=0)              # O has left")]
body = branch.split("\n", 1)[1].split("    else:\n")[0]
old_source = source.replace(branch, "\n".join(line[4:] for line in body.splitlines()) + "\n")
assert old_source != source and "_pass_tile(WG, c" not in old_source
path = pathlib.Path(new.__file__).with_name("_ab_before_pass_tile.py")
path.write_text(old_source)
old = importlib.import_module("tritonkit.gluon._ab_before_pass_tile")

CASES = [  # B, H, Hkv, N, D, causal
    (8, 16, 16, 1024, 64, False), (4, 32, 8, 4096, 64, False), (8, 16, 16, 1088, 128, False),
    (2, 32, 8, 8300, 64, True),
]


def runner(module, q, k, v, causal):
    o, lse = torch.empty_like(q), torch.empty(q.shape[:3], device=q.device)
    grid, args, kwargs = module.launch_args(q, k, v, o, lse, causal, q.shape[-1] ** -0.5)
    num_warps = kwargs.pop("num_warps")

    def run():
        module._attn_fwd_kernel[grid](*args, **kwargs, num_warps=num_warps)
    run()
    return run, o, lse


print(f"torch {torch.__version__} triton {triton.__version__} {torch.cuda.get_device_name()}")
print("B H/Hkv N D causal | TFLOP/s idle-pass before cuDNN | after/before after/cuDNN | bitwise equal")
try:
    for B, H, Hkv, N, D, causal in CASES:
        torch.manual_seed(0)
        q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        flops = 4 * B * H * N * N * D * (0.5 if causal else 1.0)
        after, o1, l1 = runner(new, q, k, v, causal)
        before, o0, l0 = runner(old, q, k, v, causal)
        torch.cuda.synchronize()
        same = torch.equal(o1, o0) and torch.equal(l1, l0)

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=H != Hkv)
        fns = {"after": after, "before": before, "cudnn": cudnn}
        t = {n: [] for n in fns}
        for _ in range(2):
            for n, f in fns.items():
                t[n].append(triton.testing.do_bench(f, warmup=10, rep=60, return_mode="median"))
        tf = {n: flops / statistics.median(x) / 1e9 for n, x in t.items()}
        print(f"{B} {H}/{Hkv} {N} {D} {causal} | {tf['after']:.0f} {tf['before']:.0f} {tf['cudnn']:.0f} | "
              f"{tf['after'] / tf['before']:.3f} {tf['after'] / tf['cudnn']:.3f} | {same}", flush=True)
finally:
    path.unlink()
