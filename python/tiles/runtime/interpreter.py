"""TILES_INTERPRET=1: kernels run on the CPU with numpy.

Each program instance of the grid runs the kernel's Python directly; tiles are numpy arrays
and every op takes its meaning from `semantic`, as the compiler does. Pointers are byte
addresses; every load and store is checked against the buffers passed to the kernel and a
stray access raises `OutOfBoundsError` before anything is written.
"""

from __future__ import annotations

import ast
import copy
import ctypes
import math
import operator
import os
import sys
import time
import types
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from .. import core
from .._numpy_types import from_numpy, numpy_dtype
from ..errors import CompilationError, DeviceAssertionError, InterpreterError, LaunchError, OutOfBoundsError
from . import _rounding
from .jit import _is_descriptor, grid_dims

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Buffer:
    def __init__(self, name: str, lo: int, nbytes: int, itemsize: int, owner: Any, view: Any = None):
        self.name, self.lo, self.hi, self.itemsize = name, lo, lo + nbytes, itemsize
        # (start, bytes) of the argument itself where the buffer is its whole allocation.
        self.view = view or (lo, nbytes)
        self.owner = owner  # keeps the memory alive
        raw = (ctypes.c_uint8 * max(nbytes, 1)).from_address(lo) if nbytes else bytearray(1)
        self.bytes = np.frombuffer(raw, dtype=np.uint8, count=nbytes)
        self._typed: dict = {}

    def typed(self, npdt: np.dtype) -> np.ndarray:
        """The buffer as whole elements of `npdt` from its start (a view; element i at byte i·size)."""
        v = self._typed.get(npdt)
        if v is None:
            v = self._typed[npdt] = self.bytes[: len(self.bytes) // npdt.itemsize * npdt.itemsize].view(npdt)
        return v


class Memory:
    """The buffers a launch may touch, sorted by address."""

    def __init__(self):
        self.buffers: List[Buffer] = []

    def add(self, b: Buffer) -> None:
        self.buffers.append(b)
        self.buffers.sort(key=lambda x: x.lo)
        self.starts = np.array([x.lo for x in self.buffers], dtype=np.int64)
        self.ends = np.array([x.hi for x in self.buffers], dtype=np.int64)

    def locate(self, addrs: np.ndarray, eb: int, what: str, where: Callable[[], str]) -> np.ndarray:
        """The buffer index of each address; raises OutOfBoundsError for any outside all buffers
        (`where()` names the access then: finding the user's frame costs more than the check)."""
        if not self.buffers:
            idx = np.full(addrs.shape, -1)
        else:
            idx = np.searchsorted(self.starts, addrs, side="right") - 1
        ok = idx >= 0
        ok[ok] &= addrs[ok] + eb <= self.ends[idx[ok]]
        if not ok.all():
            bad = int(np.flatnonzero(~ok)[0])
            a = int(addrs[bad])
            near = self.buffers[max(int(idx[bad]), 0)] if self.buffers else None
            if near is None:
                detail = f"address {a:#x} (no buffers were passed)"
            else:
                vlo, vbytes = near.view
                off = a - vlo
                detail = (f"byte offset {off} (element {off // near.itemsize}) from the start of '{near.name}', "
                          f"a buffer of {vbytes // near.itemsize} elements ({vbytes} bytes)")
                if (vlo, vbytes) != (near.lo, near.hi - near.lo):
                    detail += f" in an allocation of {near.hi - near.lo} bytes"
            raise OutOfBoundsError(f"out-of-bounds {what} {where()}: {detail}")
        return idx

    def by_buffer(self, idx: np.ndarray):
        """(buffer, lanes) for each buffer `idx` names; lanes is None when it names only one."""
        if idx.size and (idx == idx[0]).all():
            yield self.buffers[int(idx[0])], None
            return
        for bi in np.unique(idx):
            yield self.buffers[int(bi)], idx == bi


def _user_frame() -> Tuple[str, int]:
    f = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not fn.startswith(_PKG_DIR):
            return f.f_code.co_filename, f.f_lineno
        f = f.f_back
    return "<unknown>", 0


def _atomic_update(op: str, cur: Any, v: Any, cmp: Any) -> Any:
    if op == "add":
        return cur + v
    if op == "max":
        return max(cur, v)
    if op == "min":
        return min(cur, v)
    if op in ("fmin", "fmax"):  # NaN loses (16-bit floats, compared in fp32)
        return (np.fmin if op == "fmin" else np.fmax)(np.float32(cur), np.float32(v))
    if op == "and":
        return cur & v
    if op == "or":
        return cur | v
    if op == "xor":
        return cur ^ v
    if op in ("xchg", "store"):
        return v
    if op == "load":
        return cur
    return v if cur == cmp else cur


def hex_(v: int) -> str:
    return hex(v)


def _fp8e4b15_to_f16(bits: np.ndarray) -> np.ndarray:
    """fp8e4b15 bits -> fp16, exactly: fp16's exponent bias, so the bits only move."""
    w = np.asarray(bits).astype(np.uint16)
    return (((w & 0x80) << 8) | ((w & 0x7F) << 7)).astype(np.uint16).view(np.float16)


def _to_fp8e4b15(x: np.ndarray) -> np.ndarray:
    """A number as fp8e4b15 bits, as Triton converts on NVIDIA GPUs: to fp16 rounding toward zero
    (fp16 stays), the magnitude clamped to 1.75 (NaN and infinities too), then rounded to nearest
    with ties away from zero."""
    x = np.asarray(x)
    if x.dtype != np.float16:  # `cvt.rz.f16.f32` of its fp32 value
        x = _rounding.arithmetic("cvt", "rz", [x.astype(np.float32)], np.float16)
    w = x.view(np.uint16).astype(np.uint32)
    mag = np.minimum(w & 0x7FFF, 0x3F00)
    return ((((mag << 1) + 0x80) >> 8) | ((w >> 8) & 0x80)).astype(np.uint8)


def _to_tf32(x: np.ndarray) -> np.ndarray:
    """fp32 rounded to TF32 (10 mantissa bits), to nearest with ties away from zero."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    finite = np.isfinite(x)
    rounded = ((bits.astype(np.uint64) + 0x1000) & 0xFFFFE000).astype(np.uint32)
    return np.where(finite, rounded.view(np.float32), x)


def _arr(x: Any) -> np.ndarray:
    return np.asarray(x)


def _bcast(a: Any, shape: Tuple[int, ...]) -> np.ndarray:
    """`np.broadcast_to` (a read-only view), with its common cases cheaper: the same shape, and
    a scalar splat (a zero-stride view, made without broadcast_to's Python-level checks)."""
    a = np.asarray(a)
    if a.shape == shape:
        return a
    if a.ndim == 0 and shape:
        v = np.ndarray(shape, a.dtype, a, 0, (0,) * len(shape))
        v.flags.writeable = False
        return v
    return np.broadcast_to(a, shape)


def _fma64(a, b, c):
    """a * b + c for fp64 with the product's rounding error kept (Dekker's split and Knuth's
    two-sum): exact wherever the result is representable, as the GPU's fused multiply-add."""
    with np.errstate(all="ignore"):
        p = a * b
        sa, sb = a * 134217729.0, b * 134217729.0  # 2**27 + 1
        ah, bh = sa - (sa - a), sb - (sb - b)
        al, bl = a - ah, b - bh
        e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
        s = p + c
        bv = s - p
        t = (p - (s - bv)) + (c - bv)
        out = s + (t + e)
        return np.asarray(np.where(np.isfinite(out) & np.isfinite(e), out, p + c))


def _np_binary(op: str, x: np.ndarray, y: np.ndarray, dtype) -> np.ndarray:
    """`op` on two same-typed arrays as kernels compute it (numpy's floating-point warnings are
    off for the whole grid: see `run`)."""
    is_float = dtype.is_floating()
    dt = numpy_dtype(dtype)
    if x.dtype == np.bool_ and op in ("add", "sub", "mul", "div", "rem", "shl", "shr"):
        # int1 is a 1-bit integer that wraps (True + True is False), as compiled code computes.
        r = _np_binary(op, x.astype(np.uint8), y.astype(np.uint8), core.uint8)
        return np.asarray((r & 1) != 0)
    if op == "add":
        r = x + y
    elif op == "sub":
        r = x - y
    elif op == "mul":
        r = x * y
    elif op == "div":
        if is_float:
            r = x / y
        else:
            safe = np.where(y == 0, 1, y)
            q = np.floor_divide(x, safe)
            fix = (np.remainder(x, safe) != 0) & ((x < 0) != (y < 0))
            r = np.where(y == 0, 0, q + fix)
    elif op == "rem":
        if is_float:
            r = np.fmod(x.astype(np.float64), y.astype(np.float64))
        else:
            r = np.where(y == 0, 0, np.fmod(x, np.where(y == 0, 1, y)))
    elif op == "and":
        r = x & y
    elif op == "or":
        r = x | y
    elif op == "xor":
        r = x ^ y
    elif op == "shl":
        r = np.left_shift(x, y)
    elif op == "shr":
        r = np.right_shift(x, y)
    elif op == "max":
        r = np.fmax(x, y) if is_float else np.maximum(x, y)
    elif op == "min":
        r = np.fmin(x, y) if is_float else np.minimum(x, y)
    else:
        raise NotImplementedError(op)
    return np.asarray(r).astype(dt, copy=False)


_NATIVE_COMBINES: dict = {}


def _native_combine(combine) -> Optional[str]:
    """The array operation of the combine functions of `tl.sum`, `tl.max`, `tl.min` (reductions)
    and `tl.cumsum`, `tl.cumprod` (scans)."""
    if not _NATIVE_COMBINES:
        from .. import language

        _NATIVE_COMBINES.update({language._sum_combine: "add", language._max_combine: "max",
                                 language._min_combine: "min", language._prod_combine: "mul"})
    return _NATIVE_COMBINES.get(combine)


class NumpyBackend:
    """Language ops on numpy arrays."""

    interpreter = True

    def __init__(self, kernel: str, grid: Tuple[int, int, int], memory: Memory, num_warps: int = 4,
                 sanitize_overflow: bool = False, fp32_default: Optional[str] = None):
        self.kernel, self.grid, self.memory = kernel, grid, memory
        self.sanitize_overflow = sanitize_overflow  # debug mode's integer overflow checks
        self.fp32_default = fp32_default  # fp32 tl.dot's precision where the kernel names none
        self.num_warps = num_warps  # for tl.extra.cuda.num_warps()
        self.pid = (0, 0, 0)

    def where(self) -> str:
        file, line = _user_frame()
        return f"in {self.kernel} at {file}:{line} (program id {self.pid})"

    def constant(self, value, dt, shape):
        if dt.is_fp8e4b15():
            return np.full(tuple(shape), _to_fp8e4b15(np.array(value, np.float64)), dtype=np.uint8)
        return np.full(tuple(shape), value, dtype=numpy_dtype(dt))

    def program_id(self, axis):
        return np.array(self.pid[axis], dtype=np.int32)

    def num_programs(self, axis):
        return np.array(self.grid[axis], dtype=np.int32)

    def arange(self, start, end):
        return np.arange(start, end, dtype=np.int32)

    def splat(self, x, shape):
        return _bcast(x.handle, tuple(shape))

    def expand_dims(self, x, axis):
        return np.expand_dims(_arr(x.handle), axis)

    def gather(self, src, index, axis):
        s, i = _arr(src.handle), _arr(index.handle).astype(np.int64)
        n = s.shape[axis]
        bad = (i < 0) | (i >= n)
        if bad.any():
            first = tuple(int(x) for x in np.argwhere(bad)[0])
            raise IndexError(f"gather: index {int(i[first])} at {first} is outside the source's {n} elements "
                             f"along axis {axis}")
        return np.take_along_axis(s, i, axis)

    def broadcast(self, x, shape):
        return _bcast(x.handle, tuple(shape))

    def rounded(self, op, mode, args, out):
        if mode == "rn" and op in ("add", "sub", "mul"):  # numpy rounds each op to nearest
            return self.binary(op, *args)
        return np.asarray(_rounding.arithmetic(op, mode, [np.asarray(_arr(a.handle)) for a in args],
                                               numpy_dtype(out)))

    def approx(self, kind, x):
        a = np.asarray(_arr(x.handle))
        with np.errstate(all="ignore"):
            if kind == "tanh":
                return np.tanh(a.astype(np.float32))
            # rcp.approx.ftz.f64: subnormal inputs and results flush to a signed zero
            tiny = np.finfo(np.float64).tiny
            r = 1.0 / np.where(np.abs(a) < tiny, np.copysign(0.0, a), a)
            return np.where(np.abs(r) < tiny, np.copysign(0.0, r), r)

    def div_rn(self, a, b):
        return self.binary("div", a, b)  # numpy divides floats as IEEE

    def binary(self, op, a, b):
        return _np_binary(op, _arr(a.handle), _arr(b.handle), a.dtype)

    def compare(self, pred, a, b):
        x, y = _arr(a.handle), _arr(b.handle)
        f = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
             "ne": np.not_equal}[pred]
        return np.asarray(f(x, y))

    def unary(self, op, a):
        x = _arr(a.handle)
        dt = numpy_dtype(a.dtype)
        if op == "neg":
            with np.errstate(all="ignore"):
                return np.asarray(-x if a.dtype.is_floating() else (0 - x)).astype(dt, copy=False)
        if op == "not":
            return np.asarray(~x)
        if op == "abs":
            return np.asarray(np.abs(x)).astype(dt, copy=False)
        # Computed in fp64 and rounded once: numpy's fp32 loops for log, sin, ... are off by up
        # to a few ulp, and the interpreter is the reference that compiled code is checked against.
        xf = x.astype(np.float64)
        with np.errstate(all="ignore"):
            f = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
                 "rsqrt": lambda v: 1 / np.sqrt(v), "sin": np.sin, "cos": np.cos, "floor": np.floor,
                 "ceil": np.ceil, "erf": np.vectorize(math.erf, otypes=[np.float64])}[op]
            r = f(xf)
        return np.asarray(r).astype(dt)

    def fma(self, a, b, c):
        dt = numpy_dtype(a.dtype)
        w = [_arr(t.handle).astype(np.float64) for t in (a, b, c)]
        if dt != np.float64:  # fp32 and narrower: the fp64 product is exact, one more rounding
            return np.asarray(w[0] * w[1] + w[2]).astype(dt)
        return _fma64(*w)

    def dot(self, a, b, acc, precision):
        # The GPU's precision rules: products of fp16/bf16 (exact in fp32) or tf32-rounded fp32
        # inputs, accumulated in fp32; int8 in int32; fp64 and "ieee" fp32 exactly.
        x, y, c = _arr(a.handle), _arr(b.handle), _arr(acc.handle)
        if a.dtype.is_int():
            return (np.matmul(x.astype(np.int64), y.astype(np.int64)) + c.astype(np.int64)).astype(np.int32)
        if a.dtype.is_fp64():
            return np.matmul(x, y) + c
        x, y = x.astype(np.float32), y.astype(np.float32)
        if a.dtype.is_fp32() and precision in ("tf32", "tf32x3"):
            if precision == "tf32":
                x, y = _to_tf32(x), _to_tf32(y)
        out = np.matmul(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
        return (out + c.astype(np.float32)).astype(numpy_dtype(acc.dtype))

    def select(self, c, a, b):
        return np.asarray(np.where(_arr(c.handle), _arr(a.handle), _arr(b.handle))).astype(numpy_dtype(a.dtype))

    def cast(self, x, dt):
        a = _arr(x.handle)
        if dt.is_ptr():
            return a
        if x.dtype.is_fp8e4b15() and x.dtype != dt:
            # Its bits move into an fp16 (exact), which converts on.
            half = _fp8e4b15_to_f16(a)
            return half if dt == core.float16 else self.cast(core.tensor(half, core.float16, x.shape), dt)
        if dt.is_bool():
            return np.asarray(a != 0)
        npdt = numpy_dtype(dt)
        with np.errstate(all="ignore"):
            if dt.is_fp8e4b15() and x.dtype != dt:
                if x.dtype.is_fp8():
                    a = self.cast(x, core.float16)
                return _to_fp8e4b15(a)
            if dt.is_fp8() and x.dtype != dt:
                # As Hopper converts (`cvt.rn.satfinite`): one rounding from the value, and
                # saturation at the largest finite value (E4M3FN 448, E5M2 57344; AMD's
                # E4M3FNUZ 240, E5M2FNUZ 57344); NaN stays.
                src = np.asarray(a.astype(np.float32))  # the GPU converts from fp32
                top = {"fp8e4nv": 448.0, "fp8e4b8": 240.0}.get(dt.name, 57344.0)
                # Values past the largest finite one but rounding to it stay put; the rest clamp.
                src = np.where(np.isnan(src), src, np.clip(src, -top * 2, top * 2))
                r = np.asarray(src.astype(npdt)).astype(np.float32)
                overflowed = (np.isnan(r) & ~np.isnan(src)) | np.isinf(r)  # E4M3FN: NaN; E5M2: inf
                r = np.where(overflowed, np.sign(src) * top, r)
                return np.asarray(r).astype(npdt)
            if x.dtype.is_fp8() and x.dtype != dt:
                a = a.astype(np.float32)
            if x.dtype.is_floating() and dt.is_int():
                return np.asarray(np.trunc(a.astype(np.float64))).astype(npdt)
            if x.dtype.is_bf16() or dt.is_bf16():
                return a.astype(np.float32).astype(npdt) if not x.dtype.is_int() else a.astype(npdt)
            return np.asarray(a).astype(npdt)

    def bitcast(self, x, dt):
        if dt.is_ptr() or x.dtype.is_ptr():
            # Addresses are int64 here, in both forms.
            return _arr(x.handle).astype(np.int64)
        a = _arr(x.handle)
        shape = a.shape  # before ascontiguousarray, which makes a 0-d array 1-d
        return np.ascontiguousarray(a).reshape(-1).view(numpy_dtype(dt)).reshape(shape)

    def addptr(self, p, o):
        eb = numpy_dtype(p.dtype.element_ty).itemsize
        return _arr(p.handle).astype(np.int64) + _arr(o.handle).astype(np.int64) * eb

    def _gather(self, addrs: np.ndarray, npdt: np.dtype, what: str) -> np.ndarray:
        eb = npdt.itemsize
        idx = self.memory.locate(addrs, eb, what, self.where)
        out = np.empty(addrs.shape[0], dtype=npdt)
        for buf, sel in self.memory.by_buffer(idx):
            rel = (addrs if sel is None else addrs[sel]) - buf.lo
            if not (rel % eb).any():  # whole elements: index the buffer's typed view
                vals = buf.typed(npdt)[rel // eb]
            else:
                vals = np.ascontiguousarray(buf.bytes[rel[:, None] + np.arange(eb)]).view(npdt).reshape(-1)
            if sel is None:
                out[:] = vals
            else:
                out[sel] = vals
        return out

    def load(self, ptr, mask, other, volatile, whole_granules=False, cache=0, evict=0):
        addrs = _bcast(_arr(ptr.handle).astype(np.int64), tuple(ptr.shape or ()))
        npdt = numpy_dtype(ptr.dtype.element_ty)
        m = np.ones(addrs.shape, dtype=bool) if mask is None else _bcast(mask.handle, addrs.shape)
        if other is not None:
            out = np.array(_bcast(other.handle, addrs.shape), dtype=npdt)
        else:
            out = np.zeros(addrs.shape, dtype=npdt)
        if m.any():
            flat = addrs.reshape(-1)[m.reshape(-1)]
            vals = self._gather(flat, npdt, "load")
            o = out.reshape(-1)
            o[m.reshape(-1)] = vals
            out = o.reshape(addrs.shape)
        return out

    def store(self, ptr, value, mask, cache=0, evict=0):
        addrs = _bcast(_arr(ptr.handle).astype(np.int64), tuple(ptr.shape or ()))
        npdt = numpy_dtype(ptr.dtype.element_ty)
        vals = _bcast(value.handle, addrs.shape).astype(npdt)
        m = np.ones(addrs.shape, dtype=bool) if mask is None else _bcast(mask.handle, addrs.shape)
        flat_m = m.reshape(-1)
        a = addrs.reshape(-1)[flat_m]
        if not a.size:
            return
        v = np.ascontiguousarray(vals.reshape(-1)[flat_m])
        eb = npdt.itemsize
        idx = self.memory.locate(a, eb, "store", self.where)  # checks every lane before writing any
        for buf, sel in self.memory.by_buffer(idx):
            rel = (a if sel is None else a[sel]) - buf.lo
            vals = v if sel is None else v[sel]
            if not (rel % eb).any():  # whole elements: through the buffer's typed view
                buf.typed(npdt)[rel // eb] = vals
            else:
                buf.bytes[rel[:, None] + np.arange(eb)] = vals.view(np.uint8).reshape(-1, eb)

    def call_function(self, fn, args):
        from .jit import JITFunction

        if isinstance(fn, JITFunction):
            return interpreted_function(fn)(*args)
        return fn(*args)

    def map_function(self, fn, args):
        """`map_elementwise`'s call: `fn` on whole tiles, or, when it branches on their values,
        on one element at a time (as the compiled kernel selects element by element)."""
        from ..core import tensor
        from .jit import JITFunction

        f = interpreted_function(fn) if isinstance(fn, JITFunction) else fn
        try:
            return f(*args)
        except _AmbiguousTruth:
            pass
        shape = tuple(args[0].shape) if args else ()
        flat = [np.asarray(_arr(a.handle)).reshape(-1) for a in args]
        outs: List[List[Any]] = []
        dtypes: List[Any] = []
        for i in range(int(np.prod(shape))):
            r = f(*[tensor(np.asarray(x[i]), a.dtype, ()) for x, a in zip(flat, args)])
            rs = list(r) if isinstance(r, (tuple, list)) else [r]
            if not outs:
                outs = [[] for _ in rs]
                dtypes = [v.dtype if isinstance(v, tensor) else
                          (core.float32 if isinstance(core._unwrap(v), float) else core.int32) for v in rs]
            for o, v in zip(outs, rs):
                o.append(np.asarray(_arr(v.handle)).reshape(()) if isinstance(v, tensor) else core._unwrap(v))
        res = [tensor(np.array(o, dtype=numpy_dtype(dt)).reshape(shape), dt, shape) for o, dt in zip(outs, dtypes)]
        return res[0] if len(res) == 1 else tuple(res)

    def reduce(self, inputs, axis, combine):
        """Pairwise (tree) reduction: log2(n) vectorised calls of the combine function. `tl.sum`,
        `tl.max` and `tl.min` take the same tree with their operation applied to the arrays
        directly (the same arithmetic, without building tensors at every level)."""
        from .. import semantic
        from ..core import tensor

        op = _native_combine(combine)
        if op is not None and len(inputs) == 1 and not inputs[0].dtype.is_fp8():
            a = np.asarray(inputs[0].handle)
            n = a.shape[axis]
            lead = (slice(None),) * axis
            while n > 1:
                h = n // 2
                merged = _np_binary(op, a[lead + (slice(0, h),)], a[lead + (slice(h, 2 * h),)], inputs[0].dtype)
                if n % 2:
                    merged = np.concatenate([merged, a[lead + (slice(n - 1, n),)]], axis=axis)
                a, n = merged, merged.shape[axis]
            return [np.take(a, 0, axis=axis)]
        cur = [np.asarray(t.handle) for t in inputs]
        n = cur[0].shape[axis]
        while n > 1:
            h = n // 2
            left = [tensor(np.take(a, np.arange(h), axis=axis), t.dtype, np.take(a, np.arange(h), axis=axis).shape)
                    for a, t in zip(cur, inputs)]
            right = [tensor(np.take(a, np.arange(h, 2 * h), axis=axis), t.dtype, left[0].shape)
                     for a, t in zip(cur, inputs)]
            res = semantic.combine_results(combine(*left, *right), inputs)
            merged = [np.asarray(np.broadcast_to(np.asarray(r.handle), left[0].shape)).astype(numpy_dtype(t.dtype))
                      for r, t in zip(res, inputs)]
            if n % 2:
                merged = [np.concatenate([m, np.take(a, [n - 1], axis=axis)], axis=axis) for m, a in zip(merged, cur)]
            cur = merged
            n = cur[0].shape[axis]
        return [np.take(a, 0, axis=axis) for a in cur]

    def scan(self, inputs, axis, combine, reverse):
        """Sequential along the axis, vectorised over the other dimensions."""
        from .. import semantic
        from ..core import tensor

        arrs = [np.asarray(t.handle) for t in inputs]
        if reverse:
            arrs = [np.flip(a, axis=axis) for a in arrs]
        op = _native_combine(combine)
        if op in ("add", "mul") and len(inputs) == 1 and not inputs[0].dtype.is_fp8():
            # tl.cumsum / tl.cumprod: numpy's accumulate runs the same sequence of operations
            # in the same type (the loop below, without a tensor per element).
            ufunc = np.add if op == "add" else np.multiply
            out = ufunc.accumulate(arrs[0], axis=axis, dtype=arrs[0].dtype)
            return [np.ascontiguousarray(np.flip(out, axis=axis) if reverse else out)]
        n = arrs[0].shape[axis]
        outs = [np.empty_like(a) for a in arrs]
        acc = None
        for j in range(n):
            cur = [tensor(np.take(a, j, axis=axis), t.dtype, np.take(a, j, axis=axis).shape)
                   for a, t in zip(arrs, inputs)]
            acc = cur if acc is None else semantic.combine_results(combine(*acc, *cur), inputs)
            for o, v in zip(outs, acc):
                idx = [slice(None)] * o.ndim
                idx[axis] = j
                o[tuple(idx)] = np.broadcast_to(np.asarray(v.handle), o[tuple(idx)].shape)
        if reverse:
            outs = [np.flip(o, axis=axis) for o in outs]
        return [np.ascontiguousarray(o) for o in outs]

    def hint(self, x, kind, values):
        return x.handle

    def permute(self, x, dims):
        return np.ascontiguousarray(np.transpose(_arr(x.handle), dims))

    def reshape(self, x, shape):
        return np.ascontiguousarray(_arr(x.handle)).reshape(shape)

    def join(self, a, b):
        return np.stack([_arr(a.handle), _arr(b.handle)], axis=-1)

    def split(self, x):
        a = _arr(x.handle)
        return np.ascontiguousarray(a[..., 0]), np.ascontiguousarray(a[..., 1])

    def atomic(self, op, ptr, val, cmp, mask, sem, scope):
        addrs = _bcast(_arr(ptr.handle).astype(np.int64), tuple(ptr.shape or ())).reshape(-1)
        npdt = numpy_dtype(ptr.dtype.element_ty)
        vals = None if val is None else np.broadcast_to(_arr(val.handle), ptr.shape or ()).astype(npdt).reshape(-1)
        cmps = None if cmp is None else np.broadcast_to(_arr(cmp.handle), ptr.shape or ()).astype(npdt).reshape(-1)
        m = np.ones(addrs.shape, bool)
        if mask is not None:
            m = np.broadcast_to(_arr(mask.handle), ptr.shape or ()).reshape(-1)
        old = np.zeros(addrs.shape, npdt)
        eb = npdt.itemsize
        active = np.flatnonzero(m)
        if active.size:
            idx = self.memory.locate(addrs[active], eb, f"atomic_{op}", self.where)
            with np.errstate(all="ignore"):
                for j, bi in zip(active, idx):
                    buf = self.memory.buffers[int(bi)]
                    off = int(addrs[j]) - buf.lo
                    cell = buf.bytes[off:off + eb]
                    cur = cell.copy().view(npdt)[0]
                    new = _atomic_update(op, cur, None if vals is None else vals[j], None if cmps is None else cmps[j])
                    cell[:] = np.array([new], dtype=npdt).view(np.uint8)
                    old[j] = cur
        return old.reshape(ptr.shape or ())

    def atomic_access(self, kind, ptr, val, mask, sem, scope, timeout=None):
        """Atomic load, store and poll. Programs run one at a time here, so a poll that does not
        see its value at once never would: without a timeout that is an error, not a hang."""
        if kind == "store":
            self.atomic("store", ptr, val, None, mask, sem, scope)
            return None
        old = self.atomic("load", ptr, None, None, mask, sem, scope)
        if kind == "load":
            return old
        hit = np.asarray(old == np.broadcast_to(_arr(val.handle), ptr.shape or ()).astype(old.dtype))
        if timeout is None and not hit.all():
            raise InterpreterError(f"atomic_poll {self.where()} would wait forever: the interpreter runs programs "
                                   "one at a time, so no other program can store the expected value meanwhile "
                                   "(give a timeout_ns to poll once)")
        return hit

    def half_minmax(self, op, ptr, val, mask):
        """fp16/bf16 atomic min/max (a descriptor's TMA reduction): NaN operands lose."""
        self.atomic("f" + op, ptr, val, None, mask, None, None)

    def barrier(self):
        pass

    def special(self, ptx, dtype):
        """Grid dependency control is moot here (programs run one by one); the timer is the
        host's and every program runs on "multiprocessor" 0."""
        if dtype is None:
            return None
        v = time.time_ns() if "globaltimer" in ptx else 0
        return np.array(v, dtype=numpy_dtype(dtype))

    def inline_asm(self, asm, constraints, args, dtypes, pack, pure):
        """Straight-line PTX on the `$n` operands, emulated with numpy (`_ptx_emulate`)."""
        from . import _ptx_emulate

        try:
            return _ptx_emulate.run(asm, constraints, [_arr(t.handle) for t in args], dtypes, pack)
        except NotImplementedError as e:
            raise NotImplementedError(f"inline_asm_elementwise: the interpreter runs straight-line PTX on $n "
                                      f"operands (arithmetic, approximate math, mov, cvt, packed halves, local "
                                      f"registers and predicates), not {e} ({self.where()})") from None

    def device_print(self, prefix, tensors, hex):
        pid = ", ".join(str(p) for p in self.pid)
        many = len(tensors) > 1
        for k, t in enumerate(tensors):
            a = _arr(t.handle)
            if t.dtype.is_fp8e4b15():
                a = _fp8e4b15_to_f16(a).astype(np.float32)  # its value, not its byte
            suffix = f" (operand {k})" if many else ""
            fmt = (lambda v: hex_(int(v))) if hex and t.dtype.is_int() else (lambda v: str(v))
            if a.ndim == 0:
                print(f"pid ({pid}) {prefix}{fmt(a.item())}{suffix}")
                continue
            for idx in np.ndindex(a.shape):
                print(f"pid ({pid}) idx ({', '.join(map(str, idx))}) {prefix}{fmt(a[idx].item())}{suffix}")

    def device_assert(self, cond, msg):
        c = _arr(cond.handle)
        if not c.all():
            bad = np.argwhere(~np.broadcast_to(c, c.shape)) if c.ndim else None
            at = f", first failing index {tuple(int(i) for i in bad[0])}" if bad is not None and len(bad) else ""
            raise DeviceAssertionError(f"device-side assert triggered: device_assert failed {self.where()}{at}: {msg}")

    def to_python_bool(self, t):
        h = _arr(t.handle)
        if h.size != 1:
            raise _AmbiguousTruth(f"the truth value of a tile of shape {list(h.shape)} is ambiguous")
        return bool(h.reshape(()))

    def to_python_int(self, t):
        return int(_arr(t.handle).reshape(()))

    def to_python_value(self, t):
        return _arr(t.handle).reshape(()).item()


def _interp_assert(cond: Any, msg: str = "") -> None:
    from ..core import tensor

    if isinstance(cond, tensor):
        from .. import semantic

        semantic.device_assert(cond, msg)
    elif not cond:
        raise AssertionError(msg)


def _interp_range(*args: Any, **hints: Any) -> range:
    """Python's `range` given `tl.range`'s loop hints, which it ignores (as compiled kernels do)."""
    from ..frontend import _RANGE_KEYWORDS, RANGE_STEP_IGNORED

    unknown = sorted(set(hints) - _RANGE_KEYWORDS)
    if unknown:
        raise TypeError(f"range got an unexpected keyword argument '{unknown[0]}'")
    if "step" in hints:  # ignored, as compiled kernels do
        import warnings

        warnings.warn(RANGE_STEP_IGNORED, stacklevel=2)
    return range(*args)


def _interp_print(*args: Any, **kwargs: Any) -> None:
    from ..core import tensor

    if not any(isinstance(a, tensor) for a in args):
        print(*args, **kwargs)
        return
    from .. import semantic

    prefix = " ".join(str(a) for a in args if not isinstance(a, tensor))
    semantic.device_print(prefix + (" " if prefix else ""), [a for a in args if isinstance(a, tensor)])


def _interp_and(first: Any, *rest: Any) -> Any:
    from .. import semantic
    from ..core import tensor

    acc = first
    for f in rest:
        if not isinstance(acc, tensor):
            if not acc:
                return acc
            acc = f()
        else:
            acc = semantic.logical_and(acc, f())
    return acc


def _interp_or(first: Any, *rest: Any) -> Any:
    from .. import semantic
    from ..core import tensor

    acc = first
    for f in rest:
        if not isinstance(acc, tensor):
            if acc:
                return acc
            acc = f()
        else:
            acc = semantic.logical_or(acc, f())
    return acc


def _interp_to(x: Any, *args: Any, **kwargs: Any) -> Any:
    from .. import semantic

    if isinstance(x, (bool, int, float)):
        x = semantic.to_tensor(x)
    return x.to(*args, **kwargs)


def _interp_assigned(x: Any) -> Any:
    from .. import semantic

    return semantic.assigned(x)


def _interp_not(x: Any) -> Any:
    from .. import semantic
    from ..core import tensor

    return semantic.not_(x) if isinstance(x, tensor) and x.shape else (not x)


def _eq(a: Any, b: Any) -> Any:
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        from ..core import sequences_equal

        return sequences_equal(a, b)  # `x.shape == [128]`, as compiled kernels compare them
    return a == b


def _ne(a: Any, b: Any) -> Any:
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return not _eq(a, b)
    return a != b


_CMP_OPS = {"Lt": operator.lt, "LtE": operator.le, "Gt": operator.gt, "GtE": operator.ge, "Eq": _eq,
            "NotEq": _ne, "Is": operator.is_, "IsNot": operator.is_not,
            "In": lambda a, b: a in b, "NotIn": lambda a, b: a not in b}


def _interp_compare(left: Any, ops: Sequence[str], *comparators: Callable[[], Any]) -> Any:
    """`a < b < c` as the compiler reads it: each comparison once, and-ed elementwise on tiles."""
    from .. import semantic
    from ..core import tensor

    acc = None
    for op, thunk in zip(ops, comparators):
        right = thunk()
        r = _CMP_OPS[op](left, right)
        if acc is None:
            acc = r
        elif isinstance(acc, tensor) or isinstance(r, tensor):
            acc = semantic.logical_and(acc, r)
        else:
            acc = acc and r
        if not isinstance(acc, tensor) and not acc:
            return acc
        left = right
    return acc


def _locals_call() -> ast.expr:
    return ast.Call(func=ast.Name("locals", ast.Load()), args=[], keywords=[])


class _Rewrite(ast.NodeTransformer):
    """`assert c, m` -> `__tiles_assert__(c, m)`; `print(...)` -> `__tiles_print__(...)`;
    `and`/`or`/`not` on tiles -> elementwise logic (short-circuit kept for plain values);
    chained comparisons (`0 <= i < n`) -> each comparison and-ed, as compiled kernels do, and
    `==` / `!=` through the same helper (a shape equals a list); `n = 1` (and `n += 1`, and
    non-constexpr annotated assignments) -> `n = __tiles_assigned__(1)`: a scalar tensor, as
    compiled kernels hold it."""

    def __init__(self):
        # per loop: where it is (for messages) and the names its body assigns
        self.loops: List[Tuple[Any, List[str]]] = []

    @staticmethod
    def _assigned(value: ast.expr) -> ast.expr:
        return ast.copy_location(ast.Call(func=ast.Name("__tiles_assigned__", ast.Load()), args=[value],
                                          keywords=[]), value)

    # `n = 1`: a name holding a number holds a scalar tensor, as compiled kernels do (Triton's rule).
    def visit_Assign(self, node: ast.Assign):
        self.generic_visit(node)
        node.value = self._assigned(node.value)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign):
        self.generic_visit(node)
        if node.value is not None and not ast.unparse(node.annotation).endswith("constexpr"):
            node.value = self._assigned(node.value)
        return node

    def visit_AugAssign(self, node: ast.AugAssign):
        self.generic_visit(node)
        if not isinstance(node.target, ast.Name):
            return node
        value = ast.copy_location(ast.BinOp(left=ast.Name(node.target.id, ast.Load()), op=node.op,
                                            right=node.value), node)
        return ast.copy_location(ast.Assign(targets=[node.target], value=self._assigned(value)), node)

    def visit_Compare(self, node: ast.Compare):
        self.generic_visit(node)
        if len(node.ops) == 1 and not isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            return node
        ops = ast.Tuple([ast.Constant(type(o).__name__) for o in node.ops], ast.Load())
        thunks = [ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
                             body=c) for c in node.comparators]
        return ast.copy_location(ast.Call(func=ast.Name("__tiles_compare__", ast.Load()),
                                          args=[node.left, ops] + thunks, keywords=[]), node)

    def visit_BoolOp(self, node: ast.BoolOp):
        self.generic_visit(node)
        name = "__tiles_and__" if isinstance(node.op, ast.And) else "__tiles_or__"
        rest = [ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
                           body=v) for v in node.values[1:]]
        return ast.copy_location(ast.Call(func=ast.Name(name, ast.Load()), args=[node.values[0]] + rest,
                                          keywords=[]), node)

    def visit_UnaryOp(self, node: ast.UnaryOp):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(ast.Call(func=ast.Name("__tiles_not__", ast.Load()), args=[node.operand],
                                              keywords=[]), node)
        return node

    # Loops: the state a loop carries keeps its type, as compiled kernels require. Before the
    # loop `__tiles_loopK__ = __tiles_loop_in__(K, locals())` notes the types of the names the
    # body assigns; the body's last statement `__tiles_loop_step__(__tiles_loopK__, locals())`
    # compares them after each pass (`break` and `continue` are refused, so every pass ends there).
    def _checked_loop(self, node):
        from ..frontend import _assigned_names

        names = _assigned_names(node.body, None, False)  # before the rewrite adds names of its own
        self.generic_visit(node)
        k = len(self.loops)
        self.loops.append((types.SimpleNamespace(lineno=node.lineno, col_offset=node.col_offset), names))
        state = f"__tiles_loop{k}__"
        enter = ast.Assign(targets=[ast.Name(state, ast.Store())],
                           value=ast.Call(func=ast.Name("__tiles_loop_in__", ast.Load()),
                                          args=[ast.Constant(k), _locals_call()], keywords=[]))
        step = ast.Expr(ast.Call(func=ast.Name("__tiles_loop_step__", ast.Load()),
                                 args=[ast.Name(state, ast.Load()), _locals_call()], keywords=[]))
        node.body = list(node.body) + [ast.copy_location(step, node)]
        return [ast.copy_location(enter, node), node]

    visit_For = _checked_loop
    visit_While = _checked_loop

    def visit_Assert(self, node: ast.Assert):
        args = [node.test] + ([node.msg] if node.msg is not None else [ast.Constant(ast.unparse(node.test))])
        call = ast.Call(func=ast.Name("__tiles_assert__", ast.Load()), args=args, keywords=[])
        return ast.copy_location(ast.Expr(call), node)

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "print":
            node.func = ast.copy_location(ast.Name("__tiles_print__", ast.Load()), node.func)
        elif isinstance(node.func, ast.Name) and node.func.id == "range" and node.keywords:
            # `range(n, flatten=True)`: loop hints, which compiled kernels ignore on Python's range.
            node.func = ast.copy_location(ast.Name("__tiles_range__", ast.Load()), node.func)
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "to":
            # `i.to(...)` where compiled code has a tensor (a literal that became loop state) and
            # the interpreter still a Python number.
            return ast.copy_location(ast.Call(func=ast.Name("__tiles_to__", ast.Load()),
                                              args=[node.func.value] + node.args, keywords=node.keywords), node)
        return node


