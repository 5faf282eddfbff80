#!/usr/bin/env bash
# Create .venv with the CPU pins and tritonkit installed in editable mode. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-cpu.txt
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
