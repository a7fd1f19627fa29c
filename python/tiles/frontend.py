"""Python AST -> tile IR.

`CodeGenerator` walks a kernel's AST with one `visit_X` per supported construct and calls
the language builtins, which reach the IR builder through the `IRBackend`. Compile-time
values (constexprs, Python literals, dtypes, modules, functions) are evaluated in Python;
tensors become IR. Anything else raises a `CompilationError` at the user's line.
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import operator
import re
import textwrap
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _tiles, core, language, semantic
from .core import constexpr, tensor
from .errors import CompilationError, CompileTimeAssertionFailure, StaticAssertFailed

_JIT_FUNCTION = None


def _jit_function_class() -> type:
    """`runtime.jit.JITFunction` (imported on first use: runtime.jit imports this module)."""
    global _JIT_FUNCTION
    if _JIT_FUNCTION is None:
        from .runtime.jit import JITFunction

        _JIT_FUNCTION = JITFunction
    return _JIT_FUNCTION


# PTX's names for the rounding directions and the types of `IRBackend.rounded`.
_PTX_ROUNDING = {"rn": "rn", "rz": "rz", "rd": "rm", "ru": "rp"}
_PTX_TYPE = {"fp32": "f32", "fp64": "f64", "int32": "s32", "uint32": "u32", "int64": "s64", "uint64": "u64"}


# `tl.range`'s loop hints: its parameters after the bounds and the step.
# The keywords Python's `range` takes in a kernel: `tl.range`'s, after its bounds. Triton ignores
# them all there, `step` too (the loop steps by 1); tiles does the same, so results match, and
# warns about `step` (RANGE_STEP_IGNORED).
_RANGE_KEYWORDS = frozenset(list(inspect.signature(language.range).parameters)[2:])
RANGE_STEP_IGNORED = ("range() ignores its keyword 'step' in a kernel, as Triton does (the loop steps by 1); "
                      "pass the step third or use tl.range(lb, ub, step=...)")


class IRBackend:
    """Language ops -> `_tiles.IrBuilder` calls."""

    def __init__(self, builder: "_tiles.IrBuilder", debug: bool = False, target: str = "sm_90a", num_warps: int = 4,
                 sanitize_overflow: bool = False, fp32_default: Optional[str] = None):
        self.b = builder
        self.debug = debug
        self.sanitize_overflow = sanitize_overflow  # integer +, -, * checked (semantic._check_overflow)
        self.fp32_default = fp32_default  # fp32 tl.dot's precision where the kernel names none
        self.target = target  # for tl.target_info
        self.num_warps = num_warps  # for tl.extra.cuda.num_warps()
        self.asserts: Dict[int, str] = {}
        # What the specialisation says each integer parameter is a multiple of (by handle).
        self.divisibility: Dict[Any, int] = {}

    def constant(self, value, dt, shape):
        return self.b.constant(value, dt.ir, list(shape))

    def program_id(self, axis):
        return self.b.program_id(axis)

    def num_programs(self, axis):
        return self.b.num_programs(axis)

    def arange(self, start, end):
        return self.b.arange(start, end)

    def splat(self, x, shape):
        return self.b.splat(x.handle, list(shape))

    def expand_dims(self, x, axis):
        return self.b.expand_dims(x.handle, axis)

    def gather(self, src, index, axis):
        return self.b.gather(src.handle, index.handle, axis)

    def broadcast(self, x, shape):
        return self.b.broadcast(x.handle, list(shape))

    def binary(self, op, a, b):
        return self.b.binary(op, a.handle, b.handle)

    def div_rn(self, a, b):
        """`a / b` rounded to nearest even: fp32 `div` is div.full.f32 (2 ulp, Triton's `/`), so
        fp32 asks for div.rn.f32; other floats divide exactly already."""
        if a.dtype != core.float32:
            return self.binary("div", a, b)
        return self.inline_asm("div.rn.f32 $0, $1, $2;", "=f,f,f", [a, b], [core.float32], 1, True)[0]

    def rounded(self, op, mode, args, out):
        """One PTX instruction with a rounding modifier (`add.rm.f32`, `cvt.rp.f32.s64`, ...)."""
        reg = {32: "r", 64: "l"}
        fl = {core.float32: "f", core.float64: "d"}

        def constraint(dt):
            return fl.get(dt) or reg[dt.primitive_bitwidth]

        rnd = _PTX_ROUNDING[mode]
        if op == "cvt":
            text = f"cvt.{rnd}.{_PTX_TYPE[str(out)]}.{_PTX_TYPE[str(args[0].dtype)]} $0, $1;"
        elif op == "rcp":
            text = f"rcp.{rnd}.{_PTX_TYPE[str(out)]} $0, $1;"
        else:
            operands = ", ".join(f"${i + 1}" for i in range(len(args)))
            text = f"{op}.{rnd}.{_PTX_TYPE[str(out)]} $0, {operands};"
        constraints = ",".join(["=" + constraint(out)] + [constraint(a.dtype) for a in args])
        return self.inline_asm(text, constraints, list(args), [out], 1, True)[0]

    def approx(self, kind, x):
        text, cons = {"tanh": ("tanh.approx.f32 $0, $1;", "=f,f"),
                      "rcp64h": ("rcp.approx.ftz.f64 $0, $1;", "=d,d")}[kind]
        return self.inline_asm(text, cons, [x], [x.dtype], 1, True)[0]

    def half_minmax(self, op, ptr, val, mask):
        from . import semantic

        if not language.target_info.cuda_capability_geq(9):
            raise semantic.TilesTypeError(f"atomic_{op} on {ptr.dtype.element_ty} needs Hopper's 16-bit float "
                                          f"atomics (sm_90 or later); the target is {self.target}")
        elem = ptr.dtype.element_ty
        ty = "f16" if elem == core.float16 else "bf16"
        identity = {("f16", "min"): 0x7C00, ("f16", "max"): 0xFC00,
                    ("bf16", "min"): 0x7F80, ("bf16", "max"): 0xFF80}[ty, op]
        addr = semantic.cast(ptr, core.int64)
        word = semantic.and_(addr, semantic.to_tensor(-4, core.int64))
        high = semantic.not_equal(semantic.and_(addr, semantic.to_tensor(2, core.int64)), 0)
        bits = semantic.cast(semantic.bitcast(val, core.uint16), core.uint32)
        ident = semantic.full(bits.shape, identity, core.uint32)
        packed = semantic.where(high, semantic.or_(semantic.shl(bits, 16), ident),
                                semantic.or_(semantic.shl(ident, 16), bits))
        on = semantic.full(bits.shape, 1, core.int32) if mask is None else semantic.cast(mask, core.int32)
        text = ("{ .reg .pred %hp; .reg .b16 %ha, %hb, %hc, %hd; setp.ne.b32 %hp, $3, 0; "
                "mov.b32 {%ha, %hb}, $2; "
                f"@%hp atom.global.{op}.noftz.v2.{ty} {{%hc, %hd}}, [$1], {{%ha, %hb}}; mov.b32 $0, 0; }}")
        self.inline_asm(text, "=r,l,r,r", [word, packed, on], [core.int32], 1, False)

    def compare(self, pred, a, b):
        return self.b.compare(pred, a.handle, b.handle)

    def unary(self, op, a):
        return self.b.unary(op, a.handle)

    def fma(self, a, b, c):
        return self.b.fma(a.handle, b.handle, c.handle)

    def select(self, c, a, b):
        return self.b.select(c.handle, a.handle, b.handle)

    def dot(self, a, b, acc, precision):
        return self.b.dot(a.handle, b.handle, acc.handle, precision)

    def cast(self, x, dt):
        return self.b.cast(x.handle, dt.ir)

    def bitcast(self, x, dt):
        return self.b.bitcast(x.handle, dt.ir)

    def addptr(self, p, o):
        return self.b.addptr(p.handle, o.handle)

    def load(self, ptr, mask, other, volatile, whole_granules=False, cache=0, evict=0):
        return self.b.load(ptr.handle, None if mask is None else mask.handle,
                           None if other is None else other.handle, volatile, whole_granules, cache, evict)

    def store(self, ptr, value, mask, cache=0, evict=0):
        self.b.store(ptr.handle, value.handle, None if mask is None else mask.handle, cache, evict)

    def call_function(self, fn, args):
        if isinstance(fn, _jit_function_class()):
            return inline_call(fn, self.b, list(args), {})
        return fn(*args)

    def map_function(self, fn, args):
        """`map_elementwise`'s call: `fn` on whole tiles, its `if`s on them as selects."""
        if isinstance(fn, _jit_function_class()):
            return inline_call(fn, self.b, list(args), {}, elementwise=True)
        return fn(*args)

    def reduce(self, inputs, axis, combine):
        handle, lhs, rhs = self.b.begin_reduce([t.handle for t in inputs], axis)
        a = [tensor(h, t.dtype, ()) for h, t in zip(lhs, inputs)]
        b = [tensor(h, t.dtype, ()) for h, t in zip(rhs, inputs)]
        res = semantic.combine_results(combine(*a, *b), inputs)
        for r in res:
            if r.shape:
                raise TypeError("a combine function must return scalars")
        return self.b.end_reduce(handle, [r.handle for r in res])

    def scan(self, inputs, axis, combine, reverse):
        handle, lhs, rhs = self.b.begin_scan([t.handle for t in inputs], axis, reverse)
        a = [tensor(h, t.dtype, ()) for h, t in zip(lhs, inputs)]
        b = [tensor(h, t.dtype, ()) for h, t in zip(rhs, inputs)]
        res = semantic.combine_results(combine(*a, *b), inputs)
        return self.b.end_scan(handle, [r.handle for r in res])

    def permute(self, x, dims):
        return self.b.permute(x.handle, list(dims))

    def hint(self, x, kind, values):
        return self.b.hint(x.handle, kind, list(values))

    def reshape(self, x, shape):
        return self.b.reshape(x.handle, list(shape))

    def join(self, a, b):
        return self.b.join(a.handle, b.handle)

    def split(self, x):
        return self.b.split(x.handle)

    def atomic(self, op, ptr, val, cmp, mask, sem, scope):
        return self.b.atomic(op, ptr.handle, val.handle, None if cmp is None else cmp.handle,
                             None if mask is None else mask.handle, sem, scope)

    def atomic_access(self, kind, ptr, val, mask, sem, scope, timeout=None):
        from . import semantic

        out = semantic.ptx_atomic_access(kind, ptr, val, mask, sem, scope, timeout)
        return None if out is None else out.handle

    def barrier(self):
        self.b.barrier()

    def device_print(self, prefix, tensors, hex):
        self.b.print(prefix, [t.handle for t in tensors], hex)

    def inline_asm(self, asm, constraints, args, dtypes, pack, pure):
        return self.b.inline_asm(asm, constraints, [a.handle for a in args], [d.ir for d in dtypes], pack, pure)

    def special(self, ptx, dtype):
        """Effectful PTX run once per thread: `ptx` writes `$0` of `dtype` (its handle is
        returned) or, with `dtype` None, nothing. The inline asm needs an operand: a dummy 0."""
        from . import semantic
        from .core import int32

        zero = semantic.to_tensor(0)
        if dtype is None:
            self.b.inline_asm(ptx + " // $0 $1", "=r,r", [zero.handle], [int32.ir], 1, False)
            return None
        reg = "l" if dtype.primitive_bitwidth == 64 else "r"
        return self.b.inline_asm(ptx + " // $1", f"={reg},r", [zero.handle], [dtype.ir], 1, False)[0]

    def device_assert(self, cond, msg):
        if self.debug:
            self.b.assert_(cond.handle, msg)

    def to_python_bool(self, t):
        raise TypeError("a tensor's value is not known at compile time; use it in `if`/`while` directly, "
                        "or make it a tl.constexpr")

    to_python_int = to_python_bool
    to_python_value = to_python_bool


_RETURN = "$return"


class _Return(Exception):
    """Unwinds statement visiting after a `return`."""


def _terminates(stmts: Sequence[ast.stmt]) -> bool:
    return bool(stmts) and isinstance(stmts[-1], ast.Return)


def _always_returns(stmts: Sequence[ast.stmt]) -> bool:
    """Whether every path through `stmts` ends in a `return`."""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, ast.If):
        return _always_returns(last.body) and _always_returns(last.orelse)
    return isinstance(last, ast.Return)


