#!/bin/bash
# Prepared for the next session's first call, not run: the norms' forward walked in two passes at
# 4096 columns (torch.compile's structure) beside the one-pass tiles and torch.compile, float32 and
# bfloat16; the gated tiles at the bench's second shape (4096 x 11008, where the packed forward read
# 0.95-0.96x compile after the tile change, near the host's edge).
#   bash benchmarks/results/2026-12-04-h200-s18-next-call.sh   (~3 min)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1 PYTHONPATH=src
R=${OUT:-/tmp/out}; mkdir -p $R
timeout 150 python3 benchmarks/sweep_rope.py norms-fp32 norms > $R/sweep_norms.txt 2>&1; echo "rc $?" >> $R/sweep_norms.txt
grep -E "GB/s" $R/sweep_norms.txt | sed -E 's/\(weight(, bias)?\), //' | cut -c1-130
timeout 120 python3 benchmarks/sweep_gated.py --shape 4096,11008 > $R/sweep_gated.txt 2>&1; echo "rc $?" >> $R/sweep_gated.txt
grep -v "^ *$" $R/sweep_gated.txt | cut -c1-110
