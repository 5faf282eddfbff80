"""Train a small Hugging Face Llama with tritonkit patched in by one call, beside the unpatched model.

The text is Python's own standard library source (it ships with every Python), read as bytes:
a byte-level tokenizer (256 byte values plus padding) needs no download. Both models start from
the same weights (one seed) and see the same batches, so their loss curves should agree within
the dtype's noise; the script prints both curves and, where matplotlib is installed, saves a plot.

    pip install -e ".[hf]"                                 # transformers; add matplotlib for the plot
    python examples/finetune_llama.py                      # GPU: bf16, 200 steps
    python examples/finetune_llama.py --steps 3 --tiny     # CPU smoke run through the interpreter
"""

from __future__ import annotations

import argparse
import copy
import pathlib
import sysconfig
import time

import torch

import tritonkit
import tritonkit.transformers as tkt
from transformers import LlamaConfig, LlamaForCausalLM

PAD = 256  # byte values are 0..255


def corpus(limit_bytes: int) -> torch.Tensor:
    """Bytes of the standard library's .py files, in a fixed order, as one long token tensor."""
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    data = bytearray()
    for path in sorted(root.glob("*.py")):
        data += path.read_bytes()
        if len(data) >= limit_bytes:
            break
    return torch.frombuffer(data[:limit_bytes], dtype=torch.uint8).long()


def batches(tokens: torch.Tensor, batch: int, seq: int, steps: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(tokens) - seq, (steps, batch), generator=g)
    return [torch.stack([tokens[s:s + seq] for s in row.tolist()]) for row in starts]


def model_from_config(tiny: bool, seq: int) -> LlamaForCausalLM:
    width = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2) if tiny else \
        dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=6)
    config = LlamaConfig(vocab_size=PAD + 1, num_attention_heads=4 if tiny else 8, num_key_value_heads=2 if tiny else 4,
                         max_position_embeddings=seq, pad_token_id=PAD, bos_token_id=PAD, eos_token_id=PAD,
                         attn_implementation="sdpa", **width)
    return LlamaForCausalLM(config)


def train(model, data: list[torch.Tensor], device: torch.device, lr: float) -> tuple[list[float], float]:
    opt = torch.optim.AdamW(model.parameters(), lr=lr, fused=device.type == "cuda")
    losses = []
    start = time.perf_counter()
    for x in data:
        x = x.to(device)
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    losses = [float(v) for v in losses]
    return losses, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--tiny", action="store_true", help="a 2-layer model, batch 2 x 32 (CPU smoke run)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", default="finetune_llama.png", help="where to save the plot ('' for none)")
    args = parser.parse_args()
    if args.tiny:
        args.batch, args.seq = 2, 32

    device = tritonkit.default_device()
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    data = batches(corpus(4 << 20), args.batch, args.seq, args.steps, args.seed)

    torch.manual_seed(args.seed)
    model = model_from_config(args.tiny, args.seq).to(device, dtype).train()
    unpatched = copy.deepcopy(model)  # same weights; trained first, before any patching
    ref_losses, ref_s = train(unpatched, data, device, args.lr)

    model = tkt.patch(model)  # the one call
    print(model.tritonkit_report)
    tk_losses, tk_s = train(model, data, device, args.lr)

    tokens = args.steps * args.batch * args.seq
    print(f"{'step':>5}{'unpatched':>12}{'tritonkit':>12}")
    for i in range(0, args.steps, max(1, args.steps // 20)):
        print(f"{i:>5}{ref_losses[i]:>12.4f}{tk_losses[i]:>12.4f}")
    gap = max(abs(a - b) for a, b in zip(ref_losses, tk_losses))
    print(f"final loss: unpatched {ref_losses[-1]:.4f}, tritonkit {tk_losses[-1]:.4f}; largest per-step gap {gap:.4f}")
    print(f"tokens/s: unpatched {tokens / ref_s:.4g}, tritonkit {tokens / tk_s:.4g} (first steps include compiling)")

    save_plot(args.plot, ref_losses, tk_losses)


def save_plot(path: str, ref_losses: list[float], tk_losses: list[float]) -> None:
    if not path:
        return
    try:
        import matplotlib
    except ImportError:
        print("no plot: matplotlib is not installed (pip install matplotlib)")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(ref_losses, label="unpatched (HF, SDPA)")
    ax.plot(tk_losses, label="tritonkit.transformers.patch", linestyle="--")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats / byte)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
