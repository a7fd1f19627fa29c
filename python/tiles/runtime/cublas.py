"""cuBLASLt matrix products for comparisons in benchmarks: `CublasLt(workspace).matmul(a, b, c)`
computes `c = a @ b.T` (a: M x K, b: N x K, c: M x N, row-major; fp16, bf16, fp32 or fp8 e4m3 /
e5m2 inputs), as the `CublasLt` object Triton's tutorials build.

The library is loaded at run time (`libcublasLt.so.13/.12`, from the system or the NVIDIA pip
packages torch installs); tiles itself never needs it.
"""

from __future__ import annotations

import ctypes
import glob
import os
from typing import Any, Optional

from . import driver

# cudaDataType_t numbers (library_types.h).
_CUDA_TYPES = {"float16": 2, "bfloat16": 14, "float32": 0, "float8_e4m3fn": 28, "float8_e5m2": 29}
_COMPUTE_32F = 68  # CUBLAS_COMPUTE_32F
_DESC_TRANSA, _DESC_TRANSB = 3, 4  # CUBLASLT_MATMUL_DESC_TRANSA / TRANSB
_OP_N, _OP_T = 0, 1
_PREF_MAX_WORKSPACE_BYTES = 1


class _HeuristicResult(ctypes.Structure):
    # cublasLtMatmulHeuristicResult_t: the algorithm (8 x u64), workspace size, status, waves, 4 reserved ints.
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


_lib: Optional[ctypes.CDLL] = None


def _load() -> ctypes.CDLL:
    global _lib
    if _lib is not None:
        return _lib
    names = ["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"]
    try:
        import nvidia  # the pip packages torch depends on

        for base in nvidia.__path__:
            names += sorted(glob.glob(os.path.join(base, "**", "libcublasLt.so*"), recursive=True), reverse=True)
    except ImportError:
        pass
    errors = []
    for n in names:
        try:
            _lib = ctypes.CDLL(n)
            return _lib
        except OSError as e:
            errors.append(str(e))
    raise RuntimeError("cuBLASLt (libcublasLt.so) was not found; install it (pip install nvidia-cublas) "
                       "for cuBLAS comparisons")


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} failed: cuBLAS status {status}")


def _dtype_name(t: Any) -> str:
    return str(getattr(t, "dtype", "")).replace("torch.", "")


def _ptr(t: Any) -> int:
    if hasattr(t, "data_ptr"):
        return int(t.data_ptr())
    return int(t.__cuda_array_interface__["data"][0])


def _on_device(t: Any) -> bool:
    """Whether `t` is in GPU memory (a CUDA torch tensor or a `__cuda_array_interface__` object)."""
    is_cuda = getattr(t, "is_cuda", None)
    return bool(is_cuda) if is_cuda is not None else hasattr(t, "__cuda_array_interface__")


def _host_matmul(a: Any, b: Any, c: Any) -> None:
    """`c = a @ b.T` in host memory, in float32 (torch tensors or numpy arrays)."""
    if hasattr(c, "copy_"):
        c.copy_((a.float() @ b.float().T).to(c.dtype))
    else:
        import numpy as np

        c[...] = (np.asarray(a, np.float32) @ np.asarray(b, np.float32).T).astype(c.dtype)


