"""The sinks' gradient kernel (`ops.attention.sinks`) against its torch reference and against
float64, on fresh random data: several batches, row counts that are not a multiple of its
block, packed (B = 1) shapes, bfloat16 and float32 sinks, non-contiguous inputs; deterministic."""

import pytest
import torch

from tritonkit.ops.attention.sinks import sinks_grad, sinks_grad_reference

from _tolerance import assert_close_to_reference


@pytest.mark.parametrize("B, H, N", [(1, 3, 1), (2, 4, 1000), (3, 2, 2049), (1, 5, 0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_reference(B, H, N, dtype, device):
    sinks = torch.randn(H, device=device).to(dtype)
    # lse at least the sink (a row's lse includes it), delta of either sign
    lse = sinks.float()[None, :, None] + torch.rand(B, H, N, device=device) * 3
    delta = torch.randn(B, H, N, device=device)
    got = sinks_grad(sinks, lse, delta)
    wide = -(torch.exp(sinks.double()[None, :, None] - lse.double()) * delta.double()).sum((0, 2))
    assert got.dtype == dtype and got.shape == (H,)
    assert_close_to_reference(got, wide, sinks_grad_reference(sinks, lse, delta), what="d(sinks)")
    assert torch.equal(got, sinks_grad(sinks, lse, delta))


def test_strided_inputs(device):
    # lse and delta as views of (B, N, H) buffers, sinks a strided view: read as the values.
    B, H, N = 2, 4, 300
    sinks = torch.randn(2 * H, device=device)[::2]
    lse = (torch.rand(B, N, H, device=device) * 3 + 2).transpose(1, 2)
    delta = torch.randn(B, N, H, device=device).transpose(1, 2)
    torch.testing.assert_close(sinks_grad(sinks, lse, delta), sinks_grad_reference(sinks, lse, delta),
                               rtol=1e-5, atol=1e-5)
