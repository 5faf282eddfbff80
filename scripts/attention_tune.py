"""Time every attention tile config on the GPU beside SDPA's FA2 and cuDNN, in one process.

    PYTHONPATH=src python3 scripts/attention_tune.py [--shapes 4,32,32,4096,128,2 ...]
        [--extra] [--autotune] [--atomic]

Compiles all configs first in parallel worker processes (they fill Triton's on-disk cache),
then times each pass with each config (triton.testing.do_bench, median), the forward alone
and the whole backward (preprocess + dK/dV + dQ; one of the two kernels swept while the
other keeps its fixed config). --extra times the fixed configs on the other bench shapes;
--autotune runs the autotuned launchers once and prints what they chose.

--atomic instead studies the atomic-dQ backward (deterministic=False): on each of
ATOMIC_SHAPES (or --shapes) it times the whole backward (preprocess, zeroing, dK/dV with
atomic dQ, the final cast) in both of its ways of adding dQ, element-wise pointer atomics
and TMA bulk reductions (tma_dq=False / True), with a few dK/dV configs each (ATOMIC_STUDY),
each first checked against the deterministic backward, beside the deterministic backward
and SDPA's FA2 and cuDNN backward, and ends with a table. About 3 minutes on the H200.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time

os.environ.setdefault("TRITONKIT_AUTOTUNE", "0")

import tritonkit  # noqa: E402  (first: on a CPU it switches Triton to its interpreter)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton.testing  # noqa: E402
from tritonkit.ops import attention as A  # noqa: E402

DEVICE = tritonkit.default_device()  # a CPU dry run goes through the interpreter


def inputs(B, H, Hkv, N, D, seed=0):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    q = torch.randn(B, H, N, D, device=DEVICE, dtype=torch.bfloat16, generator=g)
    k = torch.randn(B, Hkv, N, D, device=DEVICE, dtype=torch.bfloat16, generator=g)
    v = torch.randn(B, Hkv, N, D, device=DEVICE, dtype=torch.bfloat16, generator=g)
    return q, k, v, torch.randn_like(q)


def tasks_for(D):
    block_d = A._block_d(D)
    prunes = {"fwd": A._prune_fwd, "dkdv": A._prune_dkdv, "dq": A._prune_dq}
    out = []
    for kind, prune in prunes.items():
        for c in prune([c.triton_config() for c in A.autotune_configs(kind)], {}, BLOCK_D=block_d):
            out.append((kind, A.TileConfig(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)))
    return out


def run_once(kind, cfg, causal, q, k, v, do, o=None, lse=None):
    if kind == "fwd":
        return A.attention_fwd(q, k, v, causal, config=cfg)
    if kind in ("dkdv_atomic", "dkdv_tma"):
        return A.attention_bwd(do, q, k, v, o, lse, causal, deterministic=False, dkdv_config=cfg,
                               tma_dq=kind == "dkdv_tma")
    return A.attention_bwd(do, q, k, v, o, lse, causal, **{f"{kind}_config": cfg})


def _compile_worker(job):
    shape, causal, kind, cfg = job
    B, H, Hkv, N, D = shape
    n = 1024 if N >= 2048 and N % 128 == 0 else N   # the same specialisation, less memory
    q, k, v, do = inputs(B, H, Hkv, n, D)
    try:
        o, lse = A.attention_fwd(q, k, v, causal)
        run_once(kind, cfg, causal, q, k, v, do, o, lse)
        if DEVICE.type == "cuda":
            torch.cuda.synchronize()
        return None
    except Exception as err:  # reported, and the config is skipped when timing
        return f"{kind} {cfg} causal={causal}: {type(err).__name__}: {str(err)[:200]}"


def precompile(jobs, workers):
    start = time.time()
    with mp.get_context("spawn").Pool(workers) as pool:
        errors = [e for e in pool.map(_compile_worker, jobs) if e]
    print(f"compiled {len(jobs)} variants in {time.time() - start:.0f}s with {workers} workers")
    for e in errors:
        print("  compile failed:", e)


def bench(fn):
    if DEVICE.type != "cuda":
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")


def flops(B, H, N, D, causal, backward):
    return 4 * B * H * N * N * D * (0.5 if causal else 1) * (2.5 if backward else 1)


def peers(q, k, v, do, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    found = {}
    if DEVICE.type != "cuda":
        return found
    for name, backend in (("FA2", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                gqa = q.shape[1] != k.shape[1]
                fwd = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa))
                leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                out = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=gqa)
                bwd = bench(lambda: torch.autograd.grad(out, leaves, do, retain_graph=True))
            found[name] = (fwd, bwd)
        except Exception as err:
            print(f"  {name}: {type(err).__name__}: {str(err).splitlines()[0][:100]}")
    return found


def sweep(shape, causal):
    """Time every config of every pass, and check each against the fixed config's result."""
    B, H, Hkv, N, D = shape
    q, k, v, do = inputs(B, H, Hkv, N, D)
    fixed = A.fixed_configs(A._block_d(D))
    o, lse = A.attention_fwd(q, k, v, causal)
    want = {"fwd": (o,), "dkdv": A.attention_bwd(do, q, k, v, o, lse, causal)[1:],
            "dq": A.attention_bwd(do, q, k, v, o, lse, causal)[:1]}
    ff, fb = flops(B, H, N, D, causal, False), flops(B, H, N, D, causal, True)
    rows, wrong = [], []
    for kind, cfg in tasks_for(D):
        try:
            got = run_once(kind, cfg, causal, q, k, v, do, o, lse)
            got = (got[0],) if kind == "fwd" else got[1:] if kind == "dkdv" else got[:1]
            err = max(((a.float() - b.float()).norm() / b.float().norm()).item() for a, b in zip(got, want[kind]))
            if not err < 2e-2:
                wrong.append(f"{kind} {cfg}: relative difference {err:.2e} from the fixed config")
            ms = bench(lambda: run_once(kind, cfg, causal, q, k, v, do, o, lse))
        except Exception as err:
            print(f"  {kind} {cfg}: {type(err).__name__}")
            continue
        rows.append((kind, cfg, ms, (ff if kind == "fwd" else fb) / ms / 1e9))
    label = f"B={B} H={H}/{Hkv} N={N} D={D} {'causal' if causal else 'full'}"
    print(f"\n== {label}: {len(rows)} configs timed, {len(wrong)} disagree with the fixed config")
    for line in wrong:
        print("  WRONG", line)
    for kind in ("fwd", "dkdv", "dq"):
        mine = sorted((r for r in rows if r[0] == kind), key=lambda r: r[2])
        unit = "fwd" if kind == "fwd" else "whole bwd"
        for kind_, cfg, ms, tf in mine[:4]:
            mark = " (fixed)" if cfg == fixed[kind] else ""
            print(f"  {kind:5} {cfg.block_m:4} {cfg.block_n:4} w{cfg.num_warps} s{cfg.num_stages}  "
                  f"{ms:7.3f} ms  {tf:6.1f} TFLOP/s ({unit}){mark}")
        fixed_row = [r for r in mine if r[1] == fixed[kind]]
        if fixed_row and fixed_row[0] not in mine[:4]:
            print(f"  {kind:5} fixed {fixed[kind]}: {fixed_row[0][2]:.3f} ms {fixed_row[0][3]:.1f} TFLOP/s")
    for name, (fwd, bwd) in peers(q, k, v, do, causal).items():
        print(f"  peer {name:6} fwd {fwd:7.3f} ms {ff / fwd / 1e9:6.1f} TFLOP/s   "
              f"bwd {bwd:7.3f} ms {fb / bwd / 1e9:6.1f} TFLOP/s")


