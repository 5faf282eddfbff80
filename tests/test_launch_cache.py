"""The cached launch path (tritonkit._launch): its key must separate every pair of launches
that Triton 3.6 would compile differently, or a cached kernel could meet an argument it was
not compiled for (a misaligned pointer given to a kernel compiled for aligned ones)."""

import contextlib
import itertools
import re

import pytest
import torch
import triton
import triton.language as tl
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import BaseBackend
from triton.runtime.jit import JITFunction

from tritonkit import _launch
from tritonkit._launch import Launch, TensorDescriptor


def _triton_specialization(arg):
    return native_specialize_impl(BaseBackend, arg, False, True, True)


def _scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * factor, mask=offs < n)


@pytest.fixture
def fake_driver(monkeypatch):
    # A stand-in for the CUDA driver's current device.
    class FakeDriver:
        @staticmethod
        def get_current_device():
            return 0
    monkeypatch.setattr(_launch, "_driver", lambda: FakeDriver)


@pytest.fixture
def jit_kernel(fake_driver):
    # A compiled-mode JITFunction (tritonkit's own kernels are interpreted on this machine).
    return JITFunction(_scale_kernel)


def _key(kernel, x, n, block=128, **constexprs):
    constexprs = {"BLOCK": block, "EVEN": True, **constexprs}
    return _launch._specialization_key(Launch("t", kernel, (1,), (x, x, n, 2.0), constexprs))


def test_key_is_at_least_as_fine_as_triton(jit_kernel):
    # Launches that differ in one tensor: equal keys must mean equal Triton specialisations.
    buffer = torch.randn(64)
    tensors = [buffer[i:] for i in range(6)] + [buffer.half()[1:], buffer.bfloat16(), buffer.double()[2:]]
    for a, b in itertools.combinations(tensors, 2):
        if _key(jit_kernel, a, 33) == _key(jit_kernel, b, 33):
            assert _triton_specialization(a) == _triton_specialization(b), (a, b)
    # Ints and floats enter the key by value, which is finer than any specialisation.
    assert _key(jit_kernel, buffer, 33) == _key(jit_kernel, buffer, 33)


def test_specialization_key(jit_kernel):
    x = torch.randn(100)
    assert _key(jit_kernel, x, 33) == _key(jit_kernel, x[4:], 33)      # both 16-byte aligned
    assert _key(jit_kernel, x, 33) != _key(jit_kernel, x, 35)          # exact values
    assert _key(jit_kernel, x, 1) != _key(jit_kernel, x, True)         # 1 == True, but Triton types differ
    assert _key(jit_kernel, x, 33) != _key(jit_kernel, x[1:], 33)      # alignment
    assert _key(jit_kernel, x, 32) != _key(jit_kernel, x, 33)          # divisibility
    assert _key(jit_kernel, x, 33) != _key(jit_kernel, x, 33, block=256)
    assert _key(jit_kernel, x.half(), 33) != _key(jit_kernel, x, 33)
    # Launches the key cannot describe take Triton's own path.
    assert _launch._specialization_key(Launch("t", jit_kernel, (1,), (x, x, 3), {"BLOCK": 128, "EVEN": True})) is None
    assert _launch._specialization_key(Launch("t", triton.autotune([triton.Config({})], key=[])(jit_kernel),
                                              (1,), (x, x, 3, 2.0), {"BLOCK": 128, "EVEN": True})) is None


def test_key_of_tensor_descriptors(jit_kernel):
    # A host TensorDescriptor (an unhashable dataclass) enters the key as what Triton
    # specialises it on, its dtype and block: base, shape and strides are launch arguments.
    from triton.tools.tensor_descriptor import TensorDescriptor

    def key(desc):
        return _launch._specialization_key(Launch("t", jit_kernel, (1,), (desc, desc, 3, 2.0),
                                                  {"BLOCK": 128, "EVEN": True}))

    a, b = torch.zeros(2, 40, 64), torch.zeros(3, 70, 64)
    descs = [TensorDescriptor(a, list(a.shape), list(a.stride()), [1, 16, 64]),
             TensorDescriptor(b, list(b.shape), list(b.stride()), [1, 16, 64]),
             TensorDescriptor(b, list(b.shape), list(b.stride()), [1, 32, 64]),
             TensorDescriptor(b.half(), list(b.shape), list(b.stride()), [1, 32, 64])]
    for d, e in itertools.combinations(descs, 2):
        assert (key(d) == key(e)) == (_triton_specialization(d) == _triton_specialization(e)), (d, e)
    assert key(descs[0]) == key(descs[1])


