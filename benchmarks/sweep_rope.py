"""RoPE forward tiles, and the norms' forward, against a device copy of the same bytes, in one
process on a GPU (developer tool, not a test; about two minutes on an H200).

  PYTHONPATH=src python3 benchmarks/sweep_rope.py [rope] [norms] [norms-fp32] [norms-bwd] [norms-bwd-fp32]
      [--shape ROWSxCOLS ...] [--cpu]

(--cpu: tiny shapes through Triton's interpreter, to try the script itself; its timings mean
nothing.)

rope: Llama-3-8B's case, B=4, N=2048, 32 q heads and 8 kv heads of D=128, bf16, q and k views
of one (B, N, (32 + 8) * 128) projection as Hugging Face makes them, rotate-half, cos and sin
(1, N, 128) as its rotary embedding returns them. Every tile in TILES (None: the op's
`default_tile`), `tritonkit.rope` itself and torch.compile of `rope_reference` (the bench's
peer) are timed beside a copy of the same bytes, in two rounds; each variant's output is
checked against the float64 reference before it is timed.
norms: RMSNorm (weight) and LayerNorm (weight and bias) forward at 8192 x 4096 bf16 (norms-fp32:
float32) beside a copy of the same bytes (x read, y written) and torch.compile of each reference,
in three rounds, at each of NORM_VARIANTS (elements of a row a thread: 8, 16 (the default) and
32 are 16, 8 and 4 warps a 4096-wide row; short rows packed to one or two 4096-wide rows a
program; rows walked in two passes over chunks of 1024 or 2048 columns, as torch.compile's
float32 kernel does), each checked before timing; variants that come to the same launch at a
shape are timed once.
norms-bwd (norms-bwd-fp32): the norms' backward launchers alone at 8192 x 4096 (dx, dW and
LayerNorm's dB), at each of NORM_BWD_VARIANTS (elements a thread, elements a program,
persistent programs' warps an SM), beside a copy of the same bytes (dy and x read, dx written).

Timings are `tritonkit.bench.timing.time_ms`: triton's do_bench, median, the L2 cleared before
every timed call. GB/s count each tensor read or written once. --shape (repeatable) times the
norm parts at other shapes than 8192 x 4096.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import sys
import time

import torch

from tritonkit.bench.timing import copy_ceiling_gbs, host_ms, time_ms
from tritonkit.ops.rope import RopeTile, default_tile, rope_fwd, rope_reference
from tritonkit.registry._accuracy import relative_error

# (positions a block, heads a tile, warps, programs an SM for a persistent grid: 0 = none).
# At D = 128 in bf16 a tile's head-half is 8 threads of 8 elements (16 bytes), so a warp spans
# 4 positions. Tiles of at least 4 * num_warps positions put the warps on positions, each
# thread holding its position's cos and sin and `heads` 16-byte loads a half; with fewer the
# warps split the heads and the cos/sin rows reach them through shared memory (one-warp tiles
# by shuffles). The default is of the second kind: 4 positions x 8 heads, 4 warps.
TILES: list[RopeTile | None] = [
    None,
    RopeTile(8, 8, 4), RopeTile(2, 8, 2), RopeTile(4, 8, 8), RopeTile(2, 8, 1),
    RopeTile(4, 1, 1), RopeTile(4, 2, 1), RopeTile(4, 4, 1), RopeTile(2, 4, 1),
    RopeTile(8, 2, 2), RopeTile(8, 4, 2), RopeTile(16, 2, 4), RopeTile(16, 4, 4), RopeTile(32, 2, 8),
    RopeTile(8, 8, 2),
    # persistent grids, for tiles whose blocks outnumber the programs an SM holds at once
    RopeTile(4, 8, 4, 6), RopeTile(4, 8, 4, 3), RopeTile(2, 8, 2, 12), RopeTile(8, 8, 4, 4), RopeTile(2, 4, 1, 24),
]
ROPE_CASE = dict(batch=4, heads=32, kv_heads=8, seq=2048, head_dim=128)
NORM_SHAPE = (8192, 4096)
CPU_ROPE_CASE = dict(batch=2, heads=4, kv_heads=2, seq=9, head_dim=16)
CPU_NORM_SHAPE = (8, 64)
# The norms' forward: (elements of a row a thread, elements a program short rows are packed to,
# and where not None the row walked in two passes over chunks of that many columns). 16 a thread
# is 8 warps a 4096-wide row. The two-pass walk is the launch rule's path past MAX_FUSED_COLS;
# torch.compile's float32 norm kernels are such looped reductions, their first pass keeping the
# row in L2 for the second.
# Tiles of 1024 to 16384 elements and 64 a thread matter at other widths than 4096 (--shape).
NORM_VARIANTS = ((8, 4096, None), (16, 4096, None), (32, 4096, None), (8, 8192, None), (16, 8192, None),
                 (32, 8192, None), (8, 4096, 1024), (4, 4096, 1024), (8, 4096, 2048), (16, 4096, 2048),
                 (16, 1024, None), (16, 2048, None), (32, 2048, None), (16, 16384, None), (32, 16384, None),
                 (64, 4096, None), (64, 16384, None), (16, 4096, 4096), (32, 4096, 4096), (16, 4096, 8192))
# The norms' backward: (elements of a row a thread, elements a program holds, warps of
# persistent programs an SM). The rule's (16, 8192, 16) is two 4096-wide rows a program on 16
# warps, one program an SM.
NORM_BWD_VARIANTS = ((16, 8192, 16), (16, 4096, 16), (16, 4096, 32), (8, 4096, 16), (8, 8192, 32), (32, 4096, 16),
                     (32, 8192, 16), (16, 8192, 32), (16, 16384, 32), (32, 4096, 32), (8, 4096, 32), (4, 4096, 32))
ROPE_ROUNDS, NORM_ROUNDS = 2, 3
TOLERANCE = 1e-3  # ours may be off by twice torch's bf16 error plus this (tests/_tolerance.py)


def rope_inputs(device: torch.device, c: dict[str, int], dtype: torch.dtype = torch.bfloat16):
    """q, k as Hugging Face's attention makes them, cos and sin (1, N, D)."""
    from tritonkit.registry.rope import hf_inputs

    q, k, cos, sin = hf_inputs(c["batch"], c["heads"], c["kv_heads"], c["seq"], c["head_dim"], dtype, device)
    return q, k, cos[:1].contiguous(), sin[:1].contiguous()


