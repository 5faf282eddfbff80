"""PTX fingerprints of every kernel tritonkit launches, compiled for sm_90 on a CPU: a refactor's
check that no kernel changed (developer tool, no GPU needed).

    PYTHONPATH=src python3 benchmarks/ptx_fingerprint.py before.json [--only SUBSTR ...]   # on the old tree
    PYTHONPATH=src python3 benchmarks/ptx_fingerprint.py after.json                        # on the new one
    python3 benchmarks/ptx_fingerprint.py --compare before.json after.json   # exit 1 on any difference

Records launches (execute=False, capability 90): every registry op's passes at the entry's
default request, plus attention / attention_varlen variants called through the launchers
(causal/full, windows, softcap, bottom-right, ALiBi, sinks, GQA, varlen, head dims 64/128/256/512
and 192/128, the Gluon and Triton paths, TMA and pointers) and the row losses' options. Each launch
is resolved and specialised as the inspector does it (tritonkit.inspector.compiling), compiled with
triton.compile for sm_90, and its PTX normalised (no .loc/.file, debug sections, comments or $L__tmp
labels) and hashed. Output: {label: {"kernel", "hash", "lines"}}, and each distinct PTX beside it
in OUT.json.ptx/. Takes about half an hour on two cores.
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
import time
import traceback


def normalise(ptx: str) -> str:
    out = []
    in_debug = False
    for line in ptx.splitlines():
        s = line.strip()
        if s.startswith(".section") and ".debug" in s:
            in_debug = True
            continue
        if in_debug:
            if s == "}":
                in_debug = False
            continue
        if not s or s.startswith("//") or s.startswith(".loc") or s.startswith(".file"):
            continue
        if re.fullmatch(r"\$L__tmp\d+:", s):
            continue
        s = re.sub(r"\s*//.*$", "", s)
        out.append(s)
    return "\n".join(out)


def compile_ptx(launch, arch=90):
    import triton
    from tritonkit.inspector.compiling import (GLUON_MODULES, _backend, _jit_functions_visible, _resolve,
                                               _specialise, ast_source, is_gluon)
    resolved = _resolve(launch)
    _, _, options, signature, constexprs, attrs = _specialise(resolved, launch.args, arch)
    target, _ = _backend(arch)
    jit = resolved.jit
    gluon = is_gluon(jit)
    src = ast_source(jit, signature, constexprs, attrs)
    modules = (*GLUON_MODULES, jit.fn.__module__) if gluon else ("triton.language", "tritonkit", jit.fn.__module__)
    with _jit_functions_visible(modules):
        kernel = triton.compile(src, target=target, options=options.__dict__)
    return jit.fn.__name__, kernel.asm["ptx"]


def attention_cases():
    """(label, callable(device)) for attention launches beyond the registry's defaults."""
    import torch
    from tritonkit.ops.attention import (attention_bwd, attention_fwd, attention_varlen_bwd,
                                         attention_varlen_fwd)

    def dense(B, H, Hkv, Nq, Nk, D, Dv=None, dtype=torch.bfloat16, packed=True):
        Dv = Dv or D
        if packed and Hkv == H and Nq == Nk and Dv == D:
            buf = torch.empty(B, Nq, 3, H, D, dtype=dtype)
            q, k, v = (buf[:, :, i].transpose(1, 2) for i in range(3))
        else:
            q = torch.empty(B, H, Nq, D, dtype=dtype)
            k = torch.empty(B, Hkv, Nk, D, dtype=dtype)
            v = torch.empty(B, Hkv, Nk, Dv, dtype=dtype)
        return q, k, v

    cases = []

    def add(label, shape, opts, gluon=None, tma=None, bwd=True, dlse=False):
        B, H, Hkv, Nq, Nk, D, Dv = shape

        def fwd(device):
            q, k, v = dense(B, H, Hkv, Nq, Nk, D, Dv)
            attention_fwd(q, k, v, **opts, tma=tma, gluon=gluon)

        def bwd_(device):
            q, k, v = dense(B, H, Hkv, Nq, Nk, D, Dv)
            o = torch.empty(B, H, Nq, Dv or D, dtype=q.dtype)
            do = torch.empty_like(o)
            lse = torch.empty(B, H, Nq, dtype=torch.float32)
            dl = torch.empty_like(lse) if dlse else None
            attention_bwd(do, q, k, v, o, lse, **opts, dlse=dl, tma=tma, gluon=gluon)
        cases.append((f"attn/{label}/fwd", fwd))
        if bwd:
            cases.append((f"attn/{label}/bwd", bwd_))

    def add_varlen(label, lengths, H, Hkv, D, opts, gluon=None, tma=None, Dv=None):
        def inputs():
            T = sum(lengths)
            q = torch.empty(T, H, D, dtype=torch.bfloat16)
            k = torch.empty(T, Hkv, D, dtype=torch.bfloat16)
            v = torch.empty(T, Hkv, Dv or D, dtype=torch.bfloat16)
            cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
            return q, k, v, cu

        def fwd(device):
            q, k, v, cu = inputs()
            attention_varlen_fwd(q, k, v, cu, cu, **opts, tma=tma, gluon=gluon)

        def bwd_(device):
            q, k, v, cu = inputs()
            o = torch.empty(q.shape[0], H, Dv or D, dtype=q.dtype)
            do = torch.empty_like(o)
            lse = torch.empty(H, q.shape[0], dtype=torch.float32)
            attention_varlen_bwd(do, q, k, v, o, lse, cu, cu, **opts, tma=tma, gluon=gluon)
        cases.append((f"varlen/{label}/fwd", fwd))
        cases.append((f"varlen/{label}/bwd", bwd_))

    alibi = torch.empty(8, dtype=torch.float32)
    sinks = torch.empty(8, dtype=torch.float32)
    for D, Dv in ((64, None), (128, None), (512, None), (192, 128), (256, None)):
        for causal in (False, True):
            shape = (1, 8, 8, 1024, 1024, D, Dv)
            for path in ("triton", "gluon_auto") if Dv is None and D in (64, 128, 256) else ("triton",):
                g = False if path == "triton" else None
                add(f"D{D}x{Dv}/causal{causal}/{path}", shape, dict(causal=causal), gluon=g)
    base = (1, 8, 8, 1024, 1024, 128, None)
    gqa = (1, 8, 2, 1024, 1024, 128, None)
    add("window_lr/triton", base, dict(window_left=256, window_right=256), gluon=False)
    add("window_causal_left/triton", base, dict(causal=True, window_left=256), gluon=False)
    add("window_causal_left/gluon", base, dict(causal=True, window_left=256), gluon=True)
    add("softcap/triton", base, dict(causal=True, softcap=50.0), gluon=False)
    add("softcap_full/triton", base, dict(softcap=50.0), gluon=False)
    add("softcap/gluon", base, dict(causal=True, softcap=50.0), gluon=True)
    add("softcap_full/gluon", base, dict(softcap=50.0), gluon=True)
    add("bottom_right/triton", (1, 8, 8, 300, 1000, 128, None), dict(causal=True, bottom_right=True), gluon=False)
    add("bottom_right_window/triton", (1, 8, 8, 300, 1000, 64, None),
        dict(causal=True, bottom_right=True, window_left=100), gluon=False)
    add("alibi/triton", base, dict(causal=True, alibi_slopes=alibi), gluon=False)
    add("alibi_full/triton", base, dict(alibi_slopes=alibi), gluon=False)
    add("sinks/triton", base, dict(causal=True, sinks=sinks), gluon=False)
    add("sinks_full/triton", base, dict(sinks=sinks), gluon=False)
    add("sinks/gluon", base, dict(causal=True, sinks=sinks), gluon=True)
    add("sinks_window/gluon", base, dict(causal=True, window_left=128, sinks=sinks), gluon=True)
    add("sinks_softcap/gluon", base, dict(causal=True, softcap=30.0, sinks=sinks), gluon=True, dlse=True)
    add("sinks_D64_full/gluon", (2, 8, 8, 8192, 8192, 64, None), dict(sinks=sinks), gluon=True)
    add("all/triton", gqa, dict(causal=True, window_left=128, softcap=30.0, alibi_slopes=alibi, sinks=sinks),
        gluon=False, dlse=True)
    add("gqa/triton", gqa, dict(causal=True), gluon=False)
    add("gqa/gluon", gqa, dict(causal=True), gluon=True)
    add("gqa_full/gluon", gqa, dict(), gluon=True)
    add("dlse/triton", base, dict(causal=True), gluon=False, dlse=True)
    add("dlse/gluon", base, dict(causal=True), gluon=True, dlse=True)
    add("pointer/triton", base, dict(causal=True), tma=False)
    add("odd/triton", (1, 4, 4, 1000, 781, 59, None), dict(causal=True), gluon=False)
    add("odd_full/triton", (1, 4, 4, 1000, 781, 59, None), dict(), gluon=False)
    add("fp16/gluon_auto", (2, 8, 8, 4096, 4096, 128, None), dict(causal=True))
    add("D64_long/gluon", (2, 8, 8, 8192, 8192, 64, None), dict(causal=True), gluon=True)
    add("D64_long_full/gluon", (2, 8, 8, 8192, 8192, 64, None), dict(), gluon=True)
    add("D256/gluon", (1, 8, 8, 2048, 2048, 256, None), dict(causal=True), gluon=True)
    lengths = [700, 1300, 400, 900]
    for D in (64, 128):
        add_varlen(f"D{D}/causal/triton", lengths, 8, 8, D, dict(causal=True), gluon=False)
        add_varlen(f"D{D}/full/triton", lengths, 8, 8, D, dict(), gluon=False)
        add_varlen(f"D{D}/causal/gluon", lengths, 8, 8, D, dict(causal=True), gluon=True)
        add_varlen(f"D{D}/full/gluon", lengths, 8, 8, D, dict(), gluon=True)
    add_varlen("window/triton", lengths, 8, 2, 128, dict(causal=True, window_left=128), gluon=False)
    add_varlen("window/gluon", lengths, 8, 8, 128, dict(causal=True, window_left=128), gluon=True)
    add_varlen("softcap/gluon", lengths, 8, 2, 128, dict(causal=True, softcap=30.0), gluon=True)
    add_varlen("alibi_sinks/triton", lengths, 8, 2, 128,
               dict(causal=True, alibi_slopes=torch.empty(4, 8), sinks=sinks, softcap=30.0), gluon=False)
    add_varlen("sinks/gluon", lengths, 8, 2, 128, dict(causal=True, sinks=sinks), gluon=True)
    add_varlen("D192x128/triton", lengths, 8, 8, 192, dict(causal=True), gluon=False, Dv=128)
    return cases


