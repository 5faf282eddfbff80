export PYTHONUNBUFFERED=1 TRITONKIT_AUTOTUNE=0 PYTHONPATH=src
timeout 150 python3 .gpu/short_bwd_paths.py 2>&1 | grep -v Warning | tee $OUT/short_bwd_paths.txt
timeout 200 python3 -m tritonkit bench attention --filter "N=1024" --no-progress 2>&1 | tee $OUT/short_bench.txt | sed -n '/^Summary:/,$p'