class _AmbiguousTruth(ValueError):
    """A tile of several elements used as a Python condition (`map_function` then runs the
    function element by element)."""


# What the compiler refuses wherever it appears in a kernel (a `lambda` combine function, an
# import): the interpreter refuses it too rather than run what will not compile.
_NEVER_COMPILED = (ast.Lambda, ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Break, ast.Continue)


def _refusal(n: ast.AST) -> str:
    """The compiler's message for a construct it refuses."""
    if isinstance(n, (ast.Break, ast.Continue)):
        return f"{type(n).__name__.lower()} is not supported in kernels"
    return f"unsupported Python construct in a kernel: {type(n).__name__}"


def _loop_checks(src, loops: List[Tuple[Any, List[str]]]):
    """`__tiles_loop_in__` and `__tiles_loop_step__` for one kernel (see `_Rewrite._checked_loop`).
    A name holding a tensor before the loop must hold one of the same dtype and shape after every
    pass, as the compiler demands; one holding an assigned number (`acc = 0`) takes the type its
    first pass gives it, as the compiler's does, and keeps that one."""
    from ..core import constant_tensor, tensor

    def kind(v: tensor) -> Tuple[Any, List[int]]:
        return v.dtype, [int(d) for d in v.shape]

    def loop_in(k: int, scope: dict) -> list:
        where, names = loops[k]
        kinds = {}
        for n in names:
            v = scope.get(n)
            if isinstance(v, tensor):
                kinds[n] = None if type(v) is constant_tensor else kind(v)
        return [where, kinds]

    def loop_step(state: list, scope: dict) -> None:
        where, kinds = state
        for n, was in kinds.items():
            v = scope.get(n)
            if not isinstance(v, tensor):
                continue  # a number or constexpr: compiled code casts it to the carried type
            if was is None:
                if type(v) is not constant_tensor:
                    kinds[n] = kind(v)
                continue
            now = kind(v)
            if now != was:
                raise src.error(where, f"loop-carried `{n}` changes from {was[0]}{was[1]} to {now[0]}{now[1]} "
                                       "in the loop body")

    return loop_in, loop_step


