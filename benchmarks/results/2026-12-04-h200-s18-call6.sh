#!/bin/bash
# What torch.compile makes of the norms' float32 forward at 8192 x 4096 (its Triton source, launch
# heuristics and configs), for comparison with tritonkit's kernel.   bash benchmarks/results/2026-12-04-h200-s18-call6.sh
R=${OUT:-/tmp/out}; mkdir -p $R
TORCH_LOGS=output_code PYTHONPATH=src timeout 120 python3 -c "
import torch
from tritonkit.ops.norms.rms_norm import rms_norm_reference
from tritonkit.ops.norms.layer_norm import layer_norm_reference
x = torch.randn(8192, 4096, device='cuda'); w = torch.randn(4096, device='cuda'); b = torch.randn(4096, device='cuda')
torch.compile(lambda x, w: rms_norm_reference(x, w, upcast=False))(x, w)
torch.compile(lambda x, w, b: layer_norm_reference(x, w, b, upcast=False))(x, w, b)
torch.cuda.synchronize()
" > $R/inductor_norms.txt 2>&1; echo "rc $?"
grep -nE "@triton_heuristics|triton_meta|inductor_meta|def triton_|num_warps|XBLOCK|R0_BLOCK|tl.load|tl.store|rsqrt" $R/inductor_norms.txt | cut -c1-220 | head -60