def test_key_of_gluon_tensor_descriptors(jit_kernel):
    # A Gluon descriptor also carries the shared-memory layout its boxes land in, which Triton
    # specialises on: the key holds it beside the dtype and block.
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor

    def key(desc):
        return _launch._specialization_key(Launch("t", jit_kernel, (1,), (desc, desc, 3, 2.0),
                                                  {"BLOCK": 128, "EVEN": True}))

    def desc(t, block, swizzle=None):
        layout = gl.NVMMASharedLayout.get_default_for(block, {torch.float16: gl.float16, torch.float32: gl.float32}[t.dtype])
        if swizzle is not None:
            layout = gl.NVMMASharedLayout(swizzle, layout.element_bitwidth, layout.rank)
        return GluonTensorDescriptor(t, list(t.shape), list(t.stride()), block, layout)

    a, b = torch.zeros(2, 40, 64), torch.zeros(3, 70, 64)
    descs = [desc(a, [1, 16, 64]), desc(b, [1, 16, 64]), desc(b, [1, 32, 64]), desc(b.half(), [1, 32, 64]),
             desc(b, [1, 16, 64], swizzle=64)]
    for d, e in itertools.combinations(descs, 2):
        assert (key(d) == key(e)) == (_triton_specialization(d) == _triton_specialization(e)), (d, e)
    assert key(descs[0]) == key(descs[1]) and key(descs[1]) != key(descs[4])


def test_gluon_kernels_take_the_cached_path(fake_driver):
    # A Gluon kernel's compiled launcher is called as a Triton kernel's is.
    from tritonkit.ops.attention.gluon import attention_fwd

    kernel = attention_fwd._attn_fwd_kernel
    q = torch.zeros(1, 2, 64, 64, dtype=torch.float16)
    grid, args, kwargs = attention_fwd.launch_args(q, q, q, q, torch.zeros(1, 2, 64), 0.125)
    kwargs = dict(kwargs)
    launch = Launch("t", kernel, grid, args, kwargs, kwargs.pop("num_warps"), None)
    assert launch._direct() is launch and _launch._specialization_key(launch) is not None


def test_cached_launch_passes_every_parameter_in_order(jit_kernel, monkeypatch):
    # The second launch of a key goes straight to the compiled launcher: grid padded to 3 dims,
    # then every kernel parameter in order, constexprs included.
    calls = []

    class FakeCompiled:
        packed_metadata = function = None

        def run(self, *args):
            calls.append(args)

    class FakeDriver:
        @staticmethod
        def get_current_device():
            return 3

        @staticmethod
        def get_current_stream(device):
            # The stream of the device the key was made on (a wrong argument here once
            # broke every cached launch on the GPU while the CPU tests passed).
            assert device == 3, device
            return 1234

    monkeypatch.setattr(_launch, "_driver", lambda: FakeDriver)
    monkeypatch.setattr(_launch, "INTERPRETED", False)
    x = torch.randn(100)
    launch = Launch("t", jit_kernel, (7,), (x, x, 33, 2.0), {"BLOCK": 128, "EVEN": True})
    monkeypatch.setitem(_launch._cache_of(jit_kernel).compiled, _launch._specialization_key(launch), FakeCompiled())
    launch()
    assert calls == [(7, 1, 1, 1234, None, None, None, None, None, x, x, 33, 2.0, 128, True)]