def interpreted_function(jitfn):
    """The kernel's function as the interpreter runs it (rewritten once, same file and lines)."""
    fn = getattr(jitfn, "_interp_fn", None)
    if fn is not None:
        return fn
    try:
        src = jitfn.source()
    except Exception:  # no source to read (made with exec): run the function as it is
        jitfn._interp_fn = jitfn.fn
        return jitfn.fn
    from ..frontend import _RETURN, _assigned_names

    for n in ast.walk(ast.Module(body=src.node.body, type_ignores=[])):
        if isinstance(n, _NEVER_COMPILED):
            # Python would run it here; the compiler refuses it, so the debugger does too.
            raise src.error(n, _refusal(n))
        if isinstance(n, (ast.For, ast.While)) and _RETURN in _assigned_names(n.body, n, src.plain):
            raise src.error(n, "return inside a loop is not supported")
    try:
        node = copy.deepcopy(src.node)
        node.decorator_list = []
        rewrite = _Rewrite()
        tree = ast.fix_missing_locations(rewrite.visit(ast.Module(body=[node], type_ignores=[])))
        loop_in, loop_step = _loop_checks(src, rewrite.loops)
        ast.increment_lineno(tree, src.first_line - 1)
        code = compile(tree, src.file, "exec")
        ns = src.globals()
        ns.update(__tiles_assert__=_interp_assert, __tiles_print__=_interp_print, __tiles_and__=_interp_and,
                  __tiles_or__=_interp_or, __tiles_not__=_interp_not, __tiles_compare__=_interp_compare,
                  __tiles_to__=_interp_to, __tiles_assigned__=_interp_assigned,
                  __tiles_loop_in__=loop_in, __tiles_loop_step__=loop_step,
                  __tiles_range__=ns.get("range", _interp_range))
        exec(code, ns)
        fn = ns[node.name]
    except Exception:
        fn = jitfn.fn
    jitfn._interp_fn = fn
    return fn


