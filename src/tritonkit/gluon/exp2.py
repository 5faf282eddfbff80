"""2^x on the FMA pipe, for a share of a softmax's exponentials.

`gl.exp2` is the MUFU's `ex2.approx` (16 results a cycle per SM on Hopper); the FMA pipe gives
eight times that. Where the MUFU is the bottleneck (the softcapped attention forward spends two
MUFU operations a score: tanh and exp2), some of a tile's exp2s are computed here instead:

    x = max(x, -127);   n = floor(x),  f = x - n in [0, 1)
    2^x = 2^n * p(f),   p(f) = 1 + f (C1 + f (C2 + f C3))  ~ 2^f,

n by the rounding of one float add (x + 1.5 * 2^23, rounded toward minus infinity, leaves n in the
low mantissa bits: exact for |x| < 2^22), p by three fused multiply-adds, and the product by an
integer add of n into p's exponent bits. Per element: three adds and three FMAs on the FMA pipe,
a max and a shift-and-add (ptxas puts it on the integer or the FMA pipe), none on the MUFU.

p is the minimax polynomial for the relative error of 2^f on [0, 1) with p(0) = 1 exactly
(`fit_exp2_poly`, a Remez exchange; the coefficients below are its float32 roundings): its
largest relative error is 8.6e-5 (2^-13.5), about 1/45 of bfloat16's half step (2^-9 relative),
where P is rounded for the P V product; the row sum l in float32 carries at most that relative
error from these elements (tests/test_gluon_exp2.py measures both in float32).

Why p(0) = 1 and the clamp at -127: x = -inf (a masked score) becomes n = -127, f = 0, p = 1
exactly, and 1.0's exponent field (127) plus -127 is 0: the result is +0.0 exactly. Any x in
[-127, -126) gives a subnormal below 2^-126, x below -127 the same as -127 (0); the MUFU's
ftz form gives 0 there, the difference (< 2^-126) is nothing against a row sum >= 1. Exact up to
the polynomial for x in [-126, 128) (p < 2 on [0, 1), so the exponent field stays below 255). A NaN x gives 0, not NaN (max ignores NaN): the softmax's
x is a score minus its row's finite maximum, NaN only from NaN inputs, whose row sum the MUFU
elements of the same row still make NaN.
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

# p(f) = 1 + C1 f + C2 f^2 + C3 f^3: fit_exp2_poly(3) rounded to float32 (each an exact float32).
C1 = gl.constexpr(0.6951167583465576)
C2 = gl.constexpr(0.22764499485492706)
C3 = gl.constexpr(0.07706703990697861)
# x + 1.5 * 2^23 lies in [2^23, 2^24) for |x| < 2^22: the sum's unit is 1, so its low mantissa
# bits are floor(x) in two's complement (rounded toward minus infinity), and its exponent bits
# (those of 2^23, with the 0.5 * 2^23 bit) all shift out past bit 31 when moved up by 23.
ROUND_SHIFTER = gl.constexpr(12582912.0)
X_MIN = gl.constexpr(-127.0)


@gluon.jit
def exp2_fma(x):
    # 2^x of float32 x by the polynomial above (the module docstring has the argument).
    x = gl.maximum(x, X_MIN)
    t = gl.inline_asm_elementwise("add.rm.f32 $0, $1, 0f4B400000;", "=f,f", [x], dtype=gl.float32,
                                  is_pure=True, pack=1)
    f = x - (t - ROUND_SHIFTER)
    p = gl.fma(gl.fma(gl.fma(f, C3, C2), f, C1), f, 1.0)
    bits = p.to(gl.int32, bitcast=True) + (t.to(gl.int32, bitcast=True) << 23)
    return bits.to(gl.float32, bitcast=True)


@gluon.jit
def exp2_split(x, FMA_COLS: gl.constexpr):
    # 2^x of a 2-d tile: columns [0, FMA_COLS) by exp2_fma, the rest by gl.exp2 (the MUFU), in
    # x's layout. The tile is halved by columns until each half is one path's: a reshape, permute
    # and split that move no data where the halving column bit is one of each thread's
    # registers; the joined halves come back in x's layout by a conversion asserted trivial,
    # so a split that would move data fails to compile.
    ROWS: gl.constexpr = x.shape[0]
    COLS: gl.constexpr = x.shape[1]
    HALF: gl.constexpr = COLS // 2
    if FMA_COLS == 0:
        p = gl.exp2(x)
    elif FMA_COLS == COLS:
        p = exp2_fma(x)
    else:
        lo, hi = x.reshape([ROWS, 2, HALF]).permute((0, 2, 1)).split()
        lo = exp2_split(lo, min(FMA_COLS, HALF))
        hi = exp2_split(hi, max(FMA_COLS - HALF, 0))
        p = gl.join(lo, hi).permute((0, 2, 1)).reshape([ROWS, COLS])
        p = gl.convert_layout(p, x.type.layout, assert_trivial=True)
    return p


def exp2_fma_reference(x: torch.Tensor) -> torch.Tensor:
    """`exp2_fma` evaluated in float32 on any device, step for step: each FMA rounded once from
    float64 (the product of two float32 values is exact there), so it can differ from the GPU's
    by a rounding in rare ties; floor(x) is exact in the kernel's range."""
    x = torch.fmax(x.float(), torch.tensor(X_MIN.value, device=x.device))
    n = torch.floor(x)
    f = x - n

    def fma(a, b, c):
        return (a.double() * b + c).float()

    p = fma(fma(fma(f, C3.value, C2.value), f, C1.value), f, 1.0)
    return (p.view(torch.int32) + n.to(torch.int32) * 2 ** 23).view(torch.float32)


def fit_exp2_poly(degree: int = 3, points: int = 100001, iterations: int = 40) -> list[float]:
    """(C1, ..., C_degree) of p(f) = 1 + sum_k C_k f^k minimising max |p(f) / 2^f - 1| on [0, 1],
    by the Remez exchange in float64: solve for the coefficients and the level E at degree + 1
    points where the error alternates +E, -E, ...; move the points to the error's extrema on a
    fine grid; repeat. (The error is 0 at f = 0, so the points lie in (0, 1].)"""
    grid = torch.linspace(0, 1, points, dtype=torch.float64)
    k = torch.arange(1, degree + 1, dtype=torch.float64)
    at = 0.5 - 0.5 * torch.cos(torch.pi * torch.arange(1, degree + 2, dtype=torch.float64) / (degree + 1))
    for _ in range(iterations):
        alternating = (-1.0) ** torch.arange(degree + 1, dtype=torch.float64)
        system = torch.cat([at[:, None] ** k / 2 ** at[:, None], alternating[:, None]], 1)
        coeffs = torch.linalg.solve(system, 1 - 2.0 ** -at)[:-1]
        err = (1 + (grid[:, None] ** k * coeffs).sum(1)) / 2 ** grid - 1
        sign = torch.sign(err[1:])
        cuts = [1] + (torch.nonzero(sign[1:] != sign[:-1]).flatten() + 2).tolist() + [points]
        extrema = [a + int(err[a:b].abs().argmax()) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
        if len(extrema) == degree + 1:
            at = grid[extrema]
    return coeffs.tolist()
