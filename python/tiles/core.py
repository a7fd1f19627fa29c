"""Types and values of the tiles language: dtypes, constexpr, tensor.

Names and behaviour follow Triton's `triton.language` so kernels run unchanged. A `tensor`
holds a backend *handle* (an IR value number when compiling, a numpy array when
interpreting) plus its dtype and shape; every operation goes through `semantic`, so the
compiler and the interpreter share one definition of each op.
"""

from __future__ import annotations

import enum as _enum
import functools
import threading
from typing import Any, Dict, Optional, Sequence

_IR_NAMES = {
    "int1": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "fp16": "fp16", "bf16": "bf16", "fp32": "fp32", "fp64": "fp64",
    "fp8e5": "fp8e5", "fp8e4nv": "fp8e4nv", "fp8e4b15": "fp8e4b15",
}
_FROM_IR = {v: k for k, v in _IR_NAMES.items()}
# Kinds for literal promotion: bool < integer < float (signed and unsigned integers are one kind, as
# in Triton: a Python int combined with a uint32 tensor stays uint32).
_KIND = {"bool": 0, "int": 1, "float": 2}


# Bits per element by dtype name (64 for the rest); the foreign fp8 formats are bytes too.
_BITWIDTHS = {"int1": 1, "int8": 8, "uint8": 8, "fp8e5": 8, "fp8e4nv": 8, "int16": 16, "uint16": 16, "fp16": 16,
              "bf16": 16, "int32": 32, "uint32": 32, "fp32": 32, "fp8e4b15": 8, "fp8e4b8": 8, "fp8e5b16": 8}

# AMD's fp8 formats (FNUZ: no negative zero, 0x80 is NaN): the interpreter runs them, as
# Triton's does; compiling one for an NVIDIA GPU is an error, as in Triton.
_FOREIGN_FP8 = {"fp8e4b8": "float8e4b8", "fp8e5b16": "float8e5b16"}


