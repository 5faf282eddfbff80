#!/bin/bash
# After call 4: the meta-tensor and dynamic-shape tests on the test device, the autocast suite,
# and the fuzz cases call 3's whole-suite run did not reach.
#   bash benchmarks/results/2026-12-05-h200-s23-call5.sh
export TRITONKIT_AUTOTUNE=0 PYTHONUNBUFFERED=1 PYTHONPATH=src
R=${OUT:-/tmp/out}; mkdir -p $R
fuzz=()
for op in rope swiglu geglu gated_linear cross_entropy linear_cross_entropy; do
  fuzz+=("tests/test_fuzz_alignment.py::test_fuzz[$op-forward]" "tests/test_fuzz_alignment.py::test_fuzz[$op-backward]")
done
timeout 200 python3 -m pytest -p no:cacheprovider -n 8 -rfE --tb=short tests/test_meta_tensors.py \
  tests/test_compile_dynamic.py tests/test_autocast.py "${fuzz[@]}" > $R/tests.txt 2>&1
echo "rc $?" >> $R/tests.txt
grep -E "^(FAILED|ERROR) " $R/tests.txt | cut -c1-330
tail -n 2 $R/tests.txt
