#!/bin/bash
# The Triton kernels' causal tile order: the A/B.   bash benchmarks/results/2026-12-03-h200-s17-call5.sh   (~3 min)
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
PYTHONPATH=src timeout 100 python3 benchmarks/results/2026-12-03-h200-s17-triton_span.py > $R/triton_span.txt 2>&1
echo "rc $?" >> $R/triton_span.txt; grep -v Warning $R/triton_span.txt
