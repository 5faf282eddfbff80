"""One warmed-up launch of a Gluon attention pass, for Nsight Compute to profile (developer
tool): the ncu lines below profile one kernel of that pass with warp-state, scheduler,
pipe and source (SASS) counters.

    PYTHONPATH=src ncu --clock-control none --kernel-name regex:_dkdv_kernel --launch-skip 2 --launch-count 1 \\
        --set full --import-source yes -o dkdv python3 benchmarks/ncu_attention_target.py --pass bwd
    ncu --import dkdv.ncu-rep --page details; ncu --import dkdv.ncu-rep --page source --csv --print-source sass

--pass fwd runs the forward (optionally --softcap C), bwd the backward (dK/dV and dQ kernels,
sequentially so each profiles alone). Shapes: B, H, Hkv, N, D, causal as flags; bf16.
"""
import argparse

import torch

from tritonkit.ops.attention import attention_bwd, attention_fwd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pass", dest="which", choices=["fwd", "bwd"], default="bwd")
    ap.add_argument("--shape", default="4,32,32,4096,128", help="B,H,Hkv,N,D")
    ap.add_argument("--full", action="store_true", help="no causal mask")
    ap.add_argument("--softcap", type=float, default=0.0)
    ap.add_argument("--calls", type=int, default=3)
    opts = ap.parse_args()
    B, H, Hkv, N, D = (int(x) for x in opts.shape.split(","))
    causal = not opts.full
    torch.manual_seed(0)
    q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    o, lse = attention_fwd(q, k, v, causal, softcap=opts.softcap)
    for _ in range(opts.calls):
        if opts.which == "fwd":
            attention_fwd(q, k, v, causal, softcap=opts.softcap, gluon=True)
        else:
            attention_bwd(do, q, k, v, o, lse, causal, softcap=opts.softcap, gluon=True, concurrent_dq=False)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
