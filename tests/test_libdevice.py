"""libdevice's functions (`tiles.language.extra.libdevice`), written with tiles' ops: against
numpy in float64, in both modes, fp32 and fp64, on random inputs over each function's domain."""

import functools

import numpy as np
import pytest

import tiles
import tiles.language as tl
from tiles.language.extra import libdevice

# name: (numpy reference, input range, second argument's range or None)
UNARY = {
    "asin": (np.arcsin, (-1, 1)), "acos": (np.arccos, (-1, 1)), "atan": (np.arctan, (-50, 50)),
    "tanh": (np.tanh, (-12, 12)), "sinh": (np.sinh, (-30, 30)), "cosh": (np.cosh, (-30, 30)),
    "asinh": (np.arcsinh, (-100, 100)), "acosh": (np.arccosh, (1, 100)), "atanh": (np.arctanh, (-0.99, 0.99)),
    "expm1": (np.expm1, (-3, 3)), "log1p": (np.log1p, (-0.9, 5)), "exp10": (lambda x: 10.0 ** x, (-8, 8)),
    "log10": (np.log10, (1e-3, 1e4)), "cbrt": (np.cbrt, (-1e3, 1e3)), "tan": (np.tan, (-1.4, 1.4)),
    "trunc": (np.trunc, (-100, 100)), "rint": (np.rint, (-100, 100)), "round": (None, (-100, 100)),
    "erfc": (None, (-3, 3)), "exp": (np.exp, (-20, 20)), "log": (np.log, (1e-3, 1e3)),
    "sqrt": (np.sqrt, (0, 1e4)), "rsqrt": (lambda x: 1 / np.sqrt(x), (1e-2, 1e4)),
    "erfinv": (None, (-0.99, 0.99)), "erfcinv": (None, (0.05, 1.95)), "normcdf": (None, (-5, 5)),
    "normcdfinv": (None, (0.01, 0.99)), "logb": (lambda x: np.frexp(x)[1] - 1.0, (-1e4, 1e4)),
    "erfcx": (None, (-3, 10)), "lgamma": (None, (-8.7, 30)), "tgamma": (None, (-5.5, 20)),
    "rsqrt_rn": (lambda x: 1 / np.sqrt(x), (1e-2, 1e4)),
    "j0": (None, (-30, 30)), "j1": (None, (-30, 30)), "y0": (None, (0.05, 30)), "y1": (None, (0.05, 30)),
    "cyl_bessel_i0": (None, (-20, 20)), "cyl_bessel_i1": (None, (-20, 20)),
}
BINARY = {
    "pow": (np.power, (0.1, 10), (-4, 4)), "atan2": (np.arctan2, (-5, 5), (-5, 5)),
    "fmod": (np.fmod, (-50, 50), (0.5, 7)), "copysign": (np.copysign, (-5, 5), (-5, 5)),
    "hypot": (np.hypot, (-1e3, 1e3), (-1e3, 1e3)), "rhypot": (lambda x, y: 1 / np.hypot(x, y), (-1e3, 1e3), (1, 1e3)),
    "fdim": (lambda x, y: np.where(x > y, x - y, 0.0), (-5, 5), (-5, 5)),
    "add_rn": (np.add, (-5, 5), (-5, 5)), "sub_rn": (np.subtract, (-5, 5), (-5, 5)),
    "mul_rn": (np.multiply, (-5, 5), (-5, 5)), "remainder": (None, (-50, 50), (0.5, 7)),
}


def _round_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _erfc(x):
    import math

    return np.vectorize(math.erfc)(x)


def _erfinv(y):
    """Newton on math.erf in float64 (no scipy needed)."""
    import math

    erf = np.vectorize(math.erf)
    x = np.arctanh(y) * 0.8862269254527579  # a start that tracks erfinv's shape
    for _ in range(60):
        x = x - (erf(x) - y) / (1.1283791670955126 * np.exp(-x * x))
    return x


def _math(name):
    import math

    return np.vectorize(getattr(math, name))


@functools.lru_cache(maxsize=None)
def _leggauss(n):
    """Gauss-Legendre nodes and weights on [-1, 1], computed once per n (an eigenvalue problem:
    the Bessel references call for them per element, and 16 processes solving it at once on
    threaded BLAS ran for minutes)."""
    return np.polynomial.legendre.leggauss(n)


def _gauss(lo, hi, n=256):
    """Gauss-Legendre nodes and weights on [lo, hi] (columns broadcast against inputs)."""
    t, w = _leggauss(n)
    return (hi - lo) / 2 * t[:, None] + (hi + lo) / 2, (hi - lo) / 2 * w[:, None]


def _bessel_j(nu):
    # Bessel's integral: J_nu(x) = (1/pi) int_0^pi cos(nu t - x sin t) dt (no scipy needed).
    def ref(x):
        t, w = _gauss(0.0, np.pi)
        return (w * np.cos(nu * t - x[None, :] * np.sin(t))).sum(0) / np.pi
    return ref


def _bessel_y(nu):
    # Y_nu(x) = (1/pi) int_0^pi sin(x sin t - nu t) dt
    #           - (1/pi) int_0^inf (e^(nu t) + (-1)^nu e^(-nu t)) e^(-x sinh t) dt  (x > 0)
    def ref(x):
        t, w = _gauss(0.0, np.pi)
        first = (w * np.sin(x[None, :] * np.sin(t) - nu * t)).sum(0)
        top = np.arcsinh(60.0 / x) + 1.0  # e^(-x sinh t) < e^-60 past it
        u, v = _leggauss(256)
        s, ws = (u[:, None] + 1) / 2 * top[None, :], v[:, None] / 2 * top[None, :]
        second = (ws * (np.exp(nu * s) + (-1) ** nu * np.exp(-nu * s)) * np.exp(-x[None, :] * np.sinh(s))).sum(0)
        return (first - second) / np.pi
    return ref