def _assigned_names(stmts: Sequence[ast.stmt], owner: Optional[ast.AST] = None, plain: bool = False) -> List[str]:
    """Names stored to in `stmts` (nested functions aside), in first-assignment order, plus
    `_RETURN` if they return; cached on `owner` (the loop or `if` node), as the AST lives with
    the function. Loops and `if`s inside are answered from (and fill) their own caches, so a
    nest of loops is walked once, not once per level. `plain`: the function's text holds no
    `:=` and no comprehension (`_plain_targets`), so expressions store no names and only
    statements and their targets are walked."""
    if owner is not None:
        cached = owner.__dict__.get("_tiles_assigned")
        if cached is not None:
            return cached
    names: List[str] = []
    seen = set()

    def merge(more: List[str]) -> None:
        for n in more:
            if n not in seen:
                seen.add(n)
                names.append(n)

    stack = list(reversed(stmts))
    while stack:
        node = stack.pop()
        cls = type(node)
        if cls is ast.Name:
            if type(node.ctx) is ast.Store and node.id not in seen:
                seen.add(node.id)
                names.append(node.id)
            continue
        if cls is ast.FunctionDef or cls is ast.AsyncFunctionDef:
            continue
        if cls is ast.For or cls is ast.While:
            # head, then the body (from its cache), then `else`: the order a plain walk has
            head = [node.target, node.iter] if cls is ast.For else [node.test]
            rest: List[Any] = [_Merge(_assigned_names(node.body, node, plain))] + list(node.orelse)
            stack.extend(reversed(head + rest))
            continue
        if cls is ast.If:
            stack.append(_Merge(_assigned_names(node.body + node.orelse, node, plain)))
            stack.append(node.test)
            continue
        if cls is _Merge:
            merge(node.names)
            continue
        if cls is ast.Return and _RETURN not in seen:
            seen.add(_RETURN)
            names.append(_RETURN)
        if plain:
            fields = _PLAIN_FIELDS.get(cls)
            if fields is not None:
                children = []
                for field in fields:
                    v = getattr(node, field, None)
                    if isinstance(v, list):
                        children.extend(v)
                    elif v is not None:
                        children.append(v)
                stack.extend(reversed(children))
                continue
            if isinstance(node, ast.expr):
                continue  # stores no name here
        # ast.iter_child_nodes, without its generators (this walk is a fresh kernel's hot spot)
        children = []
        for field in node._fields:
            v = getattr(node, field, None)
            if isinstance(v, ast.AST):
                children.append(v)
            elif isinstance(v, list):
                children.extend(x for x in v if isinstance(x, ast.AST))
        stack.extend(reversed(children))
    if owner is not None:
        owner._tiles_assigned = names
    return names


# Where names can be stored when no expression stores any (no `:=`, no comprehension): the
# statements' targets and bodies, in the order of their fields. A class missing here (an
# expression, a `match`) is walked whole.
_PLAIN_FIELDS: Dict[type, Tuple[str, ...]] = {
    ast.Assign: ("targets",), ast.AugAssign: ("target",), ast.AnnAssign: ("target",),
    ast.Tuple: ("elts",), ast.List: ("elts",), ast.Starred: ("value",),
    ast.Attribute: (), ast.Subscript: (), ast.Expr: (), ast.Pass: (), ast.Break: (), ast.Continue: (),
    ast.Assert: (), ast.Raise: (), ast.Return: (), ast.Global: (), ast.Nonlocal: (),
    ast.With: ("items", "body"), ast.withitem: ("optional_vars",),
    ast.Try: ("body", "handlers", "orelse", "finalbody"), ast.ExceptHandler: ("body",),
}

_FOR_LINE = re.compile(r"\s*(async\s+)?for\b.*:\s*(#.*)?$")
_FOR_WORD = re.compile(r"\bfor\b")


def _plain_targets(lines: Sequence[str]) -> bool:
    """Whether a function's source lines surely hold no `:=` and no comprehension: each `for`
    word starts a one-line `for` statement head, alone on its line. Unsure (a `for` in a string, a head across
    lines) reads as False: the walk then visits expressions too."""
    for line in lines:
        if ":=" in line:
            return False
        if "for" in line:
            fors = len(_FOR_WORD.findall(line))
            if fors > 1 or fors == 1 and not _FOR_LINE.match(line.rstrip("\n")):
                return False
    return True


class _Merge:
    """A cached name list standing in a walk's stack for the statements it covers."""

    __slots__ = ("names",)

    def __init__(self, names: List[str]):
        self.names = names


def _is_code_line(line: str) -> bool:
    s = line.lstrip()
    return bool(s) and not s.startswith("#")


_DEF_HEADS = ("def ", "async def ")  # how a function's definition line starts


