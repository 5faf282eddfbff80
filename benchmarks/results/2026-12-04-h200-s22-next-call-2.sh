#!/bin/bash
# Prepared for the next GPU session, not run (~6 min): the Gluon forward's idle warpgroups
# (`benchmarks/results/2026-12-04-s22-idle-consumer.patch`: a warpgroup whose rows of a tile all
# lie past the sequence's end only takes part in the tile's handshakes): its GPU suites, then the
# A/B against main, one tree a process, twice in alternating order.
#   bash benchmarks/results/2026-12-04-h200-s22-next-call-2.sh
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
ROOT=$(pwd)
rm -rf /tmp/idle && mkdir -p /tmp/idle && cp -r src tests pyproject.toml /tmp/idle/ && (cd /tmp/idle && patch -s -p1 < $ROOT/benchmarks/results/2026-12-04-s22-idle-consumer.patch)
(cd /tmp/idle && PYTHONPATH=src timeout 240 python3 -m pytest -q -n 4 -p no:cacheprovider tests/test_gluon_attention.py \
  tests/test_gluon_attention_varlen.py > $R/tests_idle.txt 2>&1; echo "rc $?" >> $R/tests_idle.txt)
tail -n 3 $R/tests_idle.txt
if grep -q "^rc 0" $R/tests_idle.txt; then
  for tree in . /tmp/idle . /tmp/idle; do
    echo "== $tree" >> $R/idle_ab.txt
    PYTHONPATH=$tree/src timeout 70 python3 $ROOT/benchmarks/results/2026-12-04-h200-s22-idle_ab.py >> $R/idle_ab.txt 2>&1
    echo "rc $?" >> $R/idle_ab.txt
  done
  cat $R/idle_ab.txt
fi
