#!/bin/bash
# A/B, one process per tree, each with its own peers: tree a (.ab/a/src, the commit before) and
# this tree, whose norms' forward drops the masks on whole tiles (EVEN). GPU suites of the norms
# and gated ops first (4 workers: 8 ran out of the card's memory beside the norms' large cases).
#   bash benchmarks/results/2026-12-04-h200-s18-call4.sh   (carry .whl and .ab; ~5 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
PYTHONPATH=src timeout 150 python3 -m pytest -q -n 4 tests/test_norms.py tests/test_norm_plans.py tests/test_gated.py \
  tests/test_gated_linear.py > $R/tests.txt 2>&1
echo "rc $?" >> $R/tests.txt; tail -n 1 $R/tests.txt; grep -E "^FAILED" $R/tests.txt | head -5
for t in a b a b; do
  src=src; [ $t = a ] && src=.ab/a/src
  PYTHONPATH=$src timeout 60 python3 benchmarks/sweep_rope.py norms-fp32 norms >> $R/norms_$t.txt 2>&1
  echo "== tree $t"; tail -n 30 $R/norms_$t.txt | grep -E "default|compile" | cut -c1-100
done
for t in a b; do
  src=src; [ $t = a ] && src=.ab/a/src
  PYTHONPATH=$src:/tmp/site timeout 100 python3 -m tritonkit bench rms_norm layer_norm --filter 8192x4096 \
    --no-progress > $R/bench_$t.txt 2>&1
  echo "== tree $t"; grep -E "^(rms_norm|layer_norm) (fwd|bwd)" $R/bench_$t.txt
done
