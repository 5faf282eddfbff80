"""Pieces the Gluon attention kernels (`attention_fwd`, `attention_bwd`) share: the wgmma
accumulator layout, the view of a shared buffer as a descriptor's box, the query tile a
program index stands for and the key blocks its rows walk (causal, with a left window), and
the softcap's tanh."""

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
def _varlen_tile(t, n_m, H, Na, Nb, CU_A, CU_B, SEQS, ROWS: gl.constexpr):
    # Packed sequences: tile t of ROWS rows -> (h, m0, a0, na, b0, nb): rows [m0, m0 + ROWS)
    # (local to the sequence) of head h, the sequence's first row a0 and length na along the
    # tiled operand, b0 and nb along the other. As the Triton kernels' `mask._program_tile`:
    # sequence s owns tiles [cu_a[s] // ROWS + s, ...) of each head, n_m = cdiv(Na, ROWS) + SEQS
    # of them, found by a binary search; tiles past a sequence's rows get m0 >= na. Heads vary
    # fastest and the last tiles go first (causal: a sequence's longest rows). Bounds are
    # clamped to [0, Na] and [0, Nb], so bad cu_seqlens cannot send a tile out of bounds.
    h = t % H
    pid = n_m - 1 - t // H
    lo = 0
    hi = SEQS
    while hi - lo > 1:
        mid = (lo + hi) // 2
        before = gl.load(CU_A + mid) // ROWS + mid <= pid
        lo = gl.where(before, mid, lo)
        hi = gl.where(before, hi, mid)
    a_first = gl.load(CU_A + lo)
    a0 = gl.minimum(gl.maximum(a_first, 0), Na)
    na = gl.maximum(gl.minimum(gl.load(CU_A + lo + 1), Na) - a0, 0)
    b0 = gl.minimum(gl.maximum(gl.load(CU_B + lo), 0), Nb)
    nb = gl.maximum(gl.minimum(gl.load(CU_B + lo + 1), Nb) - b0, 0)
    m0 = (pid - (a_first // ROWS + lo)) * ROWS
    m0 = gl.where(m0 < 0, na, m0)           # only with cu_seqlens[0] > 0
    return h, m0, a0, na, b0, nb


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
