#!/usr/bin/env bash
# Packaging check (CI, before the tests): build the sdist and the wheel, check that they hold
# every file of src/tritonkit that git tracks, install the wheel into a fresh virtual
# environment (the pins of requirements-cpu.txt as constraints, so the same torch and triton),
# and from outside the source tree import tritonkit, run one op through the interpreter, and
# ask `tritonkit --version`. Catches modules and data left out of the package.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/python -m build --outdir "$work/dist" . >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
git ls-files src/tritonkit >"$work/tracked.txt"
.venv/bin/python - "$work/dist" "$work/tracked.txt" <<'PY'
import pathlib, sys, tarfile, zipfile
dist = pathlib.Path(sys.argv[1])
tracked = pathlib.Path(sys.argv[2]).read_text().split()
(wheel,), (sdist,) = dist.glob("*.whl"), dist.glob("*.tar.gz")
in_wheel = set(zipfile.ZipFile(wheel).namelist())
in_sdist = {name.split("/", 1)[1] for name in tarfile.open(sdist).getnames() if "/" in name}
missing = [f"{wheel.name}: {p}" for p in tracked if p.removeprefix("src/") not in in_wheel]
missing += [f"{sdist.name}: {p}" for p in tracked + ["pyproject.toml", "README.md"] if p not in in_sdist]
if missing:
    sys.exit("files left out of the package:\n  " + "\n  ".join(missing))
print(f"package: {wheel.name} and {sdist.name} hold all {len(tracked)} files of src/tritonkit")
PY
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check -c requirements-cpu.txt "$work"/dist/*.whl \
    >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; exit 1; }
cd "$work"
"$work/venv/bin/tritonkit" --version
"$work/venv/bin/python" - <<'PY'
import pathlib, sys
import torch
import tritonkit
assert pathlib.Path(tritonkit.__file__).is_relative_to(sys.prefix), tritonkit.__file__
x, y = torch.randn(1000), torch.randn(1000)
torch.testing.assert_close(tritonkit.add(x[1:], y[:-1]), x[1:] + y[:-1])
torch.testing.assert_close(tritonkit.softmax(x.view(10, 100), -1), torch.softmax(x.view(10, 100), -1))
print(f"installed wheel: tritonkit {tritonkit.__version__} from {pathlib.Path(tritonkit.__file__).parent}: add and softmax ok")
PY
