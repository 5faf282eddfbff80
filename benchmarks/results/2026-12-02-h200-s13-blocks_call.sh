#!/bin/bash
# (Prepared in the thirteenth set; not run yet.) Issue 13's table again, on main as it stands:
# the block ops against torch, torch.compile and Liger in one run (Liger carried as .whl/), and the
# norms' host time a call (their forward+backward at 8192x4096 read host-bound when last measured,
# before the launch-path work of later sets). Run with carry [".whl"]:
#   bash benchmarks/results/2026-12-02-h200-s13-blocks_call.sh   (about 7 minutes)
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
PYTHONPATH=src:/tmp/site timeout 330 python3 -m tritonkit bench blocks --no-progress --json $R/blocks.json \
   > $R/bench_blocks.txt 2>&1
PYTHONPATH=src timeout 60 python3 benchmarks/host_profile.py --no-profile norms > $R/host_norms.txt 2>&1
tail -n 40 $R/bench_blocks.txt; cat $R/host_norms.txt | tail -n 20
