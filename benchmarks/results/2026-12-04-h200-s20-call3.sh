#!/bin/bash
# The norms' forward launch rule, old against new (short rows 2048 elements a program, at most 8
# warps a program) and each change alone, in one process; the norms' GPU suites on the new rule;
# then the bench's norm cases with every peer (Liger 0.8.5 in .whl), eager and from a CUDA graph.
#   bash benchmarks/results/2026-12-04-h200-s20-call3.sh   (carry .whl; ~7 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
PYTHONPATH=src:benchmarks timeout 200 python3 benchmarks/results/2026-12-04-h200-s20-norm_fwd_ab.py > $R/ab.txt 2>&1
echo "rc $?" >> $R/ab.txt; cat $R/ab.txt | cut -c1-250
PYTHONPATH=src timeout 120 python3 -m pytest -q -n 4 tests/test_norms.py tests/test_norm_plans.py > $R/tests.txt 2>&1
echo "rc $?" >> $R/tests.txt; tail -n 2 $R/tests.txt; grep -E "^FAILED" $R/tests.txt | head -5
PYTHONPATH=src:/tmp/site timeout 200 python3 -m tritonkit bench rms_norm layer_norm --no-progress \
  --json $R/bench_norms.json > $R/bench_norms.txt 2>&1
echo "rc $?" >> $R/bench_norms.txt
sed -n '/^Summary/,$p' $R/bench_norms.txt | cut -c1-150
