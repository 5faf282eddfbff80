#!/usr/bin/env bash
# Set up (if needed) and run the test suite. Without a GPU the kernels run through
# Triton's interpreter on small shapes; with one they run compiled.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
