#!/bin/bash
# Longest first in spans of 8 heads (`host.longest_first_span`): GPU suites (every order bitwise,
# the dense backward), then the training step at configs B and A against Liger.
#   bash benchmarks/results/2026-12-03-h200-s17-call4.sh   (carry .whl; ~6 min)
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
PYTHONPATH=src timeout 150 python3 -m pytest -m gpu -q -n 8 tests/test_gluon_tile_order.py \
  tests/test_gluon_attention_bwd.py > $R/tests.txt 2>&1
echo "rc $?" >> $R/tests.txt; tail -n 3 $R/tests.txt; grep -E "^FAILED|^E  " $R/tests.txt | head -20
for c in B A; do
  PYTHONPATH=src:/tmp/site timeout 120 python3 -m tritonkit bench train --config $c --provider liger \
    --provider tritonkit > $R/train_$c.txt 2>&1; echo "rc $?" >> $R/train_$c.txt
  grep -E "^config|^provider|^liger|^tritonkit|^rc" $R/train_$c.txt
done
