export PYTHONUNBUFFERED=1 TRITONKIT_AUTOTUNE=0 PYTHONPATH=src
workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n 8")
timeout 280 python3 -m pytest -q -p no:cacheprovider $workers -m "not slow" tests/test_autograd_roads.py tests/test_attention_masks.py 2>&1 | tail -6 | tee $OUT/tests_roads_masks.txt