# The atomic study: bench shapes (B, H, Hkv, N, D), causal; and the dK/dV configs to try per
# head-dim block and way of adding dQ, after the fixed config. Chosen from sm_90 builds
# (ptxas, triton 3.6; notes/attention.md): no or small spills, shared memory within 227 KB.
# Pointer atomics: 64x128 w8 s3 was best in the first GPU run, the rest within a few percent.
ATOMIC_SHAPES = [((4, 32, 32, 4096, 64), False), ((4, 32, 32, 4096, 128), False),
                 ((4, 32, 32, 4096, 128), True), ((4, 16, 16, 4096, 256), False),
                 ((4, 32, 8, 4096, 128), False), ((4, 32, 32, 16384, 128), True)]
ATOMIC_STUDY = {
    "dkdv_atomic": {64: [(64, 128, 8, 3), (64, 64, 8, 3)], 128: [(64, 128, 8, 3), (64, 64, 8, 3)],
                    256: [(32, 64, 8, 2), (32, 64, 8, 3)]},
    "dkdv_tma": {64: [(64, 128, 8, 3), (64, 64, 8, 3), (32, 128, 8, 3)],
                 128: [(64, 128, 8, 3), (64, 128, 8, 2), (64, 64, 8, 3), (32, 128, 8, 3)],
                 256: [(32, 64, 8, 2)]},
}
MODES = {"dkdv_atomic": "pointer", "dkdv_tma": "tma"}


