#!/bin/bash
# LayerNorm's forward at 16384 columns on the new rule (at most 32 elements a thread: 16 warps),
# beside the other tiles; the norms' backward tiles at 32768 x 1024 (bf16) and 8192 x 4096
# (fp32), the two forward+backward rows where torch.compile's kernels tie ours; the norms'
# GPU suites on the new rule.
#   bash benchmarks/results/2026-12-04-h200-s21-call2.sh   (~5 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
for part in norms norms-fp32; do
  PYTHONPATH=src timeout 100 python3 benchmarks/sweep_rope.py $part --shape 4096x16384 > $R/sweep_$part.txt 2>&1
  echo "rc $?" >> $R/sweep_$part.txt
  grep -E "GB/s|^rc|NOT" $R/sweep_$part.txt | grep -E "default|compile|copy |^rc|NOT" | sed -E 's/ \(rounds.*//' | cut -c1-150
done
PYTHONPATH=src timeout 100 python3 benchmarks/sweep_rope.py norms-bwd --shape 32768x1024 > $R/sweep_norms-bwd.txt 2>&1
echo "rc $?" >> $R/sweep_norms-bwd.txt
PYTHONPATH=src timeout 100 python3 benchmarks/sweep_rope.py norms-bwd-fp32 > $R/sweep_norms-bwd-fp32.txt 2>&1
echo "rc $?" >> $R/sweep_norms-bwd-fp32.txt
for f in $R/sweep_norms-bwd.txt $R/sweep_norms-bwd-fp32.txt; do grep -E "GB/s|^rc|NOT|^norms" $f | sed -E 's/ \(rounds.*//' | cut -c1-150; done
timeout 150 python3 -m pytest -q -n 4 tests/test_norms.py tests/test_norm_plans.py > $R/tests.txt 2>&1
echo "rc $?" >> $R/tests.txt; tail -n 3 $R/tests.txt
