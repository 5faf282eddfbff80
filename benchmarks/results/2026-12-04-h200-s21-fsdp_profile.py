"""Where config A's FSDP2 step on one GPU spends its GPU time, tritonkit eager against tritonkit
with each decoder layer compiled (which measured 0.955x of eager in call 5): torch.profiler over
two steps after six, the CUDA kernels by total time. One rank under torchrun:
    python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
        benchmarks/results/2026-12-04-h200-s21-fsdp_profile.py [--compile]"""
import importlib.util
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

path = Path(__file__).resolve().parents[2] / "examples" / "train_fsdp.py"
spec = importlib.util.spec_from_file_location("train_fsdp", path)
ex = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ex)

torch.cuda.set_device(0)
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
args = ex.parse_args(["--config", "A", "--patch", "tritonkit", "--quiet", *sys.argv[1:]])
from torch.distributed.device_mesh import DeviceMesh  # noqa: E402

device = torch.device("cuda", 0)
model = ex.build_model(args, device)
ex.shard_model(model, args, DeviceMesh.from_group(dist.group.WORLD, "cuda"))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)


def step(i):
    for m in range(2):
        ids = ex.micro_batch(args, i, m, 128256).to(device)
        (model(input_ids=ids, labels=ids).loss / 2).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


for i in range(6):
    step(i)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for i in range(6, 8):
        step(i)
    torch.cuda.synchronize()
events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
total = sum(e.self_device_time_total for e in events)
print(f"compile={args.compile}: CUDA kernel time over two steps {total / 1e3:.1f} ms, {len(events)} kernels")
for e in sorted(events, key=lambda e: -e.self_device_time_total)[:28]:
    print(f"  {e.self_device_time_total / 1e3:8.2f} ms  {e.count:6d}x  {e.key[:110]}")
dist.destroy_process_group()
