"""The interpreter's reading of `inline_asm_elementwise`: straight-line PTX on `$n` operands, run
with numpy on `pack` elements per statement, packed into registers as the compiled code packs
them. It covers what kernels put in inline asm for speed: the approximate transcendentals
(`tanh.approx.f32`, `ex2.approx.ftz.f32`, ...); float and integer arithmetic (`f16x2`/`bf16x2`
halves too); bit work (`lop3`, `prmt`, `shf`, `bfe`, `bfi`); moves and conversions
(`cvt.rna.tf32.f32`, `cvt.rn.bf16x2.f32`, `cvt.rn.satfinite.e4m3x2.f32`); and blocks with local
registers and predicates (`.reg .pred p; setp.gt.f32 p, $1, 20.; @p mov.f32 $0, $1;`). So such
kernels still run on the CPU. Approximate instructions give the exact (correctly rounded) value:
the GPU's is within its documented error of it. Anything else (branches, special registers,
memory) raises NotImplementedError naming the instruction."""

from __future__ import annotations

import re
from typing import Dict, List, Sequence

import numpy as np

from .. import core
from .._numpy_types import numpy_dtype

_WIDTH = {"f": 32, "r": 32, "h": 16, "c": 8, "l": 64, "d": 64}
_UINT = {16: np.uint16, 32: np.uint32, 64: np.uint64, 8: np.uint8}
_FLOATS = {"f16": np.float16, "f32": np.float32, "f64": np.float64}
_INTS = {f"{k}{w}": getattr(np, f"{'int' if k == 's' else 'uint'}{w}") for k in "sub" for w in (8, 16, 32, 64)}
_TYPE = re.compile(r"^(f16|bf16|tf32|f32|f64|[sub](8|16|32|64)|f16x2|bf16x2|e4m3x2|e5m2x2)$")

_UNARY_FLOAT = {
    "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "ex2": np.exp2, "lg2": np.log2, "sqrt": np.sqrt,
    "rcp": lambda v: 1.0 / v, "rsqrt": lambda v: 1.0 / np.sqrt(v), "abs": np.abs, "neg": np.negative,
}
_BINARY_FLOAT = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "min": np.fmin,
                 "max": np.fmax}
_BINARY_INT = {"add": np.add, "sub": np.subtract, "and": np.bitwise_and, "or": np.bitwise_or,
               "xor": np.bitwise_xor, "min": np.minimum, "max": np.maximum}


def _np_type(t: str):
    if t == "bf16":
        return numpy_dtype(core.bfloat16)
    if t in _FLOATS:
        return np.dtype(_FLOATS[t])
    if t[0] == "b" and t[1:].isdigit():
        return np.dtype(_UINT[int(t[1:])])
    if t not in _INTS:
        raise NotImplementedError(f"type .{t} here")
    return np.dtype(_INTS[t])


def _read(bits: np.ndarray, t: str) -> np.ndarray:
    dt = _np_type(t)
    size = dt.itemsize * 8
    if bits.dtype.itemsize * 8 != size:  # the register's low bits, or zero-extended
        bits = bits.astype(_UINT[size])
    return bits.view(dt)


def _write(value: np.ndarray, t: str, width: int) -> np.ndarray:
    value = np.asarray(value).astype(_np_type(t))
    bits = value.view(_UINT[value.dtype.itemsize * 8])
    return bits.astype(_UINT[width]) if bits.dtype.itemsize * 8 != width else bits


def _ftz(v: np.ndarray) -> np.ndarray:
    if v.dtype != np.float32:
        return v
    tiny = np.abs(v) < np.finfo(np.float32).tiny
    return np.where(tiny & (v != 0), np.copysign(np.float32(0), v), v).astype(np.float32)


