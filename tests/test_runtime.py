"""Import-time behaviour: no GPU work, and a clear error when the interpreter came too late."""

import os
import subprocess
import sys

import pytest
import torch

import tritonkit


def run_python(code: str) -> subprocess.CompletedProcess:
    # A fresh interpreter, without the TRITON_INTERPRET that this process's tritonkit set.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


def test_import_does_no_gpu_work():
    result = run_python("import torch, tritonkit; print(torch.cuda.is_initialized())")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


# Kernels that call triton's own @jit functions: tl.max and tl.sum (softmax, rms_norm), loops
# and reductions (cross_entropy), tensor methods and tl.dot (attention).
_OPS_AGAINST_TORCH = """
import torch, torch.nn.functional as F
import tritonkit
x = torch.randn(5, 300)
w = torch.randn(300)
t = torch.tensor([0, 7, 299, 3, 12])
q = torch.randn(1, 2, 37, 16, dtype=torch.float16)
ref = F.scaled_dot_product_attention(q.float(), q.float(), q.float(), is_causal=True)
errors = [(tritonkit.softmax(x) - x.softmax(-1)).abs().max(),
          (tritonkit.rms_norm(x, w) - F.rms_norm(x, (300,), w, 1e-6)).abs().max(),
          (tritonkit.cross_entropy(x, t) - F.cross_entropy(x, t)).abs(),
          (tritonkit.attention(q, q, q, causal=True).float() - ref).abs().max()]
print("errors", max(float(e) for e in errors))
"""


@pytest.mark.skipif(not tritonkit.INTERPRETED, reason="only the interpreter needs switching on early")
def test_importing_triton_first_does_not_matter():
    # transformers imports triton when a model class is imported; triton's language
    # functions are then made for compiling, before tritonkit switches the interpreter on.
    import importlib.util
    first = ("import transformers.models.llama.modeling_llama" if importlib.util.find_spec("transformers")
             else "import triton.language")
    result = run_python(f"{first}\nimport sys\nassert 'triton.language' in sys.modules\n" + _OPS_AGAINST_TORCH)
    assert result.returncode == 0, result.stderr
    assert float(result.stdout.split("errors")[-1]) < 2e-3, result.stdout


@pytest.mark.skipif(not tritonkit.INTERPRETED, reason="only the interpreter needs switching on early")
def test_triton_that_cannot_be_switched_over_gives_an_exact_error():
    # Where Triton's internals are not what tritonkit remakes (here tl.max is an object it does
    # not know), the error says what happened and the two ways out.
    code = ("import torch, triton.language.standard as standard\n"
            "standard.max = type('CompiledElsewhere', (), {'fn': standard.max.fn})()\n"
            "import tritonkit\n"
            "try:\n    tritonkit.softmax(torch.randn(2, 3))\n"
            "except RuntimeError as err:\n    print('refused:', err)\n")
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert "refused:" in result.stdout and "triton was imported before tritonkit" in result.stdout
    assert "TRITON_INTERPRET=1" in result.stdout and "import tritonkit first" in result.stdout


@pytest.mark.skipif(not tritonkit.INTERPRETED, reason="numpy matters to the interpreter only")
def test_a_numpy_the_interpreter_fails_with_is_refused_naming_the_fix(monkeypatch):
    # Triton 3.6's interpreter fails inside kernels with numpy 2.4 and later; the first op
    # says so, with the command that fixes it, instead of an error from inside Triton.
    import numpy

    from tritonkit import _runtime

    monkeypatch.setattr(_runtime, "_triton_version", lambda: "3.6.0")
    monkeypatch.setattr(numpy, "__version__", "2.4.1")
    with pytest.raises(RuntimeError, match=r"numpy 2\.4 and later; numpy 2\.4\.1 is installed.*pip install 'numpy<2\.4'"):
        tritonkit.softmax(torch.randn(2, 3))
    monkeypatch.setattr(numpy, "__version__", "2.3.5")
    tritonkit.softmax(torch.randn(2, 3))
    monkeypatch.setattr(_runtime, "_triton_version", lambda: "3.7.0")   # another interpreter: not ours to judge
    monkeypatch.setattr(numpy, "__version__", "2.4.1")
    tritonkit.softmax(torch.randn(2, 3))


def test_pyproject_bounds_numpy_as_the_interpreter_needs():
    # `pip install tritonkit` without the CPU pins must not bring a numpy the interpreter fails with.
    import pathlib
    import re
    import tomllib

    from tritonkit._runtime import _INTERPRETER_NUMPY_BELOW

    pyproject = tomllib.loads((pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text())
    numpy_requirement = [d for d in pyproject["project"]["dependencies"] if re.match(r"numpy\b", d)]
    bound = ".".join(map(str, _INTERPRETER_NUMPY_BELOW))
    assert numpy_requirement and f"<{bound}" in numpy_requirement[0].replace(" ", ""), numpy_requirement


def test_cli_help_and_unknown_command():
    from tritonkit.cli import main
    assert main(["--help"]) == 0
    assert main(["frobnicate"]) == 2


def test_a_thread_without_a_cuda_context_gets_the_primary_one(monkeypatch):
    # `_cuda_context.make_current` against a stand-in driver: a thread with no current context
    # retains the device's primary context and makes it current, once per thread and device; a
    # thread with a context keeps it.
    import ctypes
    import threading

    from tritonkit import _cuda_context

    calls = []

    class Driver:
        current = 0

        def cuCtxGetCurrent(self, out):
            calls.append("get")
            ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))[0] = self.current or None
            return 0

        def cuDeviceGet(self, out, ordinal):
            calls.append(("device", ordinal.value))
            ctypes.cast(out, ctypes.POINTER(ctypes.c_int))[0] = 100 + ordinal.value
            return 0

        def cuDevicePrimaryCtxRetain(self, out, handle):
            calls.append(("retain", handle.value))
            ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))[0] = 0x1234
            return 0

        def cuCtxSetCurrent(self, context):
            calls.append(("set", context.value))
            return 0

    driver = Driver()
    monkeypatch.setattr(_cuda_context, "_driver", lambda: driver)

    def in_a_new_thread(*devices):
        thread = threading.Thread(target=lambda: [_cuda_context.make_current(d) for d in devices])
        thread.start()
        thread.join()

    in_a_new_thread(1, 1)                  # no context: retained and set, the second call free
    assert calls == ["get", ("device", 1), ("retain", 101), ("set", 0x1234)]
    calls.clear()
    driver.current = 0x99
    in_a_new_thread(0, 0)                  # a context already current: left as it is
    assert calls == ["get"]
    calls.clear()
    driver.current = 0
    driver.cuCtxSetCurrent = lambda context: 201     # a driver error names the call
    with pytest.raises(RuntimeError, match="cuCtxSetCurrent"):
        _cuda_context.make_current(7)
