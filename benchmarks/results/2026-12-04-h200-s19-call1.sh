#!/bin/bash
# Per tree, in its own process with its own
# peers: main, and main with benchmarks/results/2026-12-04-s18-norm-chunk-evict.patch applied (the
# norms' two-pass walk loading its first pass with evict_last and its second with evict_first, as
# torch.compile's kernel does): the norms' forward at 8192 x 4096, one-pass tiles and the two-pass
# walk over 1024 or 2048 columns, beside torch.compile, float32 and bfloat16. Then main's gated
# tiles at the bench's second shape (4096 x 11008, where the packed forward read 0.95-0.96x compile
# after the tile change, near the host's edge).
#   bash benchmarks/results/2026-12-04-h200-s19-call1.sh   (~4 min; needs patch or git)
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
rm -rf /tmp/evict && mkdir -p /tmp/evict && cp -r src /tmp/evict/ && \
  P=$PWD/benchmarks/results/2026-12-04-s18-norm-chunk-evict.patch; (cd /tmp/evict && (patch -p1 < $P || git apply $P)) || exit 1
for t in main evict; do
  src=src; [ $t = evict ] && src=/tmp/evict/src
  PYTHONPATH=$src timeout 150 python3 benchmarks/sweep_rope.py norms-fp32 norms > $R/sweep_norms_$t.txt 2>&1
  echo "rc $?" >> $R/sweep_norms_$t.txt; echo "== $t"
  grep -E "GB/s" $R/sweep_norms_$t.txt | sed -E 's/\(weight(, bias)?\), //' | cut -c1-130
done
PYTHONPATH=src timeout 120 python3 benchmarks/sweep_gated.py --shape 4096,11008 > $R/sweep_gated.txt 2>&1
echo "rc $?" >> $R/sweep_gated.txt; grep -v "^ *$" $R/sweep_gated.txt | cut -c1-110
