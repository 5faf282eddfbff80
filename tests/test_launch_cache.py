"""The cached launch path (tritonkit._launch): its key must separate every pair of launches
that Triton 3.6 would compile differently, or a cached kernel could meet an argument it was
not compiled for (a misaligned pointer given to a kernel compiled for aligned ones)."""

import itertools

import pytest
import torch
import triton
import triton.language as tl
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import BaseBackend
from triton.runtime.jit import JITFunction

from tritonkit import _launch
from tritonkit._launch import Launch


def _triton_specialization(arg):
    return native_specialize_impl(BaseBackend, arg, False, True, True)


def _sample_arguments():
    buffer = torch.randn(64)
    tensors = [buffer[i:] for i in range(6)] + [buffer.half()[1:], buffer.bfloat16(), buffer.double()[2:]]
    ints = [0, 1, 2, 15, 16, 17, 32, -1, -16, 2**31 - 16, 2**31 - 1, 2**31, 2**32, 2**32 + 16, 2**63 - 1, 2**63, 2**64 - 16]
    return tensors + ints + [0.5, -3.0, True, False, None]


def test_argument_key_is_at_least_as_fine_as_triton():
    samples = _sample_arguments()
    for a, b in itertools.combinations(samples, 2):
        if type(a) is not type(b):
            continue
        if _launch._argument_key(a) == _launch._argument_key(b):
            assert _triton_specialization(a) == _triton_specialization(b), (a, b)


def test_argument_key_separates_alignment_and_special_ints():
    buffer = torch.randn(64)
    assert _launch._argument_key(buffer) != _launch._argument_key(buffer[1:])
    assert _launch._argument_key(buffer[4:]) == _launch._argument_key(buffer)  # 16 bytes in
    assert _launch._argument_key(1) != _launch._argument_key(3)
    assert _launch._argument_key(16) != _launch._argument_key(17)
    assert _launch._argument_key(2**31 + 16) != _launch._argument_key(16)
    assert _launch._argument_key(object()) is _launch._UNKNOWN


def _scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * factor, mask=offs < n)


@pytest.fixture
def jit_kernel(monkeypatch):
    # A compiled-mode JITFunction (tritonkit's own kernels are interpreted on this machine),
    # and a stand-in for the CUDA driver's current device.
    class FakeDriver:
        @staticmethod
        def get_current_device():
            return 0
    monkeypatch.setattr(_launch, "_driver", lambda: FakeDriver)
    return JITFunction(_scale_kernel)


def _key(kernel, x, n, block=128, **constexprs):
    constexprs = {"BLOCK": block, "EVEN": True, **constexprs}
    return _launch._specialization_key(Launch("t", kernel, (1,), (x, x, n, 2.0), constexprs))


def test_specialization_key(jit_kernel):
    x = torch.randn(100)
    assert _key(jit_kernel, x, 33) == _key(jit_kernel, x, 35)          # same specialisation
    assert _key(jit_kernel, x, 33) != _key(jit_kernel, x[1:], 33)      # alignment
    assert _key(jit_kernel, x, 32) != _key(jit_kernel, x, 33)          # divisibility
    assert _key(jit_kernel, x, 33) != _key(jit_kernel, x, 33, block=256)
    assert _key(jit_kernel, x.half(), 33) != _key(jit_kernel, x, 33)
    # Launches the key cannot describe take Triton's own path.
    assert _launch._specialization_key(Launch("t", jit_kernel, (1,), (x, x, 3), {"BLOCK": 128, "EVEN": True})) is None
    assert _launch._specialization_key(Launch("t", jit_kernel, (1,), (x, x, 3, 2.0), {"BLOCK": 128})) is None
    assert _launch._specialization_key(Launch("t", jit_kernel, (1,), (x, x, 3, object()),
                                              {"BLOCK": 128, "EVEN": True})) is None
    assert _launch._specialization_key(Launch("t", triton.autotune([triton.Config({})], key=[])(jit_kernel),
                                              (1,), (x, x, 3, 2.0), {"BLOCK": 128, "EVEN": True})) is None
