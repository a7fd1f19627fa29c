"""Reading a DLPack producer's device pointer and dtype, without a framework dependency."""

from __future__ import annotations

import ctypes
from typing import Any, Tuple

from ..errors import LaunchError

_KDL_CUDA = 2
_CODES = {(0, 8): "i8", (0, 16): "i16", (0, 32): "i32", (0, 64): "i64", (1, 8): "u8", (1, 16): "u16",
          (1, 32): "u32", (1, 64): "u64", (2, 16): "fp16", (2, 32): "fp32", (2, 64): "fp64", (4, 16): "bf16",
          (6, 8): "i1", (1, 1): "i1"}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def pointer_and_dtype(obj: Any, name: str) -> Tuple[int, str]:
    dev_type, _ = obj.__dlpack_device__()
    if int(dev_type) != _KDL_CUDA:
        raise LaunchError(f"argument '{name}' is not in CUDA device memory (DLPack device type {dev_type})")
    capsule = obj.__dlpack__()
    ptr = _get_pointer(capsule, b"dltensor")
    if not ptr:
        raise LaunchError(f"argument '{name}': could not read its DLPack capsule")
    t = _DLTensor.from_address(ptr)
    dt = _CODES.get((t.dtype.code, t.dtype.bits))
    if dt is None or t.dtype.lanes != 1:
        raise LaunchError(f"argument '{name}' has a DLPack dtype tiles does not support")
    return int(t.data or 0) + int(t.byte_offset), dt
