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
