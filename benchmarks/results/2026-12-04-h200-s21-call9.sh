#!/bin/bash
# examples/train_fsdp.py on one GPU with the fused AdamW, the four ways in one call: tritonkit
# and unpatched, eager and with each decoder layer compiled (config A, two micro-batches a step,
# 30 steps; each run its own process).
#   bash benchmarks/results/2026-12-04-h200-s21-call9.sh   (~4 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1 PYTHONPATH=src NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
R=${OUT:-/tmp/out}; mkdir -p $R
run() {  # name, flags...
  local name=$1; shift
  timeout 110 python3 -m torch.distributed.run --standalone --nproc-per-node 1 examples/train_fsdp.py --config A \
    --steps 30 --grad-accum 2 --quiet --json $R/fsdp_1gpu_$name.json "$@" > $R/fsdp_1gpu_$name.log 2>&1
  echo "rc $?" >> $R/fsdp_1gpu_$name.log
  grep -E "^train_fsdp|Error|^rc" $R/fsdp_1gpu_$name.log | cut -c1-300
}
run none_compile --patch none --compile
run tritonkit --patch tritonkit
run none --patch none
run tritonkit_compile --patch tritonkit --compile
