#!/bin/bash
# The D=64 backward's passes alone (dK/dV, dQ; eager and, at the short shape, graphed) beside
# cuDNN's whole backward: issue 16's short backward (B8 H16 N1024 D64) and B4 H32 N4096.
#   bash benchmarks/results/2026-12-05-h200-s24-call4.sh
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
PYTHONPATH=src timeout 150 python3 benchmarks/bench_gluon_attention.py --backward --head-dim 64 > $R/bwd_d64_stages.txt 2>&1
echo "rc $?" >> $R/bwd_d64_stages.txt; cat $R/bwd_d64_stages.txt
