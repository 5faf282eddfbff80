"""The post-training ops on DTensors with their tokens sharded over two ranks (gloo on the CPU,
NCCL on GPUs): the same loss, per-token outputs and gradients as on the full tensors."""

import torch

from test_distributed import _pool, run_on_ranks  # noqa: F401 (the rank pool's fixtures)


def _tokens_sharded_worker(rank: int, world: int) -> None:
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor, init_device_mesh

    import tritonkit

    mesh = init_device_mesh("cuda" if torch.cuda.is_available() else "cpu", (world,))
    h, w, th = torch.randn(4, 3, 8), torch.randn(50, 8) / 3, torch.randn(4, 3, 6)
    tw = torch.randn(50, 6) / 3
    target = torch.randint(0, 50, (4, 3))
    target[0, 2] = target[3, 0] = -100
    adv, old = torch.randn(4), -4 + torch.randn(4, 3)

    def losses(h, w, target, adv, old, th, tw):
        logp, entropy = tritonkit.linear_logprobs(h, w, target, return_entropy=True)
        grpo = tritonkit.grpo_loss(h, w, target, adv, old_logprobs=old, entropy_coef=0.01, loss_type="bnpo")
        distill = tritonkit.distill_loss(h, w, th, tw, target=target, reduction="sum")
        return (logp * 0.5).sum() + entropy.sum() * 0.1 + grpo + distill * 0.01

    full = [t.clone().requires_grad_() for t in (h, w)]
    want = losses(*full, target, adv, old, th, tw)
    want_grads = torch.autograd.grad(want, full)
    rows = [Shard(0)]
    sharded = [distribute_tensor(h, mesh, rows).requires_grad_(), distribute_tensor(w, mesh, [Replicate()]).requires_grad_()]
    got = losses(*sharded, distribute_tensor(target, mesh, rows), distribute_tensor(adv, mesh, rows),
                 distribute_tensor(old, mesh, rows), distribute_tensor(th, mesh, rows),
                 distribute_tensor(tw, mesh, [Replicate()]))
    got_grads = torch.autograd.grad(got, sharded)
    torch.testing.assert_close(got.full_tensor(), want, rtol=1e-5, atol=1e-6)
    for g, e in zip(got_grads, want_grads):
        torch.testing.assert_close(g.full_tensor(), e, rtol=1e-5, atol=1e-6)


def test_tokens_sharded(run_on_ranks):  # noqa: F811 (the fixture imported above)
    run_on_ranks(_tokens_sharded_worker)
