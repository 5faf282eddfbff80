export PYTHONUNBUFFERED=1 TRITONKIT_AUTOTUNE=0 PYTHONPATH=src
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n 6")
start=$(date +%s)
timeout 240 python3 -m pytest -q -p no:cacheprovider $workers tests/test_gluon_attention.py tests/test_attention_plans.py 2>&1 | tail -6 | tee $OUT/tests_gluon_fwd.txt
echo "tests took $(( $(date +%s) - start )) s"
start=$(date +%s)
timeout 240 python3 benchmarks/bench_gluon_attention.py --deadline 200 2>&1 | grep -v Warning | tee $OUT/bench_gluon_fwd.txt
echo "bench took $(( $(date +%s) - start )) s"
timeout 100 python3 .gpu/ce_shape_diag.py 2>&1 | tee $OUT/ce_shape_diag.txt