def _host_array(v: Any, name: str):
    """A numpy view of a host array argument (numpy, torch CPU, array interface), or None."""
    if isinstance(v, np.ndarray):
        return v
    if isinstance(v, np.generic):  # numpy scalars are scalars, not buffers
        return None
    from .jit import TensorWrapper

    if isinstance(v, TensorWrapper):
        from .._numpy_types import numpy_dtype

        base = _host_array(v.base, name)
        return None if base is None else base.view(numpy_dtype(v.dtype))
    if hasattr(v, "data_ptr") and hasattr(v, "is_cuda"):  # torch
        if v.is_cuda:
            raise LaunchError(f"argument '{name}' is a CUDA tensor")
        import torch

        t = v.detach()
        if t.dtype == torch.bfloat16:
            import ml_dtypes

            return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        if str(t.dtype) in ("torch.float8_e5m2", "torch.float8_e4m3fn", "torch.float8_e4m3fnuz",
                            "torch.float8_e5m2fnuz"):
            import ml_dtypes

            return t.view(torch.uint8).numpy().view(getattr(ml_dtypes, str(t.dtype)[6:]))
        return t.numpy()
    if hasattr(v, "__cuda_array_interface__"):
        raise LaunchError(f"argument '{name}' lives in GPU memory; the interpreter needs host arrays")
    if hasattr(v, "__array_interface__"):
        return np.asarray(v)
    if hasattr(v, "data_ptr") and hasattr(v, "dtype"):
        arr = _strided_host_view(v)
        if arr is None:
            raise LaunchError(f"argument '{name}' ({type(v).__name__}) has a data_ptr() but no array the interpreter "
                              "can read: pass a numpy array, a torch tensor, an object with __array_interface__, "
                              "or one with a host data_ptr(), shape and stride() (FlagGems' StridedBuffer)")
        return arr
    return None