def _immediate(tok: str, t: str) -> np.ndarray:
    if tok.startswith("["):
        raise NotImplementedError(f"memory operand `{tok}`")
    if re.fullmatch(r"0[fF][0-9a-fA-F]{8}", tok):
        return np.array(int(tok[2:], 16), np.uint32).view(np.float32).astype(_np_type(t))
    if re.fullmatch(r"0[dD][0-9a-fA-F]{16}", tok):
        return np.array(int(tok[2:], 16), np.uint64).view(np.float64).astype(_np_type(t))
    try:
        v = float(tok) if t in ("f16", "bf16", "f32", "f64") else int(tok, 0)
    except ValueError:
        raise NotImplementedError(f"operand `{tok}`") from None
    return np.array(v).astype(_np_type(t))


def _tf32(v: np.ndarray) -> np.ndarray:
    """cvt.rna.tf32.f32: 10 mantissa bits, ties away from zero (NaN and infinities kept)."""
    bits = v.astype(np.float32).view(np.uint32)
    rounded = ((bits.astype(np.uint64) + 0x1000) & 0xFFFFE000).astype(np.uint32)
    return np.where(np.isfinite(v), rounded.view(np.float32), v).astype(np.float32)


def _cvt(mods: List[str], dst: str, src: str, v: np.ndarray) -> np.ndarray:
    if dst == "tf32":
        return _tf32(v)
    if src in ("f16", "bf16", "f32", "f64") and dst[0] in "su":
        w = v.astype(np.float64)
        mode = next((m for m in mods if m in ("rni", "rzi", "rmi", "rpi")), "rzi")
        w = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[mode](w)
        info = np.iinfo(_np_type(dst))
        w = np.where(np.isnan(w), 0, np.clip(w, info.min, info.max))
        return w.astype(_np_type(dst))
    if dst in ("f16", "bf16", "f32", "f64"):
        return v.astype(np.float64).astype(_np_type(dst)) if src[0] in "su" else v.astype(_np_type(dst))
    return v.astype(np.int64).astype(_np_type(dst))


_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
        "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal}


_PACKED = {"f16x2": 16, "bf16x2": 16, "e4m3x2": 8, "e5m2x2": 8}


def _fp8(t: str) -> np.dtype:
    return numpy_dtype(core.float8e4nv if t == "e4m3x2" else core.float8e5)


def _to_packed(mods: List[str], dt: str, st: str, v: np.ndarray) -> np.ndarray:
    """One half of a packed destination, as its bits (`cvt ... .f16x2/.bf16x2/.e4m3x2/.e5m2x2`)."""
    v = v.astype(np.float64 if st == "f64" else np.float32)
    if dt in ("e4m3x2", "e5m2x2"):
        dtype = _fp8(dt)
        if "satfinite" in mods:
            import ml_dtypes

            big = float(ml_dtypes.finfo(dtype).max)
            v = np.where(np.isnan(v), v, np.clip(v, -big, big))
        return v.astype(dtype).view(np.uint8)
    return v.astype(_np_type(dt[:-2])).view(np.uint16)


def _from_packed(t: str, bits: np.ndarray) -> np.ndarray:
    if t in ("e4m3x2", "e5m2x2"):
        return bits.astype(np.uint8).view(_fp8(t))
    return bits.astype(np.uint16).view(_np_type(t[:-2]))


# Barriers and memory fences (`bar.sync 0`, `barrier.sync`, `membar.gl`, `fence.acq_rel.gpu`).
_ORDERING = frozenset({"bar", "barrier", "membar", "fence"})


