#!/bin/bash
# (Prepared in the thirteenth set; not run yet.) Issue 13's table again, on main as it stands:
# the block ops against torch, torch.compile and Liger in one run (Liger carried as .whl/), and the
# norms' host time a call (their forward+backward at 8192x4096 read host-bound when last measured,
# before the launch-path work of later sets), with the branch norms-launch-templates beside
# (exported first: mkdir -p _wt/norms && git archive norms-launch-templates | tar -x -C _wt/norms).
# Run with carry [".whl"]:
#   bash benchmarks/results/2026-12-02-h200-s13-blocks_call.sh   (at most 9 minutes)
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
PYTHONPATH=src:/tmp/site timeout 260 python3 -m tritonkit bench blocks --no-progress --json $R/blocks.json \
   > $R/bench_blocks.txt 2>&1
PYTHONPATH=src timeout 60 python3 benchmarks/host_profile.py --no-profile norms > $R/host_norms.txt 2>&1
(cd _wt/norms && PYTHONPATH=src timeout 80 python3 -m pytest -q -x -n 8 tests/test_norms.py tests/test_autograd_roads.py \
   > $R/norms-templates-tests.txt 2>&1; echo "rc $?" >> $R/norms-templates-tests.txt)
(cd _wt/norms && PYTHONPATH=src timeout 60 python3 benchmarks/host_profile.py --no-profile norms > $R/host_norms-templates.txt 2>&1)
(cd _wt/norms && PYTHONPATH=src:/tmp/site timeout 110 python3 -m tritonkit bench rms_norm layer_norm --filter "8192x4096" \
   --no-progress > $R/bench_norms-templates.txt 2>&1)
tail -n 2 $R/norms-templates-tests.txt; tail -n 40 $R/bench_blocks.txt; tail -n 14 $R/host_norms*.txt; tail -n 16 $R/bench_norms-templates.txt
