"""Which kernels run an attention pass: the Gluon kernels written for Hopper
(`tritonkit.gluon`, FlashAttention-3's warp-specialized structure), or the Triton kernels of
this package, which run everywhere else: other GPUs, the interpreter, layouts a tensor
descriptor cannot read, windows, softcap, packed sequences, explicit tiles.

The Gluon kernels are taken only where they were measured faster than the Triton ones on
the H200 (BENCHMARKS.md, "Attention on Hopper: Gluon and Triton paths"): the forward at head
dims 128 and 256, the backward at head dim 128 with a causal mask. Both paths give results
within the same rounding of the float64 reference and are deterministic; they are not
bitwise equal to each other.
"""

from __future__ import annotations

import torch

GLUON_FORWARD_HEAD_DIMS = (128, 256)
GLUON_BACKWARD_HEAD_DIMS = (128,)


def _plain(flags: tuple, varlen: tuple | None, config: object, tma: bool | None) -> bool:
    """No window, no softcap, not packed, no tile forced, descriptors allowed."""
    _, window_left, window_right, softcap = flags
    return varlen is None and config is None and tma is not False and window_left < 0 and window_right < 0 \
        and softcap == 0


def gluon_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, flags: tuple,
                  varlen: tuple | None, config: object, tma: bool | None, gluon: bool | None) -> bool:
    """Whether the forward runs the Gluon kernel. gluon: None chooses by the measured head dims,
    False never, True always (a ValueError where the kernel cannot take the call)."""
    if gluon is False:
        return False
    if gluon is None and q.shape[-1] not in GLUON_FORWARD_HEAD_DIMS:
        return False
    possible = _plain(flags, varlen, config, tma) and q.is_cuda
    if possible:
        from ...gluon import attention_fwd as kernels
        possible = kernels.supported(q, k, v, flags[0], scale)
    return _chosen(possible, gluon, "forward")


def gluon_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                   lse: torch.Tensor, scale: float, flags: tuple, varlen: tuple | None, dkdv_config: object,
                   dq_config: object, tma: bool | None, gluon: bool | None) -> bool:
    """Whether the dK/dV and dQ passes run the Gluon kernels; gluon as in `gluon_forward`."""
    causal = flags[0]
    if gluon is False:
        return False
    if gluon is None and not (causal and q.shape[-1] in GLUON_BACKWARD_HEAD_DIMS):
        return False
    possible = dq_config is None and _plain(flags, varlen, dkdv_config, tma) and q.is_cuda
    if possible:
        from ...gluon import attention_bwd as kernels
        possible = kernels.supported(do, q, k, v, o, lse, causal, scale)
    return _chosen(possible, gluon, "backward")


def _chosen(possible: bool, gluon: bool | None, which: str) -> bool:
    if gluon and not possible:
        raise ValueError(f"gluon=True, but the Gluon {which} cannot take this call: it needs a Hopper GPU "
                         "(sm_90), float16/bfloat16 tensors that tensor descriptors can read, a head dim it "
                         "supports, and no window, softcap, packed sequences or explicit tiles")
    return possible