def test_launch_runs_on_the_device_of_its_tensors(monkeypatch):
    # Triton launches on the current CUDA device; a launch whose tensors live on another
    # device switches to it for the launch (as torch's own ops do), and only then.
    entered, ran = [], []
    device_of = _launch._device_of

    @contextlib.contextmanager
    def fake_device_guard(device):
        entered.append(device)
        yield

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device", fake_device_guard)
    monkeypatch.setattr(Launch, "_run", lambda self, device: ran.append((entered[:], device)))
    for index in (0, 1, None):
        monkeypatch.setattr(_launch, "_device_of", lambda args, i=index: torch.device("cuda", i))
        Launch("t", None, (1,), ())()
    # the launch hands the device it runs on to the specialisation key (no second query)
    assert ran == [([], 0), ([torch.device("cuda", 1)], 1), ([torch.device("cuda", 1)], 0)]
    x = torch.randn(8, 8)
    assert device_of((3, x)) == x.device
    assert device_of((TensorDescriptor(x, [8, 8], [8, 1], [8, 8]),)) == x.device
    assert device_of((1, 2.0)) is None


def test_launch_hooks_seen(monkeypatch):
    from triton import knobs
    assert not _launch._launch_hooks_set()  # Triton 3.6's empty HookChain objects
    hook = lambda metadata: None  # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        assert _launch._launch_hooks_set()
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)


def test_launches_the_key_cannot_hold_take_tritons_path(jit_kernel):
    x = torch.randn(100)
    # a descriptor or any other object: never held in the cache (it may hold a tensor alive)
    assert _launch._specialization_key(Launch("t", jit_kernel, (1,), (x, x, 33, object()),
                                              {"BLOCK": 128, "EVEN": True})) is None
    # an autotuned kernel that has not chosen a config for these arguments yet
    tuner = triton.autotune([triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])(jit_kernel)
    assert Launch("t", tuner, lambda meta: (1,), (x, x, 33, 2.0), {"EVEN": True}, None, None)._direct() is None


def test_tuples_enter_the_key_by_value_and_element_type(jit_kernel):
    # A tuple (a kernel's strides, say; nested, a tensor's strides per tensor) is one parameter
    # that Triton specialises element by element: the key tells apart what Triton does.
    x = torch.randn(100)

    def key(t):
        return _launch._specialization_key(Launch("t", jit_kernel, (1,), (x, x, t, 2.0), {"BLOCK": 128, "EVEN": True}))

    big, also_big = 2560, int("2560")  # equal, different objects
    assert key((3, big)) == key((3, also_big)) and key((3, 16)) != key((3, 17))
    assert key(((3, big), (big, 1))) == key(((3, also_big), (big, 1)))
    for a, b in itertools.combinations([(1, 16), (True, 16), (1.0, 16), (3, 16), ((1, 16),), ((True, 16),)], 2):
        assert key(a) != key(b), (a, b)
    # A tuple holding a tensor: Triton's path (the key would not hold its dtype and alignment).
    assert key((x, 16)) is None and key(((x,), 16)) is None


class _FakeCompiled:
    packed_metadata = function = None

    def __init__(self):
        self.calls = []

    def run(self, *args):
        self.calls.append(args)


@pytest.fixture
def cuda_standin(monkeypatch):
    """A stand-in CUDA driver (device 0, stream 1234) with the interpreter off."""
    class FakeDriver:
        @staticmethod
        def get_current_device():
            return 0

        @staticmethod
        def get_current_stream(device):
            return 1234

    monkeypatch.setattr(_launch, "_driver", lambda: FakeDriver)
    monkeypatch.setattr(_launch, "INTERPRETED", False)


def _tuned(jit_kernel, x):
    """An autotuned `jit_kernel` that has benchmarked (stand-in timings: BLOCK=128 wins) and
    chosen its config for (x, x, 33, 2.0) through Triton's own Autotuner.run."""
    configs = [triton.Config({"BLOCK": 64}, num_warps=4), triton.Config({"BLOCK": 128}, num_warps=8, num_stages=2)]
    tuner = triton.autotune(configs, key=["n"])(jit_kernel)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tuner, "_bench", lambda *args, config, **kwargs: [1.0 / config.kwargs["BLOCK"]] * 3)
        patch.setattr(jit_kernel, "run", lambda *args, **kwargs: None)
        tuner.run(x, x, 33, 2.0, EVEN=True, grid=(1,), warmup=False)
    return tuner


