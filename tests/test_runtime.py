"""Import-time behaviour: no GPU work, and a clear error when the interpreter came too late."""

import os
import subprocess
import sys

import pytest

import tritonkit


def run_python(code: str) -> subprocess.CompletedProcess:
    # A fresh interpreter, without the TRITON_INTERPRET that this process's tritonkit set.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


def test_import_does_no_gpu_work():
    result = run_python("import torch, tritonkit; print(torch.cuda.is_initialized())")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


@pytest.mark.skipif(not tritonkit.INTERPRETED, reason="only the interpreter needs switching on early")
def test_triton_imported_first_gives_a_clear_error():
    code = ("import triton, torch, tritonkit\n"
            "try:\n    tritonkit.softmax(torch.randn(2, 3))\n"
            "except RuntimeError as err:\n    print('refused:', err)\n")
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert "refused:" in result.stdout and "Import tritonkit before triton" in result.stdout


def test_cli_help_and_unknown_command():
    from tritonkit.cli import main
    assert main(["--help"]) == 0
    assert main(["frobnicate"]) == 2
