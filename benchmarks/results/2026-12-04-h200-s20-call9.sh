#!/bin/bash
# The float32 norm forwards' occupancy (call 8's Nsight Compute): maxnreg 32, or 16 warps.
#   bash benchmarks/results/2026-12-04-h200-s20-call9.sh   (~2 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
PYTHONPATH=src:benchmarks timeout 140 python3 benchmarks/results/2026-12-04-h200-s20-norm_occupancy_ab.py > $R/ab.txt 2>&1
echo "rc $?" >> $R/ab.txt; cut -c1-200 $R/ab.txt | tail -12