def _execute(ins: str, regs: Dict[str, np.ndarray], widths: Dict[str, int]) -> None:
    guard = None
    g = re.match(r"@(!?)([A-Za-z_$][\w$]*)\s+", ins)
    if g:
        if g.group(2) not in regs or widths[g.group(2)] != 1:
            raise NotImplementedError(f"`{ins}`: `{g.group(2)}` is not a predicate")
        guard = regs[g.group(2)] if not g.group(1) else ~regs[g.group(2)]
        ins = ins[g.end():]
    if ins.split(None, 1)[0].split(".")[0] in _ORDERING:
        # The interpreter runs a program's elements together and programs one at a time: every
        # barrier is met and every ordering already holds.
        return
    m = re.fullmatch(r"([a-z0-9.]+)\s+(.*)", ins)
    if not m:
        raise NotImplementedError(f"`{ins}`")
    parts = m.group(1).split(".")
    ops = [o.strip() for o in re.findall(r"\{[^}]*\}|[^,\s{][^,]*", m.group(2))]
    base, mods = parts[0], parts[1:]
    types = [p for p in mods if _TYPE.match(p)]
    if base == "mov" and len(ops) == 2 and "{" in ops[0] + ops[1] and types and types[0][0] == "b":
        if guard is not None:
            raise NotImplementedError(f"`{ins}` under a predicate")
        _mov_vector(ops, int(types[0][1:]), regs, widths, ins)
        return
    if not types or not ops or ops[0] not in regs:
        raise NotImplementedError(f"`{ins}`: its destination `{ops[0]}`" if types and ops else f"`{ins}`")
    dst = ops[0]

    def operand(tok: str, t: str) -> np.ndarray:
        if tok in regs:
            if widths[tok] == 1:
                raise NotImplementedError(f"`{ins}`: predicate `{tok}` as a value")
            return _read(regs[tok], t)
        if re.fullmatch(r"[A-Za-z_$%][\w$.]*", tok):
            raise NotImplementedError(f"`{ins}`: `{tok}` is neither an operand nor a declared register")
        return _immediate(tok, t)

    def store(out: np.ndarray, t: str) -> None:
        bits = _write(out, t, widths[dst])
        regs[dst] = bits if guard is None else np.where(guard, bits, regs[dst])

    if base == "setp":
        # An ordered comparison (eq, lt, lo, ...), or its unordered form (equ, ltu, ...: also
        # true where an operand is NaN), or num/nan.
        cmp = next((c for c in mods if c in _CMP or c[:-1] in _CMP and c[-1] == "u" or c in ("num", "nan")), None)
        if widths[dst] != 1 or len(ops) != 3 or cmp is None:
            raise NotImplementedError(f"`{ins}`")
        a, b = operand(ops[1], types[-1]), operand(ops[2], types[-1])
        nan = (np.isnan(a) | np.isnan(b) if a.dtype.kind not in "iub"
               else np.zeros(np.broadcast_shapes(np.shape(a), np.shape(b)), bool))
        with np.errstate(all="ignore"):
            if cmp in ("num", "nan"):
                out = ~nan if cmp == "num" else nan
            elif cmp in _CMP:  # ordered: false where an operand is NaN (numpy's != says true)
                out = _CMP[cmp](a, b) & ~nan
            else:
                out = _CMP[cmp[:-1]](a, b) | nan
        regs[dst] = np.broadcast_to(out, regs[dst].shape) if guard is None else np.where(guard, out, regs[dst])
        return
    if base == "selp":
        if len(ops) != 4 or ops[3] not in regs or widths[ops[3]] != 1:
            raise NotImplementedError(f"`{ins}`")
        t = types[-1]
        store(np.where(regs[ops[3]], operand(ops[1], t), operand(ops[2], t)), t)
        return
    if base == "cvt":
        if len(types) != 2:
            raise NotImplementedError(f"`{ins}`")
        dt, st = types
        if dt.endswith("x2") and not st.endswith("x2") and len(ops) == 3:
            # Two values into one register: the first operand to the upper half.
            half = _PACKED[dt]
            hi, lo = (_to_packed(mods, dt, st, operand(o, st)) for o in ops[1:])
            store(lo.astype(np.uint32) | (hi.astype(np.uint32) << np.uint32(half)), "b32")
            return
        if dt.endswith("x2") and st.endswith("x2") and len(ops) == 2:
            src = operand(ops[1], "b32").astype(np.uint32)
            half_in, half_out = _PACKED[st], _PACKED[dt]
            out = np.zeros(src.shape, np.uint32)
            for h in (0, 1):
                part = (src >> np.uint32(h * half_in)) & np.uint32((1 << half_in) - 1)
                v = _from_packed(st, part)
                out |= _to_packed(mods, dt, "f32", v.astype(np.float32)).astype(np.uint32) << np.uint32(h * half_out)
            store(out, "b32")
            return
        if len(ops) != 2 or dt.endswith("x2") or st.endswith("x2"):
            raise NotImplementedError(f"`{ins}`")
        store(_cvt(mods, dt, st, operand(ops[1], st)), "f32" if dt == "tf32" else dt)
        return
    t = types[-1]
    if t in ("f16x2", "bf16x2"):  # the operation on each 16-bit half
        halves = []
        for h in (0, 1):
            hargs = [_half(operand(o, "b32"), h, t[:-2]) for o in ops[1:]]
            out, ot = _compute(base, mods, t[:-2], hargs, ins)
            halves.append(_write(out, ot, 16).astype(np.uint32))
        store(halves[0] | (halves[1] << np.uint32(16)), "b32")
        return
    out, ot = _compute(base, mods, t, [operand(o, t) for o in ops[1:]], ins)
    store(out, ot)


