"""tritonkit under torch.distributed, on the CPU: two processes, gloo, kernels through the
interpreter (compiled with NCCL on GPUs by the same code).

Each test starts two processes (torch.multiprocessing.spawn, a free port on 127.0.0.1)
that run one worker function below; a worker checks its own results against the
single-process computation and raises on a mismatch, which fails the test. Workers cover
several cases each, since starting a process pair costs seconds.
"""

from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from _tolerance import assert_close_to_reference, eps_for

WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world: int, port: int, worker, args) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)  # the same full tensors on every rank
        worker(rank, world, *args)
    finally:
        dist.destroy_process_group()


def _spawn(worker, *args, world: int = WORLD) -> None:
    mp.spawn(_entry, args=(world, _free_port(), worker, args), nprocs=world, join=True)


# ---------------------------------------------------------------------------------------
# Ring attention
# ---------------------------------------------------------------------------------------

def _ring_attention_worker(rank: int, world: int, cases) -> None:
    from tritonkit.distributed import ring_attention, shard_for_ring, unshard_from_ring
    from tritonkit.ops.attention import attention_reference

    for i, (B, H, Hkv, N, D, causal, dtype) in enumerate(cases):
        q = torch.randn(B, H, N, D, dtype=dtype)
        k, v = (torch.randn(B, Hkv, N, D, dtype=dtype) for _ in range(2))
        do = torch.randn(B, H, N, D, dtype=dtype)
        shards = [shard_for_ring(t).requires_grad_() for t in (q, k, v)]
        out = ring_attention(*shards, causal=causal)
        grads = torch.autograd.grad(out, shards, shard_for_ring(do))
        if i == 0:  # the same call again gives the same bits (every sum in a fixed order)
            out2 = ring_attention(*shards, causal=causal)
            grads2 = torch.autograd.grad(out2, shards, shard_for_ring(do))
            assert torch.equal(out, out2) and all(torch.equal(a, b) for a, b in zip(grads, grads2)), \
                "not deterministic"

        what = f"B={B} H={H} Hkv={Hkv} N={N} D={D} causal={causal} {dtype}"
        full = [t.detach().requires_grad_() for t in (q, k, v)]
        ref = attention_reference(*full, causal)
        ref_grads = torch.autograd.grad(ref, full, do.double())
        same = attention_reference(*full, causal, upcast=False)
        same_grads = torch.autograd.grad(same, full, do)
        assert_close_to_reference(unshard_from_ring(out), ref, same, what=f"output {what}")
        for name, g, r, t in zip("qkv", grads, ref_grads, same_grads):
            assert_close_to_reference(unshard_from_ring(g), r, t, eps=eps_for(dtype, gradient=True),
                                      what=f"d{name} {what}")


def test_ring_attention_matches_single_process():
    cases = [
        (1, 4, 2, 64, 16, True, torch.float16),    # GQA, causal, load-balanced layout
        (2, 2, 2, 36, 32, False, torch.float16),   # not causal; chunks of 9 (odd, past no block)
        (1, 2, 1, 44, 16, True, torch.bfloat16),   # MQA, chunks of 11
    ]
    _spawn(_ring_attention_worker, cases)


def test_ring_attention_bad_input():
    from tritonkit.distributed import ring_attention

    q = torch.randn(1, 2, 6, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="^q holds 5"):
        ring_attention(q[:, :, :5], q[:, :, :5], q[:, :, :5], causal=True)
    with pytest.raises(ValueError, match="^k holds 4"):
        ring_attention(q, q[:, :, :4], q[:, :, :4], causal=False)
    with pytest.raises(ValueError, match="^v has shape"):
        ring_attention(q, q, q[:, :1], causal=False)
    with pytest.raises(ValueError, match="^k must be 4-D"):
        ring_attention(q, q[0], q[0], causal=False)
    with pytest.raises(TypeError, match="^v must be a torch.Tensor"):
        ring_attention(q, q, None, causal=False)
