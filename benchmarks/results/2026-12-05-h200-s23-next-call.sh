#!/bin/bash
# Prepared for the next GPU session, not run (~5 min): issue 16's short forward (B8 H16 N1024
# D64) split into a fixed cost a query tile and a cost a key block, tritonkit beside cuDNN
# (benchmarks/attention_tile_costs.py), with B4 H32 N4096 as the control and D=128 beside it;
# then the compiled suite's first slice of three (docs/bench.md).
#   bash benchmarks/results/2026-12-05-h200-s23-next-call.sh
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1 PYTHONPATH=src
R=${OUT:-/tmp/out}; mkdir -p $R
for shape in "" "--head-dim 128" "--batch 4 --heads 32 --nq 4096 --nk 1024 --nk 2048 --nk 4096 --nk 8192"; do
  timeout 90 python3 benchmarks/attention_tile_costs.py $shape >> $R/tile_costs.txt 2>&1
  echo "rc $?" >> $R/tile_costs.txt
done
cat $R/tile_costs.txt
TRITONKIT_TEST_SHARD=1/3 timeout 280 python3 -m pytest -p no:cacheprovider -n 8 -m "not slow" -q -rfE --tb=short tests \
  > $R/tests_1of3.txt 2>&1
echo "rc $?" >> $R/tests_1of3.txt; tail -n 4 $R/tests_1of3.txt