def _half(bits: np.ndarray, h: int, t: str) -> np.ndarray:
    return ((bits.astype(np.uint32) >> np.uint32(16 * h)) & np.uint32(0xFFFF)).astype(np.uint16).view(_np_type(t))


def _compute(base: str, mods: List[str], t: str, args: List[np.ndarray], ins: str):
    """(the result, its PTX type) of `base.mods.t` on `args`."""
    ftz = "ftz" in mods
    if ftz:
        args = [_ftz(a) for a in args]
    is_float = t in ("f16", "bf16", "f32", "f64")
    with np.errstate(all="ignore"):
        if base == "mov" and len(args) == 1:
            out = args[0]
        elif is_float and base in _UNARY_FLOAT and len(args) == 1:
            out = _UNARY_FLOAT[base](args[0].astype(np.float64)).astype(args[0].dtype)
        elif is_float and base in _BINARY_FLOAT and len(args) == 2:
            out = _BINARY_FLOAT[base](args[0].astype(np.float64), args[1].astype(np.float64)).astype(args[0].dtype)
        elif is_float and base in ("fma", "mad") and len(args) == 3:
            if t == "f64":
                from .interpreter import _fma64

                out = _fma64(*args)
            else:  # an fp32 product is exact in fp64
                w = [a.astype(np.float64) for a in args]
                out = (w[0] * w[1] + w[2]).astype(args[0].dtype)
        elif not is_float and base in _BINARY_INT and len(args) == 2:
            out = _BINARY_INT[base](args[0], args[1])
        elif not is_float and base == "mul" and len(args) == 2:
            w = args[0].dtype.itemsize * 8
            wide = args[0].astype(np.int64 if t[0] == "s" else np.uint64) * args[1].astype(
                np.int64 if t[0] == "s" else np.uint64) if w <= 32 else None
            if "hi" in mods and wide is not None:
                out = (wide >> w).astype(args[0].dtype)
            elif "wide" in mods or "hi" in mods:
                raise NotImplementedError(f"`{ins}`")
            else:
                out = args[0] * args[1]
        elif base == "lop3" and t == "b32" and len(args) == 4:
            # Any function of three inputs, bit by bit: bit k of the table is its value where
            # (a, b, c) has the bits of k (a the highest).
            a, b, c = (v.astype(np.uint32) for v in args[:3])
            if np.ndim(args[3]) != 0:
                raise NotImplementedError(f"`{ins}`: a table that is not an immediate")
            lut = int(args[3])
            out = np.zeros(a.shape, np.uint32)
            for k in range(8):
                if lut >> k & 1:
                    out |= ((a if k & 4 else ~a) & (b if k & 2 else ~b) & (c if k & 1 else ~c))
        elif base == "prmt" and t == "b32" and len(args) == 3 and not set(mods) - {"b32"}:
            # Byte permute (the default mode): nibble i of c picks byte i of the result from the
            # eight bytes b:a; its top bit replicates that byte's sign instead.
            ab = (args[1].astype(np.uint64) << np.uint64(32)) | args[0].astype(np.uint64)
            sel = args[2].astype(np.uint32)
            out = np.zeros(ab.shape, np.uint32)
            for i in range(4):
                nib = (sel >> np.uint32(4 * i)) & np.uint32(0xF)
                at = (nib & np.uint32(7)).astype(np.uint64) * np.uint64(8)
                byte = ((ab >> at) & np.uint64(0xFF)).astype(np.uint32)
                sign = np.where(byte & np.uint32(0x80), np.uint32(0xFF), np.uint32(0))
                out |= np.where(nib & np.uint32(8), sign, byte).astype(np.uint32) << np.uint32(8 * i)
        elif base == "bfe" and t in ("u32", "s32", "u64", "s64") and len(args) == 3:
            # len bits of a from pos (both mod 256, clamped to the width), sign-extended for .s.
            w = args[0].dtype.itemsize * 8
            u = args[0].view(_UINT[w]).astype(np.uint64)
            pos = np.minimum(args[1].astype(np.int64) & 0xFF, w)
            ln = np.minimum(args[2].astype(np.int64) & 0xFF, w - pos)
            field = (u >> pos.astype(np.uint64)) & ((np.uint64(1) << ln.astype(np.uint64)) - np.uint64(1))
            if t[0] == "s":
                top = (ln > 0) & ((field >> np.maximum(ln - 1, 0).astype(np.uint64)) & np.uint64(1)).astype(bool)
                field = np.where(top, field | ~((np.uint64(1) << ln.astype(np.uint64)) - np.uint64(1)), field)
            out = field.astype(_UINT[w]).view(args[0].dtype)
        elif base == "bfi" and t in ("b32", "b64") and len(args) == 4:
            # f's low len bits into b at pos.
            w = args[0].dtype.itemsize * 8
            f, b = (v.astype(np.uint64) for v in args[:2])
            pos = np.minimum(args[2].astype(np.int64) & 0xFF, w).astype(np.uint64)
            ln = np.minimum(args[3].astype(np.int64) & 0xFF, w).astype(np.uint64)
            mask = (((np.uint64(1) << ln) - np.uint64(1)) << pos) & np.uint64((1 << w) - 1 if w < 64 else 2**64 - 1)
            out = ((b & ~mask) | ((f << pos) & mask)).astype(_UINT[w])
        elif base == "shf" and t == "b32" and len(args) == 3:
            # Funnel shift of the 64 bits b:a by c (mod 32 with .wrap, at most 32 with .clamp).
            pair = (args[1].astype(np.uint64) << np.uint64(32)) | args[0].astype(np.uint64)
            c = args[2].astype(np.uint64)
            c = c & np.uint64(31) if "wrap" in mods else np.minimum(c, np.uint64(32))
            out = ((pair << c) >> np.uint64(32) if "l" in mods else pair >> c) & np.uint64(0xFFFFFFFF)
            out = out.astype(np.uint32)
        elif not is_float and base in ("shl", "shr") and len(args) == 2:
            n = np.minimum(args[1].astype(np.int64), args[0].dtype.itemsize * 8)
            a = args[0]
            if base == "shl":
                out = np.where(n >= a.dtype.itemsize * 8, 0, a.astype(np.uint64) << n.astype(np.uint64)).astype(a.dtype)
            else:
                out = np.where(n >= a.dtype.itemsize * 8, np.where(a < 0, -1, 0), a >> np.minimum(
                    n, a.dtype.itemsize * 8 - 1).astype(a.dtype)).astype(a.dtype)
        elif not is_float and base in ("not", "neg", "abs", "popc", "clz", "brev") and len(args) == 1:
            a = args[0]
            w = a.dtype.itemsize * 8
            u = a.view(_UINT[w]).astype(np.uint64)
            if base == "not":
                out = np.invert(a)
            elif base == "neg":
                out = np.negative(a)
            elif base == "abs":
                out = np.abs(a)
            elif base == "popc":
                out = np.array([bin(int(x)).count("1") for x in u.ravel()], np.uint32).reshape(u.shape)
            elif base == "clz":
                out = np.array([w - int(x).bit_length() for x in u.ravel()], np.uint32).reshape(u.shape)
            else:
                out = np.array([int(format(int(x), f"0{w}b")[::-1], 2) for x in u.ravel()],
                               np.uint64).reshape(u.shape).astype(_UINT[w])
            if base in ("popc", "clz"):
                return out, "u32"
        else:
            raise NotImplementedError(f"`{ins}`")
    if ftz:
        out = _ftz(np.asarray(out))
    return out, t


