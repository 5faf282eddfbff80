#!/bin/bash
# Where the Gluon forward's warps wait, with and without a softcap (issue 15's softcap bar):
# one Nsight Compute profile of each (B4 H32/8 N=4096 D=128 causal bf16), the details page and
# the stall reasons by SASS instruction.
export TRITONKIT_AUTOTUNE=0
R=${OUT:-/tmp/out}; mkdir -p $R
for cap in 0 50; do
  PYTHONPATH=src timeout 110 ncu --clock-control none --kernel-name regex:attn_fwd --launch-skip 2 --launch-count 1 \
    --set full --import-source yes -o $R/fwd_cap$cap python3 benchmarks/ncu_attention_target.py --pass fwd \
    --shape 4,32,8,4096,128 --softcap $cap > $R/ncu_cap$cap.log 2>&1
  ncu --import $R/fwd_cap$cap.ncu-rep --page details > $R/details_cap$cap.txt 2>&1
  ncu --import $R/fwd_cap$cap.ncu-rep --page source --csv --print-source sass > $R/source_cap$cap.csv 2>&1
  python3 benchmarks/ncu_stalls.py $R/source_cap$cap.csv --top 30 > $R/stalls_cap$cap.txt 2>&1
  rm -f $R/source_cap$cap.csv $R/fwd_cap$cap.ncu-rep
done
tail -n 5 $R/ncu_cap*.log; grep -E "Duration|Issue Slots Busy|Executed Ipc A|Warp Cycles Per Issued|No Eligible|SM Busy" $R/details_cap*.txt; head -n 25 $R/stalls_cap*.txt
