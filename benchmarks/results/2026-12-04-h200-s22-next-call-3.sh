#!/bin/bash
# Prepared for the next GPU session, not run (~6 min; carry .whl): the training step of a float32
# model under bf16 autocast (Trainer's bf16=True), where tritonkit's attention, loss, shared
# projections and fused down projection now take autocast (they cast as SDPA and F.linear do;
# before, the patched loss ran its products in float32 there), beside HF eager, Liger and
# torch.compile of HF; then the bf16-weights step of the same providers for the same call's
# yardstick; then the autocast suites on the GPU.
#   bash benchmarks/results/2026-12-04-h200-s22-next-call-3.sh
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}; mkdir -p $R
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
for flags in "--autocast" ""; do
  f=$R/train_A${flags//-/_}.txt
  PYTHONPATH=src:/tmp/site timeout 200 python3 -m tritonkit bench train --config A --provider "hf eager" \
    --provider "hf compile" --provider liger --provider tritonkit $flags --json $f.json > $f 2>&1
  echo "rc $?" >> $f; grep -E "^config|^provider|^hf|^liger|^tritonkit|^rc" $f
done
PYTHONPATH=src timeout 120 python3 -m pytest -q -n 4 -p no:cacheprovider tests/test_autocast.py \
  tests/test_compile_dynamic.py tests/test_transformers.py -k "autocast or dynamic" > $R/tests.txt 2>&1
echo "rc $?" >> $R/tests.txt; tail -n 3 $R/tests.txt
