"""What a new user runs first: the examples after the documented install, and the modules at
their default dtype."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tritonkit

ROOT = Path(__file__).resolve().parent.parent


def test_finetune_llama_runs_without_matplotlib(tmp_path):
    # `pip install tritonkit[hf]` brings transformers but not matplotlib: the example trains,
    # prints its curves and says why there is no plot.
    pytest.importorskip("transformers")
    code = ("import runpy, sys\n"
            "sys.modules['matplotlib'] = None  # as if not installed\n"
            f"sys.argv = ['finetune_llama.py', '--tiny', '--steps', '1', '--plot', {str(tmp_path / 'p.png')!r}]\n"
            f"runpy.run_path({str(ROOT / 'examples' / 'finetune_llama.py')!r}, run_name='__main__')\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "final loss" in run.stdout and "matplotlib is not installed" in run.stdout
    assert not (tmp_path / "p.png").exists()


def test_nn_attention_at_the_default_dtype_says_what_to_do(device):
    # A module made at torch's default float32: the kernel computes in fp16/bf16, so the call
    # is refused by name with the two ways out, and both ways work.
    module = tritonkit.nn.Attention(32, 2, device=device)
    x = torch.randn(2, 5, 32, device=device)
    with pytest.raises(TypeError, match=r"tritonkit.nn.Attention computes in float16 or bfloat16.*"
                                        r"\.to\(torch\.bfloat16\).*torch\.autocast"):
        module(x)
    dtype = torch.float16   # the interpreter's bf16 products are upcast; fp16 is the cheaper check here
    with torch.autocast(device.type, dtype=dtype):
        mixed = module(x)
    assert mixed.dtype == dtype and mixed.shape == x.shape
    half = module.to(dtype)(x.to(dtype))
    assert half.dtype == dtype and half.shape == x.shape
