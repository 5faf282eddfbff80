"""The Gluon backward's S^T/dP^T (dK/dV pass) and S/dP (dQ pass) products with their constant
A operand (K and V of the program's keys; Q and dO of its queries) held in registers instead
of read from shared memory every block. Each pass timed alone for each variant, alternately
in one process, beside the Triton and cuDNN backwards; every variant's dq, dk, dv checked
bitwise against the shared-memory variant's and against the float64 reference (max error).

    PYTHONPATH=src python3 benchmarks/results/2026-12-02-h200-s11-bwd_operand_regs.py
"""
import statistics

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

import tritonkit.gluon.attention_bwd as gb
from tritonkit.ops.attention import attention_bwd, attention_fwd, attention_reference

CASES = [  # B, H, Hkv, N, D, causal
    (4, 32, 32, 4096, 64, False), (4, 32, 32, 4096, 64, True), (4, 32, 32, 16384, 64, True),
    (8, 16, 16, 1024, 64, False), (8, 16, 16, 1024, 64, True),
    (4, 32, 32, 4096, 128, False), (4, 32, 32, 4096, 128, True), (1, 16, 8, 8192, 128, True),
]
VARIANTS = {64: [(0, 0), (2, 0), (1, 0), (0, 2), (0, 1), (2, 2)], 128: [(0, 0), (1, 0), (0, 1), (0, 2), (1, 1)]}


def launcher(which, regs, do, q, k, v, lse, delta, causal, scale, outs):
    gb.kv_in_registers = lambda D: regs if which == "dkdv" else 0
    gb.q_do_in_registers = lambda D: regs if which == "dq" else 0
    if which == "dkdv":
        dk, dv = outs
        grid, args, kwargs = gb.dkdv_launch_args(do, q, k, v, dk, dv, lse, delta, causal, scale)
        kernel = gb._dkdv_kernel
    else:
        grid, args, kwargs = gb.dq_launch_args(do, q, k, v, outs[0], lse, delta, causal, scale)
        kernel = gb._dq_kernel
    num_warps = kwargs.pop("num_warps")

    def run():
        kernel[grid](*args, **kwargs, num_warps=num_warps)
    return run


def bench(fn):
    return triton.testing.do_bench(fn, warmup=5, rep=40, return_mode="median")


def main():
    print(f"torch {torch.__version__} triton {triton.__version__} {torch.cuda.get_device_name()}")
    for B, H, Hkv, N, D, causal in CASES:
        torch.manual_seed(0)
        q, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        scale = D ** -0.5
        o, lse = attention_fwd(q, k, v, causal)
        delta = (do.float() * o.float()).sum(-1).contiguous()
        flops = 10 * B * H * N * N * D * (0.5 if causal else 1.0)
        fns, outs = {}, {}
        for kv, qdo in VARIANTS[D]:
            dk, dv, dq = torch.empty_like(k), torch.empty_like(v), torch.empty_like(q)
            outs[kv, qdo] = (dq, dk, dv)
            if (kv, "dkdv") not in fns:
                fns[kv, "dkdv"] = launcher("dkdv", kv, do, q, k, v, lse, delta, causal, scale, (dk, dv))
            if (qdo, "dq") not in fns:
                fns[qdo, "dq"] = launcher("dq", qdo, do, q, k, v, lse, delta, causal, scale, (dq,))
        # fill every variant's outputs (each pass writes the outputs it was built with)
        for kv, qdo in VARIANTS[D]:
            dq, dk, dv = outs[kv, qdo]
            launcher("dkdv", kv, do, q, k, v, lse, delta, causal, scale, (dk, dv))()
            launcher("dq", qdo, do, q, k, v, lse, delta, causal, scale, (dq,))()
        torch.cuda.synchronize()
        base = outs[0, 0]
        same = {key: all(torch.equal(a, b) for a, b in zip(val, base)) for key, val in outs.items()}
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=H != Hkv)
        fns["cudnn"] = lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)
        fns["triton"] = lambda: attention_bwd(do, q, k, v, o, lse, causal, gluon=False)
        t = {n: [] for n in fns}
        for _ in range(3):
            for n, f in fns.items():
                t[n].append(bench(f))
        ms = {n: statistics.median(x) for n, x in t.items()}
        # float64 error of the base variant on the first batch and head (dq alone with GQA:
        # dk and dv sum over the group's heads)
        ref = [t[:1, :1].double().requires_grad_() for t in (q, k, v)]
        r = attention_reference(*ref, causal, scale)
        grads = torch.autograd.grad(r, ref, do[:1, :1].double())
        err = max((a[:1, :1].double() - g).abs().max().item()
                  for a, g in list(zip(base, grads))[:1 if H != Hkv else 3])
        print(f"\n{B} {H}/{Hkv} {N} D={D} causal={causal}: cuDNN {flops / ms['cudnn'] / 1e9:.0f} TFLOP/s "
              f"({ms['cudnn']:.3f} ms), Triton {flops / ms['triton'] / 1e9:.0f} ({ms['triton']:.3f} ms); "
              f"max err vs f64 {err:.2e}", flush=True)
        for kv, qdo in VARIANTS[D]:
            total = ms[kv, "dkdv"] + ms[qdo, "dq"]
            print(f"  kv_regs={kv} qdo_regs={qdo}: dkdv {ms[kv, 'dkdv']:.3f} ms dq {ms[qdo, 'dq']:.3f} ms, "
                  f"serial sum {flops / total / 1e9:.0f} TFLOP/s ({total / (ms[0, 'dkdv'] + ms[0, 'dq']):.3f}x base), "
                  f"bitwise equal to base: {same[kv, qdo]}", flush=True)


if __name__ == "__main__":
    main()
