"""tests/fa2/run.py, the runner of FlashAttention-2's own test file, on a miniature file written
as FlashAttention-2's is (its imports, "cuda" strings, parametrized dropout, a KV-cache test):
the shim resolves every import, the unsupported cases are left out with their reasons, the rest
runs, and the summary counts passes and lists failures."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MINIATURE = '''
import pytest
import torch
from flash_attn import flash_attn_func, flash_attn_with_kvcache
from flash_attn.bert_padding import pad_input, unpad_input
from flash_attn.flash_attn_interface import _get_block_size_n, USE_TRITON_ROCM
from flash_attn.layers.rotary import apply_rotary_emb

is_sm90 = torch.cuda.get_device_capability("cuda") == (9, 0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dropout_p", [0.0, 0.17])
@pytest.mark.parametrize("seqlen", [9, 300])
def test_flash_attn_output(seqlen, dropout_p, dtype):
    q = torch.randn(1, seqlen, 2, 16, device="cuda", dtype=dtype)
    out, lse, _ = flash_attn_func(q, q, q, dropout_p, causal=True, return_attn_probs=True)
    assert out.shape == q.shape and lse.shape == (1, 2, seqlen)


def test_flash_attn_kvcache():
    raise AssertionError("the KV-cache test must not be collected")


def test_a_failure():
    assert not USE_TRITON_ROCM
    assert False, "listed in the summary"
'''


def test_runner_on_a_miniature(tmp_path):
    (tmp_path / "test_flash_attn.py").write_text(MINIATURE)
    summary = tmp_path / "summary.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "fa2" / "run.py"), str(tmp_path / "test_flash_attn.py"),
                          "--device", "cpu", "--cases", "0", "--dtypes", "float16", "--summary", str(summary)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stdout + run.stderr  # pytest's status: a test failed
    s = json.loads(summary.read_text())
    assert s["tests_left_out"]["test_flash_attn_kvcache"] == "KV-cache API"
    assert s["collected"] == 9
    assert s["deselected"] == {"dropout": 4, "dtype not in --fa2-dtypes": 2, "sequence longer than --fa2-max-seqlen": 1}
    assert (s["eligible"], s["passed"], s["failed"], s["errors"], s["skipped"]) == (2, 1, 1, 0, 0)
    assert [f["test"] for f in s["failures"]] == ["test_flash_attn.py::test_a_failure"]
    assert "listed in the summary" in s["failures"][0]["message"]
    assert s["coverage"] == {"dtype=float16": 1, "test_a_failure": 1, "test_flash_attn_output": 1}