class CublasLt:
    """A cuBLASLt handle with a device workspace (a uint8 device tensor). With a workspace in
    host memory it is a host stand-in that needs no GPU: `matmul` computes in float32 there."""

    def __init__(self, workspace: Any):
        # A workspace in host memory (the interpreter's CPU tensors, a machine without a GPU)
        # makes a host stand-in: products on the host, so a script's cuBLAS line runs there too.
        self._host = not _on_device(workspace)
        self._workspace = workspace
        if self._host:
            return
        driver.init()
        self._lib = _load()
        self._workspace_bytes = int(workspace.numel() * workspace.element_size()) if hasattr(workspace, "numel") \
            else int(workspace.nbytes)
        h = ctypes.c_void_p()
        _check(self._lib.cublasLtCreate(ctypes.byref(h)), "cublasLtCreate")
        self._handle = h

    def matmul(self, a: Any, b: Any, c: Any) -> None:
        """`c = a @ b.T` on the current stream."""
        M, K = a.shape
        N, K2 = b.shape
        if K != K2 or tuple(c.shape) != (M, N):
            raise ValueError(f"matmul shapes: a {tuple(a.shape)}, b {tuple(b.shape)} (N x K), c {tuple(c.shape)}")
        in_t, out_t = _dtype_name(a), _dtype_name(c)
        if self._host or not _on_device(c):
            _host_matmul(a, b, c)
            return
        if in_t not in _CUDA_TYPES or out_t not in _CUDA_TYPES or _dtype_name(b) != in_t:
            raise TypeError(f"cuBLASLt matmul of {in_t} x {_dtype_name(b)} -> {out_t} is not supported here")
        ab, dt = _CUDA_TYPES[in_t], _CUDA_TYPES[out_t]
        ct = _CUDA_TYPES["float16"] if out_t.startswith("float8") else dt  # C of an fp8 D must be 16-bit
        lib = self._lib
        desc = ctypes.c_void_p()
        _check(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), _COMPUTE_32F, _CUDA_TYPES["float32"]),
               "cublasLtMatmulDescCreate")
        layouts = []
        pref = ctypes.c_void_p()
        try:
            for attr, op in ((_DESC_TRANSA, _OP_T), (_DESC_TRANSB, _OP_N)):
                v = ctypes.c_int(op)
                size = ctypes.c_size_t(ctypes.sizeof(v))
                _check(lib.cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(v), size),
                       "cublasLtMatmulDescSetAttribute")
            # Column-major view: C^T (N x M) = op_T(b as K x N) . (a as K x M).
            for ty, rows, cols, ld in ((ab, K, N, K), (ab, K, M, K), (ct, N, M, N), (dt, N, M, N)):
                lay = ctypes.c_void_p()
                _check(lib.cublasLtMatrixLayoutCreate(ctypes.byref(lay), ty, ctypes.c_uint64(rows),
                                                      ctypes.c_uint64(cols), ctypes.c_int64(ld)),
                       "cublasLtMatrixLayoutCreate")
                layouts.append(lay)
            _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "cublasLtMatmulPreferenceCreate")
            ws = ctypes.c_uint64(self._workspace_bytes)
            _check(lib.cublasLtMatmulPreferenceSetAttribute(pref, _PREF_MAX_WORKSPACE_BYTES, ctypes.byref(ws),
                                                            ctypes.c_size_t(ctypes.sizeof(ws))),
                   "cublasLtMatmulPreferenceSetAttribute")
            res, count = _HeuristicResult(), ctypes.c_int(0)
            _check(lib.cublasLtMatmulAlgoGetHeuristic(self._handle, desc, layouts[0], layouts[1], layouts[2],
                                                      layouts[3], pref, 1, ctypes.byref(res), ctypes.byref(count)),
                   "cublasLtMatmulAlgoGetHeuristic")
            if count.value == 0:
                raise RuntimeError(f"cuBLASLt has no algorithm for {in_t} -> {out_t} at {M}x{N}x{K}")
            alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
            _check(lib.cublasLtMatmul(self._handle, desc, ctypes.byref(alpha), ctypes.c_void_p(_ptr(b)), layouts[0],
                                      ctypes.c_void_p(_ptr(a)), layouts[1], ctypes.byref(beta),
                                      ctypes.c_void_p(_ptr(c)), layouts[2], ctypes.c_void_p(_ptr(c)), layouts[3],
                                      ctypes.byref(res, 0), ctypes.c_void_p(_ptr(self._workspace)),
                                      ctypes.c_size_t(self._workspace_bytes),
                                      ctypes.c_void_p(driver.current_stream() or 0)), "cublasLtMatmul")
        finally:
            if pref.value:
                lib.cublasLtMatmulPreferenceDestroy(pref)
            for lay in layouts:
                lib.cublasLtMatrixLayoutDestroy(lay)
            lib.cublasLtMatmulDescDestroy(desc)

    def get_name(self) -> str:
        return "cuBLAS"
