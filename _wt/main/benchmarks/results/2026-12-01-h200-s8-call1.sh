export PYTHONUNBUFFERED=1 TRITONKIT_AUTOTUNE=0
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=src:/tmp/site
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n 4")
start=$(date +%s)
timeout 200 python3 -m pytest -q -p no:cacheprovider $workers tests/test_cross_entropy.py 2>&1 | tail -8 | tee $OUT/tests_cross_entropy.txt
echo "tests took $(( $(date +%s) - start )) s"
start=$(date +%s)
timeout 200 python3 -m tritonkit bench cross_entropy linear_cross_entropy --no-progress --json $OUT/bench_ce.json 2>&1 | tee $OUT/bench_ce.txt
echo "bench took $(( $(date +%s) - start )) s"
export PYTHONPATH=.gpu/branch/src
start=$(date +%s)
timeout 150 python3 .gpu/branch/benchmarks/dynamic_schedule_diag.py 2>&1 | grep -v Warning | tee $OUT/dynamic_schedule_diag.txt
echo "diag took $(( $(date +%s) - start )) s"
