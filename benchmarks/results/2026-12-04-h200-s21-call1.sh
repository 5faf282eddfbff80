#!/bin/bash
# The norms' forward with each row held in two halves (the prepared patch,
# benchmarks/results/2026-12-04-s20-norm-fwd-halves.patch) against main, one tree a process
# (the twentieth set's A/B script); then the norms' forward tiles at 16384 columns, where
# LayerNorm's one-row-on-8-warps rule holds 148 registers a thread (one block an SM).
#   bash benchmarks/results/2026-12-04-h200-s21-call1.sh   (~7 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
rm -rf /tmp/halves && mkdir -p /tmp/halves && cp -r src benchmarks /tmp/halves/ && (cd /tmp/halves && patch -s -p1 < benchmarks/results/2026-12-04-s20-norm-fwd-halves.patch)
for tree in . /tmp/halves; do
  echo "== $tree" >> $R/ab.txt
  PYTHONPATH=$tree/src:$tree/benchmarks timeout 120 python3 benchmarks/results/2026-12-04-h200-s20-norm_fwd_ab.py >> $R/ab.txt 2>&1
  echo "rc $?" >> $R/ab.txt
done
cut -c1-250 $R/ab.txt
for part in norms norms-fp32; do
  PYTHONPATH=src timeout 100 python3 benchmarks/sweep_rope.py $part --shape 4096x16384 > $R/sweep_$part.txt 2>&1
  echo "rc $?" >> $R/sweep_$part.txt
  grep -E "GB/s|^rc|NOT" $R/sweep_$part.txt | sed -E 's/ \(rounds.*//' | cut -c1-150
done