def row_loss_cases():
    """cross_entropy and log-prob row kernels with the options the registry defaults leave off."""
    import torch
    from tritonkit.ops.cross_entropy.logits import cross_entropy_bwd, cross_entropy_fwd
    from tritonkit.ops.cross_entropy.logprob_kernel import launch_logprob_rows
    cases = []

    def logits(dtype=torch.bfloat16):
        return torch.empty(64, 32000, dtype=dtype), torch.zeros(64, dtype=torch.int64)

    for label, opts in (("smooth", dict(label_smoothing=0.1)), ("softcap", dict(softcap=30.0)),
                        ("none", dict(reduction="none")), ("sum_smooth_softcap", dict(reduction="sum",
                        label_smoothing=0.2, softcap=15.0))):
        def fwd(device, opts=opts):
            x, t = logits()
            cross_entropy_fwd(x, t, **opts)

        def bwd(device, opts=opts):
            x, t = logits()
            up = torch.ones(64 if opts.get("reduction") == "none" else (), dtype=x.dtype)
            cross_entropy_bwd(up, x, t, torch.zeros(64, dtype=torch.float64), **opts)
        cases += [(f"ce/{label}/fwd", fwd), (f"ce/{label}/bwd", bwd)]
        if label != "none":
            cases.append((f"ce/{label}/fwd_inplace", lambda device, opts=opts: cross_entropy_fwd(
                *logits(torch.float32), **opts, inplace_backward=True)))
    f32 = dict(dtype=torch.float32)
    for label, (temp, cap) in (("temp", (0.7, None)), ("softcap", (1.0, 30.0))):
        def stats(device, temp=temp, cap=cap, ent=True):
            x, t = logits()
            launch_logprob_rows(x, t, -100, temp, cap, torch.empty(64, dtype=torch.float64),
                                logp=torch.empty(64, **f32), entropy=torch.empty(64, **f32) if ent else None)

        def grad(device, temp=temp, cap=cap, both=True):
            x, t = logits()
            launch_logprob_rows(x, t, -100, temp, cap, torch.empty(64, dtype=torch.float64),
                                entropy=torch.empty(64, **f32) if both else None, grad_logp=torch.empty(64, **f32),
                                grad_entropy=torch.empty(64, **f32) if both else None, grad=True)
        cases += [(f"logprob/{label}/stats", stats), (f"logprob/{label}/grad", grad),
                  (f"logprob/{label}/stats_noent", lambda d, f=stats: f(d, ent=False)),
                  (f"logprob/{label}/grad_logp_only", lambda d, f=grad: f(d, both=False))]
    return cases