class dtype:
    """A scalar element type (Triton's `tl.dtype`)."""

    SINT_TYPES = ("int8", "int16", "int32", "int64")
    UINT_TYPES = ("int1", "uint8", "uint16", "uint32", "uint64")
    FP_TYPES = ("fp8e5", "fp8e4nv", "fp8e4b15", "fp8e4b8", "fp8e5b16", "fp16", "bf16", "fp32", "fp64")

    def __init__(self, name: str):
        if name not in _IR_NAMES and name not in _FOREIGN_FP8:
            raise ValueError(f"unknown dtype {name!r}")
        self.name = name

    @property
    def value(self) -> "dtype":
        """The dtype itself. Triton hands a dtype argument of a @jit function over wrapped in a
        `tl.constexpr`, so helpers read it as `dtype.value` (FlagGems' `get_dtype_min`)."""
        return self

    # -- classification ---------------------------------------------------------------
    def is_floating(self) -> bool:
        return self.name in self.FP_TYPES

    def is_int(self) -> bool:
        return self.name in self.SINT_TYPES or self.name in self.UINT_TYPES

    def is_int_signed(self) -> bool:
        return self.name in self.SINT_TYPES

    def is_int_unsigned(self) -> bool:
        return self.name in self.UINT_TYPES

    def is_bool(self) -> bool:
        return self.name == "int1"

    def is_ptr(self) -> bool:
        return False

    def is_fp16(self) -> bool:
        return self.name == "fp16"

    def is_bf16(self) -> bool:
        return self.name == "bf16"

    def is_fp32(self) -> bool:
        return self.name == "fp32"

    def is_fp64(self) -> bool:
        return self.name == "fp64"

    def is_int8(self) -> bool:
        return self.name == "int8"

    def is_int16(self) -> bool:
        return self.name == "int16"

    def is_int32(self) -> bool:
        return self.name == "int32"

    def is_int64(self) -> bool:
        return self.name == "int64"

    def is_uint8(self) -> bool:
        return self.name == "uint8"

    def is_uint16(self) -> bool:
        return self.name == "uint16"

    def is_uint32(self) -> bool:
        return self.name == "uint32"

    def is_uint64(self) -> bool:
        return self.name == "uint64"

    def is_fp8(self) -> bool:
        return self.name in ("fp8e5", "fp8e4nv", "fp8e4b15", "fp8e4b8", "fp8e5b16")

    def is_fp8e5(self) -> bool:
        return self.name == "fp8e5"

    def is_fp8e4nv(self) -> bool:
        return self.name == "fp8e4nv"

    def is_fp8e4b15(self) -> bool:
        return self.name == "fp8e4b15"

    def is_block(self) -> bool:
        return False

    # -- the rest of Triton's dtype interface ------------------------------------------------
    STANDARD_FP_TYPES = ("fp16", "bf16", "fp32", "fp64")

    class SIGNEDNESS(_enum.Enum):
        SIGNED = 0
        UNSIGNED = 1

    class KIND(_enum.Enum):
        BOOLEAN = 0
        INTEGRAL = 1
        FLOATING = 2

    def is_int1(self) -> bool:
        return self.name == "int1"

    def is_fp8e4b8(self) -> bool:
        return self.name == "fp8e4b8"

    def is_fp8e5b16(self) -> bool:
        return self.name == "fp8e5b16"

    def is_standard_floating(self) -> bool:
        return self.name in self.STANDARD_FP_TYPES

    @staticmethod
    def is_const() -> bool:
        return False

    @staticmethod
    def is_void() -> bool:
        return False

    @staticmethod
    def is_dtype(type_str: str) -> bool:
        return type_str in _IR_NAMES or type_str in _FOREIGN_FP8

    def get_int_max_value(self) -> int:
        if not self.is_int():
            raise TypeError(f"{self} is not an integer type")
        bits = self.int_bitwidth
        return 2 ** (bits - 1) - 1 if self.is_int_signed() else 2**bits - 1

    def get_int_min_value(self) -> int:
        if not self.is_int():
            raise TypeError(f"{self} is not an integer type")
        return -(2 ** (self.int_bitwidth - 1)) if self.is_int_signed() else 0

    def codegen_name(self) -> str:
        """`float32`, `bfloat16`, `int8`: the name under `tl.`."""
        if self.name.startswith("fp"):
            return "float" + self.name[2:]
        if self.name.startswith("bf"):
            return "bfloat" + self.name[2:]
        return self.name

    def cache_key_part(self) -> str:
        return self.name

    def with_element_ty(self, element_ty: "dtype") -> "dtype":
        return element_ty

    def kind(self) -> int:
        if self.is_bool():
            return _KIND["bool"]
        if self.is_int():
            return _KIND["int"]
        return _KIND["float"]

    @property
    def primitive_bitwidth(self) -> int:
        return _BITWIDTHS.get(self.name, 64)

    @property
    def int_bitwidth(self) -> int:
        return self.primitive_bitwidth

    @property
    def fp_mantissa_width(self) -> int:
        return {"fp8e5": 2, "fp8e4nv": 3, "fp8e4b15": 3, "fp8e4b8": 3, "fp8e5b16": 2, "fp16": 10, "bf16": 7,
                "fp32": 23, "fp64": 52}[self.name]

    @property
    def exponent_bias(self) -> int:
        """The exponent bias of a float format (IEEE's 2^(e-1) - 1, or the format's own)."""
        return {"fp8e5": 15, "fp8e4nv": 7, "fp8e4b15": 15, "fp8e4b8": 8, "fp8e5b16": 16, "fp16": 15, "bf16": 127,
                "fp32": 127, "fp64": 1023}[self.name]

    @property
    def scalar(self) -> "dtype":
        return self

    def refuse_foreign(self) -> None:
        """Raises for the fp8 formats NVIDIA GPUs do not have (AMD's), with Triton's words."""
        if self.name in _FOREIGN_FP8:
            raise TypeError(f"type {self.name} not supported in this architecture (tl.{_FOREIGN_FP8[self.name]} "
                            "is AMD's fp8 format). The supported fp8 dtypes are ('fp8e4b15', 'fp8e4nv', 'fp8e5')")

    @property
    def ir(self) -> str:
        """The IR's spelling (`i32`, `fp16`, `*fp32`)."""
        self.refuse_foreign()
        return _IR_NAMES[self.name]

    def to_numpy(self):
        from . import _numpy_types

        return _numpy_types.numpy_dtype(self)

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, constexpr):
            other = other.value
        return isinstance(other, dtype) and type(other) is type(self) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("dtype", self.name))

    def __repr__(self) -> str:
        # As Triton writes it: code generators put `repr(dtype)` into kernel source.
        return f"triton.language.{self.codegen_name()}"

    def __str__(self) -> str:
        return self.name


