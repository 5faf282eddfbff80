#!/bin/bash
# main with the D=256 Gluon dK/dV merged: its backward GPU suite, smaller D=256 calls to place the
# dispatch's threshold, and the lazy O-rescale patch (exported to _wt/lazy) against main on the
# softcap's rates, with the lazy tree's forward suite at D=128 for correctness.
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
PYTHONPATH=src timeout 200 python3 -m pytest -m gpu -q -x -n 6 tests/test_gluon_attention_bwd.py tests/test_inspector_gluon.py \
  > $R/bwd_tests.txt 2>&1; echo "rc $?" >> $R/bwd_tests.txt
PYTHONPATH=src timeout 80 python3 benchmarks/results/2026-12-02-h200-s13-d256_small.py > $R/d256_small.txt 2>&1
for t in main:. lazy:_wt/lazy; do
  (cd ${t#*:} && PYTHONPATH=src timeout 60 python3 benchmarks/results/2026-12-02-h200-s12-softcap_rate.py) > $R/rate-${t%%:*}.txt 2>&1
done
(cd _wt/lazy && PYTHONPATH=src timeout 110 python3 -m pytest -m gpu -q -x -n 6 tests/test_gluon_attention.py \
   -k "matches_reference or softcap or deterministic" > $R/lazy_fwd_tests.txt 2>&1; echo "rc $?" >> $R/lazy_fwd_tests.txt)
tail -n 3 $R/bwd_tests.txt $R/lazy_fwd_tests.txt; cat $R/d256_small.txt; tail -n 4 $R/rate-*.txt
