#!/bin/bash
# main with the norms' backward loading a row block ahead: the norms' GPU suites; the bench's
# norm cases with every peer (Liger 0.8.5 carried in .whl); the backward tile sweep again (bf16),
# now that each tile's loads run a block ahead.
#   bash benchmarks/results/2026-12-04-h200-s19-call5.sh   (carry .whl; ~4 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
PYTHONPATH=src timeout 150 python3 -m pytest -q -n 4 tests/test_norms.py tests/test_norm_plans.py > $R/tests.txt 2>&1
echo "rc $?" >> $R/tests.txt; tail -n 1 $R/tests.txt; grep -E "^FAILED" $R/tests.txt | head -5
PYTHONPATH=src:/tmp/site timeout 200 python3 -m tritonkit bench rms_norm layer_norm --no-progress > $R/bench_norms.txt 2>&1
echo "rc $?" >> $R/bench_norms.txt
grep -E "^(fwd|bwd|fwd\+bwd|case)|host-bound: .* tritonkit|^rc" $R/bench_norms.txt | cut -c1-200
PYTHONPATH=src timeout 150 python3 benchmarks/sweep_rope.py norms-bwd > $R/sweep_norms_bwd.txt 2>&1
echo "rc $?" >> $R/sweep_norms_bwd.txt
grep -E "GB/s|^rc|NOT" $R/sweep_norms_bwd.txt | sed -E 's/ \(rounds.*//' | cut -c1-140
