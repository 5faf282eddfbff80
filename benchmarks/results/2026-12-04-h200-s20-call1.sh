#!/bin/bash
# The bench's short cases now also timed from a CUDA graph, every provider (the GPU's time
# alone): the norms with every peer (Liger 0.8.5 carried in .whl), JSON kept; then the norms'
# backward tile sweep in bf16 again (the nineteenth set's call 5 output was lost).
#   bash benchmarks/results/2026-12-04-h200-s20-call1.sh   (carry .whl; ~5 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
PYTHONPATH=src:/tmp/site timeout 330 python3 -m tritonkit bench rms_norm layer_norm --no-progress \
  --json $R/bench_norms.json > $R/bench_norms.txt 2>&1
echo "rc $?" >> $R/bench_norms.txt
grep -E "^(fwd|bwd|fwd\+bwd|case)|CUDA graph|^rc|^rms_norm|^layer_norm|captured" $R/bench_norms.txt | cut -c1-230
PYTHONPATH=src timeout 150 python3 benchmarks/sweep_rope.py norms-bwd > $R/sweep_norms_bwd.txt 2>&1
echo "rc $?" >> $R/sweep_norms_bwd.txt
grep -E "GB/s|^rc|NOT" $R/sweep_norms_bwd.txt | sed -E 's/ \(rounds.*//' | cut -c1-140 | head -30
