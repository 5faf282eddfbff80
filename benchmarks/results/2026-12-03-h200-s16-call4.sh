#!/bin/bash
# Packed sequences with a causal left window on the Gluon kernels: GPU suites, then the A/B script.
#   bash benchmarks/results/2026-12-03-h200-s16-call4.sh   (~6 min)
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
PYTHONPATH=src timeout 300 python3 -m pytest -m gpu -q -n 8 tests/test_gluon_attention_varlen_bwd.py \
  tests/test_gluon_attention_varlen.py tests/test_attention_varlen.py tests/test_attention_masks.py \
  > $R/gluon-tests.txt 2>&1; echo "rc $?" >> $R/gluon-tests.txt
tail -n 3 $R/gluon-tests.txt
grep -E "^FAILED|^E  " $R/gluon-tests.txt | head -30
PYTHONPATH=src timeout 150 python3 benchmarks/results/2026-12-03-h200-s16-gluon_varlen_window.py \
  > $R/varlen_window_ab.txt 2>&1; echo "rc $?" >> $R/varlen_window_ab.txt
grep -v Warning $R/varlen_window_ab.txt