def study_configs(kind, D):
    block_d = A._block_d(D)
    fixed = A.fixed_configs(block_d)[kind]
    tried = next(cfgs for bd, cfgs in sorted(ATOMIC_STUDY[kind].items()) if block_d <= bd)
    return [fixed, *(c for c in (A.TileConfig(*t) for t in tried) if c != fixed)]


def rel_diff(got, want):
    return max(((a.float() - b.float()).norm() / b.float().norm()).item() for a, b in zip(got, want))


def atomic_case(shape, causal):
    """The atomic backward per way and config, checked against the deterministic one, beside
    it and SDPA."""
    B, H, Hkv, N, D = shape
    q, k, v, do = inputs(B, H, Hkv, N, D)
    fb = flops(B, H, N, D, causal, True)
    o, lse = A.attention_fwd(q, k, v, causal)
    want = A.attention_bwd(do, q, k, v, o, lse, causal)
    label = f"B={B} H={H}/{Hkv} N={N} D={D} {'causal' if causal else 'full'}"
    print(f"\n== {label}")
    rates = {"deterministic": fb / bench(lambda: A.attention_bwd(do, q, k, v, o, lse, causal)) / 1e9}
    print(f"  deterministic (fixed configs)        {rates['deterministic']:6.1f} TFLOP/s")
    best_names = {}
    for kind, mode in MODES.items():
        fixed = A.fixed_configs(A._block_d(D))[kind]
        timed = []
        for cfg in study_configs(kind, D):
            name = f"{cfg.block_m}x{cfg.block_n} w{cfg.num_warps} s{cfg.num_stages}"
            try:
                err = rel_diff(run_once(kind, cfg, causal, q, k, v, do, o, lse), want)
                if not err < 2e-2:
                    print(f"  {mode:7} {name:16} WRONG: relative difference {err:.2e} from the deterministic backward")
                    continue
                tf = fb / bench(lambda: run_once(kind, cfg, causal, q, k, v, do, o, lse)) / 1e9
            except Exception as err:
                print(f"  {mode:7} {name:16} failed: {type(err).__name__}: {str(err).splitlines()[0][:100]}")
                continue
            timed.append((tf, name, cfg == fixed))
            print(f"  {mode:7} {name:16} {'(fixed)' if cfg == fixed else '':9}  {tf:6.1f} TFLOP/s  "
                  f"(difference from deterministic {err:.1e})")
        best = max(timed, default=None)
        rates[f"{mode} fixed"] = next((tf for tf, _, is_fixed in timed if is_fixed), None)
        rates[f"{mode} best"] = best[0] if best else None
        best_names[mode] = best[1] if best else "-"
    for peer, (_, bwd) in peers(q, k, v, do, causal).items():
        rates[peer] = fb / bwd / 1e9
        print(f"  SDPA {peer:6} backward                  {rates[peer]:6.1f} TFLOP/s")
    return label, rates, best_names


def atomic_study(cases, workers):
    jobs = {}  # one compile per specialisation: N only matters through its divisibility
    for s, c in cases:
        kinds = [(kind, cfg) for kind in MODES for cfg in study_configs(kind, s[4])]
        kinds += [(kind, cfg) for kind, cfg in A.fixed_configs(A._block_d(s[4])).items() if kind not in MODES]
        for kind, cfg in kinds:
            jobs.setdefault((s[:3], s[4], c, kind, cfg), (s, c, kind, cfg))
    if DEVICE.type == "cuda":
        precompile(list(jobs.values()), workers)
    start = time.time()
    rows = [atomic_case(s, c) for s, c in cases]
    cols = ["deterministic", "pointer best", "tma fixed", "tma best", "FA2", "cuDNN"]
    print(f"\nAtomic-dQ backward, bf16, TFLOP/s (2.5 x 4*B*H*N^2*D, half when causal); "
          f"timed in {time.time() - start:.0f}s")
    print(f"{'case':<34}" + "".join(f"{c:>14}" for c in cols) + f"{'tma/det':>9}{'tma/ptr':>9}{'tma/cuDNN':>10}"
          + "  best pointer / tma config")
    for label, rates, names in rows:
        cells = "".join(f"{rates[c]:>14.1f}" if rates.get(c) else f"{'-':>14}" for c in cols)
        tma = rates.get("tma best")
        ratios = "".join(f"{tma / rates[c]:>{w}.2f}" if tma and rates.get(c) else f"{'-':>{w}}"
                         for c, w in (("deterministic", 9), ("pointer best", 9), ("cuDNN", 10)))
        print(f"{label:<34}{cells}{ratios}  {names['pointer']} / {names['tma']}")


