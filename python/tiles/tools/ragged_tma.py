"""Ragged tensor descriptors (Triton's `triton.tools.ragged_tma`): one descriptor over a tensor
whose rows along `ragged_dim` are the concatenation of slices of different lengths; loads,
stores and atomic adds name a slice by (offset, size), and what falls outside the slice is
bounds-checked away (zeros read, nothing written) by the descriptor itself.

How: the descriptor gets two leading dimensions, and the ragged dimension's extent becomes 2**30.
A block at row `r` of the slice (`off`, `size`) is addressed with the coordinates
(2**30, off + size, ..., 2**30 - size + r, ...). The ragged dimension's bound then cuts the
block where the slice ends (2**30 - size + r + i < 2**30 exactly when r + i < size). The strides
of the two leading dimensions are 2**34 - s and s, where s is the ragged dimension's stride, so
the address is base + (2**64 + (off + r + i) * s) elements: the 2**64 wraps away in 64-bit
arithmetic."""

from __future__ import annotations

from typing import Any, Sequence

from .. import jit
from .. import language as tl
from .tensor_descriptor import TensorDescriptor, element_strides

_ROWS = tl.constexpr(1 << 30)  # the ragged dimension's extent in the descriptor
_FAR = 0x7FFF0000  # the two leading dimensions' extents: never a bound


def create_ragged_descriptor(T: Any, block_shape: Sequence[int], ragged_dim: int = 0) -> TensorDescriptor:
    """A descriptor over the 2- or 3-dimensional tensor `T` for `load_ragged`, `store_ragged`
    and `atomic_add_ragged`; `block_shape` has one entry per dimension of `T`."""
    shape = [int(n) for n in T.shape]
    rank = len(shape)
    if ragged_dim < 0:
        ragged_dim += rank
    if not 0 <= ragged_dim < rank - 1:
        raise ValueError(f"the ragged dimension must be one of the first {rank - 1} (the last cannot be ragged)")
    if rank > 3:
        raise ValueError(f"ragged descriptors take tensors of at most 3 dimensions, got {rank}")
    if len(block_shape) != rank:
        raise ValueError(f"block_shape {list(block_shape)} does not have one entry per dimension of {shape}")
    if shape[ragged_dim] > _ROWS.value:
        raise ValueError(f"a ragged dimension holds at most 2**30 rows, got {shape[ragged_dim]}")
    strides = element_strides(T)
    s = strides[ragged_dim]
    shape[ragged_dim] = _ROWS.value
    return TensorDescriptor(T, [_FAR, _FAR] + shape, [(1 << 34) - s, s] + strides, [1, 1] + list(block_shape))


@jit
def _ragged_offsets(slice_off, slice_size, coords, ragged_dim: tl.constexpr):
    """The descriptor's offsets of the block at `coords` of the slice (see the module's note)."""
    row = coords[ragged_dim]
    return [_ROWS, slice_off + slice_size] + coords[:ragged_dim] + [_ROWS - slice_size + row] + coords[ragged_dim + 1:]


@jit
def load_ragged(TMA, slice_off, slice_size, coords, ragged_dim: tl.constexpr = 0):
    """The block at `coords` of the slice `T[slice_off : slice_off + slice_size]`; rows past the
    slice's end read as zeros."""
    tl.static_assert(len(TMA.block_shape) == len(coords) + 2, "load_ragged needs a ragged descriptor")
    block = TMA.load(_ragged_offsets(slice_off, slice_size, coords, ragged_dim))
    return tl.reshape(block, block.shape[2:])


@jit
def store_ragged(TMA, slice_off, slice_size, coords, data, ragged_dim: tl.constexpr = 0):
    """Writes `data` at `coords` of the slice; rows past the slice's end are not written."""
    TMA.store(_ragged_offsets(slice_off, slice_size, coords, ragged_dim), tl.reshape(data, [1, 1] + data.shape))


@jit
def atomic_add_ragged(TMA, slice_off, slice_size, coords, data, ragged_dim: tl.constexpr = 0):
    """Adds `data` atomically at `coords` of the slice; rows past the slice's end are left."""
    TMA.atomic_add(_ragged_offsets(slice_off, slice_size, coords, ragged_dim), tl.reshape(data, [1, 1] + data.shape))
