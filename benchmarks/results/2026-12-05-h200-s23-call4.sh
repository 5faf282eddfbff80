#!/bin/bash
# The 64 cases that failed in call 3's whole-suite run, again with their tracebacks (call 3 was
# cut at its time limit before pytest printed them); four workers, so that memory-heavy cases
# do not share the GPU with eleven others.
#   bash benchmarks/results/2026-12-05-h200-s23-call4.sh
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1 PYTHONPATH=src
R=${OUT:-/tmp/out}; mkdir -p $R
mapfile -t ids < benchmarks/results/2026-12-05-h200-s23-call3-failed.txt
timeout 330 python3 -m pytest -p no:cacheprovider -n 4 -rfE --tb=short "${ids[@]}" > $R/tests_failed.txt 2>&1
echo "rc $?" >> $R/tests_failed.txt
grep -E "^(FAILED|ERROR) " $R/tests_failed.txt | cut -c1-330
tail -n 2 $R/tests_failed.txt
