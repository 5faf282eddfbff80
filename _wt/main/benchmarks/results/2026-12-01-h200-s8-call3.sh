export PYTHONUNBUFFERED=1 TRITONKIT_AUTOTUNE=0
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=src:/tmp/site
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
t0=$(date +%s)
timeout 130 python3 -m tritonkit bench train --config A --provider liger --provider tritonkit --json $OUT/train_A.json 2>&1 | grep -v -i "backend impl\|deprecated" | tee $OUT/train_A.txt
echo "[train A $(( $(date +%s) - t0 )) s]"
timeout 320 python3 -m tritonkit bench attention --no-progress --json $OUT/bench_attention.json 2>&1 | tee $OUT/bench_attention.txt | sed -n '/^Summary:/,$p'
echo "[attention $(( $(date +%s) - t0 )) s]"
timeout 120 python3 -m tritonkit bench train --config B --provider liger --provider tritonkit --json $OUT/train_B.json 2>&1 | grep -v -i "backend impl\|deprecated" | tee $OUT/train_B.txt
echo "[train B $(( $(date +%s) - t0 )) s]"