def _indented_block(fn) -> Optional[Tuple[List[str], int, str, ast.FunctionDef]]:
    """The lines of `fn`'s definition (decorators included) read by indentation, with its first
    line's number, its file and its parsed definition; None where that reading is unsure (the
    caller asks `inspect` then). `inspect.getsourcelines` tokenizes the file from the function
    on, which is most of a small kernel's first compile; this reads the file once (`linecache`)
    and ends the block at the first code line indented no deeper than the `def`. A block cut
    inside a string, brackets or a continued line does not parse, and then None is returned."""
    import linecache

    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    file = code.co_filename
    linecache.checkcache(file)  # a file edited since it was read (as `inspect` does)
    all_lines = linecache.getlines(file, getattr(fn, "__globals__", None))
    start = code.co_firstlineno  # the first decorator's line
    if not all_lines or start > len(all_lines):
        return None
    first = all_lines[start - 1]
    base = len(first) - len(first.lstrip())
    i = start - 1
    while i < len(all_lines) and not all_lines[i][base:].startswith(_DEF_HEADS):
        i += 1  # decorators, which may span lines
    end = i + 1
    while end < len(all_lines):
        line = all_lines[end]
        if _is_code_line(line) and len(line) - len(line.lstrip()) <= base:
            break
        end += 1
    while end > i + 1:
        # Trailing blank lines and comments no deeper than the `def` belong to what follows
        # (deeper comments are the function's, as `inspect` reads them).
        line = all_lines[end - 1]
        if line.strip() and (_is_code_line(line) or len(line) - len(line.lstrip()) > base):
            break
        end -= 1
    lines = all_lines[start - 1:end]
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return None
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(tree.body) != 1 or len(defs) != 1 or defs[0].name != fn.__name__:
        return None
    return lines, start, file, defs[0]


class FunctionSource:
    """A function's AST and where its source lines are."""

    def __init__(self, fn, text: Optional[str] = None):
        """`text`, when given, replaces the source file's text of the function (its lines count
        from the function's first line in that file, or from 1 for a function without one)."""
        self.fn = fn
        self.name = fn.__name__
        # Whether the text is the one Python compiled `fn` from (its code object's names are
        # then the names the text reads).
        self.from_code = text is None
        block = _indented_block(fn) if text is None else None
        if block is not None:
            lines, start, self.file, self.node = block
        else:
            if text is not None:
                lines = text.splitlines(keepends=True)
                try:
                    old, start = inspect.getsourcelines(fn)
                    self.file = inspect.getsourcefile(fn) or "<unknown>"
                    if text.lstrip().startswith(_DEF_HEADS):
                        # Text from the `def` on (Triton's `src`): it starts where the def did.
                        start += next((i for i, ln in enumerate(old) if ln.lstrip().startswith(_DEF_HEADS)), 0)
                except (OSError, TypeError):
                    start, self.file = 1, "<string>"
            else:
                try:
                    lines, start = inspect.getsourcelines(fn)
                    self.file = inspect.getsourcefile(fn) or "<unknown>"
                except (OSError, TypeError) as e:
                    raise CompilationError(f"cannot read the source of {fn.__name__}: {e}") from e
            tree = ast.parse(textwrap.dedent("".join(lines)))
            self.node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
        self.indent = len(lines[0]) - len(lines[0].lstrip())
        self.lines = lines
        self.first_line = start
        self.plain = _plain_targets(lines)

    def globals(self) -> Dict[str, Any]:
        g = dict(self.fn.__globals__)
        if self.fn.__closure__:
            for name, cell in zip(self.fn.__code__.co_freevars, self.fn.__closure__):
                try:
                    g[name] = cell.cell_contents
                except ValueError:
                    pass
        return g

    def error(self, node: ast.AST, message: str, cls: type = CompilationError) -> CompilationError:
        line = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0) + self.indent
        src = self.lines[line - 1] if 0 < line <= len(self.lines) else None
        return cls(message, self.file, self.first_line + line - 1, col, src, self.name)


def _is_tensor(x: Any) -> bool:
    return isinstance(x, tensor)


def _is_number(x: Any) -> bool:
    """A number given as loop state (`acc = 0.0` before `for ...: acc += tile`): the loop
    carries it with the type the body gives it. Triton refuses a loop whose state changes type;
    where it accepts one, the body keeps the number's own type, and so does tiles."""
    return type(x) is core.constant_tensor or semantic._is_literal(x)


def _is_aggregate(x: Any) -> bool:
    """Values made of tensors that loops carry part by part (block pointers, descriptors)."""
    return hasattr(x, "_tiles_flatten") and hasattr(x, "_tiles_rebuild")


def _same_aggregate(a: Any, b: Any) -> bool:
    """Whether aggregates `a` and `b` can merge part by part (in a loop or an `if`): one type,
    and equal in what they do not carry (`_tiles_static`, where the type has one)."""
    static = getattr(type(a), "_tiles_static", None)
    return type(a) is type(b) and (static is None or static(a) == static(b))


class _Aggregates:
    """Loop state holding aggregates: each becomes one carried slot per part, under virtual
    names; `rebuild` and `flatten` move between the aggregate and its parts in a scope."""

    def __init__(self, carried: List[str], values: Dict[str, Any]):
        self.parts: Dict[str, List[str]] = {}
        self.templates: Dict[str, Any] = {}
        self.flat: List[str] = []
        self.values: Dict[str, Any] = {}
        for n in carried:
            v = values[n]
            if _is_aggregate(v):
                parts = list(v._tiles_flatten())
                names = [f"{n}\0{i}" for i in range(len(parts))]
                self.parts[n], self.templates[n] = names, v
                self.flat.extend(names)
                self.values.update(zip(names, parts))
            else:
                self.flat.append(n)
                self.values[n] = v

    def rebuild(self, scope: Dict[str, Any]) -> None:
        for n, names in self.parts.items():
            scope[n] = self.templates[n]._tiles_rebuild([scope[x] for x in names])

    def flatten(self, scope: Dict[str, Any], src, node) -> None:
        for n, names in self.parts.items():
            v = scope[n]
            t = self.templates[n]
            if not _is_aggregate(v) or not _same_aggregate(v, t):
                raise src.error(node, f"loop-carried `{n}` must stay the same {type(t).__name__}")
            parts = list(v._tiles_flatten())
            if len(parts) != len(names):
                raise src.error(node, f"loop-carried `{n}` changes its structure in the loop body")
            scope.update(zip(names, parts))

    def finish(self, scope: Dict[str, Any]) -> None:
        self.rebuild(scope)
        for names in self.parts.values():
            for x in names:
                scope.pop(x, None)


_unwrap = core._unwrap


_BINOPS = {
    ast.Add: "__add__", ast.Sub: "__sub__", ast.Mult: "__mul__", ast.Div: "__truediv__",
    ast.FloorDiv: "__floordiv__", ast.Mod: "__mod__", ast.Pow: "__pow__", ast.LShift: "__lshift__",
    ast.RShift: "__rshift__", ast.BitAnd: "__and__", ast.BitOr: "__or__", ast.BitXor: "__xor__",
}
_CMPOPS = {ast.Lt: "__lt__", ast.LtE: "__le__", ast.Gt: "__gt__", ast.GtE: "__ge__", ast.Eq: "__eq__",
           ast.NotEq: "__ne__"}


_PY_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitAnd: operator.and_,
           ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Eq: operator.eq, ast.NotEq: operator.ne,
           ast.Is: operator.is_, ast.IsNot: operator.is_not,
           ast.In: lambda x, y: operator.contains(y, x), ast.NotIn: lambda x, y: not operator.contains(y, x)}
_TENSOR_OPS = {**_BINOPS, **_CMPOPS}
_REFLECTED = {"__lt__": "__gt__", "__le__": "__ge__", "__gt__": "__lt__", "__ge__": "__le__",
              "__eq__": "__eq__", "__ne__": "__ne__"}


def _python_binop(op: type, a: Any, b: Any) -> Any:
    return _PY_OPS[op](a, b)


def binop(op: type, a: Any, b: Any) -> Any:
    """Applies a Python operator: in Python for compile-time values, as an op on tensors."""
    if op in (ast.Is, ast.IsNot):
        # Identity is known at compile time (`if bias_ptr is not None:` with a tensor argument).
        return constexpr(_python_binop(op, _unwrap(a), _unwrap(b)))
    if not _is_tensor(a) and not _is_tensor(b):
        if op in (ast.Eq, ast.NotEq) and isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
            # `x.shape == [128]`: Triton's kernel tuples and lists compare by their elements.
            return constexpr(core.sequences_equal(a, b) == (op is ast.Eq))
        r = _python_binop(op, _unwrap(a), _unwrap(b))
        return constexpr(r) if isinstance(a, constexpr) or isinstance(b, constexpr) else r
    name = _TENSOR_OPS.get(op)
    if name is None:
        raise TypeError(f"operator {op.__name__} is not supported on tensors")
    if _is_tensor(a):
        return getattr(a, name)(b)
    reflected = _REFLECTED.get(name) or "__r" + name[2:]
    return getattr(b, reflected)(a)