def test_tuner_key_is_the_key_tritons_autotuner_keeps(jit_kernel, monkeypatch):
    x = torch.randn(100)
    tuner = _tuned(jit_kernel, x)
    (key,) = tuner.cache
    assert _launch.tuner_key(tuner, (x, x, 33, 2.0), {"EVEN": True}) == key
    assert _launch.tuned_config(tuner, (x, x, 33, 2.0), {"EVEN": True}).kwargs == {"BLOCK": 128}
    assert _launch.tuned_config(tuner, (x, x, 34, 2.0), {"EVEN": True}) is None      # another key
    assert _launch.tuned_config(tuner, (x.half(), x, 33, 2.0), {"EVEN": True}) is None  # another dtype
    # More shapes of call, each tuned by Triton's Autotuner.run, keyed by a runtime argument
    # and a constexpr: dtypes of tensors join the key, descriptors and plain values do not.
    keyed = triton.autotune([triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})],
                            key=["n", "EVEN"])(jit_kernel)
    desc = TensorDescriptor(x[:64].view(8, 8), [8, 8], [8, 1], [8, 8])
    calls = [((x, x, 33, 2.0), {"EVEN": True}), ((x.half(), x, 33, 2.0), {"EVEN": False}),
             ((desc, x.bfloat16(), 16, 1.5), {"EVEN": True}), ((x, x, 33, 2.0), {"EVEN": True})]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keyed, "_bench", lambda *args, config, **kwargs: [1.0] * 3)
        patch.setattr(jit_kernel, "run", lambda *args, **kwargs: None)
        for args, kwargs in calls:
            before = set(keyed.cache)
            keyed.run(*args, **kwargs, grid=(1,), warmup=False)
            new, mine = set(keyed.cache) - before, _launch.tuner_key(keyed, args, kwargs)
            assert new == {mine} if new else mine in before  # the last call repeats the first


def test_autotuned_launch_takes_the_cached_path_with_its_choice(jit_kernel, monkeypatch, cuda_standin):
    # Once the tuner has chosen, a launch runs its kernel with the chosen config's meta-
    # parameters and options, the grid computed from them, straight through the cache.
    x = torch.randn(100)
    tuner = _tuned(jit_kernel, x)
    launch = Launch("t", tuner, lambda meta: (triton.cdiv(100, meta["BLOCK"]),), (x, x, 33, 2.0),
                    {"EVEN": True}, None, None)
    direct = launch._direct()
    assert direct.kernel is jit_kernel and direct.grid == (1,)
    assert direct.constexprs == {"EVEN": True, "BLOCK": 128} and (direct.num_warps, direct.num_stages) == (8, 2)
    compiled = _FakeCompiled()
    monkeypatch.setitem(_launch._cache_of(jit_kernel).compiled, _launch._specialization_key(direct, 0), compiled)
    launch()
    assert compiled.calls == [(1, 1, 1, 1234, None, None, None, None, None, x, x, 33, 2.0, 128, True)]


def _fitting_hook(jit_kernel, monkeypatch) -> list:
    """Give `jit_kernel` a pre-run hook that sets its first argument's (a descriptor's) block
    to [2, BLOCK], as tritonkit's descriptor fitters do; the BLOCKs it ran with."""
    seen = []

    def fit(*args, **meta):
        seen.append(meta["BLOCK"])
        args[0].block_shape = [2, meta["BLOCK"]]
    monkeypatch.setattr(jit_kernel, "pre_run_hooks", [fit])
    return seen


def test_pre_run_hooks_run_before_the_key_on_the_cached_path(jit_kernel, monkeypatch, cuda_standin):
    # Hooks may change the arguments the key reads (tritonkit's set descriptors' tiles): they
    # run first, on every launch, and the key sees what they did.
    a = torch.zeros(4, 64)
    seen = _fitting_hook(jit_kernel, monkeypatch)
    desc = TensorDescriptor(a, [4, 64], [64, 1], [1, 16])
    launch = Launch("t", jit_kernel, (1,), (desc, a, 33, 2.0), {"BLOCK": 64, "EVEN": True})
    fitted = TensorDescriptor(a, [4, 64], [64, 1], [2, 64])
    compiled = _FakeCompiled()
    monkeypatch.setitem(_launch._cache_of(jit_kernel).compiled,
                        _launch._specialization_key(Launch("t", jit_kernel, (1,), (fitted, a, 33, 2.0),
                                                           {"BLOCK": 64, "EVEN": True}), 0), compiled)
    launch()
    assert seen == [64] and desc.block_shape == [2, 64] and len(compiled.calls) == 1


