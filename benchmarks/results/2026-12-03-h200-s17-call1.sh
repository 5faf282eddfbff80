#!/bin/bash
# The causal tile order (RUN): A/B of each Gluon pass in one process, then the dense Gluon GPU
# suites on the new default.   bash benchmarks/results/2026-12-03-h200-s17-call1.sh   (~8 min)
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
PYTHONPATH=src timeout 300 python3 benchmarks/results/2026-12-03-h200-s17-head_run.py > $R/head_run.txt 2>&1
echo "rc $?" >> $R/head_run.txt
grep -v Warning $R/head_run.txt
PYTHONPATH=src timeout 220 python3 -m pytest -m gpu -q -n 8 tests/test_gluon_attention.py \
  tests/test_gluon_attention_bwd.py > $R/gluon-tests.txt 2>&1; echo "rc $?" >> $R/gluon-tests.txt
tail -n 3 $R/gluon-tests.txt
grep -E "^FAILED|^E  " $R/gluon-tests.txt | head -30
