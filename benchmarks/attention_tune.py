"""Time every attention tile config on the GPU beside SDPA's FA2 and cuDNN, in one process.

    PYTHONPATH=src python3 benchmarks/attention_tune.py [--shapes 4,32,32,4096,128,2 ...]
        [--extra] [--autotune]

Compiles all configs first in parallel worker processes (they fill Triton's on-disk cache),
then times each pass with each config (triton.testing.do_bench, median), the forward alone
and the whole backward (preprocess + dK/dV + dQ; one of the two kernels swept while the
other keeps its fixed config). --extra times the fixed configs on the other bench shapes;
--autotune runs the autotuned launchers once and prints what they chose.

--tma (alone, or with the others): the forward through pointers and through tensor
descriptors (TMA), over a few configs each, on the bench shapes (D=64, D=128 at
N=4096 and 16384 full and causal, D=256 with 16 heads, GQA 32 over 8 heads, and packed qkv),
each config checked against SDPA, beside SDPA's FA2 and cuDNN; ends with a table.
    PYTHONPATH=src python3 benchmarks/attention_tune.py --tma

--bwd-paths: the whole backward (fixed configs) with its streamed tiles through pointers and
through tensor descriptors, on the backward's bench shapes, beside SDPA's FA2 and cuDNN.
--kinds dkdv,dq limits the config sweep to those passes. --bwd-streams: the whole backward
with the dQ pass on a side stream (concurrent with dK/dV, the default) and after it.
--bwd-kernels: each backward kernel timed alone (preprocess, dK/dV, dQ), with the block
products each performs counted as its flops, to tell which pass a shortfall sits in.
    PYTHONPATH=src python3 benchmarks/attention_tune.py --bwd-paths --kinds dkdv,dq
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import sys
import time

os.environ.setdefault("TRITONKIT_AUTOTUNE", "0")

import tritonkit  # noqa: E402  (first: on a CPU it switches Triton to its interpreter)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton.testing  # noqa: E402
from tritonkit._launch import record_launches  # noqa: E402
from tritonkit.ops import attention as A  # noqa: E402
from tritonkit.registry.attention import packed_qkv  # noqa: E402

DEVICE = tritonkit.default_device()  # a CPU dry run goes through the interpreter


def inputs(B, H, Hkv, N, D, seed=0):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    q = torch.randn(B, H, N, D, device=DEVICE, dtype=torch.bfloat16, generator=g)
    k = torch.randn(B, Hkv, N, D, device=DEVICE, dtype=torch.bfloat16, generator=g)
    v = torch.randn(B, Hkv, N, D, device=DEVICE, dtype=torch.bfloat16, generator=g)
    return q, k, v, torch.randn_like(q)


KINDS = ("fwd", "dkdv", "dq")  # the passes the config sweep covers (--kinds)


def tasks_for(D):
    prunes = {"fwd": A._prune_fwd, "dkdv": A._prune_dkdv, "dq": A._prune_dq}
    flags = dict(HEAD=A.head_tiles(D, D), SCORE=A.score_of(True, -1, -1, 0.0, 1, 1))
    out = []
    for kind, prune in prunes.items():
        if kind not in KINDS:
            continue
        for c in prune([c.triton_config() for c in A.autotune_configs(kind)], {}, **flags):
            out.append((kind, A.TileConfig(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)))
    return out


def run_once(kind, cfg, causal, q, k, v, do, o=None, lse=None):
    if kind == "fwd":
        return A.attention_fwd(q, k, v, causal, config=cfg)
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


def precompile(jobs, workers, worker=_compile_worker):
    start = time.time()
    with mp.get_context("spawn").Pool(workers) as pool:
        errors = [e for e in pool.map(worker, jobs) if e]
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


# ---------------------------------------------------------------------------------------
# --bwd-paths: the backward's pointer and tensor-descriptor paths side by side
# ---------------------------------------------------------------------------------------

BWD_CASES = [  # (label, (B, H, Hkv, N, D), causal): the backward's bars in issue 4
    ("D=64 N=4096", (4, 32, 32, 4096, 64), False),
    ("D=64 N=16384 causal", (4, 32, 32, 16384, 64), True),
    ("D=128 N=4096", (4, 32, 32, 4096, 128), False),
    ("D=128 N=4096 causal", (4, 32, 32, 4096, 128), True),
    ("D=128 N=16384", (4, 32, 32, 16384, 128), False),
    ("D=128 N=16384 causal", (4, 32, 32, 16384, 128), True),
    ("D=256 N=4096 H=16", (4, 16, 16, 4096, 256), False),
    ("D=128 N=4096 GQA32/8", (4, 32, 8, 4096, 128), False),
    ("train config A layer", (4, 16, 8, 2048, 128), True),   # `tritonkit bench train`'s attention
    ("train config B layer", (1, 16, 8, 8192, 128), True),
]


def bwd_cases():
    """(label, causal, backward flops, q, k, v, do, o, lse) of each BWD_CASES case (small
    shapes through the interpreter on a CPU dry run)."""
    for label, shape, causal in BWD_CASES:
        B, H, Hkv, N, D = shape if DEVICE.type == "cuda" else TMA_SMALL + shape[4:]
        q, k, v, do = inputs(B, H, Hkv, N, D)
        yield (label, causal, flops(B, H, N, D, causal, True), q, k, v, do, *A.attention_fwd(q, k, v, causal))


def bwd_paths():
    table = []
    for label, causal, work, q, k, v, do, o, lse in bwd_cases():
        got, tf = {}, {}
        real_tma_ok = A._tma_ok
        for path in ("pointer", "tma", "tma dkdv only", "tma dq only"):
            # One pass through descriptors, the other through pointers: the launcher asks
            # _tma_ok about (q, do) for dK/dV and about (k, v) for dQ.
            only = path.split()[1] if path.startswith("tma ") else None
            A._tma_ok = lambda *ts: real_tma_ok(*ts) and (only is None or (ts[0] is k) == (only == "dq"))
            run = lambda: A.attention_bwd(do, q, k, v, o, lse, causal, tma=None if path != "pointer" else False)
            try:
                got[path] = run()
                tf[path] = work / bench(run) / 1e9
            except Exception as e:
                print(f"  {label} {path}: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
            finally:
                A._tma_ok = real_tma_ok
        diff = "-"
        if "tma" in got and "pointer" in got:
            diff = f"{max(((a.float() - b.float()).norm() / b.float().norm()).item() for a, b in zip(got['tma'], got['pointer'])):.1e}"
        peer = {name: work / times[1] / 1e9 for name, times in peers(q, k, v, do, causal).items()}
        table.append((label, tf, peer, diff))
        text = lambda x: f"{x:.1f}" if x is not None else "-"
        print(f"{label:<22} pointer {text(tf.get('pointer')):>6}  tma {text(tf.get('tma')):>6}  "
              f"dkdv-only {text(tf.get('tma dkdv only')):>6}  dq-only {text(tf.get('tma dq only')):>6}  "
              f"FA2 {text(peer.get('FA2')):>6}  cuDNN {text(peer.get('cuDNN')):>6}  tma vs pointer diff {diff}")
        del q, k, v, do, o, lse, got
    print("\nbackward TFLOP/s (2.5 x 4*B*H*N^2*D / time, half when causal; bf16; fixed configs)")
    print(f"{'case':<22} {'pointer':>8} {'TMA':>8} {'dkdv TMA':>8} {'dq TMA':>8} {'FA2':>7} {'cuDNN':>7} "
          f"{'TMA/ptr':>8} {'TMA/cuDNN':>9} {'TMA/FA2':>8}")
    for label, tf, peer, diff in table:
        ratio = lambda a, b: f"{a / b:.2f}" if a and b else "-"
        text = lambda x: f"{x:.1f}" if x is not None else "-"
        t = tf.get("tma")
        print(f"{label:<22} {text(tf.get('pointer')):>8} {text(t):>8} {text(tf.get('tma dkdv only')):>8} "
              f"{text(tf.get('tma dq only')):>8} {text(peer.get('FA2')):>7} "
              f"{text(peer.get('cuDNN')):>7} {ratio(t, tf.get('pointer')):>8} {ratio(t, peer.get('cuDNN')):>9} "
              f"{ratio(t, peer.get('FA2')):>8}")


def bwd_kernels():
    """Each kernel of the backward timed alone, then the whole backward. A kernel's TFLOP/s
    counts the block products it performs: dK/dV 4 a tile (S^T, dV, dP^T, dK), dQ 3 (S, dP,
    dQ), each 2*Nq*Nk*D a head (half when causal): 7 in all, against the 5 that the whole
    backward's 2.5x convention counts. (Run it with PYTHONPATH at another source tree to
    compare two versions of the kernels in one GPU call.)"""
    print("\nbackward kernels alone, fixed configs: ms, and TFLOP/s of the products each performs")
    for label, causal, work, q, k, v, do, o, lse in bwd_cases():
        product = work / 2.5 / 2  # one N x N x D product over every head (halved when causal)
        products = {"attention_bwd_dkdv": 4, "attention_bwd_dq": 3}
        with record_launches() as launches:
            A.attention_bwd(do, q, k, v, o, lse, causal)
        cells = []
        for launch in launches:
            ms = bench(launch)
            rate = f" {products[launch.name] * product / ms / 1e9:6.1f} TFLOP/s" if launch.name in products else ""
            cells.append(f"{launch.name.removeprefix('attention_bwd_')} {ms:7.3f} ms{rate}")
        whole = work / bench(lambda: A.attention_bwd(do, q, k, v, o, lse, causal)) / 1e9
        print(f"{label:<22} " + " | ".join(cells) + f" | whole {whole:6.1f} TFLOP/s")
        del q, k, v, do, o, lse, launches


def bwd_streams():
    """The whole backward with dQ launched beside dK/dV (concurrent_dq=True) and after it."""
    print("\nbackward TFLOP/s, dQ on a side stream (concurrent) and after dK/dV (sequential), fixed configs")
    for label, causal, work, q, k, v, do, o, lse in bwd_cases():
        got, tf = {}, {}
        for mode in (True, False):
            run = lambda: A.attention_bwd(do, q, k, v, o, lse, causal, concurrent_dq=mode)
            got[mode] = run()
            tf[mode] = work / bench(run) / 1e9
        same = all(torch.equal(a, b) for a, b in zip(got[True], got[False]))
        print(f"{label:<22} concurrent {tf[True]:6.1f}  sequential {tf[False]:6.1f}  ratio {tf[True] / tf[False]:.3f}"
              f"  bitwise equal: {same}")
        del q, k, v, do, o, lse, got


# ---------------------------------------------------------------------------------------
# --tma: the forward's pointer and tensor-descriptor paths side by side
# ---------------------------------------------------------------------------------------

# (label, (B, H, Hkv, N, D), causal, layout): the bench shapes of notes/attention.md
TMA_CASES = [
    ("D=64 N=4096", (4, 32, 32, 4096, 64), False, "bhnd"),
    ("D=64 N=16384 causal", (4, 32, 32, 16384, 64), True, "bhnd"),
    ("D=128 N=2048", (4, 32, 32, 2048, 128), False, "bhnd"),
    ("D=128 N=4096", (4, 32, 32, 4096, 128), False, "bhnd"),
    ("D=128 N=8192", (4, 32, 32, 8192, 128), False, "bhnd"),
    ("D=128 N=4096 causal", (4, 32, 32, 4096, 128), True, "bhnd"),
    ("D=128 N=16384", (4, 32, 32, 16384, 128), False, "bhnd"),
    ("D=128 N=16384 causal", (4, 32, 32, 16384, 128), True, "bhnd"),
    ("D=256 N=4096 H=16", (4, 16, 16, 4096, 256), False, "bhnd"),
    ("D=128 N=4096 GQA32/8", (4, 32, 8, 4096, 128), False, "bhnd"),
    ("D=128 N=4096 packed qkv", (4, 32, 32, 4096, 128), False, "packed"),
]
TMA_SMALL = (1, 2, 2, 64)  # B, H, Hkv, N for a dry run through the interpreter (no GPU)


def tma_candidates(D, layout):
    """(path, config) pairs: the pointer path's fixed config; the TMA path's fixed config and
    the next few its tuner keeps. (Warp-specialized configs were tried here on 2026-11-29 and
    gave wrong results on the H200: notes/attention_tma.md.)"""
    block_d = A._block_d(D)
    with record_launches(execute=False):  # the GPU's configs, also on a CPU dry run
        fixed = A.fixed_configs(block_d)
        kept = A._prune_fwd(A._attn_fwd_tuned.configs, {}, HEAD=A.head_tiles(D, D), USE_TMA=True,
                            SCORE=A.score_of(True, -1, -1, 0.0, 1, 1))
    tma = [A.TileConfig(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) for c in kept]
    if layout == "packed":  # a layout check: the fixed configs only
        return [("pointer", fixed["fwd"]), ("tma", fixed["fwd_tma"])]
    return [("pointer", fixed["fwd"])] + [("tma", c) for c in tma if c.num_stages < 4 or c == fixed["fwd_tma"]]


def tma_inputs(shape, layout):
    B, H, Hkv, N, D = shape
    if layout == "packed":  # views into one (B, N, 3, H, D) projection, as a model makes them
        return packed_qkv(B, H, N, D, torch.bfloat16, DEVICE)
    return inputs(B, H, Hkv, N, D)[:3]


def _compile_fwd_worker(job):
    shape, causal, layout, path, cfg = job
    B, H, Hkv, N, D = shape
    q, k, v = tma_inputs((B, H, Hkv, N, D), layout)
    try:
        A.attention_fwd(q, k, v, causal, config=cfg, tma=path != "pointer")
        if DEVICE.type == "cuda":
            torch.cuda.synchronize()
        return None
    except Exception as err:  # reported, and the config is skipped when timing
        return f"{path} {cfg} D={D} causal={causal}: {type(err).__name__}: {str(err)[:200]}"


def _fwd_peer_times(q, k, v, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    found = {}
    if DEVICE.type != "cuda":
        return found
    gqa = q.shape[1] != k.shape[1]
    for name, backend in (("FA2", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                found[name] = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa))
        except Exception as err:
            print(f"  {name}: {type(err).__name__}: {str(err).splitlines()[0][:100]}")
    return found


def tma_sweep(workers):
    on_gpu = DEVICE.type == "cuda"
    cases = [(label, shape if on_gpu else TMA_SMALL + shape[4:], causal, layout)
             for label, shape, causal, layout in TMA_CASES]
    if on_gpu:
        jobs = list(dict.fromkeys(  # N=4096 and 16384 compile alike (the worker uses N=1024)
            (shape[:3] + (min(shape[3], 1024),) + shape[4:], causal, layout, path, cfg)
            for _, shape, causal, layout in cases for path, cfg in tma_candidates(shape[4], layout)))
        precompile(jobs, workers, _compile_fwd_worker)
    table = []
    for label, shape, causal, layout in cases:
        B, H, Hkv, N, D = shape
        q, k, v = tma_inputs(shape, layout)
        want = _sdpa(q, k, v, causal).float()
        work = flops(B, H, N, D, causal, False)
        print(f"\n== {label}: B={B} H={H}/{Hkv} N={N} D={D}{' causal' if causal else ''} ({layout}); "
              f"TMA allowed: {A._tma_ok(q, k, v)}")
        best = {}
        for path, cfg in tma_candidates(D, layout):
            name = f"{path:7} {_tile_text(cfg)}"
            try:
                out, _ = A.attention_fwd(q, k, v, causal, config=cfg, tma=path != "pointer")
                err = ((out.float() - want).norm() / want.norm()).item()
                if not err < 2e-2:
                    print(f"  {name}  WRONG: relative error {err:.2e} against SDPA; not timed")
                    continue
                ms = bench(lambda: A.attention_fwd(q, k, v, causal, config=cfg, tma=path != "pointer"))
            except Exception as e:
                print(f"  {name}  {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
                continue
            tf = work / ms / 1e9
            print(f"  {name}  err {err:.1e}  {ms:8.3f} ms  {tf:6.1f} TFLOP/s")
            if path not in best or tf > best[path][1]:
                best[path] = (cfg, tf)
        peers = {name: work / ms / 1e9 for name, ms in _fwd_peer_times(q, k, v, causal).items()}
        for name, tf in peers.items():
            print(f"  peer SDPA {name:5}  {tf:6.1f} TFLOP/s")
        table.append((label, best, peers))
        del q, k, v, want
    print("\nforward TFLOP/s (4*B*H*N^2*D / time, half when causal; bf16; best config of each path)")
    print(f"{'case':<26} {'pointer':>8} {'TMA':>8} {'FA2':>7} {'cuDNN':>7} "
          f"{'best/cuDNN':>10} {'best/FA2':>8}  best config")
    for label, best, peers in table:
        cell = {p: best[p][1] if p in best else None for p in ("pointer", "tma")}
        top = max(best.items(), key=lambda item: item[1][1]) if best else None
        ratio = lambda peer: f"{top[1][1] / peers[peer]:.2f}" if top and peer in peers else "-"
        text = lambda x: f"{x:.1f}" if x is not None else "-"
        print(f"{label:<26} {text(cell['pointer']):>8} {text(cell['tma']):>8} "
              f"{text(peers.get('FA2')):>7} {text(peers.get('cuDNN')):>7} {ratio('cuDNN'):>10} {ratio('FA2'):>8}  "
              + (f"{top[0]} {_tile_text(top[1][0])}" if top else "-"))


def _tile_text(cfg):
    return f"{cfg.block_m}x{cfg.block_n} w{cfg.num_warps} s{cfg.num_stages}"


def _sdpa(q, k, v, causal):
    """SDPA's own choice of kernel on the GPU; its math backend on a CPU dry run."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with contextlib.nullcontext() if DEVICE.type == "cuda" else sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", nargs="+", default=["4,32,32,4096,128,2"], metavar="B,H,Hkv,N,D,C",
                        help="shapes to sweep every config on; C: 0 full, 1 causal, 2 both")
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument("--extra", action="store_true")
    parser.add_argument("--autotune", action="store_true")
    parser.add_argument("--tma", action="store_true", help="the forward's pointer and TMA paths")
    parser.add_argument("--bwd-paths", action="store_true", help="the backward's pointer and TMA paths")
    parser.add_argument("--kinds", default="fwd,dkdv,dq", help="passes the config sweep covers")
    parser.add_argument("--bwd-streams", action="store_true", help="dQ beside dK/dV or after it")
    parser.add_argument("--bwd-kernels", action="store_true", help="each backward kernel timed alone")
    parser.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    args = parser.parse_args()
    global KINDS
    KINDS = tuple(args.kinds.split(","))
    if args.bwd_paths:
        bwd_paths()
    if args.bwd_streams:
        bwd_streams()
    if args.bwd_kernels:
        bwd_kernels()
    if args.tma:
        tma_sweep(args.workers)
    if (args.tma or args.bwd_paths or args.bwd_streams or args.bwd_kernels) and not (args.extra or args.autotune or "--shapes" in sys.argv):
        return 0
    parsed = [tuple(int(x) for x in s.split(",")) for s in args.shapes]
    shapes = [p[:5] for p in parsed]
    causals = [{0: (False,), 1: (True,), 2: (False, True)}[p[5] if len(p) > 5 else 2] for p in parsed]
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
