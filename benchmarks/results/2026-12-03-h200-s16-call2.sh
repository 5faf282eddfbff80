#!/bin/bash
# The Gluon backward over packed sequences: GPU suites (new and dense Gluon, forward too), then
# the A/B script.   bash benchmarks/results/2026-12-03-h200-s16-call2.sh   (~7 min)
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
PYTHONPATH=src timeout 330 python3 -m pytest -m gpu -q -n 8 tests/test_gluon_attention_varlen_bwd.py \
  tests/test_gluon_attention_bwd.py tests/test_gluon_attention_varlen.py tests/test_gluon_attention.py \
  tests/test_attention_varlen.py > $R/gluon-tests.txt 2>&1; echo "rc $?" >> $R/gluon-tests.txt
tail -n 3 $R/gluon-tests.txt
grep -E "^FAILED|^E  " $R/gluon-tests.txt | head -30
PYTHONPATH=src timeout 200 python3 benchmarks/results/2026-12-03-h200-s16-gluon_varlen_bwd.py > $R/varlen_bwd_ab.txt 2>&1
echo "rc $?" >> $R/varlen_bwd_ab.txt
cat $R/varlen_bwd_ab.txt | grep -v Warning
