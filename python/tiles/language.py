"""The tiles language: Triton's `triton.language`, op for op.

`import tiles.language as tl` gives the names Triton kernels use. Each builtin here is a
short function with Triton's name and signature; its meaning lives in `semantic`, shared by
the compiler and the interpreter.
"""

from __future__ import annotations

import builtins as _builtins
import math as _pymath
from types import SimpleNamespace

from . import core, semantic  # noqa: F401  (`tl.core`, as Triton's module)
from .core import (  # noqa: F401  (re-exported names)
    bfloat16,
    block_type,
    constexpr,
    constexpr_type,
    dtype,
    float16,
    float32,
    float64,
    int1,
    int8,
    int16,
    int32,
    int64,
    pointer_type,
    tensor,
    tensor_descriptor_type,
    tuple_type,
    uint8,
    uint16,
    uint32,
    uint64,
)

_builtin_range = _builtins.range
bool_ = int1
float8e5 = dtype("fp8e5")
float8e4nv = dtype("fp8e4nv")
# Named as in Triton for other GPUs and emulation; a kernel using one gets a clear error.
float8e4b15 = dtype("fp8e4b15")
float8e4b8 = dtype("fp8e4b8")
float8e5b16 = dtype("fp8e5b16")


class slice:
    """`start:stop:step`, as Triton's language module names it."""

    def __init__(self, start, stop, step):
        self.start, self.stop, self.step = start, stop, step


def builtin(fn):
    """Marks a language function: the compiler calls it with evaluated arguments."""
    fn._tiles_builtin = True
    return fn


def _method(fn):
    fn._tiles_method = True
    return builtin(fn)


_v = core._unwrap


class PropagateNan:
    NONE = 0
    ALL = 0xFFFF


# -- program geometry ----------------------------------------------------------------------------

@builtin
def program_id(axis, _semantic=None):
    """The index of this program along grid axis `axis` (0, 1 or 2)."""
    return semantic.program_id(axis)


@builtin
def num_programs(axis, _semantic=None):
    """The number of programs along grid axis `axis`."""
    return semantic.num_programs(axis)


# -- creation ------------------------------------------------------------------------------------

@builtin
def arange(start, end, _semantic=None):
    """`[start, end)` as an int32 tile; `end - start` must be a power of two."""
    return semantic.arange(start, end)


@builtin
def full(shape, value, dtype, _semantic=None):
    """A tile of `shape` filled with `value`."""
    return semantic.full(shape, value, dtype)


@builtin
def zeros(shape, dtype, _semantic=None):
    """A tile of `shape` filled with zeros."""
    return semantic.full(shape, 0, dtype)


@_method
def zeros_like(input, _semantic=None):
    """Zeros of `input`'s shape and dtype."""
    return semantic.full(input.shape, 0, input.dtype)


# -- memory --------------------------------------------------------------------------------------

@builtin
def load(pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False, _semantic=None):
    """Loads through a pointer, a tile of pointers or a block pointer; masked-off lanes (and
    out-of-bounds ones of a block pointer's checked dimensions) take `other` / the padding."""
    hints = {"cache_modifier": _v(cache_modifier), "eviction_policy": _v(eviction_policy)}
    if isinstance(pointer, block_ptr):
        ptr, m = pointer._pointers(_v(boundary_check))
        pad = _v(padding_option)
        other = float("nan") if pad == "nan" else (0 if m is not None else None)
        return semantic.load(ptr, m, other, _v(volatile), **hints)
    if _v(boundary_check):
        raise ValueError("boundary_check applies to block pointers (tl.make_block_ptr)")
    return semantic.load(pointer, _v(mask), _v(other), volatile, **hints)


@_method
def store(pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy="",
          _semantic=None):
    """Stores `value` through a pointer, a tile of pointers or a block pointer where `mask`
    holds (a block pointer: inside its checked dimensions)."""
    hints = {"cache_modifier": _v(cache_modifier), "eviction_policy": _v(eviction_policy)}
    if isinstance(pointer, block_ptr):
        ptr, m = pointer._pointers(_v(boundary_check))
        return semantic.store(ptr, value, m, **hints)
    if _v(boundary_check):
        raise ValueError("boundary_check applies to block pointers (tl.make_block_ptr)")
    return semantic.store(pointer, value, _v(mask), **hints)


# -- shapes --------------------------------------------------------------------------------------

@_method
def expand_dims(input, axis, _semantic=None):
    """Inserts a size-1 dimension at `axis`."""
    return semantic.expand_dims(input, axis)


@_method
def broadcast_to(input, *shape, _semantic=None):
    """Broadcasts `input` to `shape`."""
    if len(shape) == 1 and isinstance(_v(shape[0]), (tuple, list)):
        shape = _v(shape[0])
    return semantic.broadcast_to(semantic.to_tensor(input), [_v(s) for s in shape])


@builtin
def broadcast(input, other, _semantic=None):
    """Broadcasts two tensors to their common shape."""
    return semantic.broadcast_pair(semantic.to_tensor(input), semantic.to_tensor(other))


# -- casts ---------------------------------------------------------------------------------------

@_method
def cast(input, dtype, fp_downcast_rounding=None, bitcast=False, _semantic=None):
    """Converts `input` to `dtype` (or reinterprets its bits when `bitcast`). A float converted
    to a narrower float rounds to nearest even, or toward zero with `fp_downcast_rounding="rtz"`."""
    if _v(bitcast):
        return semantic.bitcast(input, dtype)
    rounding = _v(fp_downcast_rounding)
    if rounding is None:
        return semantic.cast(input, dtype)
    if rounding not in ("rtne", "rtz"):
        raise ValueError(f"fp_downcast_rounding must be 'rtne' or 'rtz', got {rounding!r}")
    x, dt = semantic.to_tensor(input), _v(dtype)
    if x.dtype == dt:
        return x
    if isinstance(dt, core.dtype) and dt.is_fp8e4b15() and x.dtype.is_floating():
        return semantic.cast(x, dt)  # one conversion, whatever the mode (as in Triton)
    if not (x.dtype.is_floating() and dt.is_floating() and dt.primitive_bitwidth < x.dtype.primitive_bitwidth):
        raise ValueError(f"fp_downcast_rounding applies to float downcasts, not {x.dtype} to {dt}")
    y = semantic.cast(x, dt)
    if rounding == "rtz":
        # Rounded to nearest; where that went away from zero, one step back toward it (the
        # format's bits are sign and magnitude). Past the largest finite value that is the
        # largest finite value, as rounding toward zero gives.
        back = semantic.cast(y, x.dtype)
        away = semantic.greater(semantic.abs_(back), semantic.abs_(x))
        bits = uint8 if dt.primitive_bitwidth == 8 else uint16
        stepped = semantic.bitcast(semantic.sub(semantic.bitcast(y, bits), semantic.cast(1, bits)), dt)
        y = semantic.where(away, stepped, y)
    return y


# -- arithmetic ----------------------------------------------------------------------------------

@builtin
def where(condition, x, y, _semantic=None):
    """`x` where `condition` holds, else `y`, elementwise."""
    c = _v(condition)
    if isinstance(c, tensor) and c.dtype != int1:
        import warnings

        warnings.warn(f"tl.where with a non-boolean condition ({c.dtype}) is deprecated in Triton: compare "
                      "it to 0 instead", stacklevel=2)
    return semantic.where(condition, x, y)


def _bf16_as_fp32(x):
    """bf16 tiles as fp32, where Triton computes (and returns) them so: min/max, clamp, scans."""
    return semantic.cast(x, float32) if isinstance(x, tensor) and x.dtype == bfloat16 else x


@builtin
def maximum(x, y, propagate_nan=PropagateNan.NONE, _semantic=None):
    """Elementwise maximum (bf16 in fp32); with `propagate_nan=tl.PropagateNan.ALL` a NaN
    operand gives NaN."""
    return semantic.maximum(_bf16_as_fp32(x), _bf16_as_fp32(y), _v(propagate_nan) == PropagateNan.ALL)


@builtin
def minimum(x, y, propagate_nan=PropagateNan.NONE, _semantic=None):
    """Elementwise minimum (bf16 in fp32); with `propagate_nan=tl.PropagateNan.ALL` a NaN
    operand gives NaN."""
    return semantic.minimum(_bf16_as_fp32(x), _bf16_as_fp32(y), _v(propagate_nan) == PropagateNan.ALL)


@builtin
def clamp(x, min, max, propagate_nan=PropagateNan.NONE, _semantic=None):
    """`min(max(x, min), max)` elementwise (bf16 in fp32); with
    `propagate_nan=tl.PropagateNan.ALL` a NaN `x` stays NaN."""
    return semantic.clamp(_bf16_as_fp32(x), _bf16_as_fp32(min), _bf16_as_fp32(max),
                          _v(propagate_nan) == PropagateNan.ALL)


@builtin
def fma(x, y, z, _semantic=None):
    """`x * y + z`, rounded once."""
    return semantic.fma(x, y, z)


@builtin
def dot(input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
        out_dtype=None, _semantic=None):
    """The matrix product `input @ other`, plus `acc` when given (tensor cores where the
    dtypes allow)."""
    imprecise = _v(max_num_imprecise_acc)
    if imprecise is not None and isinstance(input, tensor) and input.shape and imprecise > input.shape[-1]:
        raise ValueError(f"max_num_imprecise_acc ({imprecise}) must be <= K ({input.shape[-1]})")
    return semantic.dot(input, other, acc, input_precision, allow_tf32, out_dtype)


