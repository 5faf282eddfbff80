"""Train a Hugging Face Llama patched with tritonkit, sharded with FSDP2 across GPUs.

    torchrun --nproc-per-node 2 examples/train_fsdp.py --config A --steps 30
    torchrun --nproc-per-node 2 examples/train_fsdp.py --config 8b --checkpointing
    torchrun --nproc-per-node 1 examples/train_fsdp.py --config A --grad-accum 2   # the same data as 2 GPUs
    torchrun --nproc-per-node 2 examples/train_fsdp.py --config tiny --steps 3     # CPU (gloo), interpreter

Each decoder layer, then the whole model, is `fully_shard`ed (FSDP2): parameters and AdamW
state are split across the ranks in float32, gathered in bf16 for compute, gradients
reduce-scattered in float32 (MixedPrecisionPolicy). Random weights from a config, no
downloads. The data is synthetic and learnable: each row repeats a random phrase of tokens
from the vocabulary's first 1/32, so the loss falls as the model learns which tokens occur and
then to copy. AdamW (fused on GPUs) with 10 steps of linear learning-rate warmup and the
gradients clipped to norm 1. Micro-batch j of a step is drawn from (seed, step, j)
and rank r takes micro-batches r * accum ... r * accum + accum - 1, so W ranks with
--grad-accum a see exactly the data of one rank with --grad-accum W * a: their loss curves
agree within bf16 noise.

Prints the loss per step, tokens/s per GPU (after --warmup steps), peak memory per GPU and
the loss; --json writes them. Configs: A (8 layers, hidden 2048, intermediate 8192, 16/8
heads, vocabulary 128256, 4 x 2048 tokens a micro-batch per GPU), 8b (Llama 3 8B's shape:
8.0B parameters, 128 GB of float32 weights, gradients and AdamW state, more than one H200
holds; 1 x 4096 per GPU), tiny (for CPU tests). --patch picks what tritonkit replaces:
`tritonkit` (tritonkit.transformers.patch: attention, norms, RoPE, MLP, loss), `attention`
(attention alone) or `none` (transformers' SDPA).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist

# Autotuning compiles every candidate config on first use; use the fixed configs unless asked.
if "--autotune" not in sys.argv:
    os.environ.setdefault("TRITONKIT_AUTOTUNE", "0")

import tritonkit  # noqa: E402  (after the environment above)

CONFIGS = {
    "tiny": dict(layers=2, hidden=32, intermediate=64, heads=2, kv_heads=1, vocab=512, batch=1, seq=32),
    "A": dict(layers=8, hidden=2048, intermediate=8192, heads=16, kv_heads=8, vocab=128256, batch=4, seq=2048),
    "8b": dict(layers=32, hidden=4096, intermediate=14336, heads=32, kv_heads=8, vocab=128256, batch=1, seq=4096),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", choices=sorted(CONFIGS), default="A")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=None, help="untimed first steps (default: min(5, steps // 2))")
    p.add_argument("--batch", type=int, default=None, help="rows per micro-batch per GPU (default: the config's)")
    p.add_argument("--seq", type=int, default=None, help="tokens per row (default: the config's)")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per step per GPU")
    p.add_argument("--patch", choices=("tritonkit", "attention", "none"), default="tritonkit")
    p.add_argument("--compile", action="store_true", help="torch.compile each decoder layer")
    p.add_argument("--checkpointing", action="store_true", help="activation checkpointing per decoder layer")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--lr-warmup", type=int, default=10, help="steps of linear learning-rate warmup")
    p.add_argument("--clip", type=float, default=1.0, help="clip the gradients' global norm (0: no clipping)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the results here (rank 0)")
    p.add_argument("--autotune", action="store_true", help="let tritonkit autotune its attention tiles")
    p.add_argument("--quiet", action="store_true", help="no per-step lines")
    args = p.parse_args(argv)
    config = CONFIGS[args.config]
    args.batch = args.batch or config["batch"]
    args.seq = args.seq or config["seq"]
    args.warmup = min(5, args.steps // 2) if args.warmup is None else args.warmup
    return args


def build_model(args: argparse.Namespace, device: torch.device) -> torch.nn.Module:
    """The config's Llama with random weights drawn from args.seed (the same on every rank),
    in float32 (FSDP2 keeps the float32 shards; compute runs in bf16), patched per args.patch."""
    from transformers import LlamaConfig, LlamaForCausalLM

    c = CONFIGS[args.config]
    attn = {"none": "sdpa", "attention": _register_attention(), "tritonkit": _register_attention()}[args.patch]
    config = LlamaConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["intermediate"],
                         num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                         num_key_value_heads=c["kv_heads"], max_position_embeddings=max(args.seq, 8192),
                         rope_theta=500000.0, use_cache=False, attn_implementation=attn)
    torch.manual_seed(args.seed)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    if args.patch == "tritonkit":
        try:
            tkt = importlib.import_module("tritonkit.transformers")
        except ImportError:
            _log("tritonkit.transformers is not available: attention alone is patched")
        else:
            tkt.patch(model)
            _log(f"tritonkit.transformers.patch: {getattr(model, 'tritonkit_report', '')}")
    return model


def _register_attention() -> str:
    """The attention implementation name for tritonkit: tritonkit.transformers' when it
    imports, else a plain causal one (no padding masks) registered here."""
    try:
        importlib.import_module("tritonkit.transformers")  # registers "tritonkit"
        return "tritonkit"
    except ImportError:
        pass
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        if attention_mask is not None:
            raise ValueError("this fallback attention supports unpadded causal batches only")
        out = tritonkit.attention(query, key, value, causal=True, scale=scaling)
        return out.transpose(1, 2), None

    AttentionInterface.register("tritonkit_causal", attention)
    AttentionMaskInterface.register("tritonkit_causal", AttentionMaskInterface._global_mapping["sdpa"])
    return "tritonkit_causal"


def shard_model(model: torch.nn.Module, args: argparse.Namespace, mesh) -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if args.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        if args.compile:
            layer.compile()
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)


def micro_batch(args: argparse.Namespace, step: int, index: int, vocab: int) -> torch.Tensor:
    """Micro-batch `index` of `step`: rows that repeat a random phrase of 1/8 the row, its tokens
    drawn from the first 1/32 of the vocabulary (so the loss falls within the first steps, as the
    model learns which tokens occur, then further as it learns to copy)."""
    g = torch.Generator().manual_seed(((args.seed * 1_000_003 + step) * 1_000_003 + index) % 2**63)
    period = max(2, args.seq // 8)
    phrase = torch.randint(0, max(2, vocab // 32), (args.batch, period), generator=g)
    return phrase.repeat(1, -(-args.seq // period))[:, :args.seq]


def train(args: argparse.Namespace, group: dist.ProcessGroup | None = None) -> dict:
    """Build, shard and train; returns the losses, tokens/s per GPU, peak memory and model."""
    from torch.distributed.device_mesh import DeviceMesh

    world, rank = dist.get_world_size(group), dist.get_rank(group)
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    model = build_model(args, device)
    mesh = DeviceMesh.from_group(group or dist.group.WORLD, device.type)
    shard_model(model, args, mesh)
    # The fused kernel updates each parameter in one pass (the foreach one in several: a fifth of
    # config A's step on one GPU went to AdamW's kernels); it takes FSDP2's DTensor shards.
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0, fused=device.type == "cuda")
    # From random weights, at full rate from the first step and unclipped, a billion-parameter
    # model's loss rises instead of falling: warm up and clip, as pretraining does.
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(1, args.lr_warmup)))
    vocab = CONFIGS[args.config]["vocab"]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    losses, timed_s = [], 0.0
    for step in range(args.steps):
        if step == args.warmup:
            _sync(device)
            start = time.perf_counter()
        total = torch.zeros((), device=device)
        for m in range(args.grad_accum):
            ids = micro_batch(args, step, rank * args.grad_accum + m, vocab).to(device)
            loss = model(input_ids=ids, labels=ids).loss
            (loss / args.grad_accum).backward()
            total += loss.detach().float()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)  # the norm over every rank's shards
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        dist.all_reduce(total, group=group)  # sum over ranks (gloo has no average)
        losses.append(total.item() / (world * args.grad_accum))
        if rank == 0 and not args.quiet:
            print(f"step {step:4d}  loss {losses[-1]:.4f}", flush=True)
    _sync(device)
    timed_s = time.perf_counter() - start if args.steps > args.warmup else float("nan")
    timed_steps = args.steps - args.warmup
    tokens_per_gpu = timed_steps * args.grad_accum * args.batch * args.seq
    peak = torch.tensor([torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0],
                        device=device)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX, group=group)
    return dict(config=args.config, world=world, batch=args.batch, seq=args.seq, grad_accum=args.grad_accum,
                patch=args.patch, compile=args.compile, checkpointing=args.checkpointing, losses=losses,
                tokens_per_s_per_gpu=tokens_per_gpu / timed_s if timed_steps > 0 else float("nan"),
                step_s=timed_s / timed_steps if timed_steps > 0 else float("nan"),
                peak_memory_gib=peak.item() if device.type == "cuda" else None,
                params=sum(p.numel() for p in model.parameters()) * world, model=model)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _log(message: str) -> None:
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(message, flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        # NVLink multicast (NVLS) stays off: on shared hosts it can take the GPUs out of service.
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    else:
        dist.init_process_group("gloo")
    try:
        result = train(args)
        result.pop("model")
        if dist.get_rank() == 0:
            unit = "GPU" if torch.cuda.is_available() else "rank"
            peak = "n/a (CPU)" if result["peak_memory_gib"] is None else f"{result['peak_memory_gib']:.1f} GiB"
            print(f"train_fsdp: config {args.config} ({result['params'] / 1e9:.2f}B params), {result['world']} {unit}(s), "
                  f"{args.batch}x{args.seq} x{args.grad_accum} per {unit}, patch={args.patch}, compile={args.compile}, "
                  f"checkpointing={args.checkpointing}: {result['tokens_per_s_per_gpu']:,.0f} tokens/s per {unit}, "
                  f"{result['step_s'] * 1e3:.1f} ms/step, peak {peak} per {unit}, "
                  f"loss {result['losses'][0]:.4f} -> {result['losses'][-1]:.4f}", flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(result, f, indent=1)
    finally:
        dist.destroy_process_group()
    # A finished run leaves without Python's interpreter teardown. Gloo (the CPU backend) runs
    # each collective on a worker thread that frees the collective's tensors after `wait()` has
    # returned, and may need the GIL to do it; a thread that asks for the GIL once the
    # interpreter is finalizing is ended by Python inside that C++ destructor, and the process
    # aborts (SIGABRT, "terminate called without an active exception") after a run that
    # succeeded, the likelier the busier the machine. destroy_process_group cannot stop those
    # threads first: FSDP's and DTensor's caches keep the device mesh, and with it the process
    # group, alive until the interpreter ends.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
