"""Tuning sweep for the norms' backward launch on a GPU (developer tool, not a test):
    PYTHONPATH=src python3 benchmarks/sweep_norm_backward.py

For each shape (the training bench's 8192 x 2048 and Llama-3-8B's 8192 x 4096, bf16; RMSNorm
with and without the residual's gradient dh, LayerNorm), the backward launcher alone
(`_rows.norm_bwd`) is timed with the plan's knobs replaced: elements a thread holds
(PER_THREAD["bwd"], which sets the warps), elements a program (MIN_TILE["bwd"]), and resident
warps an SM for the persistent grid (WARPS_PER_SM). Each variant's dx and dW must match a
float64 reference within a bf16 rounding (a tile's reduction order moves the last bit, so
variants are not bitwise equal); one that fails is printed as such and not timed. GB/s count
dy, h (and dh) read and dx written once, beside a device copy of the same bytes (read once,
written once).
"""

from __future__ import annotations

import itertools

import torch
import triton.testing

from tritonkit.ops.norms import _rows

KNOBS = ("PER_THREAD", "MIN_TILE", "WARPS_PER_SM")


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def set_knobs(per_thread: int, min_tile: int, warps_per_sm: int) -> None:
    _rows.PER_THREAD["bwd"] = per_thread
    _rows.MIN_TILE["bwd"] = min_tile
    _rows.WARPS_PER_SM = warps_per_sm
    for cached in (_rows.row_config, _rows.bwd_plan, _rows.sum_plan):
        cached.cache_clear()


def case(rows: int, cols: int, is_rms: bool, has_dh: bool):
    g = torch.Generator(device="cuda").manual_seed(0)
    make = lambda *shape: torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g)  # noqa: E731
    h, dy = make(rows, cols), make(rows, cols)
    dh = make(rows, cols) if has_dh else None
    w = make(cols)
    b = None if is_rms else make(cols)
    _, _, mean, rstd = _rows.norm_fwd(h, w, b, None, 1e-6, 0.0, is_rms)
    run = lambda: _rows.norm_bwd(dy, dh, h, w, b, mean, rstd, 0.0, is_rms)  # noqa: E731
    moved = (3 + has_dh) * h.numel() * h.element_size()
    return run, _reference(dy, dh, h, w, is_rms), moved


def _reference(dy, dh, h, w, is_rms):
    """(dx, dW) in float64 through autograd of the norm's formula."""
    x = h.double().requires_grad_()
    wd = w.double().requires_grad_()
    if is_rms:
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * wd
    else:
        y = torch.nn.functional.layer_norm(x, (x.shape[-1],), wd, None, 1e-6)
    dx, dw = torch.autograd.grad(y, (x, wd), dy.double())
    return dx + (0.0 if dh is None else dh.double()), dw


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def main() -> None:
    defaults = (_rows.PER_THREAD["bwd"], _rows.MIN_TILE["bwd"], _rows.WARPS_PER_SM)
    for rows, cols in ((8192, 2048), (8192, 4096)):
        for is_rms, has_dh in ((True, False), (True, True), (False, False)):
            set_knobs(*defaults)
            run, (ref_dx, ref_dw), moved = case(rows, cols, is_rms, has_dh)
            copy_src = torch.empty(moved // 8, device="cuda")
            copy_dst = torch.empty_like(copy_src)
            copy = moved / bench(lambda: copy_dst.copy_(copy_src)) / 1e6
            name = f"{'rms' if is_rms else 'layer'}_norm bwd {rows}x{cols} bf16{' +dh' if has_dh else ''}"
            print(f"{name}: floor {moved / 4.2e12 * 1e6:.1f} us at 4.2 TB/s; a copy of the same bytes {copy:.0f} GB/s")
            results = []
            for knobs in itertools.product((8, 16, 32), (4096, 8192, 16384), (8, 16, 32)):
                set_knobs(*knobs)
                dx, dw, _ = run()
                errors = rel(dx, ref_dx), rel(dw, ref_dw)
                if not max(errors) < 1e-2:  # a bf16 rounding is 4e-3
                    print(f"  {dict(zip(KNOBS, knobs))}: WRONG (dx, dW relative errors {errors[0]:.1e}, {errors[1]:.1e})")
                    continue
                ms = bench(run)
                results.append((ms, knobs))
            best = sorted(results)[:6]
            for ms, knobs in best + [r for r in results if r[1] == defaults and r not in best]:
                tag = " (default)" if knobs == defaults else ""
                print(f"  {dict(zip(KNOBS, knobs))}{tag}: {ms * 1e3:.1f} us, {moved / ms / 1e6:.0f} GB/s "
                      f"({moved / ms / 1e6 / copy:.0%} of the copy)")
    set_knobs(*defaults)


if __name__ == "__main__":
    main()
