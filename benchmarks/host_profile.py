"""Host time per call of tritonkit's ops, with a cProfile of each (developer tool):
    PYTHONPATH=src python3 benchmarks/host_profile.py [--cpu] [--no-profile] [add softmax attention autotuned norms gated compiled]
    PYTHONPATH=src python3 benchmarks/host_profile.py --gpu-overhead [--skip-wall] [CASE ...]
The second form is benchmarks/host_overhead.py (see its docstring): each op's host time at
tiny shapes against bare launches of an empty kernel, and the block ops' eager wall time at
8192 x 4096 beside their peers; it needs a CUDA device.
Host time here is the time Python takes to issue a call, with the GPU left to run behind it
(the figures print before any synchronisation), so it is what bounds small inputs.

With --cpu (the default without a GPU) the ops run on small CPU tensors inside
`record_launches(execute=False)`: every launch is built and recorded but not run, so the
figure is the op's own Python (checks, allocation, autograd, launch building) without the
compiled launcher's cost (several microseconds a launch on a GPU), which this mode cannot
see. The `norms` group times forward + backward of RMSNorm and LayerNorm, with and without
the fused residual, next to torch's native norm doing the same (tiny, real) work. The
`attention` group adds examples/train_lm.py's layer (`train_lm_attention_cases`): its
launchers through descriptors and through pointers, and the op as the layer calls it."""
import contextlib
import cProfile
import gc
import os
import pstats
import sys
import time

os.environ.setdefault("TRITONKIT_AUTOTUNE", "0")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import tritonkit  # noqa: E402
from tritonkit import _launch  # noqa: E402
from tritonkit.ops import attention as A  # noqa: E402


