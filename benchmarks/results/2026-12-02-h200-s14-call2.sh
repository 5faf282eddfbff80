#!/bin/bash
# The softcap forward from the fixed reference with and without Q scaled once a tile (its
# rounding of q scale / c costs accuracy), main beside; the forward's GPU suite; issue 13's table
# on main (the norms' host-bound figure predates the launch-path work). Export first:
#   mkdir -p _wt/main _wt/fixedonly && git archive main | tar -x -C _wt/main
#   git archive HEAD | tar -x -C _wt/fixedonly   (then prescaled() returning False in that tree)
# Run with carry [".whl"] from the branch: bash benchmarks/results/2026-12-02-h200-s14-call2.sh
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
PYTHONPATH=src timeout 170 python3 -m pytest -m gpu -q -n 8 tests/test_gluon_attention.py \
   -k "softcap or matches_reference" > $R/fwd-tests.txt 2>&1; echo "rc $?" >> $R/fwd-tests.txt
for t in main fixedonly; do
  (cd _wt/$t && PYTHONPATH=src timeout 60 python3 benchmarks/results/2026-12-02-h200-s13-prescale_ab.py > $R/ab-$t.txt 2>&1)
done
PYTHONPATH=src timeout 60 python3 benchmarks/results/2026-12-02-h200-s13-prescale_ab.py > $R/ab-both.txt 2>&1
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
PYTHONPATH=src:/tmp/site timeout 270 python3 -m tritonkit bench blocks --no-progress --json $R/blocks.json \
   > $R/bench_blocks.txt 2>&1
PYTHONPATH=src timeout 40 python3 benchmarks/host_profile.py --no-profile norms > $R/host_norms.txt 2>&1
tail -n 3 $R/fwd-tests.txt; tail -n 4 $R/ab-*.txt; tail -n 40 $R/bench_blocks.txt; tail -n 14 $R/host_norms.txt