def fixed_case(shape, causal):
    B, H, Hkv, N, D = shape
    q, k, v, do = inputs(B, H, Hkv, N, D)
    ff, fb = flops(B, H, N, D, causal, False), flops(B, H, N, D, causal, True)
    fwd = bench(lambda: A.attention_fwd(q, k, v, causal))
    o, lse = A.attention_fwd(q, k, v, causal)
    bwd = bench(lambda: A.attention_bwd(do, q, k, v, o, lse, causal))
    label = f"B={B} H={H}/{Hkv} N={N} D={D} {'causal' if causal else 'full'}"
    line = f"{label:<36} tritonkit fwd {ff / fwd / 1e9:6.1f} bwd {fb / bwd / 1e9:6.1f}"
    for name, (pf, pb) in peers(q, k, v, do, causal).items():
        line += f" | {name} fwd {ff / pf / 1e9:6.1f} bwd {fb / pb / 1e9:6.1f}"
    print(line + "  (TFLOP/s)")


def autotuned(shape, causal):
    os.environ["TRITONKIT_AUTOTUNE"] = "1"
    B, H, Hkv, N, D = shape
    q, k, v, do = inputs(B, H, Hkv, N, D)
    start = time.time()
    o, lse = A.attention_fwd(q, k, v, causal)
    A.attention_bwd(do, q, k, v, o, lse, causal)
    torch.cuda.synchronize()
    print(f"\nautotuned {shape} causal={causal}: tuned in {time.time() - start:.0f}s; chose "
          f"fwd {A._attn_fwd_tuned.best_config}, dkdv {A._attn_bwd_dkdv_tuned.best_config}, "
          f"dq {A._attn_bwd_dq_tuned.best_config}")
    fixed_case(shape, causal)
    os.environ["TRITONKIT_AUTOTUNE"] = "0"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", nargs="+", metavar="B,H,Hkv,N,D,C",
                        help="shapes to sweep every config on (default 4,32,32,4096,128,2), or with "
                             "--atomic the shapes to study (default ATOMIC_SHAPES); C: 0 full, 1 causal, 2 both")
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument("--extra", action="store_true")
    parser.add_argument("--autotune", action="store_true")
    parser.add_argument("--atomic", action="store_true", help="study the atomic-dQ backward only")
    parser.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    args = parser.parse_args()
    parsed = [tuple(int(x) for x in s.split(",")) for s in args.shapes or ["4,32,32,4096,128,2"]]
    shapes = [p[:5] for p in parsed]
    causals = [{0: (False,), 1: (True,), 2: (False, True)}[p[5] if len(p) > 5 else 2] for p in parsed]
    if args.atomic:
        atomic_study([(s, c) for s, cs in zip(shapes, causals) for c in cs] if args.shapes else ATOMIC_SHAPES,
                     args.workers)
        return 0
    extra = [((4, 32, 32, 4096, 64), False), ((4, 32, 32, 16384, 64), True), ((4, 16, 16, 4096, 256), False),
             ((4, 32, 8, 4096, 128), False), ((4, 32, 32, 16384, 128), True), ((4, 32, 32, 16384, 128), False)]
    jobs = []
    if not args.no_sweep:
        jobs += [(s, c, kind, cfg) for s, cs in zip(shapes, causals) for c in cs for kind, cfg in tasks_for(s[4])]
    if args.extra:
        for s, c in extra:
            fixed = A.fixed_configs(A._block_d(s[4]))
            jobs += [(s, c, "dkdv", fixed["dkdv"])]
    if jobs:
        precompile(jobs, args.workers)
    if not args.no_sweep:
        for s, cs in zip(shapes, causals):
            for causal in cs:
                sweep(s, causal)
    if args.extra:
        print()
        for s, c in extra:
            fixed_case(s, c)
    if args.autotune:
        autotuned(shapes[0], False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