@_method
def logical_and(input, other, _semantic=None):
    """Elementwise `and` of two boolean tensors (Triton's `tensor.logical_and`)."""
    return semantic.logical_and(semantic.to_tensor(input), semantic.to_tensor(other))


@_method
def logical_or(input, other, _semantic=None):
    """Elementwise `or` of two boolean tensors (Triton's `tensor.logical_or`)."""
    return semantic.logical_or(semantic.to_tensor(input), semantic.to_tensor(other))


@_method
def cdiv(x, div, _semantic=None):
    """Ceiling division: `(x + div - 1) // div`."""
    if not isinstance(x, tensor) and not isinstance(div, tensor):
        return constexpr((_v(x) + _v(div) - 1) // _v(div))
    return semantic.floordiv(semantic.sub(semantic.add(x, div), 1), div)


def _math1(name: str, op: str, doc: str):
    def f(x, _semantic=None):
        return semantic.unary_math(op, x)

    f.__name__ = name
    f.__doc__ = doc
    return _method(f)


exp = _math1("exp", "exp", "e**x elementwise.")
exp2 = _math1("exp2", "exp2", "2**x elementwise.")
log = _math1("log", "log", "Natural logarithm elementwise.")
log2 = _math1("log2", "log2", "Base-2 logarithm elementwise.")
sqrt = _math1("sqrt", "sqrt", "Square root elementwise.")
sqrt_rn = _math1("sqrt_rn", "sqrt", "Square root, rounded to nearest, elementwise.")
rsqrt = _math1("rsqrt", "rsqrt", "1/sqrt(x) elementwise.")
sin = _math1("sin", "sin", "Sine elementwise.")
cos = _math1("cos", "cos", "Cosine elementwise.")
floor = _math1("floor", "floor", "Floor elementwise.")
ceil = _math1("ceil", "ceil", "Ceiling elementwise.")
erf = _math1("erf", "erf", "The error function elementwise.")


@_method
def abs(x, _semantic=None):
    """Absolute value elementwise."""
    return semantic.abs_(x)


@_method
def sigmoid(x, _semantic=None):
    """`1 / (1 + exp(-x))` elementwise."""
    return semantic.truediv(1, semantic.add(1, exp(semantic.minus(x))))


@builtin
def div_rn(x, y, _semantic=None):
    """`x / y` rounded to nearest (IEEE; plain `/` on fp32 is within 2 ulp)."""
    return semantic.div_rn(x, y)


@builtin
def fdiv(x, y, ieee_rounding=False, approx=False, _semantic=None):
    """`x / y` on floats; IEEE-rounded with `ieee_rounding=True`; the hardware's approximation
    (`div.approx.f32`, 2 ulp for denominators of magnitude 2**-126 to 2**126) with `approx=True`,
    fp32 only (Triton >= 3.7)."""
    if not _v(approx):
        return semantic.div_rn(x, y) if _v(ieee_rounding) else semantic.truediv(x, y)
    if _v(ieee_rounding):
        raise ValueError("approx and ieee_rounding cannot both be True")
    x, y = semantic.binary_operands(x, y, div_or_mod=True)
    if not x.dtype.is_fp32():
        raise ValueError("approx division requires float32 operands")
    return semantic.inline_asm_elementwise("div.approx.f32 $0, $1, $2;", "=f,f,f", [x, y], float32, True, 1)


@_method
def to(x, dtype, fp_downcast_rounding=None, bitcast=False, _semantic=None):
    return cast(x, dtype, fp_downcast_rounding=fp_downcast_rounding, bitcast=bitcast)


# -- compiler hints (accepted; facts are found by analysis) ---------------------------------------

@builtin
def multiple_of(input, values, _semantic=None):
    """Promises that `input`'s values are multiples of `values` (a hint for vectorising)."""
    return semantic.hint(input, "multiple_of", values)


@builtin
def max_contiguous(input, values, _semantic=None):
    """Promises runs of `values` consecutive values (a hint for vectorising)."""
    return semantic.hint(input, "max_contiguous", values)


@builtin
def max_constancy(input, values, _semantic=None):
    """Promises runs of `values` equal values (a hint)."""
    return semantic.hint(input, "max_constancy", values)


# -- compile-time helpers ------------------------------------------------------------------------

@builtin
def static_print(*values, sep=" ", end="\n", file=None, flush=False, _semantic=None):
    """Prints at compile time."""
    print(*[_v(v) for v in values], sep=sep, end=end, flush=flush)


@builtin
def static_assert(cond, msg="", _semantic=None):
    """Fails compilation unless the constexpr `cond` holds."""
    if not _v(cond):
        from .errors import StaticAssertFailed

        raise StaticAssertFailed(f"static_assert failed: {_v(msg)}")


@builtin
def device_print(prefix, *args, hex=False, _semantic=None):
    """Prints each element of `args` with its program id and index (from the GPU: vprintf)."""
    semantic.device_print(_v(prefix), args, hex)


@builtin
def inline_asm_elementwise(asm, constraints, args, dtype, is_pure, pack, _semantic=None):
    """Runs PTX `asm` on `pack` consecutive elements of the (broadcast) `args` at a time,
    giving tensors of `dtype` (a tuple of dtypes for several results). GPU only."""
    return semantic.inline_asm_elementwise(asm, constraints, args, dtype, is_pure, pack)


@builtin
def device_assert(cond, msg="", mask=None, _semantic=None):
    """Checks `cond` where `mask` holds: always in the interpreter; compiled, when debugging
    (`TILES_DEBUG=1` or `@jit(debug=True)`), a failure raises after the launch."""
    semantic.device_assert(cond, _v(msg), mask)


class static_range:
    """A loop unrolled at compile time: `for i in tl.static_range(4)`."""

    def __init__(self, arg1, arg2=None, step=None):
        if arg2 is None:
            self.start, self.end = 0, _v(arg1)
        else:
            self.start, self.end = _v(arg1), _v(arg2)
        self.step = 1 if step is None else _v(step)

    def __iter__(self):
        import builtins

        return iter(builtins.range(int(self.start), int(self.end), int(self.step)))


class range:  # noqa: A001  (Triton's name)
    """A loop the compiler may pipeline: `for k in tl.range(0, n, BLOCK, num_stages=3)`."""

    def __init__(self, arg1, arg2=None, step=None, num_stages=None, loop_unroll_factor=None,
                 disallow_acc_multi_buffer=False, flatten=False, warp_specialize=False, disable_licm=False):
        if arg2 is None:
            self.start, self.end = 0, arg1
        else:
            self.start, self.end = arg1, arg2
        self.step = 1 if step is None else step
        self.num_stages = num_stages

    def __iter__(self):
        import builtins

        return iter(builtins.range(int(self.start), int(self.end), int(self.step)))


math = SimpleNamespace(
    exp=exp, exp2=exp2, log=log, log2=log2, sqrt=sqrt, sqrt_rn=sqrt_rn, rsqrt=rsqrt, sin=sin, cos=cos,
    floor=floor, ceil=ceil, erf=erf, abs=abs, fma=fma, div_rn=div_rn, fdiv=fdiv,
)



# -- reductions -----------------------------------------------------------------------------------

def _sum_combine(a, b):
    return semantic.add(a, b)


def _max_combine(a, b):
    return semantic.maximum(a, b)


def _min_combine(a, b):
    return semantic.minimum(a, b)


def _xor_combine(a, b):
    return semantic.xor_(a, b)


def _arg_combine(is_max: bool, tie_break_left: bool):
    def combine(v1, i1, v2, i2):
        better = semantic.greater(v1, v2) if is_max else semantic.less(v1, v2)
        if tie_break_left:
            tie = semantic.logical_and(semantic.equal(v1, v2), semantic.less(i1, i2))
            better = semantic.logical_or(better, tie)
        return semantic.where(better, v1, v2), semantic.where(better, i1, i2)

    return combine


def _call(fn):
    """A combine function as the active backend calls it (JIT functions are inlined)."""
    from .core import current_backend

    return lambda *args: current_backend().call_function(fn, args)


@_method
def reduce(input, axis, combine_fn, keep_dims=False, _semantic=None):
    """Reduces `input` (a tile or a tuple of tiles) along `axis` with `combine_fn`."""
    single = not isinstance(input, (tuple, list))
    out = semantic.reduce([input] if single else list(input), axis, _call(combine_fn), _v(keep_dims))
    return out[0] if single else tuple(out)


def _with_indices(input, axis, combine, keep_dims):
    input = semantic.to_tensor(input)
    a = semantic._norm_axis(axis, len(input.shape))
    v, i = semantic.reduce([input, semantic.index_tile(input, a)], a, combine, keep_dims)
    return v, i


@_method
def sum(input, axis=None, keep_dims=False, dtype=None, _semantic=None):
    """Sum along `axis` (all axes when None); integers narrower than 32 bits sum in 32 bits."""
    input = semantic.to_tensor(input)
    dt = _v(dtype)
    if dt is None:
        d = input.dtype
        dt = int32 if d.is_int_signed() and d.int_bitwidth < 32 else uint32 if (
            d.is_int_unsigned() and d.int_bitwidth < 32) else d
    return semantic.reduce([semantic.cast(input, dt)], _v(axis), _sum_combine, _v(keep_dims))[0]


def _maxmin(is_max, input, axis, return_indices, tie_break_left, keep_dims):
    input = semantic.to_tensor(input)
    if _v(return_indices):
        return _with_indices(input, _v(axis), _arg_combine(is_max, _v(tie_break_left)), _v(keep_dims))
    if input.dtype.primitive_bitwidth < 32:
        input = semantic.cast(input, float32 if input.dtype.is_floating() else int32)
    combine = _max_combine if is_max else _min_combine
    return semantic.reduce([input], _v(axis), combine, _v(keep_dims))[0]


@_method
def max(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False,
        _semantic=None):
    """Maximum along `axis`; with `return_indices`, also where it is."""
    return _maxmin(True, input, axis, return_indices, return_indices_tie_break_left, keep_dims)


@_method
def min(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False,
        _semantic=None):
    """Minimum along `axis`; with `return_indices`, also where it is."""
    return _maxmin(False, input, axis, return_indices, return_indices_tie_break_left, keep_dims)


@_method
def argmax(input, axis, tie_break_left=True, keep_dims=False, _semantic=None):
    """Index of the maximum along `axis` (the first one when `tie_break_left`)."""
    return _maxmin(True, input, axis, True, tie_break_left, keep_dims)[1]


@_method
def argmin(input, axis, tie_break_left=True, keep_dims=False, _semantic=None):
    """Index of the minimum along `axis` (the first one when `tie_break_left`)."""
    return _maxmin(False, input, axis, True, tie_break_left, keep_dims)[1]


@_method
def xor_sum(input, axis=None, keep_dims=False, _semantic=None):
    """Xor of the elements along `axis` (integers)."""
    input = semantic.to_tensor(input)
    if not input.dtype.is_int():
        raise TypeError("xor_sum only supports integers")
    return semantic.reduce([input], _v(axis), _xor_combine, _v(keep_dims))[0]


def _or_combine(a, b):
    return semantic.or_(a, b)


@_method
def reduce_or(input, axis, keep_dims=False, _semantic=None):
    """Bitwise or of the elements along `axis` (integers)."""
    input = semantic.to_tensor(input)
    if not input.dtype.is_int():
        raise TypeError("reduce_or only supports integers")
    return semantic.reduce([input], _v(axis), _or_combine, _v(keep_dims))[0]


# The functions behind `+`, `-` and `*`. In debug mode, unless the compile option or the
# call says `sanitize_overflow=False`, an integer result that overflows its type fails a
# device assert (Triton's rule).
@builtin
def add(x, y, sanitize_overflow=True, _semantic=None):
    """x + y."""
    return semantic.add(x, y, bool(_v(sanitize_overflow)))


@builtin
def sub(x, y, sanitize_overflow=True, _semantic=None):
    """x - y."""
    return semantic.sub(x, y, bool(_v(sanitize_overflow)))


@builtin
def mul(x, y, sanitize_overflow=True, _semantic=None):
    """x * y."""
    return semantic.mul(x, y, bool(_v(sanitize_overflow)))


@builtin
def to_tensor(x, _semantic=None):
    """A Python number (or tensor) as a tensor, with the type a literal takes."""
    return semantic.to_tensor(x)


# The most elements one tile may hold (Triton's limit, kept for code that checks against it).
TRITON_MAX_TENSOR_NUMEL = 1048576


@builtin
def map_elementwise(scalar_fn, *args, pack=1, _semantic=None):
    """Applies `scalar_fn` (a @jit function) to the elements of `args` (broadcast together).

    tiles calls `scalar_fn` on whole tiles: an `if` on its arguments' values computes both sides
    and selects element by element (both sides must return, or neither). With `pack` > 1,
    `scalar_fn` takes `pack` elements of each argument (argument after argument) and returns
    `pack` of each result (result after result), as in Triton: tiles hands it every argument's
    whole tile `pack` times and keeps each result's first copy (one element's result depends
    on that element alone)."""
    tiles_ = [semantic.to_tensor(a) for a in args]
    shape = ()
    for t in tiles_:
        shape = semantic.broadcast_shapes(shape, t.shape)
    tiles_ = [semantic.broadcast_to(t, shape) for t in tiles_]
    from .core import current_backend

    call = lambda *a: current_backend().map_function(scalar_fn, a)  # noqa: E731
    pack = int(_v(pack))
    if pack <= 1:
        return call(*tiles_)
    out = call(*[t for t in tiles_ for _ in _builtins.range(pack)])
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(outs) % pack:
        raise ValueError(f"map_elementwise: {getattr(scalar_fn, '__name__', 'the function')} returned {len(outs)} "
                         f"values, not {pack} per result (pack={pack})")
    firsts = outs[::pack]
    return firsts[0] if len(firsts) == 1 else tuple(firsts)


# -- atomics and barriers -------------------------------------------------------------------------

def _atomic(op):
    def f(pointer, val, mask=None, sem=None, scope=None, _semantic=None):
        return semantic.atomic(op, pointer, val, _v(mask), sem, scope)

    f.__name__ = f"atomic_{op}"
    f.__doc__ = f"Atomically applies `{op}` at each pointer where `mask` holds; returns the old values."
    return _method(f)


atomic_add = _atomic("add")
atomic_max = _atomic("max")
atomic_min = _atomic("min")
atomic_and = _atomic("and")
atomic_or = _atomic("or")
atomic_xor = _atomic("xor")
atomic_xchg = _atomic("xchg")


@_method
def atomic_cas(pointer, cmp, val, sem=None, scope=None, _semantic=None):
    """Atomically stores `val` where the memory equals `cmp`; returns the old values."""
    return semantic.atomic("cas", pointer, val, None, sem, scope, cmp=cmp)


@_method
def atomic_load(pointer, mask=None, sem=None, scope=None, _semantic=None):
    """Loads with `sem` ordering ("acquire", the default, or "relaxed") at `scope` ("gpu", the
    default, "cta" or "sys"); masked-off elements read as 0."""
    return semantic.atomic_load(pointer, _v(mask), sem, scope)


@_method
def atomic_store(pointer, val, mask=None, sem=None, scope=None, _semantic=None):
    """Stores `val` with `sem` ordering ("release", the default, or "relaxed") at `scope`."""
    return semantic.atomic_store(pointer, val, _v(mask), sem, scope)


@_method
def atomic_poll(pointer, expected_value, sem=None, scope=None, timeout_ns=None, _semantic=None):
    """Loads each element until it equals `expected_value`, or until `timeout_ns` nanoseconds of
    the global timer have passed; true where the value was seen."""
    return semantic.atomic_poll(pointer, expected_value, sem, scope, timeout_ns)


@builtin
def expect_zero(x, mask, _semantic=None):
    """`x`, marked as expected to be zero where `mask` holds (checked when asserts are)."""
    return semantic.expect_zero(x, mask)


@builtin
def aggregate_replace(instance, _semantic=None, **changes):
    """A copy of an aggregate (`@triton.aggregate`) with the fields in `changes` replaced."""
    fields = getattr(type(instance), "_tiles_aggregate_fields", None)
    if fields is None:
        raise TypeError(f"aggregate_replace() expects an aggregate instance, got {type(instance)}")
    for name in changes:
        if name not in fields:
            raise TypeError(f"{type(instance).__name__} has no field '{name}'")
    out = object.__new__(type(instance))
    for name in fields:
        object.__setattr__(out, name, changes[name] if name in changes else getattr(instance, name))
    return out


@builtin
def debug_barrier(_semantic=None):
    """Every thread of the program waits here."""
    from .core import current_backend

    current_backend().barrier()


@builtin
def cat(input, other, can_reorder=False, dim=0, _semantic=None):
    """Concatenates two tiles of one shape along `dim`."""
    a, b = semantic.to_tensor(input), semantic.to_tensor(other)
    rank = len(a.shape)
    dim = int(_v(dim)) % _builtins.max(rank, 1)
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(f"cat needs tiles of one shape, got {list(a.shape)} and {list(b.shape)}")
    j = semantic.join(a, b)  # [..., 2]
    order = list(_builtin_range(rank))
    order.insert(dim, rank)  # the pair axis goes in front of `dim`
    j = semantic.permute(j, order)
    shape = list(a.shape)
    shape[dim] *= 2
    return semantic.reshape(j, tuple(shape))


@builtin
def assume(cond, _semantic=None):
    """A fact the compiler may rely on; tiles checks nothing and uses nothing from it."""
    return None


@builtin
def squeeze(x, dim, _semantic=None):
    """Removes the length-1 dimension `dim`."""
    x = semantic.to_tensor(x)
    d = int(_v(dim)) % len(x.shape)
    if x.shape[d] != 1:
        raise ValueError(f"squeeze: dimension {d} has length {x.shape[d]}, not 1")
    return semantic.reshape(x, tuple(x.shape[:d]) + tuple(x.shape[d + 1:]))


@builtin
def unsqueeze(x, dim, _semantic=None):
    """Inserts a length-1 dimension at `dim`."""
    x = semantic.to_tensor(x)
    d = int(_v(dim))
    d = d + len(x.shape) + 1 if d < 0 else d
    return semantic.expand_dims(x, d)


@_method
def softmax(x, dim=None, keep_dims=None, ieee_rounding=False, _semantic=None):
    """`exp(x - max) / sum(exp(x - max))` along `dim` (default 0, as in Triton)."""
    x = semantic.to_tensor(x)
    d = 0 if _v(dim) is None else int(_v(dim))
    z = semantic.sub(x, semantic.reduce([x], d, _max_combine, True)[0])
    num = semantic.unary_math("exp", z)
    den = semantic.reduce([num], d, _sum_combine, True)[0]
    return semantic.truediv(num, den)


@builtin
def swizzle2d(i, j, size_i, size_j, size_g, _semantic=None):
    """Maps row-major indices of a `size_i x size_j` grid to column-major order within groups
    of `size_g` rows (the grouped program ordering of matmul kernels)."""
    ij = semantic.add(semantic.mul(i, size_j), j)
    size_gj = semantic.mul(size_g, size_j)
    group = semantic.floordiv(ij, size_gj)
    off_i = semantic.mul(group, size_g)
    g = semantic.minimum(semantic.sub(size_i, off_i), size_g)
    ij = semantic.mod(ij, size_gj)
    return semantic.add(off_i, semantic.mod(ij, g)), semantic.floordiv(ij, g)


def _u32(x):
    """`x` as uint32 bits (integers of 32 bits or fewer)."""
    x = semantic.to_tensor(x)
    if x.dtype == uint32:
        return x
    if x.dtype.primitive_bitwidth == 32:
        return semantic.bitcast(x, uint32)
    return semantic.cast(x, uint32)


@builtin
def umulhi(x, y, _semantic=None):
    """The high 32 bits of the 64-bit product of two 32-bit integers (unsigned)."""
    x, y = semantic.to_tensor(x), semantic.to_tensor(y, x.dtype if isinstance(x, tensor) else None)
    dt = x.dtype if isinstance(x, tensor) else y.dtype
    a = semantic.cast(_u32(x), uint64)
    b = semantic.cast(_u32(y), uint64)
    hi = semantic.cast(semantic.shr(semantic.mul(a, b), 32), uint32)
    return hi if dt == uint32 else semantic.bitcast(hi, dt)


# Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): the
# multipliers and Weyl increments of the published generator, so streams match Triton's.
_PHILOX_MUL_A, _PHILOX_MUL_B = 0xD2511F53, 0xCD9E8D57
_PHILOX_WEYL_A, _PHILOX_WEYL_B = 0x9E3779B9, 0xBB67AE85
_PHILOX_ROUNDS = 10


def _philox_rounds(c0, c1, c2, c3, k0, k1, n_rounds):
    ka, kb = semantic.scalar_constant(_PHILOX_WEYL_A, uint32), semantic.scalar_constant(_PHILOX_WEYL_B, uint32)
    ma, mb = semantic.scalar_constant(_PHILOX_MUL_A, uint32), semantic.scalar_constant(_PHILOX_MUL_B, uint32)
    for _ in _builtin_range(int(_v(n_rounds))):
        hi_b, lo_b = umulhi(mb, c2), semantic.mul(mb, c2)
        hi_a, lo_a = umulhi(ma, c0), semantic.mul(ma, c0)
        c0, c1, c2, c3 = (semantic.xor_(semantic.xor_(hi_b, c1), k0), lo_b,
                          semantic.xor_(semantic.xor_(hi_a, c3), k1), lo_a)
        k0, k1 = semantic.add(k0, ka), semantic.add(k1, kb)
    return c0, c1, c2, c3


@builtin
def philox(seed, c0, c1, c2, c3, n_rounds=_PHILOX_ROUNDS, _semantic=None):
    """Philox4x32 of the counters `c0..c3` under the 64-bit key `seed`; four uint32 tiles."""
    seed = semantic.to_tensor(seed)
    if not seed.dtype.is_int():
        raise TypeError(f"a random seed must be an integer, got {seed.dtype}")
    seed = semantic.cast(seed, uint64)
    k_lo = semantic.cast(semantic.and_(seed, 0xFFFFFFFF), uint32)
    k_hi = semantic.cast(semantic.and_(semantic.shr(seed, 32), 0xFFFFFFFF), uint32)
    cs = [_u32(c) for c in (c0, c1, c2, c3)]
    shape = next((c.shape for c in cs if c.shape), ())
    cs = [semantic.broadcast_to(c, shape) for c in cs]
    k_lo, k_hi = semantic.broadcast_to(k_lo, shape), semantic.broadcast_to(k_hi, shape)
    return _philox_rounds(*cs, k_lo, k_hi, n_rounds)


@builtin
def philox_impl(c0, c1, c2, c3, k0, k1, n_rounds=_PHILOX_ROUNDS, _semantic=None):
    """`n_rounds` Philox rounds of the uint32 counters `c0..c3` under the key `(k0, k1)`."""
    xs = [semantic.to_tensor(x) for x in (c0, c1, c2, c3, k0, k1)]
    if any(x.dtype != uint32 for x in xs):
        raise TypeError("philox_impl takes uint32 counters and keys (tiles runs the 32-bit Philox), got "
                        + ", ".join(str(x.dtype) for x in xs))
    shape = next((x.shape for x in xs if x.shape), ())
    return _philox_rounds(*[semantic.broadcast_to(x, shape) for x in xs], n_rounds)


@builtin
def randint4x(seed, offset, n_rounds=_PHILOX_ROUNDS, _semantic=None):
    """Four tiles of random uint32, a function of `seed` and each element of `offset`."""
    offset = semantic.to_tensor(offset)
    lo = semantic.cast(offset, uint32)
    zero = semantic.mul(lo, 0)
    hi = semantic.cast(semantic.shr(offset, 32), uint32) if offset.dtype.primitive_bitwidth > 32 else zero
    return philox(seed, lo, hi, zero, zero, n_rounds)


@builtin
def randint(seed, offset, n_rounds=_PHILOX_ROUNDS, _semantic=None):
    """One tile of random uint32 (the first of `randint4x`)."""
    return randint4x(seed, offset, n_rounds)[0]


@builtin
def uint_to_uniform_float(x, _semantic=None):
    """Random 32-bit integers to floats uniform in [0, 1)."""
    x = semantic.to_tensor(x)
    if x.dtype.primitive_bitwidth == 64:
        i = semantic.bitcast(x, int64)
        scale = 1.0842020432385337e-19
    else:
        i = semantic.bitcast(x, int32) if x.dtype != int32 else x
        scale = 4.6566127342e-10
    i = semantic.where(semantic.less(i, 0), semantic.invert(i), i)
    return semantic.mul(i, scale)


@builtin
def rand(seed, offset, n_rounds=_PHILOX_ROUNDS, _semantic=None):
    """A tile of random float32 uniform in [0, 1)."""
    return uint_to_uniform_float(randint(seed, offset, n_rounds))


@builtin
def rand4x(seed, offsets, n_rounds=_PHILOX_ROUNDS, _semantic=None):
    """Four tiles of random float32 uniform in [0, 1)."""
    return tuple(uint_to_uniform_float(r) for r in randint4x(seed, offsets, n_rounds))


@builtin
def pair_uniform_to_normal(u1, u2, _semantic=None):
    """Box-Muller: two uniform tiles to two standard normal tiles."""
    u1 = semantic.maximum(1.0e-7, u1)
    th = semantic.mul(6.283185307179586, u2)
    r = semantic.unary_math("sqrt", semantic.mul(-2.0, semantic.unary_math("log", u1)))
    return semantic.mul(r, semantic.unary_math("cos", th)), semantic.mul(r, semantic.unary_math("sin", th))


@builtin
def randn(seed, offset, n_rounds=_PHILOX_ROUNDS, _semantic=None):
    """A tile of random float32, standard normal."""
    i1, i2, _, _ = randint4x(seed, offset, n_rounds)
    return pair_uniform_to_normal(uint_to_uniform_float(i1), uint_to_uniform_float(i2))[0]


@builtin
def randn4x(seed, offset, n_rounds=_PHILOX_ROUNDS, _semantic=None):
    """Four tiles of random float32, standard normal."""
    u = rand4x(seed, offset, n_rounds)
    n1, n2 = pair_uniform_to_normal(u[0], u[1])
    n3, n4 = pair_uniform_to_normal(u[2], u[3])
    return n1, n2, n3, n4


# -- tensor descriptors (Triton >= 3.6) ----------------------------------------------------------
# A descriptor names a strided N-d tensor (base pointer, shape, strides) and the block shape moved
# at once. tiles lowers `load`/`store` of a block to a masked pointer-tile access: elements
# outside the tensor read as zeros (padding "zero") or NaN (padding "nan") and are not written.


def _descriptor_reduce(op: str):
    """The descriptor method `atomic_<op>`: the block at `offsets` combined with `value`."""

    @builtin
    def reduce(self, offsets, value, _semantic=None):
        self._reduce(op, offsets, value)

    reduce.__name__ = f"atomic_{op}"
    return reduce


def _round_to_tf32(x):
    """fp32 `x` rounded to TF32's 10 fraction bits, to nearest with ties to even; infinities
    and NaN pass unchanged."""
    bits = semantic.bitcast(x, uint32)
    special = semantic.equal(semantic.and_(bits, 0x7F800000), 0x7F800000)
    odd = semantic.and_(semantic.shr(bits, 13), 1)  # a logical shift: bits is unsigned
    up = semantic.and_(semantic.add(semantic.add(bits, 0xFFF), odd), 0xFFFFE000)
    return semantic.where(special, x, semantic.bitcast(up, x.dtype))


class tensor_descriptor:
    """A device-side tensor descriptor (what `tl.make_tensor_descriptor` returns and what a host
    `TensorDescriptor` argument becomes inside the kernel)."""

    def __init__(self, base, shape, strides, block_shape, padding="zero", assume_aligned=False, round_tf32=False):
        self.base = base
        self.round_tf32 = round_tf32  # a host descriptor's `round_f32_to_tf32`
        # Made in the kernel (`tl.make_tensor_descriptor`): alignment is known by contract only.
        self.assume_aligned = assume_aligned
        self.shape = list(shape)
        self.strides = list(strides)
        self.block_shape = [int(_v(b)) for b in block_shape]
        self.padding = _v(padding) or "zero"
        if len(self.shape) != len(self.strides) or len(self.shape) != len(self.block_shape):
            raise ValueError("a tensor descriptor needs one shape, stride and block size per dimension")
        for b in self.block_shape:
            if b <= 0 or b & (b - 1):
                raise ValueError(f"block dimensions must be powers of 2, got {self.block_shape}")

    @property
    def dtype(self):
        return self.base.dtype.element_ty

    # Loops and `if`s carry a descriptor part by part: its base and whichever extents and
    # strides are tensors. The rest (numbers, block shape, padding) must agree between the
    # values merged: `_tiles_static` says what they are.
    def _tiles_flatten(self):
        return [self.base] + [x for x in self.shape + self.strides if isinstance(x, tensor)]

    def _tiles_static(self):
        return (tuple(None if isinstance(x, tensor) else _v(x) for x in self.shape + self.strides),
                tuple(self.block_shape), self.padding, self.assume_aligned, self.round_tf32)

    def _tiles_rebuild(self, parts):
        it = iter(parts)
        base = next(it)
        dims = [next(it) if isinstance(x, tensor) else x for x in self.shape + self.strides]
        r = len(self.shape)
        shape, strides = dims[:r], dims[r:]
        if self.assume_aligned:  # what make_tensor_descriptor promised holds for every value merged
            base, strides = _aligned_descriptor_parts(base, strides)
        return tensor_descriptor(base, shape, strides, self.block_shape, self.padding, self.assume_aligned,
                                 self.round_tf32)

    def _pointers(self, offsets, squeeze=False):
        """The block's pointers and in-range mask. With `squeeze`, the block's dimensions of
        size 1 are left out of both (their offsets and range checks are scalars), and the
        dimensions kept come back too: a `[1, BN, BK]` block of a 3-d weight is then a 2-d
        load, which the pipeliner can put in a ring once the user's reshape to `[BN, BK]`
        folds away."""
        offsets = list(_v(offsets)) if isinstance(_v(offsets), (list, tuple)) else [offsets]
        rank = len(self.block_shape)
        if len(offsets) != rank:
            raise ValueError(f"this descriptor takes {rank} offsets, got {len(offsets)}")
        kept = [d for d in _builtin_range(rank) if not squeeze or self.block_shape[d] > 1] or [rank - 1]
        ptr, mask = self.base, None
        for d in _builtin_range(rank):
            stride = semantic.cast(semantic.to_tensor(self.strides[d]), int64)
            # The block's start (a scalar) and the offsets within the block (the same every time
            # the block moves: hoisted out of loops) are scaled apart, in 64 bits.
            start = semantic.mul(semantic.cast(semantic.to_tensor(offsets[d]), int64), stride)
            ptr = semantic.add(ptr, start)
            if d in kept:
                j = kept.index(d)
                rel = semantic.arange(0, self.block_shape[d])
                idx = semantic.add(rel, offsets[d])
                for e in _builtin_range(len(kept)):
                    if e < j:
                        idx, rel = semantic.expand_dims(idx, 0), semantic.expand_dims(rel, 0)
                    elif e > j:
                        idx, rel = semantic.expand_dims(idx, len(idx.shape)), semantic.expand_dims(rel, len(rel.shape))
                ptr = semantic.add(ptr, semantic.mul(semantic.cast(rel, int64), stride))
            else:
                idx = semantic.to_tensor(offsets[d])
            inside = semantic.logical_and(semantic.greater_equal(idx, 0), semantic.less(idx, self.shape[d]))
            mask = inside if mask is None else semantic.logical_and(mask, inside)
        return (ptr, mask, kept) if squeeze else (ptr, mask)

    @builtin
    def load(self, offsets, _semantic=None):
        """The block at `offsets` (out-of-range elements per the padding)."""
        other = float("nan") if self.padding == "nan" else 0
        ptr, mask, kept = self._pointers(offsets, squeeze=True)
        # A descriptor made in the kernel promises Triton's TMA contract (16-byte aligned base
        # and rows), so whole 16-byte granules of a row may be read: the compiler then reads
        # the row's last, partly selected granule at once and selects its elements after.
        x = semantic.load(ptr, mask, other, whole_granules=self.assume_aligned)
        dropped = [d for d in _builtin_range(len(self.block_shape)) if d not in kept]
        if dropped:  # back to the block's shape (the unit dimensions hold no data)
            x = semantic.expand_dims(x, dropped)
        return _round_to_tf32(x) if self.round_tf32 else x

    @builtin
    def store(self, offsets, value, _semantic=None):
        """Writes the block at `offsets` (out-of-range elements are not written)."""
        ptr, mask = self._pointers(offsets)
        return semantic.store(ptr, value, mask)

    @property
    def block_type(self):
        return block_type(self.dtype, self.block_shape)

    @property
    def type(self):
        def part(x):
            return x.dtype if isinstance(x, tensor) else int32 if isinstance(_v(x), int) else type(_v(x))

        return tensor_descriptor_type(self.block_type, tuple_type([part(x) for x in self.shape]),
                                      tuple_type([part(x) for x in self.strides]))

    def _reduce(self, op, offsets, value):
        """The block at `offsets` combined with `value` by the atomic `op`, element by element
        (out-of-range elements untouched). Returns nothing, as Triton's TMA reductions do."""
        value = semantic.to_tensor(value)
        if list(value.shape) != self.block_shape:
            raise ValueError(f"the value's shape {list(value.shape)} is not the block shape {self.block_shape}")
        ptr, mask = self._pointers(offsets)
        if op in ("min", "max") and self.dtype in (float16, bfloat16):
            semantic.half_minmax(op, ptr, value, mask)
            return
        semantic.atomic(op, ptr, semantic.cast(value, self.dtype), mask, "relaxed", None)

    # `desc.atomic_add(offsets, value)` and the like (Triton's TMA reductions).
    atomic_add = _descriptor_reduce("add")
    atomic_min = _descriptor_reduce("min")
    atomic_max = _descriptor_reduce("max")
    atomic_and = _descriptor_reduce("and")
    atomic_or = _descriptor_reduce("or")
    atomic_xor = _descriptor_reduce("xor")

    def _rows(self, what, x_offsets, y_offset):
        """Pointers and in-range mask of the rows `x_offsets` (a 1-d tile), each the
        `block_shape[1]` columns from `y_offset`: the block of a row gather or scatter."""
        if len(self.block_shape) != 2 or self.block_shape[0] != 1:
            raise ValueError(f"descriptor {what} needs a 2-d descriptor of one-row blocks, got block shape "
                             f"{self.block_shape}")
        rows = semantic.to_tensor(x_offsets)
        if len(rows.shape) != 1:
            raise ValueError(f"descriptor {what}: the row offsets must be 1-d, got shape {list(rows.shape)}")
        rows = semantic.expand_dims(rows, 1)
        cols = semantic.expand_dims(semantic.add(semantic.arange(0, self.block_shape[1]), y_offset), 0)
        s0 = semantic.cast(semantic.to_tensor(self.strides[0]), int64)
        s1 = semantic.cast(semantic.to_tensor(self.strides[1]), int64)
        ptr = semantic.add(semantic.add(self.base, semantic.mul(semantic.cast(rows, int64), s0)),
                           semantic.mul(semantic.cast(cols, int64), s1))
        mask = semantic.logical_and(
            semantic.logical_and(semantic.greater_equal(rows, 0), semantic.less(rows, self.shape[0])),
            semantic.logical_and(semantic.greater_equal(cols, 0), semantic.less(cols, self.shape[1])))
        return ptr, semantic.broadcast_to(mask, ptr.shape)

    @builtin
    def gather(self, *args, _semantic=None):
        """`desc.gather(x_offsets, y_offset)`: the rows `x_offsets`, each `block_shape[1]` wide
        from column `y_offset` (out-of-range elements per the padding). Triton runs it as a TMA
        gather on Blackwell only; tiles on any GPU, as masked loads."""
        if len(args) != 2:
            raise ValueError(f"descriptor gather takes (x_offsets, y_offset), got {len(args)} arguments")
        ptr, mask = self._rows("gather", *args)
        return semantic.load(ptr, mask, float("nan") if self.padding == "nan" else 0)

    @builtin
    def scatter(self, value, *args, _semantic=None):
        """`desc.scatter(value, x_offsets, y_offset)`: writes the rows of `value` to the rows
        `x_offsets` from column `y_offset` (out-of-range elements are not written)."""
        if len(args) != 2:
            raise ValueError(f"descriptor scatter takes (value, x_offsets, y_offset), got {len(args) + 1} arguments")
        ptr, mask = self._rows("scatter", *args)
        semantic.store(ptr, semantic.cast(semantic.to_tensor(value), self.dtype), mask)


class block_ptr:
    """A block pointer (`tl.make_block_ptr`): a block of `block_shape` at `offsets` in the
    strided tensor at `base`; loads and stores become masked pointer tiles. Loops carry it
    part by part (base, shape, strides, offsets)."""

    def __init__(self, base, shape, strides, offsets, block_shape, order=None):
        rank = len(block_shape)
        if not (len(shape) == len(strides) == len(offsets) == rank):
            raise ValueError("make_block_ptr needs one shape, stride and offset per block dimension")
        self.base = semantic.to_tensor(base)
        if not self.base.dtype.is_ptr() or self.base.shape:
            raise ValueError("make_block_ptr: base must be a scalar pointer")
        self.shape = [semantic.cast(semantic.to_tensor(_v(x)), int64) for x in shape]
        self.strides = [semantic.cast(semantic.to_tensor(_v(x)), int64) for x in strides]
        self.offsets = [semantic.cast(semantic.to_tensor(_v(x)), int32) for x in offsets]
        self.block_shape = [int(_v(b)) for b in block_shape]
        self.order = [int(_v(o)) for o in (order or range(rank))]

    @property
    def dtype(self):
        return pointer_type(self.base.dtype.element_ty)

    @property
    def type(self):
        return self.dtype

    def _tiles_flatten(self):
        return [self.base, *self.shape, *self.strides, *self.offsets]

    def _tiles_rebuild(self, parts):
        r = len(self.block_shape)
        bp = object.__new__(block_ptr)
        bp.base, bp.block_shape, bp.order = parts[0], self.block_shape, self.order
        bp.shape, bp.strides, bp.offsets = list(parts[1:1 + r]), list(parts[1 + r:1 + 2 * r]), list(parts[1 + 2 * r:])
        return bp

    def _pointers(self, check):
        check = [int(_v(c)) for c in (check or ())]
        rank = len(self.block_shape)
        ptr, mask = self.base, None
        for d in _builtin_range(rank):
            idx = semantic.add(semantic.arange(0, self.block_shape[d]), self.offsets[d])
            for e in _builtin_range(rank):
                if e < d:
                    idx = semantic.expand_dims(idx, 0)
                elif e > d:
                    idx = semantic.expand_dims(idx, len(idx.shape))
            ptr = semantic.add(ptr, semantic.mul(semantic.cast(idx, int64), self.strides[d]))
            if d in check:
                inside = semantic.logical_and(semantic.greater_equal(idx, 0),
                                              semantic.less(semantic.cast(idx, int64), self.shape[d]))
                mask = inside if mask is None else semantic.logical_and(mask, inside)
        if mask is not None:
            mask = semantic.broadcast_to(mask, ptr.shape)
        return ptr, mask

    def advance(self, offsets):
        deltas = list(_v(offsets))
        if len(deltas) != len(self.block_shape):
            raise ValueError(f"advance takes {len(self.block_shape)} offsets, got {len(deltas)}")
        parts = self._tiles_flatten()
        r = len(self.block_shape)
        moved = [semantic.cast(semantic.add(o, d), int32) for o, d in zip(parts[1 + 2 * r:], deltas)]
        return self._tiles_rebuild(parts[:1 + 2 * r] + moved)


@builtin
def make_block_ptr(base, shape, strides, offsets, block_shape, order, _semantic=None):
    """A block pointer to the `block_shape` block at `offsets` of the strided tensor at `base`."""
    return block_ptr(base, _v(shape), _v(strides), _v(offsets), _v(block_shape), _v(order))


@builtin
def advance(base, offsets, _semantic=None):
    """The block pointer `base` moved by `offsets`."""
    return base.advance(offsets)


@builtin
def make_tensor_descriptor(base, shape, strides, block_shape, padding_option="zero", _semantic=None):
    """A descriptor for the strided tensor at `base` moving blocks of `block_shape`. As for
    Triton's (TMA) descriptors, `base` must be 16-byte aligned, every stride but the last a
    multiple of 16 bytes and the last stride 1: the compiler relies on it for vector accesses."""
    base, strides = _aligned_descriptor_parts(semantic.to_tensor(base), list(_v(strides)))
    return tensor_descriptor(base, _v(shape), strides, _v(block_shape), padding_option, assume_aligned=True)


def _aligned_descriptor_parts(base, strides):
    """The base and strides of a descriptor made in the kernel, with Triton's TMA contract told
    to the compiler: the base 16-byte aligned, every stride but the last a multiple of 16 bytes."""
    if base.dtype.is_ptr() and not base.shape:
        eb = _builtins.max(base.dtype.element_ty.primitive_bitwidth // 8, 1)
        base = semantic.hint(base, "multiple_of", 16)
        strides = [semantic.hint(st, "multiple_of", _builtins.max(16 // eb, 1)) if isinstance(st, tensor)
                   and i < len(strides) - 1 else st for i, st in enumerate(strides)]
    return base, strides


@builtin
def load_tensor_descriptor(desc, offsets, _semantic=None):
    return desc.load(offsets)


@builtin
def store_tensor_descriptor(desc, offsets, value, _semantic=None):
    return desc.store(offsets, value)


math.umulhi = umulhi
random = SimpleNamespace(philox=philox, randint=randint, randint4x=randint4x, rand=rand, rand4x=rand4x, randn=randn,
                         randn4x=randn4x, uint_to_uniform_float=uint_to_uniform_float,
                         pair_uniform_to_normal=pair_uniform_to_normal)

# -- flip, sort, topk, histogram, gather: written with tiles' shape ops ----------------------------

def _pow2_dim(x, dim, what):
    x = semantic.to_tensor(x)
    rank = len(x.shape)
    if rank == 0:
        raise ValueError(f"{what} needs a tensor of one or more dimensions, got a scalar")
    d = rank - 1 if _v(dim) is None else int(_v(dim))
    if not -rank <= d < rank:
        raise ValueError(f"{what}: dim {d} is out of range for a {rank}-D tensor")
    d %= rank
    n = x.shape[d]
    if n & (n - 1):
        raise ValueError(f"{what}: dimension {d} has size {n}, not a power of two")
    return x, d, n


@_method
def flip(x, dim=None, _semantic=None):
    """Reverses `x` along `dim` (the last by default): every bit of the index is flipped."""
    x, d, n = _pow2_dim(x, dim, "flip")
    if n == 1:
        return x
    k = n.bit_length() - 1
    shape = list(x.shape)
    y = x
    for i in _builtins.range(k):
        # Flip bit i of the index: swap the halves of each run of 2^(i+1) elements.
        z = semantic.reshape(y, shape[:d] + [n >> (i + 1), 2 << i] + shape[d + 1:])
        lo, hi = semantic._halves(z, d + 1)
        y = semantic.reshape(semantic._stack_halves(hi, lo, d + 1), shape)
    return y


def _compare_exchange(y, d, n, distance, block, descending):
    """One bitonic step along `d` (moved last): elements `distance` apart are ordered, ascending
    in blocks whose bit `block` of the index is 0 (descending where it is 1), or all one way
    when `block` is None."""
    shape = list(y.shape)
    outer = n // (2 * distance)
    z = semantic.reshape(y, shape[:d] + [outer, 2 * distance] + shape[d + 1:])
    left, right = semantic._halves(z, d + 1)
    lo, hi = semantic.minimum(left, right), semantic.maximum(left, right)
    if block is None:
        flipped = semantic.to_tensor(bool(descending))
    else:
        o = semantic.arange(0, outer)
        bit = semantic.and_(semantic.shr(o, block - distance.bit_length()), 1)
        flipped = semantic.not_equal(bit, 1 if descending else 0)
        for _ in _builtins.range(d):
            flipped = semantic.expand_dims(flipped, 0)
        for _ in _builtins.range(len(shape) - d):
            flipped = semantic.expand_dims(flipped, len(flipped.shape))
    first, second = semantic.where(flipped, hi, lo), semantic.where(flipped, lo, hi)
    z = semantic._stack_halves(first, second, d + 1)
    return semantic.reshape(z, shape)


@_method
def sort(x, dim=None, descending=False, _semantic=None):
    """Sorts `x` along `dim` (the last by default) with a bitonic network."""
    x, d, n = _pow2_dim(x, dim, "sort")
    k = n.bit_length() - 1
    desc = bool(_v(descending))
    y = x
    for stage in _builtins.range(1, k + 1):
        for sub_ in _builtins.range(stage - 1, -1, -1):
            block = stage if stage < k else None
            y = _compare_exchange(y, d, n, 1 << sub_, block, desc)
    return y


@builtin
def bitonic_merge(x, dim=None, descending=False, _semantic=None):
    """The last stage of a bitonic sort along `dim` (the last by default): a bitonic sequence
    (ascending then descending, or the reverse) comes out sorted."""
    x, d, n = _pow2_dim(x, dim, "bitonic_merge")
    y = x
    for sub_ in _builtins.range(n.bit_length() - 2, -1, -1):
        y = _compare_exchange(y, d, n, 1 << sub_, None, bool(_v(descending)))
    return y


@_method
def topk(x, k, dim=None, descending=True, _semantic=None):
    """The `k` largest values of `x` along `dim` (the last by default), largest first; with
    `descending=False` the `k` smallest, smallest first."""
    x, d, n = _pow2_dim(x, dim, "topk")
    k = int(_v(k))
    if k < 1 or k > n or k & (k - 1):
        raise ValueError(f"topk: k must be a power of two between 1 and {n}, got {k}")
    y = sort(x, d, bool(_v(descending)))
    while y.shape[d] > k:
        y, _ = semantic._halves(y, d)
    return y


@_method
def histogram(input, num_bins, mask=None, _semantic=None):
    """Counts of the values 0 .. num_bins-1 in a 1-D integer tile (int32; other values and
    masked-off elements are not counted)."""
    x = semantic.to_tensor(input)
    nb = int(_v(num_bins))
    if len(x.shape) != 1 or not x.dtype.is_int():
        raise ValueError(f"histogram takes a 1-D integer tile, got {x.dtype}{list(x.shape)}")
    bins = semantic.arange(0, nb)
    hit = semantic.equal(semantic.expand_dims(semantic.cast(x, int32), 1), semantic.expand_dims(bins, 0))
    if mask is not None:
        hit = semantic.and_(hit, semantic.expand_dims(semantic.to_tensor(mask), 1))
    return semantic.reduce([semantic.cast(hit, int32)], 0, _sum_combine, False)[0]


@_method
def gather(src, index, axis, _semantic=None):
    """`out[i][j] = src[index[i][j]][j]` along `axis` (every other dimension of `index` as in
    `src`). Compiled, `src` is staged in shared memory and each element read at its index."""
    return semantic.gather(src, index, axis)


# -- `tl.extra.cuda`: grid dependency control and special registers --------------------------------

@builtin
def _gdc_wait(_semantic=None):
    """Waits until the grids this one depends on have finished and their writes are visible
    (a no-op unless the kernel was launched with `launch_pdl=True`; sm_90 and newer)."""
    from .core import current_backend

    current_backend().special("griddepcontrol.wait;", None)


@builtin
def _gdc_launch_dependents(_semantic=None):
    """Lets the next kernel launched with `launch_pdl=True` start before this grid finishes
    (no memory ordering; the dependent's `gdc_wait` gives that)."""
    from .core import current_backend

    current_backend().special("griddepcontrol.launch_dependents;", None)


@builtin
def _globaltimer(_semantic=None):
    """The GPU's nanosecond global timer (int64)."""
    from .core import current_backend

    return tensor(current_backend().special("mov.u64 $0, %globaltimer;", int64), int64)


@builtin
def _smid(_semantic=None):
    """The index of the multiprocessor running this program (int32)."""
    from .core import current_backend

    return tensor(current_backend().special("mov.u32 $0, %smid;", int32), int32)


@builtin
def _num_warps(_semantic=None):
    """The warps per program this kernel is compiled (or interpreted) for, a constexpr."""
    from .core import current_backend

    return constexpr(current_backend().num_warps)


@builtin
def _num_threads(_semantic=None):
    """The threads per program, a constexpr (32 per warp)."""
    return constexpr(_v(_num_warps()) * 32)


@builtin
def _convert_custom_float8(arg, dst_ty, fp_downcast_rounding=None, _semantic=None):
    """Triton's `convert_custom_float8_sm80` / `_sm70`: fp8e4b15 to fp16 (fp32 if asked), or an
    fp16 / fp32 tile to fp8e4b15. tiles' cast converts the same way on every GPU."""
    x, dt = semantic.to_tensor(arg), _v(dst_ty)
    dt = getattr(dt, "element_ty", dt)
    if x.dtype.is_fp8e4b15():
        return semantic.cast(x, float32 if dt.is_fp32() else float16)
    if not (x.dtype.is_fp16() or x.dtype.is_fp32()):
        raise TypeError(f"convert_custom_float8 converts fp16 or fp32 to fp8e4b15, not {x.dtype}")
    return semantic.cast(x, float8e4b15)


# -- libdevice: `tl.extra.cuda.libdevice`, `tiles.language.extra.libdevice` ----------------------

def _extra_modules():
    import sys
    import types

    from . import libdevice as _libdevice

    extra = types.ModuleType(__name__ + ".extra", "Extra math: libdevice's functions, written in tiles.")
    cuda = types.ModuleType(__name__ + ".extra.cuda", "libdevice for CUDA.")
    extra.libdevice = cuda.libdevice = _libdevice
    extra.cuda = cuda
    cuda.gdc_wait, cuda.gdc_launch_dependents = _gdc_wait, _gdc_launch_dependents
    cuda.globaltimer, cuda.smid = _globaltimer, _smid
    cuda.num_warps, cuda.num_threads = _num_warps, _num_threads
    cuda.convert_custom_float8_sm80 = cuda.convert_custom_float8_sm70 = _convert_custom_float8
    # Where Triton keeps them: `tl.extra.cuda.gdc.gdc_wait`, `tl.extra.cuda.utils.smid`.
    gdc = types.ModuleType(cuda.__name__ + ".gdc", "Grid dependency control (programmatic dependent launch).")
    gdc.gdc_wait, gdc.gdc_launch_dependents = _gdc_wait, _gdc_launch_dependents
    utils = types.ModuleType(cuda.__name__ + ".utils", "Special registers and launch facts.")
    utils.globaltimer, utils.smid, utils.num_warps, utils.num_threads = _globaltimer, _smid, _num_warps, _num_threads
    utils.convert_custom_float8_sm80 = utils.convert_custom_float8_sm70 = _convert_custom_float8
    cuda.gdc, cuda.utils = gdc, utils
    extra.__path__ = []  # a package, so `from tiles.language.extra import libdevice` works
    cuda.__path__ = []
    sys.modules[extra.__name__] = extra
    sys.modules[cuda.__name__] = cuda
    sys.modules[gdc.__name__] = gdc
    sys.modules[utils.__name__] = utils
    sys.modules[extra.__name__ + ".libdevice"] = _libdevice
    sys.modules[cuda.__name__ + ".libdevice"] = _libdevice
    # Older Triton had these under tl.math.
    for name in ("tanh", "sinh", "cosh", "asin", "acos", "atan", "atan2", "asinh", "acosh", "atanh", "tan",
                 "pow", "expm1", "log1p", "log10", "exp10", "trunc", "rint", "round", "nearbyint", "isnan",
                 "isinf", "signbit", "fmod", "copysign", "cbrt", "hypot", "erfc", "fmax", "fmin", "llrint"):
        setattr(math, name, getattr(_libdevice, name))
    return extra


extra = _extra_modules()
_ = _pymath


# -- scans and shape ops ----------------------------------------------------------------------------

def _prod_combine(a, b):
    return semantic.mul(a, b)


@_method
def associative_scan(input, axis, combine_fn, reverse=False, _semantic=None):
    """Inclusive scan of `input` (a tile or a tuple of tiles) along `axis` with `combine_fn`."""
    single = not isinstance(input, (tuple, list))
    out = semantic.scan([input] if single else list(input), _v(axis), _call(combine_fn), _v(reverse))
    return out[0] if single else tuple(out)


@_method
def cumsum(input, axis=0, reverse=False, dtype=None, _semantic=None):
    """Inclusive running sum along `axis` (integers narrower than 32 bits in 32 bits, bf16 in
    fp32, as Triton sums them)."""
    input = _bf16_as_fp32(semantic.to_tensor(input))
    dt = _v(dtype)
    if dt is None:
        d = input.dtype
        dt = int32 if d.is_int_signed() and d.int_bitwidth < 32 else uint32 if (
            d.is_int_unsigned() and d.int_bitwidth < 32) else d
    return semantic.scan([semantic.cast(input, dt)], _v(axis), _sum_combine, _v(reverse))[0]


@_method
def cumprod(input, axis=0, reverse=False, dtype=None, _semantic=None):
    """Inclusive running product along `axis` (bf16 in fp32), in `dtype` where given (Triton
    >= 3.7's parameter)."""
    input = _bf16_as_fp32(semantic.to_tensor(input))
    if _v(dtype) is not None:
        input = semantic.cast(input, _v(dtype))
    return semantic.scan([input], _v(axis), _prod_combine, _v(reverse))[0]


@_method
def permute(input, *dims, _semantic=None):
    """The tile with its dimensions permuted."""
    if len(dims) == 1 and isinstance(_v(dims[0]), (tuple, list)):
        dims = tuple(_v(dims[0]))
    return semantic.permute(input, dims)


@_method
def trans(input, *dims, _semantic=None):
    """Transpose (a 2-D tile) or permute (with `dims`)."""
    return semantic.trans(input, *dims)


@_method
def reshape(input, *shape, can_reorder=False, _semantic=None):
    """The same elements, row-major, in another shape."""
    if len(shape) == 1 and isinstance(_v(shape[0]), (tuple, list)):
        shape = tuple(_v(shape[0]))
    return semantic.reshape(input, shape)


@_method
def item(input, _semantic=None):
    """A one-element tile as a scalar."""
    return semantic.unsplat(input)


@_method
def view(input, *shape, _semantic=None):
    """Like `reshape`."""
    return reshape(input, *shape)


@_method
def ravel(x, can_reorder=False, _semantic=None):
    """The tile flattened to one dimension."""
    x = semantic.to_tensor(x)
    return semantic.reshape(x, (semantic._numel(x.shape),))


@builtin
def join(a, b, _semantic=None):
    """Stacks two tiles along a new last dimension of size 2."""
    return semantic.join(a, b)


@_method
def split(a, _semantic=None):
    """Splits a tile whose last dimension is 2 into its two halves."""
    return semantic.split(a)


@builtin
def interleave(a, b, _semantic=None):
    """Interleaves the last dimension of two tiles."""
    j = semantic.join(a, b)
    if len(j.shape) == 1:
        return j  # two scalars: [a, b]
    return semantic.reshape(j, j.shape[:-2] + (j.shape[-2] * 2,))


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("annotations", "Any", "SimpleNamespace")]


# -- target_info, standard, str_to_ty, void, tuple ------------------------------------------------

def _target_info_module():
    import sys
    import types

    from .core import current_backend

    ti = types.ModuleType(__name__ + ".target_info", "What kernels may ask about the target they are compiled for.")

    def current_target():
        """The target being compiled for (`GPUTarget`; in the interpreter, the GPU present or sm_90)."""
        from .runtime.driver import GPUTarget, active

        t = getattr(current_backend(), "target", None)
        if t is None:
            return active.get_current_target()
        digits = "".join(ch for ch in str(t) if ch.isdigit())
        return GPUTarget("cuda", int(digits or 90), 32)

    def is_cuda():
        return True

    def is_hip():
        return False

    def cuda_capability_geq(major, minor=0):
        """Whether the target's compute capability is at least (major, minor) (compile time)."""
        return current_target().arch >= int(_v(major)) * 10 + int(_v(minor))

    for f in (current_target, is_cuda, is_hip, cuda_capability_geq):
        setattr(ti, f.__name__, f)
    for name in ("is_hip_cdna3", "is_hip_cdna4", "is_hip_gfx1250"):
        setattr(ti, name, is_hip)
    sys.modules[ti.__name__] = ti
    return ti


target_info = _target_info_module()


def _log2(i):
    """floor(log2(i)) of a compile-time int (0 for i <= 1): Triton's `tl.standard._log2`,
    which kernels call for a tile's shape (flash-linear-attention's NSA does)."""
    n = int(_v(i))
    return _builtins.max(n, 1).bit_length() - 1


def _is_power_of_two(i):
    """Whether a compile-time int is a power of two: Triton's `tl.standard._is_power_of_two`."""
    n = int(_v(i))
    return n > 0 and n & (n - 1) == 0


def _standard_module():
    import sys

    # Triton keeps its functions written in the language in `triton.language.standard`; here they
    # are the same objects as tl's.
    sys.modules[__name__ + ".standard"] = sys.modules[__name__]
    return sys.modules[__name__]


standard = _standard_module()

# The type of nothing (what an inline asm without results gives in Triton's type system).
void = dtype.__new__(dtype)
void.name = "void"


def str_to_ty(name, c=None):
    """The type a signature string names: "fp32", "i32", "*fp16", "u8", ..."""
    from .core import _FROM_IR

    name = str(_v(name))
    if name.startswith("*"):
        return pointer_type(str_to_ty(name[1:]))
    if name == "void":
        return void
    if name == "u1":  # Triton's signature name for bool
        return int1
    return dtype(_FROM_IR.get(name, name))


@builtin
def _make_tuple(args=(), type=None, _semantic=None):
    """`tl.tuple(values)`: a tuple of kernel values."""
    return _builtins.tuple(_v(args) if isinstance(_v(args), (list, _builtins.tuple)) else args)


def __getattr__(name):
    # `tl.tuple` without shadowing the built-in `tuple` this module uses.
    if name == "tuple":
        return _make_tuple
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- dot_scaled: microscaled (MX) operands, by upcasting -------------------------------------------

def _e2m1_values(nibbles):
    """fp4 E2M1 codes (0..15) -> fp32: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives."""
    n = semantic.cast(nibbles, int32)
    e = semantic.and_(semantic.shr(n, 1), 3)
    m = semantic.and_(n, 1)
    sub = semantic.mul(semantic.cast(m, float32), 0.5)
    # 2^(e-1) * (1 + m/2) = (2 + m) * 2^e / 4
    norm = semantic.mul(semantic.cast(semantic.mul(semantic.add(m, 2), semantic.shl(1, e)), float32), 0.25)
    mag = semantic.where(semantic.equal(e, 0), sub, norm)
    return semantic.where(semantic.equal(semantic.and_(n, 8), 8), semantic.minus(mag), mag)


def _mx_upcast(x, scale, fmt: str, k_pack: bool, k_axis: int, to):
    """An MX operand (`fmt` elements, e8m0 `scale` per 32 along K, or None) as `to` (bf16, or
    fp16 beside an fp16 operand), as Triton emulates `dot_scaled` where the hardware lacks it:
    decode, scale, upcast."""
    x = semantic.to_tensor(x)
    if len(x.shape) != 2:
        raise ValueError(f"dot_scaled takes 2-D operands, got shape {list(x.shape)}")
    if fmt == "e2m1":
        if x.dtype != uint8 and x.dtype != int8:
            raise TypeError(f"e2m1 operands are packed two to a byte (uint8), got {x.dtype}")
        lo = _e2m1_values(semantic.and_(semantic.cast(x, int32), 15))
        hi = _e2m1_values(semantic.and_(semantic.shr(semantic.cast(x, int32), 4), 15))
        pairs = semantic.join(lo, hi)  # [R, C, 2]: the first element in the low bits
        packed_axis = k_axis if k_pack else 1 - k_axis
        r, c = x.shape
        if packed_axis == 1:
            v = semantic.reshape(pairs, (r, 2 * c))
        else:
            v = semantic.reshape(semantic.permute(pairs, (0, 2, 1)), (2 * r, c))
    elif fmt in ("e4m3", "e5m2"):
        fp8 = float8e4nv if fmt == "e4m3" else float8e5
        v = semantic.cast(x if x.dtype.is_fp8() else semantic.bitcast(x, fp8), float32)
    elif fmt in ("bf16", "fp16"):
        v = semantic.cast(x, float32)
    else:
        raise ValueError(f"dot_scaled formats are e2m1, e4m3, e5m2, bf16 and fp16, not {fmt!r}")
    if scale is not None:
        s = semantic.cast(semantic.to_tensor(scale), int32)
        # e8m0: 2^(s - 127), built from the exponent bits (exact; 2^-127 is fp32's 0x00400000);
        # 255 is NaN.
        bits = semantic.where(semantic.equal(s, 0), 0x00400000, semantic.shl(s, 23))
        f = semantic.bitcast(bits, float32)
        f = semantic.where(semantic.equal(s, 255), float("nan"), f)
        rows, k = (v.shape[0], v.shape[1]) if k_axis == 1 else (v.shape[1], v.shape[0])
        if tuple(f.shape) != (rows, k // 32):
            raise ValueError(f"dot_scaled: a scale of shape {list(f.shape)} for an operand of shape {list(v.shape)} "
                             f"(one per 32 elements along K: {[rows, k // 32]})")
        if k_axis == 1:  # lhs [M, K], scale [M, K/32]
            v = semantic.reshape(semantic.mul(semantic.reshape(v, (rows, k // 32, 32)), semantic.expand_dims(f, 2)),
                                 (rows, k))
        else:  # rhs [K, N], scale [N, K/32]
            ft = semantic.expand_dims(semantic.permute(f, (1, 0)), 1)  # [K/32, 1, N]
            v = semantic.reshape(semantic.mul(semantic.reshape(v, (k // 32, 32, rows)), ft), (k, rows))
    return semantic.cast(v, to)


@builtin
def dot_scaled(lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, acc=None, fast_math=False, lhs_k_pack=True,
               rhs_k_pack=True, out_dtype=float32, _semantic=None):
    """The product of two microscaled (MX) blocks: `lhs` [M, K] and `rhs` [K, N] in `e2m1` (two
    per byte, the first in the low bits), `e4m3`, `e5m2`, `bf16` or `fp16`, each with an e8m0
    scale (uint8, [M, K/32] and [N, K/32]) or None. As Triton does where the hardware has no MX
    instructions (Hopper included), the operands are decoded, scaled and upcast to bf16 (to fp16
    when either operand is fp16), then multiplied with fp32 accumulation."""
    if _v(out_dtype) != float32:
        raise ValueError("dot_scaled accumulates in float32 only")
    fmts = (str(_v(lhs_format)), str(_v(rhs_format)))
    to = float16 if "fp16" in fmts else bfloat16
    a = _mx_upcast(lhs, _v(lhs_scale), fmts[0], bool(_v(lhs_k_pack)), k_axis=1, to=to)
    b = _mx_upcast(rhs, _v(rhs_scale), fmts[1], bool(_v(rhs_k_pack)), k_axis=0, to=to)
    return semantic.dot(a, b, _v(acc), out_dtype=float32)


class const:
    """A parameter annotation marking a pointer to constant data (Triton's `tl.const`): storing
    through it is a compile error, and it differs in type from a plain pointer where branches
    or returns meet."""


@builtin
def condition(arg1, disable_licm=False, _semantic=None):
    """`while tl.condition(c, disable_licm=True):` — a `while` loop's condition with hints for
    the compiler; tiles reads the condition and ignores the hints."""
    return arg1


pi32_t = pointer_type(int32)


# -- Triton's way of declaring library functions: `@core.extern` + `core.extern_elementwise` ------

def extern_elementwise(lib_name, lib_path, args, arg_type_symbol_dict, is_pure, _semantic=None, **_ignored):
    """Triton's `core.extern_elementwise`: the function of `arg_type_symbol_dict` whose argument
    types match `args` (`{(dtypes...): (symbol, result dtype)}`), elementwise. tiles links no
    library: a libdevice symbol (`__nv_expf`, `__nv_pow`, ...) is tiles' own function of that
    name (`tl.extra.libdevice`); any other is a compile error that says so."""
    from . import libdevice as _libdevice

    tensors = [semantic.to_tensor(a) for a in args]
    types_ = tuple(t.dtype for t in tensors)
    entry = arg_type_symbol_dict.get(types_)
    if entry is None:
        raise TypeError(f"extern_elementwise: no function of {lib_name or 'the library'} takes "
                        f"({', '.join(str(t) for t in types_)}); it has {list(arg_type_symbol_dict)}")
    symbol, ret = entry[0], _v(entry[1])
    name = symbol[5:] if symbol.startswith("__nv_") else None
    fn = None
    if name is not None:
        for cand in (name, name[:-1] if name[-1:] in ("f", "d") else None):
            if cand and cand in _libdevice.__all__:
                fn = getattr(_libdevice, cand)
                break
    if fn is None:
        raise NotImplementedError(f"extern_elementwise: {symbol!r} of {lib_path or lib_name or 'an external library'}"
                                  " cannot be linked: tiles links no external library, and has libdevice's "
                                  "__nv_* functions as its own (tl.extra.libdevice)")
    out = fn(*tensors)
    return out if not isinstance(out, core.tensor) or out.dtype == ret else semantic.cast(out, ret)


def extern(fn):
    """Triton's `core.extern`: marks a library function written with `extern_elementwise`."""
    return builtin(fn)


core.extern, core.extern_elementwise = extern, extern_elementwise


def _register_submodules():
    # `import triton.language.math`, `from triton.language.random import philox`, ...: Triton's
    # submodules are namespaces of this module here.
    import sys

    for name in ("math", "random", "core"):
        obj = globals().get(name)
        if obj is not None:
            sys.modules.setdefault(f"{__name__}.{name}", obj)


_register_submodules()
