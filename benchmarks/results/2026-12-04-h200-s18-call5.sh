#!/bin/bash
# The short forward per kernel family and tile.   bash benchmarks/results/2026-12-04-h200-s18-call5.sh (~3 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1 PYTHONPATH=src
R=${OUT:-/tmp/out}; mkdir -p $R
for v in dispatch triton two-consumers dispatch; do
  timeout 80 python3 benchmarks/short_attention_tiles.py $v >> $R/short_tiles.txt 2>&1; echo "rc $?" >> $R/short_tiles.txt
done
cat $R/short_tiles.txt | grep -v Warning
