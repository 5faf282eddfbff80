#!/bin/bash
# The D=64 forward with O in its own buffer and the release predicated in the loops (spills
# 84 B at three warpgroups' 160 registers), against the launcher's, in one process; then a
# tile's fixed cost and a key block's cost at B8 H16 N1024 D128 on main (the patch reversed),
# beside call 2's on this tree; the D=128 N=16384 backward rows of the bars again.
#   bash benchmarks/results/2026-12-05-h200-s24-call3.sh
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
ROOT=$(pwd)
rm -rf /tmp/main_tree && mkdir -p /tmp/main_tree && cp -r src /tmp/main_tree/ && \
  (cd /tmp/main_tree && patch -s -R -p1 < $ROOT/benchmarks/results/2026-12-05-s24-o-buffer.patch) || echo "patch failed"
PYTHONPATH=src timeout 100 python3 benchmarks/results/2026-12-05-h200-s24-d64_o_buffer.py > $R/d64_o_buffer.txt 2>&1
echo "rc $?" >> $R/d64_o_buffer.txt; cat $R/d64_o_buffer.txt
PYTHONPATH=/tmp/main_tree/src timeout 60 python3 benchmarks/attention_tile_costs.py --head-dim 128 > $R/tile_costs_main_d128.txt 2>&1
echo "rc $?" >> $R/tile_costs_main_d128.txt; cat $R/tile_costs_main_d128.txt
# issue 16's D=128 N=16384 backward rows again (call 2 read the full one at 0.80x cuDNN, 0.90x before)
PYTHONPATH=src timeout 120 python3 benchmarks/attention_bars.py --rounds 2 --filter "bwd B4 H32 N=16384 D=128" \
  > $R/attention_bars_bwd128.txt 2>&1
echo "rc $?" >> $R/attention_bars_bwd128.txt; cat $R/attention_bars_bwd128.txt