class pointer_type(dtype):
    """A pointer to global memory holding `element_ty` values."""

    def __init__(self, element_ty: dtype, address_space: int = 1, const: bool = False):
        if isinstance(element_ty, constexpr):
            element_ty = element_ty.value
        if not isinstance(element_ty, dtype):
            raise TypeError(f"pointer_type needs a dtype, got {element_ty!r}")
        self.element_ty = element_ty
        # A `tl.const` parameter's pointer: stores through it are refused.
        self.const = bool(const)
        self.name = f"pointer<{element_ty.name}>"

    def is_ptr(self) -> bool:
        return True

    def is_const(self) -> bool:
        return self.const

    def is_floating(self) -> bool:
        return False

    def is_int(self) -> bool:
        return False

    def is_int_signed(self) -> bool:
        return False

    def is_int_unsigned(self) -> bool:
        return False

    def is_bool(self) -> bool:
        return False

    def kind(self) -> int:
        return 3

    @property
    def primitive_bitwidth(self) -> int:
        return 64

    @property
    def ir(self) -> str:
        return "*" + self.element_ty.ir

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, constexpr):
            other = other.value
        return isinstance(other, pointer_type) and other.element_ty == self.element_ty and other.const == self.const

    def __hash__(self) -> int:
        return hash(("ptr", self.element_ty.name, self.const))

    def __repr__(self) -> str:
        return f"pointer<{self.element_ty!r}{', const' if self.const else ''}>"

    def __str__(self) -> str:
        return ("const *" if self.const else "*") + self.element_ty.name


class block_type:
    """The type of a tile: an element type and a shape."""

    def __init__(self, element_ty: dtype, shape: Sequence[int]):
        self.element_ty = element_ty
        self.shape = tuple(shape)

    @property
    def scalar(self) -> dtype:
        return self.element_ty

    def is_block(self) -> bool:
        return True

    def is_ptr(self) -> bool:
        return self.element_ty.is_ptr()

    def get_block_shapes(self):
        return self.shape

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * (self.element_ty.primitive_bitwidth // 8)

    @property
    def name(self) -> str:
        return repr(self)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, block_type) and other.element_ty == self.element_ty and other.shape == self.shape

    def __hash__(self) -> int:
        return hash((self.element_ty, self.shape))

    def __repr__(self) -> str:
        return f"<{list(self.shape)}, {self.element_ty}>"


class tuple_type:
    """The type of a tuple of kernel values (Triton's `tl.tuple_type`): its element types and,
    for named tuples, their field names."""

    def __init__(self, types: Sequence[Any], fields: Optional[Sequence[str]] = None):
        self.types = list(types)
        self.fields = list(fields) if fields else [""] * len(self.types)
        self.name = "[" + ",".join(f"{k}:{v}" for k, v in zip(self.fields, self.types)) + "]"

    def __str__(self) -> str:
        return self.name

    __repr__ = __str__

    def __iter__(self):
        return iter(self.types)

    def __len__(self) -> int:
        return len(self.types)

    def __getitem__(self, index: int) -> Any:
        return self.types[index]

    def __eq__(self, other: Any) -> bool:
        return type(other) is type(self) and self.types == other.types and self.fields == other.fields

    def __hash__(self) -> int:
        return hash((tuple(map(str, self.types)), tuple(self.fields)))


