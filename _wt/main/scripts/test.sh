#!/usr/bin/env bash
# Set up (if needed) and run the test suite. Without a GPU the kernels run through
# Triton's interpreter on small shapes; with one they run compiled. The tests are spread
# over one worker process a core (pytest-xdist); `bash scripts/test.sh -n 0` runs them in
# this process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -n auto "$@"
