#!/bin/bash
# The Gluon forward over packed sequences: GPU suites, the A/B script, the varlen bench with its peers.
#   bash benchmarks/results/2026-12-03-h200-s16-call1.sh   (~8 min)
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
PYTHONPATH=src timeout 260 python3 -m pytest -m gpu -q -n 8 tests/test_gluon_attention_varlen.py \
  tests/test_gluon_attention.py tests/test_attention_varlen.py > $R/gluon-tests.txt 2>&1; echo "rc $?" >> $R/gluon-tests.txt
tail -n 3 $R/gluon-tests.txt
grep -E "^FAILED|Error" $R/gluon-tests.txt | head -20
PYTHONPATH=src timeout 150 python3 benchmarks/results/2026-12-03-h200-s16-gluon_varlen.py > $R/varlen_ab.txt 2>&1
echo "rc $?" >> $R/varlen_ab.txt
cat $R/varlen_ab.txt
PYTHONPATH=src timeout 150 python3 -m tritonkit bench attention_varlen --no-progress --json $R/bench_varlen.json > $R/bench_varlen.txt 2>&1
echo "rc $?" >> $R/bench_varlen.txt
tail -n 25 $R/bench_varlen.txt
