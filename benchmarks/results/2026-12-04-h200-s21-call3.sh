#!/bin/bash
# The causal forward at head dim 64: the Gluon three-warpgroup tile below 8192 rows against
# main's rule (the Triton kernels there), one process each; the norms' GPU suites on the new
# LayerNorm rule at 16384 columns.
#   bash benchmarks/results/2026-12-04-h200-s21-call3.sh   (~4 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
for t in 8192 1 8192 1; do
  PYTHONPATH=src timeout 100 python3 benchmarks/results/2026-12-04-h200-s21-d64_causal_three.py $t >> $R/d64_causal.txt 2>&1
  echo "rc $?" >> $R/d64_causal.txt
done
cat $R/d64_causal.txt
PYTHONPATH=src timeout 200 python3 -m pytest -q -n 4 tests/test_norms.py tests/test_norm_plans.py > $R/tests.txt 2>&1
echo "rc $?" >> $R/tests.txt; tail -n 3 $R/tests.txt