def rope_bytes(q, k, cos, sin) -> int:
    """q and k read and written once, cos and sin read once."""
    return 2 * (q.numel() + k.numel()) * q.element_size() + (cos.numel() + sin.numel()) * cos.element_size()


def _label(tile: RopeTile | None, default: RopeTile) -> str:
    t = tile or default
    text = f"{t.positions:2d} pos x {t.heads} heads, {t.num_warps} warps"
    text += f", persistent {t.programs_per_sm}/SM" if t.programs_per_sm else ""
    return text + (" (default)" if tile is None else "")


def _error(outs, refs) -> float:
    return max(relative_error(o, r) for o, r in zip(outs, refs))


def sweep_rope(device: torch.device, c: dict[str, int]) -> None:
    q, k, cos, sin = rope_inputs(device, c)
    moved = rope_bytes(q, k, cos, sin)
    gbs = lambda ms: moved / ms / 1e6  # noqa: E731
    default = default_tile(c["batch"] * c["seq"], c["heads"], c["kv_heads"], c["head_dim"])
    print(f"rope fwd B{c['batch']} N{c['seq']} {c['heads']}/{c['kv_heads']} heads D{c['head_dim']} bf16, "
          f"cos/sin {tuple(cos.shape)}: {moved:,} bytes (q, k read and written "
          f"{2 * (q.numel() + k.numel()) * q.element_size():,}; cos, sin read "
          f"{(cos.numel() + sin.numel()) * cos.element_size():,})")
    reference = rope_reference(q, k, cos, sin)
    torch_error = _error(rope_reference(q, k, cos, sin, upcast=False), reference)
    bound = 2 * torch_error + TOLERANCE
    print(f"   torch bf16's relative error {torch_error:.2e}; each variant must be within {bound:.2e}")

    import tritonkit
    from tritonkit.registry._inputs import peer_compile

    compiled = peer_compile(functools.partial(rope_reference, upcast=False))
    variants = [(_label(t, default), functools.partial(rope_fwd, q, k, cos, sin, False, t)) for t in TILES]
    variants.append(("tritonkit.rope (the op's eager road)", lambda: tritonkit.rope(q, k, cos, sin)))
    if device.type == "cuda":  # inductor's CPU build is no peer of a GPU kernel
        variants.append(("torch.compile of rope_reference", lambda: compiled(q, k, cos, sin)))
    checked, worst = [], 0.0
    for label, fn in variants:
        try:
            error = _error(fn(), reference)
        except Exception as err:  # out of resources, say: report and go on
            print(f"   {label}: {type(err).__name__}: {err}")
            continue
        if error > bound:
            print(f"   {label}: relative error {error:.2e} > {bound:.2e}" +
                  (" (the peer: timed anyway)" if label.startswith("torch.compile") else ", NOT timed"))
            if not label.startswith("torch.compile"):
                continue
        worst = max(worst, error)
        checked.append((label, fn))
    print(f"   {len(checked)} of {len(variants)} checked (largest relative error {worst:.2e})")
    rates: dict[str, list[float]] = {label: [] for label, _ in checked}
    copies = []
    for round_ in range(ROPE_ROUNDS):  # every other round in reverse, so no variant always goes first
        copies.append(copy_ceiling_gbs(device, moved))
        for label, fn in checked[::-1] if round_ % 2 else checked:
            rates[label].append(gbs(time_ms(fn)))
    copy = statistics.median(copies)
    print(f"   same-bytes copy {copy:.0f} GB/s (rounds: {', '.join(f'{v:.0f}' for v in copies)}); "
          f"floor {moved / copy / 1e3:.1f} us; 90% of it is {0.9 * copy:.0f} GB/s")
    host = host_ms(variants[0][1])
    if host is not None:
        print(f"   host time of a default-tile launch: {host * 1e3:.0f} us")
    peer = statistics.median(rates.get("torch.compile of rope_reference", [float("nan")]))
    for label, values in sorted(rates.items(), key=lambda item: -statistics.median(item[1])):
        value = statistics.median(values)
        print(f"   {value:6.0f} GB/s {100 * value / copy:5.1f}% of copy {value / peer:5.2f}x compile  {label}  "
              f"(rounds: {', '.join(f'{v:.0f}' for v in values)})")


