"""The meaning of every language op, shared by the compiler and the interpreter.

Type promotion, broadcasting, literal handling and argument checks live here, once. Each
function ends in a call to the active backend (`core.current_backend()`): the IR builder
when compiling, numpy when interpreting. Backend methods take and return handles.
"""

from __future__ import annotations

import builtins
from typing import Any, List, Optional, Sequence, Tuple

from . import core
from .core import dtype, pointer_type, tensor


class TilesTypeError(TypeError):
    """An operand's dtype does not fit the op."""


_be = core.current_backend  # the active backend (the IR builder, or the interpreter's numpy)


_unwrap = core._unwrap


def _is_literal(x: Any) -> bool:
    """A Python number (or constexpr of one): it takes the other operand's type. A number a
    kernel assigned to a name is a tensor (as in Triton) and takes part in promotion."""
    return not isinstance(x, tensor) and isinstance(_unwrap(x), (bool, int, float))


def literal_type(x: Any) -> dtype:
    """The dtype a Python literal takes (Triton's rules)."""
    x = _unwrap(x)
    if isinstance(x, bool):
        return core.int1
    if isinstance(x, int):
        if -(2**31) <= x < 2**31:
            return core.int32
        if 2**31 <= x < 2**32:
            return core.uint32
        if -(2**63) <= x < 2**63:
            return core.int64
        if 2**63 <= x < 2**64:
            return core.uint64
        raise ValueError(f"integer {x} does not fit in 64 bits")
    if isinstance(x, float):
        a = builtins.abs(x)
        if a == float("inf") or a == 0.0 or x != x or 2.0**-126 <= a <= (2 - 2**-23) * 2.0**127:
            return core.float32
        return core.float64
    raise TypeError(f"cannot use {x!r} of type {type(x).__name__} as a tensor")


def make(handle: Any, dt: dtype, shape: Sequence[int] = ()) -> tensor:
    return tensor(handle, dt, shape)


def scalar_constant(value: Any, dt: dtype, shape: tuple = ()) -> tensor:
    """`value` as a constant of `dt`: a scalar, or a tile of `shape` holding it."""
    value = _unwrap(value)
    if dt.is_int() and not isinstance(value, bool):
        value = int(value)
    if dt.is_bool():
        value = int(bool(value))
    if dt.is_floating():
        value = float(value)
    return make(_be().constant(value, dt, shape), dt, shape)


def assigned(x: Any) -> Any:
    """What a name holds after `name = x` (Triton's rule): Python numbers, constexpr ones
    included, become scalar tensors (which remember the number); tuples element by element;
    anything else as it is."""
    v = _unwrap(x)
    if isinstance(v, (bool, int, float)) and not isinstance(x, tensor):
        t = scalar_constant(v, literal_type(v))
        return core.constant_tensor(t.handle, t.dtype, v)
    if type(x) is tuple:
        return tuple(assigned(e) for e in x)
    return x


def to_tensor(x: Any, dt: Optional[dtype] = None) -> tensor:
    if isinstance(x, tensor):
        return x
    x = _unwrap(x)
    if isinstance(x, (bool, int, float)):
        return scalar_constant(x, dt or literal_type(x))
    if isinstance(x, tensor):
        return x
    raise TypeError(f"cannot use {x!r} of type {type(x).__name__} as a tensor")


def _int_range(dt: dtype):
    bits = dt.int_bitwidth
    if dt.is_bool():
        return 0, 1
    if dt.is_int_unsigned():
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def integer_promote(a: dtype, b: dtype) -> dtype:
    ra, rb = a.int_bitwidth, b.int_bitwidth
    ua, ub = a.is_int_unsigned(), b.is_int_unsigned()
    if ua == ub:
        return a if ra > rb else b
    if ua:
        return a if ra >= rb else b
    return b if rb >= ra else a


# computation_type's answers: a kernel asks the same few questions many times.
_COMPUTATION_TYPES: dict = {}


def computation_type(a: dtype, a_lit: bool, b: dtype, b_lit: bool, div_or_mod: bool) -> dtype:
    key = (a.name, a_lit, b.name, b_lit, div_or_mod)
    t = _COMPUTATION_TYPES.get(key)
    if t is None:
        t = _COMPUTATION_TYPES[key] = _computation_type(a, a_lit, b, b_lit, div_or_mod)
    return t


def _computation_type(a: dtype, a_lit: bool, b: dtype, b_lit: bool, div_or_mod: bool) -> dtype:
    # A literal of a lower or equal kind (bool < uint < int < float) does not take part.
    if a_lit != b_lit:
        lit, ten = (a, b) if a_lit else (b, a)
        if lit.kind() <= ten.kind():
            a = b = ten
    if a.is_fp64() or b.is_fp64():
        return core.float64
    if div_or_mod and (a.is_floating() or b.is_floating()):
        return core.float32
    if a.is_fp32() or b.is_fp32():
        return core.float32
    if a.is_fp16() or b.is_fp16():
        return core.float16
    if a.is_bf16() and b.is_bf16():
        return core.bfloat16
    if a.is_bf16() or b.is_bf16():
        return core.float32
    if a.is_fp8() and b.is_fp8():
        return a if a == b else core.float16
    if a.is_floating() or b.is_floating():
        raise TilesTypeError(f"cannot combine {a} and {b}; cast one of them first")
    if div_or_mod and a.is_int_signed() != b.is_int_signed():
        raise TilesTypeError(
            f"Cannot use /, // or % with {a} and {b} because they have different signedness; cast one of them "
            "first")
    return integer_promote(a, b)


def _to_computation_type(x: Any, dt: dtype) -> tensor:
    if isinstance(x, tensor):
        return cast(x, dt)
    return scalar_constant(_literal_in_range(_unwrap(x), dt), dt)


def _literal_in_range(v: Any, dt: dtype) -> Any:
    """A Python number that meets a tensor of `dt` (an int one drops a float's fraction), or
    the error of one out of its range."""
    if dt.is_int():
        if isinstance(v, float):
            v = int(v)
        lo, hi = _int_range(dt)
        if v < 0 and dt.is_int_unsigned():
            raise ValueError(f"cannot combine an unsigned tensor ({dt}) with the negative literal {v}; cast first")
        if not lo <= v <= hi:
            raise ValueError(f"literal {v} is out of range for {dt}")
    return v


def _check_ptr(a: dtype, b: dtype, allow_ptr_a: bool) -> None:
    if a.is_ptr():
        if not allow_ptr_a:
            raise TilesTypeError(f"invalid operands of type {a} and {b}")
        if b.is_ptr() and a != b:
            raise TilesTypeError(f"invalid operands of type {a} and {b}")
        if b.is_floating():
            raise TilesTypeError(f"cannot add a float ({b}) to a pointer ({a})")


def binary_operands(lhs: Any, rhs: Any, allow_lhs_ptr=False, allow_rhs_ptr=False, arithmetic=True,
                    div_or_mod=False):
    """Promotes and broadcasts two operands (Triton's `binary_op_type_checking_impl`)."""
    lt, rt = type(lhs), type(rhs)
    if lt is tensor and not div_or_mod and type(lhs.dtype) is dtype:
        if rt is tensor and lhs.dtype is rhs.dtype:
            # Two numeric tensors of one dtype: nothing to promote, at most a broadcast.
            return (lhs, rhs) if lhs.shape == rhs.shape else broadcast_pair(lhs, rhs)
        number = _number(rhs) if arithmetic else None
        if number is not None:
            c = _literal_operand(number, lhs, False)
            if c is not None:
                return lhs, c
    elif rt is tensor and not div_or_mod and arithmetic and type(rhs.dtype) is dtype:
        number = _number(lhs)
        if number is not None:
            c = _literal_operand(number, rhs, True)
            if c is not None:
                return c, rhs
    lhs_lit, rhs_lit = _is_literal(lhs), _is_literal(rhs)
    if not lhs_lit and not isinstance(lhs, tensor):
        raise TypeError(f"unsupported operand {_unwrap(lhs)!r}")
    if not rhs_lit and not isinstance(rhs, tensor):
        raise TypeError(f"unsupported operand {_unwrap(rhs)!r}")
    lt = literal_type(lhs) if lhs_lit else lhs.dtype
    rt = literal_type(rhs) if rhs_lit else rhs.dtype
    _check_ptr(lt, rt, allow_lhs_ptr)
    _check_ptr(rt, lt, allow_rhs_ptr)
    if arithmetic and not lt.is_ptr() and not rt.is_ptr():
        ct = computation_type(lt, lhs_lit, rt, rhs_lit, div_or_mod)
        lhs, rhs = _to_computation_type(lhs, ct), _to_computation_type(rhs, ct)
    else:
        lhs, rhs = to_tensor(lhs), to_tensor(rhs)
    return broadcast_pair(lhs, rhs)