def _mov_vector(ops: List[str], bits: int, regs: Dict[str, np.ndarray], widths: Dict[str, int], ins: str) -> None:
    """`mov.b64 {$a, $b}, $c` splits a register into parts (low part first); the other way round,
    `mov.b64 $c, {$a, $b}` joins them."""
    if ops[0].startswith("{"):
        parts, src = ops[0], ops[1]
    else:
        parts, src = ops[1], ops[0]
    names = [p.strip() for p in parts.strip("{}").split(",")]
    if not all(n in regs and widths[n] > 1 for n in names + [src]) or bits % len(names):
        raise NotImplementedError(f"`{ins}`")
    part = bits // len(names)
    mask = np.uint64((1 << part) - 1) if part < 64 else np.uint64(0xFFFFFFFFFFFFFFFF)
    if ops[0].startswith("{"):
        whole = regs[src].astype(np.uint64)
        for k, n in enumerate(names):
            regs[n] = ((whole >> np.uint64(k * part)) & mask).astype(_UINT[widths[n]])
    else:
        whole = np.zeros(regs[names[0]].shape, np.uint64)
        for k, n in enumerate(names):
            whole |= (regs[n].astype(np.uint64) & mask) << np.uint64(k * part)
        regs[src] = whole.astype(_UINT[widths[src]])


