"""A refactor's speed check: the public ops of the tritonkit on PYTHONPATH (attention with its
options, dense and packed; the block ops; softmax and add), timed through their public calls so
that any two checkouts run the same script, then compared case by case.

    (cd old && PYTHONPATH=src python3 ../benchmarks/before_after.py run before.json)
    PYTHONPATH=src python3 benchmarks/before_after.py run after.json
    python3 benchmarks/before_after.py compare before.json after.json

Run both checkouts in one GPU call, on one card (the ratio is what counts; `do_bench` medians,
L2 cleared before each repetition). Set TRITONKIT_AUTOTUNE=0 in both to compare the kernels
themselves at the fixed tile configs (and to skip minutes of autotuning).
"""
import argparse
import itertools
import json
import sys


def _cases():
    import torch
    import tritonkit
    bf16 = dict(device="cuda", dtype=torch.bfloat16)

    def attention_case(B, H, Hkv, N, D, **options):
        q = torch.randn(B, H, N, D, **bf16, requires_grad=True)
        k, v = (torch.randn(B, Hkv, N, D, **bf16, requires_grad=True) for _ in range(2))
        do = torch.randn_like(q)
        run = lambda: tritonkit.attention(q, k, v, **options)   # noqa: E731
        return run, lambda: torch.autograd.grad(run(), (q, k, v), do)

    def varlen_case(lengths, H, D):
        q, k, v = (torch.randn(sum(lengths), H, D, **bf16, requires_grad=True) for _ in range(3))
        cu = torch.tensor([0] + list(itertools.accumulate(lengths)), device="cuda", dtype=torch.int32)
        do = torch.randn_like(q)
        run = lambda: tritonkit.attention_varlen(q, k, v, cu, cu, max(lengths), max(lengths), causal=True)  # noqa: E731
        return run, lambda: torch.autograd.grad(run(), (q, k, v), do)

    def with_grad(fn, *inputs):
        leaves = [t for t in inputs if t.requires_grad]
        out = fn()
        do = torch.randn_like(out)
        return fn, lambda: torch.autograd.grad(fn(), leaves, do)

    cases = {}
    for B, H, Hkv, N, D, causal in [(4, 32, 32, 4096, 128, False), (4, 32, 32, 4096, 128, True),
                                    (4, 32, 32, 16384, 128, True), (4, 32, 32, 4096, 64, False),
                                    (4, 16, 16, 4096, 256, False), (8, 16, 16, 1024, 64, True),
                                    (4, 32, 8, 4096, 128, True)]:
        cases[f"attention B{B} H{H}/{Hkv} N{N} D{D} {'causal' if causal else 'full'}"] = (
            lambda a=(B, H, Hkv, N, D), c=causal: attention_case(*a, causal=c))
    cases["attention B1 H32/8 N16384 D128 window 1024"] = lambda: attention_case(1, 32, 8, 16384, 128, causal=True,
                                                                                 window=(1024, 0))
    cases["attention B4 H32/8 N4096 D128 causal softcap 50"] = lambda: attention_case(4, 32, 8, 4096, 128, causal=True,
                                                                                      softcap=50.0)
    cases["attention_varlen 8 seqs (16384) H32 D128 causal"] = lambda: varlen_case(
        [3000, 517, 4096, 1, 2048, 3333, 1290, 2099], 32, 128)

    def rows(cols, dtype=torch.bfloat16, grad=True):
        return torch.randn(8192, cols, device="cuda", dtype=dtype, requires_grad=grad)

    def norm_case(fn, *params):
        x = rows(4096)
        ps = [torch.randn(4096, **bf16, requires_grad=True) for _ in params]
        return with_grad(lambda: fn(x, *ps), x, *ps)

    cases["rms_norm 8192x4096"] = lambda: norm_case(tritonkit.rms_norm, "weight")
    cases["layer_norm 8192x4096"] = lambda: norm_case(tritonkit.layer_norm, "weight", "bias")

    def swiglu_case():
        gate, up = rows(14336), rows(14336)
        return with_grad(lambda: tritonkit.swiglu(gate, up), gate, up)
    cases["swiglu 8192x14336"] = swiglu_case

    def rope_case():
        q = torch.randn(1, 32, 8192, 128, **bf16, requires_grad=True)
        k = torch.randn(1, 8, 8192, 128, **bf16, requires_grad=True)
        cos, sin = torch.randn(8192, 128, **bf16), torch.randn(8192, 128, **bf16)
        return with_grad(lambda: torch.cat([t.flatten() for t in tritonkit.rope(q, k, cos, sin)]), q, k)
    cases["rope B1 H32/8 N8192 D128"] = rope_case

    def loss_case():
        hidden = rows(4096)
        weight = torch.randn(128256, 4096, **bf16, requires_grad=True) * 0.02
        weight = weight.detach().requires_grad_()
        target = torch.randint(0, 128256, (8192,), device="cuda")
        return with_grad(lambda: tritonkit.linear_cross_entropy(hidden, weight, target), hidden, weight)
    cases["linear_cross_entropy 8192x4096x128256"] = loss_case

    def plain(fn, *inputs):
        return (lambda: fn(*inputs)), None
    cases["softmax 4096x4096 fp32"] = lambda: plain(tritonkit.softmax, torch.randn(4096, 4096, device="cuda"), -1)
    cases["softmax 4096x32768 bf16"] = lambda: plain(tritonkit.softmax, torch.randn(4096, 32768, **bf16), -1)
    cases["add 2^28 fp32"] = lambda: plain(tritonkit.add, *(torch.randn(1 << 28, device="cuda") for _ in range(2)))
    return cases


def run(path: str) -> None:
    import torch
    import triton
    results = {}
    for name, make in _cases().items():
        forward, forward_backward = make()
        fwd = triton.testing.do_bench(forward, warmup=25, rep=100)
        both = None if forward_backward is None else triton.testing.do_bench(forward_backward, warmup=25, rep=100)
        results[name] = {"fwd_ms": fwd, "fwd_bwd_ms": both}
        print(f"{name:52s} fwd {fwd:8.3f} ms" + ("" if both is None else f"  fwd+bwd {both:8.3f} ms"), flush=True)
        del forward, forward_backward
        torch.cuda.empty_cache()
    results["_card"] = torch.cuda.get_device_name()
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


def compare(before_path: str, after_path: str) -> None:
    before, after = (json.load(open(p)) for p in (before_path, after_path))
    print(f"card: {after.pop('_card')} (before: {before.pop('_card')}); ratio = after / before time (< 1 faster)")
    worst = 0.0
    for name, b in before.items():
        a = after.get(name)
        if a is None:
            continue
        cells = []
        for key in ("fwd_ms", "fwd_bwd_ms"):
            if b[key] and a[key]:
                ratio = a[key] / b[key]
                worst = max(worst, ratio)
                cells.append(f"{key[:-3]} {b[key]:8.3f} -> {a[key]:8.3f} ms ({ratio:5.3f})")
        print(f"{name:52s} " + "   ".join(cells))
    print(f"slowest ratio: {worst:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="time every case, write the JSON").add_argument("json")
    p = sub.add_parser("compare", help="print after / before per case")
    p.add_argument("before")
    p.add_argument("after")
    args = parser.parse_args()
    run(args.json) if args.command == "run" else compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