class tensor_descriptor_type:
    """The type of a tensor descriptor (Triton's `tl.tensor_descriptor_type`): the block it
    loads and stores, and the types of its shape and strides."""

    def __init__(self, block_type: "block_type", shape_type: Optional[tuple_type] = None,
                 strides_type: Optional[tuple_type] = None):
        self.block_type = block_type
        self.shape_type = shape_type
        self.strides_type = strides_type

    def __str__(self) -> str:
        b = self.block_type
        return f"tensor_descriptor<{b.element_ty}{list(b.shape)}>"

    __repr__ = __str__

    def __eq__(self, other: Any) -> bool:
        return (type(other) is type(self) and self.block_type == other.block_type
                and self.shape_type == other.shape_type and self.strides_type == other.strides_type)

    def __hash__(self) -> int:
        return hash(self.block_type)


def dtype_from_ir(name: str) -> dtype:
    known = _BY_IR.get(name)
    if known is not None:
        return known
    if name.startswith("*"):
        ptr = pointer_type(dtype_from_ir(name[1:]))
        if name[1:] in _BY_IR:
            _BY_IR[name] = ptr  # a pointer to one of the module's dtypes, kept from now on
        return ptr
    return dtype(_FROM_IR[name])


class shape_tuple(tuple):
    """A tile's shape: a tuple that also equals the list of the same sizes (Triton's shapes
    are lists, and kernels compare them with lists: `x.shape == [BLOCK]`), in compiled and
    interpreted kernels alike."""

    __slots__ = ()

    def __eq__(self, other: Any) -> Any:
        if isinstance(other, list):
            return sequences_equal(self, other)
        return tuple.__eq__(self, other)

    def __ne__(self, other: Any) -> Any:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    # Concatenated with a list, a shape is the list Triton's would be (`[1, 1] + x.shape`).
    def __add__(self, other: Any) -> Any:
        if isinstance(other, list):
            return list(self) + other
        return shape_tuple(tuple.__add__(self, other))

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, list):
            return other + list(self)
        return shape_tuple(tuple(other) + tuple(self))

    __hash__ = tuple.__hash__


def sequences_equal(a: Any, b: Any) -> bool:
    """Whether two kernel sequences (tuples or lists, e.g. `x.shape` and `[128]`) hold equal
    elements: in a kernel, as in Triton, a tuple and a list of the same values are equal."""
    if len(a) != len(b):
        return False
    return all(_unwrap(x) == _unwrap(y) for x, y in zip(a, b))


int1 = dtype("int1")
int8 = dtype("int8")
int16 = dtype("int16")
int32 = dtype("int32")
int64 = dtype("int64")
uint8 = dtype("uint8")
uint16 = dtype("uint16")
uint32 = dtype("uint32")
uint64 = dtype("uint64")
float16 = dtype("fp16")
bfloat16 = dtype("bf16")
float32 = dtype("fp32")
float64 = dtype("fp64")

# The module's dtypes by IR name, and pointers to them once asked for: a kernel's parameters share
# these (dtypes are never changed), so the frontend's same-dtype checks find one object
# (`a.dtype is b.dtype`).
_BY_IR: Dict[str, dtype] = {_IR_NAMES[d.name]: d for d in (int1, int8, int16, int32, int64, uint8, uint16, uint32,
                                                             uint64, float16, bfloat16, float32, float64)}


def get_int_dtype(bitwidth: int, signed: bool) -> dtype:
    """The integer dtype of `bitwidth` bits (Triton's `tl.core.get_int_dtype`)."""
    bitwidth, signed = int(_unwrap(bitwidth)), bool(_unwrap(signed))
    if bitwidth == 1:
        return int1
    found = {8: (int8, uint8), 16: (int16, uint16), 32: (int32, uint32), 64: (int64, uint64)}.get(bitwidth)
    if found is None:
        raise ValueError(f"no integer dtype of {bitwidth} bits")
    return found[0] if signed else found[1]


