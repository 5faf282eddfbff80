#!/bin/bash
# examples/train_fsdp.py on one GPU with the fused AdamW (call 7's profile: AdamW's foreach
# kernels took 22 ms of a 165 ms step's GPU time): config A, two micro-batches a step, 30 steps,
# tritonkit and unpatched, eager.
#   bash benchmarks/results/2026-12-04-h200-s21-call8.sh   (~2 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1 PYTHONPATH=src NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
R=${OUT:-/tmp/out}; mkdir -p $R
for patch in tritonkit none; do
  timeout 200 python3 -m torch.distributed.run --standalone --nproc-per-node 1 examples/train_fsdp.py --config A \
    --steps 30 --grad-accum 2 --patch $patch --quiet --json $R/fsdp_1gpu_$patch.json > $R/fsdp_1gpu_$patch.log 2>&1
  echo "rc $?" >> $R/fsdp_1gpu_$patch.log
  grep -E "^train_fsdp|Error|^rc" $R/fsdp_1gpu_$patch.log | cut -c1-300
done
python3 -c "
import json
for n in ('tritonkit', 'none'):
    d = json.load(open('$R/fsdp_1gpu_%s.json' % n)); print(n, ' '.join(f'{x:.3f}' for x in d['losses']))
"
