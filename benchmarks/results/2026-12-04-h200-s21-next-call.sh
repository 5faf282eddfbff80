#!/bin/bash
# Prepared for the next GPU session, not run: the norms' forward with each row held in two
# halves (rows of 512 columns or more), the second half's weight loaded after the first half's y is stored
# (benchmarks/results/2026-12-04-s20-norm-fwd-halves.patch: sm_90 registers rms fp32 8192x4096
# 35 -> 32, so 8 blocks of 8 warps an SM instead of 6; layer fp32 42 -> 40; mixed at other
# shapes), against main, one tree a process, do_bench and graphed (the twentieth set's A/B).
#   bash benchmarks/results/2026-12-04-h200-s21-next-call.sh   (~4 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
rm -rf /tmp/halves && mkdir -p /tmp/halves && cp -r src benchmarks /tmp/halves/ && (cd /tmp/halves && patch -s -p1 < benchmarks/results/2026-12-04-s20-norm-fwd-halves.patch)
for tree in . /tmp/halves; do
  echo "== $tree" >> $R/ab.txt
  PYTHONPATH=$tree/src:$tree/benchmarks timeout 120 python3 benchmarks/results/2026-12-04-h200-s20-norm_fwd_ab.py >> $R/ab.txt 2>&1
done
cat $R/ab.txt | cut -c1-250
PYTHONPATH=/tmp/halves/src timeout 120 python3 -m pytest -q -n 4 tests/test_norms.py > $R/tests_halves.txt 2>&1
echo "rc $?" >> $R/tests_halves.txt; tail -n 2 $R/tests_halves.txt
