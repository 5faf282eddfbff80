#!/bin/bash
# The branch gluon-bwd-d256-exchange (this tree) against main (exported to _wt/main): the
# backward's GPU suite on the branch, then the D=256 backward bench in each tree.
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
PYTHONPATH=src timeout 160 python3 -m pytest -m gpu -q -x -n 8 tests/test_gluon_attention_bwd.py > $R/bwd_tests.txt 2>&1
echo "rc $?" >> $R/bwd_tests.txt
tail -n 3 $R/bwd_tests.txt
PYTHONPATH=src timeout 90 python3 benchmarks/results/2026-12-02-h200-s12-d256_bwd.py > $R/d256-exchange.txt 2>&1
(cd _wt/main && PYTHONPATH=src timeout 90 python3 benchmarks/results/2026-12-02-h200-s12-d256_bwd.py) > $R/d256-main.txt 2>&1
PYTHONPATH=src timeout 80 python3 benchmarks/results/2026-12-02-h200-s13-d256_small.py > $R/d256_small-exchange.txt 2>&1
tail -n 5 $R/d256-*.txt $R/d256_small-exchange.txt
