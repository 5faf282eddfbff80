"""Host time of tritonkit's eager calls against bare launches of an empty Triton kernel, and
the block ops' eager forward + backward wall time beside their eager peers, on a CUDA GPU
(developer tool; about a minute on an H100):
    PYTHONPATH=src python3 benchmarks/host_profile.py --gpu-overhead [--skip-wall] [CASE ...]
(or benchmarks/host_overhead.py, the same). CASE: rms rms+res layer layer+res rope swiglu
swiglu-packed geglu add softmax cross_entropy attention (default: all). Without a CUDA
device it says so and exits (benchmarks/launch_cost.py measures the Python without one).

Part 1, host time at tiny shapes (`tiny_calls`, bf16): each op's call is timed as the host
issues it (perf_counter over 50 calls, least of 20 rounds, the GPU left to run behind and
synchronised between rounds), forward with a gradient recorded and forward + backward
(torch.autograd.grad), beside the same number of launches of an empty kernel (the op's
launches counted with record_launches), two ways: Triton's own `kernel[grid](...)` and the
kernel's compiled launcher (`_launch.LaunchTemplate` bound, the cheapest Python can do).
For forward + backward also beside `Floor`: a kernel-less torch.autograd.Function making the
same launches of the empty kernel through its compiled launcher, through the same
torch.autograd.grad: what any Python-level autograd op pays on this host. "excess" is the
op's time less a baseline, per call; the issue-50 bar is 20 us over the bare launches.

Part 2, wall time at 8192 x 4096 bf16 (registry cases, CUDA events, median, L2 cleared;
forward + backward through torch.autograd.grad): rms_norm and layer_norm (with and without
the fused residual) beside F.rms_norm / F.layer_norm, the eager composition and Liger;
rope (B4 N2048 32/8 heads D128: 8192 tokens of 4096) beside Hugging Face's eager
rotate_half and Liger; swiglu at 8192 x 4096 and 8192 x 14336 beside F.silu(gate) * up and
Liger. torch.compile is left out (the bar is eager mode). Liger is listed where it imports
(its wheel on PYTHONPATH); otherwise its column says so.
"""
import gc
import os
import sys
import time

os.environ.setdefault("TRITONKIT_AUTOTUNE", "0")
import torch  # noqa: E402
import tritonkit  # noqa: E402
from tritonkit import _launch  # noqa: E402

import triton  # noqa: E402  (after tritonkit, which picks compiled or interpreted Triton)

BAR_US = 20.0


@triton.jit
def _empty_kernel(x_ptr, n):
    pass


class Floor(torch.autograd.Function):
    """A kernel-less op: `launch()` n_fwd times forward and n_bwd times backward (None: no
    launches), an output of the given shape and dtype, one fresh gradient per input."""

    @staticmethod
    def forward(ctx, launch, n_fwd, n_bwd, shape, dtype, *tensors):
        for _ in range(n_fwd):
            launch()
        ctx.launch, ctx.n_bwd = launch, n_bwd
        ctx.inputs = [(t.shape, t.device) for t in tensors]
        return torch.empty(shape, dtype=dtype, device=tensors[0].device)

    @staticmethod
    def backward(ctx, grad):
        for _ in range(ctx.n_bwd):
            ctx.launch()
        return (None,) * 5 + tuple(torch.empty(s, dtype=grad.dtype, device=d) for s, d in ctx.inputs)


def grad_of(outputs, leaves, grads):
    """torch.autograd.grad of the leaves through `outputs` (one tensor or a tuple)."""
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    return torch.autograd.grad(outputs, leaves, grads[:len(outputs)])


