"""L2 float32 atomic-add rate on this GPU: RED.v4 of 64 x 128 tiles from every SM into a region
that fits L2, against plain stores of the same tiles."""
import torch, triton, triton.language as tl

@triton.jit
def k_red(buf, n_tiles, reps, ATOMIC: tl.constexpr, WARPS: tl.constexpr):
    pid = tl.program_id(0)
    r = tl.arange(0, 64)[:, None] * 128 + tl.arange(0, 128)[None, :]
    v = tl.full([64, 128], 1.0, tl.float32)
    for i in range(reps):
        t = (pid * 7 + i * 13) % n_tiles
        if ATOMIC:
            tl.atomic_add(buf + t * 8192 + r, v, sem="relaxed", scope="gpu")
        else:
            tl.store(buf + t * 8192 + r, v)

for region_mb in (8, 32, 256):
    n_tiles = region_mb * 2**20 // (8192 * 4)
    buf = torch.zeros(n_tiles * 8192, device="cuda")
    for atomic in (True, False):
        for progs in (132, 264):
            reps = 2000
            k_red[(progs,)](buf, n_tiles, 10, atomic, 4, num_warps=4)
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
            e0.record(); k_red[(progs,)](buf, n_tiles, reps, atomic, 4, num_warps=4); e1.record(); torch.cuda.synchronize()
            ms = e0.elapsed_time(e1)
            gbs = progs * reps * 32768 / ms / 1e6
            print(f"region {region_mb} MiB {'atomic' if atomic else 'store '} {progs} programs: {gbs:.0f} GB/s "
                  f"({ms / reps * 1e3:.2f} us per tile per program)", flush=True)
ptx = k_red.warmup(buf, n_tiles, 10, True, 4, grid=(1,), num_warps=4).asm["ptx"]
import re; print(sorted(set(re.findall(r"(?:red|atom)\.[a-z0-9.]+", ptx))))
