"""Tile sweep of attention's masked cases (issue 15's bars), beside FlexAttention, in one process.

    PYTHONPATH=src python3 benchmarks/sweep_attention_masks.py [--cases window,varlen,softcap] [--workers 16]

Cases, as `tritonkit bench attention attention_varlen` has them: a sliding window of 1024 keys
at N=16384 (B=1, 32/8 heads, D=128, causal), and 16 packed sequences of lognormal lengths (mean
1024), causal, 32/8 heads, D=128; plus the dense causal N=4096 case that the packed bar is
measured against, and the packed batch's tokens as 16 equal dense sequences of 1024 (what
the sequences' lengths alone cost). For each masked case: every config the autotuner may try for each pass
(pruned as it prunes them) is compiled first in worker processes, then timed: the forward
with that config; the backward with that dK/dV config (dQ at its fixed config) and with that
dQ config (dK/dV fixed). Each result is checked against the fixed config's. The registry's
providers (tritonkit as users call it, FlexAttention with the same block mask) are timed in
the same process. TFLOP/s count the (query, key) pairs the mask keeps, as the bench does.
The softcap case (50, B=4, 32/8 heads, N=4096, D=128, causal: the Gluon kernels, no tiles to
sweep) is timed beside the same case without a cap, alternately twice, since the machine's
speed drifts within a run by more than the difference sought.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

os.environ.setdefault("TRITONKIT_AUTOTUNE", "0")

import tritonkit  # noqa: E402,F401  (first: on a CPU it switches Triton to its interpreter)
import torch  # noqa: E402
import triton.testing  # noqa: E402
from tritonkit.ops import attention as A  # noqa: E402
from tritonkit.registry import attention as dense_registry  # noqa: E402
from tritonkit.registry import attention_varlen as varlen_registry  # noqa: E402

WINDOW, N_WINDOW = 1024, 16384
HEADS, KV_HEADS, D = 32, 8, 128


def _device() -> torch.device:
    return tritonkit.default_device()


def window_inputs(device, n=N_WINDOW):
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(1, HEADS, n, D, device=device, dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(1, KV_HEADS, n, D, device=device, dtype=torch.bfloat16, generator=g) for _ in range(2))
    return q, k, v, torch.randn_like(q), ()


def varlen_inputs(device, count=16):
    lengths = varlen_registry.lognormal_lengths(count, 1024)
    g = torch.Generator(device=device).manual_seed(0)
    total = sum(lengths)
    q = torch.randn(total, HEADS, D, device=device, dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(total, KV_HEADS, D, device=device, dtype=torch.bfloat16, generator=g) for _ in range(2))
    cu = varlen_registry.cu_seqlens(lengths, device)
    return q, k, v, torch.randn_like(q), (cu, cu)


# name -> (inputs, forward launcher, backward launcher, mask arguments after `causal`)
CASES = {
    "window": (window_inputs, A.attention_fwd, A.attention_bwd, dict(window_left=WINDOW, window_right=0)),
    "varlen": (varlen_inputs, A.attention_varlen_fwd, A.attention_varlen_bwd, {}),
}


def candidates(case: str, kind: str) -> list[A.TileConfig]:
    """The configs the autotuner would try for this case's pass (its pruner, its flags)."""
    prune = {"fwd": A._prune_fwd, "dkdv": A._prune_dkdv, "dq": A._prune_dq}[kind]
    named = {"CU_Q": object() if case == "varlen" else None, "Nq": N_WINDOW, "Nk": N_WINDOW}
    flags = dict(HEAD=A.head_tiles(128, 128), USE_TMA=True,
                 SCORE=A.score_of(True, WINDOW if case == "window" else -1, 0 if case == "window" else -1, 0.0,
                                  N_WINDOW, N_WINDOW))
    kept = prune([c.triton_config() for c in A.autotune_configs(kind)], named, **flags)
    return [A.TileConfig(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) for c in kept]


def run(case: str, kind: str, cfg, inputs, o=None, lse=None):
    _, fwd, bwd, mask = CASES[case]
    q, k, v, do, varlen = inputs
    if kind == "fwd":
        return fwd(q, k, v, *varlen, True, config=cfg, **mask)
    return bwd(do, q, k, v, o, lse, *varlen, True, **mask, **{f"{kind}_config": cfg})


