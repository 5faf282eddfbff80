#!/bin/bash
# Why the short non-causal attention backward could not be captured for any provider (call 5).
#   bash benchmarks/results/2026-12-04-h200-s20-call6.sh   (~2 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
PYTHONPATH=src timeout 200 python3 benchmarks/results/2026-12-04-h200-s20-capture_modes.py > $R/capture_modes.txt 2>&1
echo "rc $?" >> $R/capture_modes.txt; grep -v "^Backend impl" $R/capture_modes.txt | cut -c1-200 | tail -40
