#!/bin/bash
# Issue 17's one-GPU half, the first time on a GPU: examples/train_fsdp.py under torchrun with
# one rank (NCCL, FSDP2 over a world of one), config A with two micro-batches a step (the data
# two GPUs would see), patched with tritonkit and unpatched (transformers' SDPA), 20 steps.
#   bash benchmarks/results/2026-12-04-h200-s21-call4.sh   (~6 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1 PYTHONPATH=src NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
R=${OUT:-/tmp/out}; mkdir -p $R
for patch in tritonkit none; do
  timeout 250 python3 -m torch.distributed.run --standalone --nproc-per-node 1 examples/train_fsdp.py --config A \
    --steps 20 --grad-accum 2 --patch $patch --quiet --json $R/fsdp_1gpu_$patch.json > $R/fsdp_1gpu_$patch.log 2>&1
  echo "rc $?" >> $R/fsdp_1gpu_$patch.log
  tail -n 6 $R/fsdp_1gpu_$patch.log | cut -c1-300
done