def _bessel_i(nu):
    # I_nu(x) = (1/pi) int_0^pi e^(x cos t) cos(nu t) dt
    def ref(x):
        t, w = _gauss(0.0, np.pi)
        return (w * np.exp(x[None, :] * np.cos(t)) * np.cos(nu * t)).sum(0) / np.pi
    return ref


REFS = {"round": _round_away, "erfc": _erfc, "erfinv": _erfinv, "erfcinv": lambda y: _erfinv(1 - y),
        "erfcx": lambda x: np.exp(x * x) * _erfc(x), "lgamma": _math("lgamma"), "tgamma": _math("gamma"),
        "remainder": _math("remainder"),
        "normcdf": lambda x: 0.5 * _erfc(-x / np.sqrt(2)), "normcdfinv": lambda p: np.sqrt(2) * _erfinv(2 * p - 1),
        "j0": _bessel_j(0), "j1": _bessel_j(1), "y0": _bessel_y(0), "y1": _bessel_y(1),
        "cyl_bessel_i0": _bessel_i(0), "cyl_bessel_i1": _bessel_i(1)}


@tiles.jit
def unary_kernel(x_ptr, y_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, getattr(libdevice, FN)(x), mask=m)


@tiles.jit
def binary_kernel(x_ptr, z_ptr, y_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    z = tl.load(z_ptr + offs, mask=m)
    tl.store(y_ptr + offs, getattr(libdevice, FN)(x, z), mask=m)


def _check(got, ref, dt):
    # fp32 exp/log on the GPU are ex2/lg2.approx based, as Triton's: a few ulp.
    rtol, atol = (5e-6, 1e-6) if dt == np.float32 else (1e-10, 1e-12)
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=rtol, atol=atol * np.abs(ref).max())


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(dev, rng, name, dt):
    ref_fn, (lo, hi) = UNARY[name]
    ref_fn = REFS.get(name, ref_fn)
    n = 3000
    x = rng.uniform(lo, hi, n).astype(dt)
    if name in ("rint", "round", "trunc"):
        x[:200] = np.round(x[:200] * 2) / 2  # exact halves: the tie rules
    if name in ("lgamma", "tgamma"):
        # A float32 sample can land on a pole (-3.0): the reference (math) raises there.
        x[(x <= 0) & (x == np.round(x))] += dt(0.5)
    y = dev.put(np.full(n, np.nan, dt))
    unary_kernel[(triton_cdiv(n, 512),)](dev.put(x), y, n, FN=name, BLOCK=512)
    _check(dev.get(y), ref_fn(x.astype(np.float64)), dt)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(dev, rng, name, dt):
    ref_fn, (lo, hi), (lo2, hi2) = BINARY[name]
    ref_fn = REFS.get(name, ref_fn)
    n = 3000
    x = rng.uniform(lo, hi, n).astype(dt)
    z = rng.uniform(lo2, hi2, n).astype(dt)
    if name == "pow":
        x[:300] = -x[:300]  # negative bases with integer exponents keep their sign
        z[:300] = np.round(z[:300])
    y = dev.put(np.full(n, np.nan, dt))
    binary_kernel[(triton_cdiv(n, 512),)](dev.put(x), dev.put(z), y, n, FN=name, BLOCK=512)
    _check(dev.get(y), ref_fn(x.astype(np.float64), z.astype(np.float64)), dt)


@tiles.jit
def classify_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(out_ptr + offs * 4, libdevice.isnan(x), mask=m)
    tl.store(out_ptr + offs * 4 + 1, libdevice.isinf(x), mask=m)
    tl.store(out_ptr + offs * 4 + 2, libdevice.signbit(x), mask=m)
    tl.store(out_ptr + offs * 4 + 3, libdevice.popc(libdevice.float_as_int(x)), mask=m)


def test_classification(dev):
    x = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 3e-39], np.float32)
    out = dev.put(np.full(4 * len(x), -1, np.int32))
    classify_kernel[(1,)](dev.put(x), out, len(x), BLOCK=8)
    got = dev.get(out).reshape(-1, 4)
    np.testing.assert_array_equal(got[:, 0], np.isnan(x))
    np.testing.assert_array_equal(got[:, 1], np.isinf(x))
    np.testing.assert_array_equal(got[:, 2], np.signbit(x))
    np.testing.assert_array_equal(got[:, 3], [bin(int(v)).count("1") for v in x.view(np.uint32)])


