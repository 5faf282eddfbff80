#!/bin/bash
# Nsight Compute on the float32 norm forwards, ours against torch.compile's (0.95x in GPU time):
# DRAM bytes and throughput, L2 hits, occupancy, duration; then the gated GPU suites on the
# packed rule's 1024-wide blocks, and the bench's own tests.
#   bash benchmarks/results/2026-12-04-h200-s20-call8.sh   (~5 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
T=benchmarks/results/2026-12-04-h200-s20-ncu_norms.py
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__occupancy_limit_registers,sm__maximum_warps_per_active_cycle_pct,lts__t_sectors_srcunit_tex_op_write.sum,smsp__cycles_active.avg
for norm in rms layer; do
  for who in ours compile; do
    K=$([ $who = ours ] && echo "regex:_norm_fwd" || echo "regex:triton_red")
    echo "== $norm $who" >> $R/ncu.txt
    PYTHONPATH=src timeout 120 ncu --clock-control none --metrics $M -k "$K" --launch-skip 3 --launch-count 1 \
      python3 $T $who $norm >> $R/ncu.txt 2>&1
  done
done
grep -E "^==|gpu__time|dram__|lts__|sm__warps|launch__|sm__max|smsp__cyc|ERR|rror" $R/ncu.txt | cut -c1-140
PYTHONPATH=src timeout 200 python3 -m pytest -q -n 4 tests/test_gated.py tests/test_gated_linear.py tests/test_bench.py > $R/tests.txt 2>&1
echo "rc $?" >> $R/tests.txt; tail -n 2 $R/tests.txt; grep -E "^FAILED" $R/tests.txt | head -5