_REG_TYPES = {"pred": 1, "b8": 8, "u8": 8, "s8": 8, "b16": 16, "u16": 16, "s16": 16, "f16": 16, "bf16": 16,
              "b32": 32, "u32": 32, "s32": 32, "f32": 32, "f16x2": 32, "bf16x2": 32, "b64": 64, "u64": 64,
              "s64": 64, "f64": 64}


def _declare(stmt: str, regs: Dict[str, np.ndarray], widths: Dict[str, int], shape) -> None:
    """`.reg .f32 a, b;` and `.reg .b32 r<4>;` (r0..r3): zeroed registers of the block."""
    m = re.fullmatch(r"\.reg\s+\.(\w+)\s+(.+)", stmt)
    if not m or m.group(1) not in _REG_TYPES:
        raise NotImplementedError(f"`{stmt}`")
    w = _REG_TYPES[m.group(1)]
    for name in (n.strip() for n in m.group(2).split(",")):
        r = re.fullmatch(r"([A-Za-z_][\w$]*)(?:<(\d+)>)?", name)
        if not r:
            raise NotImplementedError(f"`{stmt}`")
        for full in ([r.group(1)] if r.group(2) is None else [f"{r.group(1)}{i}" for i in range(int(r.group(2)))]):
            widths[full] = w
            regs[full] = np.zeros(shape, np.bool_) if w == 1 else np.zeros(shape, _UINT[max(w, 8)])


def _statements(body: str) -> List[str]:
    """The statements of `body`, with block braces dropped (registers a block declares stay
    declared after it: names are fresh within one asm string's blocks in practice)."""
    out = []
    for stmt in body.replace("\n", " ").split(";"):
        stmt = stmt.strip()
        while stmt.startswith("{"):
            stmt = stmt[1:].strip()
        while stmt.endswith("}") and stmt.count("}") > stmt.count("{"):
            stmt = stmt[:-1].strip()
        while stmt.startswith("}"):
            stmt = stmt[1:].strip()
        if stmt:
            out.append(stmt)
    return out


