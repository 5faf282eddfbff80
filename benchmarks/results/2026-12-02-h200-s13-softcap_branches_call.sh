#!/bin/bash
# (Prepared in the thirteenth set for the next GPU call; not run yet.) The two softcap-forward
# branches against main in one call. Export them first (untracked, not ignored, so the device
# tool copies them):
#   for b in main gluon-fwd-softcap-prescale gluon-fwd-softcap-fixed-max; do
#     mkdir -p _wt/$b && git archive $b | tar -x -C _wt/$b; done
# then: bash benchmarks/results/2026-12-02-h200-s13-softcap_branches_call.sh   (about 7 minutes)
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
for b in gluon-fwd-softcap-fixed-max gluon-fwd-softcap-prescale; do
  (cd _wt/$b && PYTHONPATH=src timeout 120 python3 -m pytest -m gpu -q -x -n 8 tests/test_gluon_attention.py \
     -k "softcap or matches_reference" > $R/$b-tests.txt 2>&1; echo "rc $?" >> $R/$b-tests.txt)
done
# the backward from the fixed reference's lse
(cd _wt/gluon-fwd-softcap-fixed-max && PYTHONPATH=src timeout 80 python3 -m pytest -m gpu -q -x -n 8 \
   tests/test_gluon_attention_bwd.py -k softcap > $R/fixed-max-bwd-tests.txt 2>&1; echo "rc $?" >> $R/fixed-max-bwd-tests.txt)
# main's D=256 backward with a causal left window (Gemma's layers), in float16 and in a packed
# layout: GPU cases added after the thirteenth set's calls
(cd _wt/main && PYTHONPATH=src timeout 100 python3 -m pytest -m gpu -q -x -n 8 tests/test_gluon_attention_bwd.py \
   -k "(window and 256) or float16_negative" > $R/main-d256-window-tests.txt 2>&1; echo "rc $?" >> $R/main-d256-window-tests.txt)
for b in main gluon-fwd-softcap-prescale gluon-fwd-softcap-fixed-max; do
  (cd _wt/$b && PYTHONPATH=src timeout 60 python3 benchmarks/results/2026-12-02-h200-s13-prescale_ab.py > $R/$b-ab.txt 2>&1)
done
(cd _wt/gluon-fwd-softcap-fixed-max && PYTHONPATH=src timeout 60 python3 benchmarks/results/2026-12-02-h200-s12-softcap_rate.py \
   > $R/fixed-max-rate.txt 2>&1)
tail -n 2 $R/*-tests.txt; tail -n 4 $R/*-ab.txt $R/fixed-max-rate.txt