@tiles.jit
def bits_kernel(i_ptr, j_ptr, x_ptr, y_ptr, out_ptr, fout_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    i = tl.load(i_ptr + offs, mask=m)
    j = tl.load(j_ptr + offs, mask=m)
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    o = out_ptr + offs * 8
    tl.store(o, libdevice.clz(i), mask=m)
    tl.store(o + 1, libdevice.brev(i), mask=m)
    tl.store(o + 2, libdevice.ffs(i), mask=m)
    tl.store(o + 3, libdevice.hadd(i, j), mask=m)
    tl.store(o + 4, libdevice.rhadd(i, j), mask=m)
    tl.store(o + 5, libdevice.ilogb(x), mask=m)
    tl.store(o + 6, libdevice.float2int_rd(x), mask=m)
    tl.store(o + 7, libdevice.clz(i.to(tl.int64) << 3) + libdevice.ffs(i.to(tl.int64) << 3), mask=m)
    tl.store(fout_ptr + offs * 2, libdevice.nextafter(x, y), mask=m)
    tl.store(fout_ptr + offs * 2 + 1, libdevice.uint_as_float(libdevice.float_as_uint(x).to(tl.uint32, bitcast=True)),
             mask=m)


def test_bit_and_exponent_functions(dev, rng):
    n = 64
    i = rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    i[:4] = [0, 1, -1, 1 << 20]
    j = rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-40, 30, n)).astype(np.float32)
    x[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-42]
    y = rng.standard_normal(n).astype(np.float32)
    y[:2] = [1.0, -1.0]
    out, fout = dev.put(np.zeros(8 * n, np.int32)), dev.put(np.zeros(2 * n, np.float32))
    bits_kernel[(1,)](dev.put(i), dev.put(j), dev.put(x), dev.put(y), out, fout, n, BLOCK=64)
    got, fgot = dev.get(out).reshape(n, 8), dev.get(fout).reshape(n, 2)
    u = i.view(np.uint32).astype(np.int64)
    clz = np.array([32 - int(v).bit_length() for v in u])
    np.testing.assert_array_equal(got[:, 0], clz)
    np.testing.assert_array_equal(got[:, 1].view(np.uint32), [int(f"{int(v):032b}"[::-1], 2) for v in u])
    ffs = np.array([0 if v == 0 else (int(v) & -int(v)).bit_length() for v in u])
    np.testing.assert_array_equal(got[:, 2], ffs)
    s = i.astype(np.int64) + j.astype(np.int64)
    np.testing.assert_array_equal(got[:, 3], s >> 1)
    np.testing.assert_array_equal(got[:, 4], (s + 1) >> 1)
    finite = np.isfinite(x) & (x != 0)
    np.testing.assert_array_equal(got[finite, 5], np.frexp(x[finite].astype(np.float64))[1] - 1)
    np.testing.assert_array_equal(got[:6, 5], [-(2**31), -(2**31), 2**31 - 1, 2**31 - 1, -(2**31), -140])
    ok = np.isfinite(x) & (np.abs(x) < 2e9)
    np.testing.assert_array_equal(got[ok, 6], np.floor(x[ok]).astype(np.int32))
    w = (i.astype(np.int64) << 3).view(np.uint64)
    want7 = [(64 - int(v).bit_length()) + (0 if v == 0 else (int(v) & -int(v)).bit_length()) for v in w]
    np.testing.assert_array_equal(got[:, 7], want7)
    np.testing.assert_array_equal(fgot[:, 0], np.nextafter(x, y))
    np.testing.assert_array_equal(fgot[:, 1].view(np.uint32), x.view(np.uint32))


def test_fp16_inputs_go_through_fp32(dev, rng):
    x = rng.uniform(-3, 3, 512).astype(np.float16)
    y = dev.put(np.zeros(512, np.float16))
    unary_kernel[(1,)](dev.put(x), y, 512, FN="tanh", BLOCK=512)
    np.testing.assert_allclose(dev.get(y).astype(np.float64), np.tanh(x.astype(np.float64)), rtol=2e-3, atol=1e-3)