@contextlib.contextmanager
def norm_elements_per_thread(n: int, tile: int | None = None, chunk: int | None = None, max_warps: int = 32):
    """The norms' forward with `n` elements of a row a thread (their launch helpers' rule:
    PER_THREAD["fwd"], 16, sets the warps a row: 8 at 4096 columns), short rows packed up to
    `tile` elements a program (MIN_TILE["fwd"]; None: the rule's own), and with `chunk` every
    row walked in two passes over chunks of that many columns (MAX_FUSED_COLS["fwd"] 0,
    CHUNK_COLS chunk), at most `max_warps` warps a program (MAX_WARPS["fwd"]), for the duration."""
    from tritonkit.ops.norms import _rows

    saved = (_rows.PER_THREAD["fwd"], _rows.MIN_TILE["fwd"], _rows.MAX_FUSED_COLS["fwd"], _rows.CHUNK_COLS,
             _rows.MAX_WARPS["fwd"])
    _rows.PER_THREAD["fwd"], _rows.MAX_WARPS["fwd"] = n, max_warps
    _rows.MIN_TILE["fwd"] = tile or saved[1]
    if chunk is not None:
        _rows.MAX_FUSED_COLS["fwd"], _rows.CHUNK_COLS = 0, chunk
    _forget_norm_plans()
    try:
        yield
    finally:
        (_rows.PER_THREAD["fwd"], _rows.MIN_TILE["fwd"], _rows.MAX_FUSED_COLS["fwd"], _rows.CHUNK_COLS,
         _rows.MAX_WARPS["fwd"]) = saved
        _forget_norm_plans()


@contextlib.contextmanager
def norm_backward_tile(n: int, tile: int, warps_per_sm: int):
    """The norms' backward with `n` elements of a row a thread (PER_THREAD["bwd"]), rows
    packed up to `tile` elements a program (MIN_TILE["bwd"]) and `warps_per_sm` warps of
    persistent programs an SM (WARPS_PER_SM), for the duration."""
    from tritonkit.ops.norms import _rows

    saved = _rows.PER_THREAD["bwd"], _rows.MIN_TILE["bwd"], _rows.WARPS_PER_SM
    _rows.PER_THREAD["bwd"], _rows.MIN_TILE["bwd"], _rows.WARPS_PER_SM = n, tile, warps_per_sm
    _forget_norm_plans()
    try:
        yield
    finally:
        _rows.PER_THREAD["bwd"], _rows.MIN_TILE["bwd"], _rows.WARPS_PER_SM = saved
        _forget_norm_plans()


def _forget_norm_plans() -> None:
    # The launch rules' caches and the bound templates, whose keys hold the inputs' layout,
    # not the tile: kept across a variant, the first variant's kernel would run for all.
    from tritonkit.ops.norms import _plans, _rows

    for cached in (_rows.row_config, _rows.fwd_plan, _rows.bwd_plan, _rows.sum_plan):
        cached.cache_clear()
    _plans.clear()


