#!/bin/bash
# The norms' forward tiles at the bench's other bf16 widths (8192 x 8192, 32768 x 1024), where
# torch.compile's kernel led ours in call 1; then rope, swiglu and geglu through the bench with
# every peer (Liger 0.8.5 in .whl), their short cases now also from a CUDA graph.
#   bash benchmarks/results/2026-12-04-h200-s20-call2.sh   (carry .whl; ~8 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
PYTHONPATH=src timeout 240 python3 benchmarks/sweep_rope.py norms --shape 8192x8192 --shape 32768x1024 \
  > $R/sweep_norms.txt 2>&1
echo "rc $?" >> $R/sweep_norms.txt
grep -E "GB/s|^rc|NOT|^norms" $R/sweep_norms.txt | sed -E 's/ \(rounds.*//' | cut -c1-150
PYTHONPATH=src:/tmp/site timeout 290 python3 -m tritonkit bench rope swiglu geglu --no-progress \
  --json $R/bench_rope_gated.json > $R/bench_rope_gated.txt 2>&1
echo "rc $?" >> $R/bench_rope_gated.txt
sed -n '/^Summary/,$p' $R/bench_rope_gated.txt | cut -c1-150; grep -E "captured|^rc" $R/bench_rope_gated.txt | cut -c1-200
