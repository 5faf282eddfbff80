#!/usr/bin/env bash
# The distributed GPU job, for a host with two GPUs (nvidia-h200-x2): the distributed tests
# on NCCL, ring attention against one GPU, and FSDP2 training of config A on one GPU and on
# two, ending with a short table. About 6-8 minutes on two H200s.
#   bash scripts/gpu_distributed.sh
# Env: TESTS=0 skips the tests; RING=0 / FSDP=0 skip those runs; STEPS (FSDP steps, 30);
# COMPILE=1 adds --compile to the FSDP runs; BIG=1 adds the 8B config on two GPUs with
# activation checkpointing (a model one GPU cannot train with AdamW). Logs and JSON go to
# $OUT (or ./out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# NVLink multicast stays off (NCCL, PyTorch symmetric memory, NVSHMEM): on shared hosts a
# program that uses it can take the GPUs out of service.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Fixed attention tiles (the tuned winners): autotuning every shape does not fit the job.
export TRITONKIT_AUTOTUNE=${TRITONKIT_AUTOTUNE:-0}
TORCHRUN="python3 -m torch.distributed.run --standalone"
STEPS=${STEPS:-30}
FSDP_FLAGS=(--config A --steps "$STEPS" --quiet)
[ "${COMPILE:-0}" = 1 ] && FSDP_FLAGS+=(--compile)

gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
python3 -c "import torch, triton, transformers; p = torch.cuda.get_device_properties(0); \
print(f'{torch.cuda.device_count()} x {p.name}; torch {torch.__version__}, triton {triton.__version__}, transformers {transformers.__version__}')"
if [ "$gpus" -lt 2 ]; then echo "needs two GPUs, found $gpus"; exit 1; fi
stamp() { echo "[$(date +%T)] $*"; }

if [ "${TESTS:-1}" != 0 ]; then
    stamp "tests/test_distributed.py (NCCL, one GPU per rank)"
    python3 -m pytest -q -p no:cacheprovider tests/test_distributed.py 2>&1 | tee "$OUT/dist_tests.log" | tail -15
fi
if [ "${RING:-1}" != 0 ]; then
    stamp "ring attention, N=131072 D=128 32/8 heads causal bf16: one GPU vs two"
    $TORCHRUN --nproc-per-node 2 benchmarks/ring_attention.py --json "$OUT/ring.json" 2>&1 | tee "$OUT/ring.log"
fi
if [ "${FSDP:-1}" != 0 ]; then
    # One GPU with two micro-batches a step sees the same data as two GPUs with one each.
    stamp "FSDP2 config A, one GPU (--grad-accum 2)"
    $TORCHRUN --nproc-per-node 1 examples/train_fsdp.py "${FSDP_FLAGS[@]}" --grad-accum 2 \
        --json "$OUT/fsdp_1gpu.json" 2>&1 | tee "$OUT/fsdp_1gpu.log" | grep -E "^train_fsdp|patch|Error|error" | tail -5
    stamp "FSDP2 config A, two GPUs"
    $TORCHRUN --nproc-per-node 2 examples/train_fsdp.py "${FSDP_FLAGS[@]}" \
        --json "$OUT/fsdp_2gpu.json" 2>&1 | tee "$OUT/fsdp_2gpu.log" | grep -E "^train_fsdp|patch|Error|error" | tail -5
fi
if [ "${BIG:-0}" = 1 ]; then
    stamp "FSDP2 config 8b, two GPUs, activation checkpointing"
    $TORCHRUN --nproc-per-node 2 examples/train_fsdp.py --config 8b --steps 8 --warmup 3 --checkpointing --quiet \
        --json "$OUT/fsdp_8b.json" 2>&1 | tee "$OUT/fsdp_8b.log" | grep -E "^train_fsdp|Error|error" | tail -5
fi
stamp "done"

python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(name):
    path = os.path.join(out, name)
    return json.load(open(path)) if os.path.exists(path) else None
print("\n== summary ==")
tests = os.path.join(out, "dist_tests.log")
if os.path.exists(tests):
    lines = [l for l in open(tests) if " passed" in l or " failed" in l or " error" in l]
    print(f"tests: {lines[-1].strip() if lines else 'no result line'}")
ring = load("ring.json")
if ring:
    print(f"ring attention N={ring['N']} (bar: correct, fwd+bwd speedup >= 1.7x)")
    print(f"  correct: {ring['correct']}  (out vs fp64 rows: ring {ring['ring_err_out']:.2e} / single {ring['single_err_out']:.2e})")
    for what in ("fwd", "fwd_bwd"):
        print(f"  {what:8s} single {ring[f'single_{what}_ms']:8.1f} ms   ring x{ring['world']} {ring[f'ring_{what}_ms']:8.1f} ms"
              f"   speedup {ring[f'speedup_{what}']:.2f}x")
one, two = load("fsdp_1gpu.json"), load("fsdp_2gpu.json")
if one and two:
    ratio = two["tokens_per_s_per_gpu"] / one["tokens_per_s_per_gpu"]
    gaps = [abs(a - b) for a, b in zip(one["losses"], two["losses"])]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    print(f"FSDP2 config {two['config']}, patch={two['patch']}, compile={two['compile']} (bar: tokens/s per GPU >= 0.9x one GPU)")
    for r in (one, two):
        print(f"  {r['world']} GPU(s): {r['tokens_per_s_per_gpu']:10,.0f} tokens/s per GPU  "
              f"{r['step_s'] * 1e3:7.1f} ms/step  peak {r['peak_memory_gib'] or 0:5.1f} GiB  "
              f"loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}")
    print(f"  ratio {ratio:.3f}x;  loss curves: largest gap {gaps[worst]:.2e} at step {worst} "
          f"({gaps[worst] / one['losses'][worst]:.1e} relative)")
big = load("fsdp_8b.json")
if big:
    print(f"FSDP2 8b ({big['params'] / 1e9:.2f}B params) on {big['world']} GPUs with checkpointing: "
          f"{big['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU, peak {big['peak_memory_gib'] or 0:.1f} GiB, "
          f"loss {big['losses'][0]:.4f} -> {big['losses'][-1]:.4f}")
PY
