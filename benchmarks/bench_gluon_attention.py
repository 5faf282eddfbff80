#!/usr/bin/env python3
"""Attention forward on a Hopper GPU: the Gluon kernel beside SDPA's cuDNN and FlashAttention-2
backends and tritonkit's Triton path, all in one process (triton.testing.do_bench, median).

  PYTHONPATH=src TRITONKIT_AUTOTUNE=0 python3 benchmarks/bench_gluon_attention.py [--quick] [--backward] [--head-dim D]

TFLOP/s count 4*B*H*Nq*Nk*D (halved when causal). Each row also prints the Gluon output's
largest difference from cuDNN's. Variants of the tile config (ring depth) are timed beside the
shipped one where shared memory allows, by launching the kernel with launch_args' other values.

--backward times the Gluon backward (from the Triton forward's o and lse) beside SDPA's cuDNN
and FlashAttention-2 backward (autograd through SDPA with the backend forced) and the Triton
backward: TFLOP/s count 10*B*H*Nq*Nk*D (2.5 forwards, halved when causal), medians of a few
CUDA-event-timed calls (a call at N=16384 takes about a second). Each Gluon stage (preprocess,
dK/dV, dQ) is also timed alone, and up to N=2048 from a CUDA graph too (its GPU time alone).
"""
import argparse
import math
import sys
import time

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from tritonkit._counters import zeroed_counters
from tritonkit.ops.attention.gluon import attention_fwd as gluon_fwd
from tritonkit.ops.attention.order import num_sms
from tritonkit.ops.attention import attention_fwd
from tritonkit.ops.attention.score import Score

CASES = [  # (B, H, N, D, causal)
    (4, 32, 4096, 128, False), (4, 32, 4096, 128, True),
    (4, 32, 16384, 128, False), (4, 32, 16384, 128, True),
    (4, 32, 4096, 64, False), (4, 32, 4096, 64, True),
    (4, 32, 16384, 64, False), (4, 32, 16384, 64, True),
    (4, 16, 4096, 256, False), (4, 16, 4096, 256, True),
    (4, 16, 16384, 256, False), (4, 16, 16384, 256, True),
    (8, 16, 1024, 64, False), (8, 16, 1024, 64, True),
]


def gluon_variant(q, k, v, causal, stages=None, schedule=None, o_buffer=None):
    """The Gluon forward with another ring depth, O staged in Q's buffer or its own (`o_buffer`,
    `tile_config`), or another tile schedule than the launcher's
    (for the comparison only): "tile a program" (one program per tile, the hardware's block
    scheduler deciding the order), "round-robin" (the persistent grid, tiles dealt in turn),
    "dynamic" (the persistent grid, each tile to the first program to ask). Launched through
    Triton's own path, whose host time the launcher's cached one does not pay: compare the
    variants with each other, not with the launcher."""
    B, H, N, D = q.shape
    o, lse = torch.empty_like(q), torch.empty(B, H, N, device=q.device)
    grid, args, kwargs = gluon_fwd.launch_args(q, k, v, o, lse, D ** -0.5, Score(causal=causal))
    if stages is not None:
        kwargs = dict(kwargs, STAGES=stages)
    if o_buffer is not None:
        kwargs = dict(kwargs, O_BUFFER=o_buffer)
    if schedule is not None:
        n_tiles = args[-1]
        kwargs = dict(kwargs, DYNAMIC=schedule == "dynamic")
        grid = (n_tiles,) if schedule == "tile a program" else (min(n_tiles, num_sms(q.device)),)
        if schedule == "dynamic" and args[5].dtype != torch.int32:   # full attention passes lse there
            args = (*args[:5], zeroed_counters(q.device), *args[6:])
    return lambda: gluon_fwd._attn_fwd_kernel[grid](*args, **kwargs)


BWD_CASES = [  # (B, H, N, D, causal)
    (4, 32, 4096, 128, False), (4, 32, 4096, 128, True),
    (4, 32, 16384, 128, False), (4, 32, 16384, 128, True),
    (4, 32, 4096, 64, False), (4, 32, 4096, 64, True),
    (8, 16, 1024, 64, False), (8, 16, 1024, 64, True),     # issue 16's short shape
]


