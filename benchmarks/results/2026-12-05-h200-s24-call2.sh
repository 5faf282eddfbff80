#!/bin/bash
# Issue 16's short forward (B8 H16 N1024 D64) split into a tile's fixed cost and a key block's
# cost, tritonkit beside cuDNN (benchmarks/attention_tile_costs.py), on main (the patch reversed
# in a copy) and on this tree (O in a buffer of its own); then issue 16's bar shapes on this tree
# (benchmarks/attention_bars.py, one round).
#   bash benchmarks/results/2026-12-05-h200-s24-call2.sh
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
ROOT=$(pwd)
rm -rf /tmp/main_tree && mkdir -p /tmp/main_tree && cp -r src /tmp/main_tree/ && \
  (cd /tmp/main_tree && patch -s -R -p1 < $ROOT/benchmarks/results/2026-12-05-s24-o-buffer.patch) || echo "patch failed"
for tree in /tmp/main_tree $ROOT; do
  echo "== $tree" >> $R/tile_costs.txt
  PYTHONPATH=$tree/src timeout 80 python3 benchmarks/attention_tile_costs.py >> $R/tile_costs.txt 2>&1
  echo "rc $?" >> $R/tile_costs.txt
done
cat $R/tile_costs.txt
PYTHONPATH=src timeout 300 python3 benchmarks/attention_bars.py --rounds 1 > $R/attention_bars.txt 2>&1
echo "rc $?" >> $R/attention_bars.txt; tail -n 32 $R/attention_bars.txt
