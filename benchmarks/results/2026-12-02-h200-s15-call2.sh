#!/bin/bash
# The Gluon forward's two Q buffers and packed sequences: GPU suites, then the A/B script.
#   bash benchmarks/results/2026-12-02-h200-s15-call2.sh   (~7 min)
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
PYTHONPATH=src timeout 240 python3 -m pytest -m gpu -q -n 8 tests/test_gluon_attention_varlen.py \
  tests/test_gluon_attention.py > $R/gluon-tests.txt 2>&1; echo "rc $?" >> $R/gluon-tests.txt
tail -n 3 $R/gluon-tests.txt
PYTHONPATH=src timeout 240 python3 benchmarks/results/2026-12-02-h200-s15-gluon_fwd_ab.py > $R/ab.txt 2>&1
echo "rc $?" >> $R/ab.txt
cat $R/ab.txt | tail -n 20
grep -E "^FAILED|Error" $R/gluon-tests.txt | head -20