def _strided_host_view(v: Any):
    """A numpy view of an object that describes host memory as torch does, without being a
    tensor: `data_ptr()`, `dtype`, `shape` and `stride()` in elements, and a CPU `device` if it
    has one (FlagGems' StridedBuffer, a strided view of a tensor, negative strides included).
    None where it lacks any of them."""
    from .._numpy_types import numpy_dtype
    from .jit import _dtype_ir

    shape, stride = getattr(v, "shape", None), getattr(v, "stride", None)
    device = getattr(v, "device", None)
    if shape is None or not callable(stride) or getattr(device, "type", "cpu") != "cpu":
        return None
    ir = _dtype_ir(v.dtype)
    if ir is None:
        return None
    npdt = np.dtype(numpy_dtype(core.dtype_from_ir(ir)))
    shape = tuple(int(n) for n in shape)
    strides = tuple(int(s) * npdt.itemsize for s in stride())
    if len(strides) != len(shape):
        return None

    # Read as unsigned ints of the element's width, then viewed as the dtype: numpy's array
    # interface has no typestr for bfloat16 or the fp8 types.
    interface = {"data": (int(v.data_ptr()), False), "shape": shape, "strides": strides,
                 "typestr": f"|u{npdt.itemsize}", "version": 3}
    return np.asarray(types.SimpleNamespace(__array_interface__=interface)).view(npdt)


