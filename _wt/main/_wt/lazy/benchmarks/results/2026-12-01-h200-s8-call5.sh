export PYTHONUNBUFFERED=1 TRITONKIT_AUTOTUNE=0 PYTHONPATH=src
workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n 6")
timeout 200 python3 -m pytest -q -p no:cacheprovider $workers tests/test_gluon_attention.py 2>&1 | tail -4 | tee $OUT/tests_gluon_fwd.txt
timeout 100 python3 benchmarks/dynamic_schedule_diag.py 2>&1 | grep -v Warning | tee $OUT/dynamic_schedule_diag.txt
timeout 150 python3 -m tritonkit bench attention --forward --filter "N=1024" --no-progress 2>&1 | tee $OUT/short_fwd_bench.txt | sed -n '/^Summary:/,$p'
