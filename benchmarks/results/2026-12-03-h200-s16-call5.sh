#!/bin/bash
# Packed sequences at head dim 256 on the Gluon dK/dV pass; the dense Gluon suites again (their
# stores now share one helper). bash benchmarks/results/2026-12-03-h200-s16-call5.sh (~6 min)
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
PYTHONPATH=src timeout 330 python3 -m pytest -m gpu -q -n 8 tests/test_gluon_attention_varlen_bwd.py \
  tests/test_gluon_attention_bwd.py tests/test_gluon_attention.py tests/test_gluon_attention_varlen.py \
  > $R/gluon-tests.txt 2>&1; echo "rc $?" >> $R/gluon-tests.txt
tail -n 3 $R/gluon-tests.txt
grep -E "^FAILED|^E  " $R/gluon-tests.txt | head -30
PYTHONPATH=src timeout 120 python3 benchmarks/results/2026-12-03-h200-s16-gluon_varlen_d256.py \
  > $R/varlen_d256_ab.txt 2>&1; echo "rc $?" >> $R/varlen_d256_ab.txt
grep -v Warning $R/varlen_d256_ab.txt