def _other_kernel(x_ptr, n, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 0.0, mask=tl.arange(0, BLOCK) < n)


def test_each_kernel_keeps_its_own_launch_state(jit_kernel):
    # Launch state lives on the kernel object, never under an id() a later kernel may reuse.
    other = JITFunction(_other_kernel)
    assert _launch._cache_of(jit_kernel) is not _launch._cache_of(other)
    assert _launch._cache_of(other).constexpr_names == ("BLOCK",)
    assert _launch._cache_of(jit_kernel).constexpr_names == ("BLOCK", "EVEN")


def test_host_next_power_of_2_matches_tritons():
    # The launchers' host-side replacement for triton.next_power_of_2 (a constexpr function,
    # slow to call from Python) must pick the same block sizes.
    from tritonkit._layout import next_power_of_2
    for n in [*range(0, 4100), 2**20 - 1, 2**20, 2**20 + 1, 2**31 - 1, 2**40 + 3]:
        assert next_power_of_2(n) == triton.next_power_of_2(n), n


def test_first_launch_of_a_key_takes_tritons_path_and_is_cached(jit_kernel, monkeypatch, cuda_standin):
    # A key's first launch goes through JITFunction.run (which compiles) and keeps what it
    # returns; the next launch of the same key runs that straight, a new key compiles again.
    compiled, triton_calls = _FakeCompiled(), []

    def run(*args, grid, warmup, **kwargs):
        triton_calls.append((grid, args, kwargs))
        return compiled
    monkeypatch.setattr(jit_kernel, "run", run)
    x = torch.randn(100)
    for n in (33, 33, 34):
        Launch("t", jit_kernel, (5,), (x, x, n, 2.0), {"BLOCK": 128, "EVEN": True})()
    assert [call[1][2] for call in triton_calls] == [33, 34]
    assert triton_calls[0][0] == (5,) and triton_calls[0][2] == {"BLOCK": 128, "EVEN": True, "num_warps": 4,
                                                                  "num_stages": 3}
    assert compiled.calls == [(5, 1, 1, 1234, None, None, None, None, None, x, x, 33, 2.0, 128, True)]
    assert len(_launch._cache_of(jit_kernel).compiled) == 2


def test_other_triton_versions_take_tritons_path_and_say_so_once(jit_kernel, monkeypatch, cuda_standin):
    # The cached path reads Triton internals verified with 3.6 only: under any other version
    # every launch goes through JITFunction.run, even where a compiled launcher is cached.
    from tritonkit import _triton_version

    compiled, triton_calls = _FakeCompiled(), []
    monkeypatch.setattr(jit_kernel, "run", lambda *args, **kwargs: triton_calls.append(args) or compiled)
    monkeypatch.setattr(_triton_version, "_warned", set())
    x = torch.randn(100)
    launch = Launch("t", jit_kernel, (5,), (x, x, 33, 2.0), {"BLOCK": 128, "EVEN": True})
    monkeypatch.setitem(_launch._cache_of(jit_kernel).compiled, _launch._specialization_key(launch, 0), compiled)
    for version in ("3.7.0", "3.5.1", "4.0.0+git1a2b"):
        monkeypatch.setattr(_triton_version, "TRITON_VERSION", version)
        with pytest.warns(_triton_version.TritonVersionWarning, match=re.escape(f"triton {version} is installed")) as seen:
            launch()
            launch()
        assert len(seen) == 1 and "triton>=3.6,<3.7" in str(seen[0].message)
        monkeypatch.setattr(_triton_version, "_warned", set())
    assert len(triton_calls) == 6 and compiled.calls == []
    monkeypatch.setattr(_triton_version, "TRITON_VERSION", "3.6.0")
    launch()
    assert len(triton_calls) == 6 and len(compiled.calls) == 1


def test_triton_version_range():
    from tritonkit import _triton_version
    assert _triton_version.supported(triton.__version__)   # the installed Triton is a verified one
    assert _triton_version.supported("3.6.0") and _triton_version.supported("3.6.1")
    assert not any(_triton_version.supported(v) for v in ("3.5.0", "3.7.0", "4.0", "nightly"))
    assert _triton_version.parse("3.7.0+git1234") == (3, 7) and _triton_version.parse("3.6rc1") == (3, 6)


