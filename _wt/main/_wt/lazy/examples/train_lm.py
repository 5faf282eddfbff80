"""Train a small causal transformer LM with tritonkit's attention and with SDPA, same seed.

The task is fixed and synthetic: text from an order-2 Markov language whose transition
table is drawn once from the seed (see `markov_batches`); the loss floor is about
log 4 = 1.386. Both runs start from the same weights and see the same batches, so their
loss curves should agree within bf16 noise.

    python examples/train_lm.py                       # GPU: both backends, ~300 steps each
    python examples/train_lm.py --no-cuda-graph       # the same, every step run eagerly
    python examples/train_lm.py --tiny --steps 5      # CPU smoke run through the interpreter

Prints each backend's final loss (mean of the last steps) and tokens per second.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

import torch
import torch.nn.functional as F

# Autotuning compiles every candidate config on first use; the example uses the fixed configs
# unless asked, so it runs in well under two minutes.
if "--autotune" not in sys.argv:
    os.environ.setdefault("TRITONKIT_AUTOTUNE", "0")

import tritonkit  # noqa: E402  (after the environment above)


class SDPAAttention(tritonkit.nn.Attention):
    """The same layer (same parameters, same init) with torch's SDPA in place of the kernel."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.split_heads(x)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal,
                                           enable_gqa=self.num_heads != self.num_kv_heads)
        return self.proj(o.transpose(1, 2).flatten(2))


class Block(torch.nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, attention_cls: type):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(dim)
        self.attn = attention_cls(dim, heads, kv_heads, causal=True)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class LM(torch.nn.Module):
    def __init__(self, vocab: int, seq: int, dim: int, layers: int, heads: int, kv_heads: int, attention_cls: type):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.blocks = torch.nn.ModuleList(Block(dim, heads, kv_heads, attention_cls) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def markov_batches(steps: int, batch: int, seq: int, vocab: int, seed: int, device: torch.device):
    """A fixed order-2 Markov language: the token after (a, b) is one of 4 successors of that
    pair, drawn from a table made once from `seed`, each with probability 1/4. Predicting it
    needs the previous two tokens, so the model must attend; the best loss is about log 4."""
    g = torch.Generator().manual_seed(seed)
    table = torch.randint(0, vocab, (vocab, vocab, 4), generator=g)
    for _ in range(steps):
        x = torch.empty(batch, seq, dtype=torch.long)
        x[:, :2] = torch.randint(0, vocab, (batch, 2), generator=g)
        pick = torch.randint(0, 4, (batch, seq), generator=g)
        for t in range(2, seq):
            x[:, t] = table[x[:, t - 2], x[:, t - 1], pick[:, t]]
        yield x.to(device)


class Step:
    """One training step (forward, loss, backward, AdamW), run eagerly or replayed from a CUDA
    graph captured once. A small model's step is bound by the host: each op's Python,
    dispatch and launch cost more than its GPU work, for torch's ops and tritonkit's alike, so
    on a GPU the step is captured whole (after three eager steps on a side stream, which compile
    the kernels and set up the optimizer's state) and each later step is one graph launch."""

    WARMUP = 3

    def __init__(self, model: torch.nn.Module, args, device: torch.device, graphed: bool):
        self.model, self.device, self.graphed = model, device, graphed
        self.opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0, capturable=graphed)
        self.graph = None
        self.static_seqs = self.static_loss = None
        self.eager_steps = 0

    def _loss(self, seqs: torch.Tensor) -> torch.Tensor:
        # the autocast cache would hold casts made during capture: off when graphed
        with torch.autocast(self.device.type, dtype=torch.bfloat16, cache_enabled=not self.graphed):
            logits = self.model(seqs[:, :-1])
        # every position predicts the next token; the first two have too little context
        vocab = logits.shape[-1]
        return F.cross_entropy(logits[:, 1:].float().reshape(-1, vocab), seqs[:, 2:].reshape(-1))

    def _eager(self, seqs: torch.Tensor) -> torch.Tensor:
        self.opt.zero_grad(set_to_none=True)
        loss = self._loss(seqs)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def __call__(self, seqs: torch.Tensor) -> float:
        if not self.graphed:
            return self._eager(seqs).item()
        if self.graph is None and self.eager_steps < self.WARMUP:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                loss = self._eager(seqs)
            torch.cuda.current_stream().wait_stream(side)
            self.eager_steps += 1
            return loss.item()
        if self.graph is None:
            # Captured with the gradients unset: the graph's backward writes them afresh at
            # every replay (no zeroing between steps), and AdamW reads them there.
            self.static_seqs = seqs.clone()
            self.opt.zero_grad(set_to_none=True)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.static_loss = self._loss(self.static_seqs)
                self.static_loss.backward()
                self.opt.step()
        self.static_seqs.copy_(seqs)
        self.graph.replay()
        return self.static_loss.item()  # synchronizes