class _Allocating(torch.autograd.Function):
    """The floor of any Python-level autograd op on this host: a forward and backward that
    allocate what a norm's do (y and a statistic; dx and dW) and launch nothing."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w, torch.empty(x.shape[0], dtype=torch.float32, device=x.device))
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, dy):
        x, w, _ = ctx.saved_tensors
        return torch.empty_like(x), torch.empty_like(w)


def norm_cases(device):
    """Forward + backward of each norm (random upstream gradients), tritonkit's and torch's."""
    shape = (8192, 4096) if device.type == "cuda" else (64, 256)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    x, r = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True) for _ in range(2))
    w, b = (torch.randn(shape[-1], device=device, dtype=dtype, requires_grad=True) for _ in range(2))
    dy, dh = (torch.randn(shape, device=device, dtype=dtype) for _ in range(2))
    hidden = (shape[-1],)

    def step(outs, leaves):
        outs = outs if isinstance(outs, tuple) else (outs,)
        return torch.autograd.grad(outs, leaves, (dy, dh)[:len(outs)])

    def torch_residual(norm):  # torch's peer of the fused residual: the add, then the norm
        h = x + r
        return norm(h), h

    x0, w0 = x.detach(), w.detach()
    yield "rms_norm fwd, no grad", lambda: tritonkit.rms_norm(x0, w0)
    yield "rms_norm fwd, grad recorded", lambda: tritonkit.rms_norm(x, w)
    yield "rms_norm fwd+bwd", lambda: step(tritonkit.rms_norm(x, w), (x, w))
    yield "rms_norm +res fwd+bwd", lambda: step(tritonkit.rms_norm(x, w, residual=r), (x, w, r))
    yield "layer_norm fwd+bwd", lambda: step(tritonkit.layer_norm(x, w, b), (x, w, b))
    yield "layer_norm +res fwd+bwd", lambda: step(tritonkit.layer_norm(x, w, b, residual=r), (x, w, b, r))
    yield "F.rms_norm fwd, grad recorded", lambda: F.rms_norm(x, hidden, w, 1e-6)
    yield "Python autograd.Function, no kernels, fwd+bwd", lambda: step(_Allocating.apply(x, w), (x, w))
    yield "F.rms_norm fwd+bwd", lambda: step(F.rms_norm(x, hidden, w, 1e-6), (x, w))
    yield "F.rms_norm +res fwd+bwd", lambda: step(torch_residual(lambda h: F.rms_norm(h, hidden, w, 1e-6)), (x, w, r))
    yield "F.layer_norm fwd+bwd", lambda: step(F.layer_norm(x, hidden, w, b), (x, w, b))
    yield "F.layer_norm +res fwd+bwd", lambda: step(torch_residual(lambda h: F.layer_norm(h, hidden, w, b)), (x, w, b, r))


def gated_cases(device):
    """swiglu forward and forward + backward, gate and up separate and packed, beside torch's
    eager expression doing the same (tiny, real) work and the kernel-less Function."""
    shape = (8192, 14336) if device.type == "cuda" else (64, 256)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    gate, up = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True) for _ in range(2))
    packed = torch.randn(shape[0], 2 * shape[1], device=device, dtype=dtype, requires_grad=True)
    dout = torch.randn(shape, device=device, dtype=dtype)
    g0, u0 = gate.detach(), up.detach()
    yield "swiglu fwd, no grad", lambda: tritonkit.swiglu(g0, u0)
    yield "swiglu fwd+bwd", lambda: torch.autograd.grad(tritonkit.swiglu(gate, up), (gate, up), dout)
    yield "swiglu packed fwd+bwd", lambda: torch.autograd.grad(tritonkit.swiglu(packed), (packed,), dout)
    yield "F.silu(gate) * up fwd+bwd", lambda: torch.autograd.grad(F.silu(gate) * up, (gate, up), dout)
    yield "Python autograd.Function, no kernels, fwd+bwd", lambda: torch.autograd.grad(
        _Allocating.apply(gate, up), (gate, up), dout)


def autograd_attention_cases(label, q, k, v):
    """The op through autograd on leaves or views q, k, v (the gradients stop at them, so the
    figures hold the attention node alone): forward with a gradient recorded, backward alone
    (the graph kept), forward + backward."""
    o = tritonkit.attention(q, k, v, causal=True)
    do = torch.randn_like(o)
    yield f"{label}fwd, grad recorded", lambda: tritonkit.attention(q, k, v, causal=True)
    yield f"{label}bwd (autograd, graph kept)", lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
    yield f"{label}fwd+bwd", lambda: torch.autograd.grad(tritonkit.attention(q, k, v, causal=True), (q, k, v), do)


def train_lm_attention_cases(device):
    """Attention as examples/train_lm.py's layer calls it (B=64, H=4 over Hkv=2, N=256, D=64,
    causal): q, k, v are `tritonkit.nn.Attention`'s views of one packed projection."""
    B, H, Hkv, N, D = 64, 4, 2, 256, 64
    qkv = torch.randn(B, N, (H + 2 * Hkv) * D, device=device, dtype=torch.bfloat16, requires_grad=True)
    q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
    q, k, v = (t.unflatten(-1, (n, D)).transpose(1, 2) for t, n in ((q, H), (k, Hkv), (v, Hkv)))
    qd, kd, vd = (t.detach() for t in (q, k, v))
    od, lse = A.attention_fwd(qd, kd, vd, True)
    do = torch.randn_like(od)
    # The launchers alone, through descriptors (the path the layer takes on Hopper) and
    # through pointers: on a GPU the difference holds Triton's launcher encoding descriptors.
    for path, tma in (("descriptors", None), ("pointers", False)):
        yield f"train_lm attention_fwd, {path}", lambda tma=tma: A.attention_fwd(qd, kd, vd, True, tma=tma)
        yield f"train_lm attention_bwd, {path}", lambda tma=tma: A.attention_bwd(do, qd, kd, vd, od, lse, True,
                                                                                   tma=tma)
    yield "train_lm attention fwd, no grad", lambda: tritonkit.attention(qd, kd, vd, causal=True)
    yield from autograd_attention_cases("train_lm attention ", q, k, v)