def _compile_worker(job):
    case, kind, cfg = job
    make = CASES[case][0]
    inputs = make(_device(), 2048) if case == "window" else make(_device(), 4)
    try:
        o, lse = run(case, "fwd", None, inputs)
        run(case, kind, cfg, inputs, o, lse)
        torch.cuda.synchronize()
        return None
    except Exception as err:  # reported; the config is then skipped when timing
        return f"{case} {kind} {cfg}: {type(err).__name__}: {str(err)[:200]}"


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")


def _diff(got, want) -> float:
    got, want = (got,) if isinstance(got, torch.Tensor) else got, (want,) if isinstance(want, torch.Tensor) else want
    return max(((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item() for a, b in zip(got, want))


def registry_case(case: str, backward: bool):
    if case == "window":
        return dense_registry._masked_case(1, HEADS, KV_HEADS, N_WINDOW, D, backward, window=WINDOW)
    if case == "varlen":
        return varlen_registry._case(16, 1024, HEADS, KV_HEADS, D, backward)
    if case == "softcap":
        return dense_registry._masked_case(4, HEADS, KV_HEADS, 4096, D, backward, softcap=50.0)
    if case == "dense 1024":  # the packed batch's tokens as 16 equal causal sequences
        return dense_registry._case(16, HEADS, KV_HEADS, 1024, D, True, backward)
    return dense_registry._case(4, HEADS, KV_HEADS, 4096, D, True, backward)


def providers(case: str) -> dict[str, tuple[float, float]]:
    """{provider: (fwd TFLOP/s, bwd TFLOP/s)} of the registry's case, every provider it has."""
    rates: dict[str, list[float]] = {}
    for backward in (False, True):
        bench_case = registry_case(case, backward)
        for name, fn in bench_case.setup(_device()).items():
            rates.setdefault(name, []).append(bench_case.work / bench(fn) / 1e9)
        torch.cuda.empty_cache()
    return {name: tuple(r) for name, r in rates.items()}


def sweep(case: str) -> None:
    inputs = CASES[case][0](_device())
    work = registry_case(case, False).work
    o, lse = run(case, "fwd", None, inputs)
    reference = {"fwd": (o, lse), "bwd": run(case, "dkdv", None, inputs, o, lse)}
    fixed = A.fixed_configs(128, busy_dkdv=case == "varlen")
    print(f"\n{case}: fixed configs fwd {fixed['fwd_tma']}, dkdv {fixed['dkdv_tma']}, dq {fixed['dq_tma']}")
    for kind in ("fwd", "dkdv", "dq"):
        rows = []
        for cfg in candidates(case, kind):
            fn = lambda cfg=cfg: run(case, kind, cfg, inputs, o, lse)
            try:
                diff = _diff(fn(), reference["fwd" if kind == "fwd" else "bwd"])
                ms = bench(fn)
            except Exception as err:
                print(f"  {kind} {cfg}: {type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''}")
                continue
            rate = work * (1 if kind == "fwd" else 2.5) / ms / 1e9
            rows.append((rate, cfg, diff))
        for rate, cfg, diff in sorted(rows, key=lambda r: -r[0]):
            print(f"  {kind:<5} {cfg.block_m:>4}x{cfg.block_n:<4} w{cfg.num_warps} s{cfg.num_stages}  "
                  f"{'fwd' if kind == 'fwd' else 'bwd'} {rate:6.1f} TFLOP/s  rel diff vs fixed {diff:.1e}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", default="window,varlen,softcap")
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()
    cases = args.cases.split(",")
    if _device().type != "cuda":
        raise SystemExit("a GPU sweep: run it on the GPU machine")
    swept = [case for case in cases if case in CASES]
    jobs = [(case, kind, cfg) for case in swept for kind in ("fwd", "dkdv", "dq") for cfg in candidates(case, kind)]
    start = time.time()
    with mp.get_context("spawn").Pool(args.workers) as pool:
        errors = [e for e in pool.map(_compile_worker, jobs) if e]
    print(f"compiled {len(jobs)} variants in {time.time() - start:.0f}s")
    for e in errors:
        print("  compile failed:", e)
    for case in swept:
        sweep(case)
    print("\nproviders as users call them (fwd / bwd TFLOP/s, same process)")
    timed = [c for c in cases if c != "softcap"] + (["dense"] if "varlen" in cases or "softcap" in cases else [])
    timed += ["dense 1024"] if "varlen" in cases else []
    if "softcap" in cases:
        timed += ["softcap", "dense", "softcap"]
    for case in timed:
        for name, (fwd, bwd) in providers(case).items():
            print(f"  {case:<10} {name:<14} fwd {fwd:6.1f}  bwd {bwd:6.1f}")


if __name__ == "__main__":
    main()
