#!/bin/bash
# The first capture of a backward in a fresh process (call 6: only tritonkit's first capture
# failed, in "global" mode): other orders, each in its own process; then the tests that capture.
#   bash benchmarks/results/2026-12-04-h200-s20-call7.sh   (~3 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
P=benchmarks/results/2026-12-04-h200-s20-first_capture.py
for order in "naive eager|tritonkit" "SDPA cuDNN|tritonkit" "tritonkit|tritonkit" "step|tritonkit" "step|step"; do
  IFS='|' read -r a b <<< "$order"
  PYTHONPATH=src timeout 60 python3 $P "$a" "$b" 2>&1 | grep -v "^Backend impl" | tail -2
done | tee $R/first_capture.txt
PYTHONPATH=src timeout 150 python3 -m pytest -q -x -k "graph" tests/test_autograd_roads.py tests/test_attention_backward.py > $R/tests_graphs.txt 2>&1
echo "rc $?" >> $R/tests_graphs.txt; tail -n 3 $R/tests_graphs.txt
