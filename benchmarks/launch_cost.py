"""Python cost of tritonkit's eager calls, measured without a GPU (developer tool):
    PYTHONPATH=src python3 benchmarks/launch_cost.py [--layers] [CASE ...]
CASE: rms rms+res layer layer+res rope swiglu swiglu-packed geglu add softmax cross_entropy
attention (default: all).

The ops' launches are recorded on CPU tensors, then each is replayed through Launch._run
against a stand-in driver and a stand-in compiled kernel whose run() does nothing: what is
timed is the key, the cache lookup and the argument marshalling in Python, the part of a
launch that `host_profile.py --cpu` (launches recorded, not run) leaves out. The compiled
launcher's own C cost comes on top on a GPU. Kernels must be JIT functions here, so the
interpreter is kept off and the device checks, which refuse CPU tensors then, are bypassed.

With every launch's compiled stand-in in place, each case is then timed whole, as the
model calls it (forward with a gradient recorded, forward + backward through autograd),
launches included: the nearest this machine gets to a GPU host's time a call. Shapes are
tiny (64 x 256 rows; rope B2 H4/2 N16 D64). `attention` is examples/train_lm.py's layer
(B=64, H=4 over Hkv=2, N=256, D=64, causal, bf16, q, k, v views of one packed projection;
the gradients stop at them). cross_entropy checks its targets' values on a CPU (a GPU
asserts them in the kernel instead): a few microseconds here that a GPU call does not pay.

--layers splits each case's call by the layers of `tritonkit._op.Op` (the op's arguments
caught as the public function hands them to its Op), each timed alone:
  launches   the stubbed launches as plain Launches (a specialisation key each), forward /
             backward; a bound LaunchTemplate (which the norms and attention keep per layout)
             costs about a microsecond instead (the default mode prints both);
  check      the op's validation as the custom-op road runs it (the launchers validate the
             same on the eager roads);
  launcher   the eager forward launcher whole (checks, plan lookup, allocation, launches);
  road       Op.__call__ without a gradient: picking the road, the launcher, the returned outputs;
  Function   Op.__call__ with a gradient recorded (the eager torch.autograd.Function);
  public fwd the public function with a gradient recorded (its own checks and casts on top);
  fwd+bwd    forward + torch.autograd.grad;
  floor      the same torch.autograd.grad over a kernel-less Python autograd.Function that
             allocates the op's first output and one gradient per input: torch's own cost
             for any Python-level op;
  dispatch   the torch custom op called instead (what torch.compile's graph calls), no
             gradient and forward + backward: what the eager roads save.
"""
import os
import sys
import time

os.environ["TRITON_INTERPRET"] = "0"
os.environ.setdefault("TRITONKIT_AUTOTUNE", "0")  # the fixed tiles, as examples/train_lm.py runs
import torch  # noqa: E402
import tritonkit  # noqa: E402
from tritonkit import _checks, _launch, _op  # noqa: E402
from host_overhead import Floor, grad_of as _grad, tiny_calls  # noqa: E402


class _Driver:
    @staticmethod
    def get_current_device():
        return 0

    @staticmethod
    def get_current_stream(device):
        return 0


class _Compiled:
    function = packed_metadata = None

    def run(self, *args):
        pass


def calls():
    """case -> (its forward with a gradient recorded, its forward + backward, the leaves, the
    upstream gradients), on CPU tensors."""
    return tiny_calls(torch.device("cpu"), torch.float32, attention_shape=(64, 4, 2, 256, 64))


def recorded(step):
    with _launch.record_launches(execute=False) as launches:
        step()
    return launches


def least_time(fn, calls=200, rounds=30):
    best = float("inf")
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.thread_time() - start) / calls * 1e6)
    return best


def _stub_launches(recording):
    """Cache a do-nothing compiled kernel under each recorded launch's key; (launch, us as a
    Launch, us as a bound LaunchTemplate) each."""
    timed = []
    for launch in recording:
        key = _launch._specialization_key(launch, 0)
        _launch._cache_of(launch.kernel).compiled[key] = _Compiled()
        bound = _launch.LaunchTemplate(launch.name, launch.kernel, launch.grid, (), launch.constexprs,
                                       launch.num_warps, launch.num_stages)
        timed.append((launch, least_time(lambda launch=launch: launch._run(0)),
                      least_time(lambda bound=bound, args=launch.args: bound(*args))))
    return timed