def sweep_norms(device: torch.device, shape: tuple[int, int], dtype: torch.dtype = torch.bfloat16) -> None:
    import tritonkit
    from tritonkit.ops.norms import _rows
    from tritonkit.ops.norms.layer_norm import layer_norm_reference
    from tritonkit.ops.norms.rms_norm import rms_norm_reference

    x = torch.randn(shape, dtype=dtype, device=device)
    w = torch.randn(shape[-1], dtype=dtype, device=device)
    b = torch.randn(shape[-1], dtype=dtype, device=device)
    moved = 2 * x.numel() * x.element_size()
    dtype_name = str(dtype).removeprefix("torch.")
    print(f"norms fwd {shape[0]}x{shape[1]} {dtype_name}: {moved:,} bytes (x read, y written; the "
          f"(hidden,) weight and bias and the float32 statistics left out)")
    norms = {"rms_norm (weight)": (lambda: tritonkit.rms_norm(x, w),
                                   lambda upcast: rms_norm_reference(x, w, upcast=upcast)),
             "layer_norm (weight, bias)": (lambda: tritonkit.layer_norm(x, w, b),
                                           lambda upcast: layer_norm_reference(x, w, b, upcast=upcast))}
    # The variants may take up to 32 warps a program; the default is the rule's own.
    default = (_rows.PER_THREAD["fwd"], _rows.MIN_TILE["fwd"], None, _rows.MAX_WARPS["fwd"])
    variants = [default, *((*v, 32) for v in NORM_VARIANTS if (*v, 32) != default)]
    cases = []  # (label, variant or None for torch.compile, fn)
    for name, (fn, ref) in norms.items():
        reference = ref(True)
        theirs = relative_error(ref(False), reference)
        launches = set()
        for variant in variants:
            per_thread, tile, chunk, _ = variant
            with norm_elements_per_thread(*variant):
                launch = _rows.row_config(shape[0], shape[1], "fwd", name.startswith("rms"))
                if launch in launches:
                    continue
                launches.add(launch)
                block_m, _, _, warps = launch
                error = relative_error(fn(), reference)
            label = (f"{name}, {per_thread} a thread, tile {tile}: {block_m} row(s) a program ({warps} warps)"
                     f"{f', two passes over {chunk} columns' if chunk else ''}"
                     f"{' (default)' if variant == default else ''}")
            if error > 2 * theirs + TOLERANCE:
                print(f"   {label}: relative error {error:.2e} > 2 x torch's {theirs:.2e}, NOT timed")
                continue
            cases.append((label, variant, fn))
        compiled = torch.compile(lambda ref=ref: ref(False), dynamic=False)
        cases.append((f"{name}, torch.compile of the reference", None, compiled))
    rates: dict[str, list[float]] = {label: [] for label, _, _ in cases}
    copies = []
    with torch.no_grad():
        for round_ in range(NORM_ROUNDS):
            copies.append(copy_ceiling_gbs(device, moved))
            for label, v, fn in cases[::-1] if round_ % 2 else cases:
                with norm_elements_per_thread(*(v or default)):
                    rates[label].append(moved / time_ms(fn) / 1e6)
    copy = statistics.median(copies)
    print(f"   same-bytes copy {copy:.0f} GB/s (rounds: {', '.join(f'{v:.0f}' for v in copies)})")
    for label, v, fn in cases:
        value = statistics.median(rates[label])
        with norm_elements_per_thread(*(v or default)):
            host = host_ms(fn)
        print(f"   {value:6.0f} GB/s {100 * value / copy:5.1f}% of copy  {label}  "
              f"(rounds: {', '.join(f'{v:.0f}' for v in rates[label])}"
              + (f"; host {host * 1e3:.0f} us a call)" if host is not None else ")"))


