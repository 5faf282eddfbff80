"""Run FlashAttention-2's own tests/test_flash_attn.py against tritonkit.flash_attn.

The test file is FlashAttention-2's, not tritonkit's, and is not committed here: fetch it once
into the git-ignored .fa2/ folder (tests/fa2/README.md names the commit last run):

    mkdir -p .fa2 && curl -L -o .fa2/test_flash_attn.py \\
        https://raw.githubusercontent.com/Dao-AILab/flash-attention/main/tests/test_flash_attn.py

It imports einops (installed on the GPU machine; elsewhere `pip install einops`, or put
einops' wheel beside the file: `pip download --no-deps -d .fa2 einops`, and it is read from there).

    python tests/fa2/run.py --cases 1000 --summary out/fa2.json                 # on a GPU
    python tests/fa2/run.py --cases 40 --dtypes float16 --summary /tmp/fa2.json # on the CPU

`import flash_attn...` resolves to tritonkit.flash_attn (fa2_shim.py); dropout, paged-KV and
KV-cache tests are deselected and a seeded random sample of --cases of the rest runs through
pytest (fa2_plugin.py), which writes the JSON summary: counts, what was deselected and why,
what the sample covers, every failure. Without a GPU the file runs through Triton's
interpreter on the CPU, with its "cuda" strings made "cpu", and by default only cases of
sequences up to 256 and head dims up to 128, without the tests that repeat a pass 50 or 250
times (determinism, races): README.md says what that covers. Exit status: pytest's.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_FILE = ROOT / ".fa2" / "test_flash_attn.py"
CPU_LIMITS = dict(max_seqlen=256, max_headdim=128,
                  skip_tests="test_flash_attn_race_condition,test_flash_attn_deterministic,"
                             "test_flash_attn_varlen_deterministic")
PYTEST_INI = """[pytest]
filterwarnings =
    ignore::RuntimeWarning:triton.runtime.interpreter
    ignore::DeprecationWarning
"""


def _arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="Arguments after -- go to pytest.")
    parser.add_argument("file", nargs="?", type=Path, default=DEFAULT_FILE,
                        help=f"FlashAttention-2's tests/test_flash_attn.py (default {DEFAULT_FILE.relative_to(ROOT)})")
    parser.add_argument("--cases", type=int, default=1000, help="sample size, 0 for every eligible case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--summary", type=Path, required=True, help="where the JSON summary goes")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtypes", default="float16,bfloat16")
    parser.add_argument("--max-seqlen", type=int, help="leave out longer cases (CPU default 256, GPU none)")
    parser.add_argument("--max-headdim", type=int, help="leave out larger head dims (CPU default 128, GPU none)")
    parser.add_argument("--skip-tests", help="comma-separated test functions to leave out (CPU default: the "
                                             "repeated-pass determinism and race tests)")
    parser.add_argument("--shard", default="1/1", help="k/n: run the k-th of n slices of the sample")
    parser.add_argument("--workers", type=int, default=0, help="pytest-xdist processes (0: none)")
    argv = sys.argv[1:] if argv is None else list(argv)
    ours, pytest_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = parser.parse_args(ours)
    args.pytest_args = pytest_args
    cpu = args.device == "cpu"
    for name, default in CPU_LIMITS.items():
        if getattr(args, name) is None:
            setattr(args, name, default if cpu else (0 if name != "skip_tests" else ""))
    return args


def _einops_path(test_file: Path, source: str) -> str | None:
    """Where einops, which FlashAttention-2's tests import, comes from: installed or not imported
    (None), or a wheel beside the test file (its path)."""
    if "from einops" not in source and "import einops" not in source:
        return None
    try:
        import einops  # noqa: F401
        return None
    except ImportError:
        wheels = sorted(test_file.parent.glob("einops-*.whl"))
        if not wheels:
            sys.exit("FlashAttention-2's tests import einops: `pip install einops`, or "
                     f"`pip download --no-deps -d {test_file.parent} einops`")
        return str(wheels[-1])


def main(argv=None) -> int:
    args = _arguments(argv)
    if not args.file.is_file():
        sys.exit(f"{args.file}: no such file. Fetch FlashAttention-2's tests/test_flash_attn.py there "
                 "(tests/fa2/README.md says how).")
    source = args.file.read_text()
    paths = [str(ROOT / "src"), str(HERE)] + list(filter(None, [_einops_path(args.file, source)]))
    sys.path[:0] = paths
    # The environment, for pytest-xdist's workers; fixed tiles, since autotuning each of the
    # sample's shapes from a cold cache would take longer than running it (the tiles' own tests
    # sweep every config).
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + [os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    os.environ.setdefault("TRITONKIT_AUTOTUNE", "0")
    os.environ["FA2_TEST_FILE"] = str(args.file)
    os.environ["FA2_SHA256"] = hashlib.sha256(source.encode()).hexdigest()

    import fa2_shim
    work = Path(tempfile.mkdtemp(prefix="fa2-"))
    (work / "test_flash_attn.py").write_text(fa2_shim.cpu_source(source) if args.device == "cpu" else source)
    (work / "pytest.ini").write_text(PYTEST_INI)
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    pytest_args = [str(work / "test_flash_attn.py"), "-c", str(work / "pytest.ini"), "--rootdir", str(work),
                   "-p", "fa2_plugin", "-p", "no:cacheprovider", "-q", "-rN",
                   f"--fa2-device={args.device}", f"--fa2-cases={args.cases}", f"--fa2-seed={args.seed}",
                   f"--fa2-shard={args.shard}", f"--fa2-dtypes={args.dtypes}", f"--fa2-max-seqlen={args.max_seqlen}",
                   f"--fa2-max-headdim={args.max_headdim}", f"--fa2-skip-tests={args.skip_tests}",
                   f"--fa2-summary={args.summary.resolve()}"]
    if args.workers:
        pytest_args += ["-n", str(args.workers)]
    # A time limit's SIGTERM stops the run as Ctrl-C does, so the summary still counts the
    # cases that finished (the device machine's calls are cut at a limit).
    signal.signal(signal.SIGTERM, _interrupt)
    import pytest
    return pytest.main(pytest_args + args.pytest_args)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    sys.exit(main())
