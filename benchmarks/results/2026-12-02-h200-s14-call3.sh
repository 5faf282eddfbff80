#!/bin/bash
# The softcap forward from the fixed reference (q unscaled): its GPU suites, forward and
# backward, and its rate beside the plain forward; the norms' kernel times (bf16 against fp32).
#   bash benchmarks/results/2026-12-02-h200-s14-call3.sh
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
PYTHONPATH=src timeout 100 python3 benchmarks/results/2026-12-02-h200-s14-norms_kernels.py > $R/norms_kernels.txt 2>&1
PYTHONPATH=src timeout 170 python3 -m pytest -m gpu -q -n 8 tests/test_gluon_attention.py \
   -k "softcap or matches_reference" > $R/fwd-tests.txt 2>&1; echo "rc $?" >> $R/fwd-tests.txt
PYTHONPATH=src timeout 100 python3 -m pytest -m gpu -q -n 8 tests/test_gluon_attention_bwd.py \
   -k "softcap" > $R/bwd-tests.txt 2>&1; echo "rc $?" >> $R/bwd-tests.txt
PYTHONPATH=src timeout 60 python3 benchmarks/results/2026-12-02-h200-s13-prescale_ab.py > $R/ab.txt 2>&1
PYTHONPATH=src timeout 60 python3 benchmarks/results/2026-12-02-h200-s12-softcap_rate.py > $R/rate.txt 2>&1
tail -n 3 $R/*-tests.txt; cat $R/ab.txt $R/rate.txt; cat $R/norms_kernels.txt
