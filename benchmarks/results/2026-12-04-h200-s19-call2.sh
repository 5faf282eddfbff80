#!/bin/bash
# The norms' forward+backward under torch.profiler (why the bf16 rows read slower than fp32 in
# the bench), and host_profile's norms group on the GPU host.
#   bash benchmarks/results/2026-12-04-h200-s19-call2.sh   (~2 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
PYTHONPATH=src timeout 200 python3 benchmarks/results/2026-12-04-h200-s19-norms_profile.py > $R/norms_profile.txt 2>&1
echo "rc $?" >> $R/norms_profile.txt; grep -E "^==|^rc" $R/norms_profile.txt
PYTHONPATH=src timeout 150 python3 benchmarks/host_profile.py norms > $R/host_norms.txt 2>&1
echo "rc $?" >> $R/host_norms.txt; grep -E "us/call" $R/host_norms.txt
