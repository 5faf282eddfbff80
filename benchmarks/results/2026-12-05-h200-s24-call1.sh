#!/bin/bash
# The Gluon forward with O in a buffer of its own (branch `gluon-o-buffer`, this tree): the A/B
# against main (the patch reversed in a copy), one tree a process, twice in alternating order;
# then the Gluon forward's GPU suites on this tree.
#   bash benchmarks/results/2026-12-05-h200-s24-call1.sh
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
ROOT=$(pwd)
rm -rf /tmp/main_tree && mkdir -p /tmp/main_tree && cp -r src /tmp/main_tree/ && \
  (cd /tmp/main_tree && patch -s -R -p1 < $ROOT/benchmarks/results/2026-12-05-s24-o-buffer.patch) || echo "patch failed"
for tree in /tmp/main_tree $ROOT /tmp/main_tree $ROOT; do
  echo "== $tree" >> $R/o_buffer_ab.txt
  PYTHONPATH=$tree/src timeout 105 python3 $ROOT/benchmarks/results/2026-12-05-h200-s24-o_buffer_ab.py >> $R/o_buffer_ab.txt 2>&1
  echo "rc $?" >> $R/o_buffer_ab.txt
done
cat $R/o_buffer_ab.txt
PYTHONPATH=src timeout 150 python3 -m pytest -q -n 6 -p no:cacheprovider tests/test_gluon_attention.py \
  tests/test_gluon_attention_varlen.py > $R/tests_gluon_fwd.txt 2>&1; echo "rc $?" >> $R/tests_gluon_fwd.txt
tail -n 4 $R/tests_gluon_fwd.txt
