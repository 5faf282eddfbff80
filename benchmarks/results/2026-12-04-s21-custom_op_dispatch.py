"""Host time of one call through a torch custom op made by torch.library.custom_op against one
defined and implemented through torch.library.Library, on CPU tensors, the kernel an empty_like
(CPU only; what a compiled graph pays a tritonkit op call on top of its launcher).
    python3 benchmarks/results/2026-12-04-s21-custom_op_dispatch.py"""
import time, torch
def fn(x, w):
    return torch.empty_like(x)
lib = torch.library.Library("probe", "DEF")
lib.define("raw(Tensor x, Tensor w) -> Tensor")
lib.impl("raw", fn, "CPU")
lib.define("rawag(Tensor x, Tensor w) -> Tensor")
lib.impl("rawag", fn, "CompositeExplicitAutograd")
co = torch.library.custom_op("probe::co", fn, mutates_args=(), schema="(Tensor x, Tensor w) -> Tensor")
co.register_fake(lambda x, w: torch.empty_like(x))
co2 = torch.library.custom_op("probe::co2", fn, mutates_args=(), schema="(Tensor x, Tensor w) -> Tensor")
co2.register_fake(lambda x, w: torch.empty_like(x))
co2.register_autograd(lambda ctx, g: (g, None), setup_context=lambda ctx, i, o: None)
x = torch.randn(64, 256); w = torch.randn(256)
def t(f, n=20000):
    for _ in range(100): f()
    s = time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter() - s) / n * 1e6
print("python fn", t(lambda: fn(x, w)))
print("Library CPU impl", t(lambda: torch.ops.probe.raw.default(x, w)))
print("Library CompositeExplicitAutograd", t(lambda: torch.ops.probe.rawag.default(x, w)))
print("custom_op no autograd", t(lambda: torch.ops.probe.co.default(x, w)))
print("custom_op with autograd", t(lambda: torch.ops.probe.co2.default(x, w)))
with torch.no_grad():
    print("custom_op with autograd, no_grad", t(lambda: torch.ops.probe.co2.default(x, w)))
