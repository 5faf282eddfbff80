#!/bin/bash
# The gated activations' new tile through the bench (every peer, Liger carried) and their GPU
# tests; the norms' forward tiles in float32 and bfloat16 beside torch.compile.
#   bash benchmarks/results/2026-12-04-h200-s18-call2.sh   (carry .whl; ~7 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
PYTHONPATH=src timeout 150 python3 -m pytest -q -n 8 tests/test_gated.py tests/test_gated_linear.py > $R/tests.txt 2>&1
echo "rc $?" >> $R/tests.txt; tail -n 2 $R/tests.txt; grep -E "^FAILED|^E  " $R/tests.txt | head -10
PYTHONPATH=src:/tmp/site timeout 240 python3 -m tritonkit bench swiglu geglu gated_linear --no-progress \
  --json $R/bench_gated.json > $R/bench_gated.txt 2>&1; echo "rc $?" >> $R/bench_gated.txt
grep -E "^(swiglu|geglu|gated_linear) (fwd|bwd)|^rc" $R/bench_gated.txt
PYTHONPATH=src timeout 160 python3 benchmarks/sweep_rope.py norms-fp32 norms > $R/sweep_norms.txt 2>&1
echo "rc $?" >> $R/sweep_norms.txt; grep -v "^ *$" $R/sweep_norms.txt | cut -c1-120
