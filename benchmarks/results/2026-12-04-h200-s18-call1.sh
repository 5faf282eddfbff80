#!/bin/bash
# The gated activations' tile sweep, then issue 16's bar shapes against cuDNN and FA2.
#   bash benchmarks/results/2026-12-04-h200-s18-call1.sh   (~8 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1 PYTHONPATH=src
R=${OUT:-/tmp/out}; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
timeout 170 python3 benchmarks/sweep_gated.py > $R/sweep_gated.txt 2>&1; echo "rc $?" >> $R/sweep_gated.txt
grep -v "^ *$" $R/sweep_gated.txt | cut -c1-110
timeout 380 python3 benchmarks/attention_bars.py --rounds 2 > $R/attention_bars.txt 2>&1; echo "rc $?" >> $R/attention_bars.txt
cut -c1-60 $R/attention_bars.txt
