#!/bin/bash
# The exponentials shared with the FMA units: the A/B first, then the Gluon forward's GPU suite
# with the new default, the softcap's rate through the dispatch, the window's bench case at
# N=16384 and config B's training step.
export TRITONKIT_AUTOTUNE=0
R=$OUT
PYTHONPATH=src timeout 110 python3 benchmarks/results/2026-12-02-h200-s12-exp2_fma_ab.py > $R/exp2_fma_ab.txt 2>&1
PYTHONPATH=src timeout 100 python3 -m pytest -m gpu -q -x -n 4 tests/test_gluon_attention.py > $R/gluon_fwd_tests.txt 2>&1; echo "rc $?" >> $R/gluon_fwd_tests.txt
PYTHONPATH=src timeout 50 python3 benchmarks/results/2026-12-02-h200-s12-softcap_rate.py > $R/softcap_rate.txt 2>&1
PYTHONPATH=src timeout 100 python3 -m tritonkit bench attention --filter "N=16384 D=128 causal window" --no-progress > $R/bench_window.txt 2>&1
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
PYTHONPATH=src:/tmp/site timeout 170 python3 -m tritonkit bench train --config B --provider liger --provider tritonkit > $R/train_B.txt 2>&1
cat $R/exp2_fma_ab.txt; tail -n 3 $R/gluon_fwd_tests.txt; cat $R/softcap_rate.txt; tail -n 6 $R/bench_window.txt; tail -n 12 $R/train_B.txt