def sweep_norms_backward(device: torch.device, shape: tuple[int, int], dtype: torch.dtype = torch.bfloat16) -> None:
    """The norms' backward launchers alone (dx, dW, and LayerNorm's dB from dy, x and the
    forward's statistics), at each of NORM_BWD_VARIANTS, beside a copy of the same bytes."""
    from tritonkit.ops.norms import _rows
    from tritonkit.ops.norms.layer_norm import _layer_norm_bwd, _layer_norm_fwd
    from tritonkit.ops.norms.rms_norm import _rms_norm_bwd, _rms_norm_fwd

    x = torch.randn(shape, dtype=dtype, device=device)
    w = torch.randn(shape[-1], dtype=dtype, device=device)
    b = torch.randn(shape[-1], dtype=dtype, device=device)
    dy = torch.randn_like(x)
    _, _, rstd = _rms_norm_fwd(x, w, None, 1e-6, 0.0)
    _, _, mean, lrstd = _layer_norm_fwd(x, w, b, None, 1e-5)
    moved = 3 * x.numel() * x.element_size()
    dtype_name = str(dtype).removeprefix("torch.")
    print(f"norms bwd {shape[0]}x{shape[1]} {dtype_name}: {moved:,} bytes (dy and x read, dx written; the "
          f"(hidden,) weight, dW, dB, statistics and partial sums left out)")
    norms = {"rms_norm": lambda: _rms_norm_bwd(dy, None, x, w, rstd, 0.0),
             "layer_norm": lambda: _layer_norm_bwd(dy, None, x, w, b, mean, lrstd)}
    default = (_rows.PER_THREAD["bwd"], _rows.MIN_TILE["bwd"], _rows.WARPS_PER_SM)
    variants = [default, *(v for v in NORM_BWD_VARIANTS if v != default)]
    cases = []
    for name, fn in norms.items():
        with norm_backward_tile(*default):
            expected = fn()
        for v in variants:
            with norm_backward_tile(*v):
                block_m, _, _, warps = _rows.row_config(shape[0], shape[1], "bwd", name.startswith("rms"))
                programs = _rows.backward_programs(device, -(-shape[0] // block_m), warps)
                got = fn()
            # Every variant sums dW in its own fixed order: dx must match the default's
            # closely and dW within float32 reordering.
            close = all(torch.allclose(g.float(), e.float(), rtol=1e-2, atol=1e-2) for g, e in zip(got, expected)
                        if g is not None)
            label = (f"{name}, {v[0]} a thread, tile {v[1]}, {v[2]} warps an SM: {block_m} row(s) a program, "
                     f"{warps} warps, {programs} programs{' (default)' if v == default else ''}")
            if not close:
                print(f"   {label}: differs from the default's gradients, NOT timed")
                continue
            cases.append((label, v, fn))
    rates: dict[str, list[float]] = {label: [] for label, _, _ in cases}
    copies = []
    for round_ in range(NORM_ROUNDS):
        copies.append(copy_ceiling_gbs(device, moved))
        for label, v, fn in cases[::-1] if round_ % 2 else cases:
            with norm_backward_tile(*v):
                fn()
                rates[label].append(moved / time_ms(fn) / 1e6)
    copy = statistics.median(copies)
    print(f"   same-bytes copy {copy:.0f} GB/s (rounds: {', '.join(f'{v:.0f}' for v in copies)})")
    for label, _, _ in cases:
        value = statistics.median(rates[label])
        print(f"   {value:6.0f} GB/s {100 * value / copy:5.1f}% of copy  {label}  "
              f"(rounds: {', '.join(f'{v:.0f}' for v in rates[label])})")


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(print(__doc__))
    cpu = "--cpu" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--cpu"]
    shapes = [tuple(int(n) for n in args[i + 1].split("x")) for i, a in enumerate(args) if a == "--shape"]
    parts = [a for i, a in enumerate(args) if a != "--shape" and (i == 0 or args[i - 1] != "--shape")]
    parts = parts or ["rope", "norms", "norms-fp32"]
    norm_shapes = [CPU_NORM_SHAPE] if cpu else shapes or [NORM_SHAPE]
    if not cpu and not torch.cuda.is_available():
        sys.exit("sweep_rope.py times kernels on a GPU; none here (--cpu tries the script on tiny shapes)")
    from tritonkit import _runtime

    start = time.perf_counter()
    print(_runtime.describe())
    device = _runtime.default_device()
    for part in parts:
        if part == "rope":
            sweep_rope(device, CPU_ROPE_CASE if cpu else ROPE_CASE)
        elif part in ("norms", "norms-fp32"):
            for shape in norm_shapes:
                sweep_norms(device, shape, torch.float32 if part == "norms-fp32" else torch.bfloat16)
        elif part in ("norms-bwd", "norms-bwd-fp32"):
            for shape in norm_shapes:
                sweep_norms_backward(device, shape, torch.float32 if part == "norms-bwd-fp32" else torch.bfloat16)
        else:
            sys.exit(f"unknown part {part!r}: rope, norms, norms-fp32, norms-bwd or norms-bwd-fp32")
    print(f"took {time.perf_counter() - start:.0f} s")
