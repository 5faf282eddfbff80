"""`tritonkit bench train`: a Hugging Face training step, end to end, per provider.

A step is forward with labels, backward and a fused AdamW update of bf16 weights (with
`--autocast`: of float32 weights, each forward inside a bf16 autocast region, as transformers'
Trainer runs a float32 model with `bf16=True`); the figure is tokens per second over the timed
steps, with the step time, the peak memory and the loss after them. Providers, each from the
same weights and the same batches: HF eager (SDPA attention), torch.compile of it, Liger Kernel
(when it imports), tritonkit (`tritonkit.transformers.patch`), and tritonkit under
torch.compile.

This is its own small runner rather than a registry entry: the kernel runner times one call
with an L2 clear before each and reports GB/s or TFLOP/s of a case's inputs, while a training
step mutates its model and optimizer, takes tens to hundreds of milliseconds, and is measured in
tokens/s and peak memory.

    tritonkit bench train                      # configs A and B on a GPU
    tritonkit bench train --config A --json train.json --plot train.png
    tritonkit bench train --compare 50         # loss curves, HF eager vs tritonkit, largest gap
    tritonkit bench train --config A --autocast   # float32 weights, bf16 autocast
    tritonkit bench train --config short       # 16 x 512 tokens: short sequences
    tritonkit bench train --config qwen3-moe --config gpt-oss   # reduced mixtures of experts
    tritonkit bench train                      # without a GPU: the tiny config, eager providers only

Random weights from a config and synthetic tokens (a random first-order Markov chain, so the
loss falls and two providers' curves can be compared); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from dataclasses import asdict, dataclass

import torch

from .. import _runtime
from .._progress import Progress

CONFIGS = {
    "A": dict(layers=8, hidden=2048, intermediate=8192, heads=16, kv_heads=8, vocab=128256, batch=4, seq=2048),
    "B": dict(layers=8, hidden=2048, intermediate=8192, heads=16, kv_heads=8, vocab=128256, batch=1, seq=8192),
    # Short sequences (issue 50's bar): A's model, 16 x 512 tokens, where kernels are short and
    # a step's host time shows.
    "short": dict(layers=8, hidden=2048, intermediate=8192, heads=16, kv_heads=8, vocab=128256, batch=16, seq=512),
    "tiny": dict(layers=2, hidden=64, intermediate=128, heads=4, kv_heads=2, vocab=1000, batch=2, seq=32),
    # Qwen3-30B-A3B's widths, 4 of its 48 layers: 128 experts, top-8, expert width 768, 8,192 tokens.
    "qwen3-moe": dict(family="qwen3_moe", layers=4, hidden=2048, intermediate=6144, heads=32, kv_heads=4,
                      head_dim=128, experts=128, top_k=8, expert_width=768, vocab=151936, batch=1, seq=8192),
    # gpt-oss-20b's widths, 4 of its 24 layers (sliding and full alternating, window 128, sinks):
    # 32 experts, top-4, width 2880. Its HF peer is eager attention (transformers has no SDPA path
    # for the sinks), whose (heads x tokens x tokens) scores bound the batch.
    "gpt-oss": dict(family="gpt_oss", layers=4, hidden=2880, intermediate=2880, heads=64, kv_heads=8, head_dim=64,
                    experts=32, top_k=4, expert_width=2880, window=128, vocab=201088, batch=2, seq=2048,
                    attn="eager"),
}
PROVIDERS = ("hf eager", "hf compile", "liger", "tritonkit", "tritonkit compile")
SUCCESSORS = 4  # each token has this many possible next tokens: the loss floor is log(4)


@dataclass
class TrainResult:
    config: str
    provider: str
    tokens_per_s: float | None
    step_ms: float | None
    peak_gib: float | None
    loss: float | None
    note: str = ""
    autocast: bool = False        # float32 weights, forwards in a bf16 autocast region


def llama(config: dict, device: torch.device, dtype: torch.dtype, seed: int = 0, attn: str = "sdpa"):
    """A LlamaForCausalLM with random weights from `config` (the CONFIGS keys), on device in dtype."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=config["vocab"], hidden_size=config["hidden"],
                      intermediate_size=config["intermediate"], num_hidden_layers=config["layers"],
                      num_attention_heads=config["heads"], num_key_value_heads=config["kv_heads"],
                      max_position_embeddings=max(config["seq"], 128), tie_word_embeddings=False)
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM._from_config(cfg, attn_implementation=attn)
    finally:
        torch.set_default_dtype(previous)
    return model.train()


