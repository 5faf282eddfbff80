#!/bin/bash
# Prepared for the next GPU session, not run (~9 min): the compiled suite's third slice of
# three, then the twenty-second set's prepared host and FSDP2-trace call (still unrun).
#   bash benchmarks/results/2026-12-05-h200-s23-next-call-3.sh
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1 PYTHONPATH=src
R=${OUT:-/tmp/out}; mkdir -p $R
TRITONKIT_TEST_SHARD=3/3 timeout 280 python3 -m pytest -p no:cacheprovider -n 8 -m "not slow" -q -rfE --tb=short tests \
  > $R/tests_3of3.txt 2>&1
echo "rc $?" >> $R/tests_3of3.txt; tail -n 4 $R/tests_3of3.txt
timeout 290 bash benchmarks/results/2026-12-04-h200-s22-next-call.sh
