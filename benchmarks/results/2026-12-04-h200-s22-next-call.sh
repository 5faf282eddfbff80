#!/bin/bash
# Prepared for the next GPU session, not run (~5 min): what a tritonkit op costs the host from a
# compiled region against the eager road, on the GPU machine's host (host_profile.py's new
# `compiled` group); config A's FSDP2 step as a Chrome trace with the host's activity (tritonkit
# eager and compiled, the unpatched model compiled), for reading where its GPU idles; and the
# Triton kernel torch.compile makes of LayerNorm at 4096 x 16384 bf16 (94% of a copy, ours 87%).
#   bash benchmarks/results/2026-12-04-h200-s22-next-call.sh
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1 PYTHONPATH=src NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
R=${OUT:-/tmp/out}; mkdir -p $R
timeout 120 python3 benchmarks/host_profile.py --no-profile compiled norms > $R/host_compiled.txt 2>&1
echo "rc $?" >> $R/host_compiled.txt; cat $R/host_compiled.txt
for flags in "" "--compile" "--compile --patch none"; do
  timeout 100 python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
    benchmarks/results/2026-12-04-h200-s22-fsdp_trace.py $R $flags > "$R/trace_log${flags// /}.txt" 2>&1
  echo "rc $?" >> "$R/trace_log${flags// /}.txt"
  grep -v "^tritonkit.transformers" "$R/trace_log${flags// /}.txt" | tail -n 17
done
TORCH_LOGS=output_code timeout 90 python3 -c "
import torch
from tritonkit.ops.norms.layer_norm import layer_norm_reference
x = torch.randn(4096, 16384, device='cuda', dtype=torch.bfloat16)
w, b = (torch.randn(16384, device='cuda', dtype=torch.bfloat16) for _ in range(2))
with torch.no_grad():
    torch.compile(lambda: layer_norm_reference(x, w, b, upcast=False), dynamic=False)()
" > $R/compile_layer_norm_16384.txt 2>&1
echo "rc $?" >> $R/compile_layer_norm_16384.txt; grep -E "num_warps|R0_BLOCK|XBLOCK|def triton" $R/compile_layer_norm_16384.txt | head -20
