"""Tensor descriptors (TMA) for the attention kernels: where they may be used, how they are
built, and the pre-run hooks that give them the tile of the config that launches."""

import functools

import torch
from triton.tools.tensor_descriptor import TensorDescriptor

from .backward import _attn_bwd_dkdv_kernel, _attn_bwd_dq_kernel
from .forward import _attn_fwd_kernel


@functools.lru_cache(maxsize=None)
def _has_tma(device: torch.device) -> bool:
    """Whether `device` has TMA: a CUDA GPU of compute capability 9.0 (Hopper) or later. CPU
    tensors reach a launcher in two ways: under Triton's interpreter, which reads tensor
    descriptors (zero-filling out of bounds as TMA does), or recorded for `tritonkit inspect`,
    which compiles for sm_90 by default."""
    if device.type != "cuda":
        return True
    return torch.cuda.get_device_capability(device)[0] >= 9


def _tma_ok(*tensors: torch.Tensor) -> bool:
    """Whether these (B, H, N, D) operands can be read through tensor descriptors (TMA): a
    device that has it, and each operand's layout TMA's (`tma_layout_ok`). Views that start
    inside a buffer (packed qkv at an odd offset) and rows of, say, 131 elements fail here, and
    take the pointer path instead, silently."""
    return all(_has_tma(t.device) and tma_layout_ok(t) for t in tensors)


def tma_layout_ok(t: torch.Tensor) -> bool:
    """Whether TMA can address t in place. TMA addresses a tensor by its base and a byte stride
    per dimension, and refuses on the host (an AssertionError in TensorDescriptor, or an error
    when the driver encodes the descriptor) a base that is not 16-byte aligned or a stride that
    is not a multiple of 16 bytes; the innermost stride must be 1. Also refused, to stay inside
    the hardware's documented range: strides of 0 (broadcast dims), of 2^40 bytes or more, and
    dims of 2^32 or more."""
    if t.data_ptr() % 16 or t.stride(-1) != 1 or any(n >= 2**32 for n in t.shape):
        return False
    size = t.element_size()
    return all(0 < s and s * size % 16 == 0 and s * size < 2**40 for s in t.stride()[:-1])


def _use_tma(tma: bool | None, *tensors: torch.Tensor) -> bool:
    """The launchers' `tma` argument: None reads these operands through tensor descriptors
    where `_tma_ok` allows it, False never, True always (a ValueError where it cannot)."""
    use = tma is not False and _tma_ok(*tensors)
    if tma and not use:
        raise ValueError("tma=True, but the operands cannot be read through tensor descriptors: each needs "
                         "a 16-byte aligned start and strides that are multiples of 16 bytes")
    return use


def _descriptor(t: torch.Tensor, rows: int, block_d: int) -> TensorDescriptor:
    """A descriptor of the whole (B, H, N, D) tensor with its own strides, read a tile of
    `rows` x block_d of one (batch, head) at a time. Reads past N or D come back as zeros,
    and never from the next head. The kernel's pre-run hook (`_descriptor_fitter`) resets the
    tile shape to the config that launches.

    Built without TensorDescriptor's own checks (its __post_init__), which repeat what
    `_tma_ok` has checked on every operand that reaches here (aligned base, 16-byte strides,
    unit innermost stride; dims are positive and tiles powers of two by construction): they
    cost ~2 us of host time a descriptor, and a forward and backward build seven. A test
    holds the result equal to the checked constructor's."""
    return _descriptor_maker(t, rows, block_d)(t)


def _descriptor_maker(like: torch.Tensor, rows: int, block_d: int):
    """A function of x giving `_descriptor(x, rows, block_d)` for tensors x of like's shape and
    strides, which a launch plan holds per layout: each descriptor a call builds then costs
    five attribute stores."""
    shape, strides, block = list(like.shape), list(like.stride()), [1, 1, rows, block_d]
    new = object.__new__

    def descriptor(x: torch.Tensor) -> TensorDescriptor:
        desc = new(TensorDescriptor)
        desc.base, desc.shape, desc.strides, desc.block_shape, desc.padding = x, shape[:], strides[:], block[:], "zero"
        return desc
    return descriptor


def _descriptor_fitter(kernel, tile_of: dict[str, tuple[str, str]]):
    """A pre-run hook for `kernel` that gives its descriptor arguments (by parameter name ->
    the meta-parameter counting their tile's rows, and the `head.HeadTiles` field of their
    head-dim tile) the tile shape of the config being launched. The autotuner picks BLOCK_M and
    BLOCK_N after the launcher built them, and Triton compiles a descriptor for the block shape
    it carries. A config pre_hook, as in Triton's tutorial, would do the same, but Triton's
    on-disk tuning cache skips configs that have one. Launches pass the kernel's runtime
    arguments by position."""
    positions = {kernel.arg_names.index(name): tile for name, tile in tile_of.items()}

    def fit_descriptors(*args, **meta) -> None:
        if meta.get("USE_TMA"):
            for position, (rows, width) in positions.items():
                args[position].block_shape = [1, 1, meta[rows], getattr(meta["HEAD"], width)]
    kernel.add_pre_run_hook(fit_descriptors)
    return fit_descriptors


_fit_descriptors = _descriptor_fitter(_attn_fwd_kernel, {"Q": ("BLOCK_M", "qk"), "K": ("BLOCK_N", "qk"),
                                                         "V": ("BLOCK_N", "v")})
_fit_dkdv_descriptors = _descriptor_fitter(_attn_bwd_dkdv_kernel, {"Q": ("BLOCK_M", "qk"), "DO": ("BLOCK_M", "v")})
_fit_dq_descriptors = _descriptor_fitter(_attn_bwd_dq_kernel, {"K": ("BLOCK_N", "qk"), "V": ("BLOCK_N", "v")})