def _time_ms(fn, warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def backward_main(opts) -> None:
    from tritonkit.bench.timing import graphed_ms
    from tritonkit.ops.attention.gluon import attention_bwd as gluon_bwd
    from tritonkit.ops.attention import attention_bwd
    from tritonkit.ops.attention.backward import _attn_bwd_preprocess_kernel

    t_start = time.time()
    print(f"{'B':>2} {'H':>3} {'N':>6} {'D':>4} {'causal':>6} | {'gluon':>7} {'cudnn':>7} {'fa2':>7} {'triton':>7} "
          f"| {'g/cudnn':>7} {'g/fa2':>6} {'g/trit':>6} | {'max|dq,dk,dv - cudnn|':>24} | stages alone (ms)")
    for B, H, N, D, causal in BWD_CASES:
        if opts.head_dim not in (None, D):
            continue
        if time.time() - t_start > opts.deadline:
            print("deadline reached; remaining cases skipped")
            break
        torch.manual_seed(0)
        q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        do = torch.randn_like(q)
        o, lse = attention_fwd(q, k, v, causal)
        flops = 10 * B * H * N * N * D * (0.5 if causal else 1.0)
        reps, warmup = (3, 1) if N > 8192 else (10, 3)
        grads = {}

        def sdpa_bwd(backend):
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            with sdpa_kernel(backend):
                out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
            return lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)

        providers = {
            "gluon": lambda: attention_bwd(do, q, k, v, o, lse, causal, gluon=True),
            "cudnn": lambda: sdpa_bwd(SDPBackend.CUDNN_ATTENTION),
            "fa2": lambda: sdpa_bwd(SDPBackend.FLASH_ATTENTION),
            "triton": lambda: attention_bwd(do, q, k, v, o, lse, causal, gluon=False),
        }
        tf = {}
        for name, make in providers.items():
            try:
                fn = make() if name in ("cudnn", "fa2") else make
                grads[name] = fn()
                ms = _time_ms(fn, warmup, reps)
                tf[name] = flops / ms / 1e9
            except Exception as e:  # a peer that refuses a shape, or a failing kernel
                print(f"  {name}: {type(e).__name__}: {str(e)[:160]}", flush=True)
                tf[name] = float("nan")
        diffs = "n/a"
        if "gluon" in grads and "cudnn" in grads:
            diffs = ",".join(f"{(a.float() - b.float()).abs().max().item():.1e}"
                             for a, b in zip(grads["gluon"], grads["cudnn"]))
        # Each Gluon stage alone, launched as the launcher does.
        scale = D ** -0.5
        delta = torch.empty(B, H, N, device="cuda")
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        stages = {
            "pre": lambda: _attn_bwd_preprocess_kernel[(triton.cdiv(N, 64), H, B)](
                o, do, delta, None, N, D, *o.stride(), *do.stride(), BLOCK_M=64, BLOCK_D=D, PAD_D=False, num_warps=4,
                num_stages=1),
        }
        g1, a1, k1 = gluon_bwd.dkdv_launch_args(do, q, k, v, dk, dv, lse, delta, scale, Score(causal=causal))
        g2, a2, k2 = gluon_bwd.dq_launch_args(do, q, k, v, o, dq, lse, delta, None, scale, Score(causal=causal))
        stages["dkdv"] = lambda: gluon_bwd._dkdv_kernel[g1](*a1, **k1)
        stages["dq"] = lambda: gluon_bwd._dq_kernel[g2](*a2, **k2)
        alone = []
        for name, fn in stages.items():
            try:
                ms = _time_ms(fn, warmup, reps)
                # A short stage's launch is a large share of its eager time: its GPU time alone too.
                graphed = f" (graphed {graphed_ms(fn, ms):.3f})" if N <= 2048 else ""
                alone.append(f"{name} {ms:.3f}{graphed}")
            except Exception as e:
                alone.append(f"{name} {type(e).__name__}")
        g = tf["gluon"]
        print(f"{B:>2} {H:>3} {N:>6} {D:>4} {str(causal):>6} | {g:7.0f} {tf['cudnn']:7.0f} {tf['fa2']:7.0f} "
              f"{tf['triton']:7.0f} | {g / tf['cudnn']:7.2f} {g / tf['fa2']:6.2f} {g / tf['triton']:6.2f} | "
              f"{diffs:>24} | {'; '.join(alone)}", flush=True)
        del q, k, v, do, o, lse, grads, dq, dk, dv
        torch.cuda.empty_cache()
    print(f"elapsed {time.time() - t_start:.0f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--deadline", type=float, default=240.0)
    ap.add_argument("--head-dim", type=int, default=None, help="only the cases of this head dim")
    opts = ap.parse_args()
    if opts.backward:
        print(f"torch {torch.__version__} triton {triton.__version__} cudnn {torch.backends.cudnn.version()} "
              f"{torch.cuda.get_device_name()}")
        return backward_main(opts)
    t_start = time.time()
    print(f"torch {torch.__version__} triton {triton.__version__} cudnn {torch.backends.cudnn.version()} "
          f"{torch.cuda.get_device_name()}")
    print(f"{'B':>2} {'H':>3} {'N':>6} {'D':>4} {'causal':>6} | {'gluon':>7} {'cudnn':>7} {'fa2':>7} {'triton':>7} "
          f"| {'g/cudnn':>7} {'g/fa2':>6} {'g/trit':>6} | {'maxdiff':>8} | variants")
    for B, H, N, D, causal in CASES[:4] if opts.quick else CASES:
        if opts.head_dim not in (None, D):
            continue
        if time.time() - t_start > opts.deadline:
            print("deadline reached; remaining cases skipped")
            break
        torch.manual_seed(0)
        q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flops = 4 * B * H * N * N * D * (0.5 if causal else 1.0)
        providers = {
            "gluon": lambda: attention_fwd(q, k, v, causal, gluon=True),
            "cudnn": (SDPBackend.CUDNN_ATTENTION, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)),
            "fa2": (SDPBackend.FLASH_ATTENTION, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)),
            "triton": lambda: attention_fwd(q, k, v, causal, gluon=False),
        }
        tf = {}
        for name, p in providers.items():
            try:
                if isinstance(p, tuple):
                    with sdpa_kernel(p[0]):
                        ms = triton.testing.do_bench(p[1], warmup=10, rep=60, return_mode="median")
                else:
                    ms = triton.testing.do_bench(p, warmup=10, rep=60, return_mode="median")
                tf[name] = flops / ms / 1e9
            except Exception as e:  # a peer that refuses a shape
                print(f"  {name}: {type(e).__name__}: {str(e)[:120]}")
                tf[name] = float("nan")
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        diff = (attention_fwd(q, k, v, causal, gluon=True)[0].float() - ref.float()).abs().max().item()
        variants = []
        block_n, stages, o_buffer = gluon_fwd.tile_config(D)
        alts = [(name, dict(schedule=name)) for name in ("tile a program", "round-robin", "dynamic")]
        alts += [(f"stages={alt}", dict(stages=alt)) for alt in (2, 3)
                 if alt != stages and 2 * alt * block_n * D * 2 + (1 + o_buffer) * 2 * 64 * D * 2 <= 224 * 1024]
        if o_buffer:
            alts.append(("O in Q's buffer", dict(o_buffer=False)))
        for label, kw in alts:
            try:
                ms = triton.testing.do_bench(gluon_variant(q, k, v, causal, **kw), warmup=10, rep=60,
                                             return_mode="median")
                variants.append(f"{label}: {flops / ms / 1e9:.0f}")
            except Exception as e:
                variants.append(f"{label}: {type(e).__name__}")
        g = tf["gluon"]
        print(f"{B:>2} {H:>3} {N:>6} {D:>4} {str(causal):>6} | {g:7.0f} {tf['cudnn']:7.0f} {tf['fa2']:7.0f} "
              f"{tf['triton']:7.0f} | {g / tf['cudnn']:7.2f} {g / tf['fa2']:6.2f} {g / tf['triton']:6.2f} | "
              f"{diff:8.2e} | {'; '.join(variants)}", flush=True)
        del q, k, v, ref
        torch.cuda.empty_cache()
    print(f"elapsed {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