def _template_standin(monkeypatch, jit_kernel, device=0):
    """A stand-in driver whose current device the test sets, and a stand-in compiled kernel
    cached for `jit_kernel`'s launch of (x, x, 33, 2.0): (template, compiled, x, state)."""
    state = {"device": device, "keys": 0}

    class FakeDriver:
        @staticmethod
        def get_current_device():
            return state["device"]

        @staticmethod
        def get_current_stream(device):
            return 1000 + device

    monkeypatch.setattr(_launch, "_driver", lambda: FakeDriver)
    monkeypatch.setattr(_launch, "INTERPRETED", False)
    key = _launch._specialization_key

    def counted(*args, **kwargs):
        state["keys"] += 1
        return key(*args, **kwargs)
    monkeypatch.setattr(_launch, "_specialization_key", counted)
    x = torch.randn(100)
    compiled = _FakeCompiled()
    template = _launch.LaunchTemplate("t", jit_kernel, (7,), (33, 2.0), {"BLOCK": 128, "EVEN": True})
    monkeypatch.setitem(_launch._cache_of(jit_kernel).compiled, key(template.as_launch((x, x)), 0), compiled)
    return template, compiled, x, state


def test_template_launches_its_bound_kernel_straight(jit_kernel, monkeypatch):
    # The first call goes through a Launch (key, cache) and binds; later calls launch the
    # same compiled kernel with the same arguments, without a key.
    template, compiled, x, state = _template_standin(monkeypatch, jit_kernel)
    y = torch.randn(100)
    template(x, x)
    template(y, x)
    template(x, y)
    assert state["keys"] == 1
    want = (7, 1, 1, 1000, None, None, None, None, None)
    assert compiled.calls == [(*want, x, x, 33, 2.0, 128, True), (*want, y, x, 33, 2.0, 128, True),
                              (*want, x, y, 33, 2.0, 128, True)]


def test_template_takes_the_launch_path_when_it_must(jit_kernel, monkeypatch):
    # Recordings see every call as a Launch; launch hooks, another current device and another
    # Triton take the Launch path (which knows what to do with each) instead of the binding.
    from tritonkit import _triton_version
    template, compiled, x, state = _template_standin(monkeypatch, jit_kernel)
    template(x, x)
    with _launch.record_launches(execute=False) as launches:
        template(x, x)
    assert len(launches) == 1 and launches[0].args == (x, x, 33, 2.0) and len(compiled.calls) == 1
    triton_calls = []
    monkeypatch.setattr(jit_kernel, "run", lambda *args, **kwargs: triton_calls.append(kwargs["grid"]))
    with monkeypatch.context() as patch:
        patch.setattr(_launch, "_launch_hooks_set", lambda: True)
        template(x, x)
    assert triton_calls == [(7,)] and len(compiled.calls) == 1
    template(x, x)  # binds again through the cache
    state["device"] = 1
    template(x, x)  # another device: another key, not cached, so Triton's path
    assert triton_calls == [(7,), (7,)]
    state["device"] = 0
    template(x, x)
    with monkeypatch.context() as patch:
        patch.setattr(_triton_version, "TRITON_VERSION", "3.7.0")
        patch.setattr(_triton_version, "_warned", {"cached-launcher fast path"})
        template(x, x)
    assert len(triton_calls) == 3
    template(x, x)
    assert len(compiled.calls) == 4


def test_template_of_a_tuner_follows_its_choices(jit_kernel, monkeypatch, cuda_standin):
    # Bound to the chosen config's kernel; a tuner whose choices are replaced (as tests do)
    # is asked again.
    x = torch.randn(100)
    tuner = _tuned(jit_kernel, x)
    template = _launch.LaunchTemplate("t", tuner, lambda meta: (triton.cdiv(100, meta["BLOCK"]),), (33, 2.0),
                                      {"EVEN": True}, None, None)
    compiled = _FakeCompiled()
    monkeypatch.setitem(_launch._cache_of(jit_kernel).compiled,
                        _launch._specialization_key(template.as_launch((x, x))._direct(), 0), compiled)
    template(x, x)
    template(x, x)
    assert compiled.calls == [(1, 1, 1, 1234, None, None, None, None, None, x, x, 33, 2.0, 128, True)] * 2
    monkeypatch.setattr(tuner, "cache", {})  # no choice any more: the tuner's own path
    tuned = []
    monkeypatch.setattr(tuner, "run", lambda *args, **kwargs: tuned.append(args))
    template(x, x)
    assert tuned == [(x, x, 33, 2.0)] and len(compiled.calls) == 2


