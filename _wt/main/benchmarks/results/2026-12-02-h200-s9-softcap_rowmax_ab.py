"""A/B of the Gluon forward's softcapped softmax step: the row maximum taken on the tanh'd
scores (main at e0fe0c3, the "old" module) against the maximum of the raw scores with one tanh
a row (`2026-12-02-h200-s9-softcap_rowmax.patch`, applied to the working tree). Both launched
through their module's `attention_fwd_gluon`, alternately, in one process; also the plain
(no-softcap) rate of the patched kernel, the bar's yardstick. As run:

    git show e0fe0c3:src/tritonkit/gluon/attention_fwd.py | sed -e 's/^from \.common/from tritonkit.gluon.common/' \
        -e 's/^from \.\.\([a-z_.]*\) import/from tritonkit.\1 import/' \
        -e 's/^from \.\([a-z_]*\) import/from tritonkit.gluon.\1 import/' \
        > benchmarks/results/2026-12-02-h200-s9-softcap_rowmax_old_fwd.py
    git apply benchmarks/results/2026-12-02-h200-s9-softcap_rowmax.patch
    PYTHONPATH=src:benchmarks/results python3 benchmarks/results/2026-12-02-h200-s9-softcap_rowmax_ab.py

Result (`-s9-call1-softcap_rowmax_ab.txt`): 0.94-1.02x, no gain; the patch was not kept.
"""
import importlib
import statistics

import torch
import triton

from tritonkit.gluon import attention_fwd as new_fwd

old_fwd = importlib.import_module("2026-12-02-h200-s9-softcap_rowmax_old_fwd")

CASES = [  # B, H, Hkv, N, D, causal
    (4, 32, 8, 4096, 128, True), (4, 32, 8, 4096, 128, False), (4, 32, 8, 16384, 128, True),
    (4, 32, 8, 4096, 64, True), (4, 16, 16, 4096, 256, True), (8, 16, 16, 1024, 64, True),
]


def run(mod, q, k, v, causal, softcap):
    o, lse = torch.empty_like(q), torch.empty(q.shape[:3], device=q.device)
    fn = lambda: mod.attention_fwd_gluon(q, k, v, o, lse, causal, q.shape[-1] ** -0.5, softcap)
    fn()
    return fn, o, lse


def main():
    print(f"torch {torch.__version__} triton {triton.__version__} {torch.cuda.get_device_name()}")
    print("B H/Hkv N D causal | softcap 50: old new new/old | plain | new-softcap/plain | max|o_new-o_old| max|lse diff|")
    for B, H, Hkv, N, D, causal in CASES:
        torch.manual_seed(0)
        q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16) * 2
        k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16) * 2 for _ in range(2))
        flops = 4 * B * H * N * N * D * (0.5 if causal else 1.0)
        f_old, o_old, l_old = run(old_fwd, q, k, v, causal, 50.0)
        f_new, o_new, l_new = run(new_fwd, q, k, v, causal, 50.0)
        f_plain, _, _ = run(new_fwd, q, k, v, causal, 0.0)
        torch.cuda.synchronize()
        do = (o_new.float() - o_old.float()).abs().max().item()
        dl = (l_new - l_old).abs().max().item()
        t = {"old": [], "new": [], "plain": []}
        for _ in range(3):
            for name, fn in (("old", f_old), ("new", f_new), ("plain", f_plain)):
                t[name].append(triton.testing.do_bench(fn, warmup=10, rep=80, return_mode="median"))
        tf = {n: flops / statistics.median(v) / 1e9 for n, v in t.items()}
        print(f"{B} {H}/{Hkv} {N} {D} {causal} | {tf['old']:.0f} {tf['new']:.0f} {tf['new'] / tf['old']:.3f} | "
              f"{tf['plain']:.0f} | {tf['old'] / tf['plain']:.3f} -> {tf['new'] / tf['plain']:.3f} | {do:.1e} {dl:.1e}",
              flush=True)


if __name__ == "__main__":
    main()
