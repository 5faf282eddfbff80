#!/bin/bash
# The FSDP2 step of config A on one GPU under torch.profiler, tritonkit eager and with each
# decoder layer compiled (call 5: 0.955x of eager): kernels by total time over two steps.
#   bash benchmarks/results/2026-12-04-h200-s21-call7.sh   (~3 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1 PYTHONPATH=src NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
R=${OUT:-/tmp/out}; mkdir -p $R
for flag in "" --compile; do
  timeout 200 python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
    benchmarks/results/2026-12-04-h200-s21-fsdp_profile.py $flag > $R/profile$flag.txt 2>&1
  echo "rc $?" >> $R/profile$flag.txt
  grep -v "^tritonkit.transformers" $R/profile$flag.txt | tail -n 31 | cut -c1-140
done