def train(attention_cls: type, args, device: torch.device) -> tuple[list[float], float]:
    torch.manual_seed(args.seed)
    model = LM(args.vocab, args.seq, args.dim, args.layers, args.heads, args.kv_heads, attention_cls).to(device)
    step_fn = Step(model, args, device, graphed=device.type == "cuda" and not args.no_cuda_graph)
    losses, tokens, elapsed = [], 0, 0.0
    warmup = min(5, args.steps // 4)
    batches = markov_batches(args.steps, args.batch, args.seq + 1, args.vocab, args.seed, device)
    for step, seqs in enumerate(batches):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        value = step_fn(seqs)
        if step >= warmup:
            elapsed += time.perf_counter() - start
            tokens += seqs.shape[0] * (seqs.shape[1] - 1)
        losses.append(value)
        if args.log_every and step % args.log_every == 0:
            print(f"  step {step:4d} loss {value:.4f}", flush=True)
    return losses, tokens / elapsed if elapsed else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attention", choices=["both", "tritonkit", "sdpa"], default="both")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--tiny", action="store_true", help="CPU-sized model and data (interpreter smoke run)")
    parser.add_argument("--autotune", action="store_true", help="let tritonkit autotune its kernels (slow start)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq", type=int, default=256, help="tokens per training sequence")
    parser.add_argument("--vocab", type=int, default=16)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--no-cuda-graph", action="store_true",
                        help="run every step eagerly instead of replaying a captured CUDA graph")
    args = parser.parse_args(argv)
    if args.tiny:
        args.batch, args.seq, args.vocab, args.dim, args.layers, args.heads, args.kv_heads = 2, 31, 16, 64, 1, 2, 1
        args.log_every = 0

    device = tritonkit.default_device()
    print(f"device: {tritonkit._runtime.describe()}")
    print(f"order-2 Markov language: {args.steps} steps, batch {args.batch}, seq {args.seq}, vocab {args.vocab}; "
          f"model dim {args.dim}, {args.layers} layers, {args.heads} heads over {args.kv_heads} kv heads")
    backends = {"tritonkit": tritonkit.nn.Attention, "sdpa": SDPAAttention}
    chosen = list(backends) if args.attention == "both" else [args.attention]
    results = {}
    for name in chosen:
        print(f"{name}:", flush=True)
        results[name] = train(backends[name], args, device)
    tail = max(1, min(20, args.steps // 5))
    print()
    for name, (losses, rate) in results.items():
        final = sum(losses[-tail:]) / tail
        print(f"{name:>10}: final loss {final:.4f} (mean of last {tail} steps; first {losses[0]:.4f}), "
              f"{rate:,.0f} tokens/s")
    if len(results) == 2:
        a, b = (results[n][0] for n in chosen)
        gap = max(abs(x - y) for x, y in zip(a, b))
        print(f"largest per-step loss gap between the curves: {gap:.4f}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