def test_integer_inputs_are_an_error():
    with pytest.raises(tiles.CompilationError, match="floating-point"):
        tiles.compile(unary_kernel, signature={"x_ptr": "*i32", "y_ptr": "*i32", "n": "i32"},
                      constexprs={"FN": "tanh", "BLOCK": 128})


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_erfc_tail_and_special_values(dev, dt):
    # erfc was 1 - erf(x): zero past x = 4 in fp32 (past 6 in fp64). Relative accuracy in the tail.
    import math

    top = 9.0 if dt == np.float32 else 26.0  # where erfc is still a normal number
    x = np.concatenate([np.linspace(-4, top, 400), [0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(dt)
    out = {name: dev.put(np.full(len(x), 7.0, dt)) for name in ("erfc", "erfcx", "lgamma", "tgamma")}
    for name, y in out.items():
        unary_kernel[(1,)](dev.put(x), y, len(x), FN=name, BLOCK=512)
    got = {k: dev.get(v).astype(np.float64) for k, v in out.items()}
    ref = np.array([math.erfc(v) for v in x[:400].astype(np.float64)])
    rtol = 1e-6 if dt == np.float32 else 1e-13
    np.testing.assert_allclose(got["erfc"][:400], ref, rtol=rtol)
    scaled = np.array([math.exp(v * v) * math.erfc(v) if v < 26 else np.nan for v in x[:400].astype(np.float64)])
    ok = np.isfinite(scaled)
    np.testing.assert_allclose(got["erfcx"][:400][ok], scaled[ok], rtol=rtol * 100)
    np.testing.assert_array_equal(got["erfc"][400:], [1.0, 1.0, 0.0, 2.0, np.nan])
    np.testing.assert_array_equal(got["tgamma"][400:], [np.inf, -np.inf, np.inf, np.nan, np.nan])
    np.testing.assert_array_equal(got["lgamma"][400:], [np.inf, np.inf, np.inf, np.inf, np.nan])
    poles = np.array([-3.0, -1.0, 1.0, 2.0], dt)
    g, lg = dev.put(np.zeros(4, dt)), dev.put(np.zeros(4, dt))
    unary_kernel[(1,)](dev.put(poles), g, 4, FN="tgamma", BLOCK=512)
    unary_kernel[(1,)](dev.put(poles), lg, 4, FN="lgamma", BLOCK=512)
    np.testing.assert_allclose(dev.get(g), np.array([np.nan, np.nan, 1.0, 1.0], dt), rtol=1e-14)
    assert np.isinf(dev.get(lg)[:2]).all() and np.abs(dev.get(lg)[2:]).max() < 1e-6


@tiles.jit
def byte_perm_kernel(x_ptr, y_ptr, s_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    r = libdevice.byte_perm(tl.load(x_ptr + offs, mask=m), tl.load(y_ptr + offs, mask=m),
                            tl.load(s_ptr + offs, mask=m))
    tl.store(out_ptr + offs, r, mask=m)


def test_byte_perm(dev, rng):
    n = 200
    x = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    y = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    s = rng.integers(0, 2**16, n).astype(np.int32)
    out = dev.put(np.zeros(n, np.int32))
    byte_perm_kernel[(1,)](dev.put(x), dev.put(y), dev.put(s), out, n, BLOCK=256)
    both = (y.astype(np.int64).astype(np.uint64) << np.uint64(32)) | x.view(np.uint32).astype(np.uint64)
    ref = np.zeros(n, np.uint64)
    for i in range(4):
        sel = ((s.astype(np.uint64) >> np.uint64(4 * i)) & np.uint64(7)) * np.uint64(8)
        ref |= ((both >> sel) & np.uint64(0xFF)) << np.uint64(8 * i)
    np.testing.assert_array_equal(dev.get(out), ref.astype(np.uint32).view(np.int32))


@tiles.jit
def to_unsigned_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(out_ptr + offs * 4, libdevice.float2uint_rn(x).to(tl.int64), mask=m)
    tl.store(out_ptr + offs * 4 + 1, libdevice.float2uint_rz(x).to(tl.int64), mask=m)
    tl.store(out_ptr + offs * 4 + 2, libdevice.float2ull_rd(x).to(tl.int64), mask=m)
    tl.store(out_ptr + offs * 4 + 3, libdevice.float2ull_ru(x).to(tl.int64), mask=m)


def test_float_to_unsigned_conversions(dev, rng):
    n = 100
    x = rng.uniform(0, 1e6, n).astype(np.float32)
    x[:4] = [2.5, 3.5, 7.25, 0.75]
    out = dev.put(np.zeros(4 * n, np.int64))
    to_unsigned_kernel[(1,)](dev.put(x), out, n, BLOCK=128)
    got = dev.get(out).reshape(n, 4)
    xd = x.astype(np.float64)
    np.testing.assert_array_equal(got, np.stack([np.rint(xd), np.trunc(xd), np.floor(xd), np.ceil(xd)], 1))


def test_bessel_edges(dev):
    # Y is -inf at 0 and NaN below; J0 and I0 are even, J1 and I1 odd; I0 at 700 is finite
    # (e^700 / sqrt(1400 pi): no overflow on the way).
    x = np.array([0.0, -1.5, 1.5, -1e-9, 700.0, 12.0, 15.0, -12.0], np.float64)
    out = {}
    for name in ("j0", "j1", "y0", "y1", "cyl_bessel_i0", "cyl_bessel_i1"):
        y = dev.put(np.full(8, 7.0, np.float64))
        unary_kernel[(1,)](dev.put(x), y, 8, FN=name, BLOCK=8)
        out[name] = dev.get(y)
    assert out["y0"][0] == -np.inf and out["y1"][0] == -np.inf
    assert np.isnan(out["y0"][[1, 3, 7]]).all() and np.isnan(out["y1"][[1, 3, 7]]).all()
    assert out["j0"][1] == out["j0"][2] and out["j1"][1] == -out["j1"][2]
    assert out["cyl_bessel_i0"][1] == out["cyl_bessel_i0"][2] and out["cyl_bessel_i1"][1] == -out["cyl_bessel_i1"][2]
    assert np.isfinite(out["cyl_bessel_i0"][4]) and abs(out["cyl_bessel_i0"][4] / 1.5295933476718737e302 - 1) < 1e-9


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_every_function_assembles(ptxas, target):
    from test_compile import assemble

    for dt in ("fp32", "fp64"):
        for name in sorted(UNARY):
            k = tiles.compile(unary_kernel, signature={"x_ptr": f"*{dt}", "y_ptr": f"*{dt}", "n": "i32"},
                              constexprs={"FN": name, "BLOCK": 256}, target=target)
            assemble(ptxas, k.asm["ptx"], target)
        for name in sorted(BINARY):
            k = tiles.compile(binary_kernel, signature={"x_ptr": f"*{dt}", "z_ptr": f"*{dt}", "y_ptr": f"*{dt}",
                                                        "n": "i32"}, constexprs={"FN": name, "BLOCK": 256},
                              target=target)
            assemble(ptxas, k.asm["ptx"], target)
    k = tiles.compile(bits_kernel, signature={"i_ptr": "*i32", "j_ptr": "*i32", "x_ptr": "*fp32", "y_ptr": "*fp32",
                                              "out_ptr": "*i32", "fout_ptr": "*fp32", "n": "i32"},
                      constexprs={"BLOCK": 64}, target=target)
    assemble(ptxas, k.asm["ptx"], target)
    k = tiles.compile(byte_perm_kernel, signature={"x_ptr": "*i32", "y_ptr": "*i32", "s_ptr": "*i32",
                                                   "out_ptr": "*i32", "n": "i32"}, constexprs={"BLOCK": 64},
                      target=target)
    assemble(ptxas, k.asm["ptx"], target)
    k = tiles.compile(to_unsigned_kernel, signature={"x_ptr": "*fp32", "out_ptr": "*i64", "n": "i32"},
                      constexprs={"BLOCK": 64}, target=target)
    assemble(ptxas, k.asm["ptx"], target)


def test_module_paths():
    import tiles.language.extra.cuda.libdevice as a

    assert a is libdevice and tl.extra.cuda.libdevice is libdevice and tl.math.tanh is libdevice.tanh


def triton_cdiv(a, b):
    return (a + b - 1) // b


@tiles.jit
def rounded_division_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(out_ptr + offs, tl.math.div_rn(x, y))
    tl.store(out_ptr + BLOCK + offs, libdevice.div_rn(x, y))
    tl.store(out_ptr + 2 * BLOCK + offs, tl.math.fdiv(x, y, ieee_rounding=True))
    tl.store(out_ptr + 3 * BLOCK + offs, libdevice.rcp_rn(y))
    tl.store(out_ptr + 4 * BLOCK + offs, x / y)  # within 2 ulp


def test_rounded_division_is_exact(dev, rng):
    # div_rn / rcp_rn round to nearest even (IEEE); plain `/` on fp32 may be 2 ulp off (as in
    # Triton). Wide-ranged operands, so that division's rounding is exercised.
    n = 1024
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))).astype(np.float32)
    y = (rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))).astype(np.float32)
    out = dev.put(np.zeros(5 * n, np.float32))
    rounded_division_kernel[(1,)](dev.put(x), dev.put(y), out, BLOCK=n)
    got = dev.get(out).reshape(5, n)
    exact = (x.astype(np.float64) / y.astype(np.float64)).astype(np.float32)
    for row in got[:3]:
        np.testing.assert_array_equal(row, exact)
    np.testing.assert_array_equal(got[3], (1.0 / y.astype(np.float64)).astype(np.float32))
    np.testing.assert_allclose(got[4], exact, rtol=3e-7)
    k = tiles.compile(rounded_division_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32"},
                      constexprs={"BLOCK": 128})
    # (The three equal divisions are one instruction.)
    assert k.asm["ptx"].count("div.rn.f32") == 2 and k.asm["ptx"].count("div.full.f32") == 1


