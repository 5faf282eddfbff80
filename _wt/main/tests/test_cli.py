"""The `tritonkit` command itself: its version (written once, in tritonkit.__version__, which
pyproject reads) and its usage."""

import re
from pathlib import Path

import tritonkit
from tritonkit import cli


def test_version_is_written_once_and_printed(capsys):
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'attr = "tritonkit.__version__"' in pyproject
    assert not re.search(r'^version\s*=\s*"', pyproject, re.M)   # no second, literal version
    assert re.fullmatch(r"\d+\.\d+\.\d+", tritonkit.__version__)
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith(f"tritonkit {tritonkit.__version__} (torch ")


def test_usage_and_unknown_commands(capsys):
    assert cli.main([]) == 2 and "usage: tritonkit" in capsys.readouterr().out
    assert cli.main(["frobnicate"]) == 2 and "unknown command 'frobnicate'" in capsys.readouterr().err
