"""numpy dtypes for tiles dtypes (bf16 through ml_dtypes)."""

from __future__ import annotations

import numpy as np

try:
    import ml_dtypes

    _BF16 = np.dtype(ml_dtypes.bfloat16)
    _FP8 = {"fp8e5": np.dtype(ml_dtypes.float8_e5m2), "fp8e4nv": np.dtype(ml_dtypes.float8_e4m3fn),
            # AMD's (FNUZ), which only the interpreter runs.
            "fp8e4b8": np.dtype(ml_dtypes.float8_e4m3fnuz), "fp8e5b16": np.dtype(ml_dtypes.float8_e5m2fnuz)}
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    _BF16 = None
    _FP8 = {}

_MAP = {"int1": np.dtype(np.bool_), "int8": np.dtype(np.int8), "int16": np.dtype(np.int16),
        "int32": np.dtype(np.int32), "int64": np.dtype(np.int64), "uint8": np.dtype(np.uint8),
        "uint16": np.dtype(np.uint16), "uint32": np.dtype(np.uint32), "uint64": np.dtype(np.uint64),
        "fp16": np.dtype(np.float16), "fp32": np.dtype(np.float32), "fp64": np.dtype(np.float64)}


def numpy_dtype(dt) -> np.dtype:
    if dt.is_ptr():
        return np.dtype(np.int64)
    if dt.name == "bf16":
        if _BF16 is None:
            raise TypeError("bf16 needs the ml_dtypes package")
        return _BF16
    if dt.name == "fp8e4b15":
        return np.dtype(np.uint8)  # no numpy type: its bits, converted by the interpreter's casts
    if dt.name in ("fp8e5", "fp8e4nv", "fp8e4b8", "fp8e5b16"):
        if dt.name not in _FP8:
            raise TypeError("fp8 needs the ml_dtypes package")
        return _FP8[dt.name]
    return _MAP[dt.name]


def from_numpy(npdt: np.dtype):
    from . import core

    npdt = np.dtype(npdt)
    if _BF16 is not None and npdt == _BF16:
        return core.bfloat16
    for name, d in _FP8.items():
        if d == npdt:
            return core.dtype(name)
    for name, d in _MAP.items():
        if d == npdt:
            return core.dtype(name)
    raise TypeError(f"numpy dtype {npdt} is not supported by tiles")
