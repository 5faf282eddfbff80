#!/bin/bash
# The softcap forward's two steps (Q scaled once a tile; p from a fixed reference) against main,
# all in one call. Export the trees first (untracked, not ignored, so the device tool copies them):
#   mkdir -p _wt/main _wt/prescale && git archive main | tar -x -C _wt/main
#   git archive <commit of the prescale step> | tar -x -C _wt/prescale
# then, from the branch with both steps: bash benchmarks/results/2026-12-02-h200-s14-call1.sh
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
PYTHONPATH=src timeout 170 python3 -m pytest -m gpu -q -x -n 8 tests/test_gluon_attention.py \
   -k "softcap or matches_reference" > $R/fwd-tests.txt 2>&1; echo "rc $?" >> $R/fwd-tests.txt
PYTHONPATH=src timeout 100 python3 -m pytest -m gpu -q -x -n 8 tests/test_gluon_attention_bwd.py \
   -k "softcap or (window and 256) or float16_negative" > $R/bwd-tests.txt 2>&1; echo "rc $?" >> $R/bwd-tests.txt
for t in _wt/main _wt/prescale .; do
  n=$(basename $(cd $t && pwd)); (cd $t && PYTHONPATH=src timeout 60 python3 \
     benchmarks/results/2026-12-02-h200-s13-prescale_ab.py > $R/ab-$n.txt 2>&1)
done
PYTHONPATH=src timeout 60 python3 benchmarks/results/2026-12-02-h200-s12-softcap_rate.py > $R/rate.txt 2>&1
PYTHONPATH=src timeout 150 python3 -m tritonkit bench attention --filter softcap --no-progress > $R/bench_softcap.txt 2>&1
tail -n 3 $R/*-tests.txt; tail -n 4 $R/ab-*.txt; cat $R/rate.txt; tail -n 12 $R/bench_softcap.txt