def _element_dtype(v: Any, arr: np.ndarray, name: str):
    """The tiles dtype a host array argument holds: a TensorWrapper's own (fp8e4b15 has no numpy
    type: its bytes are uint8), else the numpy array's."""
    from .jit import TensorWrapper

    if isinstance(v, TensorWrapper) and isinstance(v.dtype, core.dtype):
        return v.dtype
    try:
        return from_numpy(arr.dtype)
    except TypeError as e:
        raise LaunchError(f"argument '{name}': {e}") from None


def _allocation(arr: np.ndarray):
    """(start, bytes) of the allocation `arr` views, where it is known: a torch tensor's storage or
    the numpy array that owns the memory. A kernel may reach past its argument's view into the
    rest of it, as on the GPU (a cache passed as a slice, a zero-width slice of a tensor)."""
    root = arr
    while isinstance(root.base, np.ndarray):
        root = root.base
    owner = root.base
    if owner is not None and hasattr(owner, "untyped_storage"):  # torch's numpy() views the tensor
        st = owner.untyped_storage()
        return int(st.data_ptr()), int(st.nbytes())
    if owner is None and root.flags.c_contiguous:
        return int(root.ctypes.data), int(root.nbytes)
    return None


def _register(mem: Memory, arr: np.ndarray, name: str) -> int:
    base = arr.ctypes.data
    whole = _allocation(arr)
    if whole is not None and whole[0] <= base <= whole[0] + whole[1]:
        mem.add(Buffer(name, whole[0], whole[1], arr.itemsize, arr, view=(base, arr.nbytes)))
        return base
    if arr.size == 0:
        mem.add(Buffer(name, base, 0, arr.itemsize, arr))
        return base
    lo = hi = 0
    for n, s in zip(arr.shape, arr.strides):
        ext = (n - 1) * s
        if ext < 0:
            lo += ext
        else:
            hi += ext
    mem.add(Buffer(name, base + lo, hi - lo + arr.itemsize, arr.itemsize, arr))
    return base


