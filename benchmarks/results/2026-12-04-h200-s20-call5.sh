#!/bin/bash
# Which providers of the short attention cases a CUDA graph can capture (call 4's bench stopped
# on a random draw after a failed capture); those cases through the bench again; swiglu and geglu
# through the bench with the packed rule's 1024-wide blocks at 11008 columns.
#   bash benchmarks/results/2026-12-04-h200-s20-call5.sh   (carry .whl; ~6 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
PYTHONPATH=src timeout 150 python3 benchmarks/results/2026-12-04-h200-s20-capture_probe.py > $R/capture_probe.txt 2>&1
echo "rc $?" >> $R/capture_probe.txt; grep -v "^Backend impl" $R/capture_probe.txt | cut -c1-300 | head -60
PYTHONPATH=src timeout 150 python3 -m tritonkit bench attention --filter "N=1024 D=64" --no-progress \
  --json $R/bench_attention_short.json > $R/bench_attention_short.txt 2>&1
echo "rc $?" >> $R/bench_attention_short.txt
grep -vE "^Backend impl" $R/bench_attention_short.txt | cut -c1-300 | tail -32
PYTHONPATH=src:/tmp/site timeout 200 python3 -m tritonkit bench swiglu geglu --no-progress \
  --json $R/bench_gated.json > $R/bench_gated.txt 2>&1
echo "rc $?" >> $R/bench_gated.txt
sed -n '/^Summary/,$p' $R/bench_gated.txt | cut -c1-150