# -- directed rounding: the exact value, rounded down / up / toward zero --------------------------

def _directed_reference(exact, dt, mode):
    """Each exact rational (None: keep numpy's result) rounded in `mode` to `dt`: the nearest
    float's neighbours are searched for the one the direction asks for (a test-side method,
    independent of the interpreter's)."""
    from fractions import Fraction

    finfo = np.finfo(dt)
    out = []
    for q in exact:
        if q is None:
            out.append(np.nan)
            continue
        if q == 0:
            out.append(0.0)
            continue
        with np.errstate(over="ignore"):
            r0 = dt(float(q)) if abs(q) <= Fraction(float(finfo.max)) else dt(np.inf if q > 0 else -np.inf)
        with np.errstate(over="ignore"):
            cands = [r0, np.nextafter(r0, dt(np.inf)), np.nextafter(r0, dt(-np.inf))]
        cands = [c for c in cands if np.isfinite(c)] + [dt(np.inf), dt(-np.inf)]
        val = lambda c: Fraction(float(c)) if np.isfinite(c) else (Fraction(2) ** 40000 * (1 if c > 0 else -1))
        lower = max((c for c in cands if val(c) <= q), key=val)
        upper = min((c for c in cands if val(c) >= q), key=val)
        out.append({"rd": lower, "ru": upper, "rz": lower if q > 0 else upper}[mode])
    return np.array(out, dt)