def compiled_cases(device):
    """Forward + backward of a few ops by the eager road and from a torch.compile(fullgraph=True)
    region holding the op alone (its custom ops, AOTAutograd's wrappers): what a compiled
    layer pays a tritonkit op in host time, beside torch's eager expression compiled the same way."""
    shape = (8192, 4096) if device.type == "cuda" else (64, 256)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    x, gate, up = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    w = torch.randn(shape[-1], device=device, dtype=dtype, requires_grad=True)
    dy = torch.randn(shape, device=device, dtype=dtype)
    q, k, v = (torch.randn(2, 8, 256, 64, device=device, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn_like(q)

    def silu_mul(g, u):
        return F.silu(g) * u

    ops = {"rms_norm": (lambda: tritonkit.rms_norm, (x, w), dy),
           "F.rms_norm": (lambda: (lambda t, s: F.rms_norm(t, (shape[-1],), s, 1e-6)), (x, w), dy),
           "swiglu": (lambda: tritonkit.swiglu, (gate, up), dy),
           "silu(gate) * up": (lambda: silu_mul, (gate, up), dy),
           "attention": (lambda: (lambda a, b, c: tritonkit.attention(a, b, c, causal=True)), (q, k, v), do)}
    for name, (make, leaves, grad) in ops.items():
        f = make()
        compiled = torch.compile(f, fullgraph=True)
        yield f"{name} fwd+bwd, eager", lambda f=f, leaves=leaves, grad=grad: torch.autograd.grad(f(*leaves), leaves, grad)
        yield f"{name} fwd+bwd, compiled", lambda f=compiled, leaves=leaves, grad=grad: torch.autograd.grad(
            f(*leaves), leaves, grad)


def cases(groups, device):
    if "add" in groups:
        x, y = torch.randn(1 << 20, device=device), torch.randn(1 << 20, device=device)
        out = torch.empty_like(x)
        yield "add out", lambda: tritonkit.add(x, y, out=out)
        yield "add", lambda: tritonkit.add(x, y)
    if "softmax" in groups:
        m = torch.randn(1823, 781, device=device)
        yield "softmax", lambda: tritonkit.softmax(m, -1)
    if "attention" in groups:
        q, k, v = (torch.randn(4, 32, 1024, 128, device=device, dtype=torch.bfloat16) for _ in range(3))
        o, lse = A.attention_fwd(q, k, v, True)
        do = torch.randn_like(o)
        yield "attention (public, no grad)", lambda: tritonkit.attention(q, k, v, causal=True)
        yield "attention_fwd, descriptors", lambda: A.attention_fwd(q, k, v, True)
        yield "attention_fwd, pointers", lambda: A.attention_fwd(q, k, v, True, tma=False)
        yield "attention_bwd, descriptors", lambda: A.attention_bwd(do, q, k, v, o, lse, True)
        yield "attention_bwd, pointers", lambda: A.attention_bwd(do, q, k, v, o, lse, True, tma=False)
        yield from autograd_attention_cases("attention ", *(t.detach().requires_grad_() for t in (q, k, v)))
        yield from train_lm_attention_cases(device)
    if "norms" in groups:
        yield from norm_cases(device)
    if "gated" in groups:
        yield from gated_cases(device)
    if "compiled" in groups:
        yield from compiled_cases(device)
    if "autotuned" in groups and device.type == "cuda":  # the forward as users run it by default: autotuned (tunes first)
        q, k, v = (torch.randn(4, 32, 1024, 128, device=device, dtype=torch.bfloat16) for _ in range(3))
        os.environ["TRITONKIT_AUTOTUNE"] = "1"
        start = time.perf_counter()
        A.attention_fwd(q, k, v, True)
        torch.cuda.synchronize()
        print(f"autotuning the forward took {time.perf_counter() - start:.1f} s")
        yield "attention_fwd, autotuned", lambda: A.attention_fwd(q, k, v, True)


def main():
    args = sys.argv[1:]
    if "--gpu-overhead" in args:
        import host_overhead
        return host_overhead.main([a for a in args if a != "--gpu-overhead"])
    if {"-h", "--help"} & set(args):
        sys.exit(print(__doc__))
    on_cpu = "--cpu" in args or not torch.cuda.is_available()
    profile_calls = "--no-profile" not in args
    groups = [a for a in args if not a.startswith("--")] or ["add", "softmax", "attention"]
    device = torch.device("cpu" if on_cpu else "cuda")
    sync = torch.cuda.synchronize if not on_cpu else (lambda: None)
    # On the CPU nothing runs behind the call, so the thread's own CPU time is the call's
    # cost, and it leaves out the time other processes hold the core (a shared machine).
    clock = time.thread_time if on_cpu else time.perf_counter
    # On the CPU, launches are recorded and not run (the interpreter would time the kernels).
    recording = _launch.record_launches(execute=False) if on_cpu else contextlib.nullcontext()
    print("device:", device, "| launch hooks set:", _launch._launch_hooks_set())
    with recording as launches:
        for name, fn in cases(groups, device):
            for _ in range(50):
                fn()
            sync()
            best = float("inf")
            for _ in range(20):  # the least of 20 rounds of 100 calls: the host's own noise is large
                gc.collect()
                gc.disable()  # a collection that falls in one round and not another is noise too
                start = clock()
                for _ in range(100):
                    fn()
                best = min(best, (clock() - start) / 100 * 1e6)
                gc.enable()
                sync()
                if launches is not None:
                    launches.clear()  # a long list of recorded launches slows the garbage collector
            print(f"{name}: {best:.1f} us/call host")
            if not profile_calls:
                continue
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(200):
                fn()
            profile.disable()
            sync()
            if launches is not None:
                launches.clear()
            pstats.Stats(profile).sort_stats("tottime").print_stats(8)


if __name__ == "__main__":
    main()
