#!/bin/bash
# The whole GPU suite (not slow), compiled, twelve workers: the previous session's changes
# (meta tensors, autocast, dynamic shapes, cross_entropy's (N, C, d...) logits) had not run there.
#   bash benchmarks/results/2026-12-05-h200-s23-call3.sh
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1 PYTHONPATH=src
R=${OUT:-/tmp/out}; mkdir -p $R
timeout 540 python3 -m pytest -p no:cacheprovider -n 12 -m "not slow" -v -rfE --tb=short tests > $R/tests_all.txt 2>&1
echo "rc $?" >> $R/tests_all.txt
echo "passed $(grep -c ' PASSED ' $R/tests_all.txt) failed $(grep -c ' FAILED ' $R/tests_all.txt) skipped $(grep -c ' SKIPPED ' $R/tests_all.txt)"
grep -E "^(FAILED|ERROR) " $R/tests_all.txt | cut -c1-300 | head -40
tail -n 2 $R/tests_all.txt