class constexpr_type:
    """The type of a compile-time value, which the value itself identifies."""

    def __init__(self, value: Any):
        self.value = value.value if isinstance(value, constexpr) else value

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, constexpr_type) and self.value == other.value

    def __hash__(self) -> int:
        return hash(("constexpr_type", self.value))

    def __repr__(self) -> str:
        return f"constexpr_type[{self.value!r}]"


class constexpr:
    """A value known at compile time (Triton's `tl.constexpr`); also the annotation that
    marks a kernel parameter as compile-time."""

    def __init__(self, value: Any):
        self.value = value.value if isinstance(value, constexpr) else value

    def __repr__(self) -> str:
        return f"constexpr[{self.value!r}]"

    def __index__(self) -> int:
        return self.value.__index__()

    def __bool__(self) -> bool:
        return bool(self.value)

    def __int__(self) -> int:
        return int(self.value)

    def __float__(self) -> float:
        return float(self.value)

    def __hash__(self) -> int:
        return hash(self.value)

    def __call__(self, *args, **kwargs):
        return self.value(*args, **kwargs)

    @property
    def type(self) -> "constexpr_type":
        """Its type: a constexpr's type is its value (Triton's `constexpr_type`)."""
        return constexpr_type(self.value)

    def __getattr__(self, name: str):
        if name == "value":
            raise AttributeError(name)
        return getattr(self.value, name)


def _unwrap(x: Any) -> Any:
    """A compile-time value's Python value (constexprs, and the numbers a kernel assigned to
    names); anything else as it is."""
    if isinstance(x, constexpr):
        return x.value
    return x.value if type(x) is constant_tensor else x


def _cx_binop(name: str):
    import operator

    f = getattr(operator, name)

    def op(self, other):
        if isinstance(other, tensor):
            return NotImplemented
        return constexpr(f(self.value, _unwrap(other)))

    def rop(self, other):
        if isinstance(other, tensor):
            return NotImplemented
        return constexpr(f(_unwrap(other), self.value))

    return op, rop


for _n in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and_", "or_", "xor", "lshift", "rshift",
           "lt", "le", "gt", "ge", "eq", "ne"):
    _op, _rop = _cx_binop(_n)
    _dunder = _n.rstrip("_")
    setattr(constexpr, f"__{_dunder}__", _op)
    if _n not in ("lt", "le", "gt", "ge", "eq", "ne"):
        setattr(constexpr, f"__r{_dunder}__", _rop)
constexpr.__neg__ = lambda self: constexpr(-self.value)
constexpr.__pos__ = lambda self: constexpr(+self.value)
constexpr.__invert__ = lambda self: constexpr(~self.value)
constexpr.__abs__ = lambda self: constexpr(abs(self.value))
constexpr.__hash__ = lambda self: hash(self.value)


# -- the active backend -------------------------------------------------------------------

_state = threading.local()


def current_backend():
    be = getattr(_state, "backend", None)
    if be is None:
        raise RuntimeError(
            "tiles.language functions can only be called inside a @tiles.jit kernel "
            "(compiled, or run with TILES_INTERPRET=1)")
    return be


class use_backend:
    """Makes `backend` the target of language ops in this thread, for a `with` block."""

    def __init__(self, backend):
        self.backend = backend

    def __enter__(self):
        self.prev = getattr(_state, "backend", None)
        _state.backend = self.backend
        return self.backend

    def __exit__(self, *exc):
        _state.backend = self.prev