@tiles.jit
def directed_kernel(x_ptr, y_ptr, z_ptr, out_ptr, n, OP: tl.constexpr, MODE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    z = tl.load(z_ptr + offs, mask=m)
    f = getattr(libdevice, OP + "_" + MODE)
    if OP == "fma":
        r = f(x, y, z)
    elif OP == "sqrt" or OP == "rcp":
        r = f(x)
    else:
        r = f(x, y)
    tl.store(out_ptr + offs, r, mask=m)


_EXACT = {
    "add": lambda x, y, z: x + y, "sub": lambda x, y, z: x - y, "mul": lambda x, y, z: x * y,
    "div": lambda x, y, z: x / y, "fma": lambda x, y, z: x * y + z, "sqrt": None, "rcp": lambda x, y, z: 1 / x,
}


@pytest.mark.parametrize("mode", ["rd", "ru", "rz"])
@pytest.mark.parametrize("op", sorted(_EXACT))
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_directed_rounding_is_exact(dev, rng, dt, op, mode):
    from fractions import Fraction

    n = 300
    spread = 30 if dt == np.float32 else 200
    x, y, z = ((rng.standard_normal(n) * np.exp2(rng.integers(-spread, spread, n))).astype(dt) for _ in range(3))
    x[:10], y[:10] = dt(3), dt(2 ** -30)  # far apart: the sum's rounding direction shows
    x[10:20] = (rng.integers(1, 50, 10) * rng.choice([-1, 1], 10)).astype(dt)
    y[10:20] = dt(4)  # exact results
    if op == "sqrt":
        x = np.abs(x)
        x[20:30] = np.square(rng.integers(1, 1000, 10)).astype(dt)  # exact roots
    out = dev.put(np.full(n, np.nan, dt))
    directed_kernel[(triton_cdiv(n, 128),)](dev.put(x), dev.put(y), dev.put(z), out, n, OP=op, MODE=mode, BLOCK=128)
    got = dev.get(out)
    if op == "sqrt":
        exact = []
        for v in x:
            from math import isqrt

            q = Fraction(float(v))
            k = 4 * 60
            s = isqrt(q.numerator * q.denominator * 4 ** k)  # sqrt(q) within 2^-k * ...: bracket it
            exact.append(Fraction(s, q.denominator * 2 ** k) if s * s == q.numerator * q.denominator * 4 ** k
                         else Fraction(2 * s + 1, 2 * q.denominator * 2 ** k))
    else:
        exact = [_EXACT[op](Fraction(float(a)), Fraction(float(b)), Fraction(float(c))) for a, b, c in zip(x, y, z)]
    np.testing.assert_array_equal(got, _directed_reference(exact, dt, mode))


@tiles.jit
def directed_convert_kernel(i32_ptr, u32_ptr, i64_ptr, u64_ptr, f64_ptr, f32_out, f64_out, n, MODE: tl.constexpr,
                            BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    i32 = tl.load(i32_ptr + offs, mask=m)
    u32 = tl.load(u32_ptr + offs, mask=m)
    i64 = tl.load(i64_ptr + offs, mask=m)
    u64 = tl.load(u64_ptr + offs, mask=m)
    f64 = tl.load(f64_ptr + offs, mask=m)
    if MODE == "rd":
        a, b, c, d = libdevice.int2float_rd(i32), libdevice.uint2float_rd(u32), libdevice.ll2float_rd(i64), \
            libdevice.ull2float_rd(u64)
        e, f, g = libdevice.double2float_rd(f64), libdevice.ll2double_rd(i64), libdevice.ull2double_rd(u64)
    elif MODE == "ru":
        a, b, c, d = libdevice.int2float_ru(i32), libdevice.uint2float_ru(u32), libdevice.ll2float_ru(i64), \
            libdevice.ull2float_ru(u64)
        e, f, g = libdevice.double2float_ru(f64), libdevice.ll2double_ru(i64), libdevice.ull2double_ru(u64)
    else:
        a, b, c, d = libdevice.int2float_rz(i32), libdevice.uint2float_rz(u32), libdevice.ll2float_rz(i64), \
            libdevice.ull2float_rz(u64)
        e, f, g = libdevice.double2float_rz(f64), libdevice.ll2double_rz(i64), libdevice.ull2double_rz(u64)
    tl.store(f32_out + offs * 5, a, mask=m)
    tl.store(f32_out + offs * 5 + 1, b, mask=m)
    tl.store(f32_out + offs * 5 + 2, c, mask=m)
    tl.store(f32_out + offs * 5 + 3, d, mask=m)
    tl.store(f32_out + offs * 5 + 4, e, mask=m)
    tl.store(f64_out + offs * 2, f, mask=m)
    tl.store(f64_out + offs * 2 + 1, g, mask=m)


@pytest.mark.parametrize("mode", ["rd", "ru", "rz"])
def test_directed_conversions_are_exact(dev, rng, mode):
    from fractions import Fraction

    n = 200
    i32 = rng.integers(-2 ** 31, 2 ** 31, n, dtype=np.int64).astype(np.int32)
    u32 = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    i64 = rng.integers(-2 ** 63, 2 ** 63 - 1, n, dtype=np.int64) >> rng.integers(0, 40, n)
    u64 = rng.integers(0, 2 ** 63, n, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, n).astype(np.uint64)
    f64 = rng.standard_normal(n) * np.exp2(rng.integers(-140, 140, n))
    i32[:5] = [1 << 24, (1 << 24) + 1, -(1 << 24) - 1, 2 ** 31 - 1, -2 ** 31]
    f32_out, f64_out = dev.put(np.full(5 * n, np.nan, np.float32)), dev.put(np.full(2 * n, np.nan, np.float64))
    directed_convert_kernel[(1,)](dev.put(i32), dev.put(u32), dev.put(i64), dev.put(u64), dev.put(f64), f32_out,
                                  f64_out, n, MODE=mode, BLOCK=256)
    got32, got64 = dev.get(f32_out).reshape(n, 5), dev.get(f64_out).reshape(n, 2)
    for col, src in enumerate((i32, u32, i64, u64)):
        ref = _directed_reference([Fraction(int(v)) for v in src], np.float32, mode)
        np.testing.assert_array_equal(got32[:, col], ref)
    np.testing.assert_array_equal(got32[:, 4], _directed_reference([Fraction(float(v)) for v in f64], np.float32,
                                                                   mode))
    for col, src in enumerate((i64, u64)):
        ref = _directed_reference([Fraction(int(v)) for v in src], np.float64, mode)
        np.testing.assert_array_equal(got64[:, col], ref)


def test_directed_rounding_brackets_and_signed_zeros(dev):
    # rd and ru bracket a sum that no float holds; an exact zero sum is -0 only rounding down.
    x = np.array([1.0, 1.0, 2.5, -2.5, 0.0], np.float32)
    y = np.array([1e-30, -1e-30, -2.5, 2.5, -0.0], np.float32)
    got = {}
    for mode in ("rd", "ru", "rz"):
        out = dev.put(np.full(5, np.nan, np.float32))
        directed_kernel[(1,)](dev.put(x), dev.put(y), dev.put(y), out, 5, OP="add", MODE=mode, BLOCK=8)
        got[mode] = dev.get(out)
    one = np.float32(1)
    assert got["rd"][0] == one and got["ru"][0] == np.nextafter(one, np.float32(2)) and got["rz"][0] == one
    assert got["rd"][1] == np.nextafter(one, np.float32(0)) and got["ru"][1] == one
    assert [np.signbit(v) for v in got["rd"][2:]] == [True, True, True]
    assert [np.signbit(v) for v in got["ru"][2:]] == [False, False, False]


@tiles.jit
def approx_kernel(x_ptr, d_ptr, out_ptr, dout_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, libdevice.fast_tanhf(tl.load(x_ptr + offs, mask=m)), mask=m)
    tl.store(dout_ptr + offs, libdevice.rcp64h(tl.load(d_ptr + offs, mask=m)), mask=m)


def test_hardware_approximations(dev, rng):
    n = 500
    x = rng.uniform(-6, 6, n).astype(np.float32)
    d = rng.standard_normal(n) * np.exp2(rng.integers(-100, 100, n))
    out, dout = dev.put(np.zeros(n, np.float32)), dev.put(np.zeros(n, np.float64))
    approx_kernel[(1,)](dev.put(x), dev.put(d), out, dout, n, BLOCK=512)
    np.testing.assert_allclose(dev.get(out), np.tanh(x.astype(np.float64)), rtol=2e-3, atol=1e-6)
    np.testing.assert_allclose(dev.get(dout), 1 / d, rtol=1e-6)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_directed_rounding_assembles(ptxas, target):
    from test_compile import assemble

    for dt in ("fp32", "fp64"):
        for op in sorted(_EXACT):
            k = tiles.compile(directed_kernel, signature={"x_ptr": f"*{dt}", "y_ptr": f"*{dt}", "z_ptr": f"*{dt}",
                                                          "out_ptr": f"*{dt}", "n": "i32"},
                              constexprs={"OP": op, "MODE": "ru", "BLOCK": 128}, target=target)
            ptx = k.asm["ptx"]
            inst = "rcp.rp" if op == "rcp" else f"{op}.rp"
            assert f"{inst}.{dt.replace('fp', 'f')}" in ptx
            assemble(ptxas, ptx, target)
    k = tiles.compile(directed_convert_kernel, signature={"i32_ptr": "*i32", "u32_ptr": "*u32", "i64_ptr": "*i64",
                                                          "u64_ptr": "*u64", "f64_ptr": "*fp64", "f32_out": "*fp32",
                                                          "f64_out": "*fp64", "n": "i32"},
                      constexprs={"MODE": "rz", "BLOCK": 256}, target=target)
    for inst in ("cvt.rz.f32.s32", "cvt.rz.f32.u32", "cvt.rz.f32.s64", "cvt.rz.f32.u64", "cvt.rz.f32.f64",
                 "cvt.rz.f64.s64", "cvt.rz.f64.u64"):
        assert inst in k.asm["ptx"]
    assemble(ptxas, k.asm["ptx"], target)
    k = tiles.compile(approx_kernel, signature={"x_ptr": "*fp32", "d_ptr": "*fp64", "out_ptr": "*fp32",
                                                "dout_ptr": "*fp64", "n": "i32"}, constexprs={"BLOCK": 512},
                      target=target)
    assert "tanh.approx.f32" in k.asm["ptx"] and "rcp.approx.ftz.f64" in k.asm["ptx"]
    assemble(ptxas, k.asm["ptx"], target)


# -- Bessel functions of integer order n ----------------------------------------------------------

@tiles.jit
def bessel_n_kernel(x_ptr, n_ptr, j_ptr, y_ptr, count, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < count
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    n = tl.load(n_ptr + offs, mask=m, other=0)
    tl.store(j_ptr + offs, libdevice.jn(n, x), mask=m)
    tl.store(y_ptr + offs, libdevice.yn(n, x), mask=m)
    tl.store(j_ptr + BLOCK + offs, libdevice.jn(3, x), mask=m)  # a number for n


def _j_series(n, x):
    """J_n(x) by its power series in exact rationals (float64 sums lose ~1e-13 to cancellation
    near x = 10), rounded once."""
    import math
    from fractions import Fraction

    h = Fraction(x) / 2
    return float(sum(Fraction((-1) ** k, math.factorial(k) * math.factorial(k + n)) * h ** (2 * k + n)
                     for k in range(90)))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_integer_order_bessel(dev, rng, dt):
    # jn and yn against Bessel's integrals (and jn against its series where it is tiny: the
    # downward recurrence's range), negative orders and arguments by their symmetries.
    count = 300
    x = rng.uniform(-35, 35, count).astype(dt)
    n = rng.integers(-12, 13, count).astype(np.int32)
    x[:12] = np.array([0.1, 0.5, 1.0, 3.0, 1e-3, 2.0, 5.0, 9.5, 0.0, 0.0, -0.7, 1e-6], dt)
    n[:12] = [12, 8, 30, 20, 5, 2, 4, 10, 0, 3, -7, 3]
    jo, yo = dev.put(np.full(2 * 512, np.nan, dt)), dev.put(np.full(512, np.nan, dt))
    bessel_n_kernel[(1,)](dev.put(x), dev.put(n), jo, yo, count, BLOCK=512)
    got_j, got_y = dev.get(jo)[:count], dev.get(yo)[:count]
    got_j3 = dev.get(jo)[512:512 + count]
    xd = x.astype(np.float64)
    rtol = 2e-6 if dt == np.float32 else 1e-10
    for i in range(count):
        nn, xx = int(n[i]), float(xd[i])
        sign = -1.0 if (abs(nn) % 2 and (xx < 0) != (nn < 0)) else 1.0
        # Where |x| > n the result is good to an absolute 1e-13 (j0 and j1 near their zeros), 3e-12
        # for 8 <= |x| < 12, where the power series of j0, j1, y0 and y1 cancel (terms up to ~4e3
        # summing to ~0.1) and the GPU's fused multiply-adds round otherwise than numpy: J_0 near
        # its zero at 11.79 was seen 6e-13 off, and a sweep of 40,000 points an order on an H200
        # found yn up to 1.6e-12 off there (Y_1 near its zero at 11.75), under 5e-13 elsewhere;
        # where |x| <= n (the downward recurrence, values down to 1e-42) to a relative rtol.
        band = 8 <= abs(xx) < 12
        atol = (3e-12 if band else 1e-13) if abs(xx) > abs(nn) else float(np.finfo(dt).smallest_subnormal)
        if abs(xx) < 12:
            ref = sign * _j_series(abs(nn), abs(xx))
            np.testing.assert_allclose(got_j[i], ref, rtol=rtol, atol=atol, err_msg=f"jn({nn}, {xx})")
        else:
            ref = sign * _bessel_j(abs(nn))(np.array([abs(xx)]))[0]
            np.testing.assert_allclose(got_j[i], ref, rtol=rtol, atol=max(atol, rtol * 1e-2),
                                       err_msg=f"jn({nn}, {xx})")
        ref3 = (-1.0 if xx < 0 else 1.0) * (_j_series(3, abs(xx)) if abs(xx) < 12 else
                                           _bessel_j(3)(np.array([abs(xx)]))[0])
        np.testing.assert_allclose(got_j3[i], ref3, rtol=rtol, atol=3e-12 if band else max(1e-13, rtol * 1e-2),
                                   err_msg=f"jn(3, {xx})")
        if xx > 0.05:
            yref = (-1.0 if nn < 0 and abs(nn) % 2 else 1.0) * _bessel_y(abs(nn))(np.array([xx]))[0]
            with np.errstate(over="ignore"):
                yref = dt(yref)  # Y_30(1) is past fp32's range: -inf there
            y_atol = 3e-12 if dt == np.float64 and band else rtol * 1e-2
            np.testing.assert_allclose(got_y[i], yref, rtol=rtol, atol=y_atol, err_msg=f"yn({nn}, {xx})")
        elif xx < 0:
            assert np.isnan(got_y[i])
        elif xx == 0:
            assert got_y[i] == -np.inf


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_integer_order_bessel_assembles(ptxas, target):
    from test_compile import assemble

    for dt in ("fp32", "fp64"):
        k = tiles.compile(bessel_n_kernel, signature={"x_ptr": f"*{dt}", "n_ptr": "*i32", "j_ptr": f"*{dt}",
                                                      "y_ptr": f"*{dt}", "count": "i32"},
                          constexprs={"BLOCK": 512}, target=target)
        assemble(ptxas, k.asm["ptx"], target)


@tiles.jit
def convert_wrong_type_kernel(x_ptr, out_ptr):
    tl.store(out_ptr, libdevice.int2float_rd(tl.load(x_ptr)))


def test_directed_conversion_takes_its_own_source_type():
    # int2float_* takes int32: an int64 tile is an error (not a silent truncation); a number is fine.
    with pytest.raises(tiles.CompilationError, match="int2float_rd takes int32, got int64"):
        tiles.compile(convert_wrong_type_kernel, signature={"x_ptr": "*i64", "out_ptr": "*fp32"})
    tiles.compile(convert_wrong_type_kernel, signature={"x_ptr": "*i32", "out_ptr": "*fp32"})


def test_directed_products_below_the_subnormals(dev):
    # fp64 products too small for any subnormal round to 0 or to the smallest subnormal, by
    # direction and sign (the interpreter once gave 0 for both).
    x = np.array([1e-200, 1e-200, 1e-300, -1e-300], np.float64)
    y = np.array([-1e-200, 1e-200, 1e-300, 1e-300], np.float64)
    tiny = np.finfo(np.float64).smallest_subnormal
    want = {"rd": [-tiny, 0.0, 0.0, -tiny], "ru": [-0.0, tiny, tiny, -0.0], "rz": [-0.0, 0.0, 0.0, -0.0]}
    for mode, w in want.items():
        out = dev.put(np.full(4, np.nan))
        directed_kernel[(1,)](dev.put(x), dev.put(y), dev.put(y), out, 4, OP="mul", MODE=mode, BLOCK=4)
        got = dev.get(out)
        np.testing.assert_array_equal(got, np.array(w))
        assert list(np.signbit(got)) == list(np.signbit(np.array(w))), mode


# Triton's way of declaring a library function (its own libdevice module is written so, and
# some codebases add functions the same way): `@core.extern` + `core.extern_elementwise`.
@tl.core.extern
def declared_exp(arg0, _semantic=None):
    return tl.core.extern_elementwise("", "", [arg0], {(tl.core.dtype("fp32"),): ("__nv_expf", tl.core.dtype("fp32")),
                                                       (tl.core.dtype("fp64"),): ("__nv_exp", tl.core.dtype("fp64"))},
                                      is_pure=True, _semantic=_semantic)


@tl.core.extern
def declared_pow(a, b, _builder=None):  # the older keyword
    return tl.core.extern_elementwise("", "", [a, b], {(tl.float32, tl.float32): ("__nv_powf", tl.float32)},
                                      is_pure=True, _builder=_builder)


@tl.core.extern
def declared_unknown(a, _semantic=None):
    return tl.core.extern_elementwise("mylib", "/opt/mylib.bc", [a], {(tl.float32,): ("my_fn", tl.float32)},
                                      is_pure=True, _semantic=_semantic)


@tiles.jit
def declared_externs_kernel(x_ptr, e_ptr, p_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    tl.store(e_ptr + offs, declared_exp(x), mask=m)
    tl.store(p_ptr + offs, declared_pow(x, 2.5), mask=m)


@tiles.jit
def declared_unknown_kernel(x_ptr):
    tl.store(x_ptr, declared_unknown(tl.load(x_ptr)))


def test_extern_elementwise_maps_libdevice_symbols(dev, rng):
    n = 45
    x = rng.uniform(0.1, 4, n).astype(np.float32)
    e, p = np.zeros(n, np.float32), np.zeros(n, np.float32)
    ed, pd = dev.put(e), dev.put(p)
    declared_externs_kernel[(1,)](dev.put(x), ed, pd, n, BLOCK=64)
    np.testing.assert_allclose(dev.get(ed), np.exp(x.astype(np.float64)), rtol=4e-7)
    np.testing.assert_allclose(dev.get(pd), x.astype(np.float64) ** 2.5, rtol=4e-6)


def test_extern_elementwise_compiles_and_names_what_it_cannot_link(ptxas):
    from test_compile import assemble

    k = tiles.compile(declared_externs_kernel, signature={"x_ptr": "*fp32", "e_ptr": "*fp32", "p_ptr": "*fp32",
                                                          "n": "i32"}, constexprs={"BLOCK": 64}, target="sm_90a")
    assemble(ptxas, k.asm["ptx"], "sm_90a")
    with pytest.raises(tiles.CompilationError, match="'my_fn' of /opt/mylib.bc cannot be linked"):
        tiles.compile(declared_unknown_kernel, signature={"x_ptr": "*fp32"}, target="sm_90a")
