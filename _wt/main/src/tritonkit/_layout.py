"""Shape and stride bookkeeping shared by the launchers."""

from __future__ import annotations

from collections.abc import Sequence


def collapse_dims(shape: Sequence[int], *strides: Sequence[int]) -> tuple[list[int], list[list[int]]]:
    """Merge adjacent dimensions that every tensor walks as one, and drop size-1 dimensions.

    Two neighbouring dims (i, i+1) merge when, for every stride list, stride[i] equals
    stride[i+1] * size[i+1]: then the pair is a single dim of size size[i] * size[i+1].
    A broadcast dim (stride 0) merges with a neighbour that is also broadcast. The
    element order (row-major over `shape`) is unchanged, so flat indices still map to
    the same elements. Returns ([sizes], [[strides] per tensor]); a 0-d shape gives [1].
    """
    dims = [i for i, s in enumerate(shape) if s != 1]
    sizes = [shape[i] for i in dims]
    out_strides = [[st[i] for i in dims] for st in strides]
    i = len(sizes) - 2
    while i >= 0:
        if all(st[i] == st[i + 1] * sizes[i + 1] for st in out_strides):
            sizes[i] *= sizes[i + 1]
            for st in out_strides:
                st[i] = st[i + 1]
                del st[i + 1]
            del sizes[i + 1]
        i -= 1
    if not sizes:
        return [1], [[0] for _ in strides]
    return sizes, out_strides


def pad_front(values: Sequence[int], length: int, fill: int) -> list[int]:
    """Left-pad to `length` entries, so kernels can take a fixed number of dims."""
    return [fill] * (length - len(values)) + list(values)


def cdiv(a: int, b: int) -> int:
    """Ceiling division on the host. (triton.cdiv is a constexpr_function whose wrapper costs
    microseconds a call, and launchers run on every op call.)"""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of 2 >= n (0 for 0), as triton.next_power_of_2 gives, for host
    code: Triton's is a constexpr function whose call wrapper costs microseconds a call, and
    launchers call it a few times per launch."""
    return 1 << (n - 1).bit_length() if n > 0 else 0
