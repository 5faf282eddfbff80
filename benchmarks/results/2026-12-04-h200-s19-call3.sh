#!/bin/bash
# The norms' tile sweeps again, now that the sweep forgets the bound launch templates between
# variants (before, every variant ran the first one's kernel): the forward on main and on main
# with benchmarks/results/2026-12-04-s19-norm-chunk-evict.patch (the two-pass walk's first pass
# evict_last, its second evict_first), float32 and bfloat16; then main's backward tiles.
#   bash benchmarks/results/2026-12-04-h200-s19-call3.sh   (~5 min; needs patch or git)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
P=$PWD/benchmarks/results/2026-12-04-s19-norm-chunk-evict.patch
rm -rf /tmp/evict && mkdir -p /tmp/evict && cp -r src /tmp/evict/ && (cd /tmp/evict && (patch -p1 < $P || git apply $P)) || exit 1
for t in main evict; do
  src=src; [ $t = evict ] && src=/tmp/evict/src
  PYTHONPATH=$src timeout 170 python3 benchmarks/sweep_rope.py norms-fp32 norms > $R/sweep_norms_$t.txt 2>&1
  echo "rc $?" >> $R/sweep_norms_$t.txt; echo "== $t"
  grep -E "GB/s|^rc" $R/sweep_norms_$t.txt | sed -E 's/\(weight(, bias)?\), //; s/ \(rounds.*//' | cut -c1-120
done
PYTHONPATH=src timeout 200 python3 benchmarks/sweep_rope.py norms-bwd norms-bwd-fp32 > $R/sweep_norms_bwd.txt 2>&1
echo "rc $?" >> $R/sweep_norms_bwd.txt
grep -E "GB/s|^rc|NOT" $R/sweep_norms_bwd.txt | sed -E 's/ \(rounds.*//' | cut -c1-140