def tiny_calls(device, dtype, attention_shape=(1, 4, 2, 128, 64)):
    """Each block op at a tiny shape, as a model calls it: case -> (its forward with a
    gradient recorded, its forward + backward, the leaves, the upstream gradients).
    64 x 256 rows; rope B2 H4/2 N16 D64; attention (B, H, Hkv, N, D) = attention_shape,
    causal, bf16, q, k, v views of one packed projection (the gradients stop at them)."""
    def randn(*shape, grad=False, dtype=dtype):
        return torch.randn(shape, device=device, dtype=dtype, requires_grad=grad)
    x, r, w, b = randn(64, 256, grad=True), randn(64, 256, grad=True), randn(256, grad=True), randn(256, grad=True)
    dy, packed = randn(64, 256), randn(64, 512, grad=True)
    q, k, dq, dk = randn(2, 4, 16, 64, grad=True), randn(2, 2, 16, 64, grad=True), randn(2, 4, 16, 64), randn(2, 2, 16, 64)
    cos, sin = randn(2, 16, 64), randn(2, 16, 64)
    target = torch.randint(0, 256, (64,), device=device)
    B, H, Hkv, N, D = attention_shape
    qkv = randn(B, N, (H + 2 * Hkv) * D, grad=True, dtype=torch.bfloat16)
    aq, ak, av = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
    aq, ak, av = (t.unflatten(-1, (n, D)).transpose(1, 2) for t, n in ((aq, H), (ak, Hkv), (av, Hkv)))
    do = randn(B, H, N, D, dtype=torch.bfloat16)
    forwards = {
        "rms": (lambda: tritonkit.rms_norm(x, w), (x, w), (dy,)),
        "rms+res": (lambda: tritonkit.rms_norm(x, w, residual=r), (x, w, r), (dy, dy)),
        "layer": (lambda: tritonkit.layer_norm(x, w, b), (x, w, b), (dy,)),
        "layer+res": (lambda: tritonkit.layer_norm(x, w, b, residual=r), (x, w, b, r), (dy, dy)),
        "rope": (lambda: tritonkit.rope(q, k, cos, sin), (q, k), (dq, dk)),
        "swiglu": (lambda: tritonkit.swiglu(x, r), (x, r), (dy,)),
        "swiglu-packed": (lambda: tritonkit.swiglu(packed), (packed,), (dy,)),
        "geglu": (lambda: tritonkit.geglu(x, r), (x, r), (dy,)),
        "add": (lambda: tritonkit.add(x, r), (x, r), (dy,)),
        "softmax": (lambda: tritonkit.softmax(x), (x,), (dy,)),
        "cross_entropy": (lambda: tritonkit.cross_entropy(x, target), (x,), (torch.ones((), device=device),)),
        "attention": (lambda: tritonkit.attention(aq, ak, av, causal=True), (aq, ak, av), (do,)),
    }
    return {case: (forward, lambda forward=forward, leaves=leaves, grads=grads: grad_of(forward(), leaves, grads),
                   leaves, grads)
            for case, (forward, leaves, grads) in forwards.items()}