def _caught_op(forward):
    """(the Op, its arguments) of the first Op call the public forward makes."""
    caught = []
    call = _op.Op.__call__

    def catching(self, *args):
        if not caught:
            caught.append((self, args))
        return call(self, *args)
    _op.Op.__call__ = catching
    try:
        forward()
    finally:
        _op.Op.__call__ = call
    return caught[0]


def layers(case, forward, step, leaves, grads, n_fwd, fwd_us, bwd_us):
    op, args = _caught_op(forward)
    plain = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
    # The custom-op road hands the op its arguments as `check` normalises them.
    checked = op.check(*args) if op.check is not None else args
    checked_plain = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in checked)
    first = op.function.apply(*args)
    first = first[0] if isinstance(first, tuple) else first

    def dispatched_step():
        out = op.returned(checked, op.forward_op(*checked))
        out = out[:len(grads)] if isinstance(out, tuple) else out  # a public wrapper may drop outputs
        return _grad(out, leaves, grads)

    def timed(fn):
        fn()
        return least_time(fn, calls=50, rounds=20)

    row = {
        "check": timed(lambda: op.check(*plain)) if op.check is not None else 0.0,
        "launcher": timed(lambda: op.eager_forward(*plain)),
        "road": timed(lambda: op(*plain)),
        "Function": timed(lambda: op(*args)),
        "public fwd": timed(forward),
        "fwd+bwd": timed(step),
        "floor": timed(lambda: _grad(Floor.apply(None, 0, 0, first.shape, first.dtype, *leaves), leaves, grads)),
        "dispatch": timed(lambda: op.forward_op(*checked_plain)),
        "dispatch fwd+bwd": timed(dispatched_step),
    }
    return f"{case} ({op.name}, {n_fwd} launch{'es' if n_fwd > 1 else ''} fwd)", fwd_us, bwd_us, row


def main():
    args = sys.argv[1:]
    if {"-h", "--help"} & set(args):
        sys.exit(print(__doc__))
    by_layer = "--layers" in args
    steps = calls()
    cases = [a for a in args if not a.startswith("--")] or list(steps)
    _checks.check_device_of = lambda name, device: None
    launches = {case: (recorded(steps[case][0]), recorded(steps[case][1])) for case in cases}
    _launch.INTERPRETED = False
    _launch._driver = lambda: _Driver
    _launch.make_current = lambda device: None  # no CUDA context to make current here
    rows = []
    for case, (forward_launches, recording) in launches.items():
        timed = _stub_launches(recording)  # every key cached, so each launch takes the fast path
        n_fwd = len(forward_launches)
        fwd_us = sum(us for _, us, _ in timed[:n_fwd])
        bwd_us = sum(us for _, us, _ in timed[n_fwd:])
        forward, step, leaves, grads = steps[case]
        if by_layer:
            rows.append(layers(case, forward, step, leaves, grads, n_fwd, fwd_us, bwd_us))
            continue
        for launch, spent, bound in timed:
            tensors = sum(isinstance(a, torch.Tensor) for a in launch.args)
            print(f"  {launch.name}: {spent:.2f} us, {bound:.2f} us as a bound LaunchTemplate "
                  f"({len(launch.args)} arguments, {tensors} tensors)")
        print(f"{case}: {len(recording)} launches, {fwd_us + bwd_us:.2f} us of Python a call")
        for name, fn in (("forward, gradient recorded", forward), ("forward + backward", step)):
            fn()  # builds what a first call builds, outside the recording
            print(f"  whole {name}, launches stubbed: {least_time(fn, calls=50):.1f} us")
    if rows:
        _print_layers(rows)


def _print_layers(rows):
    columns = ("launches fwd/bwd", "check", "launcher", "road", "Function", "public fwd", "fwd+bwd", "floor",
               "fwd+bwd - floor", "dispatch", "dispatch fwd+bwd")
    print("us a call, launches stubbed (see --help for each column)")
    print("| case | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for label, fwd_us, bwd_us, row in rows:
        cells = [f"{fwd_us:.1f} / {bwd_us:.1f}", *(f"{row[c]:.1f}" for c in columns[1:8]),
                 f"{row['fwd+bwd'] - row['floor']:.1f}", f"{row['dispatch']:.1f}", f"{row['dispatch fwd+bwd']:.1f}"]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