def _number(x: Any) -> Any:
    """`x` as a Python int or float where it is one, plain or a constexpr (bools excluded);
    else None."""
    if type(x) is core.constexpr:
        x = x.value
    return x if type(x) is int or type(x) is float else None


def _literal_operand(value: Any, t: tensor, literal_left: bool) -> Optional[tensor]:
    """`binary_operands` for a Python number (not a bool) and a numeric tensor `t` whose type
    the number takes: the number as a constant of `t`'s type and shape (what the general path's
    scalar constant, splat to the shape, folds to). None where the number widens the type
    (an int32 tile and a float): the general path casts the tensor too."""
    lit = literal_type(value)
    ct = (computation_type(lit, True, t.dtype, False, False) if literal_left
          else computation_type(t.dtype, False, lit, True, False))
    if ct is not t.dtype:
        return None
    return scalar_constant(_literal_in_range(value, ct), ct, t.shape)


# -- shapes ---------------------------------------------------------------------------------

def broadcast_shapes(a: Sequence[int], b: Sequence[int]) -> tuple:
    a, b = tuple(a), tuple(b)
    if len(a) < len(b):
        a = (1,) * (len(b) - len(a)) + a
    if len(b) < len(a):
        b = (1,) * (len(a) - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise ValueError(f"cannot broadcast shapes {list(a)} and {list(b)}")
    return tuple(out)


def broadcast_to(x: tensor, shape: Sequence[int]) -> tensor:
    if shape is x.shape:
        return x
    return _broadcast_to(x, tuple(int(_unwrap(s)) for s in shape))


def _broadcast_to(x: tensor, shape: tuple) -> tensor:
    """`broadcast_to` for a shape that is already a tuple of ints."""
    if x.shape == shape:
        return x
    if not x.shape:
        return make(_be().splat(x, shape), x.dtype, shape)
    src = x.shape
    while len(src) < len(shape):
        x = expand_dims(x, 0)
        src = x.shape
    if broadcast_shapes(src, shape) != shape:
        raise ValueError(f"cannot broadcast shape {list(src)} to {list(shape)}")
    return make(_be().broadcast(x, shape), x.dtype, shape)


def broadcast_pair(a: tensor, b: tensor):
    if a.shape == b.shape:
        return a, b
    shape = broadcast_shapes(a.shape, b.shape)
    return _broadcast_to(a, shape), _broadcast_to(b, shape)


def gather(src: Any, index: Any, axis: Any) -> tensor:
    """`out[.., i, ..] = src[.., index[.., i, ..], ..]` along `axis`: the result has `index`'s
    shape, whose other dimensions must equal `src`'s."""
    src, index = to_tensor(src), to_tensor(index)
    rank = len(src.shape)
    a = int(_unwrap(axis))
    if rank == 0 or not -rank <= a < rank:
        raise ValueError(f"gather: axis {a} is out of range for a tile of rank {rank}")
    a %= rank
    if len(index.shape) != rank or not index.dtype.is_int():
        raise ValueError(f"gather: the index must be an integer tile of the source's rank {rank}, got "
                         f"{index.dtype}{list(index.shape)}")
    if any(d != a and x != y for d, (x, y) in enumerate(zip(src.shape, index.shape))):
        raise ValueError(f"gather: the index's shape {list(index.shape)} must match the source's "
                         f"{list(src.shape)} in every dimension but axis {a}")
    return make(_be().gather(src, index, a), src.dtype, tuple(index.shape))


def expand_dims(x: Any, axis: Any) -> tensor:
    x = to_tensor(x)
    axes = _unwrap(axis)
    axes = [int(_unwrap(a)) for a in (axes if isinstance(axes, (list, tuple)) else [axes])]
    # Axes count in the result (`result.shape[a] == 1` for each), negative ones from its end.
    rank = len(x.shape) + len(axes)
    for a in axes:
        if not -rank <= a < rank:
            raise ValueError(f"invalid axis {a} for expand_dims: the result has rank {rank}")
    axes = [a % rank for a in axes]
    if len(set(axes)) != len(axes):
        raise ValueError(f"expand_dims: duplicate axes, normalized axes = {axes}")
    for a in sorted(axes):
        shape = x.shape[:a] + (1,) + x.shape[a:]
        if not x.shape:
            x = make(_be().splat(x, shape), x.dtype, shape)
        else:
            x = make(_be().expand_dims(x, a), x.dtype, shape)
    return x


def subscript(x: tensor, slices: Any) -> tensor:
    if not isinstance(slices, tuple):
        slices = (slices,)
    out = x
    dim = 0
    for s in slices:
        s = _unwrap(s)
        if s is None:
            # As Triton: a scalar's new axis is its only one, wherever the index puts it
            # (`pid[:, None]` is a tensor of shape [1]).
            out = expand_dims(out, dim if out.shape else 0)
            dim += 1
        elif isinstance(s, slice) and s.start is None and s.stop is None and s.step is None:
            dim += 1
        elif s is Ellipsis:
            dim = len(out.shape) - (len(slices) - slices.index(Ellipsis) - 1)
        else:
            raise IndexError(f"unsupported tensor index {s!r}: only None and ':' are allowed")
    return out


def hint(x: Any, kind: str, values: Any) -> Any:
    """`multiple_of` / `max_contiguous` / `max_constancy`: the value, with a promise for the
    compiler's axis analysis (one number per dimension, or one for all)."""
    if not isinstance(x, tensor):
        return x
    vals = _unwrap(values)
    vals = [int(_unwrap(v)) for v in vals] if isinstance(vals, (list, tuple)) else [int(vals)]
    rank = max(len(x.shape), 1)
    if len(vals) not in (1, rank):
        raise ValueError(f"{kind}: {len(vals)} values for a tensor of rank {len(x.shape)}")
    if any(v < 0 for v in vals):
        raise ValueError(f"{kind}: values must be positive, got {vals}")
    return make(_be().hint(x, kind, vals), x.dtype, x.shape)


def permute(x: Any, dims: Sequence[Any]) -> tensor:
    x = to_tensor(x)
    dims = tuple(int(_unwrap(d)) for d in dims)
    if sorted(dims) != list(range(len(x.shape))):
        raise ValueError(f"permute: {list(dims)} is not a permutation of the {len(x.shape)} dimensions")
    if dims == tuple(range(len(x.shape))):
        return x
    return make(_be().permute(x, dims), x.dtype, tuple(x.shape[d] for d in dims))


def trans(x: Any, *dims: Any) -> tensor:
    x = to_tensor(x)
    if len(dims) == 1 and isinstance(_unwrap(dims[0]), (tuple, list)):
        dims = tuple(_unwrap(dims[0]))
    if not dims:  # the last two dimensions swapped: a (batched) transpose
        r = len(x.shape)
        if r < 2:
            raise ValueError(f"trans without dims needs a tile of at least 2 dimensions, got shape {list(x.shape)}")
        dims = tuple(range(r - 2)) + (r - 1, r - 2)
    return permute(x, dims)


def reshape(x: Any, shape: Sequence[Any]) -> tensor:
    x = to_tensor(x)
    shape = tuple(int(_unwrap(s)) for s in shape)
    n = 1
    for d in shape:
        n *= d
    if n != _numel(x.shape):
        raise ValueError(f"cannot reshape a tile of shape {list(x.shape)} into {list(shape)}")
    if shape == x.shape:
        return x
    if not shape:
        return unsplat(x)
    if not x.shape:
        return _broadcast_to(x, shape)
    return make(_be().reshape(x, shape), x.dtype, shape)


def _first(a: tensor, b: tensor) -> tensor:
    return a


def unsplat(x: Any) -> tensor:
    """A one-element tile as a scalar (`x.item()`, `reshape(x, [])`, `if` on a one-element
    condition)."""
    x = to_tensor(x)
    if not x.shape:
        return x
    if _numel(x.shape) != 1:
        raise ValueError(f"only a tile of one element converts to a scalar, got shape {list(x.shape)}")
    if x.dtype.is_ptr():
        raise TilesTypeError("a one-element tile of pointers does not convert to a scalar; index the pointer "
                             "with a scalar offset instead")
    return reduce([x], None, _first)[0]


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def join(a: Any, b: Any) -> tensor:
    a, b = binary_operands(a, b, True, True)
    if not a.shape:
        # Two scalars join into a tile of shape [2].
        j = join(expand_dims(a, 0), expand_dims(b, 0))
        return make(_be().reshape(j, (2,)), j.dtype, (2,))
    return make(_be().join(a, b), a.dtype, a.shape + (2,))


def split(x: Any):
    x = to_tensor(x)
    if not x.shape or x.shape[-1] != 2:
        raise ValueError(f"split needs a tile whose last dimension is 2, got shape {list(x.shape)}")
    if len(x.shape) == 1:
        # A tile of shape [2] splits into two scalars.
        a, b = split(expand_dims(x, 0))
        return unsplat(a), unsplat(b)
    ha, hb = _be().split(x)
    shape = x.shape[:-1]
    return make(ha, x.dtype, shape), make(hb, x.dtype, shape)


def scan(inputs: Sequence[Any], axis: Any, combine, reverse: bool = False) -> list:
    ts = [to_tensor(x) for x in inputs]
    shape = ts[0].shape
    for t in ts:
        if t.shape != shape:
            raise ValueError(f"scan operands differ in shape: {list(shape)} and {list(t.shape)}")
    if not shape:
        return ts
    a = _norm_axis(axis, len(shape))
    handles = _be().scan(ts, a, combine, bool(_unwrap(reverse)))
    return [make(h, t.dtype, shape) for h, t in zip(handles, ts)]


# -- casts ----------------------------------------------------------------------------------

def cast(x: Any, dt: Any) -> tensor:
    if isinstance(x, tensor):
        xd = x.dtype
        if xd is dt or (type(xd) is dtype and type(dt) is dtype and xd.name == dt.name):
            return x
    x = to_tensor(x)
    dt = _unwrap(dt)
    if not isinstance(dt, dtype):
        raise TypeError(f"expected a dtype, got {dt!r}")
    if x.dtype == dt:
        return x
    if x.dtype.is_ptr() != dt.is_ptr():
        # Addresses held as 64-bit integers (tables of pointers) become pointers and back.
        num = dt if x.dtype.is_ptr() else x.dtype
        if num.is_int() and num.primitive_bitwidth == 64:
            return make(_be().bitcast(x, dt), dt, x.shape)
        if x.dtype.is_ptr() and dt.is_int1():
            # A pointer's truth value (`if ptr:`) is whether it is null, as in Triton.
            return not_equal(cast(x, core.int64), 0)
        raise TilesTypeError(f"cannot cast {x.dtype} to {dt} (pointers convert to and from 64-bit integers only)")
    return make(_be().cast(x, dt), dt, x.shape)


def bitcast(x: Any, dt: Any) -> tensor:
    x = to_tensor(x)
    dt = _unwrap(dt)
    if x.dtype == dt:
        return x
    if x.dtype.is_ptr() != dt.is_ptr():
        num = dt if x.dtype.is_ptr() else x.dtype
        if not (num.is_int() and num.primitive_bitwidth == 64):
            raise TilesTypeError(f"cannot bitcast {x.dtype} to {dt}: widths differ")
    elif x.dtype.primitive_bitwidth != dt.primitive_bitwidth:
        raise TilesTypeError(f"cannot bitcast {x.dtype} to {dt}: widths differ")
    return make(_be().bitcast(x, dt), dt, x.shape)


# -- arithmetic -----------------------------------------------------------------------------

def _binary(op: str, a: tensor, b: tensor) -> tensor:
    if a.dtype.is_fp8():
        # fp8 arithmetic happens in fp16, rounded back to the operands' fp8 type.
        dt = a.dtype
        r = _binary(op, cast(a, core.float16), cast(b, core.float16))
        return cast(r, dt)
    return make(_be().binary(op, a, b), a.dtype, a.shape)


def _check_overflow(op: str, a: tensor, b: tensor) -> None:
    """Debug mode's overflow check of an integer `+`, `-` or `*` narrower than 64 bits
    (Triton's `sanitize_overflow`): the exact result, computed in int64, must lie in the
    operands' type's range, unsigned types included."""
    dt = a.dtype
    if not dt.is_int() or dt.is_int1() or dt.primitive_bitwidth >= 64 or not _be().sanitize_overflow:
        return
    exact = _binary(op, cast(a, core.int64), cast(b, core.int64))
    ok = and_(less_equal(exact, dt.get_int_max_value()), greater_equal(exact, dt.get_int_min_value()))
    device_assert(ok, f"int{dt.primitive_bitwidth} overflow detected for operation {op}")


def add(a: Any, b: Any, sanitize_overflow: bool = False) -> tensor:
    """`a + b`; with `sanitize_overflow` (the operator's, and `tl.add`'s default), debug mode
    checks integer overflow."""
    a, b = binary_operands(a, b, True, True)
    if a.dtype.is_ptr() and b.dtype.is_ptr():
        raise TilesTypeError("cannot add two pointers")
    if b.dtype.is_ptr():
        a, b = b, a
    if a.dtype.is_ptr():
        return make(_be().addptr(a, b), a.dtype, a.shape)
    if sanitize_overflow:
        _check_overflow("add", a, b)
    return _binary("add", a, b)


def sub(a: Any, b: Any, sanitize_overflow: bool = False) -> tensor:
    a, b = binary_operands(a, b, True, False)
    if a.dtype.is_ptr():
        return make(_be().addptr(a, minus(b)), a.dtype, a.shape)
    if sanitize_overflow:
        _check_overflow("sub", a, b)
    return _binary("sub", a, b)


def mul(a: Any, b: Any, sanitize_overflow: bool = False) -> tensor:
    a, b = binary_operands(a, b)
    if sanitize_overflow:
        _check_overflow("mul", a, b)
    return _binary("mul", a, b)


def truediv(a: Any, b: Any) -> tensor:
    """`a / b`: fp32 as div.full.f32 (within 2 ulp, as Triton lowers `/`), other floats exact."""
    return _binary("div", *_div_operands(a, b))


def div_rn(a: Any, b: Any) -> tensor:
    """`a / b` rounded to nearest even (IEEE), fp32 included."""
    a, b = _div_operands(a, b)
    if a.dtype.is_fp8():
        return _binary("div", a, b)  # in fp16, rounded once to fp8
    return make(_be().div_rn(a, b), a.dtype, a.shape)


def _div_operands(a: Any, b: Any) -> Tuple[tensor, tensor]:
    a, b = binary_operands(a, b, div_or_mod=True)
    if a.dtype.is_int() and b.dtype.is_int():
        a, b = cast(a, core.float32), cast(b, core.float32)
    elif a.dtype.is_floating() and b.dtype.is_int():
        b = cast(b, a.dtype)
    elif a.dtype.is_int() and b.dtype.is_floating():
        a = cast(a, b.dtype)
    elif a.dtype != b.dtype:
        if a.dtype.fp_mantissa_width > b.dtype.fp_mantissa_width:
            b = cast(b, a.dtype)
        else:
            a = cast(a, b.dtype)
    return a, b


def floordiv(a: Any, b: Any) -> tensor:
    a, b = binary_operands(a, b, div_or_mod=True)
    if not (a.dtype.is_int() and b.dtype.is_int()):
        raise TilesTypeError(f"// needs integers, got {a.dtype} and {b.dtype}")
    return _binary("div", a, b)


def mod(a: Any, b: Any) -> tensor:
    a, b = binary_operands(a, b, div_or_mod=True)
    return _binary("rem", a, b)


def _bitwise(op: str, a: Any, b: Any) -> tensor:
    a, b = binary_operands(a, b)
    if not (a.dtype.is_int() and b.dtype.is_int()):
        raise TilesTypeError(f"invalid operands of type {a.dtype} and {b.dtype} for a bitwise op: it needs integers")
    return _binary(op, a, b)


def and_(a, b):
    return _bitwise("and", a, b)


def or_(a, b):
    return _bitwise("or", a, b)


def xor_(a, b):
    return _bitwise("xor", a, b)


def shl(a, b):
    return _bitwise("shl", a, b)


def shr(a, b):
    # As in Triton, the left operand's own signedness picks the shift: a signed value shifted by a
    # wider-or-equal unsigned amount is promoted to unsigned, yet still shifted arithmetically.
    left_signed = not _is_literal(a) and isinstance(a, tensor) and a.dtype.is_int_signed()
    x, y = binary_operands(a, b)
    if left_signed and x.dtype.is_int_unsigned():
        signed = core.dtype_from_ir(f"i{x.dtype.primitive_bitwidth}")
        return bitcast(_bitwise("shr", bitcast(x, signed), bitcast(y, signed)), x.dtype)
    return _bitwise("shr", x, y)


def logical_and(a, b):
    return and_(cast(to_tensor(a), core.int1), cast(to_tensor(b), core.int1))


def logical_or(a, b):
    return or_(cast(to_tensor(a), core.int1), cast(to_tensor(b), core.int1))


def minus(a: Any) -> tensor:
    a = to_tensor(a)
    if a.dtype.is_ptr():
        raise TilesTypeError("cannot negate a pointer")
    if a.dtype.is_fp8e4b8() or a.dtype.is_fp8e5b16():
        return cast(minus(cast(a, core.float16)), a.dtype)  # FNUZ: 0x80 is NaN, not -0
    if a.dtype.is_fp8():
        # The sign bit flips: exact, as fp8 values are sign and magnitude.
        return bitcast(xor_(bitcast(a, core.uint8), 0x80), a.dtype)
    return make(_be().unary("neg", a), a.dtype, a.shape)


def invert(a: Any) -> tensor:
    a = to_tensor(a)
    if not a.dtype.is_int():
        raise TilesTypeError(f"~ needs an integer, got {a.dtype}")
    return make(_be().unary("not", a), a.dtype, a.shape)


def not_(a: Any) -> tensor:
    a = to_tensor(a)
    return invert(cast(a, core.int1)) if not a.dtype.is_bool() else invert(a)


def _compare(pred: str, a: Any, b: Any) -> tensor:
    a, b = binary_operands(a, b, True, True)
    if a.dtype.is_fp8():
        a, b = cast(a, core.float16), cast(b, core.float16)
    return make(_be().compare(pred, a, b), core.int1, a.shape)


def less(a, b):
    return _compare("lt", a, b)


def less_equal(a, b):
    return _compare("le", a, b)


def greater(a, b):
    return _compare("gt", a, b)


def greater_equal(a, b):
    return _compare("ge", a, b)


def equal(a, b):
    return _compare("eq", a, b)


def not_equal(a, b):
    return _compare("ne", a, b)


def where(cond: Any, x: Any, y: Any) -> tensor:
    cond = cast(to_tensor(cond), core.int1)
    x, y = binary_operands(x, y, True, True)
    shape = broadcast_shapes(cond.shape, x.shape)
    cond, x, y = broadcast_to(cond, shape), broadcast_to(x, shape), broadcast_to(y, shape)
    return make(_be().select(cond, x, y), x.dtype, shape)


def _keep_nan(r: tensor, *xs: tensor) -> tensor:
    """`r`, except where one of `xs` is NaN: that NaN (`PropagateNan.ALL`)."""
    for x in reversed(xs):
        r = where(not_equal(x, x), x, r)
    return r


def maximum(a: Any, b: Any, propagate_nan: bool = False) -> tensor:
    a, b = binary_operands(a, b)
    r = _binary("max", a, b)
    return _keep_nan(r, a, b) if propagate_nan and r.dtype.is_floating() else r


def minimum(a: Any, b: Any, propagate_nan: bool = False) -> tensor:
    a, b = binary_operands(a, b)
    r = _binary("min", a, b)
    return _keep_nan(r, a, b) if propagate_nan and r.dtype.is_floating() else r


def clamp(x: Any, lo: Any, hi: Any, propagate_nan: bool = False) -> tensor:
    # As Triton: the bounds become tensors first (a Python float is fp32, so an fp16 `x` clamps in
    # fp32), bf16 computes in fp32, and only `x`'s NaN propagates (PropagateNan.ALL).
    lo_n, hi_n = _number(lo), _number(hi)
    x, lo, hi = (to_tensor(v) for v in (x, lo, hi))
    x, lo, hi = (cast(v, core.float32) if v.dtype.is_bf16() else v for v in (x, lo, hi))
    lo, hi = binary_operands(lo, hi)
    x, lo = binary_operands(x, lo)
    x, hi = binary_operands(x, hi)
    if (not propagate_nan and hi_n is not None and lo_n is not None and 0 < hi_n < float("inf")
            and lo_n == -hi_n and (x.dtype.is_fp32() or x.dtype.is_fp16())):
        from . import language

        if language.target_info.cuda_capability_geq(9):
            # As Triton on sm_90 (`min.xorsign.abs`): min(|x|, hi) with x's sign, so a NaN x
            # gives hi signed as the NaN is, where max-then-min gives lo. One FMNMX and one LOP3.
            ity, sign = (core.int32, -0x80000000) if x.dtype.is_fp32() else (core.int16, -0x8000)
            m = bitcast(minimum(abs_(x), hi), ity)
            return bitcast(or_(m, and_(bitcast(x, ity), sign)), x.dtype)
    r = minimum(maximum(x, lo), hi)
    return _keep_nan(r, x) if propagate_nan and r.dtype.is_floating() else r


def fma(a: Any, b: Any, c: Any) -> tensor:
    # As Triton: every operand a tensor first (a Python float is fp32), then promoted in pairs.
    a, b, c = (to_tensor(v) for v in (a, b, c))
    a, b = binary_operands(a, b)
    a, c = binary_operands(a, c)
    b, c = binary_operands(b, c)
    a = broadcast_to(a, c.shape)
    if not a.dtype.is_floating() or a.dtype.is_fp8():
        return add(mul(a, b), c)
    return make(_be().fma(a, b, c), a.dtype, a.shape)


def rounded(op: str, mode: str, args: Sequence[Any], out: Any = None) -> tensor:
    """`op` (add, sub, mul, fma, div, sqrt, rcp, or cvt to `out`) rounded in direction `mode`
    (rz, rd: toward -inf, ru: toward +inf; rn, to nearest, for add, sub and mul: never fused
    into an fma, whatever `enable_fp_fusion` says), as one PTX instruction with that rounding
    modifier (libdevice's `add_rd`, `int2float_ru`, ...). Operands are fp32 or fp64 (the
    conversions' are integers or fp64), broadcast together."""
    ts = [to_tensor(a) for a in args]
    if op == "cvt":
        out = _unwrap(out)
    else:
        for t in ts:
            if t.dtype not in (core.float32, core.float64):
                raise TilesTypeError(f"{op} rounded toward {mode} takes fp32 or fp64 operands, got {t.dtype}")
        if len(ts) > 1:
            f64 = any(t.dtype == core.float64 for t in ts)
            ts = [cast(t, core.float64 if f64 else core.float32) for t in ts]
        out = ts[0].dtype
    shape: tuple = ()
    for t in ts:
        shape = broadcast_shapes(shape, t.shape)
    ts = [broadcast_to(t, shape) for t in ts]
    return make(_be().rounded(op, mode, ts, out), out, shape)


def approx(kind: str, x: tensor) -> tensor:
    """The hardware's approximation `kind` of x: "tanh" (`tanh.approx.f32`, fp32) or "rcp64h"
    (`rcp.approx.ftz.f64`, fp64)."""
    return make(_be().approx(kind, x), x.dtype, x.shape)


_DOT_PRECISIONS = ("tf32", "tf32x3", "ieee", "bf16x3", "bf16x6")


def _halves(x: tensor, axis: int) -> Tuple[tensor, tensor]:
    """The first and second halves of `x` along `axis` (a power of two >= 2)."""
    shape = list(x.shape)
    n = shape[axis]
    y = reshape(x, shape[:axis] + [2, n // 2] + shape[axis + 1:])
    rank = len(y.shape)
    perm = [d for d in range(rank) if d != axis] + [axis]
    lo, hi = split(permute(y, perm))
    return lo, hi


def _stack_halves(lo: tensor, hi: tensor, axis: int) -> tensor:
    """Inverse of `_halves`: `lo` then `hi` along `axis`."""
    j = join(lo, hi)  # the halves' selector is the new last dimension
    rank = len(j.shape)
    perm = list(range(axis)) + [rank - 1] + list(range(axis, rank - 1))
    y = permute(j, perm)
    shape = list(lo.shape)
    shape[axis] *= 2
    return reshape(y, shape)


def _batch_slices(x: tensor) -> List[tensor]:
    """The 2-D slices of a 3-D tile along dimension 0, in order."""
    if x.shape[0] == 1:
        return [reshape(x, x.shape[1:])]
    lo, hi = _halves(x, 0)
    return _batch_slices(lo) + _batch_slices(hi)


def _stack_batch(parts: List[tensor]) -> tensor:
    if len(parts) == 1:
        return reshape(parts[0], (1,) + tuple(parts[0].shape))
    h = len(parts) // 2
    return _stack_halves(_stack_batch(parts[:h]), _stack_batch(parts[h:]), 0)


def _batched_dot(a: tensor, b: tensor, acc: Any, input_precision: Any, out_dtype: Any) -> tensor:
    """`[B, M, K] @ [B, K, N]`: one 2-D dot per batch slice (the batch is a power of two)."""
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise ValueError(f"dot: shapes {list(a.shape)} and {list(b.shape)} do not multiply")
    accs = _batch_slices(to_tensor(acc)) if isinstance(acc, tensor) else [None] * a.shape[0]
    outs = [dot(x, y, c, input_precision, None, out_dtype)
            for x, y, c in zip(_batch_slices(a), _batch_slices(b), accs)]
    return _stack_batch(outs)


def dot(a: Any, b: Any, acc: Any = None, input_precision: Any = None, allow_tf32: Any = None,
        out_dtype: Any = None) -> tensor:
    """`a @ b (+ acc)` with Triton's typing: fp16/bf16 accumulate in fp32 (fp16 may ask for
    fp16), fp32 in fp32 (as tf32 unless `input_precision="ieee"`), int8 in int32, fp64 in fp64."""
    a, b = to_tensor(a), to_tensor(b)
    input_precision, allow_tf32 = _unwrap(input_precision), _unwrap(allow_tf32)
    out_dtype = _unwrap(out_dtype)
    if out_dtype is None:
        out_dtype = acc.dtype if isinstance(acc, tensor) else core.float32
    if a.dtype.is_fp8() and b.dtype.is_fp8():
        # Any pair of fp8 types: exact in fp16, multiplied on fp16 tensor cores.
        a, b = cast(a, core.float16), cast(b, core.float16)
    if input_precision is None:
        # `knobs.language.fp32_default`, given to the compile, wins over allow_tf32, as in Triton.
        input_precision = _be().fp32_default or ("tf32" if allow_tf32 in (None, True) else "ieee")
    if isinstance(input_precision, str):
        input_precision = input_precision.lower()
    if input_precision not in _DOT_PRECISIONS:
        raise ValueError(f"input_precision must be one of {', '.join(_DOT_PRECISIONS)}, got {input_precision!r}")
    if len(a.shape) == 3 and len(b.shape) == 3:
        return _batched_dot(a, b, acc, input_precision, out_dtype)
    if len(a.shape) == len(b.shape) > 3:
        # More batch dimensions: folded into one, multiplied as a 3-D dot, unfolded.
        lead = list(a.shape[:-2])
        if list(b.shape[:-2]) != lead:
            raise ValueError(f"dot: the batch dimensions differ: {list(a.shape)} @ {list(b.shape)}")
        nb = _numel(lead)
        a3 = reshape(a, (nb, a.shape[-2], a.shape[-1]))
        b3 = reshape(b, (nb, b.shape[-2], b.shape[-1]))
        acc3 = reshape(to_tensor(acc), (nb, a.shape[-2], b.shape[-1])) if isinstance(acc, tensor) else acc
        out = _batched_dot(a3, b3, acc3, input_precision, out_dtype)
        return reshape(out, lead + [a.shape[-2], b.shape[-1]])
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ValueError(f"dot takes two 2-D tensors, got shapes {list(a.shape)} and {list(b.shape)}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"dot: the inner dimensions differ: {list(a.shape)} @ {list(b.shape)}")
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    if a.dtype != b.dtype:
        raise TilesTypeError(f"dot operands must have one dtype, got {a.dtype} and {b.dtype}")
    dt = a.dtype
    if dt.is_int8():
        ret = core.int32
    elif dt.is_fp64():
        ret = core.float64
    elif dt.is_fp16():
        if out_dtype not in (core.float32, core.float16):
            raise TilesTypeError(f"dot of fp16 accumulates in fp32 or fp16, not {out_dtype}")
        ret = out_dtype
    elif dt.is_bf16() or dt.is_fp32():
        if out_dtype != core.float32:
            raise TilesTypeError(f"dot of {dt} accumulates in fp32, not {out_dtype}")
        ret = core.float32
    else:
        raise TilesTypeError(f"dot supports fp16, bf16, fp32, fp64 and int8 operands, got {dt}")
    if input_precision in ("tf32x3", "bf16x3", "bf16x6") and not dt.is_fp32():
        input_precision = "tf32"
    if acc is None:
        acc = full((m, n), 0, ret)
    else:
        acc = to_tensor(acc)
        if acc.dtype != ret:
            raise TilesTypeError(f"dot's accumulator must be {ret} for {dt} operands, got {acc.dtype}")
        if tuple(acc.shape) != (m, n):
            acc = broadcast_to(acc, (m, n))
    if min(m, n, k) < 16:
        return _small_dot(a, b, acc, ret)
    if input_precision in ("bf16x3", "bf16x6"):
        return _split_bf16_dot(a, b, acc, 3 if input_precision == "bf16x6" else 2)
    return make(_be().dot(a, b, acc, input_precision), ret, (m, n))


def _split_bf16_dot(a: tensor, b: tensor, acc: tensor, parts: int) -> tensor:
    """An fp32 dot on bf16 tensor cores (`input_precision="bf16x3"` / `"bf16x6"`): each operand
    splits into `parts` bf16 terms (x = x0 + x1 (+ x2), each the bf16 rounding of what the
    earlier ones leave), and the products whose terms' orders sum to less than `parts` are
    accumulated in fp32, smallest first: 3 products for 2 parts, 6 for 3."""

    def split(x: tensor) -> list:
        out, rest = [], x
        for i in range(parts):
            out.append(cast(rest, core.bfloat16))
            if i + 1 < parts:
                rest = sub(rest, cast(out[-1], core.float32))
        return out

    xs, ys = split(a), split(b)
    pairs = sorted(((i, j) for i in range(parts) for j in range(parts) if i + j < parts), key=lambda p: -(p[0] + p[1]))
    m, n = a.shape[0], b.shape[1]
    for i, j in pairs:
        acc = make(_be().dot(xs[i], ys[j], acc, "tf32"), core.float32, (m, n))
    return acc


def _small_dot(a: tensor, b: tensor, acc: tensor, ret: dtype) -> tensor:
    """A dot with a dimension under the tensor cores' 16 (`BLOCK_M = 1`, a 2-wide N): the
    products of `a[:, :, None] * b[None, :, :]` summed along K, in fp32 for 16- and 32-bit
    floats (tf32 asks for no rounding here: the result is the exact-input one), int32 for int8,
    fp64 for fp64; then added to `acc`."""
    from .language import _sum_combine

    work = ret if ret in (core.int32, core.float64) else core.float32
    prod = mul(expand_dims(cast(a, work), 2), expand_dims(cast(b, work), 0))
    total = reduce([prod], 1, _sum_combine)[0]
    return cast(add(total, cast(acc, work)), ret)


def unary_math(op: str, x: Any) -> tensor:
    x = to_tensor(x)
    if not x.dtype.is_floating():
        raise TilesTypeError(f"{op} needs a floating-point tensor (fp16, bf16, fp32 or fp64), got {x.dtype}")
    if x.dtype.is_fp8():
        return cast(unary_math(op, cast(x, core.float16)), x.dtype)
    return make(_be().unary(op, x), x.dtype, x.shape)


def abs_(x: Any) -> tensor:
    x = to_tensor(x)
    if x.dtype.is_int_unsigned():
        return x
    if x.dtype.is_fp8e4b15():
        # Its sign bit cleared, as Triton does (1.875 stays: a conversion would clamp it).
        return bitcast(and_(bitcast(x, core.uint8), 0x7F), x.dtype)
    if x.dtype.is_fp8():
        return cast(abs_(cast(x, core.float16)), x.dtype)
    return make(_be().unary("abs", x), x.dtype, x.shape)


def pow_(x: Any, y: Any) -> tensor:
    raise NotImplementedError("** on tensors is not supported yet; use tl.exp2(y * tl.log2(x))")


# -- creation and program geometry -------------------------------------------------------------

def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def arange(start: Any, end: Any) -> tensor:
    start, end = _unwrap(start), _unwrap(end)
    if not isinstance(start, int) or not isinstance(end, int):
        raise TypeError("arange's start and end must be constexpr integers")
    n = end - start
    if not _pow2(n):
        raise ValueError(f"arange's range must be a power of 2, got {n} (from {start} to {end})")
    if not (-(2**31) <= start and end <= 2**31):
        raise ValueError("arange's bounds must fit in int32")
    return make(_be().arange(start, end), core.int32, (n,))


def full(shape: Any, value: Any, dt: Any) -> tensor:
    shape = _unwrap(shape)
    shape = tuple(int(_unwrap(s)) for s in (shape if isinstance(shape, (list, tuple)) else [shape]))
    for s in shape:
        if not _pow2(s):
            raise ValueError(f"tile dimensions must be powers of 2, got shape {list(shape)}")
    dt = _unwrap(dt)
    if isinstance(value, tensor):
        return broadcast_to(cast(value, dt), shape)
    return make(_be().constant(_unwrap(value), dt, shape), dt, shape)


def program_id(axis: Any) -> tensor:
    axis = int(_unwrap(axis))
    if axis not in (0, 1, 2):
        raise ValueError(f"program_id axis must be 0, 1, or 2 but got {axis}")
    return make(_be().program_id(axis), core.int32)


def num_programs(axis: Any) -> tensor:
    axis = int(_unwrap(axis))
    if axis not in (0, 1, 2):
        raise ValueError(f"num_programs axis must be 0, 1 or 2, got {axis}")
    return make(_be().num_programs(axis), core.int32)


# -- memory -------------------------------------------------------------------------------------

_LOAD_CACHE = {"": 0, ".ca": 1, ".cg": 2, ".cs": 3, ".lu": 4, ".cv": 5}  # tile_ir::CACHE_MODIFIERS
_STORE_CACHE = {"": 0, ".cg": 2, ".cs": 3, ".wb": 6, ".wt": 7}
_EVICTION = {"": 0, "evict_normal": 0, "evict_first": 1, "evict_last": 2}  # tile_ir::EVICTION_POLICIES


def _cache_hints(table, cache_modifier, eviction_policy, what):
    """The (cache operator, eviction priority) codes of an access, as the IR numbers them."""
    cache = _unwrap(cache_modifier) or ""
    evict = _unwrap(eviction_policy) or ""
    if cache not in table:
        raise ValueError(f"{what}: cache modifier {cache!r} not supported (one of {sorted(k for k in table if k)})")
    if evict not in _EVICTION:
        raise ValueError(f"{what}: eviction policy {evict!r} not supported (evict_first, evict_last)")
    return table[cache], _EVICTION[evict]


def load(ptr: Any, mask: Any = None, other: Any = None, volatile: bool = False, whole_granules: bool = False,
         cache_modifier: str = "", eviction_policy: str = "") -> tensor:
    """`whole_granules`: the rows read are a tensor descriptor's, 16-byte aligned, so any aligned
    16-byte granule holding a selected element may be read whole (what lets a vector load run
    past the end of a row whose length is unknown; the elements past it are not selected).
    `cache_modifier` (`.ca`, `.cg`, `.cs`, `.lu`, `.cv`) and `eviction_policy` (`evict_first`,
    `evict_last`) become the PTX load's qualifiers (a cache operator wins where both are given:
    PTX takes one)."""
    cache, evict = _cache_hints(_LOAD_CACHE, cache_modifier, eviction_policy, "load")
    if not isinstance(ptr, tensor) or not ptr.dtype.is_ptr():
        raise TypeError(f"load needs a pointer or a tile of pointers, got {ptr!r}")
    elem = ptr.dtype.element_ty
    if mask is not None:
        mask = cast(to_tensor(mask), core.int1)
        shape = broadcast_shapes(ptr.shape, mask.shape)
        ptr, mask = broadcast_to(ptr, shape), broadcast_to(mask, shape)
    if other is not None:
        if mask is None:
            other = None
        else:
            other = broadcast_to(cast(to_tensor(other, elem if _is_literal(other) else None), elem), ptr.shape)
    handle = _be().load(ptr, mask, other, bool(_unwrap(volatile)), whole_granules=whole_granules and mask is not None,
                        cache=cache, evict=evict)
    return make(handle, elem, ptr.shape)


def store(ptr: Any, value: Any, mask: Any = None, cache_modifier: str = "", eviction_policy: str = "") -> None:
    """`cache_modifier` (`.wb`, `.cg`, `.cs`, `.wt`) and `eviction_policy` as for `load`."""
    if not isinstance(ptr, tensor) or not ptr.dtype.is_ptr():
        raise TypeError(f"store needs a pointer or a tile of pointers, got {ptr!r}")
    if ptr.dtype.is_const():
        raise TypeError("Cannot store to a constant pointer (a `tl.const` parameter)")
    elem = ptr.dtype.element_ty
    value = to_tensor(value, elem if _is_literal(value) else None)
    if mask is not None:
        mask = cast(to_tensor(mask), core.int1)
        shape = broadcast_shapes(broadcast_shapes(ptr.shape, mask.shape), value.shape)
        mask = broadcast_to(mask, shape)
    else:
        shape = broadcast_shapes(ptr.shape, value.shape)
    ptr = broadcast_to(ptr, shape)
    value = broadcast_to(cast(value, elem), shape)
    cache, evict = _cache_hints(_STORE_CACHE, cache_modifier, eviction_policy, "store")
    _be().store(ptr, value, mask, cache=cache, evict=evict)


# -- debugging ------------------------------------------------------------------------------------

def inline_asm_elementwise(asm: str, constraints: str, args: Sequence[Any], dtype: Any, is_pure: bool,
                           pack: int) -> Any:
    """Triton's `inline_asm_elementwise`: `asm` on `pack` consecutive elements at a time; `args`
    are broadcast together; `dtype` (or a tuple of dtypes) gives the results."""
    ts = [to_tensor(a) for a in args]
    shape: tuple = ()  # without arguments, scalar results (as in Triton)
    for t in ts:
        shape = broadcast_shapes(shape, t.shape)
    ts = [broadcast_to(t, shape) for t in ts]
    many = isinstance(_unwrap(dtype), (tuple, list))
    dts = [_unwrap(d) for d in (_unwrap(dtype) if many else [dtype])]
    # A pointer operand is its 64-bit address (constraint "l"), as in Triton.
    ts = [cast(t, core.int64) if t.dtype.is_ptr() else t for t in ts]
    handles = _be().inline_asm(str(_unwrap(asm)), str(_unwrap(constraints)), ts, dts, int(_unwrap(pack)),
                               bool(_unwrap(is_pure)))
    outs = [make(h, d, shape) for h, d in zip(handles, dts)]
    return tuple(outs) if many else outs[0]


def device_print(prefix: str, args: Sequence[Any], hex: bool = False) -> None:
    tensors = [to_tensor(a) for a in args]
    prefix = str(_unwrap(prefix))
    if tensors and prefix.strip():
        # As Triton prints it: "x" -> "x: " before the values.
        if not prefix.rstrip().endswith(":"):
            prefix = prefix.rstrip() + ": "
        elif not prefix.endswith(" "):
            prefix += " "
    _be().device_print(prefix, tensors, bool(_unwrap(hex)))


def device_assert(cond: Any, msg: str = "", mask: Any = None) -> None:
    cond = cast(to_tensor(cond), core.int1)
    if _unwrap(mask) is not None:
        mask = cast(to_tensor(mask), core.int1)
        cond, mask = broadcast_pair(cond, mask)
        cond = or_(cond, not_(mask))
    _be().device_assert(cond, str(_unwrap(msg)))


# -- reductions -----------------------------------------------------------------------------------

def _norm_axis(axis: Any, rank: int) -> int:
    a = int(_unwrap(axis))
    if a < 0:
        a += rank
    if not 0 <= a < rank:
        raise ValueError(f"axis {_unwrap(axis)} is out of range for a tile of rank {rank}")
    return a


def reduce(inputs: Sequence[Any], axis: Any, combine, keep_dims: bool = False) -> list:
    """Reduces same-shaped tiles along `axis` with `combine(acc..., new...) -> new acc...`."""
    ts = [to_tensor(x) for x in inputs]
    shape = ts[0].shape
    for t in ts:
        if t.shape != shape:
            raise ValueError(f"reduce operands differ in shape: {list(shape)} and {list(t.shape)}")
    axis = _unwrap(axis)
    if axis is None:
        out = ts
        for a in reversed(range(len(shape))):
            out = reduce(out, a, combine)
        if keep_dims:
            for _ in range(len(shape)):
                out = [expand_dims(o, 0) for o in out]
        return out
    if not shape:
        return ts
    a = _norm_axis(axis, len(shape))
    handles = _be().reduce(ts, a, combine)
    out_shape = shape[:a] + shape[a + 1:]
    out = [make(h, t.dtype, out_shape) for h, t in zip(handles, ts)]
    if keep_dims:
        out = [expand_dims(o, a) for o in out]
    return out


def combine_results(res: Any, like: Sequence[tensor]) -> list:
    """A combine function's return value(s) as scalar tensors of the operands' dtypes."""
    vals = list(res) if isinstance(res, (tuple, list)) else [res]
    if len(vals) != len(like):
        raise TypeError(f"the combine function returned {len(vals)} values for {len(like)} operands")
    out = []
    for v, t in zip(vals, like):
        v = cast(to_tensor(v, t.dtype if _is_literal(v) else None), t.dtype)
        out.append(v)
    return out


def index_tile(x: tensor, axis: int) -> tensor:
    """The position along `axis` of every element of `x` (int32)."""
    n = x.shape[axis]
    idx = arange(0, n)
    for _ in range(axis):
        idx = expand_dims(idx, 0)
    for _ in range(axis + 1, len(x.shape)):
        idx = expand_dims(idx, len(idx.shape))
    return broadcast_to(idx, x.shape)


# -- atomics --------------------------------------------------------------------------------------

_SEMS = {None: "acq_rel", "acq_rel": "acq_rel", "acquire": "acquire", "release": "release", "relaxed": "relaxed"}
_SCOPES = {None: "gpu", "gpu": "gpu", "cta": "cta", "sys": "sys"}


def _check_atomic_type(op: str, elem: dtype) -> None:
    """The element types the GPU's atomics take (refused alike in compiled and interpreted
    kernels): add on 32/64-bit ints, fp32, fp64, fp16 and bf16; max/min on 32/64-bit ints (and
    fp32/fp64, by their bits); bitwise ops and exchange on 32/64-bit values; compare-and-swap
    on 16/32/64-bit values."""
    bits = 64 if elem.is_ptr() else elem.primitive_bitwidth
    if op == "add":
        ok = elem.name in ("fp32", "fp64", "fp16", "bf16") or elem.is_int() and bits in (32, 64)
    elif op in ("max", "min"):
        ok = (elem.is_int() or elem.name in ("fp32", "fp64")) and bits in (32, 64)
    elif op == "cas":
        ok = bits in (16, 32, 64) and not elem.is_fp8()
    else:
        ok = bits in (32, 64)
    if not ok:
        raise TilesTypeError(f"atomic_{op} does not support {elem}: the GPU's atomics take "
                             + ("32/64-bit integers, fp16, bf16, fp32 and fp64" if op == "add" else
                                "32/64-bit integers, fp32 and fp64" if op in ("max", "min") else
                                "16/32/64-bit values" if op == "cas" else "32/64-bit values"))


def half_minmax(op: str, ptr: tensor, val: tensor, mask: Optional[tensor]) -> None:
    """Atomic min/max of fp16 or bf16 elements, returning nothing: a tensor descriptor's
    `atomic_min`/`atomic_max` (Triton's TMA reductions, Hopper). The GPU's 16-bit float
    atomics are vector ones (`atom.min.noftz.v2.f16`, sm_90): each element goes to its aligned
    pair with the other half the operation's identity. NaN operands lose, as in `min.f16`."""
    elem = ptr.dtype.element_ty
    val = cast(val, elem)
    shape = broadcast_shapes(ptr.shape, val.shape)
    ptr, val = broadcast_to(ptr, shape), broadcast_to(val, shape)
    if mask is not None:
        mask = broadcast_to(cast(to_tensor(mask), core.int1), shape)
    _be().half_minmax(op, ptr, val, mask)


_LOAD_SEMS = {None: "acquire", "acquire": "acquire", "relaxed": "relaxed"}
_STORE_SEMS = {None: "release", "release": "release", "relaxed": "relaxed"}


def _access_operands(name: str, ptr: Any, val: Any, mask: Any, sem: Any, scope: Any, sems: dict):
    """The checked, broadcast operands of an atomic load, store or poll, with the PTX names of
    `sem` and `scope`."""
    if not isinstance(ptr, tensor) or not ptr.dtype.is_ptr():
        raise TypeError(f"{name} needs a pointer or a tile of pointers, got {ptr!r}")
    sem, scope = _unwrap(sem), _unwrap(scope)
    if sem not in sems:
        raise ValueError(f"{name} takes sem " + " or ".join(repr(k) for k in sems if k) + f", not {sem!r}")
    if scope not in _SCOPES:
        raise ValueError(f"{name}: unknown scope {scope!r} (gpu, cta or sys)")
    elem = ptr.dtype.element_ty
    if not (elem.is_int() or elem.is_floating() or elem.is_bool()):
        raise TilesTypeError(f"{name} takes integer and floating-point elements, not {elem}")
    ptr, (val,), mask = _broadcast_atomic_operands(ptr, [val], mask)
    return ptr, val, mask, sems[sem], _SCOPES[scope]


def _broadcast_atomic_operands(ptr: tensor, values: Sequence[Any], mask: Any):
    """An atomic's pointer, its value operands (each cast to the pointee type; None stays None)
    and its mask (as int1), broadcast to one shape."""
    elem = ptr.dtype.element_ty
    vals = [None if v is None else to_tensor(v, elem if _is_literal(v) else None) for v in values]
    mask = None if mask is None else cast(to_tensor(mask), core.int1)
    shape = ptr.shape
    for t in vals + [mask]:
        if t is not None:
            shape = broadcast_shapes(shape, t.shape)
    vals = [None if v is None else broadcast_to(cast(v, elem), shape) for v in vals]
    return broadcast_to(ptr, shape), vals, None if mask is None else broadcast_to(mask, shape)


def atomic_load(ptr: Any, mask: Any = None, sem: Any = None, scope: Any = None) -> tensor:
    """Triton's `atomic_load`: a load with acquire (default) or relaxed ordering at `scope`;
    masked-off elements read as 0."""
    ptr, _, mask, sem, scope = _access_operands("atomic_load", ptr, None, mask, sem, scope, _LOAD_SEMS)
    return make(_be().atomic_access("load", ptr, None, mask, sem, scope), ptr.dtype.element_ty, ptr.shape)


def atomic_store(ptr: Any, val: Any, mask: Any = None, sem: Any = None, scope: Any = None) -> None:
    """Triton's `atomic_store`: a store with release (default) or relaxed ordering at `scope`."""
    ptr, val, mask, sem, scope = _access_operands("atomic_store", ptr, val, mask, sem, scope, _STORE_SEMS)
    _be().atomic_access("store", ptr, val, mask, sem, scope)


def atomic_poll(ptr: Any, expected: Any, sem: Any = None, scope: Any = None, timeout_ns: Any = None) -> tensor:
    """Triton's `atomic_poll`: each element is loaded (acquire or relaxed) until it equals
    `expected` or `timeout_ns` nanoseconds of the global timer have passed since the poll
    began; true where the expected value was seen. Each element is read at least once."""
    timeout_ns = _unwrap(timeout_ns)
    if isinstance(timeout_ns, int) and timeout_ns < 0:
        raise ValueError("atomic_poll: timeout_ns must be non-negative")
    if isinstance(ptr, tensor) and ptr.dtype.is_ptr():
        elem = ptr.dtype.element_ty
        if not elem.is_int() or elem.is_bool() or elem.primitive_bitwidth not in (16, 32, 64):
            raise TilesTypeError(f"atomic_poll takes 16, 32 or 64-bit integers, not {elem}")
    ptr, expected, _, sem, scope = _access_operands("atomic_poll", ptr, expected, None, sem, scope, _LOAD_SEMS)
    if timeout_ns is not None:
        timeout_ns = to_tensor(timeout_ns)
        if timeout_ns.shape or not timeout_ns.dtype.is_int():
            raise ValueError("atomic_poll: timeout_ns must be a scalar integer")
        timeout_ns = cast(timeout_ns, core.uint64)
    return make(_be().atomic_access("poll", ptr, expected, None, sem, scope, timeout_ns), core.int1, ptr.shape)


def ptx_atomic_access(kind: str, ptr: tensor, val: Optional[tensor], mask: Optional[tensor], sem: str,
                      scope: str, timeout: Optional[tensor] = None) -> Optional[tensor]:
    """The compiled atomic load, store or poll: one PTX `ld`/`st` with `sem` and `scope` per
    element, through inline asm. 8-bit elements travel in 16-bit registers; booleans as bytes."""
    elem = ptr.dtype.element_ty
    bits = 8 if elem.is_bool() else elem.primitive_bitwidth
    rbits = max(bits, 16)
    it = {16: core.int16, 32: core.int32, 64: core.int64}[rbits]
    reg = {16: "h", 32: "r", 64: "l"}[rbits]
    op = f".{sem}.{scope}.global.b{bits}"
    if kind == "poll":
        args, cons = [ptr, bitcast(val, it)], ["=r", "l", reg]
        wait = ""
        if timeout is not None:
            t0 = make(_be().special("mov.u64 $0, %globaltimer;", core.uint64), core.uint64)
            args += [broadcast_to(t0, ptr.shape), broadcast_to(timeout, ptr.shape)]
            cons += ["l", "l"]
            wait = ("mov.u64 t, %globaltimer; sub.u64 t, t, $3; setp.ge.u64 p, t, $4; "
                    "@p bra tiles_poll_end_${:uid}; ")
        asm = (f"{{ .reg .pred p; .reg .b{rbits} v; .reg .u64 t; mov.b32 $0, 0; tiles_poll_${{:uid}}: "
               f"ld{op} v, [$1]; setp.eq.b{rbits} p, v, $2; @p bra tiles_poll_hit_${{:uid}}; {wait}"
               f"bra tiles_poll_${{:uid}}; tiles_poll_hit_${{:uid}}: mov.b32 $0, 1; tiles_poll_end_${{:uid}}: }}")
        hit = inline_asm_elementwise(asm, ",".join(cons), args, core.int32, False, 1)
        return not_equal(hit, 0)
    masked = mask is not None
    if kind == "load":
        args, cons = [ptr], [f"={reg}", "l"]
        body = f"ld{op} $0, [$1];"
        if masked:
            args.append(cast(mask, core.int32))
            cons.append("r")
            body = f"{{ .reg .pred p; setp.ne.b32 p, $2, 0; mov.b{rbits} $0, 0; @p {body} }}"
        r = inline_asm_elementwise(body, ",".join(cons), args, it, False, 1)
        if bits == 8:
            r = cast(r, core.int8)
            return not_equal(r, 0) if elem.is_bool() else bitcast(r, elem)
        return r if elem == it else bitcast(r, elem)
    # store: the asm's one result is a dummy.
    if bits == 8:
        v = cast(val, core.int8) if elem.is_bool() else bitcast(val, core.int8)
        v = cast(v, core.int16)
    else:
        v = val if elem == it else bitcast(val, it)
    args, cons = [ptr, v], ["=r", "l", reg]
    body = f"st{op} [$1], $2;"
    if masked:
        args.append(cast(mask, core.int32))
        cons.append("r")
        body = f"{{ .reg .pred p; setp.ne.b32 p, $3, 0; @p {body} }}"
    inline_asm_elementwise(body + " mov.b32 $0, 0;", ",".join(cons), args, core.int32, False, 1)
    return None


def expect_zero(x: Any, mask: Any) -> Any:
    """Triton's `expect_zero`: `x` unchanged; asserts `x == 0` where `mask` holds when asserts are
    checked (the interpreter, or debugging)."""
    device_assert(or_(equal(x, 0), not_(cast(to_tensor(mask), core.int1))),
                  "expect_zero expected x == 0 where mask is true")
    return x


def atomic(op: str, ptr: Any, val: Any, mask: Any = None, sem: Any = None, scope: Any = None,
           cmp: Any = None) -> tensor:
    if not isinstance(ptr, tensor) or not ptr.dtype.is_ptr():
        raise TypeError(f"atomic_{op} needs a pointer or a tile of pointers, got {ptr!r}")
    sem, scope = _unwrap(sem), _unwrap(scope)
    if sem not in _SEMS or scope not in _SCOPES:
        raise ValueError(f"unknown sem {sem!r} or scope {scope!r}")
    elem = ptr.dtype.element_ty
    _check_atomic_type(op, elem)
    ptr, (val, cmp), mask = _broadcast_atomic_operands(ptr, [val, cmp], mask)
    shape = ptr.shape
    if op in ("max", "min") and elem.is_floating():
        # Floats with the sign bit clear order like their bits as signed ints; those with it set
        # (-0.0 among them: max(-inf, -0.0) is -0.0) reversed, as unsigned.
        it, ut = (core.int32, core.uint32) if elem.name == "fp32" else (core.int64, core.uint64)
        pos = greater_equal(bitcast(val, it), 0)
        full = pos if mask is None else and_(mask, pos)
        neg = not_(pos) if mask is None else and_(mask, not_(pos))
        iptr, uptr = bitcast(ptr, pointer_type(it)), bitcast(ptr, pointer_type(ut))
        a = atomic(op, iptr, bitcast(val, it), full, sem, scope)
        b = atomic("min" if op == "max" else "max", uptr, bitcast(val, ut), neg, sem, scope)
        return where(pos, bitcast(a, elem), bitcast(b, elem))
    h = _be().atomic(op, ptr, val, cmp, mask, _SEMS[sem], _SCOPES[scope])
    return make(h, elem, shape)
