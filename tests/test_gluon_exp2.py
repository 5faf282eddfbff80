"""2^x on the FMA pipe (`tritonkit.gluon.exp2`), which the softcapped Gluon forward uses for a share
of its softmax's exponentials.

On any machine: the polynomial's accuracy through the float32 mirror of the kernel's formula
(`exp2_fma_reference`), its coefficients re-derived by the Remez fit, the special values, and the
tile split compiled for sm_90 (each thread's registers split, no data moved). On a Hopper GPU
(gpu-marked): the compiled split against the mirror, column for column.
"""

import struct

import pytest
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tritonkit.gluon import exp2
from tritonkit.gluon.compile import compile_sm90

COEFFS = (exp2.C1.value, exp2.C2.value, exp2.C3.value)
# bfloat16's half step relative to a value in [1, 2): P is rounded to it for the P V product.
BF16_HALF_STEP = 2.0 ** -9


def _float32(v: float) -> float:
    return struct.unpack("f", struct.pack("f", v))[0]


def test_coefficients_are_the_fit_in_float32():
    assert all(_float32(c) == c for c in COEFFS)            # what the kernel's constants hold exactly
    fit = exp2.fit_exp2_poly(3)
    assert [_float32(c) for c in fit] == pytest.approx(COEFFS, rel=2 ** -22)


def test_relative_error_over_the_reduced_range():
    # Every 2^-22 step of f in [0, 1), at several integer parts (the error is the polynomial's,
    # the exponent add is exact): the minimax level 8.56e-5 plus float32's rounding.
    f = torch.arange(2 ** 22, dtype=torch.float64) / 2 ** 22
    worst = 0.0
    for n in (0, -1, -2, -17, -64, -125, -126):
        x = (f + n).float()
        got = exp2.exp2_fma_reference(x).double()
        want = torch.exp2(x.double())
        worst = max(worst, ((got - want) / want).abs().max().item())
    assert worst <= 1e-4
    assert worst <= BF16_HALF_STEP / 20
    assert worst >= 8e-5                   # the fit's level, not a looser formula's


def test_row_sum_error_is_the_polynomials():
    # A softmax row's l over 4096 scores in float32: the FMA path's sum against float64 within
    # the polynomial's relative bound (the errors of its terms never add past it).
    x = -torch.rand(64, 4096) * 30
    got = exp2.exp2_fma_reference(x).double().sum(-1)
    want = torch.exp2(x.double()).sum(-1)
    assert ((got - want) / want).abs().max().item() <= 1e-4


def test_special_values():
    inf = float("inf")
    x = torch.tensor([-inf, -1e30, -200.0, -127.0, -126.0, -1.0, 0.0, -0.0, 3.0])
    got = exp2.exp2_fma_reference(x)
    # -inf and anything at or below -127 give +0.0 exactly (bits 0), as the MUFU's ftz form does.
    assert got[:4].view(torch.int32).tolist() == [0, 0, 0, 0]
    # Integers are exact powers of two (f = 0, p(0) = 1); -126 is the smallest normal float.
    assert got[4:].tolist() == [2.0 ** -126, 0.5, 1.0, 1.0, 8.0]
    # Between -127 and -126 a subnormal below 2^-126 (the MUFU gives 0): nothing beside l >= 1.
    tiny = exp2.exp2_fma_reference(torch.tensor([-126.5, -126.01]))
    assert ((tiny >= 0) & (tiny < 2.0 ** -126)).all()
    # Scores a rounding above their row maximum (x a few ulps past 0) stay in range.
    assert exp2.exp2_fma_reference(torch.tensor([1e-6])).item() == pytest.approx(2 ** 1e-6, rel=1e-4)


# ---------------------------------------------------------------------------------------
# The tile split, as the attention forward uses it: a wgmma accumulator's layout
# ---------------------------------------------------------------------------------------

ROWS = 64


@gluon.jit
def _exp2_tile_kernel(X, Y, FMA_COLS: gl.constexpr, COLS: gl.constexpr):
    # One warpgroup's S tile layout (wgmma m64nCOLS), loaded and stored in place.
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                     instr_shape=[16, COLS, 16])
    rows = gl.arange(0, 64, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
    offs = gl.expand_dims(rows, 1) * COLS + gl.expand_dims(cols, 0)
    gl.store(Y + offs, exp2.exp2_split(gl.load(X + offs), FMA_COLS))


def _tile_input(cols: int, device: str = "cpu") -> torch.Tensor:
    # Scores' exponents as the softmax makes them: <= 0, down past the clamp, with masked -inf.
    x = -torch.rand(ROWS, cols, device=device) * 140
    x[::7, ::5] = float("-inf")
    x[:, 0] = 0.0
    return x


@pytest.mark.parametrize("cols, fma_cols", [(128, 32), (128, 48), (64, 16), (128, 128)])
def test_split_moves_no_data_for_sm90(cols, fma_cols):
    x = _tile_input(cols)
    kernel = compile_sm90(_exp2_tile_kernel, (x, torch.empty_like(x)), dict(FMA_COLS=fma_cols, COLS=cols,
                                                                           num_warps=4))
    ptx = kernel.ptx
    # Each of a thread's cols / 2 scores goes to exactly one path, in the asked proportion.
    per_thread = ROWS * cols // 128
    assert ptx.count("add.rm.f32") == per_thread * fma_cols // cols
    assert ptx.count("ex2.approx") == per_thread - per_thread * fma_cols // cols
    # The halves are the threads' own registers: no shuffles, no shared memory, no barrier.
    assert "shfl" not in ptx and "bar.sync" not in ptx and kernel.shared == 0


@pytest.mark.gpu
@pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)),
                    reason="needs a Hopper (sm_90) GPU")
@pytest.mark.parametrize("cols, fma_cols", [(128, 32), (128, 48), (64, 16)])
def test_split_matches_the_mirror_on_the_gpu(cols, fma_cols):
    x = _tile_input(cols, "cuda")
    y = torch.full_like(x, float("nan"))
    _exp2_tile_kernel[(1,)](x, y, FMA_COLS=fma_cols, COLS=cols, num_warps=4)
    fma, mufu = y[:, :fma_cols], y[:, fma_cols:]
    # The FMA columns: the mirror's bits, up to one float32 step (its FMAs round once from float64).
    steps = (fma.view(torch.int32) - exp2.exp2_fma_reference(x[:, :fma_cols]).view(torch.int32)).abs()
    assert steps.max().item() <= 1
    assert (fma[torch.isinf(x[:, :fma_cols])] == 0).all()
    # The others: the MUFU's ex2.approx.ftz (a few ulp; subnormal results flushed).
    want = torch.exp2(x[:, fma_cols:].double())
    want = torch.where(want < 2.0 ** -126, 0.0, want)
    torch.testing.assert_close(mufu.double(), want, rtol=1e-6, atol=2.0 ** -125)
