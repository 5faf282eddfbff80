"""Kernel-by-kernel GPU time of three training steps of a `tritonkit bench train` config
(torch.profiler), after three warm-up steps: where a step's time goes, tritonkit-patched or as
another provider of the bench runs it.

    PYTHONPATH=src python3 benchmarks/profile_train_step.py [--config B|qwen3-moe|gpt-oss] [--provider liger]
        [--autocast]
"""
import argparse, time, torch
from torch.profiler import profile, ProfilerActivity
from tritonkit.bench import train as T
dev = torch.device("cuda")
parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--config", choices=("A", "B", "qwen3-moe", "gpt-oss"), default="A")
parser.add_argument("--provider", choices=("tritonkit", "liger", "hf eager"), default="tritonkit")
parser.add_argument("--autocast", action="store_true", help="float32 weights, forwards under bf16 autocast")
args = parser.parse_args()
cfg = T.CONFIGS[args.config]
model = T.prepare(args.provider, T.model(cfg, dev, T.weights_dtype(dev, args.autocast)))
batches = T.markov_batches(cfg, dev, 4)
opt, _ = T.train_steps(model, batches, 3, dev, autocast=args.autocast)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as p:
    t = time.perf_counter()
    opt, loss = T.train_steps(model, batches, 3, dev, autocast=args.autocast)
    loss.item(); torch.cuda.synchronize()
    print("step ms", (time.perf_counter() - t) / 3 * 1e3)
ka = p.key_averages()
tot = sum(e.self_device_time_total for e in ka if e.self_device_time_total > 0)
print(f"GPU busy per step {tot / 3 / 1e3:.1f} ms")
rows = sorted((e for e in ka if e.self_device_time_total > 0), key=lambda e: -e.self_device_time_total)[:40]
for e in rows:
    print(f"{e.self_device_time_total / 3 / 1e3:8.2f} ms {e.count // 3:5d}x  {e.key[:100]}")
