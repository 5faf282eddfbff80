#!/bin/bash
# (Prepared in the thirteenth set; not run yet.) Branch gluon-bwd-d256-pipelined against main:
# the D=256 dK/dV pass issuing each block's first product (S^T or dP^T) one block ahead. Export
# both trees first:
#   for b in main gluon-bwd-d256-pipelined; do mkdir -p _wt/$b && git archive $b | tar -x -C _wt/$b; done
# then: bash benchmarks/results/2026-12-02-h200-s13-pipelined_call.sh   (about 5 minutes)
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
(cd _wt/gluon-bwd-d256-pipelined && PYTHONPATH=src timeout 150 python3 -m pytest -m gpu -q -x -n 8 \
   tests/test_gluon_attention_bwd.py -k "256 or split" > $R/pipelined-tests.txt 2>&1; echo "rc $?" >> $R/pipelined-tests.txt)
for b in main gluon-bwd-d256-pipelined; do
  (cd _wt/$b && PYTHONPATH=src timeout 90 python3 benchmarks/results/2026-12-02-h200-s12-d256_bwd.py > $R/$b-d256.txt 2>&1)
done
tail -n 2 $R/pipelined-tests.txt; cat $R/*-d256.txt