# Python built-ins a kernel may ask about any value, tiles included (Triton runs them as Python).
_INTROSPECTION = frozenset((builtins.hasattr, builtins.getattr, builtins.callable, builtins.type, builtins.id))

# The visitor method of each AST node class, looked up once (ast.NodeVisitor looks it up by name
# on every visit).
_VISITORS: Dict[type, Any] = {}


class CodeGenerator(ast.NodeVisitor):
    """Visits one function's body. Callees get their own generator sharing the builder."""

    def __init__(self, src: FunctionSource, builder: "_tiles.IrBuilder", scope: Dict[str, Any],
                 is_kernel: bool, elementwise: bool = False):
        self.src = src
        self.builder = builder
        self.scope = scope
        self.globals = src.globals()
        self.is_kernel = is_kernel
        # A `map_elementwise` function, run on whole tiles: an `if` on its arguments' values
        # evaluates both sides and selects element by element.
        self.elementwise = elementwise

    # -- errors and locations ------------------------------------------------------------------------
    def visit(self, node: ast.AST) -> Any:
        cls = type(node)
        if cls is ast.Name:
            # A name emits nothing (an unknown one raises with its own place): no location to set.
            return self.visit_Name(node)
        line = getattr(node, "lineno", None)
        if line is not None:
            self.builder.set_loc(self.src.first_line + line - 1, getattr(node, "col_offset", 0) + self.src.indent)
        try:
            method = _VISITORS.get(cls)
            if method is None:
                method = _VISITORS[cls] = getattr(CodeGenerator, "visit_" + cls.__name__, CodeGenerator.generic_visit)
            return method(self, node)
        except (CompilationError, _Return):
            raise
        # The error's cause is the original exception, as Triton's (code that handles compile
        # errors reads `__cause__`), stripped of tiles' frames: the traceback shows its one line.
        except _tiles.IrError as e:
            raise self.src.error(node, f"invalid operation: {e}") from e.with_traceback(None)
        except RecursionError:
            raise self.src.error(node, "recursion is not supported in kernels") from None
        except StaticAssertFailed as e:
            raise self.src.error(node, f"AssertionError: {e}",
                                 CompileTimeAssertionFailure) from e.with_traceback(None)
        except Exception as e:
            raise self.src.error(node, f"{type(e).__name__}: {e}") from e.with_traceback(None)

    def generic_visit(self, node: ast.AST) -> Any:
        raise self.src.error(node, f"unsupported Python construct in a kernel: {type(node).__name__}")

    # -- statements -----------------------------------------------------------------------------------
    def visit_stmts(self, stmts: Sequence[ast.stmt]) -> None:
        for i, s in enumerate(stmts):
            if isinstance(s, ast.If) and i + 1 < len(stmts):
                then_ret, else_ret = _terminates(s.body), _terminates(s.orelse)
                if not (then_ret and else_ret) and _RETURN in _assigned_names(s.body + s.orelse, s, self.src.plain):
                    # `if c: return` followed by more code: the rest runs in the other branch.
                    # A return deeper in the branches (`if LEFT: (if i < n: return) ...`):
                    # the rest follows each branch, where the inner `if` splits it again.
                    rest = list(stmts[i + 1:])
                    body = s.body if then_ret else s.body + rest
                    orelse = s.orelse if else_ret else s.orelse + rest
                    self.visit(ast.copy_location(ast.If(test=s.test, body=body, orelse=orelse), s))
                    return
            self.visit(s)
            if isinstance(s, ast.Return):
                return
            if isinstance(s, ast.If) and _terminates(s.body) and _terminates(s.orelse):
                return

    def visit_Module(self, node: ast.Module) -> None:
        self.visit_stmts(node.body)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.visit_stmts(node.body)

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # docstring
        value = self.visit(node.value)
        call = node.value
        if isinstance(call, ast.Call) and isinstance(call.func, (ast.Name, ast.Attribute)):
            fn = self.visit(call.func)  # a name or attribute: evaluating it again emits nothing
            # The function itself, or what a bound method or partial (an aggregate's method) wraps.
            marked = [fn] + [getattr(fn, a) for a in ("__func__", "func", "fn") if hasattr(fn, a)]
            why = next((m._tiles_must_use for m in marked if hasattr(m, "_tiles_must_use")), None)
            if why is not None:
                raise self.src.error(node, f"The result of {ast.unparse(call.func)} is not being used."
                                     + (f" {why}" if why else ""))
        if isinstance(call, ast.Call) and _is_tensor(value):
            # Triton's hints mark the value itself: a bare `tl.multiple_of(ptrs, 16)` statement
            # holds for `ptrs` from here on, so it is rebound to the hinted value; so does a
            # nest of hints (`tl.max_contiguous(tl.multiple_of(offs, 1024), 1024)`).
            from . import language

            hints = (language.multiple_of, language.max_contiguous, language.max_constancy)
            while isinstance(call, ast.Call) and isinstance(call.func, (ast.Name, ast.Attribute)) and call.args \
                    and self.visit(call.func) in hints:
                if isinstance(call.args[0], ast.Name):
                    self._assign(call.args[0], value)
                    break
                call = call.args[0]

    def visit_Pass(self, node: ast.Pass) -> None:
        pass

    def _assign(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.scope[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            vals = list(_unwrap(value)) if not _is_tensor(value) else None
            if vals is None or len(vals) != len(target.elts):
                raise self.src.error(target, "cannot unpack this value into the targets")
            for t, v in zip(target.elts, vals):
                self._assign(t, v)
        else:
            raise self.src.error(target, f"cannot assign to {type(target).__name__}: only names and tuples")

    def visit_Assign(self, node: ast.Assign) -> None:
        value = semantic.assigned(self.visit(node.value))
        for t in node.targets:
            self._assign(t, value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is None:
            return
        value = self.visit(node.value)
        ann = self._eval_annotation(node.annotation)
        if ann is constexpr:
            if type(value) is core.constant_tensor:
                value = value.value
            if _is_tensor(value):
                # Triton accepts `x: tl.constexpr = <runtime value>` and goes on with the value as
                # it is; so does tiles (FlagGems' radix sort relies on it).
                value = semantic.assigned(value)
            elif not isinstance(value, constexpr):
                value = constexpr(value)
        else:
            value = semantic.assigned(value)
        self._assign(node.target, value)

    def _eval_annotation(self, ann: ast.expr) -> Any:
        try:
            return self.visit(ann)
        except CompilationError:
            return None

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if not isinstance(node.target, ast.Name):
            raise self.src.error(node, "augmented assignment needs a plain name")
        cur = self.visit_Name(ast.Name(id=node.target.id, ctx=ast.Load()), node.target)
        self.scope[node.target.id] = semantic.assigned(binop(type(node.op), cur, self.visit(node.value)))

    def visit_Return(self, node: ast.Return) -> None:
        value = None if node.value is None else self.visit(node.value)
        if value is not None and self.is_kernel:
            raise self.src.error(node, "a kernel cannot return a value")
        self.scope[_RETURN] = value

    def visit_Assert(self, node: ast.Assert) -> None:
        cond = self.visit(node.test)
        msg = "" if node.msg is None else str(_unwrap(self.visit(node.msg)))
        if not _is_tensor(cond):
            if not _unwrap(cond):
                raise self.src.error(node, f"assertion failed at compile time: {msg}")
            return
        semantic.device_assert(cond, msg or ast.unparse(node.test))

    def visit_If(self, node: ast.If) -> None:
        cond = self.visit(node.test)
        if not _is_tensor(cond):
            self.visit_stmts(node.body if _unwrap(cond) else node.orelse)
            return
        if self.elementwise and cond.shape and semantic._numel(cond.shape) != 1:
            return self._select_if(node, cond)
        cond = self._scalar_condition(node.test, cond, "`if`")
        cond = semantic.cast(cond, core.int1)
        before = dict(self.scope)
        handle = self.builder.begin_if(cond.handle)
        then_scope = self._visit_branch(node.body, before)
        self.builder.begin_else(handle)
        else_scope = self._visit_branch(node.orelse, before)
        names = [n for n in then_scope if n in else_scope and
                 (then_scope[n] is not before.get(n) or else_scope[n] is not before.get(n))]
        if _always_returns(node.body) or _always_returns(node.orelse):
            # No code follows an `if` with a return in it (`visit_stmts` moved it into the
            # branches), and a branch that returns has no values to give it: only the return
            # value meets the other branch's. (rotary_kernel: `if done: return`, then `OUT`
            # re-bound to a tile of pointers.)
            names = [n for n in names if n == _RETURN]
        merged, then_ys, else_ys = [], [], []
        for n in names:
            a, b = then_scope[n], else_scope[n]
            if _is_aggregate(a) or _is_aggregate(b):
                # A block pointer, descriptor or aggregate: merged part by part.
                if not _same_aggregate(a, b):
                    raise self.src.error(node, f"`{n}` is a {type(a).__name__} in one branch and a different "
                                               f"{type(b).__name__} in the other")
                pa, pb = list(a._tiles_flatten()), list(b._tiles_flatten())
                if len(pa) != len(pb):
                    raise self.src.error(node, f"`{n}` has a different structure in the two branches")
                pairs = [self._branch_pair(node, n, x, y, handle) for x, y in zip(pa, pb)]
                merged.append((n, a, [x for x, _ in pairs]))
                then_ys.extend(x.handle for x, _ in pairs)
                else_ys.extend(y.handle for _, y in pairs)
                continue
            if not _is_tensor(a) and not _is_tensor(b) and (
                    _unwrap(a) == _unwrap(b) or n == _RETURN and a is None and b is None):
                self.scope[n] = a
                continue
            a, b = self._branch_pair(node, n, a, b, handle)
            merged.append((n, None, [a]))
            then_ys.append(a.handle)
            else_ys.append(b.handle)
        results = iter(self.builder.end_if(handle, then_ys, else_ys))
        for n, agg, parts in merged:
            out = [tensor(next(results), x.dtype, x.shape) for x in parts]
            self.scope[n] = out[0] if agg is None else agg._tiles_rebuild(out)
        for n in list(self.scope):
            if n not in then_scope or n not in else_scope:
                self.scope.pop(n, None)

    def _select_if(self, node: ast.If, cond: tensor) -> None:
        """An `if` on a tile in a `map_elementwise` function: both sides run (they compute, they
        do not store) and each name, the return value included, takes the side its element's
        condition picks."""
        cond = semantic.cast(cond, core.int1)
        before = dict(self.scope)
        then_scope = self._visit_branch(node.body, before)
        else_scope = self._visit_branch(node.orelse, before)
        merged = dict(before)
        for n in set(then_scope) | set(else_scope):
            a, b = then_scope.get(n, before.get(n)), else_scope.get(n, before.get(n))
            if n == _RETURN and (a is None) != (b is None):
                raise self.src.error(node, "in a map_elementwise function, an `if` on the arguments' values must "
                                           "return in both branches or in neither")
            if a is b or (not _is_tensor(a) and not _is_tensor(b) and _unwrap(a) == _unwrap(b)):
                merged[n] = a
            elif a is None or b is None:
                merged.pop(n, None)  # defined on one side only: not defined after the `if`
            else:
                merged[n] = semantic.where(cond, _unwrap(a) if not _is_tensor(a) else a,
                                           _unwrap(b) if not _is_tensor(b) else b)
        self.scope = merged

    def _scalar_condition(self, node: ast.expr, cond: Any, what: str) -> Any:
        """A condition as a scalar: a one-element tile converts (as in Triton), others refuse."""
        if cond.shape:
            if semantic._numel(cond.shape) != 1:
                raise self.src.error(node, f"{what} needs a scalar condition, got a tile of shape {list(cond.shape)}")
            cond = semantic.unsplat(cond)
        return cond

    def _branch_pair(self, node, n, a, b, handle):
        """The values `a` (then) and `b` (else) of `n` as two tensors of one type, numbers made
        tensors in their own branch."""
        if not _is_tensor(a) and not _is_tensor(b):
            a, b = self._tensor_pair(node, n, a, b, handle)
        elif not _is_tensor(a):
            a = self._in_region(handle, 0, lambda a=a, b=b: self._like(a, b))
        elif not _is_tensor(b):
            b = self._in_region(handle, 1, lambda a=a, b=b: self._like(b, a))
        if a.dtype != b.dtype or a.shape != b.shape:
            ta, tb = f"{a.dtype}{list(a.shape)}", f"{b.dtype}{list(b.shape)}"
            # Triton's wording, which its tests read.
            if n == _RETURN:
                msg = f"Return type mismatch: {ta} in one branch, {tb} in the other"
            elif n.startswith("\0ifexp"):
                msg = f"Ternary expression with dynamic condition has inconsistent type: {ta} and {tb}"
            else:
                msg = f"Mismatched type for {n} between then block ({ta}) and else block ({tb})"
            raise self.src.error(node, msg)
        return a, b

    def _tensor_pair(self, node, n, a, b, handle):
        dt = semantic.literal_type(_unwrap(a))
        ta = self._in_region(handle, 0, lambda: semantic.to_tensor(a, dt))
        tb = self._in_region(handle, 1, lambda: semantic.to_tensor(b, dt))
        return ta, tb

    def _in_region(self, handle: int, i: int, f):
        self.builder.enter_region(handle, i)
        try:
            return f()
        finally:
            self.builder.exit_region()

    def _like(self, literal: Any, t: tensor) -> tensor:
        return semantic.broadcast_to(semantic.to_tensor(_unwrap(literal), t.dtype), t.shape)

    def _visit_branch(self, stmts: Sequence[ast.stmt], before: Dict[str, Any]) -> Dict[str, Any]:
        self.scope = dict(before)
        try:
            self.visit_stmts(stmts)
            return self.scope
        finally:
            self.scope = before

    def visit_For(self, node: ast.For) -> None:
        if node.orelse:
            raise self.src.error(node, "for ... else is not supported")
        it = node.iter
        fn = self.visit(it.func) if isinstance(it, ast.Call) else None
        if fn is language.static_range or (fn is None and not isinstance(it, ast.Call)) or (
                fn is not None and fn not in (builtins.range, language.range)):
            if fn is language.static_range:
                values = language.static_range(*[self.visit(a) for a in it.args],
                                               **{k.arg: self.visit(k.value) for k in it.keywords})
            else:
                values = self.visit(it)
            for v in _unwrap(values):
                self._assign(node.target, constexpr(v) if not _is_tensor(v) else v)
                self.visit_stmts(node.body)
            return
        if fn not in (builtins.range, language.range):
            raise self.src.error(
                it, "a kernel loop must iterate over range(...), tl.range(...) or tl.static_range(...)")
        args = [self.visit(a) for a in it.args]
        kwargs = {k.arg: self.visit(k.value) for k in it.keywords}
        stages = 0
        if fn is language.range:
            r = language.range(*args, **kwargs)
            lb, ub, step = r.start, r.end, r.step
            if r.num_stages is not None:
                stages = int(_unwrap(r.num_stages))
                if stages < 0:
                    raise self.src.error(it, f"num_stages must not be negative, got {stages}")
                # Deeper than 16 buys nothing (as the kernel's own `num_stages`): such loops get 16,
                # and their buffers must still fit in shared memory.
                stages = builtins.min(stages, 16)
        else:
            # Python's `range` takes `tl.range`'s loop hints too, and Triton ignores them there
            # (`range(n, flatten=True)` in Unsloth's MoE kernels): so does tiles.
            unknown = sorted(set(kwargs) - _RANGE_KEYWORDS)
            if unknown:
                raise self.src.error(it, f"range got an unexpected keyword argument '{unknown[0]}'")
            if "step" in kwargs:
                import warnings

                line = self.src.first_line + it.lineno - 1
                warnings.warn(f"{self.src.file}:{line}: {RANGE_STEP_IGNORED}", stacklevel=2)
            if not 1 <= len(args) <= 3:
                raise self.src.error(it, "range takes 1 to 3 positional arguments")
            lb, ub, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
        reverse = False
        if not _is_tensor(step):
            step = _unwrap(step)
            if step == 0:
                raise self.src.error(it, "a loop's step must not be 0")
            if step < 0:
                # range(hi, lo, -s) runs k over range(lo, hi, s) with i = hi + lo - k (same trip count).
                reverse, lb, ub, step = True, ub, lb, -step
        bounds = [semantic.to_tensor(_unwrap(x)) if not _is_tensor(x) else x for x in (lb, ub, step)]
        bounds = [semantic.unsplat(b) if b.shape and semantic._numel(b.shape) == 1 else b for b in bounds]
        for b in bounds:
            if b.shape or not b.dtype.is_int():
                raise self.src.error(it, "loop bounds must be integer scalars")
        it_ty = bounds[0].dtype
        for b in bounds[1:]:
            it_ty = semantic.integer_promote(it_ty, b.dtype)
        bounds = [semantic.cast(b, it_ty) for b in bounds]
        carried = [n for n in _assigned_names(node.body, node, self.src.plain) if n in self.scope and n != _RETURN]
        inits = {n: self.scope[n] for n in carried}
        carried = [n for n in carried if _is_tensor(inits[n]) or _is_aggregate(inits[n])
                   or isinstance(_unwrap(inits[n]), (bool, int, float))]
        agg = _Aggregates(carried, inits)
        carried, inits = agg.flat, agg.values
        if _RETURN in _assigned_names(node.body, node, self.src.plain):
            raise self.src.error(node, "return inside a loop is not supported")
        types = {}
        if any(_is_number(inits[n]) for n in carried):
            types = self._loop_types(node, bounds, carried, inits, agg, reverse)
        init_tensors = []
        for n in carried:
            v = inits[n]
            if _is_number(v):
                dt, shape = types.get(n, (semantic.literal_type(_unwrap(v)), ()))
                v = semantic.broadcast_to(semantic.to_tensor(_unwrap(v), dt), shape)
            init_tensors.append(v)
        yields = self._loop_body(node, bounds, carried, init_tensors, keep=True, stages=stages, agg=agg,
                                 reverse=reverse)
        for n, t in zip(carried, yields):
            self.scope[n] = t
        agg.finish(self.scope)

    def _loop_types(self, node, bounds, carried, inits, agg=None, reverse=False):
        """Runs the body once, discarded, to learn the types literals must take as loop state."""
        tensors = [v if _is_tensor(v) else semantic.to_tensor(_unwrap(v)) for v in (inits[n] for n in carried)]
        outs = self._loop_body(node, bounds, carried, tensors, keep=False, agg=agg, reverse=reverse)
        return {n: (o.dtype, o.shape) for n, o in zip(carried, outs)}

    def _loop_body(self, node, bounds, carried, init_tensors, keep: bool, stages: int = 0, agg=None,
                   reverse: bool = False):
        handle, iv, args = self.builder.begin_for(bounds[0].handle, bounds[1].handle, bounds[2].handle,
                                                  [t.handle for t in init_tensors], max(stages, 0))
        before = dict(self.scope)
        self.scope = dict(before)
        for n, t, h in zip(carried, init_tensors, args):
            self.scope[n] = tensor(h, t.dtype, t.shape)
        if agg is not None:
            agg.rebuild(self.scope)
        iv = tensor(iv, bounds[0].dtype, ())
        if reverse:
            iv = semantic.add(semantic.sub(bounds[1], iv), bounds[0])
        self._assign(node.target, iv)
        try:
            self.visit_stmts(node.body)
            if agg is not None:
                agg.flatten(self.scope, self.src, node)
            outs = []
            for n, t in zip(carried, init_tensors):
                v = self.scope[n]
                if not _is_tensor(v):
                    v = self._like(v, t)
                if keep and (v.dtype != t.dtype or v.shape != t.shape):
                    raise self.src.error(node, f"loop-carried `{n}` changes from {t.dtype}{list(t.shape)} "
                                               f"to {v.dtype}{list(v.shape)} in the loop body")
                outs.append(v)
        finally:
            self.scope = before
        if not keep:
            self.builder.discard_for(handle)
            return outs
        results = self.builder.end_for(handle, [o.handle for o in outs])
        return [tensor(h, t.dtype, t.shape) for h, t in zip(results, init_tensors)]

    def visit_While(self, node: ast.While) -> None:
        if node.orelse:
            raise self.src.error(node, "while ... else is not supported")
        if _RETURN in _assigned_names(node.body, node, self.src.plain):
            raise self.src.error(node, "return inside a loop is not supported")
        carried = [n for n in _assigned_names(node.body, node, self.src.plain) if n in self.scope]
        carried = [n for n in carried if _is_tensor(self.scope[n]) or _is_aggregate(self.scope[n])
                   or isinstance(_unwrap(self.scope[n]), (bool, int, float))]
        agg = _Aggregates(carried, self.scope)
        carried = agg.flat
        self.scope.update(agg.values)
        inits = [v if _is_tensor(v) else semantic.to_tensor(_unwrap(v)) for v in (self.scope[n] for n in carried)]
        outs = self._while(node, carried, inits, keep=False, agg=agg)
        if outs is None:
            agg.finish(self.scope)
            return
        fixed = []
        for n, t, o in zip(carried, inits, outs):
            if _is_number(self.scope[n]) and (o.dtype != t.dtype or o.shape != t.shape):
                t = semantic.broadcast_to(semantic.to_tensor(_unwrap(self.scope[n]), o.dtype), o.shape)
            fixed.append(t)
        results = self._while(node, carried, fixed, keep=True, agg=agg)
        for n, r in zip(carried, results):
            self.scope[n] = r
        agg.finish(self.scope)

    def _while(self, node: ast.While, carried, inits, keep: bool, agg=None):
        """Builds the loop (or, with keep=False, a discarded dry run that returns the body's types)."""
        handle, before = self.builder.begin_while([t.handle for t in inits])
        saved = dict(self.scope)
        try:
            for n, t, h in zip(carried, inits, before):
                self.scope[n] = tensor(h, t.dtype, t.shape)
            if agg is not None:
                agg.rebuild(self.scope)
            cond = self.visit(node.test)
            if not _is_tensor(cond):
                self.builder.discard_while(handle)
                if _unwrap(cond):
                    raise self.src.error(node.test, "a while loop whose condition is always true never ends")
                return None
            cond = self._scalar_condition(node.test, cond, "a while loop")
            cond = semantic.cast(cond, core.int1)
            after = self.builder.begin_while_body(handle, cond.handle)
            for n, t, h in zip(carried, inits, after):
                self.scope[n] = tensor(h, t.dtype, t.shape)
            if agg is not None:
                agg.rebuild(self.scope)
            self.visit_stmts(node.body)
            if agg is not None:
                agg.flatten(self.scope, self.src, node)
            outs = []
            for n, t in zip(carried, inits):
                v = self.scope[n]
                if not _is_tensor(v):
                    v = self._like(v, t)
                if keep and (v.dtype != t.dtype or v.shape != t.shape):
                    raise self.src.error(node, f"loop-carried `{n}` changes from {t.dtype}{list(t.shape)} "
                                               f"to {v.dtype}{list(v.shape)} in the loop body")
                outs.append(v)
        finally:
            self.scope = saved
        if not keep:
            self.builder.discard_while(handle)
            return outs
        results = self.builder.end_while(handle, [o.handle for o in outs])
        return [tensor(h, t.dtype, t.shape) for h, t in zip(results, inits)]

    def visit_Break(self, node: ast.Break) -> None:
        raise self.src.error(node, "break is not supported in kernels")

    def visit_Continue(self, node: ast.Continue) -> None:
        raise self.src.error(node, "continue is not supported in kernels")

    # -- expressions ----------------------------------------------------------------------------------
    def visit_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def visit_Name(self, node: ast.Name, where: Optional[ast.AST] = None) -> Any:
        n = node.id
        if n in self.scope:
            return self.scope[n]
        if n in self.globals:
            return self.globals[n]
        if hasattr(builtins, n):
            return getattr(builtins, n)
        raise self.src.error(where or node, f"NameError: name '{n}' is not defined")

    def visit_Tuple(self, node: ast.Tuple) -> Any:
        return tuple(self.visit(e) for e in node.elts)

    def visit_List(self, node: ast.List) -> Any:
        return [self.visit(e) for e in node.elts]

    def visit_ListComp(self, node: ast.ListComp) -> Any:
        """`[f(v) for v in values if cond]` over a compile-time sequence (a tuple, a list,
        `tl.static_range`), unrolled as Triton does; its names stay inside the comprehension."""
        saved = dict(self.scope)
        out: List[Any] = []
        try:
            self._comprehend(node.generators, node.elt, out)
        finally:
            self.scope = saved
        return out

    def visit_GeneratorExp(self, node: ast.GeneratorExp) -> Any:
        return tuple(self.visit_ListComp(node))

    def _comprehend(self, generators: Sequence[ast.comprehension], elt: ast.expr, out: List[Any]) -> None:
        if not generators:
            out.append(self.visit(elt))
            return
        g = generators[0]
        if g.is_async:
            raise self.src.error(g, "async comprehensions are not supported in a kernel")
        values = _unwrap(self.visit(g.iter))
        if _is_tensor(values) or not hasattr(values, "__iter__"):
            raise self.src.error(g.iter, "a comprehension in a kernel must iterate over a tuple, a list or "
                                         "tl.static_range(...) (a compile-time sequence)")
        for v in values:
            self._assign(g.target, constexpr(v) if isinstance(v, (bool, int, float)) else v)
            conds = [self.visit(c) for c in g.ifs]
            if any(_is_tensor(c) for c in conds):
                raise self.src.error(g, "a comprehension's condition must be known at compile time")
            if all(_unwrap(c) for c in conds):
                self._comprehend(generators[1:], elt, out)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> Any:
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                x = self.visit(v.value)
                parts.append(str(_unwrap(x)))
        return "".join(parts)

    def visit_BinOp(self, node: ast.BinOp) -> Any:
        return binop(type(node.op), self.visit(node.left), self.visit(node.right))

    def visit_Compare(self, node: ast.Compare) -> Any:
        left = self.visit(node.left)
        result = None
        for op, right_node in zip(node.ops, node.comparators):
            right = self.visit(right_node)
            r = binop(type(op), left, right)
            result = r if result is None else self._and(result, r)
            left = right
        return result

    def _and(self, a: Any, b: Any) -> Any:
        if _is_tensor(a) or _is_tensor(b):
            return semantic.logical_and(a, b)
        return _unwrap(a) and _unwrap(b)

    def visit_BoolOp(self, node: ast.BoolOp) -> Any:
        is_and = isinstance(node.op, ast.And)
        acc = self.visit(node.values[0])
        for v in node.values[1:]:
            if not _is_tensor(acc):
                if bool(_unwrap(acc)) != is_and:
                    return acc  # short-circuit on a compile-time value
                acc = self.visit(v)
                continue
            nxt = self.visit(v)
            acc = semantic.logical_and(acc, nxt) if is_and else semantic.logical_or(acc, nxt)
        return acc

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Any:
        x = self.visit(node.operand)
        if not _is_tensor(x):
            v = _unwrap(x)
            ops = {ast.Not: lambda: not v, ast.USub: lambda: -v, ast.UAdd: lambda: +v, ast.Invert: lambda: ~v}
            r = ops[type(node.op)]()
            return constexpr(r) if isinstance(x, constexpr) else r
        if isinstance(node.op, ast.Not):
            return semantic.not_(x)
        return {ast.USub: semantic.minus, ast.UAdd: lambda t: t, ast.Invert: semantic.invert}[type(node.op)](x)

    def visit_IfExp(self, node: ast.IfExp) -> Any:
        cond = self.visit(node.test)
        if not _is_tensor(cond):
            return self.visit(node.body if _unwrap(cond) else node.orelse)
        if cond.shape and semantic._numel(cond.shape) != 1:
            # A tile of conditions picks elementwise (both sides are evaluated).
            return semantic.where(cond, self.visit(node.body), self.visit(node.orelse))
        # A scalar condition runs one side, as Triton does: `tl.store(a) if c else tl.store(b)`
        # stores once. As an `if` whose branches assign one hidden name.
        c, v = f"\0ifexp{id(node)}c", f"\0ifexp{id(node)}v"
        self.scope[c] = cond
        stmt = ast.If(test=ast.Name(id=c, ctx=ast.Load()),
                      body=[ast.Assign(targets=[ast.Name(id=v, ctx=ast.Store())], value=node.body)],
                      orelse=[ast.Assign(targets=[ast.Name(id=v, ctx=ast.Store())], value=node.orelse)])
        self.visit(ast.fix_missing_locations(ast.copy_location(stmt, node)))
        self.scope.pop(c, None)
        return self.scope.pop(v, None)

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        base = self.visit(node.value)
        return getattr(base, node.attr)

    def visit_Subscript(self, node: ast.Subscript) -> Any:
        base = self.visit(node.value)
        idx = self.visit(node.slice)
        if _is_tensor(base):
            return semantic.subscript(base, idx)
        return _unwrap(base)[_unwrap(idx) if not isinstance(idx, tuple) else tuple(_unwrap(i) for i in idx)]

    def visit_Index(self, node):  # Python 3.8 compatibility
        return self.visit(node.value)

    def visit_Slice(self, node: ast.Slice) -> Any:
        lo = None if node.lower is None else _unwrap(self.visit(node.lower))
        hi = None if node.upper is None else _unwrap(self.visit(node.upper))
        st = None if node.step is None else _unwrap(self.visit(node.step))
        return slice(lo, hi, st)

    def visit_Call(self, node: ast.Call) -> Any:
        fn = self.visit(node.func)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                args.extend(_unwrap(self.visit(a.value)))
            else:
                args.append(self.visit(a))
        kwargs = {}
        for k in node.keywords:
            if k.arg is None:
                kwargs.update(_unwrap(self.visit(k.value)))
            else:
                kwargs[k.arg] = self.visit(k.value)
        return self.call(node, _unwrap(fn) if isinstance(fn, constexpr) else fn, args, kwargs)

    def call(self, node: ast.AST, fn: Any, args: List[Any], kwargs: Dict[str, Any]) -> Any:
        if getattr(fn, "_tiles_builtin", False):
            return fn(*args, **kwargs)  # the common case first: a language function
        if isinstance(fn, _jit_function_class()):
            return inline_call(fn, self.builder, args, kwargs)
        if isinstance(fn, functools.partial) and isinstance(fn.func, _jit_function_class()):
            # A @jit method read from an aggregate: the instance comes first.
            return inline_call(fn.func, self.builder, list(fn.args) + list(args), {**fn.keywords, **kwargs})
        if isinstance(fn, type) and hasattr(fn, "_tiles_aggregate_fields"):
            return fn(*args, **kwargs)  # an aggregate's constructor runs at compile time
        if hasattr(getattr(fn, "__self__", None), "_tiles_aggregate_fields"):
            return fn(*args, **kwargs)  # a plain method of an aggregate: Python at compile time
        if getattr(getattr(fn, "__func__", None), "_tiles_builtin", False):  # a builtin bound as a method
            return fn(*args, **kwargs)
        if fn in (builtins.min, builtins.max) and any(_is_tensor(a) for a in args):
            f = semantic.minimum if fn is builtins.min else semantic.maximum
            acc = args[0]
            for a in args[1:]:
                acc = f(acc, a)
            return acc
        if fn in _INTROSPECTION and not kwargs:
            # Questions about a value (`hasattr(x, "dtype")`) are answered at compile time.
            return fn(*[_unwrap(a) for a in args])
        if fn is builtins.isinstance and len(args) == 2 and not kwargs:
            # A compile-time question about the value's kind (tensor, descriptor, constexpr...).
            obj, classes = args[0], _unwrap(args[1])
            classes = classes if isinstance(classes, tuple) else (classes,)
            plain = obj.value if isinstance(obj, constexpr) else obj
            return any(isinstance(obj, c) or isinstance(plain, c) for c in classes)
        if fn is builtins.abs and args and _is_tensor(args[0]):
            return semantic.abs_(args[0])
        if fn is builtins.print:
            if not any(_is_tensor(a) for a in args):
                return print(*[_unwrap(a) for a in args])
            prefix = " ".join(str(_unwrap(a)) for a in args if not _is_tensor(a))
            return semantic.device_print(prefix + (" " if prefix else ""), [a for a in args if _is_tensor(a)])
        if fn is builtins.breakpoint or getattr(fn, "__module__", None) in ("pdb", "bdb"):
            return None  # breakpoints work in the interpreter; compiled kernels ignore them
        if fn in (builtins.range, language.range, language.static_range):
            raise TypeError(f"{getattr(fn, '__name__', fn)} can only be used as the iterable of a for loop")
        if isinstance(fn, type) and issubclass(fn, core.dtype):
            return fn(*[_unwrap(a) for a in args], **{k: _unwrap(v) for k, v in kwargs.items()})
        if isinstance(fn, type) and issubclass(fn, tuple) and hasattr(fn, "_fields"):
            return fn(*args, **kwargs)  # a NamedTuple of tensors and constants, as Triton allows
        if any(_is_tensor(a) for a in list(args) + list(kwargs.values())):
            name = getattr(fn, "__name__", repr(fn))
            raise TypeError(f"{name} is a Python function, not a @tiles.jit one: it cannot take tensors")
        return fn(*[_unwrap(a) for a in args], **{k: _unwrap(v) for k, v in kwargs.items()})


def inline_call(jitfn, builder, args: List[Any], kwargs: Dict[str, Any], elementwise: bool = False) -> Any:
    """Inlines a call to another @jit function: its body is visited with the arguments bound
    (`elementwise`: a `map_elementwise` function, see `CodeGenerator._select_if`)."""
    src = jitfn.source()
    params = jitfn.params
    if len(args) > len(params):
        raise TypeError(f"{jitfn.__name__}() takes {len(params)} arguments but {len(args)} were given")
    scope: Dict[str, Any] = {}
    for p, a in zip(params, args):
        scope[p.name] = a
    for k, v in kwargs.items():
        if k not in jitfn.param_names:
            raise TypeError(f"{jitfn.__name__}() got an unexpected keyword argument '{k}'")
        scope[k] = v
    for p in params:
        if p.name not in scope:
            if p.default is inspect.Parameter.empty:
                raise TypeError(f"{jitfn.__name__}() missing argument '{p.name}'")
            scope[p.name] = p.default
        if p.is_constexpr and not _is_tensor(scope[p.name]):
            # A tensor given for a constexpr-annotated parameter of a device function stays a
            # tensor (as Triton allows: its attention tutorial passes offset tiles that way).
            scope[p.name] = constexpr(scope[p.name])
    gen = CodeGenerator(src, builder, scope, is_kernel=False, elementwise=elementwise)
    gen.visit(src.node)
    return gen.scope.get(_RETURN)


def generate_ir(jitfn, signature: Dict[str, str], constexprs: Dict[str, Any], num_warps: int,
                specialization: Dict[str, int], equal_to_1: Sequence[str] = (), debug: bool = False,
                num_stages: int = 3, target: str = "sm_90a", sanitize_overflow: bool = False,
                fp32_default: Optional[str] = None):
    """Builds the IR of a kernel for one signature and specialisation; returns the kernel and
    its assert messages by source line."""
    src = jitfn.source()
    builder = _tiles.IrBuilder(jitfn.__name__, num_warps, src.file, max(1, int(num_stages)))
    backend = IRBackend(builder, debug, target, num_warps, sanitize_overflow, fp32_default)
    scope: Dict[str, Any] = {}
    with core.use_backend(backend):
        for p in jitfn.params:
            if p.is_constexpr and p.do_not_specialize:
                raise CompilationError(f"{p.name} marked as constexpr and listed in do_not_specialize", src.file,
                                       src.first_line)
            if p.name in constexprs:
                scope[p.name] = constexpr(constexprs[p.name])
                continue
            ty = signature.get(p.name)
            if ty is None:
                raise CompilationError(f"no type given for parameter '{p.name}'", src.file, src.first_line)
            if ty == "constexpr":
                raise CompilationError(f"parameter '{p.name}' is constexpr but has no value", src.file, src.first_line)
            if ty.startswith("tensordesc<"):
                scope[p.name] = _descriptor_param(builder, p.name, ty, specialization, src)
                continue
            if ty.startswith("("):
                scope[p.name] = _tuple_param(builder, p.name, ty, specialization, constexprs, src)
                continue
            try:
                dt = core.dtype_from_ir(_normalize_type(ty))
            except (KeyError, ValueError):
                raise CompilationError(f"parameter '{p.name}' has an unknown type {ty!r}", src.file,
                                       src.first_line) from None
            if getattr(p, "is_const", False) and dt.is_ptr():
                dt = core.pointer_type(dt.element_ty, const=True)
            h = builder.param(p.name, dt.ir, specialization.get(p.name, 1))
            backend.divisibility[h] = specialization.get(p.name, 1)
            if p.name in equal_to_1:
                scope[p.name] = semantic.scalar_constant(1, dt)
            else:
                scope[p.name] = tensor(h, dt, ())
        gen = CodeGenerator(src, builder, scope, is_kernel=True)
        gen.visit(src.node)
    return builder.finish()


_TYPE_ALIASES = {"int1": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
                 "uint16": "u16", "uint32": "u32", "uint64": "u64", "float16": "fp16", "bfloat16": "bf16",
                 "float32": "fp32", "float64": "fp64", "f16": "fp16", "f32": "fp32", "f64": "fp64", "B": "i1",
                 "u1": "i1"}  # Triton spells a bool argument "u1"


def parse_descriptor_type(ty: str):
    """`tensordesc<fp16[64, 64]>` (optionally `, nan` and `, tf32` before `>`) -> (dtype name,
    block, padding, whether fp32 loads round to TF32)."""
    import re

    m = re.fullmatch(r"tensordesc<\s*(\w+)\s*\[([\d,\s]+)\]\s*(,\s*nan\s*)?(,\s*tf32\s*)?>", ty.strip())
    if not m:
        raise ValueError(f"malformed descriptor type {ty!r}")
    block = [int(b) for b in m.group(2).split(",") if b.strip()]
    return m.group(1), block, "nan" if m.group(3) else "zero", bool(m.group(4))


def split_tuple_type(ty: str) -> List[str]:
    """The element types of a tuple type `(a,(b,c),d)`: `['a', '(b,c)', 'd']`."""
    ty = ty.strip()
    if not (ty.startswith("(") and ty.endswith(")")):
        raise ValueError(f"malformed tuple type {ty!r}")
    out, depth, cur = [], 0, ""
    for ch in ty[1:-1]:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += {"(": 1, ")": -1, "[": 1, "]": -1, "<": 1, ">": -1}.get(ch, 0)
        if depth < 0:
            raise ValueError(f"malformed tuple type {ty!r}")
        cur += ch
    if depth:
        raise ValueError(f"malformed tuple type {ty!r}")
    if cur.strip():
        out.append(cur.strip())
    return out


def _tuple_param(builder, name: str, ty: str, specialization: Dict[str, int], constexprs: Dict[str, Any], src,
                 path: Tuple[int, ...] = ()):
    """A tuple argument, nested or named: one kernel parameter per runtime element (`name_0`,
    `name_1_0`, ...), a Python tuple (or the argument's NamedTuple class) in the kernel body.
    Constant elements (`constexpr` in the type) take their values from `constexprs` under
    dotted names (`name.1.0`), as does a NamedTuple's class (`name.1.__class__`)."""
    from .runtime.jit import tuple_constant_in_kernel, tuple_path_name

    here = tuple_path_name(name, path)
    try:
        types = split_tuple_type(ty)
    except ValueError as e:
        raise CompilationError(f"parameter '{name}': {e}", src.file, src.first_line) from None
    out = []
    for j, et in enumerate(types):
        at = path + (j,)
        if et.startswith("("):
            out.append(_tuple_param(builder, name, et, specialization, constexprs, src, at))
            continue
        if et == "constexpr":
            key = tuple_path_name(name, at)
            if key not in constexprs:
                raise CompilationError(f"parameter '{name}' element {key} is constexpr but has no value", src.file,
                                       src.first_line)
            out.append(tuple_constant_in_kernel(constexprs[key]))
            continue
        if et.startswith("tensordesc<"):
            out.append(_descriptor_param(builder, tuple_path_name(name, at), et, specialization, src,
                                         name + "".join(f"_{i}" for i in at)))
            continue
        try:
            dt = core.dtype_from_ir(_normalize_type(et))
        except (KeyError, ValueError):
            raise CompilationError(f"parameter '{name}' element {tuple_path_name(name, at)} has an unknown type "
                                   f"{et!r}", src.file, src.first_line) from None
        h = builder.param(name + "".join(f"_{i}" for i in at), dt.ir,
                          specialization.get(tuple_path_name(name, at), 1))
        out.append(tensor(h, dt, ()))
    cls = constexprs.get(here + ".__class__")
    return cls(*out) if cls is not None else tuple(out)


def _descriptor_param(builder, name: str, ty: str, specialization: Dict[str, int], src, ir_name: str = ""):
    """The kernel parameters of a host TensorDescriptor (base pointer, i32 shape, i64 strides)
    and the `tl.tensor_descriptor` the kernel body sees. `name` keys the specialisation (a
    tuple element's is dotted, `t.0`); `ir_name` prefixes the parameters (default `name`)."""
    try:
        dt_name, block, padding, tf32 = parse_descriptor_type(ty)
        dt = core.dtype_from_ir(_normalize_type(dt_name))
    except (KeyError, ValueError) as e:
        raise CompilationError(f"parameter '{name}': {e}", src.file, src.first_line) from None
    pt = core.pointer_type(dt)
    ir_name = ir_name or name
    base = tensor(builder.param(f"{ir_name}_base", pt.ir, specialization.get(name, 1)), pt, ())
    shape = [tensor(builder.param(f"{ir_name}_shape{i}", "i32", specialization.get(f"{name}.shape{i}", 1)),
                    core.int32, ()) for i in range(len(block))]
    strides = []
    for i in range(len(block)):
        h = builder.param(f"{ir_name}_stride{i}", "i64", specialization.get(f"{name}.stride{i}", 1))
        strides.append(tensor(h, core.int64, ()))
    strides[-1] = 1  # checked on the host: the last dimension is contiguous
    return language.tensor_descriptor(base, shape, strides, block, padding, round_tf32=tf32)


def _normalize_type(ty: str) -> str:
    ty = ty.strip()
    if ty.startswith("*"):
        rest = ty[1:].lstrip("k")
        return "*" + _TYPE_ALIASES.get(rest, rest)
    return _TYPE_ALIASES.get(ty, ty)