def _regs_for(bits: int, pack: int) -> int:
    """Registers one operand's `pack` elements fill (as the compiled code packs them)."""
    bits = max(bits, 8)
    return pack if bits >= 32 else max(1, -(-pack * bits // 32))


def _elem_bits(a: np.ndarray) -> np.ndarray:
    """Each element's own bits (a uint of its width; a register takes them zero-extended, as
    the compiled code does)."""
    a = np.asarray(a)
    return a.astype(np.uint8) if a.dtype == np.bool_ else a.view(_UINT[a.dtype.itemsize * 8])


def run(asm: str, constraints: str, args: Sequence[np.ndarray], out_dtypes: Sequence, pack: int) -> List[np.ndarray]:
    """The outputs (numpy arrays, one per output dtype) of `asm` on `args` (broadcast numpy arrays):
    `pack` consecutive elements (along the last dimension) per statement; 32-bit and wider
    elements take a register each, narrower ones share 32-bit registers, lowest element in the
    lowest bits; outputs number first ($0, ...), then inputs."""
    cons = [c.strip() for c in constraints.split(",") if c.strip()]
    outs = [c for c in cons if c.startswith("=")]
    ins = [c for c in cons if not c.startswith("=") and not c.startswith("~")]
    shape = np.broadcast_shapes(*(np.shape(a) for a in args)) if args else ()
    if pack > 1 and (not shape or shape[-1] % pack):
        raise NotImplementedError(f"pack={pack} on a tile whose last dimension is not a multiple of it")
    gshape = shape[:-1] + (shape[-1] // pack,) if pack > 1 else shape
    out_np = [numpy_dtype(d) for d in out_dtypes]
    elems = [np.broadcast_to(_elem_bits(a), shape).reshape(gshape + (pack,)) for a in args]
    need_out = sum(_regs_for(d.itemsize * 8, pack) for d in out_np)
    need_in = sum(_regs_for(e.dtype.itemsize * 8, pack) for e in elems)
    if len(outs) != need_out or len(ins) != need_in:
        raise NotImplementedError(f"constraints `{constraints}`: {need_out} output and {need_in} input registers "
                                  f"are needed for pack={pack} and these dtypes")
    regs: Dict[str, np.ndarray] = {}
    widths: Dict[str, int] = {}
    for i, c in enumerate(outs + ins):
        letter = c.lstrip("=&")
        if letter.isdigit() and int(letter) < len(outs):  # tied to an output: its register
            letter = outs[int(letter)].lstrip("=&")
        if letter not in _WIDTH:
            raise NotImplementedError(f"constraint `{c}`")
        widths[f"${i}"] = _WIDTH[letter]
        regs[f"${i}"] = np.zeros(gshape, _UINT[widths[f"${i}"]])
    k = len(outs)
    for e in elems:  # the inputs' elements into their registers
        bits = e.dtype.itemsize * 8
        for j in range(pack):
            reg, shift = (k + j, 0) if bits >= 32 else (k + j * bits // 32, j * bits % 32)
            name = f"${reg}"
            v = e[..., j].astype(np.uint64) << np.uint64(shift)
            regs[name] = (regs[name].astype(np.uint64) | v).astype(_UINT[widths[name]])
        k += _regs_for(bits, pack)
    for i, c in enumerate(ins):  # a tied output starts with its input's value
        if c.isdigit() and int(c) < len(outs):
            regs[f"${int(c)}"] = regs[f"${len(outs) + i}"].copy()
    if "%" in asm or re.search(r"\bbra\b|\bret\b|\bcall\b|[A-Za-z_]\w*:", asm):
        raise NotImplementedError("branches, labels or special registers")
    for stmt in _statements(asm):
        if stmt.startswith(".reg"):
            _declare(stmt, regs, widths, gshape)
        else:
            _execute(stmt, regs, widths)
    res = []
    k = 0
    for nd in out_np:
        bits = nd.itemsize * 8
        parts = []
        for j in range(pack):
            reg, shift = (k + j, 0) if bits >= 32 else (k + j * bits // 32, j * bits % 32)
            v = regs[f"${reg}"].astype(np.uint64) >> np.uint64(shift)
            if bits < 64:
                v = v & np.uint64((1 << bits) - 1)
            parts.append(v.astype(_UINT[max(bits, 8)]))
        k += _regs_for(bits, pack)
        got = np.stack(parts, axis=-1).reshape(shape)
        res.append(got.astype(np.uint8).view(nd) if nd == np.bool_ else got.view(nd))
    return res
