"""`@tiles.jit`: binds launch arguments, specialises, compiles once per specialisation, and
launches. Where there is no GPU (or `TILES_INTERPRET=1`) kernels run in the interpreter."""

from __future__ import annotations

import ctypes
import inspect
import os
import re
import struct
import threading
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from .. import core
from ..errors import ArgumentOverflowError, HostMemoryError, LaunchError
from . import async_compile, cache, driver

_LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "debug",
                   "sanitize_overflow", "arch", "enable_reflect_ftz", "launch_cooperative_grid", "launch_pdl",
                   "stream")
# Objects with `enter(fn, grid, args, compiled, stream) -> token` and `exit(token)`, called around
# every launch while present (tiles.profiler); see `add_launch_hook`.
_launch_hooks: List[Any] = []


def add_launch_hook(hook: Any) -> None:
    """Calls `hook.enter`/`hook.exit` around every launch from now on (the native fast path
    steps aside while any hook is present)."""
    from .. import _tiles

    _launch_hooks.append(hook)
    _tiles.set_launch_hooked(True)


def remove_launch_hook(hook: Any) -> None:
    from .. import _tiles

    if hook in _launch_hooks:
        _launch_hooks.remove(hook)
    _tiles.set_launch_hooked(bool(_launch_hooks))


class JitFunctionInfo(NamedTuple):
    """What the JIT hooks get as `fn` (Triton's `JitFunctionInfo`)."""

    module: str
    name: str
    jit_function: Any


def _json_constant(v: Any) -> Any:
    """A constexpr value as JSON (`preload` reads it back): numbers, strings, None, dtypes and
    tuples of them; anything else as its repr, which `preload` refuses."""
    if isinstance(v, (bool, int, float, str, type(None))):
        return v
    if isinstance(v, core.dtype):
        return {"dtype": str(v)}
    if isinstance(v, tuple):
        return {"tuple": [_json_constant(x) for x in v]}
    return {"repr": repr(v)}


def _constant_from_json(v: Any) -> Any:
    if isinstance(v, dict):
        if "dtype" in v:
            return core.dtype(v["dtype"])
        if "tuple" in v:
            return tuple(_constant_from_json(x) for x in v["tuple"])
        raise RuntimeError(f"preload cannot rebuild the constexpr {v['repr']}")
    return v


class _CompiledKernels(dict):
    """`device_caches[0][0]`: the compiled kernels by specialisation key. A copy, except that
    clearing it or deleting from it drops those specialisations from the JIT function, as
    clearing Triton's cache does (tests do so to see a kernel compile again)."""

    def __init__(self, owner: Any, items: Dict[Any, Any]):
        super().__init__(items)
        self._owner = owner

    def clear(self) -> None:
        super().clear()
        self._owner._forget()

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        self._owner._forget([key])

    def pop(self, key: Any, *default: Any) -> Any:
        out = super().pop(key, *default)
        self._owner._forget([key])
        return out


# The constants of a tuple argument that preload can rebuild from JSON.
_CONSTANT_TYPES = (int, float, bool, str, type(None), core.dtype)


def _json_tuple_key(k: Any) -> Any:
    """A tuple argument's cache key as JSON, or None where preload could not rebuild it
    (named tuples, descriptors, constants other than numbers, strings, None and dtypes)."""
    cls, parts = k
    if cls is not tuple:
        return None
    out = []
    for part in parts:
        if part[0] in ("p", "s"):
            out.append(list(part))
        elif part[0] == "c" and len(part) == 3 and type(part[2]) in _CONSTANT_TYPES and part[1] is type(part[2]):
            out.append(["c", _json_constant(part[2])])
        elif isinstance(part[0], type):  # a nested tuple's key: (its class, its parts)
            sub = _json_tuple_key(part)
            if sub is None:
                return None
            out.append(["t", sub])
        else:
            return None
    return out


def _tuple_key_from_json(parts: List[Any]) -> Any:
    out = []
    for part in parts:
        if part[0] in ("p", "s"):
            out.append(tuple(part))
        elif part[0] == "c":
            v = _constant_from_json(part[1])
            out.append(("c", type(v), v))
        else:
            out.append(_tuple_key_from_json(part[1]))
    return (tuple, tuple(out))


def _json_params(key, info) -> List[Any]:
    """Per parameter, what its specialisation key says, as JSON (`preload`'s input)."""
    out: List[Any] = []
    for k, (kind, ty, extra, _raw) in zip(key, info):
        if k[0] == "c":
            out.append(["c", _json_constant(k[1])])
        elif k[0] in ("p", "s", "none"):
            out.append(list(k))
        elif k[0] == "t":
            leaves, consts = extra
            tkey = _json_tuple_key(k[1])
            plain = all(not t.startswith("tensordesc<") for _p, t, _d in leaves) and all(
                not n.endswith(".__class__") for n in consts)
            if tkey is None or not plain:
                out.append([kind])
            else:
                out.append(["t", tkey, ty, [[list(p), t, d] for p, t, d in leaves],
                            {n: _json_constant(v) for n, v in consts.items()}])
        else:  # descriptors, and tuples holding them: named, for preload to refuse
            out.append([kind])
    return out


class _KnobLaunchHooks:
    """`knobs.runtime.launch_enter_hook` / `launch_exit_hook` as a launch hook: each gets the
    launch's metadata, a `LazyDict` of name, function and stream to which `.get()` adds the
    kernel's `launch_metadata(grid, metadata, args)`."""

    knobs = LazyDict = None  # the modules' names, looked up once (not at each launch)

    def enter(self, fn, grid, args, compiled, stream):
        if self.knobs is None:
            from .. import knobs
            from ..compiler import LazyDict

            _KnobLaunchHooks.knobs, _KnobLaunchHooks.LazyDict = knobs, LazyDict
        knobs, LazyDict = self.knobs, self.LazyDict
        function = getattr(compiled, "_loaded", None)
        md = LazyDict({"name": compiled.name, "function": function.handle if function is not None else None,
                       "stream": stream})
        if getattr(fn, "launch_metadata", None) is not None:
            md.add(fn.launch_metadata, (grid, getattr(compiled, "metadata", None), dict(zip(fn.param_names, args))))
        knobs.runtime.launch_enter_hook(md)
        return md

    def exit(self, md) -> None:
        self.knobs.runtime.launch_exit_hook(md)


_KNOB_HOOKS = _KnobLaunchHooks()


def _knob_hooks_changed(on: bool) -> None:
    if on and _KNOB_HOOKS not in _launch_hooks:
        add_launch_hook(_KNOB_HOOKS)
    elif not on and _KNOB_HOOKS in _launch_hooks:
        remove_launch_hook(_KNOB_HOOKS)


# Launches with these options always take the Python path (the native dispatcher knows
# num_warps, num_stages, enable_fp_fusion and maxnreg, and ignores num_ctas and extern_libs as
# `run` does).
_UNTAUGHT_OPTIONS = frozenset(("stream", "arch", "enable_reflect_ftz", "launch_cooperative_grid", "launch_pdl"))


def arch_target(arch: Any) -> Optional[str]:
    """Triton's `arch` option (`"sm80"`, `"sm_90a"`, `90`, `"cuda:80"`) as tiles' target name;
    None for none."""
    if arch is None or arch == "":
        return None
    m = re.fullmatch(r"(?:sm_?|cuda:)?(\d+)a?", str(arch).strip().lower())
    if m is None:
        raise ValueError(f"arch {arch!r} names no NVIDIA GPU (tiles takes 'sm80', 'sm_90a', 90, ...)")
    from .driver import capability_target

    return capability_target(int(m.group(1)))


def _target(arch: Optional[str], gpu: bool) -> str:
    """What a launch compiles for: `arch` if given, else this GPU, else (no GPU: `warmup` on a
    CPU machine) an H100, as the interpreter and `driver.active` present one."""
    return arch or (driver.default_target() if gpu else "sm_90a")


def _sanitizing(debug: bool, opts: Dict[str, Any]) -> bool:
    """Whether integer overflow is checked: in debug mode, unless `sanitize_overflow=False`."""
    return debug and bool(opts.get("sanitize_overflow", True))


