#!/bin/bash
# The Gluon forward with O in a buffer of its own at head dim 128 only (D=64 and 256 compile to
# main's kernels): its GPU suites; the A/B against main at D=128, one tree a process, twice
# alternating; a tile's fixed cost and a key block's cost (benchmarks/attention_tile_costs.py)
# at the short shape (D=64) and at D=128; issue 16's bar shapes on this tree
# (benchmarks/attention_bars.py, one round).
#   bash benchmarks/results/2026-12-05-h200-s24-call2.sh
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
ROOT=$(pwd)
rm -rf /tmp/main_tree && mkdir -p /tmp/main_tree && cp -r src /tmp/main_tree/ && \
  (cd /tmp/main_tree && patch -s -R -p1 < $ROOT/benchmarks/results/2026-12-05-s24-o-buffer.patch) || echo "patch failed"
PYTHONPATH=src timeout 140 python3 -m pytest -q -n 6 -p no:cacheprovider tests/test_gluon_attention.py \
  tests/test_gluon_attention_varlen.py > $R/tests_gluon_fwd.txt 2>&1; echo "rc $?" >> $R/tests_gluon_fwd.txt
tail -n 2 $R/tests_gluon_fwd.txt
for tree in /tmp/main_tree $ROOT /tmp/main_tree $ROOT; do
  echo "== $tree" >> $R/o_buffer_ab.txt
  PYTHONPATH=$tree/src timeout 70 python3 $ROOT/benchmarks/results/2026-12-05-h200-s24-o_buffer_ab.py 128 >> $R/o_buffer_ab.txt 2>&1
  echo "rc $?" >> $R/o_buffer_ab.txt
done
cat $R/o_buffer_ab.txt
PYTHONPATH=src timeout 45 python3 benchmarks/attention_tile_costs.py > $R/tile_costs.txt 2>&1; echo "rc $?" >> $R/tile_costs.txt
PYTHONPATH=src timeout 45 python3 benchmarks/attention_tile_costs.py --head-dim 128 >> $R/tile_costs.txt 2>&1
echo "rc $?" >> $R/tile_costs.txt
cat $R/tile_costs.txt
PYTHONPATH=src timeout 150 python3 benchmarks/attention_bars.py --rounds 1 > $R/attention_bars.txt 2>&1
echo "rc $?" >> $R/attention_bars.txt; tail -n 30 $R/attention_bars.txt