def _family_config(config: dict):
    """The transformers config of a CONFIGS entry of a family other than Llama."""
    from transformers import GptOssConfig, Qwen3MoeConfig

    common = dict(vocab_size=config["vocab"], hidden_size=config["hidden"], num_hidden_layers=config["layers"],
                  num_attention_heads=config["heads"], num_key_value_heads=config["kv_heads"],
                  head_dim=config["head_dim"], num_experts_per_tok=config["top_k"],
                  max_position_embeddings=max(config["seq"], 4096), tie_word_embeddings=False)
    if config["family"] == "qwen3_moe":
        return Qwen3MoeConfig(**common, intermediate_size=config["intermediate"], num_experts=config["experts"],
                              moe_intermediate_size=config["expert_width"], norm_topk_prob=True)
    return GptOssConfig(**common, intermediate_size=config["expert_width"], num_local_experts=config["experts"],
                        sliding_window=config["window"])


def model(config: dict, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """The causal LM of a CONFIGS entry (Llama unless it names a family), random weights, on device in dtype."""
    if config.get("family", "llama") == "llama":
        return llama(config, device, dtype, seed, config.get("attn", "sdpa"))
    from transformers import AutoModelForCausalLM

    cfg = _family_config(config)
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            built = AutoModelForCausalLM.from_config(cfg, attn_implementation=config.get("attn", "sdpa"))
    finally:
        torch.set_default_dtype(previous)
    return built.train()


def describe_config(c: dict) -> str:
    words = f"{c['layers']} layers, hidden {c['hidden']}, "
    if "experts" in c:
        words += f"{c['experts']} experts top-{c['top_k']} of width {c['expert_width']}, "
    else:
        words += f"intermediate {c['intermediate']}, "
    return words + f"{c['heads']}/{c['kv_heads']} heads, vocab {c['vocab']}, batch {c['batch']} x {c['seq']}"


def markov_batches(config: dict, device: torch.device, count: int, seed: int = 0) -> list[torch.Tensor]:
    """`count` (batch, seq) token batches from a first-order Markov chain drawn once from `seed`."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    V, B, N = config["vocab"], config["batch"], config["seq"]
    table = torch.randint(0, V, (V, SUCCESSORS), generator=g)
    batches = []
    for _ in range(count):
        tokens = torch.empty(B, N, dtype=torch.long)
        tokens[:, 0] = torch.randint(0, V, (B,), generator=g)
        choice = torch.randint(0, SUCCESSORS, (B, N), generator=g)
        for i in range(1, N):
            tokens[:, i] = table[tokens[:, i - 1], choice[:, i]]
        batches.append(tokens.to(device))
    return batches


def prepare(provider: str, model):
    """The model to step for `provider` (patched and/or compiled), or raise RuntimeError if unavailable."""
    if provider == "liger" and model.config.model_type != "llama":
        raise RuntimeError(f"liger: this runner applies Liger's Llama patch only, not to {model.config.model_type}")
    if provider == "liger":
        try:
            from liger_kernel.transformers import apply_liger_kernel_to_llama
        except ImportError as err:
            raise RuntimeError(f"liger_kernel does not import ({err})") from None
        apply_liger_kernel_to_llama(model=model)
        return model
    if provider.startswith("tritonkit"):
        import tritonkit.transformers as tkt
        tkt.patch(model)
    return torch.compile(model) if provider.endswith("compile") else model


def _cleanup() -> None:
    """Undo class-level changes (tritonkit's family-wide rotary) so the next provider starts clean."""
    import sys
    if "tritonkit.transformers" in sys.modules:
        sys.modules["tritonkit.transformers"].unpatch_classes()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def weights_dtype(device: torch.device, autocast: bool) -> torch.dtype:
    """bf16 weights on a GPU (float32 through the interpreter), float32 ones under autocast."""
    return torch.bfloat16 if device.type == "cuda" and not autocast else torch.float32


def train_steps(model, batches: list[torch.Tensor], steps: int, device: torch.device, lr: float = 3e-4,
                on_step=None, autocast: bool = False):
    """`steps` AdamW steps over `batches` (cycled); `on_step(i, loss_tensor)` after each. autocast:
    each forward inside a bf16 autocast region (the backward outside it, as torch recommends)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, fused=device.type == "cuda")
    loss = None
    for i in range(steps):
        x = batches[i % len(batches)]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if on_step is not None:
            on_step(i, loss)
    return opt, loss


def measure(config_name: str, provider: str, device: torch.device, warmup: int, steps: int,
            autocast: bool = False) -> TrainResult:
    config = CONFIGS[config_name]
    tokens = config["batch"] * config["seq"]
    cuda = device.type == "cuda"
    failed = lambda note: TrainResult(config_name, provider, None, None, None, None, note, autocast)  # noqa: E731
    try:
        built = prepare(provider, model(config, device, weights_dtype(device, autocast)))
        batches = markov_batches(config, device, 4)
        opt, _ = train_steps(built, batches, warmup, device, autocast=autocast)
        del opt
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        opt, loss = train_steps(built, batches, steps, device, autocast=autocast)
        loss = float(loss.detach())  # waits for the last step
        elapsed = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
        del built, opt
        return TrainResult(config_name, provider, steps * tokens / elapsed, 1e3 * elapsed / steps, peak, loss,
                           autocast=autocast)
    except torch.OutOfMemoryError:
        return failed("out of memory")
    except RuntimeError as err:  # an unavailable or failing provider must not end the run
        return failed(f"{type(err).__name__}: {str(err).splitlines()[0][:100]}")
    finally:
        _cleanup()


def table(results: list[TrainResult]) -> str:
    lines = []
    for config in dict.fromkeys(r.config for r in results):
        rows = [r for r in results if r.config == config]
        c = CONFIGS[config]
        peers = [r for r in rows if not r.provider.startswith("tritonkit") and r.tokens_per_s]
        best = max(peers, key=lambda r: r.tokens_per_s, default=None)
        lines.append(f"config {config}: {describe_config(c)}"
                     + ("; float32 weights, bf16 autocast" if rows[0].autocast else "")
                     + (f"; ratio against the best peer ({best.provider})" if best else ""))
        lines.append(f"{'provider':<20}{'tokens/s':>12}{'step ms':>10}{'peak GiB':>10}{'loss':>9}{'ratio':>8}")
        for r in rows:
            if r.tokens_per_s is None:
                lines.append(f"{r.provider:<20}  {r.note}")
                continue
            peak = f"{r.peak_gib:.1f}" if r.peak_gib is not None else "-"
            ratio = f"{r.tokens_per_s / best.tokens_per_s:.2f}x" if best else "-"
            lines.append(f"{r.provider:<20}{r.tokens_per_s:>12.4g}{r.step_ms:>10.1f}{peak:>10}{r.loss:>9.3f}"
                         f"{ratio:>8}")
        lines.append("")
    return "\n".join(lines)


def _plot(path: str, results: list[TrainResult]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = list(dict.fromkeys(r.config for r in results))
    fig, axes = plt.subplots(1, len(configs), figsize=(5 * len(configs), 3.5), squeeze=False)
    for ax, config in zip(axes[0], configs):
        rows = [r for r in results if r.config == config and r.tokens_per_s]
        ax.bar([r.provider for r in rows], [r.tokens_per_s / 1e3 for r in rows])
        ax.set_title(f"config {config}")
        ax.set_ylabel("k tokens/s")
        ax.tick_params(axis="x", rotation=30, labelsize=7)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def compare(config_name: str, device: torch.device, steps: int, autocast: bool = False) -> float:
    """Loss curves of HF eager and tritonkit over `steps` from one seed; returns the largest gap."""
    config = CONFIGS[config_name]
    batches = markov_batches(config, device, steps)
    curves = {}
    with Progress(2, stream=sys.stdout, enabled=device.type != "cuda") as progress:
        for provider in ("hf eager", "tritonkit"):
            losses = []
            with progress.step(f"{steps} steps of {provider}"):
                built = prepare(provider, model(config, device, weights_dtype(device, autocast)))
                opt, _ = train_steps(built, batches, steps, device,
                                     on_step=lambda i, loss: losses.append(loss.detach()), autocast=autocast)
            curves[provider] = [float(x) for x in losses]
            del built, opt
            _cleanup()
    gaps = [abs(a - b) for a, b in zip(curves["hf eager"], curves["tritonkit"])]
    print(f"{'step':>5}{'hf eager':>12}{'tritonkit':>12}{'gap':>10}")
    for i, (a, b, g) in enumerate(zip(curves["hf eager"], curves["tritonkit"], gaps)):
        print(f"{i:>5}{a:>12.4f}{b:>12.4f}{g:>10.4f}")
    worst = max(range(steps), key=gaps.__getitem__)
    print(f"largest per-step gap: {gaps[worst]:.4f} at step {worst} "
          f"(relative {gaps[worst] / curves['hf eager'][worst]:.2%}); final losses "
          f"{curves['hf eager'][-1]:.4f} vs {curves['tritonkit'][-1]:.4f}")
    return gaps[worst]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tritonkit bench train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", choices=sorted(CONFIGS),
                        help="A, B, short, qwen3-moe, gpt-oss or tiny (repeatable); default A and B on a GPU, tiny "
                             "without one")
    parser.add_argument("--provider", action="append", choices=PROVIDERS, help="repeatable; default all")
    parser.add_argument("--steps", type=int, help="timed steps (default 10 on a GPU, 2 without)")
    parser.add_argument("--warmup", type=int, help="untimed steps first (default 3 on a GPU, 1 without)")
    parser.add_argument("--compare", type=int, metavar="STEPS",
                        help="instead: loss curves of HF eager and tritonkit over STEPS steps, largest gap")
    parser.add_argument("--autocast", action="store_true",
                        help="float32 weights, each forward in a bf16 autocast region (Trainer's bf16=True on a "
                             "float32 model), instead of bf16 weights")
    parser.add_argument("--json", metavar="PATH", help="write every figure as JSON")
    parser.add_argument("--plot", metavar="PATH.png", help="tokens/s per provider and config")
    args = parser.parse_args(argv)
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("tritonkit bench train needs transformers (pip install 'tritonkit[hf]')")
        return 2

    device = _runtime.default_device()
    on_gpu = device.type == "cuda"
    print(f"tritonkit bench train: {_runtime.describe()}")
    configs = args.config or (["A", "B"] if on_gpu else ["tiny"])
    if not on_gpu and any(c != "tiny" for c in configs):
        print("configs other than tiny need a GPU; without one, use --config tiny")
        return 2
    if args.compare:
        compare(configs[0], device, args.compare, args.autocast)
        return 0
    providers = args.provider or list(PROVIDERS)
    if not on_gpu:
        print("NOTE: no CUDA device: the tiny config in float32 through Triton's interpreter; these are not "
              "GPU timings, and the compiled providers are left out.")
        providers = [p for p in providers if not p.endswith("compile")]
    steps = args.steps or (10 if on_gpu else 2)
    warmup = args.warmup if args.warmup is not None else (3 if on_gpu else 1)
    # Liger patches classes and module functions for good: it runs after every other provider.
    order = [(c, p) for c in configs for p in providers if p != "liger"]
    order += [(c, p) for c in configs for p in providers if p == "liger"]
    measured = {}
    # Through the interpreter a provider's steps take a while: say which one runs (on a GPU the
    # output stays the table alone).
    with Progress(len(order), stream=sys.stdout, enabled=not on_gpu) as progress:
        for config, provider in order:
            with progress.step(f"{provider} on config {config}"):
                measured[(config, provider)] = measure(config, provider, device, warmup, steps, args.autocast)
            progress.say(f"  measured {provider} on config {config}")
    results = [measured[(c, p)] for c in configs for p in providers]
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": _runtime.describe(), "steps": steps, "warmup": warmup, "autocast": args.autocast,
                       "configs": {c: CONFIGS[c] for c in configs}, "results": [asdict(r) for r in results]},
                      f, indent=1)
        print(f"wrote {args.json}")
    if args.plot:
        _plot(args.plot, results)
        print(f"wrote {args.plot}")
    return 0