def test_template_runs_hooks_that_reshape_its_descriptors(jit_kernel, monkeypatch):
    # A hook that changed the binding call's descriptors (a tile the tuner chose) runs on
    # every bound call; one that left them as they were (the tile they were built with) does not.
    a = torch.zeros(4, 64)
    seen = _fitting_hook(jit_kernel, monkeypatch)
    _, compiled, _, _ = _template_standin(monkeypatch, jit_kernel)
    template = _launch.LaunchTemplate("t", jit_kernel, (1,), (33, 2.0), {"BLOCK": 64, "EVEN": True})
    fitted = TensorDescriptor(a, [4, 64], [64, 1], [2, 64])
    monkeypatch.setitem(_launch._cache_of(jit_kernel).compiled,
                        _launch._specialization_key(template.as_launch((fitted, a))), compiled)
    for block in ([1, 16], [1, 16], [2, 64]):
        desc = TensorDescriptor(a, [4, 64], [64, 1], block)
        template(desc, a)
        assert desc.block_shape == [2, 64]
    assert seen == [64] * 3 and len(compiled.calls) == 3
    template._bound = None  # bound by a call whose descriptor already had the hook's tile
    for _ in range(2):
        template(TensorDescriptor(a, [4, 64], [64, 1], [2, 64]), a)
    assert seen == [64] * 4 and len(compiled.calls) == 5



def test_gluon_plans_bind_their_launches(monkeypatch, cuda_standin):
    # The Gluon kernels' launches of an attention plan bind as the Triton ones do: the first
    # call makes a key, later calls with new tensors of the layout launch the bound kernel
    # straight, each with descriptors of its own tensors; the backward's two passes share the
    # descriptors of q, do, k and v (the same boxes at D=128).
    from tritonkit.ops.attention.gluon import attention_bwd, attention_fwd
    from tritonkit.ops.attention.score import Score

    key = _launch._specialization_key
    keys = []
    monkeypatch.setattr(_launch, "_specialization_key", lambda *a, **kw: keys.append(1) or key(*a, **kw))

    def tensors(n):
        return [torch.randn(1, 2, 64, 128, dtype=torch.float16) for _ in range(n)]

    def cached(template, head):
        compiled = _FakeCompiled()
        monkeypatch.setitem(_launch._cache_of(template.kernel).compiled, key(template.as_launch(head), 0), compiled)
        return compiled

    lse, delta = torch.zeros(1, 2, 64), torch.zeros(1, 2, 64)
    q, k, v, o = tensors(4)
    forward = attention_fwd.ForwardLaunch(q, k, 0.125, Score(causal=True))
    fwd = cached(forward.template, forward.head(q, k, v, o, lse))
    do, dq, dk, dv = tensors(4)
    backward = attention_bwd.BackwardLaunches(q, k, 0.125, Score(causal=True))
    heads = backward.heads(do, q, k, v, o, lse, delta, None, dq, dk, dv)
    assert heads[0][:2] + heads[0][3:5] == heads[1][:4]          # shared descriptors
    dq_pass, dkdv = cached(backward.dq[False].template, heads[0]), cached(backward.dkdv.template, heads[1])
    for _ in range(3):
        q, k, v, o, do, dq, dk, dv = tensors(8)
        forward(q, k, v, o, lse)
        backward(do, q, k, v, o, lse, None, dq, dk, dv)
        # the call's own tensors behind its descriptors, after grid, stream and metadata
        assert [d.base for d in fwd.calls[-1][9:13]] == [q, k, v, o]
        assert [d.base for d in dq_pass.calls[-1][9:15]] == [q, do, o, k, v, dq]
        assert [d.base for d in dkdv.calls[-1][9:15]] == [q, do, k, v, dk, dv]
    assert len(keys) == 3 and len(fwd.calls) == len(dkdv.calls) == len(dq_pass.calls) == 3
