#!/bin/bash
# The gated tiles at 4096 x 11008 with one-row 1024-column programs added (the packed forward
# there is 0.95-0.97x torch.compile); the short attention cases (B=8 H=16 N=1024 D=64) through
# the bench, now also from a CUDA graph for every provider: host or kernels?
#   bash benchmarks/results/2026-12-04-h200-s20-call4.sh   (~5 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
PYTHONPATH=src timeout 200 python3 benchmarks/sweep_gated.py --shape 4096,11008 > $R/sweep_gated.txt 2>&1
echo "rc $?" >> $R/sweep_gated.txt
grep -E "GB/s|^rc|NOT" $R/sweep_gated.txt | sed -E 's/ \(rounds.*//' | cut -c1-120
PYTHONPATH=src timeout 240 python3 -m tritonkit bench attention --filter "N=1024 D=64" --no-progress \
  --json $R/bench_attention_short.json > $R/bench_attention_short.txt 2>&1
echo "rc $?" >> $R/bench_attention_short.txt
grep -vE "^Backend impl" $R/bench_attention_short.txt | cut -c1-300 | tail -40
