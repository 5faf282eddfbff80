"""(Prepared in the twelfth set and not run: its GPU time ran out.) The Gluon forward with and
without a softcap, for ncu: each launched twice (the second of
each is the one to read), B4 32/8 N=4096 D=128 causal bf16.

    ncu -k regex:attn_fwd --launch-skip 1 --launch-count 3 --section ComputeWorkloadAnalysis \
        --section InstructionStats --section SpeedOfLight --page details --csv \
        python3 benchmarks/results/2026-12-02-h200-s12-softcap_ncu.py
"""
import torch

from tritonkit.ops.attention import attention_fwd

torch.manual_seed(0)
q = torch.randn(4, 32, 4096, 128, device="cuda", dtype=torch.bfloat16)
k, v = (torch.randn(4, 8, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
for cap in (0.0, 50.0):
    for _ in range(2):
        attention_fwd(q, k, v, True, softcap=cap, gluon=True)
torch.cuda.synchronize()