def _code_options(debug: bool, opts: Dict[str, Any], arch: Optional[str]) -> Tuple[Any, ...]:
    """The part of the in-memory cache key that options and settings make: (debug, fp_fusion,
    maxnreg, sanitize_overflow, arch, ftz, f32_default): `ftz` is Triton's `enable_reflect_ftz`
    (on by default), `f32_default` the setting `tl.dot` reads for its default fp32 precision."""
    return (debug, fp_fusion(opts.get("enable_fp_fusion")), opts.get("maxnreg"),
            _sanitizing(debug, opts), arch, bool(opts.get("enable_reflect_ftz", True)), env_setting("F32_DEFAULT"))


def _check_clusters(arch: Optional[str]) -> None:
    """`num_ctas > 1` (Triton's thread-block clusters; tiles runs each program as one CTA)
    is refused for GPUs before Hopper, as Triton refuses it."""
    target = _target(arch, driver.available())
    if int(re.sub(r"\D", "", target)) < 90:
        raise ValueError(f"num_ctas > 1 requires NVIDIA SM90+ (Hopper). Current target is {target}. "
                         "Set num_ctas=1 or target an SM90+ GPU.")


_TORCH_DTYPES = {
    "torch.float16": "fp16", "torch.bfloat16": "bf16", "torch.float32": "fp32", "torch.float64": "fp64",
    "torch.int8": "i8", "torch.int16": "i16", "torch.int32": "i32", "torch.int64": "i64",
    "torch.uint8": "u8", "torch.uint16": "u16", "torch.uint32": "u32", "torch.uint64": "u64", "torch.bool": "i1",
    "torch.float8_e5m2": "fp8e5", "torch.float8_e4m3fn": "fp8e4nv",
}
# Every spelling of a dtype that Triton's signatures accept, to its signature name (Triton's
# `type_canonicalisation_dict`, which test harnesses and libraries read): torch's names, tl's
# names, and the signature names themselves. A bool is "u1" there.
type_canonicalisation_dict = {
    **{n: "u1" for n in ("bool", "int1", "uint1", "i1", "u1")},
    "half": "fp16", "float16": "fp16", "bfloat16": "bf16", "float": "fp32", "float32": "fp32",
    "double": "fp64", "float64": "fp64", "int": "i32", "void": "void",
    **{f"int{b}": f"i{b}" for b in (8, 16, 32, 64)}, **{f"uint{b}": f"u{b}" for b in (8, 16, 32, 64)},
    "float8e4nv": "fp8e4nv", "float8_e4m3fn": "fp8e4nv", "float8e5": "fp8e5", "float8_e5m2": "fp8e5",
    "float8e4b15": "fp8e4b15", "float8e4b8": "fp8e4b8", "float8_e4m3fnuz": "fp8e4b8",
    "float8e5b16": "fp8e5b16", "float8_e5m2fnuz": "fp8e5b16",
    **{n: n for n in ("fp8e4nv", "fp8e5", "fp8e4b15", "fp8e4b8", "fp8e5b16", "fp16", "bf16", "fp32", "fp64",
                      "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")},
}
_TYPESTR = {"f2": "fp16", "f4": "fp32", "f8": "fp64", "i1": "i8", "i2": "i16", "i4": "i32", "i8": "i64",
            "u1": "u8", "u2": "u16", "u4": "u32", "u8": "u64", "b1": "i1"}


def _fp16_bits(v: float) -> ctypes.c_uint16:
    """A number as an fp16 kernel argument (its bits, rounded to nearest even)."""
    return ctypes.c_uint16(struct.unpack("<H", struct.pack("<e", float(v)))[0])


