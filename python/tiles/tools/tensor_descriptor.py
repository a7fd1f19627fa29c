"""Host tensor descriptors (Triton's `triton.tools.tensor_descriptor.TensorDescriptor`).

A descriptor names a strided tensor and the block shape a kernel moves at once. Passed to a
kernel, it becomes a `tl.tensor_descriptor` there: the base pointer, the shape (i32 per
dimension) and the strides (i64 per dimension) are kernel parameters; the block shape is part of
the compiled kernel's type (`tensordesc<fp16[64, 64]>`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List


@dataclass
class TensorDescriptor:
    base: Any
    shape: List[int]
    strides: List[int]
    block_shape: List[int]
    padding: str = "zero"
    # fp32 elements a kernel loads through the descriptor arrive rounded to TF32 (to nearest,
    # ties to even; infinities and NaN kept), as Triton's TMA descriptors of that kind do.
    round_f32_to_tf32: bool = False

    def __post_init__(self):
        self.shape = [int(s) for s in self.shape]
        self.strides = [int(s) for s in self.strides]
        self.block_shape = [int(b) for b in self.block_shape]
        rank = len(self.shape)
        if not (len(self.strides) == len(self.block_shape) == rank) or rank == 0:
            raise ValueError("TensorDescriptor needs one shape, stride and block size per dimension")
        if self.strides[-1] != 1:
            raise ValueError(f"the last dimension must be contiguous (stride 1), got strides {self.strides}")
        for i, b in enumerate(self.block_shape):
            if b <= 0 or b & (b - 1):  # worded as Triton's check is
                raise ValueError(f"Shape element {i} must be a power of 2 (block shape {self.block_shape})")
        if self.padding not in ("zero", "nan"):
            raise ValueError(f"padding must be 'zero' or 'nan', got {self.padding!r}")

    @staticmethod
    def from_tensor(tensor: Any, block_shape: List[int], padding: str = "zero",
                    round_f32_to_tf32: bool = False) -> "TensorDescriptor":
        return TensorDescriptor(tensor, list(tensor.shape), element_strides(tensor), list(block_shape), padding,
                                round_f32_to_tf32)


def element_strides(tensor: Any) -> List[int]:
    """A torch tensor's or numpy array's strides, in elements."""
    if callable(getattr(tensor, "stride", None)):
        return [int(s) for s in tensor.stride()]
    return [int(s) // tensor.itemsize for s in tensor.strides]