def _descriptor_arg(mem, copies, where: str, v: Any):
    """A host TensorDescriptor argument as the kernel body sees it (its base registered)."""
    from ..core import pointer_type, tensor
    from ..language import tensor_descriptor

    base = v.base
    if getattr(base, "is_cuda", False):
        host = base.detach().cpu()
        copies.append((base, host))
        base = host
    arr = _host_array(base, where)
    if arr is None:
        raise LaunchError(f"argument '{where}': the descriptor's base must be an array")
    addr = _register(mem, arr, where)
    dt = from_numpy(arr.dtype)
    tf32 = bool(getattr(v, "round_f32_to_tf32", False))
    if tf32 and dt.name != "fp32":
        raise LaunchError(f"argument '{where}': round_f32_to_tf32 needs an fp32 tensor, got {dt.name}")
    ptr = tensor(np.array(addr, dtype=np.int64), pointer_type(dt), ())
    return tensor_descriptor(ptr, list(v.shape), list(v.strides), list(v.block_shape), v.padding, round_tf32=tf32)


def _tuple_arg(mem, copies, name: str, v: tuple, path: Tuple[int, ...]):
    """A (nested, possibly named) tuple argument as the kernel body sees it: arrays become
    pointers, numbers scalars, constant elements (None, constexpr, functions) stay constants."""
    from ..core import pointer_type, tensor
    from .jit import _is_namedtuple, _scalar_type, tuple_constant, tuple_constant_in_kernel

    elems = []
    for j, e in enumerate(v):
        at = path + (j,)
        where = name + "".join(f"[{i}]" for i in at)
        if isinstance(e, tuple):
            elems.append(_tuple_arg(mem, copies, name, e, at))
            continue
        const, cv = tuple_constant(e)
        if const:
            elems.append(tuple_constant_in_kernel(cv))
            continue
        if _is_descriptor(e):
            elems.append(_descriptor_arg(mem, copies, where, e))
            continue
        if getattr(e, "is_cuda", False) and hasattr(e, "cpu"):
            host = e.detach().cpu()
            copies.append((e, host))
            e = host
        ea = _host_array(e, where)
        if ea is not None:
            addr = _register(mem, ea, where)
            elems.append(tensor(np.array(addr, dtype=np.int64), pointer_type(_element_dtype(e, ea, where)), ()))
        else:
            if isinstance(e, np.generic):
                e = e.item()
            edt = core.dtype_from_ir(_scalar_type(e, where))
            elems.append(tensor(np.array(e, dtype=numpy_dtype(edt)), edt, ()))
    return type(v)(*elems) if _is_namedtuple(v) else tuple(elems)


