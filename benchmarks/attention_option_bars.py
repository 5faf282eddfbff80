"""The cost of each score option over the same call without it, and the wide-head bars (GPU).

    PYTHONPATH=src python3 benchmarks/attention_option_bars.py [--sink-heads 64]

1. Options: forward+backward at B1 N8192 Hq64 Hkv8 D64 bf16, causal and causal with a 128-key
   window, plain and with learnable sinks, ALiBi, a softcap (time ratio to plain).
2. d(sinks) of that call against the float64 reference's autograd, head by head (relative
   error of the whole gradient vector), and o's error beside bf16 SDPA's.
3. Head dims: B2 N8192 Hq8 Hkv4 causal at D=512 (forward and backward TFLOP/s, and
   forward+backward against SDPA's memory-efficient and math paths), and DeepSeek-V3's
   192/128 against D=128 at B4 H32 N4096 causal, per FLOP.
"""
import argparse

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

import tritonkit
from tritonkit.ops.attention.reference import attention_reference

BF16 = dict(device="cuda", dtype=torch.bfloat16)


def ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100)


def qkv(B, H, Hkv, N, D, Dv=None):
    q = torch.randn(B, H, N, D, **BF16, requires_grad=True)
    k = torch.randn(B, Hkv, N, D, **BF16, requires_grad=True)
    v = torch.randn(B, Hkv, N, Dv or D, **BF16, requires_grad=True)
    return q, k, v


def fwd_bwd(q, k, v, **options):
    leaves = [t for t in (q, k, v, options.get("sinks")) if t is not None]
    do = torch.randn(q.shape[:-1] + (v.shape[-1],), **BF16)
    return lambda: torch.autograd.grad(tritonkit.attention(q, k, v, **options), leaves, do)


def option_costs() -> None:
    q, k, v = qkv(1, 64, 8, 8192, 64)
    sinks = torch.randn(64, device="cuda", requires_grad=True)
    slopes = torch.rand(64, device="cuda")
    for label, mask in (("causal", dict(causal=True)), ("causal window 128", dict(causal=True, window=(128, 0)))):
        plain = ms(fwd_bwd(q, k, v, **mask))
        print(f"options B1 N8192 Hq64 Hkv8 D64 {label}: plain fwd+bwd {plain:.3f} ms", flush=True)
        for name, extra in (("sinks", dict(sinks=sinks)), ("alibi", dict(alibi_slopes=slopes)),
                            ("softcap 30", dict(softcap=30.0))):
            t = ms(fwd_bwd(q, k, v, **mask, **extra))
            print(f"    + {name:10s} {t:.3f} ms  ({t / plain:.3f}x plain)", flush=True)


def sink_accuracy(heads: int) -> None:
    B, H, Hkv, N, D = 1, 64, 8, 8192, 64
    q, k, v = qkv(B, H, Hkv, N, D)
    sinks = torch.randn(H, device="cuda", requires_grad=True)
    do = torch.randn(B, H, N, D, **BF16)
    for label, mask in (("causal", dict(causal=True)), ("causal window 128", dict(causal=True, window=(128, 0)))):
        o = tritonkit.attention(q, k, v, sinks=sinks, **mask)
        (dsinks,) = torch.autograd.grad(o, (sinks,), do)
        ref_grad, o_err, o_norm = [], 0.0, 0.0
        group = H // Hkv
        for h in range(heads):
            s = sinks.detach()[h:h + 1].double().requires_grad_()
            kv = h // group
            o_ref = attention_reference(q.detach()[:, h:h + 1], k.detach()[:, kv:kv + 1], v.detach()[:, kv:kv + 1],
                                        sinks=s, **mask)
            (g,) = torch.autograd.grad(o_ref, (s,), do[:, h:h + 1].double())
            ref_grad.append(g)
            o_err += (o.detach()[:, h:h + 1].double() - o_ref.detach()).norm().item() ** 2
            o_norm += o_ref.detach().norm().item() ** 2
        ref = torch.cat(ref_grad)
        err = ((dsinks[:heads].double() - ref).norm() / ref.norm()).item()
        print(f"d(sinks) {label}, {heads} heads vs float64: relative error {err:.2e}; "
              f"o relative error {(o_err / o_norm) ** 0.5:.2e}", flush=True)


def head_dims() -> None:
    B, H, Hkv, N = 2, 8, 4, 8192
    q, k, v = qkv(B, H, Hkv, N, 512)
    flops = 4 * B * H * N * N * 512 * 0.5
    do = torch.randn_like(q)
    o = tritonkit.attention(q, k, v, causal=True)
    t_f = ms(lambda: tritonkit.attention(q, k, v, causal=True))
    t_fb = ms(lambda: torch.autograd.grad(tritonkit.attention(q, k, v, causal=True), (q, k, v), do))
    t_b = t_fb - t_f
    print(f"D512 B2 N8192 Hq8 Hkv4 causal: fwd {flops / t_f / 1e9:.0f} TFLOP/s, bwd {2.5 * flops / t_b / 1e9:.0f} "
          f"TFLOP/s (fwd+bwd {t_fb:.2f} ms)", flush=True)
    del o
    kr, vr = (t.detach().repeat_interleave(H // Hkv, 1).requires_grad_() for t in (k, v))
    qd = q.detach().requires_grad_()
    for name, backend in (("SDPA memory-efficient", SDPBackend.EFFICIENT_ATTENTION), ("SDPA math", SDPBackend.MATH)):
        try:
            with sdpa_kernel(backend):
                t = ms(lambda: torch.autograd.grad(F.scaled_dot_product_attention(qd, kr, vr, is_causal=True),
                                                   (qd, kr, vr), do))
            print(f"    {name}: fwd+bwd {t:.2f} ms; tritonkit {t / t_fb:.2f}x faster", flush=True)
        except (RuntimeError, torch.OutOfMemoryError) as e:
            print(f"    {name}: {type(e).__name__}: {str(e).splitlines()[0][:120]}", flush=True)
    per_flop = {}
    for D, Dv in ((128, 128), (192, 128)):
        q, k, v = qkv(4, 32, 32, 4096, D, Dv)
        do = torch.randn(4, 32, 4096, Dv, **BF16)
        flops = 2 * 4 * 32 * 4096 * 4096 * (D + Dv) * 0.5
        t_f = ms(lambda: tritonkit.attention(q, k, v, causal=True))
        t_fb = ms(lambda: torch.autograd.grad(tritonkit.attention(q, k, v, causal=True), (q, k, v), do))
        per_flop[D] = (flops / t_f / 1e9, 2.5 * flops / (t_fb - t_f) / 1e9)
        print(f"D{D}/{Dv} B4 H32 N4096 causal: fwd {per_flop[D][0]:.0f} TFLOP/s, bwd {per_flop[D][1]:.0f} TFLOP/s",
              flush=True)
    print(f"    192/128 per FLOP vs 128: fwd {per_flop[192][0] / per_flop[128][0]:.2f}x, "
          f"bwd {per_flop[192][1] / per_flop[128][1]:.2f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sink-heads", type=int, default=64, help="heads checked against float64 (of 64)")
    args = parser.parse_args()
    print(torch.cuda.get_device_name(), flush=True)
    option_costs()
    sink_accuracy(args.sink_heads)
    head_dims()


if __name__ == "__main__":
    main()
