#!/bin/bash
# The D=256 rows of the attention bench with the new dispatch (peers in the same run), the plans'
# tests on the GPU, and config B's training step against Liger.
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
PYTHONPATH=src timeout 90 python3 -m pytest -q -x -n 4 tests/test_attention_plans.py > $R/plans_tests.txt 2>&1; echo "rc $?" >> $R/plans_tests.txt
PYTHONPATH=src timeout 120 python3 -m tritonkit bench attention --filter "D=256" --no-progress > $R/bench_d256.txt 2>&1
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
PYTHONPATH=src:/tmp/site timeout 170 python3 -m tritonkit bench train --config B --provider liger --provider tritonkit > $R/train_B.txt 2>&1
tail -n 2 $R/plans_tests.txt; tail -n 12 $R/bench_d256.txt; tail -n 4 $R/train_B.txt