def _bf16_bits(v: float) -> ctypes.c_uint16:
    """A number as a bf16 kernel argument: fp32's upper half, rounded to nearest even."""
    b = struct.unpack("<I", struct.pack("<f", float(v)))[0]
    if (b & 0x7F800000) == 0x7F800000 and b & 0x7FFFFF:  # NaN stays a (quiet) NaN
        return ctypes.c_uint16((b >> 16) | 0x40)
    return ctypes.c_uint16(((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF)


_CTYPES = {"i1": ctypes.c_bool, "i8": ctypes.c_int8, "i16": ctypes.c_int16, "i32": ctypes.c_int32,
           "i64": ctypes.c_int64, "u8": ctypes.c_uint8, "u16": ctypes.c_uint16, "u32": ctypes.c_uint32,
           "u64": ctypes.c_uint64, "fp16": _fp16_bits, "bf16": _bf16_bits, "fp32": ctypes.c_float,
           "fp64": ctypes.c_double}


class Param:
    """A kernel parameter as declared."""

    empty = inspect.Parameter.empty

    def __init__(self, p: inspect.Parameter, index: int, do_not_specialize: bool, on_alignment: bool = False):
        self.name = p.name
        self.index = index
        self.default = p.default
        ann = p.annotation
        self.is_constexpr = ann is core.constexpr or (isinstance(ann, str) and ann.split(".")[-1] == "constexpr")
        # `p: tl.const`: a pointer to data the kernel must not write (Triton's `tl.const`).
        named = ann.split(".")[-1] if isinstance(ann, str) else getattr(ann, "__qualname__", None)
        self.is_const = named == "const" and (isinstance(ann, str) or ann.__module__.startswith("tiles"))
        self.do_not_specialize = do_not_specialize
        # `do_not_specialize_on_alignment`: an int is still specialised on being 1, but neither
        # it nor a pointer on divisibility (alignment) by 16.
        self.no_align = do_not_specialize or on_alignment
        self.do_not_specialize_on_alignment = on_alignment  # Triton's name
        # `n: tl.int64` (or the string "tl.int64") fixes a scalar parameter's type, as in Triton.
        if isinstance(ann, str):
            ann = getattr(core, ann.split(".")[-1], None)
        self.scalar_type: Optional[str] = None
        if isinstance(ann, core.dtype) and not ann.is_ptr() and ann.ir in _CTYPES:
            self.scalar_type = ann.ir

    @property
    def num(self) -> int:
        """Triton's name for the parameter's position (torch's inductor reads it)."""
        return self.index


def _annotated_scalar_type(p: "Param", v: Any) -> str:
    """The signature type of scalar `v` for parameter `p` (its annotation, when it has one)."""
    ty = _scalar_type(v, p.name)
    if p.scalar_type is None:
        return ty
    if isinstance(v, float) and not p.scalar_type.startswith(("fp", "bf")):
        raise LaunchError(f"argument '{p.name}' is annotated {p.scalar_type} but got the float {v}")
    return p.scalar_type


def _has_source(fn: Any) -> bool:
    """Whether `fn`'s source text can be read (not a function made by exec)."""
    import linecache

    code = getattr(fn, "__code__", None)
    return code is not None and bool(linecache.getlines(code.co_filename, getattr(fn, "__globals__", None)))


def env_setting(name: str) -> Optional[str]:
    """`TILES_<name>` from the environment, or Triton's `TRITON_<name>` when only that is set
    (scripts written for Triton set `TRITON_INTERPRET=1`, `TRITON_DEBUG=1`, ...)."""
    v = os.environ.get("TILES_" + name)
    return v if v is not None else os.environ.get("TRITON_" + name)


_FALSE = ("", "0", "false", "off", "no", "n")


def env_true(value: Optional[str]) -> bool:
    """A boolean setting's text as Triton reads it: unset, empty, 0, false, off, no and n
    (in any case) are off; anything else is on."""
    return value is not None and value.strip().lower() not in _FALSE


def env_flag(name: str) -> bool:
    """Whether the setting [`env_setting`] names is on ([`env_true`])."""
    return env_true(env_setting(name))


# Float multiply-adds are not contracted to fma unless asked (Triton 3.10's announced default;
# measured faster here: ptxas schedules the loads of fused code worse, see benchmarks/results).
DEFAULT_FP_FUSION = env_flag("DEFAULT_FP_FUSION")
# Triton's `TRITON_FORCE_DISABLE_FP_FUSION`: no fusion even where a launch asks for it.
FORCE_NO_FP_FUSION = env_flag("FORCE_DISABLE_FP_FUSION")


def fp_fusion(requested: Optional[bool]) -> bool:
    """Whether multiply-adds may contract: the launch's or compile's `enable_fp_fusion`, else
    the default, never while fusion is force-disabled."""
    return not FORCE_NO_FP_FUSION and bool(DEFAULT_FP_FUSION if requested is None else requested)


def compile_only() -> bool:
    """`TILES_COMPILE_ONLY=1`: every launch compiles its kernel and returns the compiled kernel
    without running it, and an autotuned launch compiles every config that pruning keeps. With
    no GPU, kernels compile for an H100 (`sm_90a`), from CPU tensors or numpy arrays as well,
    and `TILES_ASSEMBLER=ptxas` also has ptxas assemble each one: a CI machine without a GPU
    checks that a codebase's kernels compile by running its tests or its model. It wins over the
    interpreter. Outputs are left as they were, so results are meaningless."""
    return env_true(env_setting("COMPILE_ONLY"))


def compiled_only(kernel: Any) -> Any:
    """A compile-only launch's kernel, assembled by ptxas where that is the assembler and no GPU
    has loaded it (a warmup with a GPU loads, and so assembles, what it compiles)."""
    if hasattr(kernel, "link") and not driver.available() and driver.assembler() == "ptxas":
        kernel.link()
    return kernel


def interpreting(jitfn: "JITFunction") -> bool:
    if jitfn.interpret is not None:
        return bool(jitfn.interpret)
    env = env_setting("INTERPRET")
    if env is not None:
        return env not in ("", "0")
    return not driver.available()


def _from_def(text: str) -> str:
    """A function's source text, dedented, from its `def` on (decorators left out)."""
    import re
    import textwrap

    text = textwrap.dedent(text)
    m = re.search(r"^def\s+\w+\s*\(", text, re.MULTILINE)
    return text[m.start():] if m else text


class ConstexprFunction:
    """A plain Python function that kernels call on compile-time values (Triton >= 3.5's
    `@constexpr_function`). tiles calls any plain Python function so; the wrapper is what
    tools that look for it find (torch's inductor copies such functions' `src` next to the
    user kernels it compiles). Called outside a kernel it is the function."""

    __tiles_constexpr_function__ = True

    def __init__(self, fn: Callable):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__qualname__ = getattr(fn, "__qualname__", fn.__name__)
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__
        self.__wrapped__ = fn

    @property
    def __code__(self) -> Any:  # the cache fingerprints the function's code
        return self.fn.__code__

    @property
    def __globals__(self) -> Dict[str, Any]:
        return self.fn.__globals__

    @property
    def src(self) -> str:
        """The function's source from its `def` on, dedented."""
        text = self.__dict__.get("_new_src")
        return text if text is not None else _from_def(inspect.getsource(self.fn))

    @property
    def cache_key(self) -> str:
        """A hash of the function's code (what the kernels that call it key on)."""
        from .cache import _value_fingerprint

        return _value_fingerprint(self)

    hash = cache_key

    def _unsafe_update_src(self, new_src: str) -> None:
        """Replaces the function by `new_src` (Triton's test helper): later compiles call the
        new one, and kernels that call it key on its code, once their own `hash` is reset."""
        scope: Dict[str, Any] = {}
        exec(compile(new_src, f"<{self.__name__}, updated>", "exec"), self.fn.__globals__, scope)
        fn = scope.get(self.__name__)
        if not callable(fn):
            raise ValueError(f"the new source does not define {self.__name__}")
        self.fn = self.__wrapped__ = fn
        self._new_src = new_src

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"ConstexprFunction({self.__qualname__})"


def constexpr_function(fn: Callable) -> ConstexprFunction:
    """Marks a plain Python function that kernels call on compile-time values (Triton >= 3.5)."""
    return fn if isinstance(fn, ConstexprFunction) else ConstexprFunction(fn)


def must_use_result(x: Any = None) -> Any:
    """Triton's decorator asking callers to use a @jit function's result: a call whose result
    is dropped (`f(x)` as a statement) is a compile error, with the optional message added.
    `@must_use_result` or `@must_use_result("why")`."""

    def mark(fn: Any, why: str = "") -> Any:
        fn._tiles_must_use = why
        return fn

    if callable(x):
        return mark(x)
    return lambda fn: mark(fn, "" if x is None else str(x))


class MockTensor:
    """A stand-in for a device tensor in `kernel.warmup(...)` (Triton's `MockTensor`): a dtype
    (torch's, or a `tiles.language` one) and a shape, at address 0 (16-byte aligned)."""

    is_cuda = True

    def __init__(self, dtype: Any, shape: Optional[Sequence[int]] = None):
        self.dtype = dtype
        self.shape = list(shape) if shape is not None else [1]

    @staticmethod
    def wrap_dtype(arg: Any) -> Any:
        """A torch dtype becomes a MockTensor of it; anything else is returned as is."""
        if type(arg).__name__ == "dtype" and type(arg).__module__ == "torch":
            return MockTensor(arg)
        return arg

    def stride(self):
        out = [1]
        for n in reversed(self.shape[1:]):
            out.append(out[-1] * n)
        return tuple(reversed(out))

    @staticmethod
    def data_ptr() -> int:
        return 0


class TensorWrapper:
    """A device tensor seen as another dtype (Triton's `reinterpret`): the same memory, the
    kernel's pointer takes `dtype` (a `tiles.language` dtype, e.g. `tl.float8e5`)."""

    def __init__(self, base: Any, dtype: Any):
        self.base = base
        self.dtype = dtype
        self.data = getattr(base, "data", base)
        self.shape = tuple(base.shape)
        self.device = getattr(base, "device", None)
        self.is_cuda = bool(getattr(base, "is_cuda", False))

    def data_ptr(self) -> int:
        return self.base.data_ptr()

    # The base tensor's own methods, the result wrapped again as the same dtype.
    def new_empty(self, sizes) -> "TensorWrapper":
        return TensorWrapper(self.base.new_empty(sizes), self.dtype)

    def clone(self) -> "TensorWrapper":
        return TensorWrapper(self.base.clone(), self.dtype)

    def cpu(self) -> "TensorWrapper":
        return TensorWrapper(self.base.cpu(), self.dtype)

    def to(self, device) -> "TensorWrapper":
        return TensorWrapper(self.base.to(device), self.dtype)

    def copy_(self, other) -> "TensorWrapper":
        self.base.copy_(other.base if isinstance(other, TensorWrapper) else other)
        return self

    def stride(self, *i):
        return self.base.stride(*i)

    def numel(self) -> int:
        return self.base.numel()

    def element_size(self) -> int:
        return self.base.element_size()

    def __str__(self) -> str:
        return f"TensorWrapper[{self.dtype}]({self.base})"


def reinterpret(tensor: Any, dtype: Any) -> Any:
    """`tensor`'s memory as `dtype` for a kernel argument. Host (numpy) arrays, which the
    interpreter runs on, become numpy views of that dtype."""
    if isinstance(tensor, TensorWrapper):
        tensor = tensor.base
    if not isinstance(dtype, core.dtype):
        return tensor  # a torch dtype: the tensor already says what it holds
    if type(tensor).__module__ == "numpy" and not dtype.is_fp8e4b15():  # it has no numpy type
        from .._numpy_types import numpy_dtype

        return tensor.view(numpy_dtype(dtype))
    return TensorWrapper(tensor, dtype)


# Set while `warmup` specialises (per thread): it compiles without launching, so a CPU tensor
# (a compile on a machine without a GPU) stands for its dtype and alignment, as in Triton.
_warming_up = threading.local()


def grid_dims(g: Any) -> Tuple[int, int, int]:
    """A launch grid (an int, or 1 to 3 of them in a tuple or list, as a grid function returns
    it) as three ints; anything else is a LaunchError that shows it."""
    dims = g if isinstance(g, (tuple, list)) else (g,)
    if not 1 <= len(dims) <= 3:
        raise LaunchError(f"grid must have 1 to 3 dimensions, got {g!r}")
    try:
        if any(isinstance(x, (str, bytes)) for x in dims):
            raise TypeError
        out = tuple(int(x) for x in dims)
    except (TypeError, ValueError):
        raise LaunchError(f"grid must be 1 to 3 ints (or a function of the meta-parameters giving them), "
                          f"got {g!r}") from None
    return out + (1,) * (3 - len(out))


def _pinned(v: Any) -> bool:
    """A torch CPU tensor in page-locked memory: the GPU reaches it at the same address (UVA)."""
    try:
        return bool(v.is_pinned())
    except Exception:  # noqa: BLE001 -- not a torch tensor, or no CUDA runtime to ask
        return False


def _says_cuda(v: Any) -> bool:
    """An object's `device` (a torch device, or its text) names a CUDA device."""
    d = getattr(v, "device", None)
    return str(getattr(d, "type", d)).startswith("cuda")


def _pointer_info(v: Any, name: str) -> Optional[Tuple[int, str]]:
    """(address, dtype) of a device array argument, or None if `v` is not an array."""
    t = type(v)
    if isinstance(v, (bool, int, float)) or (t.__module__ == "numpy" and t.__name__ != "ndarray"):
        return None  # Python and numpy scalars
    if isinstance(v, TensorWrapper):
        if not v.is_cuda and not getattr(_warming_up, "active", False) and not _pinned(v.base):
            raise HostMemoryError(f"argument '{name}' wraps a CPU tensor; the GPU kernel needs a CUDA tensor")
        return v.data_ptr(), v.dtype.ir
    if isinstance(v, MockTensor):
        dt = _dtype_ir(v.dtype)
        if dt is None:
            raise LaunchError(f"argument '{name}' is a MockTensor of {v.dtype}, which tiles does not support")
        return 0, dt
    if hasattr(v, "data_ptr") and hasattr(v, "dtype"):
        # A torch tensor, or as in Triton any object with `data_ptr()` and a `dtype` (FlagGems'
        # StridedBuffer): a device pointer, unless it says it is not on the GPU.
        warming = getattr(_warming_up, "active", False)
        is_cuda = getattr(v, "is_cuda", None)
        if is_cuda is not None and not is_cuda and not warming and not _pinned(v):
            raise HostMemoryError(f"argument '{name}' is a CPU tensor; the GPU kernel needs a CUDA tensor "
                                  "(pinned host memory works too), or run with TILES_INTERPRET=1")
        dt = _dtype_ir(v.dtype)
        if dt is None:
            raise LaunchError(f"argument '{name}' has dtype {v.dtype}, which tiles does not support")
        addr = v.data_ptr()
        if is_cuda is None and addr and not warming and not _says_cuda(v) and not driver.device_accessible(addr):
            # No `is_cuda` and no CUDA `device`: the driver is asked, as Triton's launcher asks.
            raise HostMemoryError(f"argument '{name}' ({type(v).__name__}) points at host memory the GPU "
                                  "cannot reach; pass device memory, or run with TILES_INTERPRET=1")
        return addr, dt
    cai = getattr(v, "__cuda_array_interface__", None)
    if cai is not None:
        ts = cai["typestr"]
        dt = _TYPESTR.get(ts[1:])
        if dt is None:
            raise LaunchError(f"argument '{name}' has typestr {ts!r}, which tiles does not support")
        return int(cai["data"][0]), dt
    if t.__module__ == "numpy" and t.__name__ == "ndarray":
        if getattr(_warming_up, "active", False):  # a warmup compiles from a host array's dtype
            dt = _TYPESTR.get(v.dtype.str[1:])
            if dt is None:
                raise LaunchError(f"argument '{name}' has dtype {v.dtype}, which tiles does not support")
            return v.ctypes.data, dt
        raise HostMemoryError(f"argument '{name}' is a host (numpy) array; the GPU kernel needs device memory "
                          "(a CUDA tensor), or run with TILES_INTERPRET=1")
    if hasattr(v, "__dlpack__") and hasattr(v, "__dlpack_device__"):
        from . import dlpack

        return dlpack.pointer_and_dtype(v, name)
    return None


def _dtype_ir(dt: Any) -> Optional[str]:
    """The signature name of a tensor's dtype, tiles' (`tl.float16`) or torch's; None if tiles
    has no such type."""
    return dt.ir if isinstance(dt, core.dtype) else _TORCH_DTYPES.get(str(dt))


def mangle_type(arg: Any, specialize: bool = False) -> str:
    """Triton's signature type of an argument: `*fp16` for a tensor of fp16 (a CPU tensor
    too: tools ask it of stand-ins), `i32`/`i64`/`u64` for ints, `fp32`, `i1`. `specialize` is
    in Triton's signature; tiles' types do not depend on it. `None` (an absent optional pointer)
    and a `tl.constexpr` are `constexpr`, as in Triton: torch's inductor asks for every
    argument of a user kernel, `None`s included."""
    if arg is None or isinstance(arg, core.constexpr):
        return "constexpr"
    if hasattr(arg, "data_ptr") and hasattr(arg, "dtype") and not isinstance(arg, (bool, int, float)):
        dt = _dtype_ir(arg.dtype)
        if dt is None:
            raise LaunchError(f"tiles does not support tensors of {arg.dtype}")
        return "*" + dt
    return _scalar_type(arg, "arg")


def native_specialize_impl(backend: Any, arg: Any, is_const: bool = False, specialize_value: bool = True,
                           align: bool = True) -> Tuple[str, Optional[str]]:
    """Triton's specialisation of one argument: (its type, "D" where a pointer is 16-byte
    aligned or an int divisible by 16, else None); `backend.parse_attr` reads the second.
    `backend` and `is_const` are in Triton's signature; the result depends on neither."""
    ty = mangle_type(arg)
    if ty == "constexpr":
        return ty, arg
    if ty.startswith("*"):
        return ty, "D" if align and arg.data_ptr() % 16 == 0 else None
    if ty in ("i32", "i64", "u64") and specialize_value and align and arg % 16 == 0:
        return ty, "D"
    return ty, None


def _scalar_type(v: Any, name: str) -> str:
    if isinstance(v, bool):
        return "i1"
    if isinstance(v, int):
        if -(2**31) <= v < 2**31:
            return "i32"
        if -(2**63) <= v < 2**63:
            return "i64"
        if 0 <= v < 2**64:
            return "u64"
        raise ArgumentOverflowError(f"argument '{name}' = {v} does not fit in 64 bits")
    if isinstance(v, float):
        return "fp32"
    raise LaunchError(f"argument '{name}' has unsupported type {type(v).__name__}: expected a tensor, "
                      "an int, a float or a bool")


_SLOT_KINDS = {"i1": "i1", "i32": "i32", "i64": "i64", "u64": "u64", "fp32": "fp32"}


def _is_namedtuple(v: Any) -> bool:
    return isinstance(v, tuple) and hasattr(type(v), "_fields")


def tuple_constant(e: Any) -> Tuple[bool, Any]:
    """(True, value) where a tuple argument's element `e` is a compile-time constant, as in
    Triton: None, `tl.constexpr`, a (jit) function, a string, a dtype, or an integer equal to 1
    (which Triton specialises as the constant 1)."""
    if e is None:
        return True, None
    if _is_one(e):
        return True, 1
    if isinstance(e, core.constexpr):
        return True, e.value
    if isinstance(e, (str, core.dtype)) or callable(e) and not hasattr(e, "__cuda_array_interface__") \
            and not hasattr(e, "data_ptr") and not hasattr(e, "__dlpack__"):
        return True, e
    return False, None


def _is_one(e: Any) -> bool:
    """Whether `e` is the integer 1 (Python's or numpy's; not a bool)."""
    if type(e) is int:
        return e == 1
    return type(e).__module__ == "numpy" and getattr(e, "ndim", None) == 0 and type(e.item()) is int \
        and e.item() == 1


def tuple_constant_in_kernel(v: Any) -> Any:
    """How a tuple argument's constant element appears in the kernel body (compiled or
    interpreted): None and functions as they are, other values as `tl.constexpr`."""
    return v if v is None or callable(v) and not isinstance(v, core.dtype) else core.constexpr(v)


def tuple_path_name(name: str, path: Sequence[int]) -> str:
    """`t.1.0`: how signatures, specialisations and constexprs name an element of tuple `t`."""
    return name + "".join(f".{j}" for j in path)


def _tuple_spec(name: str, v: tuple, path: Tuple[int, ...] = ()):
    """A (nested) tuple argument: (cache key, signature type such as `(*fp32,(i32,constexpr))`,
    runtime leaves [(path, type, divisibility)], constants {dotted name: value})."""
    keys, types, leaves, consts = [], [], [], {}
    if _is_namedtuple(v):
        consts[tuple_path_name(name, path) + ".__class__"] = type(v)
    for j, e in enumerate(v):
        at = path + (j,)
        where = f"{name}" + "".join(f"[{i}]" for i in at)
        if isinstance(e, tuple):
            k, t, lv, cs = _tuple_spec(name, e, at)
            keys.append(k)
            types.append(t)
            leaves.extend(lv)
            consts.update(cs)
            continue
        const, cv = tuple_constant(e)
        if const:
            try:
                hash(cv)
                keys.append(("c", type(cv), cv))
            except TypeError:
                from .cache import _stable

                keys.append(("c", _stable(cv)))
            types.append("constexpr")
            consts[tuple_path_name(name, at)] = cv
            continue
        if _is_descriptor(e):
            k, t, d = _descriptor_spec(e, where)
            keys.append(k)
            types.append(t)
            leaves.append((at, t, d))
            continue
        eptr = _pointer_info(e, where)
        if eptr is not None:
            d = 16 if eptr[0] % 16 == 0 else 1
            keys.append(("p", eptr[1], d))
            types.append("*" + eptr[1])
            leaves.append((at, "*" + eptr[1], d))
            continue
        if type(e).__module__ == "numpy" and hasattr(e, "item"):
            e = e.item()
        ety = _scalar_type(e, where)
        d = 16 if ety in ("i32", "i64", "u64") and e % 16 == 0 else 0
        keys.append(("s", ety, d))
        types.append(ety)
        leaves.append((at, ety, d))
    key = (type(v) if _is_namedtuple(v) else tuple, tuple(keys))
    return key, "(" + ",".join(types) + ")", leaves, consts


def _is_descriptor(v: Any) -> bool:
    """A host `TensorDescriptor` (tiles' or one with the same fields)."""
    return type(v).__name__ == "TensorDescriptor" and hasattr(v, "block_shape")


def _descriptor_spec(v: Any, where: str):
    """A host descriptor argument: (cache key, signature type, base divisibility)."""
    ptr = _pointer_info(v.base, where)
    if ptr is None:
        raise LaunchError(f"argument '{where}': the descriptor's base must be a device tensor")
    addr, dt = ptr
    div = 16 if addr % 16 == 0 else 1
    nan = ", nan" if v.padding == "nan" else ""
    if getattr(v, "round_f32_to_tf32", False):
        if dt != "fp32":
            raise LaunchError(f"argument '{where}': round_f32_to_tf32 needs an fp32 tensor, got {dt}")
        nan += ", tf32"
    ty = f"tensordesc<{dt}[{', '.join(str(b) for b in v.block_shape)}]{nan}>"
    key = ("d", ty, div, tuple(s % 16 == 0 for s in v.strides[:-1]), tuple(n % 16 == 0 for n in v.shape))
    return key, ty, div


def _descriptor_specialization(name: str, v: Any, div: int) -> Dict[str, int]:
    """What the compiler may assume of a descriptor argument `name`: its base's alignment and
    which strides and extents are multiples of 16."""
    spec = {name: div}
    spec.update({f"{name}.stride{i}": 16 for i, st in enumerate(v.strides[:-1]) if st % 16 == 0})
    spec.update({f"{name}.shape{i}": 16 for i, n in enumerate(v.shape) if n % 16 == 0})
    return spec


def _tuple_element(v: Any, path: Sequence[int]) -> Any:
    for j in path:
        v = v[j]
    return v


def _tuple_packers(index: int, leaves):
    """Packers for a tuple argument: one kernel parameter per runtime element (depth first)."""
    out = []
    for path, t, _ in leaves:
        if t.startswith("tensordesc<"):
            from ..frontend import parse_descriptor_type

            for _, f in _desc_packers(index, len(parse_descriptor_type(t)[1])):
                out.append((index, lambda v, f=f, path=path: f(_tuple_element(v, path))))
        elif t.startswith("*"):
            out.append((index, lambda v, path=path: ctypes.c_uint64(
                _pointer_info(_tuple_element(v, path), "tuple element")[0])))
        else:
            def scalar(v, path=path, c=_CTYPES[t]):
                e = _tuple_element(v, path)
                return c(e.item() if hasattr(e, "item") else e)

            out.append((index, scalar))
    return out


def _desc_packers(index: int, rank: int):
    """Packers for a TensorDescriptor argument: base address, shape (i32) and strides (i64)."""
    out = [(index, lambda d: ctypes.c_uint64(_pointer_info(d.base, "descriptor")[0]))]
    out += [(index, lambda d, i=i: ctypes.c_int32(d.shape[i])) for i in range(rank)]
    out += [(index, lambda d, i=i: ctypes.c_int64(d.strides[i])) for i in range(rank)]
    return out


class _Specialization:
    """A compiled kernel plus how to pack its arguments."""

    def __init__(self, compiled, packers: List[Tuple[int, Any]], slots: List[Tuple[int, str]]):
        self.compiled = compiled
        self.packers = packers
        self.slots = slots
        self.threads = compiled.metadata.num_threads

    @property
    def loaded(self):
        """The loaded module (loaded on first use: `warmup` without a GPU only compiles)."""
        return self.compiled.load()


class KernelInterface:
    """What can be launched as `kernel[grid](...)`: `JITFunction` and the autotuning and
    heuristics wrappers (Triton's `triton.runtime.KernelInterface`)."""

    def __getitem__(self, grid) -> Callable:
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)


class JITFunction(KernelInterface):
    """A kernel (or a device function called from kernels) written in the tiles language."""

    def __init__(self, fn: Callable, do_not_specialize: Sequence[Any] = (), debug: Optional[bool] = None,
                 noinline: bool = False, interpret: Optional[bool] = None, launch_metadata: Optional[Callable] = None,
                 do_not_specialize_on_alignment: Sequence[Any] = (), **_ignored: Any):
        self.fn = fn
        # `launch_metadata(grid, kernel, args)`: a dict (name, flops*, bytes) the profiler records per launch.
        self.launch_metadata = launch_metadata
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__
        self.__wrapped__ = fn
        self.__globals__ = fn.__globals__
        sig = inspect.signature(fn)
        names = list(sig.parameters)
        dns = {d if isinstance(d, str) else names[d] for d in do_not_specialize}
        dnsa = {d if isinstance(d, str) else names[d] for d in do_not_specialize_on_alignment}
        self.params = [Param(p, i, p.name in dns, p.name in dnsa) for i, p in enumerate(sig.parameters.values())]
        self.param_names = [p.name for p in self.params]
        self.arg_names = self.param_names
        self.constexprs = [p.index for p in self.params if p.is_constexpr]
        self.debug = debug
        self.interpret = interpret
        self._src = None
        self.pre_run_hooks: List[Callable] = []
        self.cache: Dict[Any, _Specialization] = {}
        self._lock = threading.Lock()
        self._dispatcher = None
        self._driver_set = False
        self._interp_fn = None

    @property
    def signature(self) -> inspect.Signature:
        """The Python function's signature (Triton's `JITFunction.signature`)."""
        return inspect.signature(self.fn)

    @property
    def src(self) -> str:
        """The function's source text from its `def` on, dedented (Triton's `JITFunction.src`)."""
        return _from_def("".join(self.source().lines))

    @property
    def cache_key(self) -> str:
        """A hash of the source and of everything it uses (what the on-disk cache keys on)."""
        return cache.function_fingerprint(self)

    def is_gluon(self) -> bool:
        """Triton's test for its Gluon dialect's kernels: a tiles kernel never is one."""
        return False

    @property
    def hash(self) -> Optional[str]:
        """Triton's memo of `cache_key`: set to None, the next `cache_key` is computed afresh
        (after a function this one calls changed its source, say)."""
        return self.__dict__.get("_fingerprint")

    @hash.setter
    def hash(self, value: Optional[str]) -> None:
        if value is not None and self.fn is not None:
            cache.function_fingerprint(self)  # the guards on globals come with the real one
        self._fingerprint = value

    @property
    def used_global_vals(self) -> Dict[Tuple[str, int], Tuple[Any, Any]]:
        """The global (and closure) values the kernel and what it calls were compiled with, as
        Triton lists them: (name, id of the globals dict or cell) -> (value, dict or cell).
        Empty for a kernel unpickled without its function (it has no source to read them from)."""
        if self.fn is not None:
            cache.function_fingerprint(self)
        return {(g.name, id(g.where)): (g.value, g.where) for g in self._global_guards}

    @used_global_vals.setter
    def used_global_vals(self, value: Any) -> None:
        """Ignored: tiles derives the values from the source (torch's inductor clears and
        restores Triton's attribute around pickling a kernel)."""

    # What pickling leaves out: locks, the native dispatcher, compiled and interpreted code,
    # and what holds the module's globals (a kernel that crosses to another process compiles
    # there again, from its source).
    _UNPICKLED = ("_lock", "_dispatcher", "cache", "_interp_fn", "_src", "_global_guards", "_hash_lock",
                  "__globals__", "_driver_set")

    def __getstate__(self) -> Dict[str, Any]:
        """A JITFunction pickles as Triton's does once torch's inductor has cleared its `fn`
        (`prepare_for_pickle`): names, parameters and options travel; `fn` travels by reference
        when it is still set."""
        state = {k: v for k, v in self.__dict__.items() if k not in self._UNPICKLED}
        if state.get("fn") is None:
            state["__wrapped__"] = None
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__globals__ = getattr(self.fn, "__globals__", None)
        self._src = None
        self.cache = {}
        self._lock = threading.Lock()
        self._dispatcher = None
        self._driver_set = False
        self._interp_fn = None
        self._global_guards = []

    def parse(self):
        """The function's AST (an `ast.Module` holding its definition), as Triton's `parse`."""
        import ast

        return ast.Module(body=[self.source().node], type_ignores=[])

    def source(self):
        if self._src is None:
            from ..frontend import FunctionSource

            self._src = FunctionSource(self.fn)
        return self._src

    def _unsafe_update_src(self, new_src: str) -> None:
        """Replaces the function's source text (Triton's test helper of that name): later
        compiles and interpreted runs use `new_src`; compiled specialisations are dropped.
        Unsafe as in Triton: kernels that call this one keep their cache fingerprints."""
        from ..frontend import FunctionSource

        self._src = FunctionSource(self.fn, text=new_src)
        self.cache = {}
        self._dispatcher = None
        self._interp_fn = None
        self._fingerprint = None

    def __call__(self, *args, **kwargs):
        if core._state.__dict__.get("backend") is not None and getattr(core._state.backend, "interpreter", False):
            from .interpreter import interpreted_function

            return interpreted_function(self)(*args, **kwargs)
        raise RuntimeError(f"{self.__name__} is a @tiles.jit function: launch it with {self.__name__}[grid](...) "
                           "or call it from another kernel")

    def __getitem__(self, grid) -> Callable:
        if self.pre_run_hooks:  # the native launch path does not call Python hooks
            return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)
        d = self._dispatcher
        if d is None:
            d = self._make_dispatcher()
        return d[grid]

    def add_pre_run_hook(self, hook: Callable) -> None:
        """Calls `hook(*args, **kwargs)` with a launch's arguments before each launch (Triton's
        `JITFunction.add_pre_run_hook`)."""
        if not callable(hook):
            raise TypeError(f"a pre-run hook must be callable, got {hook!r}")
        self.pre_run_hooks.append(hook)

    def _guard_list(self) -> List[Tuple[Any, str, Any]]:
        """The native dispatcher's view of the global guards: (dict or cell, name, object)."""
        return [(g.where, g.name, g.value) for g in getattr(self, "_global_guards", ())]

    def _make_dispatcher(self):
        from .. import _tiles

        decl = [(p.name, p.is_constexpr, p.default is not Param.empty,
                 None if p.default is Param.empty else p.default,
                 0 if p.do_not_specialize else 1 if p.no_align else 2) for p in self.params]
        self._dispatcher = _tiles.Dispatcher(decl, self._fallback)
        self._driver_set = False  # the new dispatcher gets the driver (and the guards) when taught
        return self._dispatcher

    def _fallback(self, grid, args, kwargs):
        return self.run(*args, grid=grid, _learn=True, **(kwargs or {}))

    def __repr__(self) -> str:
        return f"JITFunction({self.__module__}:{self.__name__})"

    # -- binding ------------------------------------------------------------------------------------
    def _options(self, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Takes the launch options out of `kwargs`. An option that is also a parameter's name
        (a `num_stages: tl.constexpr`, say) is both, as in Triton."""
        opts = {}
        if "extern_libs" in kwargs and "extern_libs" not in self.param_names:
            # libdevice's functions are built in (tiles.libdevice); a path to its bitcode is moot.
            kwargs.pop("extern_libs")
        for k in _LAUNCH_OPTIONS:
            if k in kwargs:
                opts[k] = kwargs[k] if k in self.param_names else kwargs.pop(k)
        return opts


    def bind(self, args: Sequence[Any], kwargs: Dict[str, Any]) -> List[Any]:
        params = self.params
        if len(args) > len(params):
            raise TypeError(f"{self.__name__}() takes {len(params)} arguments but {len(args)} were given")
        vals = list(args)
        for p in params[len(args):]:
            if p.name in kwargs:
                vals.append(kwargs.pop(p.name))
            elif p.default is not Param.empty:
                vals.append(p.default)
            else:
                raise TypeError(f"{self.__name__}() missing argument '{p.name}'")
        if kwargs:
            extra = next(iter(kwargs))
            raise TypeError(f"{self.__name__}() got an unexpected keyword argument '{extra}'")
        return vals

    def _specialize(self, vals: List[Any]):
        """The cache key and, per parameter, (kind, type, divisibility, raw value)."""
        key: List[Any] = []
        info = []
        for p, v in zip(self.params, vals):
            if p.is_constexpr:
                cv = v.value if isinstance(v, core.constexpr) else v
                # A @jit function passed as a constexpr is keyed by its code too: edited
                # (`_unsafe_update_src`), it compiles again.
                key.append(("c", cv, cv.cache_key) if isinstance(cv, JITFunction) else ("c", cv))
                info.append(("constexpr", None, 0, cv))
                continue
            if v is None:
                key.append(("none",))
                info.append(("constexpr", None, 0, None))
                continue
            if _is_descriptor(v):
                dkey, ty, div = _descriptor_spec(v, p.name)
                key.append(dkey)
                info.append(("desc", ty, div, v))
                continue
            if isinstance(v, tuple):
                tkey, tty, leaves, consts = _tuple_spec(p.name, v)
                key.append(("t", tkey))
                info.append(("tuple", tty, (leaves, consts), v))
                continue
            ptr = _pointer_info(v, p.name)
            if ptr is not None:
                addr, dt = ptr
                div = 16 if addr % 16 == 0 and not p.no_align else 1
                key.append(("p", dt, div))
                info.append(("ptr", "*" + dt, div, addr))
                continue
            if type(v).__module__ == "numpy" and hasattr(v, "item") and getattr(v, "ndim", 1) == 0:
                v = v.item()  # numpy scalars pass as Python scalars
            ty = _annotated_scalar_type(p, v)
            div = 0
            if ty in ("i32", "i64", "u64") and not p.do_not_specialize:
                div = 1 if v == 1 else 16 if v % 16 == 0 and not p.no_align else 0
            key.append(("s", ty, div))
            info.append(("scalar", ty, div, v))
        return tuple(key), info

    # -- compile and launch -------------------------------------------------------------------------
    def _full_key(self, key, opts: Dict[str, Any], num_warps: int, num_stages: int) -> Tuple[Any, ...]:
        """The in-memory cache key: the arguments' key and the options that change the code:
        `(key, num_warps, num_stages, debug, fp_fusion, maxnreg, sanitize_overflow, arch, ftz,
        f32_default)`; `arch` (Triton's option, or `knobs.runtime.override_arch`) compiles for
        another GPU than this one."""
        arch = arch_target(opts.get("arch") or env_setting("OVERRIDE_ARCH"))
        if arch is None and driver.targets_differ():
            arch = driver.default_target()  # GPUs of several kinds: this device's own
        if int(opts.get("num_ctas") or 1) > 1:
            _check_clusters(arch)
        return (key, num_warps, num_stages) + _code_options(self.debugging(opts.get("debug")), opts, arch)

    def debugging(self, launch_debug: Optional[bool] = None) -> bool:
        """Whether a launch compiles with debug checks (Triton's rule): `debug` given at launch,
        else the function's; `TILES_DEBUG` / `TRITON_DEBUG` turn it on for every launch."""
        given = launch_debug if launch_debug is not None else self.debug
        return bool(given) or env_flag("DEBUG")

    def _compile(self, info, num_warps: int, num_stages: int, debug: bool = False,
                 fp_fusion: bool = False, maxnreg: Optional[int] = None, sanitize: bool = False,
                 arch: Optional[str] = None, ftz: bool = True, f32_default: Optional[str] = None) -> _Specialization:
        return self._compile_front(info, num_warps, num_stages, debug, fp_fusion, maxnreg, sanitize, arch, ftz,
                                   f32_default)()

    def _compile_front(self, info, num_warps: int, num_stages: int, debug: bool = False,
                       fp_fusion: bool = False, maxnreg: Optional[int] = None,
                       sanitize: bool = False, arch: Optional[str] = None,
                       ftz: bool = True, f32_default: Optional[str] = None) -> Callable[[], _Specialization]:
        """Runs the part of a compile that holds the GIL throughout (the frontend) on this
        thread and returns the rest as a function for any thread: passes, LLVM, PTX, the
        driver's PTX -> cubin and the module's load, which run without the GIL. An
        AsyncCompileMode pool then gets only those, while the thread that submits runs the
        frontends one after another (as `compile_many` does): pool threads that each ran a
        frontend would take turns at the GIL. A frontend's error is raised by the returned
        function, where the compile's result is asked for."""
        from .. import compiler

        signature, constexprs, spec, ones = {}, {}, {}, []
        packers, slots = [], []
        for p, (kind, ty, div, raw) in zip(self.params, info):
            if kind == "constexpr":
                constexprs[p.name] = raw
                continue
            signature[p.name] = ty
            if kind == "desc":
                spec.update(_descriptor_specialization(p.name, raw, div))
                packers.extend(_desc_packers(p.index, len(raw.block_shape)))
                slots.append((p.index, "?"))  # several parameters: the Python launch path
                continue
            if kind == "tuple":
                leaves, consts = div
                for path, t, d in leaves:
                    if t.startswith("tensordesc<"):
                        spec.update(_descriptor_specialization(tuple_path_name(p.name, path),
                                                               _tuple_element(raw, path), d))
                    elif d:
                        spec[tuple_path_name(p.name, path)] = d
                constexprs.update(consts)
                packers.extend(_tuple_packers(p.index, leaves))
                slots.append((p.index, "?"))  # several parameters: the Python launch path
                continue
            if kind == "ptr":
                spec[p.name] = div
                packers.append((p.index, ctypes.c_uint64))
                slots.append((p.index, "ptr"))
            else:
                if div == 1 and ty != "i1" and raw == 1:
                    ones.append(p.name)
                elif div == 16:
                    spec[p.name] = 16
                packers.append((p.index, _CTYPES[ty]))
                slots.append((p.index, _SLOT_KINDS.get(ty, "?")))
        gpu = driver.available()
        target = _target(arch, gpu)
        limit = driver.shared_limit()
        # The context (device) of the launch that asked: a pool thread loads the module there.
        ctx = driver.current_context() if gpu else None

        def front(stages: int):
            return compiler._front(self, signature, constexprs, target=target, num_warps=num_warps,
                                   num_stages=stages, specialization=spec, equal_to_1=ones, debug=debug,
                                   enable_fp_fusion=fp_fusion, maxnreg=maxnreg, sanitize_overflow=sanitize,
                                   enable_reflect_ftz=ftz, fp32_default=f32_default)

        try:
            first = front(num_stages)
        except Exception as e:  # noqa: BLE001 -- raised where the result is asked for
            error = e  # `e` is unbound when the except block ends

            def failed() -> _Specialization:
                raise error

            return failed

        def build(stages: int):
            ready = first if stages == num_stages else front(stages)
            return ready if isinstance(ready, compiler.CompiledKernel) else ready.finish()

        def finish() -> _Specialization:
            compiled = fit_shared_memory(build, num_stages, limit, self.__name__)
            if gpu:
                # PTX -> cubin and the module's load on this thread too (the pool's, when
                # submitted; the driver's calls run without the GIL), in the asking context.
                driver.use_context(ctx)
                compiled.load()
            return _Specialization(compiled, packers, slots)

        return finish

    def run(self, *args, grid, warmup: bool = False, _learn: bool = False, **kwargs):
        if warmup:  # Triton's `run(..., warmup=True)`: compile only
            return self.warmup(*args, grid=grid, **kwargs)
        if compile_only():
            return compiled_only(self.warmup(*args, grid=grid, **kwargs))
        for hook in self.pre_run_hooks:
            hook(*args, **kwargs)
        orig_kwargs = dict(kwargs) if _learn else None
        opts = self._options(kwargs)
        num_warps = int(opts.get("num_warps") or 4)
        num_stages = int(opts.get("num_stages") or 3)
        vals = self.bind(args, kwargs)
        if interpreting(self):
            sanitize = _sanitizing(self.debugging(opts.get("debug")), opts)
            from . import interpreter

            # The interpreted function was made with the globals of its first run: a change
            # since is the error it is when compiled (a function without source text, made by
            # exec, has no fingerprint to hold them).
            if self._src is not None or _has_source(self.fn):
                cache.check_globals(self)
            f32_default = env_setting("F32_DEFAULT")
            ran = interpreter.InterpretedKernel(self, vals, num_warps, sanitize, f32_default)
            if not _launch_hooks:
                interpreter.run(self, vals, grid, num_warps, sanitize, f32_default)
                return ran
            g = grid(dict(zip(self.param_names, vals))) if callable(grid) else grid
            stand_in = SimpleNamespace(name=self.__name__, function_name=self.__name__)
            tokens = [h.enter(self, g, vals, stand_in, 0) for h in _launch_hooks]
            interpreter.run(self, vals, grid, num_warps, sanitize, f32_default)
            for h, t in zip(_launch_hooks, tokens):
                h.exit(t)
            return ran
        key, info = self._specialize(vals)
        full_key = self._full_key(key, opts, num_warps, num_stages)
        debug = full_key[3]
        if cache.check_globals(self) and self._driver_set and self._dispatcher is not None:
            self._dispatcher.set_guards(self._guard_list())
        spec = self.cache.get(full_key)
        if spec is None:
            if self._jit_hook("jit_cache_hook", full_key, info, False):
                return None  # the hook took over this compile (Triton's contract): nothing to launch
            if async_compile.active_mode() is not None:
                self._submit(full_key, info).result()
                spec = self.cache[full_key]
            else:
                with self._lock:
                    spec = self.cache.get(full_key)
                    if spec is None:
                        spec = self._compile(info, *full_key[1:])
                        self.cache[full_key] = spec
                self._jit_hook("jit_post_compile_hook", full_key, info, False)
        g = grid_dims(grid(dict(zip(self.param_names, vals))) if callable(grid) else grid)
        if min(g) <= 0:
            return spec.compiled
        cargs = [ctor(info[i][3]) for i, ctor in spec.packers]
        ptrs = (ctypes.c_void_p * max(1, len(cargs)))(*[ctypes.addressof(c) for c in cargs])
        stream = opts.get("stream")
        stream = driver.current_stream() if stream is None else int(stream)
        flags = ((driver.LAUNCH_COOPERATIVE if opts.get("launch_cooperative_grid") else 0)
                 | (driver.LAUNCH_PDL if opts.get("launch_pdl") else 0))
        if _launch_hooks:
            tokens = [h.enter(self, g, vals, spec.compiled, stream) for h in _launch_hooks]
            spec.loaded.launch(g, spec.threads, stream, ctypes.addressof(ptrs), flags)
            for h, t in zip(_launch_hooks, tokens):
                h.exit(t)
        else:
            spec.loaded.launch(g, spec.threads, stream, ctypes.addressof(ptrs), flags)
        if debug:
            spec.compiled.check_asserts()
        elif _learn and self._dispatcher is not None and not _UNTAUGHT_OPTIONS & set(opts):
            self._teach(args, orig_kwargs, spec)
        return spec.compiled

    def _teach(self, args, kwargs, spec: "_Specialization") -> None:
        """Lets the native dispatcher launch these arguments' specialisation by itself."""
        if any(kind == "?" for _, kind in spec.slots):
            return
        if not self._driver_set:
            addr = driver.launch_address()
            if not addr:
                return
            self._dispatcher.set_driver(addr, driver.stream_function())
            self._dispatcher.set_guards(self._guard_list())
            self._driver_set = True
        self._dispatcher.learn(tuple(args), kwargs or None, spec.loaded.handle, spec.threads,
                               spec.loaded.shared, spec.slots, spec.compiled)

    def _submit(self, full_key, info) -> async_compile.FutureKernel:
        """This specialisation's compile: its frontend here, the rest on the active
        AsyncCompileMode's executor."""

        def finish(spec: _Specialization):
            kept = self._keep(full_key, spec).compiled
            self._jit_hook("jit_post_compile_hook", full_key, info, True)
            return kept

        mode = async_compile.active_mode()
        key = (id(self), full_key)
        return mode.submitted(key) or mode.submit(
            key, self._compile_front(info, *full_key[1:]), finish)

    def _keep(self, full_key, spec: _Specialization) -> _Specialization:
        """Caches a compiled specialisation (the first one kept wins); with a GPU, `_compile`
        has loaded it already."""
        with self._lock:
            return self.cache.setdefault(full_key, spec)

    def warmup(self, *args, grid=None, **kwargs):
        """Compiles (and, with a GPU, loads) without launching; returns the compiled kernel.
        Without a GPU it compiles for an H100 (`sm_90a`). Inside `AsyncCompileMode` it runs the
        frontend and returns a `FutureKernel` (the rest of the compile runs on the mode's
        executor)."""
        opts = self._options(kwargs)
        # Triton's warmup takes a torch dtype where a tensor of it goes.
        vals = self.bind([MockTensor.wrap_dtype(a) for a in args], kwargs)
        _warming_up.active = True
        try:
            key, info = self._specialize(vals)
        finally:
            _warming_up.active = False
        cache.check_globals(self)
        num_warps, num_stages = int(opts.get("num_warps") or 4), int(opts.get("num_stages") or 3)
        full_key = self._full_key(key, opts, num_warps, num_stages)
        if full_key not in self.cache:
            if self._jit_hook("jit_cache_hook", full_key, info, True):
                return None
            if async_compile.active_mode() is not None:
                return self._submit(full_key, info)
            self._keep(full_key, self._compile(info, *full_key[1:]))
            self._jit_hook("jit_post_compile_hook", full_key, info, True)
        return self.cache[full_key].compiled

    @property
    def device_caches(self) -> Dict[int, Tuple[Dict[Any, Any], Dict[Any, Any], Any, Any, Any]]:
        """Triton's per-device caches, for reading what was compiled (`kernel.device_caches[0][0]`
        maps each specialisation's key to its compiled kernel, whose `asm` holds the PTX): a
        snapshot, the same under every device index: one compile serves every device of its
        target, each loading it on first use."""
        kernels = _CompiledKernels(self, {key: spec.compiled for key, spec in list(self.cache.items())
                                          if isinstance(spec, _Specialization)})
        entry = (kernels, {}, driver.active.get_current_target(), None, None)
        return {d: entry for d in range(max(1, driver.device_count()))}

    def _forget(self, keys: Optional[List[Any]] = None) -> None:
        """Drops compiled specialisations (all, or those under `keys`): the next launch of one
        compiles it again (or finds it in the on-disk cache)."""
        if keys is None:
            self.cache = {}
        else:
            for k in keys:
                self.cache.pop(k, None)
        self._dispatcher = None

    def repr(self, _: Any = None) -> str:
        """The kernel's name as launch hooks and profilers show it (Triton's `JITFunction.repr`)."""
        return self.__name__

    def preload(self, specialization_data: str) -> Any:
        """Compiles (and, with a GPU, loads) the specialisation that `specialization_data`
        describes — the `compile["specialization_data"]` a JIT hook received in an earlier
        run — so that launches with such arguments find it compiled (Triton's `preload`).
        Returns the compiled kernel."""
        import json

        data = json.loads(specialization_data)
        if data.get("name") != f"{self.fn.__module__}.{self.fn.__qualname__}":
            raise RuntimeError(f"specialization data is for {data.get('name')}, not "
                               f"{self.fn.__module__}.{self.fn.__qualname__}")
        params = data.get("params")
        if params is None or len(params) != len(self.params):
            raise RuntimeError("specialization data without tiles' parameter facts (or for another signature)")
        key, info = [], []
        for entry in params:
            kind = entry[0]
            if kind == "p":
                key.append(("p", entry[1], entry[2]))
                info.append(("ptr", "*" + entry[1], entry[2], 0))
            elif kind == "s":
                ty, div = entry[1], entry[2]
                key.append(("s", ty, div))
                info.append(("scalar", ty, div, 1 if div == 1 else 16 if div == 16 else 0))
            elif kind == "c":
                v = _constant_from_json(entry[1])
                key.append(("c", v))
                info.append(("constexpr", None, 0, v))
            elif kind == "none":
                key.append(("none",))
                info.append(("constexpr", None, 0, None))
            elif kind == "t":
                _, tkey, ty, leaves, consts = entry
                key.append(("t", _tuple_key_from_json(tkey)))
                info.append(("tuple", ty, ([(tuple(p), t, d) for p, t, d in leaves],
                                           {n: _constant_from_json(v) for n, v in consts.items()}), None))
            else:
                raise RuntimeError(f"preload does not take a {kind!r} parameter (descriptors, named tuples "
                                   "and tuples holding them or other objects)")
        o = data["options"]
        full_key = (tuple(key), int(o["num_warps"]), int(o["num_stages"])) + _code_options(
            bool(o.get("debug", False)), o, arch_target(o.get("arch")))
        if full_key not in self.cache:
            self._keep(full_key, self._compile(info, *full_key[1:]))
        return self.cache[full_key].compiled

    def _jit_hook(self, which: str, full_key, info, is_warmup: bool) -> Any:
        """Calls `knobs.runtime.<which>` (`jit_cache_hook` before a compile, whose true result
        skips it; `jit_post_compile_hook` after) as Triton does: `key`, `repr`, `fn`, `compile`
        (signature, constants, options, `specialization_data`), `is_manual_warmup`,
        `already_compiled`."""
        from .. import knobs

        hook = getattr(knobs.runtime, which)
        if hook is None:
            return None
        import json

        key, num_warps, num_stages, debug, fusion, maxnreg, sanitize, arch, ftz, _f32 = full_key
        signature = {p.name: ("constexpr" if kind == "constexpr" else ty) for p, (kind, ty, _d, _r) in
                     zip(self.params, info)}
        constants = {p.name: raw for p, (kind, _t, _d, raw) in zip(self.params, info) if kind == "constexpr"}
        name = self.fn.__qualname__
        options = {"num_warps": num_warps, "num_ctas": 1, "num_stages": num_stages, "enable_fp_fusion": fusion,
                   "launch_cooperative_grid": False, "debug": debug, "sanitize_overflow": sanitize, "maxnreg": maxnreg,
                   "arch": arch, "enable_reflect_ftz": ftz}
        rep = (f"{name}[num_warps={num_warps}, num_ctas=1, num_stages={num_stages}, enable_fp_fusion={fusion}, "
               f"launch_cooperative_grid=False](" + ", ".join(f"{n}: {t}" for n, t in signature.items()) + ")")
        data = json.dumps({"name": f"{self.fn.__module__}.{name}", "signature": signature,
                           "constants": {k: _json_constant(v) for k, v in constants.items()},
                           "params": _json_params(key, info), "options": options, "key": str(key)})
        compile_info = dict(options, key=str(key), signature=signature, device=0, constants=constants,
                            extern_libs=(), configs=[{}], specialization_data=data, is_warmup=is_warmup)
        return hook(key=str(key), repr=rep, fn=JitFunctionInfo(self.fn.__module__, name, self), compile=compile_info,
                    is_manual_warmup=is_warmup, already_compiled=False)


# Set while the autotuner benchmarks configs (per thread): no stage fallback then.
_tuning = threading.local()


def fit_shared_memory(build: Callable[[int], Any], num_stages: int, limit: int, name: str) -> Any:
    """`build(num_stages)`, with fewer pipeline stages while its shared memory exceeds `limit`
    (a warning says so): a kernel that runs slower rather than one that cannot load. Where even
    one stage does not fit, the smallest build is returned (loading it reports the shortage)."""
    compiled = build(num_stages)
    stages = num_stages
    if getattr(_tuning, "active", False):
        return compiled  # autotuning skips configs that do not fit, as Triton does
    while compiled.metadata.shared > limit and stages > 1:
        stages -= 1
        smaller = build(stages)
        if smaller.metadata.shared < compiled.metadata.shared:
            compiled = smaller
    if compiled.metadata.num_stages != num_stages and compiled.metadata.shared <= limit:
        import warnings

        warnings.warn(f"{name}: num_stages={num_stages} needs more shared memory than the GPU's {limit} bytes; "
                      f"compiled with num_stages={compiled.metadata.num_stages}", stacklevel=5)
    return compiled


def jit(fn: Optional[Callable] = None, *, do_not_specialize: Sequence[Any] = (),
        do_not_specialize_on_alignment: Sequence[Any] = (), debug: Optional[bool] = None,
        noinline: bool = False, interpret: Optional[bool] = None, **kwargs: Any):
    """Decorates a kernel written in the tiles (Triton) language."""

    def wrap(f: Callable) -> JITFunction:
        return JITFunction(f, do_not_specialize=do_not_specialize,
                           do_not_specialize_on_alignment=do_not_specialize_on_alignment, debug=debug,
                           noinline=noinline, interpret=interpret, **kwargs)

    return wrap(fn) if fn is not None else wrap
