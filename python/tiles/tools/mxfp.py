"""Host helpers for OCP microscaling data (torch tensors), as scripts that build block-scaled
matmul inputs use them (`MXFP4Tensor`, `MXScaleTensor`, the names Triton's tutorials import):

- `MXFP4Tensor`: fp4 E2M1 values held as one 4-bit code per uint8 (`.data`); `.random()`,
  `.to(dtype)` to decode, `.to_packed_tensor(dim)` for two codes per byte (the first element
  of each pair in the low nibble; an odd length is padded with a zero code) and
  `.unpack_packed_tensor(packed, dim, original_shape)` back. Negative values, -0.0 included,
  keep their sign bit.
- `MXScaleTensor`: E8M0 scales (a power of two `2**(code - 127)`, code 255 NaN) held as uint8
  codes; built from floats (rounded to the nearest power of two in log scale; zero, negative,
  infinite and NaN scales become the NaN code) or random.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

# |value| of each E2M1 code's low three bits (sign in bit 3).
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _torch():
    import torch

    return torch


class MXFP4Tensor:
    """fp4 (E2M1) values, one code (0..15) per uint8 of `.data`."""

    def __init__(self, data: Any = None, size: Optional[Sequence[int]] = None, device: Any = None):
        torch = _torch()
        if data is None:
            if size is None:
                raise ValueError("MXFP4Tensor needs data or a size")
            self.data = torch.zeros(tuple(size), dtype=torch.uint8, device=device)
        elif data.dtype == torch.uint8:
            if data.numel() and int(data.max()) > 15:
                raise ValueError("MXFP4Tensor codes must be 0..15")
            self.data = data.to(device) if device is not None else data
        else:
            self.data = self._encode(data.float().to(device) if device is not None else data.float())
        self.device = self.data.device

    @staticmethod
    def _encode(x):
        """Nearest E2M1 code of each value (ties to the even code), saturating at +-6."""
        torch = _torch()
        mags = torch.tensor(_E2M1, device=x.device)
        tie_break = (torch.arange(8, device=x.device) % 2) * 1e-6  # odd codes lose ties
        if x.numel() == 0:
            return torch.zeros(tuple(x.shape), dtype=torch.uint8, device=x.device)
        code = ((x.abs().clamp(max=6.0)[..., None] - mags).abs() + tie_break).argmin(dim=-1)
        return (code + 8 * torch.signbit(x).to(torch.int64)).to(torch.uint8)

    def random(self) -> "MXFP4Tensor":
        """Fills with uniformly random codes (every fp4 value, both signs)."""
        torch = _torch()
        self.data = torch.randint(0, 16, tuple(self.data.shape), dtype=torch.uint8, device=self.device)
        return self

    def to(self, dtype: Any):
        """The values, decoded to `dtype` (a float dtype)."""
        torch = _torch()
        mags = torch.tensor(_E2M1, dtype=torch.float32, device=self.device)
        codes = self.data.to(torch.int64)
        vals = mags[codes & 7]
        vals = torch.where((codes & 8) != 0, -vals, vals)
        return vals.to(dtype)

    def to_packed_tensor(self, dim: int):
        """Two codes per byte along `dim`: element 2i in the low nibble, element 2i+1 in the
        high nibble (an odd length gets a zero code at the end)."""
        torch = _torch()
        nd = self.data.dim()
        assert -nd <= dim < nd, f"to_packed_tensor: dimension {dim} is out of range for {nd} dimensions"
        d = dim % nd
        data = self.data
        if data.shape[d] % 2:
            pad = list(data.shape)
            pad[d] = 1
            data = torch.cat([data, torch.zeros(pad, dtype=data.dtype, device=data.device)], dim=d)
        pairs = data.unfold(d, 2, 2)
        return (pairs[..., 0] | (pairs[..., 1] << 4)).contiguous()

    def unpack_packed_tensor(self, packed, dim: int, original_shape: Sequence[int]):
        """The codes `to_packed_tensor(dim)` packed, in `original_shape` (padding dropped)."""
        torch = _torch()
        d = dim % packed.dim()
        both = torch.stack([packed & 0xF, packed >> 4], dim=d + 1)
        shape = list(packed.shape)
        shape[d] *= 2
        return both.reshape(shape).narrow(d, 0, original_shape[d]).contiguous()


class MXScaleTensor:
    """E8M0 scales: uint8 exponent codes in `.data` (value `2**(code - 127)`, 255 NaN)."""

    def __init__(self, data: Any = None, size: Optional[Sequence[int]] = None, device: Any = None):
        torch = _torch()
        if data is None:
            if size is None:
                raise ValueError("MXScaleTensor needs data or a size")
            self.data = torch.full(tuple(size), 127, dtype=torch.uint8, device=device)
        elif data.dtype == torch.uint8:
            self.data = data.to(device) if device is not None else data
        else:
            x = data.float().to(device) if device is not None else data.float()
            bad = ~torch.isfinite(x) | (x <= 0)  # no E8M0 value: the NaN code
            e = torch.round(torch.log2(torch.where(bad, torch.ones_like(x), x))).clamp(-127, 127)
            codes = torch.where(bad, torch.full_like(e, 255), e + 127)
            self.data = codes.to(torch.uint8)
        self.device = self.data.device

    def random(self, low: Optional[float] = None, high: Optional[float] = None) -> "MXScaleTensor":
        """Fills with random powers of two in [low, high] (default 2**-127 .. 2**127)."""
        import math

        torch = _torch()
        lo = 0 if low is None else max(0, math.ceil(math.log2(low)) + 127)
        hi = 254 if high is None else min(254, math.floor(math.log2(high)) + 127)
        if lo > hi:
            raise ValueError(f"MXScaleTensor.random: no power of two in [{low}, {high}]")
        self.data = torch.randint(lo, hi + 1, tuple(self.data.shape), dtype=torch.uint8, device=self.device)
        return self

    def to(self, dtype: Any):
        torch = _torch()
        codes = self.data.to(torch.float32)
        vals = torch.exp2(codes - 127)
        return torch.where(self.data == 255, torch.full_like(vals, float("nan")), vals).to(dtype)