def run(jitfn, vals: Sequence[Any], grid, num_warps: int = 4, sanitize_overflow: bool = False,
        fp32_default: Optional[str] = None) -> None:
    """Runs every program of the grid, in order, on the CPU (device asserts always checked;
    integer overflow with `sanitize_overflow`, which debug mode sets)."""
    from ..core import constexpr, pointer_type, tensor, use_backend
    from .jit import _annotated_scalar_type

    mem = Memory()
    args: List[Any] = []
    # GPU tensors (as Triton's interpreter does): copied to the host, run, copied back.
    copies: List[Tuple[Any, Any]] = []
    vals = list(vals)
    for i, (p, v) in enumerate(zip(jitfn.params, vals)):
        if not p.is_constexpr and getattr(v, "is_cuda", False) and hasattr(v, "cpu"):
            host = v.detach().cpu()
            copies.append((v, host))
            vals[i] = host
    for p, v in zip(jitfn.params, vals):
        if p.is_constexpr:
            args.append(v.value if isinstance(v, constexpr) else v)
            continue
        if _is_descriptor(v):
            args.append(_descriptor_arg(mem, copies, p.name, v))
            continue
        if isinstance(v, tuple):
            args.append(_tuple_arg(mem, copies, p.name, v, ()))
            continue
        arr = _host_array(v, p.name) if v is not None else None
        if arr is not None:
            addr = _register(mem, arr, p.name)
            ptr_ty = pointer_type(_element_dtype(v, arr, p.name), const=getattr(p, "is_const", False))
            args.append(tensor(np.array(addr, dtype=np.int64), ptr_ty, ()))
        elif v is None:
            args.append(None)
        else:
            if isinstance(v, np.generic):
                v = v.item()
            ty = _annotated_scalar_type(p, v)
            dt = core.dtype_from_ir(ty)
            args.append(tensor(np.array(v, dtype=numpy_dtype(dt)), dt, ()))
    g = grid_dims(grid(dict(zip(jitfn.param_names, vals))) if callable(grid) else grid)
    be = NumpyBackend(jitfn.__name__, g, mem, num_warps, sanitize_overflow, fp32_default)
    kernel = interpreted_function(jitfn)
    # Kernels compute as the GPU does, without floating-point exceptions: numpy's warnings stay
    # off for the whole grid (one errstate here, not one per operation).
    with use_backend(be), np.errstate(all="ignore"):
        for z in range(g[2]):
            for y in range(g[1]):
                for x in range(g[0]):
                    be.pid = (x, y, z)
                    try:
                        kernel(*args)
                    except (OutOfBoundsError, AssertionError, LaunchError, InterpreterError, CompilationError):
                        raise  # CompilationError: what the compiler refuses (a loop changing a type)
                    except Exception as e:
                        file, line = _frame_of(e)
                        raise InterpreterError(f"in {jitfn.__name__} at {file}:{line} (program id {be.pid}): "
                                               f"{type(e).__name__}: {e}") from e
    for dev, host in copies:
        dev.copy_(host)


class InterpretedKernel:
    """What a launch returns in the interpreter, as a compiled launch returns its CompiledKernel:
    `k[grid](*args)` runs the kernel again with this launch's constexprs. It takes every
    parameter, or only those not declared `tl.constexpr` (FlagGems' LibEntry launches the kernel
    it cached so). The constexprs stay this launch's, whatever is passed in their places; the
    runtime arguments are not kept."""

    def __init__(self, jitfn, vals: Sequence[Any], num_warps: int, sanitize_overflow: bool,
                 fp32_default: Optional[str]):
        self.fn = jitfn
        self.vals = [v if p.is_constexpr else None for p, v in zip(jitfn.params, vals)]
        self._runtime = [i for i, p in enumerate(jitfn.params) if not p.is_constexpr]
        self._kept = [i for i in self._runtime if vals[i] is not None]  # a None argument compiles as a constant
        self._options = (num_warps, sanitize_overflow, fp32_default)
        self.name = self.function_name = jitfn.__name__

    def _values(self, args: Sequence[Any]) -> List[Any]:
        params, runtime = self.fn.params, self._runtime
        if len(args) == len(params):
            places, args = runtime, [args[i] for i in runtime]
        elif len(args) in (len(runtime), len(self._kept)):
            places = runtime if len(args) == len(runtime) else self._kept
        else:
            names = [p.name for p in params]
            alt = f" or its {len(runtime)} runtime ones" if len(runtime) != len(params) else ""
            raise LaunchError(f"{self.name} takes {len(params)} arguments ({', '.join(names)}){alt}, got {len(args)}")
        vals = list(self.vals)
        for i, a in zip(places, args):
            vals[i] = a
        return vals

    def run(self, *args: Any, grid, **_: Any) -> None:
        run(self.fn, self._values(args), grid, *self._options)

    def __getitem__(self, grid):
        return lambda *args, **_: self.run(*args, grid=grid)


def _frame_of(e: BaseException) -> Tuple[str, int]:
    tb = e.__traceback__
    best = ("<unknown>", 0)
    while tb is not None:
        fn = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if not fn.startswith(_PKG_DIR):
            best = (tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    return best
