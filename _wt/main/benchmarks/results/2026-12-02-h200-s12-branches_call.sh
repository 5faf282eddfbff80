#!/bin/bash
# (Prepared in the twelfth set for the next session's first GPU call; not run yet.) The three
# backward branches in one call. Export them first (untracked, not ignored, so the device tool
# copies them):
#   for b in gluon-bwd-concurrent gluon-bwd-d256 gluon-bwd-d256-full; do
#     mkdir -p _wt/$b && git archive $b | tar -x -C _wt/$b; done
# then: bash benchmarks/results/2026-12-02-h200-s12-branches_call.sh   (about 8 minutes)
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}
mkdir -p $R
for b in gluon-bwd-d256-full gluon-bwd-concurrent; do
  (cd _wt/$b && PYTHONPATH=src timeout 150 python3 -m pytest -m gpu -q -x -n 4 tests/test_gluon_attention_bwd.py \
     > $R/$b-tests.txt 2>&1; echo "rc $?" >> $R/$b-tests.txt)
done
for b in gluon-bwd-d256 gluon-bwd-d256-full; do
  (cd _wt/$b && PYTHONPATH=src timeout 90 python3 benchmarks/results/2026-12-02-h200-s12-d256_bwd.py > $R/$b-d256.txt 2>&1)
done
(cd _wt/gluon-bwd-concurrent && PYTHONPATH=src timeout 90 python3 benchmarks/attention_tune.py --bwd-streams \
   > $R/concurrent-streams.txt 2>&1)
tail -n 3 $R/*-tests.txt; cat $R/*-d256.txt $R/concurrent-streams.txt
