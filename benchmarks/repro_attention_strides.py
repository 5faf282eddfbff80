"""Reproduce a fuzz failure on the GPU: attention forward with non-unit head-dim strides.

Runs each variant in a subprocess (a faulting kernel poisons its CUDA context) and prints
the relative error against float64. PYTHONPATH=src python3 benchmarks/repro_attention_strides.py
"""

import os
import subprocess
import sys

VARIANTS = {
    "fuzz case (q D-stride 2, k seq-stride 1)": "q_d=2 k_t=1",
    "q D-stride 2 only": "q_d=2 k_t=0",
    "k seq-stride 1 only (K transposed)": "q_d=1 k_t=1",
    "contiguous, odd offsets": "q_d=1 k_t=0",
}


def run_case(q_d: int, k_t: int, stages: int) -> None:
    import torch
    import tritonkit
    from tritonkit.ops import attention as A

    torch.manual_seed(0)
    dev = tritonkit.default_device()
    bq = torch.randn(9000 * q_d, dtype=torch.bfloat16, device=dev)
    q = bq.as_strided((1, 1, 127, 32), (1, 2, 32 * q_d, q_d), 8)
    bk = torch.randn(9000, dtype=torch.bfloat16, device=dev)
    k = bk.as_strided((1, 1, 65, 32), (130, 8320, 1, 130), 7) if k_t else bk.as_strided((1, 1, 65, 32), (0, 0, 32, 1), 7)
    bv = torch.randn(30000, dtype=torch.bfloat16, device=dev)
    v = bv.as_strided((1, 1, 65, 32), (64, 128, 384, 1), 11)
    cfg = A.fixed_configs(32)["fwd"]
    cfg = A.TileConfig(cfg.block_m, cfg.block_n, cfg.num_warps, stages)
    o, _ = A.attention_fwd(q, k, v, False, config=cfg)
    ref = A.attention_reference(q, k, v)
    err = ((o.double() - ref).norm() / ref.norm()).item()
    print(f"    stages {stages}: relative error {err:.3e}", flush=True)


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(print(__doc__))
    if len(sys.argv) > 1:
        run_case(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
        sys.exit(0)
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
    for name, spec in VARIANTS.items():
        q_d, k_t = (int(p.split("=")[1]) for p in spec.split())
        print(name, flush=True)
        for stages in (3, 1):
            r = subprocess.run([sys.executable, __file__, str(q_d), str(k_t), str(stages)], env=env,
                               capture_output=True, text=True, timeout=120)
            print(r.stdout.rstrip() or f"    stages {stages}: FAILED {r.stderr.strip().splitlines()[-1][:150]}", flush=True)