def registry_cases():
    from tritonkit import registry
    from tritonkit.registry import InspectRequest
    cases = []
    for name, entry in registry.entries().items():
        for pass_name, fn in entry.passes.items():
            cases.append((f"reg/{name}/{pass_name}", lambda device, fn=fn: fn(InspectRequest(), device)))
            if name in ("attention", "attention_varlen"):
                cases.append((f"reg/{name}/{pass_name}/causal",
                              lambda device, fn=fn: fn(InspectRequest(causal=True), device)))
                cases.append((f"reg/{name}/{pass_name}/triton",
                              lambda device, fn=fn: fn(InspectRequest(causal=True, path="triton"), device)))
                cases.append((f"reg/{name}/{pass_name}/tma_off",
                              lambda device, fn=fn: fn(InspectRequest(tma=False), device)))
    return cases


def main(argv):
    if argv[0] == "--compare":
        a, b = (json.load(open(p)) for p in argv[1:3])
        common = sorted(set(a) & set(b))
        diff = [k for k in common if a[k]["hash"] != b[k]["hash"]]
        errs = [k for k in common if a[k]["hash"].startswith("ERROR") or b[k]["hash"].startswith("ERROR")]
        kernels = {a[k]["hash"] for k in common}
        print(f"launches compared: {len(common)} (distinct kernels compiled: {len(kernels)}); "
              f"only in A: {len(set(a) - set(b))}, only in B: {len(set(b) - set(a))}; "
              f"different: {len(diff)}; errors: {len(errs)}")
        for k in sorted(set(a) ^ set(b)):
            print("  unmatched", k)
        for k in diff:
            print("  DIFF", k, a[k]["kernel"], a[k]["hash"][:12], b[k]["hash"][:12])
        return 1 if diff or set(a) ^ set(b) else 0
    out = argv[0]
    only = argv[argv.index("--only") + 1:] if "--only" in argv else None
    import torch
    from tritonkit._launch import record_launches
    device = torch.device("cpu")
    cases = registry_cases() + attention_cases() + row_loss_cases()
    if only:
        cases = [c for c in cases if any(s in c[0] for s in only)]
    result = {}
    ptx_cache = {}
    t0 = time.time()
    for label, fn in cases:
        try:
            with record_launches(execute=False, capability=90) as launches:
                fn(device)
        except Exception as err:
            result[label] = {"kernel": "-", "hash": f"ERROR record {type(err).__name__}: {err}"[:300], "lines": 0}
            print("record failed", label, err, file=sys.stderr)
            continue
        for i, launch in enumerate(launches):
            key = f"{label}#{i}:{launch.name}"
            try:
                name, ptx = compile_ptx(launch)
                norm = normalise(ptx)
                h = hashlib.sha256(norm.encode()).hexdigest()
                ptx_cache[h] = norm
                result[key] = {"kernel": name, "hash": h, "lines": norm.count("\n") + 1}
            except Exception as err:
                traceback.print_exc()
                result[key] = {"kernel": launch.name, "hash": f"ERROR compile {type(err).__name__}: {err}"[:300],
                               "lines": 0}
            print(f"[{time.time() - t0:6.0f}s] {key} {result[key]['hash'][:16]}", file=sys.stderr, flush=True)
    json.dump(result, open(out, "w"), indent=1, sort_keys=True)
    import os
    ptx_dir = out + ".ptx"
    os.makedirs(ptx_dir, exist_ok=True)
    for h, text in ptx_cache.items():
        with open(os.path.join(ptx_dir, h[:16] + ".ptx"), "w") as f:
            f.write(text)
    print(f"{len(result)} launches, {len(ptx_cache)} distinct PTX, {time.time() - t0:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
