"""Prepared for the next GPU session, not run: config A's FSDP2 step on one GPU under
torch.profiler with the host's activity too, two steps after six, written as a Chrome trace (to
read offline: where the GPU idles within the step and what the host runs then), with the idle
time between kernels summed here. One rank under torchrun:
    python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
        benchmarks/results/2026-12-04-h200-s22-fsdp_trace.py OUT_DIR [--compile] [--patch none]"""
import gzip
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

path = Path(__file__).resolve().parents[2] / "examples" / "train_fsdp.py"
spec = importlib.util.spec_from_file_location("train_fsdp", path)
ex = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ex)

out_dir, flags = sys.argv[1], sys.argv[2:]
torch.cuda.set_device(0)
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
args = ex.parse_args(["--config", "A", "--patch", "tritonkit", "--quiet", *flags])
from torch.distributed.device_mesh import DeviceMesh  # noqa: E402

device = torch.device("cuda", 0)
model = ex.build_model(args, device)
ex.shard_model(model, args, DeviceMesh.from_group(dist.group.WORLD, "cuda"))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)


def step(i):
    for m in range(2):
        ids = ex.micro_batch(args, i, m, 128256).to(device)
        (model(input_ids=ids, labels=ids).loss / 2).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


for i in range(6):
    step(i)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for i in range(6, 8):
        step(i)
    torch.cuda.synchronize()
name = f"trace_{args.patch}{'_compile' if args.compile else ''}"
raw = os.path.join(out_dir, name + ".json")
prof.export_chrome_trace(raw)
events = json.load(open(raw))["traceEvents"]
with open(raw, "rb") as src, gzip.open(raw + ".gz", "wb") as dst:
    shutil.copyfileobj(src, dst)
os.remove(raw)
kernels = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "kernel" and "dur" in e)
busy, end, gaps = 0.0, kernels[0][0], []
for start, stop in kernels:
    if start > end:
        gaps.append((start - end, end))
    busy += max(0.0, stop - max(start, end))
    end = max(end, stop)
span = end - kernels[0][0]
print(f"{name}: two steps {span / 1e3:.1f} ms from first kernel to last, kernels busy {busy / 1e3:.1f} ms, "
      f"idle {(span - busy) / 1e3:.1f} ms in {len(gaps)} gaps; the largest (us, at us from the start):")
for gap, at in sorted(gaps, reverse=True)[:15]:
    print(f"  {gap:9.1f} at {at - kernels[0][0]:10.1f}")
dist.destroy_process_group()
