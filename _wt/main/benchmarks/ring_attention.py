"""Ring attention across GPUs against tritonkit's attention on one GPU: correctness and time.

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 2 benchmarks/ring_attention.py
    torchrun --nproc-per-node 2 benchmarks/ring_attention.py --seq-len 256 --heads 4 --kv-heads 2 --head-dim 16   # CPU, gloo

Each rank makes the same full q, k, v (B, H, N, D) from one seed. Single GPU: every rank
times `tritonkit.attention` on the whole sequence on its own GPU (forward, backward). Ring:
the ranks time `tritonkit.distributed.ring_attention` on their `shard_for_ring` shards
(a step's time is the slowest rank's). The speedup is single / ring.

Correctness (first iteration): the ring's gathered output and gradients against the single
GPU's, as relative L2 differences; and both against a float64 reference on sampled query
rows (output and dQ; the rows' exact attention costs O(rows x N), not O(N^2)), where the
ring's error must stay within twice the single GPU's plus eps, the tests' rule.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

if "--autotune" not in sys.argv:
    os.environ.setdefault("TRITONKIT_AUTOTUNE", "0")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off on shared hosts

import tritonkit  # noqa: E402
from tritonkit.distributed import ring_attention, shard_for_ring, unshard_from_ring  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=131072, help="full sequence length N")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--not-causal", action="store_true")
    p.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    p.add_argument("--iters", type=int, default=3, help="timed iterations after one warm-up")
    p.add_argument("--rows", type=int, default=48, help="query rows checked against float64")
    p.add_argument("--json", default=None)
    p.add_argument("--autotune", action="store_true")
    return p.parse_args()


def _timed(fn, device, group_max: bool) -> float:
    """Seconds of one call of fn; with group_max, the slowest rank's (ranks start together)."""
    if group_max:
        dist.barrier()
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
    if group_max:
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return elapsed.item()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def reference_rows(q, k, v, do, rows, causal, scale):
    """float64 output and dQ of the query rows `rows` (indices into N), exactly: each row's
    softmax over every key it sees, and dq_i = scale * sum_j p_ij (do_i . v_j - delta_i) k_j."""
    group = q.shape[1] // k.shape[1]
    k64 = k.double().repeat_interleave(group, dim=1)
    v64 = v.double().repeat_interleave(group, dim=1)
    q64, do64 = q[:, :, rows].double(), do[:, :, rows].double()
    s = (q64 @ k64.transpose(-1, -2)) * scale
    if causal:
        keys = torch.arange(k.shape[2], device=q.device)
        s = s.masked_fill(keys[None, :] > rows[:, None], float("-inf"))
    p = torch.softmax(s, dim=-1)
    o = p @ v64
    dp = do64 @ v64.transpose(-1, -2)
    delta = (do64 * o).sum(-1, keepdim=True)
    dq = scale * ((p * (dp - delta)) @ k64)
    return o, dq


