"""Pieces the Gluon attention kernels (`attention_fwd`, `attention_bwd`) share: the wgmma
accumulator layout, the view of a shared buffer as a descriptor's box, the query tile a
program index stands for and the key blocks its rows walk (causal, with a left window), the
softcap's tanh, and exp2 shared between the multi-function units and the FMA units."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.constexpr_function
def _wgmma_layout(num_warps, n):
    # one warpgroup, 16 rows per warp; instr N = the tile's width; K = 16 for 16-bit inputs
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, n, 16])


@gluon.jit
def _tma_view(buf, desc):
    # A 2-d (rows, D) shared buffer seen as the (1, 1, rows, D) box of a 4-d descriptor: the
    # same bytes and swizzle, the two leading dims of extent one.
    return buf._reinterpret(buf.dtype, desc.block_type.shape, desc.layout)


@gluon.jit
def _tile(t, n_m, H, Nk, CAUSAL: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr):
    # Tile t of ROWS query rows -> (b, h, first row m0, key blocks n_kv, unmasked key blocks
    # n_full). Row blocks of one head are consecutive tiles, so programs running together
    # share K and V in L2; causal tiles go longest first within a head.
    hb = t // n_m
    pid_m = t % n_m
    if CAUSAL:
        pid_m = n_m - 1 - pid_m
    m0 = pid_m * ROWS
    # Key blocks [0, n_full) are visible to every row of the tile; [n_full, n_kv) need masks.
    if CAUSAL:
        n_kv = gl.cdiv(gl.minimum(Nk, m0 + ROWS), BLOCK_N)
        n_full = gl.minimum(m0 + 1, Nk) // BLOCK_N
    else:
        n_kv = gl.cdiv(Nk, BLOCK_N)
        n_full = Nk // BLOCK_N
    return hb // H, hb % H, m0, n_kv, n_full


@gluon.jit
def _window_start(m0, WINDOW_LEFT: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr):
    # Rows [m0, m0 + ROWS) with a left window: the first key block any of them sees, and the
    # first that all of them see whole (keys j >= i - WINDOW_LEFT). Without a window both are
    # the constant 0, so that the walks (the forward's, the dQ pass's) compile to the kernels
    # without one.
    if WINDOW_LEFT >= 0:
        lo = gl.maximum(m0 - WINDOW_LEFT, 0) // BLOCK_N
        full_lo = gl.cdiv(gl.maximum(m0 + (ROWS - 1 - WINDOW_LEFT), 0), BLOCK_N)
    else:
        lo: gl.constexpr = 0
        full_lo: gl.constexpr = 0
    return lo, full_lo


@gluon.jit
def _walk(m0, n_kv, n_full, WINDOW_LEFT: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr):
    # The key blocks rows [m0, m0 + ROWS) walk, [lo, n_kv), counted from lo: [0, edge) hold
    # the left window's edge, [edge, band) are whole for every row, [band, count) hold the
    # diagonal and the ragged tail; and whether the first is whole.
    if WINDOW_LEFT >= 0:
        lo, full_lo = _window_start(m0, WINDOW_LEFT, ROWS, BLOCK_N)
        edge = gl.minimum(gl.maximum(full_lo, lo), n_kv) - lo
        band = gl.maximum(n_full - lo, edge)
        first_whole = (edge == 0) & (band > 0)
        count = n_kv - lo
    else:
        lo: gl.constexpr = 0
        edge: gl.constexpr = 0
        band = n_full
        first_whole = n_full > 0
        count = n_kv
    return lo, edge, band, first_whole, count


@gluon.jit
def _softcap_tanh(qk, cap_in):
    # tanh(y), y = qk * cap_in = scale q.k / c, for raw scores qk: one tanh.approx.f32 (a MUFU
    # operation) an element, the instruction the Triton kernels use on the GPU, so that both
    # paths' forwards and backwards agree on P.
    return gl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [qk * cap_in], dtype=gl.float32,
                                     is_pure=True, pack=1)


# 2^x for x <= 0 without the multi-function unit (MUFU), on the FMA and integer units: x = j + f
# with j the nearest integer (adding and subtracting 1.5 * 2^23 rounds it into the low mantissa
# bits) and f in [-1/2, 1/2]; 2^f by a degree-4 polynomial with p(0) = 1 exactly, fitted to the
# relative error on that interval (at most 2.9e-6 in float32, against ex2.approx's 2^-22); j
# added to the result's exponent bits. x is clamped at -127 first: there j = -127, f = 0, p = 1
# and the bits come out exactly 0, so a masked score (-inf) gives 0 as ex2 does (p(f) >= 1 for
# f >= 0 keeps the exponent from wrapping below j = -126); x in (-127, -126] gives values
# below 2^-126, which ex2.approx.ftz flushes to 0. Thirteen instructions against MUFU's one, on
# units the softmax leaves idle.
_EXP2_POLY = """
    max.f32 x, {src}, 0fC2FE0000;
    add.rn.f32 t, x, 0f4B400000;
    sub.rn.f32 j, t, 0f4B400000;
    sub.rn.f32 f, x, j;
    fma.rn.f32 p, f, 0f3C1D0166, 0f3D64FE23;
    fma.rn.f32 p, p, f, 0f3E7601BC;
    fma.rn.f32 p, p, f, 0f3F317096;
    fma.rn.f32 p, p, f, 0f3F800000;
    mov.b32 bits, p;
    mov.b32 e, t;
    shl.b32 e, e, 23;
    add.s32 bits, bits, e;
    mov.b32 {dst}, bits;"""


def _exp2_shared_asm(one_in: int) -> str:
    """PTX for `pack` = one_in elements: the last on the FMA units, the others on MUFU."""
    lines = ["{", ".reg .f32 x, t, j, f, p;", ".reg .b32 bits, e;"]
    lines += [f"ex2.approx.ftz.f32 ${i}, ${one_in + i};" for i in range(one_in - 1)]
    lines += [_EXP2_POLY.format(src=f"${2 * one_in - 1}", dst=f"${one_in - 1}"), "}"]
    return "\n".join(lines)


_EXP2_ONE_IN_2 = gl.constexpr(_exp2_shared_asm(2))
_EXP2_ONE_IN_4 = gl.constexpr(_exp2_shared_asm(4))


@gluon.jit
def _exp2_shared(x, ONE_IN: gl.constexpr):
    # 2^x of float32 x <= 0 (masked entries -inf), one element in ONE_IN (2 or 4) on the FMA
    # units (see _EXP2_POLY) and the rest on MUFU, for kernels whose MUFU work (exp2 and a
    # softcap's tanh a score) outlasts the tensor cores' products. Callers with nothing to
    # share call gl.exp2 themselves: even a constexpr branch to it here changed the register
    # allocation of the D=64 three-consumer forward (more spills).
    if ONE_IN == 2:
        return gl.inline_asm_elementwise(_EXP2_ONE_IN_2, "=f,=f,f,f", [x], dtype=gl.float32, is_pure=True, pack=2)
    else:
        gl.static_assert(ONE_IN == 4, "ONE_IN: 2 or 4")
        return gl.inline_asm_elementwise(_EXP2_ONE_IN_4, "=f,=f,=f,=f,f,f,f,f", [x], dtype=gl.float32,
                                         is_pure=True, pack=4)
