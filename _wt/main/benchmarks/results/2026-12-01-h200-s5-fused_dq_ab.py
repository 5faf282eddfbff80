"""Fused dQ in the Gluon dK/dV kernel (runs on the branch fused-dq, whose attention_bwd_gluon takes fuse_dq):
correctness against float64 and the two-kernel backward, determinism, then timing fused vs two kernels
(and cuDNN's backward) in one process. QUICK=1: timing of five shapes only."""
import sys, time, torch
sys.path.insert(0, "tests")
from tritonkit.ops.attention import attention_fwd
from tritonkit.gluon import attention_bwd as gb
from _tolerance import relative_error

torch.manual_seed(0)
dev = "cuda"

def qkv(B, H, Hkv, Nq, Nk, D):
    return (torch.randn(B, H, Nq, D, dtype=torch.bfloat16, device=dev),
            torch.randn(B, Hkv, Nk, D, dtype=torch.bfloat16, device=dev),
            torch.randn(B, Hkv, Nk, D, dtype=torch.bfloat16, device=dev))

def run(q, k, v, do, o, lse, causal, fuse, softcap=0.0):
    scale = q.shape[-1] ** -0.5
    delta = (do.float() * o.float()).sum(-1)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    gb.attention_bwd_gluon(do, q, k, v, lse, delta, dq, dk, dv, causal, scale, softcap, fuse_dq=fuse)
    return dq, dk, dv

def ref_grads(q, k, v, do, causal):
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    G = q.shape[1] // k.shape[1]
    kk, vv = kd.repeat_interleave(G, 1), vd.repeat_interleave(G, 1)
    s = qd @ kk.transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        Nq, Nk = s.shape[-2:]
        s = s.masked_fill(torch.ones(Nq, Nk, dtype=torch.bool, device=dev).triu(1), float("-inf"))
    out = torch.softmax(s, -1).nan_to_num() @ vv
    out.backward(do.double())
    return qd.grad, kd.grad, vd.grad

import os
QUICK = os.environ.get("QUICK")
print("== correctness", flush=True)
bad = 0
for (B, H, Hkv, Nq, Nk, D) in [] if QUICK else [(2, 4, 2, 333, 333, 128), (1, 2, 2, 200, 515, 128), (3, 4, 1, 515, 200, 128),
                               (2, 2, 2, 256, 256, 128), (1, 2, 1, 1, 77, 128), (1, 2, 2, 1100, 1100, 128),
                               (2, 4, 2, 333, 333, 64), (3, 4, 1, 515, 200, 64), (1, 2, 2, 1100, 1100, 64)]:
    for causal in (False, True):
        q, k, v = qkv(B, H, Hkv, Nq, Nk, D)
        do = torch.randn_like(q)
        o, lse = attention_fwd(q, k, v, causal, gluon=False)
        two = run(q, k, v, do, o, lse, causal, False)
        fused = run(q, k, v, do, o, lse, causal, True)
        again = run(q, k, v, do, o, lse, causal, True)
        torch.cuda.synchronize()
        ref = ref_grads(q, k, v, do, causal)
        det = all(torch.equal(a, b) for a, b in zip(fused, again))
        errs = [(relative_error(f, r), relative_error(t, r)) for f, t, r in zip(fused, two, ref)]
        ok = det and all(ef <= 1.5 * et + 1e-3 for ef, et in errs)
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} B{B} H{H}/{Hkv} Nq{Nq} Nk{Nk} D{D} causal={causal} det={det} "
              + " ".join(f"{n} {ef:.2e}/{et:.2e}" for n, (ef, et) in zip(("dq", "dk", "dv"), errs)), flush=True)
print("correctness failures:", bad, flush=True)

def bench(f, reps=20):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(reps):
        f()
    e1.record(); torch.cuda.synchronize()
    return e0.elapsed_time(e1) / reps

print("== timing (ms, TFLOP/s of the backward: 2.5x the forward's 4 B H Nq Nk D, causal half)", flush=True)
from torch.nn.attention import sdpa_kernel, SDPBackend
SHAPES = [(4, 32, 32, 4096, 128, True), (4, 32, 32, 4096, 128, False),
                                  (4, 32, 8, 4096, 128, True), (1, 16, 8, 8192, 128, True),
                                  (4, 32, 32, 16384, 128, True), (4, 32, 32, 16384, 128, False),
                                  (4, 32, 32, 4096, 64, True), (4, 32, 32, 4096, 64, False),
                                  (8, 16, 16, 1024, 64, False)]
if QUICK:
    SHAPES = [(4, 32, 32, 4096, 128, True), (4, 32, 32, 4096, 128, False), (1, 16, 8, 8192, 128, True),
              (4, 32, 8, 4096, 128, True), (4, 32, 32, 16384, 128, False)]
for (B, H, Hkv, N, D, causal) in SHAPES:
    q, k, v = qkv(B, H, Hkv, N, N, D)
    do = torch.randn_like(q)
    o, lse = attention_fwd(q, k, v, causal, gluon=False)
    flop = 2.5 * 4 * B * H * N * N * D * (0.5 if causal else 1.0)
    scale = D ** -0.5
    delta = (do.float() * o.float()).sum(-1)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    def two():
        gb.attention_bwd_gluon(do, q, k, v, lse, delta, dq, dk, dv, causal, scale, 0.0, fuse_dq=False)
    def fused():
        gb.attention_bwd_gluon(do, q, k, v, lse, delta, dq, dk, dv, causal, scale, 0.0, fuse_dq=True)
    qc, kc, vc = (t.detach().clone().requires_grad_() for t in (q, k, v))
    holder = []
    def cudnn():
        if not holder:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                holder.append(torch.nn.functional.scaled_dot_product_attention(
                    qc, kc, vc, is_causal=causal, enable_gqa=Hkv != H))
        holder[0].backward(do, retain_graph=True)
    res = {}
    runs = (("two", two), ("fused", fused), ("two", two), ("fused", fused)) if QUICK else (
        ("two", two), ("fused", fused), ("cudnn", cudnn), ("two", two), ("fused", fused))
    for name, f in runs:
        try:
            t = bench(f)
        except Exception as e:
            print(name, "failed", type(e).__name__, str(e)[:200]); continue
        res.setdefault(name, []).append(t)
    line = " ".join(f"{n} {min(ts):.3f} ms ({flop / min(ts) / 1e9:.0f})" for n, ts in res.items())
    print(f"B{B} H{H}/{Hkv} N{N} D{D} causal={causal}: {line}  fused/two {min(res['two']) / min(res['fused']):.3f}x", flush=True)
