"""Forward+backward host time of a probe op (kernels: empty_like) on CPU tensors, four ways: a
torch.library.custom_op with register_autograd (tritonkit's scaffold), plain torch.library.Library ops
differentiated by an autograd.Function, each eager and from a torch.compile(fullgraph=True) region.
    python3 benchmarks/results/2026-12-04-s21-function_over_library_ops.py"""
import time, torch
def fwd(x, w):
    return torch.empty_like(x)
def bwd(g, x, w):
    return torch.empty_like(x), torch.empty_like(w)
# 1: custom_op with register_autograd (tritonkit's scaffold today)
f_co = torch.library.custom_op("probe::f", fwd, mutates_args=(), schema="(Tensor x, Tensor w) -> Tensor")
f_co.register_fake(lambda x, w: torch.empty_like(x))
b_co = torch.library.custom_op("probe::b", bwd, mutates_args=(), schema="(Tensor g, Tensor x, Tensor w) -> (Tensor, Tensor)")
b_co.register_fake(lambda g, x, w: (torch.empty_like(x), torch.empty_like(w)))
def setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)
def backward(ctx, g):
    x, w = ctx.saved_tensors
    return tuple(b_co(g, x, w))
f_co.register_autograd(backward, setup_context=setup)
# 2: plain Library ops (no Autograd kernel), differentiated by an autograd.Function
lib = torch.library.Library("probe2", "DEF")
lib.define("f(Tensor x, Tensor w) -> Tensor"); lib.impl("f", fwd, "CPU")
lib.define("b(Tensor g, Tensor x, Tensor w) -> (Tensor, Tensor)"); lib.impl("b", bwd, "CPU")
torch.library.register_fake("probe2::f", lambda x, w: torch.empty_like(x))
torch.library.register_fake("probe2::b", lambda g, x, w: (torch.empty_like(x), torch.empty_like(w)))
class Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return torch.ops.probe2.f(x, w)
    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return tuple(torch.ops.probe2.b(g, x, w))
x = torch.randn(64, 256, requires_grad=True); w = torch.randn(256, requires_grad=True); dy = torch.randn(64, 256)
def t(f, n=3000):
    for _ in range(50): f()
    s = time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter() - s) / n * 1e6
c1 = torch.compile(lambda a, b: f_co(a, b), fullgraph=True)
c2 = torch.compile(lambda a, b: Fn.apply(a, b), fullgraph=True)
print("eager custom_op", t(lambda: torch.autograd.grad(f_co(x, w), (x, w), dy)))
print("eager Function", t(lambda: torch.autograd.grad(Fn.apply(x, w), (x, w), dy)))
print("compiled custom_op", t(lambda: torch.autograd.grad(c1(x, w), (x, w), dy)))
print("compiled Function over Library ops", t(lambda: torch.autograd.grad(c2(x, w), (x, w), dy)))
