"""Where an eager step of `examples/train_lm.py` (its defaults with `--no-cuda-graph`) goes, for
tritonkit's attention and for SDPA in the same layer (developer tool, GPU):
    PYTHONPATH=src python3 benchmarks/profile_train_lm.py [--steps 5]

For each backend: the step time with a sync at each end (as the example times it), the GPU's
busy time inside it, and torch.profiler's top host (self CPU) and device (self CUDA) entries,
so a step bound by host time shows which calls cost it.
"""
import argparse
import importlib.util
import os
import pathlib
import time

os.environ.setdefault("TRITONKIT_AUTOTUNE", "0")
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import tritonkit  # noqa: E402

_EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "train_lm.py"


def load_example():
    spec = importlib.util.spec_from_file_location("train_lm", _EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rows", type=int, default=14)
    args = parser.parse_args()
    ex = load_example()
    device = torch.device("cuda")
    batch, seq, vocab, dim, layers, heads, kv_heads = 64, 256, 16, 256, 4, 4, 2
    backends = {"tritonkit": tritonkit.nn.Attention, "sdpa": ex.SDPAAttention}
    for name, cls in backends.items():
        torch.manual_seed(0)
        model = ex.LM(vocab, seq, dim, layers, heads, kv_heads, cls).to(device)
        # the example's own step, run eagerly: what the profile is about is each op's host time
        step_fn = ex.Step(model, argparse.Namespace(lr=1e-3), device, graphed=False)
        seqs = next(ex.markov_batches(1, batch, seq + 1, vocab, 0, device))

        def step():
            return step_fn(seqs)

        for _ in range(10):
            step()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(20):
            step()
        print(f"\n== {name}: {(time.perf_counter() - start) / 20 * 1e3:.2f} ms a step unprofiled")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(args.steps):
                step()
        events = prof.key_averages()
        busy = sum(e.self_device_time_total for e in events if e.self_device_time_total > 0) / args.steps
        print(f"GPU busy {busy / 1e3:.2f} ms a step (profiled)")
        print("top host (self CPU us a step, calls a step):")
        for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:args.rows]:
            print(f"  {e.self_cpu_time_total / args.steps:9.1f} us {e.count // args.steps:5d}x  {e.key[:90]}")
        print("top device (self CUDA us a step, calls a step):")
        for e in sorted(events, key=lambda e: -e.self_device_time_total)[:args.rows]:
            if e.self_device_time_total > 0:
                print(f"  {e.self_device_time_total / args.steps:9.1f} us {e.count // args.steps:5d}x  {e.key[:90]}")


if __name__ == "__main__":
    main()