def host_us(fn, calls=50, rounds=20):
    """Host time of one call of fn in us: the least of `rounds` rounds of `calls` calls, the
    GPU synchronised between rounds (outside the timing) and the collector held off."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(rounds):
        gc.collect()
        gc.disable()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
        gc.enable()
        torch.cuda.synchronize()
    return best


def _repeated(launch, n):
    def run():
        for _ in range(n):
            launch()
    return run


def _count_launches(fn):
    with _launch.record_launches() as launches:
        fn()
    return len(launches)


def _mark(excess):
    return f"{excess:.1f} {'ok' if excess <= BAR_US else 'OVER'}"


def host_overhead(device, cases):
    x = torch.empty(16, device=device)
    bound = _launch.LaunchTemplate("empty", _empty_kernel, (1,), (1,), {}, 4, 1)
    bound(x)
    bound(x)
    triton_launch, compiled_launch = (lambda: _empty_kernel[(1,)](x, 1)), (lambda: bound(x))
    print(f"empty kernel, one launch: Triton's kernel[grid] {host_us(triton_launch):.1f} us, compiled launcher "
          f"{host_us(compiled_launch):.1f} us ({'bound' if bound._bound is not None else 'NOT bound: Triton path'})")
    calls = tiny_calls(device, torch.bfloat16)
    print(f"\nhost us a call, tiny shapes, bf16; excess = op - baseline (bar: {BAR_US:.0f} us over bare launches)")
    header = ("case", "launches fwd/bwd", "fwd", "fwd excess over kernel[grid] / compiled", "fwd+bwd",
              "fwd+bwd excess over kernel[grid] / compiled", "Floor fwd+bwd", "fwd+bwd excess over Floor")
    print("| " + " | ".join(header) + " |\n" + "|---" * len(header) + "|")
    for case in cases:
        forward, step, leaves, grads = calls[case]
        n_fwd = _count_launches(forward)
        n_bwd = _count_launches(step) - n_fwd
        first = forward()
        first = first[0] if isinstance(first, tuple) else first
        fwd, both = host_us(forward), host_us(step)
        bare = {name: (host_us(_repeated(launch, n_fwd)), host_us(_repeated(launch, n_fwd + n_bwd)))
                for name, launch in (("triton", triton_launch), ("compiled", compiled_launch))}
        floor = host_us(lambda: grad_of(Floor.apply(compiled_launch, n_fwd, n_bwd, first.shape, first.dtype, *leaves),
                                        leaves, grads))
        cells = (case, f"{n_fwd}/{n_bwd}", f"{fwd:.1f}",
                 f"{_mark(fwd - bare['triton'][0])} / {_mark(fwd - bare['compiled'][0])}", f"{both:.1f}",
                 f"{_mark(both - bare['triton'][1])} / {_mark(both - bare['compiled'][1])}", f"{floor:.1f}",
                 f"{both - floor:.1f}")
        print("| " + " | ".join(cells) + " |", flush=True)


def wall_cases():
    """(op, BenchCase) of the 8192 x 4096 bf16 forward + backward cases, from the registry."""
    from tritonkit.registry import get
    from tritonkit.registry import swiglu as swiglu_entry
    from tritonkit.ops.gated import swiglu_reference

    def labelled(op, *labels):
        return [(op, c) for c in get(op).bench_cases(True) if c.label in labels]
    norms = ("fwd+bwd 8192x4096 bf16", "fwd+bwd 4x2048x4096 bf16 +res")
    return [*labelled("rms_norm", *norms), *labelled("layer_norm", *norms),
            *labelled("rope", "fwd+bwd B4 N2048 32/8 heads D128"),
            ("swiglu", swiglu_entry.bench_case("swiglu", tritonkit.swiglu,
                                               lambda g, u=None: swiglu_reference(g, u, upcast=False),
                                               8192, 4096, torch.bfloat16, False, True)),
            *labelled("swiglu", "fwd+bwd 8192x14336 bf16")]


def wall_times(device):
    from triton.testing import do_bench
    print("\neager forward + backward wall time, ms (median, CUDA events, L2 cleared); ratio = best peer / tritonkit")
    header = ("op", "case", "tritonkit", "peers", "best peer", "ratio")
    print("| " + " | ".join(header) + " |\n" + "|---" * len(header) + "|")
    for op, case in wall_cases():
        providers = {k: f for k, f in case.setup(device).items() if k != "torch.compile"}
        times = {k: do_bench(f, warmup=25, rep=100, return_mode="median") for k, f in providers.items()}
        ours = times.pop("tritonkit")
        best = min(times, key=times.get)
        peers = ", ".join(f"{k} {v:.3f}" for k, v in times.items())
        if "Liger" not in times:
            peers += ", Liger (not importable)"
        print(f"| {op} | {case.label} | {ours:.3f} | {peers} | {best} | {times[best] / ours:.2f}x |", flush=True)
        del providers
        torch.cuda.empty_cache()


def main(args=None):
    args = sys.argv[1:] if args is None else args
    if {"-h", "--help"} & set(args):
        sys.exit(print(__doc__))
    if tritonkit.INTERPRETED or not torch.cuda.is_available():
        sys.exit("--gpu-overhead times launches on a CUDA device, and there is none here (kernels would run "
                 "through Triton's interpreter). Without a GPU: PYTHONPATH=src python3 benchmarks/launch_cost.py "
                 "--layers")
    cases = [a for a in args if not a.startswith("--")]
    known = list(tiny_calls(torch.device("meta"), torch.bfloat16)) if cases else []
    unknown = [c for c in cases if c not in known]
    if unknown:
        sys.exit(f"unknown case {', '.join(unknown)}; known: {' '.join(known)}")
    device = torch.device("cuda")
    print("device:", torch.cuda.get_device_name(device), "| triton", triton.__version__, "| torch", torch.__version__)
    start = time.perf_counter()
    host_overhead(device, cases or list(tiny_calls(device, torch.bfloat16)))
    if "--skip-wall" not in args:
        wall_times(device)
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