class tensor:
    """A tile or scalar value inside a kernel."""

    __slots__ = ("handle", "dtype", "shape")

    def __init__(self, handle: Any, dtype_: dtype, shape: Sequence[int] = ()):
        self.handle = handle
        self.dtype = dtype_
        self.shape = shape if type(shape) is shape_tuple else shape_tuple(shape)

    @property
    def type(self):
        return block_type(self.dtype, self.shape) if self.shape else self.dtype

    @property
    def numel(self) -> constexpr:
        n = 1
        for d in self.shape:
            n *= d
        return constexpr(n)

    def __repr__(self) -> str:
        return f"tensor({self.dtype}, shape={list(self.shape)})"

    # Python control flow on tensors works only where values exist (the interpreter).
    def __bool__(self) -> bool:
        return current_backend().to_python_bool(self)

    def __index__(self) -> int:
        return current_backend().to_python_int(self)

    def __int__(self) -> int:
        return current_backend().to_python_int(self)

    def __float__(self) -> float:
        return float(current_backend().to_python_value(self))

    def __iter__(self):
        raise TypeError("a tile cannot be iterated over; index it with tl.arange offsets instead")

    def __getitem__(self, slices):
        from . import semantic

        return semantic.subscript(self, slices)

    def to(self, dtype, fp_downcast_rounding=None, bitcast=False):
        from . import semantic

        to_type = _unwrap(dtype)
        if bitcast:
            return semantic.bitcast(self, to_type)
        if fp_downcast_rounding is not None:
            from . import language

            return language.cast(self, to_type, fp_downcast_rounding=fp_downcast_rounding)
        return semantic.cast(self, to_type)

    def __getattr__(self, name: str):
        if name[:1] == "_":
            # Not a language function (none is private): the frontend's questions about a
            # value (`hasattr(x, "_tiles_flatten")`, a bound method's `__self__`...) end here.
            raise AttributeError(f"tensor has no attribute {name!r}")
        from . import language

        f = getattr(language, name, None)
        if f is not None and getattr(f, "_tiles_method", False):
            def method(*a, **k):
                return f(self, *a, **k)

            method._tiles_builtin = True  # the compiler calls it with evaluated arguments
            return method
        raise AttributeError(f"tensor has no attribute {name!r}")

    @property
    def T(self):
        from . import semantic

        return semantic.trans(self)


class constant_tensor(tensor):
    """A scalar tensor holding a Python number that a kernel assigned to a name. Triton makes
    such names tensors (`n = 1` has `n.dtype`, and int32 arithmetic: -7 // 2 is -3); tiles
    also lets the number stand where a compile-time constant is needed (`tl.arange(0, n)`),
    which Triton refuses."""

    __slots__ = ("value",)

    def __init__(self, handle: Any, dtype_: "dtype", value: Any):
        super().__init__(handle, dtype_, ())
        self.value = value


def _tensor_binop(sem_name: str, reflected: bool = False):
    f = None  # semantic's function, found on first use (semantic imports this module)
    # `+`, `-` and `*` are checked for integer overflow in debug mode (Triton's operators are).
    extra = (True,) if sem_name in ("add", "sub", "mul") else ()

    def op(self, other):
        nonlocal f
        if f is None:
            from . import semantic

            f = getattr(semantic, sem_name)
        return f(other, self, *extra) if reflected else f(self, other, *extra)

    return op


for _py, _sem in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "truediv"),
                  ("floordiv", "floordiv"), ("mod", "mod"), ("and", "and_"), ("or", "or_"), ("xor", "xor_"),
                  ("lshift", "shl"), ("rshift", "shr")):
    setattr(tensor, f"__{_py}__", _tensor_binop(_sem))
    setattr(tensor, f"__r{_py}__", _tensor_binop(_sem, reflected=True))
for _py, _sem in (("lt", "less"), ("le", "less_equal"), ("gt", "greater"), ("ge", "greater_equal"),
                  ("eq", "equal"), ("ne", "not_equal")):
    setattr(tensor, f"__{_py}__", _tensor_binop(_sem))
