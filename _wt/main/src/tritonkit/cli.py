"""The `tritonkit` command: `tritonkit bench ...` and `tritonkit inspect ...`."""

from __future__ import annotations

import sys

USAGE = """usage: tritonkit {bench,inspect} [options] | tritonkit --version

  bench    measure tritonkit beside its peers (tritonkit bench --help)
  inspect  show what a kernel compiles to (tritonkit inspect --help)
"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] == "--version":
        import torch
        import triton

        from . import __version__, _runtime
        print(f"tritonkit {__version__} (torch {torch.__version__}, triton {triton.__version__}; "
              f"{'Triton interpreter on the CPU' if _runtime.INTERPRETED else 'CUDA'})")
        return 0
    command, rest = argv[0], argv[1:]
    if command == "bench":
        from .bench.runner import main as bench_main
        return bench_main(rest)
    if command == "inspect":
        from .inspector import main as inspect_main
        return inspect_main(rest)
    print(f"tritonkit: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
