"""Host time per call of tritonkit.add (with and without out=) and softmax on a GPU, with a
cProfile of each (developer tool): PYTHONPATH=src python3 scripts/host_profile.py"""
import time, torch, tritonkit, cProfile, pstats
from tritonkit import _launch
x = torch.randn(1 << 20, device="cuda"); y = torch.randn(1 << 20, device="cuda"); out = torch.empty_like(x)
m = torch.randn(1823, 781, device="cuda")
print("launch hooks set:", _launch._launch_hooks_set())
for name, fn in [("add out", lambda: tritonkit.add(x, y, out=out)), ("add", lambda: tritonkit.add(x, y)),
                 ("softmax", lambda: tritonkit.softmax(m, -1))]:
    for _ in range(100): fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(1000): fn()
    el = (time.perf_counter() - t) / 1000 * 1e6
    torch.cuda.synchronize()
    print(name, f"{el:.1f} us/call host")
    p = cProfile.Profile(); p.enable()
    for _ in range(1000): fn()
    p.disable(); torch.cuda.synchronize()
    pstats.Stats(p).sort_stats("tottime").print_stats(10)
from tritonkit.ops import add as add_mod
for k in (_launch._cache_of(add_mod._add_kernel),):
    print("cached keys:", len(k.compiled), "layouts:", list(k.layouts.values())[:3])