tensor.__hash__ = object.__hash__
tensor.__neg__ = lambda self: __import__("tiles.semantic", fromlist=["x"]).minus(self)
tensor.__pos__ = lambda self: self
tensor.__invert__ = lambda self: __import__("tiles.semantic", fromlist=["x"]).invert(self)
tensor.__abs__ = lambda self: __import__("tiles.semantic", fromlist=["x"]).abs_(self)
tensor.__pow__ = lambda self, o: __import__("tiles.semantic", fromlist=["x"]).pow_(self, o)


# -- aggregates: Triton's `triton.language.core._aggregate` --------------------------------------


class _AggregateMethod:
    """A @jit method of an aggregate: read from an instance, it is the jit function with the
    instance bound first (the frontend inlines it so; the interpreter calls it so)."""

    def __init__(self, fn: Any):
        self.fn = fn

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self.fn if obj is None else functools.partial(self.fn, obj)


def _aggregate(cls: type) -> type:
    """A class of named tensors and constants that kernels build, pass to @jit functions, carry
    through loops and call @jit methods on (`@tl.core._aggregate class Tile: ptr: tl.tensor`).
    Fields are the class's annotations; its `__init__` (plain Python, run at compile time) must
    set each of them."""
    import inspect

    fields = list(cls.__dict__.get("__annotations__", {}))
    user_init = cls.__dict__.get("__init__")
    init_params = inspect.signature(user_init).parameters if user_init is not None else {}

    def __init__(self, *args, _semantic=None, _generator=None, **kwargs):
        if user_init is not None:
            extra = {k: v for k, v in (("_semantic", _semantic), ("_generator", _generator)) if k in init_params}
            user_init(self, *args, **extra, **kwargs)
        else:
            for name, v in zip(fields, args):
                setattr(self, name, v)
            for name, v in kwargs.items():
                setattr(self, name, v)
        missing = [f for f in fields if f not in self.__dict__]
        if missing:
            raise AttributeError(f"the constructor of {cls.__name__} did not set {', '.join(missing)}")

    def __setattr__(self, name, value):
        if name not in fields:
            raise AttributeError(f"{cls.__name__} has no field '{name}' (its fields: {', '.join(fields)})")
        object.__setattr__(self, name, value)

    def _tiles_flatten(self):
        parts = []
        for f in fields:
            v = getattr(self, f)
            if isinstance(v, tensor):
                parts.append(v)
            elif hasattr(v, "_tiles_flatten"):
                parts.extend(v._tiles_flatten())
        return parts

    def _tiles_rebuild(self, parts):
        out = object.__new__(type(self))
        it = iter(parts)
        for f in fields:
            v = getattr(self, f)
            if isinstance(v, tensor):
                v = next(it)
            elif hasattr(v, "_tiles_flatten"):
                v = v._tiles_rebuild([next(it) for _ in v._tiles_flatten()])
            object.__setattr__(out, f, v)
        return out

    def __repr__(self):
        return f"{cls.__name__}({', '.join(f'{f}={getattr(self, f, None)!r}' for f in fields)})"

    body = {"__init__": __init__, "__setattr__": __setattr__, "_tiles_flatten": _tiles_flatten,
            "_tiles_rebuild": _tiles_rebuild, "__repr__": __repr__, "_tiles_aggregate_fields": tuple(fields),
            "__triton_aggregate__": True, "__aggregate_fields__": tuple(fields),
            "__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
    for name, member in cls.__dict__.items():
        if name in body or name.startswith("__"):
            continue
        is_jit = hasattr(member, "source") and hasattr(member, "params")  # a @jit function
        body[name] = _AggregateMethod(member) if is_jit else member
    return type(cls.__name__, (), body)


# -- Triton's `triton.language.core` holds the whole language; `tl.core.X` finds it here ----------
CONSTEXPR_0 = constexpr(0)


_unwrap_if_constexpr = _constexpr_to_value = _unwrap


def __getattr__(name: str):
    from . import language

    try:
        return getattr(language, name)
    except AttributeError:
        raise AttributeError(f"module 'tiles.core' has no attribute {name!r}") from None
