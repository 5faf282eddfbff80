#!/bin/bash
# Prepared for the next GPU session, not run (~8 min): issue 16's bar shapes again beside cuDNN
# and FA2 (benchmarks/attention_bars.py, two rounds, about four minutes), then the compiled
# suite's second slice of three.
#   bash benchmarks/results/2026-12-05-h200-s23-next-call-2.sh
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1 PYTHONPATH=src
R=${OUT:-/tmp/out}; mkdir -p $R
timeout 290 python3 benchmarks/attention_bars.py --rounds 2 > $R/attention_bars.txt 2>&1
echo "rc $?" >> $R/attention_bars.txt; tail -n 32 $R/attention_bars.txt
TRITONKIT_TEST_SHARD=2/3 timeout 280 python3 -m pytest -p no:cacheprovider -n 8 -m "not slow" -q -rfE --tb=short tests \
  > $R/tests_2of3.txt 2>&1
echo "rc $?" >> $R/tests_2of3.txt; tail -n 4 $R/tests_2of3.txt
