#!/bin/bash
# (Prepared in the fourteenth set for the next GPU call; not run yet.) The branch
# norms-launch-templates beside main: its GPU norm suites, then in each tree the norms' host time
# a call, the back-to-back forward+backward with its kernels' times, and the 8192x4096 norm
# cases against their peers (Liger carried as .whl/). Export the branch first (untracked, not
# ignored, so the device tool copies it):
#   mkdir -p _wt/norms && git archive norms-launch-templates | tar -x -C _wt/norms
# Run from main with carry [".whl"]: bash benchmarks/results/2026-12-02-h200-s14-norms_branch_call.sh  (~5 min)
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
(cd _wt/norms && PYTHONPATH=src timeout 120 python3 -m pytest -m gpu -q -x -n 8 tests/test_norms.py \
   tests/test_norm_plans.py tests/test_autograd_roads.py > $R/branch-tests.txt 2>&1; echo "rc $?" >> $R/branch-tests.txt)
for t in . _wt/norms; do
  n=$([ "$t" = . ] && echo main || echo branch)
  (cd $t && PYTHONPATH=src timeout 60 python3 benchmarks/host_profile.py --no-profile norms > $R/host-$n.txt 2>&1
   PYTHONPATH=src timeout 60 python3 benchmarks/results/2026-12-02-h200-s14-norms_kernels.py > $R/kernels-$n.txt 2>&1
   PYTHONPATH=src:/tmp/site timeout 100 python3 -m tritonkit bench rms_norm layer_norm --filter "8192x4096" \
     --no-progress > $R/bench-$n.txt 2>&1)
done
tail -n 2 $R/branch-tests.txt; tail -n 12 $R/host-*.txt; grep "back to back" $R/kernels-*.txt; tail -n 12 $R/bench-*.txt