def main() -> None:
    args = parse_args()
    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        device = torch.device("cuda", torch.cuda.current_device())
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    causal, dtype = not args.not_causal, getattr(torch, args.dtype)
    B, H, Hkv, N, D = args.batch, args.heads, args.kv_heads, args.seq_len, args.head_dim
    scale = D ** -0.5

    torch.manual_seed(0)
    q = torch.randn(B, H, N, D, device=device, dtype=dtype)
    k, v = (torch.randn(B, Hkv, N, D, device=device, dtype=dtype) for _ in range(2))
    do = torch.randn(B, H, N, D, device=device, dtype=dtype)
    shards = [shard_for_ring(t).requires_grad_() for t in (q, k, v)]
    do_shard = shard_for_ring(do)
    full = [t.clone().requires_grad_() for t in (q, k, v)]

    def single_fwd():
        return tritonkit.attention(*full, causal=causal)

    def ring_fwd():
        return ring_attention(*shards, causal=causal)

    results = {}
    # Warm-up, and the correctness check on its results.
    out_single = single_fwd()
    grads_single = torch.autograd.grad(out_single, full, do)
    out_ring = ring_fwd()
    grads_ring = torch.autograd.grad(out_ring, shards, do_shard)
    gathered = [unshard_from_ring(t) for t in (out_ring, *grads_ring)]
    for name, ring_t, single_t in zip(("out", "dq", "dk", "dv"), gathered, (out_single, *grads_single)):
        results[f"ring_vs_single_{name}"] = _rel(ring_t, single_t)
    g = torch.Generator(device="cpu").manual_seed(1)
    rows = torch.cat([torch.tensor([0, N // 2 - 1, N // 2, N - 1]),
                      torch.randint(0, N, (max(args.rows - 4, 0),), generator=g)]).to(device)
    o_ref, dq_ref = reference_rows(q, k, v, do, rows, causal, scale)
    for name, single_t, ring_t, ref in (("out", out_single, gathered[0], o_ref),
                                        ("dq", grads_single[0], gathered[1], dq_ref)):
        results[f"single_err_{name}"] = _rel(single_t[:, :, rows], ref)
        results[f"ring_err_{name}"] = _rel(ring_t[:, :, rows], ref)
    eps = {torch.bfloat16: 1e-3, torch.float16: 1e-4}[dtype]
    results["correct"] = all(results[f"ring_err_{n}"] <= 2 * results[f"single_err_{n}"] + eps for n in ("out", "dq")) \
        and all(results[f"ring_vs_single_{n}"] < 2e-2 for n in ("out", "dq", "dk", "dv"))
    del out_single, grads_single, out_ring, grads_ring, gathered

    # Timing: forward, and forward + backward, each the mean of --iters calls.
    def fwd_bwd(fn, inputs, upstream):
        return lambda: torch.autograd.grad(fn(), inputs, upstream)

    for label, fn, inputs, upstream, group_max in (("single", single_fwd, full, do, False),
                                                   ("ring", ring_fwd, shards, do_shard, True)):
        fwd = [_timed(lambda: fn(), device, group_max) for _ in range(args.iters)]
        both = [_timed(fwd_bwd(fn, inputs, upstream), device, group_max) for _ in range(args.iters)]
        results[f"{label}_fwd_ms"] = 1e3 * sum(fwd) / len(fwd)
        results[f"{label}_fwd_bwd_ms"] = 1e3 * sum(both) / len(both)
    # The single-GPU figure is the slowest rank's (each timed its own GPU).
    single = torch.tensor([results["single_fwd_ms"], results["single_fwd_bwd_ms"]], device=device)
    dist.all_reduce(single, op=dist.ReduceOp.MAX)
    results["single_fwd_ms"], results["single_fwd_bwd_ms"] = single.tolist()
    results["speedup_fwd"] = results["single_fwd_ms"] / results["ring_fwd_ms"]
    results["speedup_fwd_bwd"] = results["single_fwd_bwd_ms"] / results["ring_fwd_bwd_ms"]

    if rank == 0:
        shape = f"B={B} H={H}/{Hkv} N={N} D={D} {'causal' if causal else 'full'} {args.dtype}"
        print(f"ring attention over {world} ranks ({device.type}), {shape}")
        print(f"  correctness: ring vs single GPU, relative L2: out {results['ring_vs_single_out']:.2e}, "
              f"dq {results['ring_vs_single_dq']:.2e}, dk {results['ring_vs_single_dk']:.2e}, "
              f"dv {results['ring_vs_single_dv']:.2e}")
        print(f"  vs float64 on {len(rows)} rows: out ring {results['ring_err_out']:.2e} / single "
              f"{results['single_err_out']:.2e}; dq ring {results['ring_err_dq']:.2e} / single "
              f"{results['single_err_dq']:.2e}  -> {'OK' if results['correct'] else 'FAIL'}")
        print(f"  {'':10s} {'single GPU':>12s} {f'ring x{world}':>12s} {'speedup':>8s}")
        for what in ("fwd", "fwd_bwd"):
            print(f"  {what:10s} {results[f'single_{what}_ms']:10.1f}ms {results[f'ring_{what}_ms']:10.1f}ms "
                  f"{results[f'speedup_{what}']:7.2f}x")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(results, world=world, B=B, H=H, Hkv=Hkv, N=N, D=D, causal=causal,
                               dtype=args.dtype), f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
