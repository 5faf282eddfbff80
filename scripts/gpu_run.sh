#!/usr/bin/env bash
# The GPU job, for the lent H200 (or any CUDA machine with torch and triton installed):
# the test suite compiled at GPU sizes, then the benchmark, ending with a short table.
#   bash scripts/gpu_run.sh [bench ops...]        e.g. bash scripts/gpu_run.sh softmax add
# Env: TESTS=0 skips the tests, SLOW=1 adds the slow tests, BENCH=0 skips the benchmark, PYTEST_ARGS replaces the default pytest args (tests),
# TRITONKIT_TEST_SHARD=k/n runs the k-th of n slices of the suite (the whole suite outlasts one call: docs/bench.md).
# Writes logs, bench.json and bench.png to $OUT (or ./out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# Attention launches its fixed per-head-dim configs (the winners of benchmarks/attention_tune.py
# on the H200) unless TRITONKIT_AUTOTUNE=1: autotuning every benchmark shape from a cold
# cache does not fit in one 10-minute call on the lent machine.
export TRITONKIT_AUTOTUNE=${TRITONKIT_AUTOTUNE:-0}
python3 - <<'PY'
import torch, triton
p = torch.cuda.get_device_properties(0)
print(f"GPU: {p.name}, {p.multi_processor_count} SMs; torch {torch.__version__}, triton {triton.__version__}")
PY
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu --format=csv,noheader || true

test_line="tests skipped"
if [ "${TESTS:-1}" != 0 ]; then
    # Four workers share the GPU: the suite is compile-bound, and compiles run on the CPUs.
    workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n 4")
    # The slow config sweep (every autotune config checked) runs with SLOW=1.
    select=(-m "not slow"); [ "${SLOW:-0}" = 1 ] && select=()
    python3 -m pytest -q -p no:cacheprovider $workers "${select[@]}" ${PYTEST_ARGS:-tests} 2>&1 | tee "$OUT/tests.log" | tail -25
    test_line=$(grep -E "passed|failed|error" "$OUT/tests.log" | tail -1)
fi
if [ "${BENCH:-1}" != 0 ]; then
    python3 -m tritonkit bench "${@:-all}" --no-progress --json "$OUT/bench.json" --plot "$OUT/bench.png" \
        2>&1 | tee "$OUT/bench.log" | sed '/^Summary:/,$d'
    echo
    echo "tests: $test_line"
    sed -n '/^Summary:/,$p' "$OUT/bench.log"
else
    echo "tests: $test_line"
fi
