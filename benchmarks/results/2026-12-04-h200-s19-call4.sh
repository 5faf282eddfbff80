#!/bin/bash
# The norms' backward with the next row block's loads in flight, three ways, against main, one
# process a tree, twice in alternation: .ab/pre (the loads issued one iteration ahead into
# registers), .ab/st2 and .ab/st3 (the one-chunk loop as tl.range(num_stages=2 / 3): Triton's
# pipeliner through shared memory). Then the norms' GPU suites on .ab/pre.
#   bash benchmarks/results/2026-12-04-h200-s19-call4.sh   (carry .ab; ~4 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
for round in 1 2; do
  for t in main pre st2 st3; do
    src=src; [ $t != main ] && src=.ab/$t/src
    echo "== $t round $round" | tee -a $R/ab.txt
    PYTHONPATH=$src timeout 100 python3 benchmarks/results/2026-12-04-h200-s19-norm_bwd_ab.py >> $R/ab.txt 2>&1
    echo "rc $?" >> $R/ab.txt
  done
done
cat $R/ab.txt | cut -c1-150
PYTHONPATH=.ab/pre/src timeout 150 python3 -m pytest -q -n 4 tests/test_norms.py tests/test_norm_plans.py > $R/tests_pre.txt 2>&1
echo "rc $?" >> $R/tests_pre.txt; tail -n 2 $R/tests_pre.txt; grep -E "^FAILED" $R/tests_pre.txt | head -5
