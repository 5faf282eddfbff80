#!/bin/bash
# A/B, one process per tree, each with its own peers: tree a (.ab/a/src, the commit before) and
# this tree, whose norms' forward loads rows with evict_first and the weight and bias with
# evict_last, and whose gated kernel loads with evict_first. Per tree: the norms' forward tiles
# beside torch.compile (sweep_rope.py), the gated default tile beside torch.compile
# (sweep_gated.py, only the op's rule), the bench's rms_norm/layer_norm/swiglu rows at 8192 tokens.
#   bash benchmarks/results/2026-12-04-h200-s18-call3.sh   (carry .whl and .ab; ~6 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
PYTHONPATH=src timeout 100 python3 -m pytest -q -n 8 tests/test_norms.py tests/test_gated.py > $R/tests.txt 2>&1
echo "rc $?" >> $R/tests.txt; tail -n 1 $R/tests.txt; grep -E "^FAILED" $R/tests.txt | head -5
for t in a b; do
  src=src; [ $t = a ] && src=.ab/a/src
  PYTHONPATH=$src timeout 60 python3 benchmarks/sweep_rope.py norms-fp32 norms > $R/norms_$t.txt 2>&1
  SWEEP_GATED_DEFAULT_ONLY=1 PYTHONPATH=$src timeout 60 python3 benchmarks/sweep_gated.py > $R/gated_$t.txt 2>&1
  PYTHONPATH=$src:/tmp/site timeout 150 python3 -m tritonkit bench rms_norm layer_norm swiglu --filter 8192x \
    --no-progress > $R/bench_$t.txt 2>&1
  echo "== tree $t"; grep -E "default|compile" $R/norms_$t.txt | cut -c1-100
  grep -E "^swiglu|rule|compile" $R/gated_$t.txt | cut -c1-70
  grep -E "^(rms_norm|layer_norm|swiglu) (fwd|bwd)" $R/bench_$t.txt
done
