"""The language conformance suite: every test runs in the interpreter and, on a GPU, compiled,
against numpy references on fresh random inputs."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import tiles
import tiles.language as tl
from kernels import (
    axpby_kernel,
    binary_kernel,
    branch_kernel,
    column_sum_kernel,
    copy_kernel,
    full_kernel,
    grid_kernel,
    helpers_kernel,
    literal_carry_kernel,
    outer_kernel,
    scalar_kernel,
    unary_kernel,
    where_cast_kernel,
)

BF16 = np.dtype(ml_dtypes.bfloat16)
NUMERIC = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
           "float32", "float64"]


def np_dtype(name: str) -> np.dtype:
    return BF16 if name == "bfloat16" else np.dtype(name)


def random(rng, shape, name: str, low=None, high=None):
    dt = np_dtype(name)
    if name == "bool":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo = info.min if low is None else low
        hi = info.max if high is None else high
        return rng.integers(lo, hi, size=shape, dtype=dt, endpoint=True)
    lo = -4.0 if low is None else low
    hi = 4.0 if high is None else high
    return rng.uniform(lo, hi, size=shape).astype(dt)


@pytest.mark.parametrize("name", NUMERIC + ["bool"])
def test_copy_every_dtype(dev, rng, name):
    n = 1000 + int(rng.integers(0, 100))
    x = random(rng, n, name)
    out = np.zeros_like(x)
    xd, od = dev.put(x), dev.put(out)
    copy_kernel[(tiles.cdiv(n, 256),)](xd, od, n, BLOCK=256)
    np.testing.assert_array_equal(dev.get(od), x)


def c_div(x, y):
    q = np.floor_divide(x, y)
    return q + ((np.remainder(x, y) != 0) & ((x < 0) != (y < 0)))


def reference_binary(op, x, y):
    with np.errstate(all="ignore"):
        if op == "truediv":
            wide = np.float64 if x.dtype == np.float64 else np.float32
            return x.astype(wide) / y.astype(wide)
        if op == "floordiv":
            return c_div(x, y).astype(x.dtype)
        if op == "mod":
            if x.dtype.kind == "f" or x.dtype == BF16:
                wide = np.float64 if x.dtype == np.float64 else np.float32
                return np.fmod(x.astype(wide), y.astype(wide))
            return np.fmod(x, y)
        if op == "shl":
            return np.left_shift(x, y & 7).astype(x.dtype)
        if op == "shr":
            return np.right_shift(x, y & 7).astype(x.dtype)
        f = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "and": np.bitwise_and, "or": np.bitwise_or,
             "xor": np.bitwise_xor, "maximum": np.fmax, "minimum": np.fmin, "lt": np.less, "le": np.less_equal,
             "eq": np.equal, "ne": np.not_equal}[op]
        return f(x, y)


INT_OPS = ["add", "sub", "mul", "floordiv", "mod", "and", "or", "xor", "shl", "shr", "maximum", "minimum", "lt",
           "le", "eq", "ne", "truediv"]
FLOAT_OPS = ["add", "sub", "mul", "truediv", "mod", "maximum", "minimum", "lt", "le", "eq", "ne"]


@pytest.mark.parametrize("name", NUMERIC)
@pytest.mark.parametrize("op", sorted(set(INT_OPS) | set(FLOAT_OPS)))
def test_binary_ops(dev, rng, name, op):
    is_float = name.startswith("float") or name == "bfloat16"
    if op not in (FLOAT_OPS if is_float else INT_OPS):
        pytest.skip("op not defined on this dtype")
    n = 777
    small = op in ("mul",) and not is_float
    x = random(rng, n, name, *((0, 100) if small else (None, None)))
    y = random(rng, n, name, *((0, 100) if small else (None, None)))
    if op in ("floordiv", "mod", "truediv"):
        y = np.where(y == 0, np.ones_like(y), y)
    if op in ("eq", "ne", "le"):
        y[::3] = x[::3]
    ref = reference_binary(op, x, y)
    out = np.zeros(n, dtype=ref.dtype if ref.dtype != np.bool_ else np.bool_)
    xd, yd, od = dev.put(x), dev.put(y), dev.put(out)
    binary_kernel[(tiles.cdiv(n, 128),)](xd, yd, od, n, OP=op, BLOCK=128)
    got = dev.get(od)
    if is_float:
        tol = {"float16": 1e-3, "bfloat16": 1e-2}.get(name, 1e-6)
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=tol, atol=tol)
    elif op == "truediv":
        # int / int is fp32 division; Triton's (and ours) is div.full.f32, within 2 ulp.
        np.testing.assert_allclose(got, ref, rtol=3e-7, atol=0)
    else:
        np.testing.assert_array_equal(got, ref)


UNARY = {
    "exp": (np.exp, -4, 4), "exp2": (np.exp2, -4, 4), "log": (np.log, 0.01, 100), "log2": (np.log2, 0.01, 100),
    "sqrt": (np.sqrt, 0, 100), "rsqrt": (lambda v: 1 / np.sqrt(v), 0.01, 100), "abs": (np.abs, -5, 5),
    "sin": (np.sin, -10, 10), "cos": (np.cos, -10, 10), "floor": (np.floor, -10, 10), "ceil": (np.ceil, -10, 10),
    "erf": (np.vectorize(math.erf), -3, 3), "sigmoid": (lambda v: 1 / (1 + np.exp(-v)), -8, 8),
    "fma": (lambda v: v * v + v, -4, 4), "neg": (np.negative, -4, 4),
}


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("fn", sorted(UNARY))
def test_math(dev, rng, fn, name):
    ref_fn, lo, hi = UNARY[fn]
    n = 1000
    x = random(rng, n, name, lo, hi)
    ref = ref_fn(x.astype(np.float64))
    out_dt = np.float32 if (fn == "sigmoid" and name in ("float16", "bfloat16")) else np_dtype(name)
    out = np.zeros(n, dtype=out_dt)
    xd, od = dev.put(x), dev.put(out)
    unary_kernel[(tiles.cdiv(n, 256),)](xd, od, n, FN=fn, BLOCK=256)
    got = dev.get(od).astype(np.float64)
    tol = {"float32": 2e-5, "float64": 1e-12, "float16": 2e-3, "bfloat16": 1.6e-2}[name]
    if fn == "erf" and name in ("float32", "float64"):
        tol = 1e-6 if dev.mode == "gpu" else tol
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", ["float16", "float32", "int32"])
def test_scalar_arguments_promote(dev, rng, name):
    n = 500
    x = random(rng, n, name, -100, 100)
    alpha, beta = 0.5, 3
    ref = (x.astype(np.float32) * np.float32(alpha) + np.float32(beta)).astype(x.dtype)
    out = np.zeros_like(x)
    xd, od = dev.put(x), dev.put(out)
    axpby_kernel[(tiles.cdiv(n, 128),)](xd, od, alpha, beta, n, BLOCK=128)
    np.testing.assert_allclose(dev.get(od).astype(np.float64), ref.astype(np.float64), rtol=1e-3)


@tiles.jit
def unsigned_literal_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x_ptr + offs, mask=mask)
    # Python ints are one kind with unsigned tensors (Triton): the tensor's type wins, even for % and //.
    r = v % 7 + v // 3 + (v << 2) + tl.umulhi(v, v) + 5
    tl.store(out_ptr + offs, r, mask=mask)


def test_unsigned_tensors_with_int_literals(dev, rng):
    name = "uint32"  # umulhi takes 32- and 64-bit integers
    n = 300
    x = rng.integers(0, np.iinfo(name).max, n, dtype=np.uint64).astype(name)
    w = x.astype(np.uint64)
    bits = np.iinfo(name).bits
    mod = np.uint64(1 << bits)
    hi = (w * w) >> np.uint64(bits)
    ref = ((w % 7) + (w // 3) + ((w << np.uint64(2)) % mod) + hi + 5) % mod
    out = np.zeros_like(x)
    xd, od = dev.put(x), dev.put(out)
    unsigned_literal_kernel[(tiles.cdiv(n, 128),)](xd, od, n, BLOCK=128)
    np.testing.assert_array_equal(dev.get(od), ref.astype(name))


@tiles.jit
def literal_operands_kernel(x_ptr, s, out_ptr, n, K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    # Numbers on either side, plain and constexpr, take the tile's type; the scalar argument `s`
    # broadcasts; a float meeting an integer tile promotes it.
    r = (3 - x) * 2 + x * K + (x < 1) + tl.where(x > s, s, x) + (x + 0.5).to(x.dtype)
    tl.store(out_ptr + offs, r, mask=mask)


@pytest.mark.parametrize("name", ["int8", "uint16", "int32", "float16", "float32"])
def test_literal_operands_take_the_tiles_type(dev, rng, name):
    n, k = 300, 5
    x = random(rng, n, name, 0, 20)
    s = x.dtype.type(7)
    wide = np.int64 if x.dtype.kind in "iu" else np.float64
    xw = x.astype(wide)
    half = np.trunc(xw + 0.5) if x.dtype.kind in "iu" else xw + 0.5
    ref = (3 - xw) * 2 + xw * k + (xw < 1) + np.where(xw > 7, 7, xw) + half
    out = np.zeros_like(x)
    xd, od = dev.put(x), dev.put(out)
    literal_operands_kernel[(tiles.cdiv(n, 128),)](xd, s, od, n, K=k, BLOCK=128)
    if x.dtype.kind in "iu":
        np.testing.assert_array_equal(dev.get(od), ref.astype(x.dtype))  # wraps as the tile's type does
    else:
        np.testing.assert_allclose(dev.get(od).astype(np.float64), ref, rtol=2e-3, atol=2e-2)


@tiles.jit
def _dtype_floor(dtype):
    # FlagGems' `get_dtype_min`: a dtype argument read through `.value`, as Triton's constexpr
    # wrapping of a callee's non-tensor arguments allows.
    dtype_ = dtype.value
    if dtype_.is_floating():
        value: tl.constexpr = float("-inf")
        return value
    width: tl.constexpr = dtype_.int_bitwidth
    value: tl.constexpr = -1 * 2 ** (width - 1)
    return value


@tiles.jit
def masked_max_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(out_ptr, tl.max(tl.where(offs < n, x, _dtype_floor(x.dtype)), 0))
    tl.store(out_ptr + 1, tl.max(tl.where(offs < n, x, _dtype_floor(x_ptr.dtype.element_ty)), 0))


@pytest.mark.parametrize("name", ["float32", "int16"])
def test_dtype_arguments_read_through_value(dev, rng, name):
    n = 37
    x = (-rng.integers(1, 1000, n)).astype(name)  # all negative: the padding's 0 would win
    out = np.zeros(2, name)
    xd, od = dev.put(x), dev.put(out)
    masked_max_kernel[(1,)](xd, od, n, BLOCK=64)
    np.testing.assert_array_equal(dev.get(od), [x.max(), x.max()])


@tiles.jit
def optional_scale_kernel(x_ptr, w_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # Triton's laxities FlagGems relies on: a pointer's truth value is whether it is null, and a
    # `tl.constexpr` annotation on a runtime value leaves the value as it is.
    SPAN: tl.constexpr = BLOCK * n
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < SPAN
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    if w_ptr:
        x = x * tl.load(w_ptr)
    tl.store(out_ptr + offs, x, mask=m)


def test_pointer_truth_and_constexpr_annotated_runtime_values(dev, rng):
    x, w = rng.standard_normal(48).astype(np.float32), rng.standard_normal(1).astype(np.float32)
    out = np.full(64, np.nan, np.float32)
    xd, wd, od = dev.put(x), dev.put(w), dev.put(out)
    optional_scale_kernel[(1,)](xd, wd, od, 1, BLOCK=32)  # SPAN = 32 * n: the runtime 1 is not specialised away
    optional_scale_kernel[(1,)](xd, wd, od, 2, BLOCK=16)
    got = dev.get(od)
    np.testing.assert_allclose(got[:32], x[:32] * w[0], rtol=1e-6)
    assert np.isnan(got[32:]).all()


def test_pointer_truth_compiles_to_a_null_test(ptxas):
    from test_compile import assemble

    k = tiles.compile(optional_scale_kernel, signature={"x_ptr": "*fp32", "w_ptr": "*fp32", "out_ptr": "*fp32",
                                                        "n": "i32"}, constexprs={"BLOCK": 64}, target="sm_90a")
    assert "setp.eq.b64" in k.asm["ptx"] or "setp.ne.b64" in k.asm["ptx"]
    assemble(ptxas, k.asm["ptx"], "sm_90a")


@tiles.jit
def approx_div_cumprod_kernel(x_ptr, y_ptr, o_ptr, p_ptr, n, BLOCK: tl.constexpr):
    # Triton >= 3.7: `tl.fdiv(..., approx=True)` and `tl.cumprod(..., dtype=)`.
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    y = tl.load(y_ptr + offs, mask=m, other=1.0)
    tl.store(o_ptr + offs, tl.fdiv(x, y, approx=True), mask=m)
    small = tl.load(p_ptr + offs, mask=m, other=1).to(tl.int8)
    tl.store(p_ptr + offs, tl.cumprod(small, 0, dtype=tl.int32), mask=m)


def test_approx_division_and_cumprod_dtype(dev, rng):
    n = 29
    x = rng.uniform(-100, 100, n).astype(np.float32)
    y = rng.uniform(0.5, 4, n).astype(np.float32) * rng.choice([-1, 1], n).astype(np.float32)
    p = rng.integers(-3, 4, n).astype(np.int32)
    o = np.full(n, np.nan, np.float32)
    xd, yd, od, pd = dev.put(x), dev.put(y), dev.put(o), dev.put(p)
    approx_div_cumprod_kernel[(1,)](xd, yd, od, pd, n, BLOCK=32)
    exact = x.astype(np.float64) / y
    assert np.all(np.abs(dev.get(od) - exact) <= 2 * np.spacing(np.abs(exact).astype(np.float32)))
    np.testing.assert_array_equal(dev.get(pd), np.cumprod(p.astype(np.int64)).astype(np.int32))


def test_approx_division_compiles_to_div_approx(ptxas):
    from test_compile import assemble

    k = tiles.compile(approx_div_cumprod_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "o_ptr": "*fp32",
                                                            "p_ptr": "*i32", "n": "i32"},
                      constexprs={"BLOCK": 32}, target="sm_90a")
    assert "div.approx.f32" in k.asm["ptx"]
    assemble(ptxas, k.asm["ptx"], "sm_90a")


@pytest.mark.parametrize("bad", ["both", "fp64"])
def test_approx_division_refuses_what_triton_refuses(bad):
    @tiles.jit
    def k(x_ptr, IEEE: tl.constexpr):
        x = tl.load(x_ptr + tl.arange(0, 16))
        tl.store(x_ptr + tl.arange(0, 16), tl.fdiv(x, x, ieee_rounding=IEEE, approx=True))

    with pytest.raises(tiles.CompilationError, match="approx"):
        tiles.compile(k, signature={"x_ptr": "*fp32" if bad == "both" else "*fp64"},
                      constexprs={"IEEE": bad == "both"}, target="sm_90a")


@tiles.jit
def block_type_sizes_kernel(x_ptr, out_ptr):
    x = tl.load(x_ptr + tl.arange(0, 8)[:, None] * 4 + tl.arange(0, 4)[None, :])
    tl.static_assert(x.type.is_block() and x.type.get_block_shapes() == (8, 4))
    tl.store(out_ptr + tl.arange(0, 2), tl.where(tl.arange(0, 2) == 0, x.type.numel, x.type.nbytes))


def test_block_type_numel_and_nbytes(dev, rng):
    x = rng.standard_normal(32).astype(np.float32)
    out = np.zeros(2, np.int32)
    od = dev.put(out)
    block_type_sizes_kernel[(1,)](dev.put(x), od)
    np.testing.assert_array_equal(dev.get(od), [32, 128])


def test_2d_broadcast_and_masks(dev, rng):
    M, N = 37, 53
    x = rng.standard_normal(M).astype(np.float32)
    y = rng.standard_normal(N).astype(np.float32)
    out = np.full((M, N), np.nan, dtype=np.float32)
    xd, yd, od = dev.put(x), dev.put(y), dev.put(out)
    outer_kernel[(tiles.cdiv(M, 16), tiles.cdiv(N, 32))](xd, yd, od, M, N, N, BLOCK_M=16, BLOCK_N=32)
    np.testing.assert_allclose(dev.get(od), x[:, None] * 10 + y[None, :], rtol=1e-6, atol=1e-6)


def test_loop_carried_tiles(dev, rng):
    M, N = 19, 300
    x = rng.standard_normal((M, N)).astype(np.float32)
    out = np.zeros(N, dtype=np.float32)
    xd, od = dev.put(x), dev.put(out)
    column_sum_kernel[(tiles.cdiv(N, 128),)](xd, od, M, N, N, BLOCK=128)
    np.testing.assert_allclose(dev.get(od), x.sum(0), rtol=1e-5, atol=1e-5)


def test_literal_loop_state_takes_the_body_type(dev, rng):
    n = 300
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    xd, od = dev.put(x), dev.put(out)
    literal_carry_kernel[(tiles.cdiv(n, 128),)](xd, od, n, 5, BLOCK=128)
    np.testing.assert_allclose(dev.get(od), x, rtol=1e-5)


@pytest.mark.parametrize("threshold", [7, 1000])
def test_runtime_if_and_early_return(dev, rng, threshold):
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    xd, od = dev.put(x), dev.put(out)
    branch_kernel[(tiles.cdiv(n, 128) + 3,)](xd, od, n, threshold, BLOCK=128)
    np.testing.assert_allclose(dev.get(od), x * (2.0 if threshold > 100 else 3.0), rtol=1e-6)


@tiles.jit
def pack_rows_kernel(x, y, cu_seqlens, S, D, BD: tl.constexpr, LEFT: tl.constexpr, PACK: tl.constexpr):
    # FLA's pack/unpack: an early return inside a runtime `if` nested in a constexpr `if`, a
    # name defined after it, and code after the outer `if` that must not run once returned.
    i_d, i_s, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    bos, eos = tl.load(cu_seqlens + i_b).to(tl.int64), tl.load(cu_seqlens + i_b + 1).to(tl.int64)
    T = eos - bos
    if LEFT:
        NP = S - T
        if i_s < NP:
            return
        i_t = bos + (i_s - NP)
    else:
        if i_s >= T:
            return
        i_t = bos + i_s
    o_d = i_d * BD + tl.arange(0, BD)
    mask = o_d < D
    if PACK:
        tl.store(y + i_t * D + o_d, tl.load(x + (i_b * S + i_s) * D + o_d, mask=mask), mask=mask)
    else:
        tl.store(y + (i_b * S + i_s) * D + o_d, tl.load(x + i_t * D + o_d, mask=mask), mask=mask)


@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize("pack", [False, True])
def test_early_return_nested_in_a_constexpr_if(dev, rng, left, pack):
    lens, S, D = [3, 7, 1, 5], 7, 40
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    padded = np.full((len(lens), S, D), np.nan, np.float32)
    packed = np.full((cu[-1], D), np.nan, np.float32)
    src = rng.standard_normal(packed.shape if not pack else padded.shape).astype(np.float32)
    out = (packed if pack else padded).copy()
    od = dev.put(out)
    pack_rows_kernel[(tiles.cdiv(D, 32), S, len(lens))](dev.put(src), od, dev.put(cu), S, D, BD=32, LEFT=left,
                                                        PACK=pack)
    ref = out.copy()
    for b, n in enumerate(lens):
        rows = slice(S - n, S) if left else slice(0, n)
        if pack:
            ref[cu[b]:cu[b + 1]] = src[b, rows]
        else:
            ref[b, rows] = src[cu[b]:cu[b + 1]]
    np.testing.assert_array_equal(dev.get(od), ref)


@pytest.mark.parametrize("left", [False, True])
def test_early_return_nested_in_a_constexpr_if_assembles(ptxas, left):
    from test_compile import assemble

    sig = {"x": "*fp32", "y": "*fp32", "cu_seqlens": "*i32", "S": "i32", "D": "i32"}
    k = tiles.compile(pack_rows_kernel, signature=sig, constexprs={"BD": 32, "LEFT": left, "PACK": True},
                      target="sm_90a")
    # The store after the outer `if` sits in the branch that did not return.
    body = k.asm["tir_opt"]
    assert body.count(" store ") == 1 and body.index(" if ") < body.index(" store ")
    assemble(ptxas, k.asm["ptx"], "sm_90a")


@tiles.jit
def rebound_after_return_kernel(X, OUT, n_rows, n_cols, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                HALVES: tl.constexpr):
    # flash-attn's rotary kernel: blocks past the end return first; then the pointer parameters
    # are re-bound to tiles of pointers (a different type from the scalar the returning branch
    # left them).
    pid = tl.program_id(0)
    if pid * BLOCK_M >= n_rows:
        return
    rm = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    X = X + rm[:, None] * stride + rn[None, :]
    OUT = OUT + rm[:, None] * stride + rn[None, :]
    mask = (rm[:, None] < n_rows) & (rn[None, :] < n_cols)
    if HALVES:
        x0, x1 = tl.split(tl.reshape(tl.load(X, mask=mask, other=0.0), [BLOCK_M, BLOCK_N // 2, 2]))
        tl.store(OUT, tl.reshape(tl.join(x1, x0), [BLOCK_M, BLOCK_N]), mask=mask)
    else:
        tl.store(OUT, tl.load(X, mask=mask, other=0.0) * 2, mask=mask)


@pytest.mark.parametrize("halves", [False, True])
def test_names_rebound_after_an_early_return(dev, rng, halves):
    rows, cols = 37, 64
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = dev.put(np.full((rows, cols), np.nan, np.float32))
    rebound_after_return_kernel[(tiles.cdiv(rows, 16) + 2,)](dev.put(x), out, rows, cols, cols, BLOCK_M=16,
                                                             BLOCK_N=64, HALVES=halves)
    ref = x.reshape(rows, cols // 2, 2)[:, :, ::-1].reshape(rows, cols) if halves else x * 2
    np.testing.assert_array_equal(dev.get(out), ref)


@pytest.mark.parametrize("halves", [False, True])
def test_names_rebound_after_an_early_return_compile(ptxas, halves):
    from test_compile import assemble

    sig = {"X": "*fp32", "OUT": "*fp32", "n_rows": "i32", "n_cols": "i32", "stride": "i32"}
    k = tiles.compile(rebound_after_return_kernel, signature=sig,
                      constexprs={"BLOCK_M": 16, "BLOCK_N": 64, "HALVES": halves}, target="sm_90a")
    assemble(ptxas, k.asm["ptx"], "sm_90a")


@tiles.jit
def static_range_step_kernel(out_ptr, N: tl.constexpr, STEP: tl.constexpr):
    acc = tl.zeros((2,), tl.int32)
    for i in tl.static_range(0, N, step=STEP):
        acc += tl.where(tl.arange(0, 2) == 0, i, 1)
    tl.store(out_ptr + tl.arange(0, 2), acc)


def test_static_range_step_keyword(dev):
    out = dev.put(np.zeros(2, np.int32))
    static_range_step_kernel[(1,)](out, N=100, STEP=7)
    np.testing.assert_array_equal(dev.get(out), [sum(range(0, 100, 7)), len(range(0, 100, 7))])
    # Compiled, the loop unrolls into one select per step (the step was dropped: 100 of them).
    k = tiles.compile(static_range_step_kernel, signature={"out_ptr": "*i32"}, constexprs={"N": 100, "STEP": 7})
    assert k.asm["tir"].count("= select") == len(range(0, 100, 7))


def test_static_range_calls_and_element_ty(dev, rng):
    n = 700
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    xd, od = dev.put(x), dev.put(out)
    helpers_kernel[(tiles.cdiv(n, 256),)](xd, od, n, BLOCK=256, REPEAT=3)
    acc = x * 6
    np.testing.assert_allclose(dev.get(od), np.maximum(acc, 0) + 2 * np.minimum(acc, 0), rtol=1e-5)


def test_where_and_casts(dev, rng):
    n = 513
    x = rng.standard_normal(n).astype(np.float32)
    i, h, b = np.zeros(n, np.int32), np.zeros(n, np.float16), np.zeros(n, np.int32)
    xd, idd, hd, bd = dev.put(x), dev.put(i), dev.put(h), dev.put(b)
    where_cast_kernel[(tiles.cdiv(n, 128),)](xd, idd, hd, bd, n, BLOCK=128)
    np.testing.assert_array_equal(dev.get(idd), (np.where(x > 0, x, 0) * 100).astype(np.int32))
    np.testing.assert_array_equal(dev.get(hd), x.astype(np.float16))
    np.testing.assert_array_equal(dev.get(bd), x.view(np.int32))


def test_scalar_loads_and_stores(dev, rng):
    n = 37
    x = rng.integers(-1000, 1000, n).astype(np.int64)
    out = np.zeros(1, np.int64)
    xd, od = dev.put(x), dev.put(out)
    scalar_kernel[(1,)](xd, od, n)
    assert dev.get(od)[0] == x.sum()


def test_program_ids_in_3d_grids(dev):
    out = np.full(2 * 3 * 4, -1, np.int32)
    od = dev.put(out)
    grid_kernel[(2, 3, 4)](od)
    z, y, x = np.meshgrid(range(4), range(3), range(2), indexing="ij")
    np.testing.assert_array_equal(dev.get(od), (x + 10 * y + 100 * z).reshape(-1))


def test_full_and_grid_callable(dev, rng):
    n = 300
    v = int(rng.integers(-50, 50))
    out = np.zeros(n, np.int32)
    od = dev.put(out)
    full_kernel[lambda meta: (tiles.cdiv(meta["n"], meta["BLOCK"]),)](od, n, v, BLOCK=64)
    np.testing.assert_array_equal(dev.get(od), np.full(n, 7 + v, np.int32))


@pytest.mark.gpu
def test_native_launches_respect_every_specialisation(monkeypatch, rng):
    """The native launch path keys on alignment, divisibility, ==1, dtype and constexprs."""
    import torch

    monkeypatch.setenv("TILES_INTERPRET", "0")
    base = torch.from_numpy(rng.standard_normal(4096).astype(np.float32)).cuda()
    cases = [(base, 4096, 256), (base[1:], 4095, 256), (base, 1, 256), (base, 1000, 128), (base[3:], 17, 64),
             (base.half(), 4096, 256), (base.double()[5:], 999, 128), (base, 4096, 256)]
    for _ in range(2):  # the second round goes through the native dispatcher
        for x, n, block in cases:
            out = torch.full_like(x, float("nan"))
            copy_kernel[(tiles.cdiv(n, block),)](x, out, n, BLOCK=block)
            torch.cuda.synchronize()
            assert torch.equal(out[:n], x[:n]), (x.dtype, n, block)
            assert torch.isnan(out[n:]).all()
    ints = torch.arange(100, device="cuda", dtype=torch.int32)
    out = torch.zeros_like(ints)
    for _ in range(2):
        binary_kernel[(1,)](ints, ints, out, 100, OP="add", BLOCK=128)
        torch.cuda.synchronize()
        assert torch.equal(out, 2 * ints)
        binary_kernel[(1,)](ints, ints, out, 100, OP="mul", BLOCK=128)
        torch.cuda.synchronize()
        assert torch.equal(out, ints * ints)


@tiles.jit
def reverse_loop_kernel(x_ptr, out_ptr, n, STEP: tl.constexpr):
    # Horner's rule over x[n-1], x[n-1-STEP], ...: the order of the terms shows in the result.
    acc = tl.zeros([1], dtype=tl.float32)
    for i in range(n - 1, -1, -STEP):
        acc = acc * 0.5 + tl.load(x_ptr + i + tl.arange(0, 1))
    for j in tl.range(n, 0, -3):
        acc += j
    tl.store(out_ptr + tl.arange(0, 1), acc)


@pytest.mark.parametrize("step", [1, 2])
def test_loops_with_a_negative_step(dev, rng, step):
    n = 11
    x = rng.standard_normal(n).astype(np.float32)
    out = dev.put(np.zeros(1, np.float32))
    reverse_loop_kernel[(1,)](dev.put(x), out, n, STEP=step)
    acc = 0.0
    for i in range(n - 1, -1, -step):
        acc = acc * 0.5 + float(x[i])
    acc += sum(range(n, 0, -3))
    np.testing.assert_allclose(dev.get(out)[0], acc, rtol=1e-5)


def test_loops_with_a_negative_step_compile(ptxas):
    from test_compile import assemble

    k = tiles.compile(reverse_loop_kernel, signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                      constexprs={"STEP": 2}, target="sm_90a")
    assemble(ptxas, k.asm["ptx"], "sm_90a")
    with pytest.raises(tiles.CompilationError, match="step must not be 0"):
        tiles.compile(reverse_loop_kernel, signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                      constexprs={"STEP": 0}, target="sm_90a")


@tiles.jit
def chained_compare_kernel(x_ptr, out_ptr, lo, hi, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    if 0 < BLOCK <= 1024:  # a chain of compile-time values
        inside = lo <= x < hi  # a chain of tiles: each comparison, and-ed
        tl.store(out_ptr + offs, tl.where(inside, x, 0.0))


def test_chained_comparisons(dev, rng):
    x = rng.standard_normal(128).astype(np.float32)
    out = dev.put(np.full(128, np.nan, np.float32))
    chained_compare_kernel[(1,)](dev.put(x), out, -0.5, 0.5, BLOCK=128)
    np.testing.assert_array_equal(dev.get(out), np.where((x >= -0.5) & (x < 0.5), x, 0.0))


@tiles.jit
def annotated_kernel(out_ptr, n: tl.int64, scale: tl.float32, small):
    # An annotation fixes a scalar parameter's type: n is int64 even for values that fit 32 bits.
    tl.static_assert(n.dtype == tl.int64)
    tl.static_assert(scale.dtype == tl.float32)
    tl.store(out_ptr, n * 4 + small)
    tl.store(out_ptr + 1, (scale * 3).to(tl.int64))


def test_annotated_scalar_parameters(dev):
    out = dev.put(np.zeros(2, np.int64))
    annotated_kernel[(1,)](out, 2**30, 2, 7)  # an int for the float parameter is converted
    np.testing.assert_array_equal(dev.get(out), [2**32 + 7, 6])
    with pytest.raises(tiles.LaunchError, match="annotated i64"):
        annotated_kernel[(1,)](out, 1.5, 2.0, 7)


@tiles.jit
def while_counter_kernel(x_ptr, out_ptr, n, limit):
    # `i` starts as a Python int; compiled it becomes loop state (a tensor), so `.to` works on it.
    i = 0
    total = 0.0
    done = False
    while (i < n) & (not done):
        total += tl.load(x_ptr + i)
        done = total > limit
        i += 1
    tl.store(out_ptr, total)
    tl.store(out_ptr + 1, i.to(tl.float32))


def test_while_with_a_literal_counter(dev, rng):
    x = rng.uniform(0, 3, 40).astype(np.float32)
    out = dev.put(np.zeros(2, np.float32))
    while_counter_kernel[(1,)](dev.put(x), out, 40, 10.0)
    c = np.cumsum(x.astype(np.float32))
    k = int(np.argmax(c > 10.0)) + 1
    np.testing.assert_allclose(dev.get(out), [c[k - 1], k], rtol=1e-5)


@tiles.jit
def mixed_shift_kernel(x_ptr, y_ptr, out_ptr, N: tl.constexpr):
    o = tl.arange(0, N)
    tl.store(out_ptr + o, tl.load(x_ptr + o) >> tl.load(y_ptr + o))


@pytest.mark.parametrize("xt, yt, rt", [(np.int8, np.uint8, np.uint8), (np.int32, np.uint32, np.uint32),
                                        (np.int16, np.uint32, np.uint32), (np.uint8, np.int16, np.int16),
                                        (np.int64, np.int8, np.int64)])
def test_right_shift_follows_the_left_operands_signedness(dev, rng, xt, yt, rt):
    # As Triton: int8 >> uint8 is uint8, shifted arithmetically (the left operand was signed).
    n = 64
    info = np.iinfo(xt)
    x = rng.integers(info.min, info.max, n, dtype=np.int64).astype(xt)
    y = rng.integers(0, 8 * np.dtype(xt).itemsize, n).astype(yt)
    out = dev.put(np.zeros(n, rt))
    mixed_shift_kernel[(1,)](dev.put(x), dev.put(y), out, N=n)
    bits = x.astype(rt)
    if np.dtype(xt).kind == "i":
        signed = np.dtype(f"i{np.dtype(rt).itemsize}")
        want = (bits.view(signed) >> y.astype(signed)).view(rt)
    else:
        want = bits >> y.astype(rt)
    np.testing.assert_array_equal(dev.get(out), want)


def test_right_shift_of_mixed_signedness_assembles(ptxas):
    from test_compile import assemble

    k = tiles.compile(mixed_shift_kernel, signature={"x_ptr": "*i8", "y_ptr": "*u8", "out_ptr": "*u8"},
                      constexprs={"N": 64}, target="sm_90a")
    assert "shr.s16" in k.asm["ptx"] or "shr.s32" in k.asm["ptx"]  # arithmetic, on the bits
    assemble(ptxas, k.asm["ptx"], "sm_90a")


@tiles.jit
def scalar_subscript_kernel(x_ptr, s_ptr, n_blocks, B: tl.constexpr):
    # As Triton (3.6): a scalar indexed `[:, None]` or `[None, :]` gets one axis, shape [1]
    # (torchao's blockwise fp8 weight quant stores its scale this way).
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    tl.static_assert(pid_n[:, None].shape == [1] and pid_m[None, :].shape == [1])
    tl.static_assert(pid_m[None, None].shape == [1, 1])
    offs = pid_n[:, None] * n_blocks + pid_m[None, :]
    x = tl.load(x_ptr + (pid_m * n_blocks + pid_n) * B + tl.arange(0, B))
    tl.store(s_ptr + offs, tl.max(tl.abs(x)), mask=(pid_n[:, None] < n_blocks) & (pid_m[None, :] < n_blocks))


def test_a_scalar_takes_one_axis_from_a_subscript(dev, rng):
    nb, b = 3, 32
    x = rng.standard_normal((nb, nb, b)).astype(np.float32)
    s = dev.put(np.zeros((nb, nb), np.float32))
    scalar_subscript_kernel[(nb, nb)](dev.put(x), s, nb, B=b)
    np.testing.assert_array_equal(dev.get(s), np.abs(x).max(axis=2).T)


@tiles.jit
def nan_minmax_kernel(x_ptr, y_ptr, out_ptr, N: tl.constexpr):
    o = tl.arange(0, N)
    x = tl.load(x_ptr + o)
    y = tl.load(y_ptr + o)
    tl.store(out_ptr + o, tl.maximum(x, y))
    tl.store(out_ptr + N + o, tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL))
    tl.store(out_ptr + 2 * N + o, tl.minimum(x, y, propagate_nan=tl.PropagateNan.ALL))
    tl.store(out_ptr + 3 * N + o, tl.clamp(x, -1.0, 1.0))
    tl.store(out_ptr + 4 * N + o, tl.clamp(x, -1.0, 1.0, propagate_nan=tl.PropagateNan.ALL))
    tl.store(out_ptr + 5 * N + o, tl.clamp(x, -1.0, 2.0))
    h = x.to(tl.float16)
    # As Triton: Python float bounds and addends are fp32 tensors, so fp16 math promotes.
    tl.static_assert(tl.clamp(h, -1.0, 1.0).dtype == tl.float32)
    tl.static_assert(tl.fma(h, h, 1.0).dtype == tl.float32)
    tl.static_assert(tl.maximum(h, 1.0).dtype == tl.float16)


def test_nan_propagation_of_min_max_clamp(dev, rng):
    n = 64
    x = rng.standard_normal(n).astype(np.float32) * 3
    y = rng.standard_normal(n).astype(np.float32) * 3
    x[::5] = np.nan
    x[::10] = -np.abs(x[::10])  # NaNs of both signs
    y[::7] = np.nan
    out = dev.put(np.zeros(6 * n, np.float32))
    nan_minmax_kernel[(1,)](dev.put(x), dev.put(y), out, N=n)
    got = dev.get(out).reshape(6, n)
    np.testing.assert_array_equal(got[0], np.fmax(x, y))  # PropagateNan.NONE: the other operand
    np.testing.assert_array_equal(got[1], np.maximum(x, y))  # ALL: NaN wins
    np.testing.assert_array_equal(got[2], np.minimum(x, y))
    # As Triton on sm_90, bounds -c and c clamp |x| and keep x's sign (`min.xorsign.abs`), so
    # a NaN gives c signed as the NaN is; other bounds give the lower one for a NaN.
    assert np.signbit(x[::10]).all() and not np.signbit(x[5::10]).any()
    np.testing.assert_array_equal(got[3], np.where(np.isnan(x), np.copysign(1.0, x), np.clip(x, -1, 1)))
    np.testing.assert_array_equal(got[4], np.clip(x, -1, 1))
    np.testing.assert_array_equal(got[5], np.clip(np.nan_to_num(x, nan=-1.0), -1, 2))


def test_nan_propagation_assembles(ptxas):
    from test_compile import assemble

    k = tiles.compile(nan_minmax_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32"},
                      constexprs={"N": 64}, target="sm_90a")
    assemble(ptxas, k.asm["ptx"], "sm_90a")
    assert "copysign.f32" in k.asm["ptx"]  # the symmetric clamp: min(|x|, 1) with x's sign
    # Before sm_90 Triton clamps with max then min, whatever the bounds.
    k80 = tiles.compile(nan_minmax_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32"},
                        constexprs={"N": 64}, target="sm_80")
    assemble(ptxas, k80.asm["ptx"], "sm_80")
    assert "copysign" not in k80.asm["ptx"]


@tiles.jit
def assigned_numbers_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    # A name assigned a number holds a scalar tensor, as in Triton: it has a dtype, int32
    # arithmetic (C division and remainder), and takes part in type promotion.
    a = -7
    tl.static_assert(a.dtype == tl.int32)
    q = a // 2  # -3, not Python's -4
    r = a % 3  # -1, not Python's 2
    eps = 0.5
    x = tl.load(x_ptr + tl.arange(0, BLOCK))  # bf16
    y = x + eps  # bf16 + fp32 scalar tensor: fp32 (a literal 0.5 would keep bf16)
    tl.static_assert(y.dtype == tl.float32)
    acc = 0
    acc = acc.to(tl.int64) + q
    # tiles also lets an assigned number stand where a compile-time constant is needed.
    n = BLOCK
    total = 0.0
    for _ in range(2):
        total = total + y  # loop state given as a number takes the body's type
    tl.store(out_ptr + tl.arange(0, n), total + (acc + r).to(tl.float32))


def test_assigned_numbers_are_tensors(dev, rng, ptxas):
    import ml_dtypes
    from test_compile import assemble

    x = rng.standard_normal(64).astype(ml_dtypes.bfloat16)
    out = dev.put(np.zeros(64, np.float32))
    assigned_numbers_kernel[(1,)](dev.put(x), out, BLOCK=64)
    # 2 (x + 0.5) in fp32 (exact from bf16), plus -3 + -1.
    np.testing.assert_array_equal(dev.get(out), 2 * (x.astype(np.float32) + 0.5) - 4)
    k = tiles.compile(assigned_numbers_kernel, signature={"x_ptr": "*bf16", "out_ptr": "*fp32"},
                      constexprs={"BLOCK": 64})
    assemble(ptxas, k.asm["ptx"], "sm_90a")


@tiles.jit
def bf16_promotions_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    # As Triton: scans, min/max and clamp of bf16 compute in fp32 and return fp32.
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    y = tl.load(y_ptr + tl.arange(0, BLOCK))
    s = tl.cumsum(x, 0)
    p = tl.cumprod(x, 0)
    m = tl.maximum(x, y) + tl.minimum(x, y) + tl.clamp(x, y, y + 1)
    tl.static_assert(s.dtype == tl.float32 and p.dtype == tl.float32 and m.dtype == tl.float32)
    tl.store(out_ptr + tl.arange(0, BLOCK), s)
    tl.store(out_ptr + BLOCK + tl.arange(0, BLOCK), m)


def test_bf16_scans_and_extrema_run_in_fp32(dev, rng):
    import ml_dtypes

    n = 256
    x = rng.uniform(0.5, 1.5, n).astype(ml_dtypes.bfloat16)
    y = rng.uniform(0.5, 1.5, n).astype(ml_dtypes.bfloat16)
    out = dev.put(np.zeros(2 * n, np.float32))
    bf16_promotions_kernel[(1,)](dev.put(x), dev.put(y), out, BLOCK=n)
    got = dev.get(out)
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    # A bf16 running sum would drift by far more than 1e-5 over 256 terms.
    np.testing.assert_allclose(got[:n], np.cumsum(xf), rtol=1e-5)
    np.testing.assert_allclose(got[n:], np.maximum(xf, yf) + np.minimum(xf, yf) + np.clip(xf, yf, yf + 1),
                               rtol=1e-6)
    # Compiled, the dtypes hold too (the kernel's static_asserts).
    tiles.compile(bf16_promotions_kernel, signature={"x_ptr": "*bf16", "y_ptr": "*bf16", "out_ptr": "*fp32"},
                  constexprs={"BLOCK": n})


@tiles.jit
def int8_widen_kernel(x_ptr, f16_ptr, f32_ptr, bf16_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(f16_ptr + offs, x.to(tl.float16))
    tl.store(f32_ptr + offs, x.to(tl.float32))
    tl.store(bf16_ptr + offs, x.to(tl.bfloat16))


@pytest.mark.parametrize("dt", [np.int8, np.uint8])
def test_int8_widening_is_exact_for_every_value(dev, dt):
    # Every 8-bit integer, four to a word: tiles widens without a conversion instruction
    # (bytes placed under an fp16 exponent, the offset subtracted), exactly.
    import ml_dtypes

    x = np.arange(256, dtype=np.uint8).view(dt)
    outs = [dev.put(np.zeros(256, t)) for t in (np.float16, np.float32, ml_dtypes.bfloat16)]
    int8_widen_kernel[(1,)](dev.put(x), *outs, BLOCK=256)
    for o in outs:
        got = dev.get(o).astype(np.float64)
        np.testing.assert_array_equal(got, x.astype(np.float64))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_int8_widening_assembles_without_conversions(ptxas, target):
    from test_compile import assemble

    for name in ("i8", "u8"):
        k = tiles.compile(int8_widen_kernel, signature={"x_ptr": f"*{name}", "f16_ptr": "*fp16", "f32_ptr": "*fp32",
                                                        "bf16_ptr": "*bf16"},
                          constexprs={"BLOCK": 256}, specialization={p: 16 for p in ("x_ptr", "f16_ptr", "f32_ptr",
                                                                                      "bf16_ptr")},
                          target=target, num_warps=1)
        ptx = k.asm["ptx"]
        assert "prmt.b32" in ptx and "cvt.rn.f16.s" not in ptx and "cvt.rn.f16.u" not in ptx, ptx
        assemble(ptxas, ptx, target)


@tiles.jit
def bool_arith_kernel(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs) != 0
    b = tl.load(b_ptr + offs) != 0
    tl.store(out_ptr + offs, (a + b).to(tl.int8))
    tl.store(out_ptr + BLOCK + offs, (a - b).to(tl.int8))
    tl.store(out_ptr + 2 * BLOCK + offs, (a * b).to(tl.int8))


def test_int1_arithmetic_wraps_in_one_bit(dev, rng):
    # int1 is a 1-bit integer: True + True is False, False - True is True (numpy refuses bool
    # subtraction; the interpreter computes as the GPU does).
    a = rng.integers(0, 2, 64).astype(np.int8)
    b = rng.integers(0, 2, 64).astype(np.int8)
    out = dev.put(np.full(3 * 64, 7, np.int8))
    bool_arith_kernel[(1,)](dev.put(a), dev.put(b), out, BLOCK=64)
    np.testing.assert_array_equal(dev.get(out).reshape(3, 64), np.stack([a ^ b, a ^ b, a & b]))
