"""Triton's `libdevice` functions (`triton.language.extra.libdevice`, `tl.extra.cuda.libdevice`).

tiles carries no CUDA toolkit, so there is no libdevice bitcode to link: each function is
written here with tiles' own language ops, so it compiles to plain PTX and runs in the
interpreter alike. fp32 inputs are computed in fp32 (polynomials sized for it, a few ulp),
fp64 inputs in fp64 (longer polynomials), fp16/bf16 through fp32. Functions that only convert
or test bits (`isnan`, `signbit`, `float_as_int`, ...) follow libdevice's result types.

`extern_libs=` launch options are accepted and ignored.
"""

from __future__ import annotations

import math as _m

from . import core, semantic
from .core import tensor

__all__ = []


def _export(fn):
    fn._tiles_builtin = True
    __all__.append(fn.__name__)
    return fn


def _float(x):
    """(x as fp32/fp64, the dtype to return)."""
    x = semantic.to_tensor(x)
    dt = x.dtype
    if dt.is_floating():
        if dt.primitive_bitwidth < 32:
            return semantic.cast(x, core.float32), dt
        return x, dt
    raise semantic.TilesTypeError(f"libdevice functions take floating-point tensors, got {dt}")


def _float_pair(x, y):
    """(x, y) as one fp32/fp64 type, and the dtype to return (x's)."""
    x, dt = _float(x)
    y, _ = _float(y)
    x, y = semantic.binary_operands(x, y)
    return x, y, dt


def _back(y: tensor, dt) -> tensor:
    return y if y.dtype == dt else semantic.cast(y, dt)


def _f64(x: tensor) -> bool:
    return x.dtype == core.float64


def _where(c, a, b):
    return semantic.where(c, a, b)


def _abs(x):
    return semantic.abs_(x)


def _poly(x, coeffs):
    """Horner in fma, coeffs from the highest degree down: one rounding a step, and the same
    result whether or not the kernel lets multiply-adds fuse."""
    r = semantic.to_tensor(coeffs[0], x.dtype)
    for c in coeffs[1:]:
        r = semantic.fma(r, x, semantic.to_tensor(c, x.dtype))
    return r


def _copysign(mag, sign_of):
    return _where(_signbit_bool(sign_of), -_abs(mag), _abs(mag))


def _signbit_bool(x):
    ity = core.int64 if _f64(x) else core.int32
    return semantic.bitcast(x, ity) < 0


def _signed_zero(x, y):
    """y, but x itself where x is ±0 (for odd functions: f(-0) = -0)."""
    return _where(x == 0.0, x, y)


def _trunc(x):
    return _where(x < 0, semantic.unary_math("ceil", x), semantic.unary_math("floor", x))


# -- exponentials and logarithms ------------------------------------------------------------------

# fp32 exponentials to libdevice's accuracy (a couple of ulp). `tl.exp` is `ex2.approx` of
# the rounded `x·log2 e`, as Triton's is; its error grows with |x| (60 ulp near 88), where
# libdevice's `exp` (and these) stay within ~2.5 ulp. Polynomials: minimax fits to 40-digit
# references, rounded to fp32 (stop 27).
_LN2_HI32, _LN2_LO32 = 0.693145751953125, 1.428606765330187e-06
# (expm1(r) - r) / r^2 on |r| <= ln2/2, and (tanh(x) - x) / x^3 in x^2 on |x| <= 0.625.
_EXPM1_E32 = [0.00019857814186252654, 0.0013933687005192041, 0.008333360776305199, 0.041666463017463684,
              0.1666666716337204, 0.5]
_TANH_T32 = [0.0022928237449377775, -0.008344022557139397, 0.021768944337964058, -0.05395926162600517,
             0.13333304226398468, -0.3333333432674408]


def _split(c):
    """c as an fp32 pair hi + lo."""
    import numpy as np

    hi = float(np.float32(c))
    return hi, float(np.float32(c - hi))


def _two_prod(a, b):
    """(a·b rounded, its rounding error); a Python float b takes a's type exactly (fma alone
    would make it fp32). The product is `mul.rn`: with fp fusion on, a plain product would fuse
    into the add that the error-free sums after it (`s = p + x; s - p`) read, leaving their
    error term wrong (fp64 pow was off by 870 ulp)."""
    a, b = semantic.binary_operands(a, b)
    p = semantic.rounded("mul", "rn", [a, b])
    return p, semantic.fma(a, b, -p)


def _fast_two_sum(a, b):
    """(a + b rounded, its rounding error) for |a| >= |b|."""
    s = a + b
    return s, b - (s - a)


def _exp_scaled(x, c, lo64=0.0):
    """2**(x·c) with x·c's rounding error put back: 2**t·(1 + err·ln2). `lo64` is the part of
    c below fp64 (for fp64 x)."""
    hi, lo = (c, lo64) if _f64(x) else _split(c)
    hi, lo = semantic.to_tensor(hi, x.dtype), semantic.to_tensor(lo, x.dtype)
    t, err = _two_prod(x, hi)
    err = semantic.fma(x, lo, err)
    return _times_one_plus(semantic.unary_math("exp2", t), err * _m.log(2.0))


def _times_one_plus(e, corr):
    """e·(1 + corr) rounded once: an exponential with its argument's rounding error put back.
    inf, 0 and NaN stay as they are (the correction would make inf·0 a NaN)."""
    edge = (e == float("inf")) | (e == 0.0) | (e != e)
    return _where(edge, e, semantic.fma(e, corr, e))


def _exp(x):
    if _f64(x):
        return semantic.unary_math("exp", x)
    return _exp_scaled(x, 1.0 / _m.log(2.0))


def _pow2i(n):
    """2**n for an integer-valued fp32 n in [-126, 127], exactly."""
    ni = semantic.cast(n, core.int32)
    return semantic.bitcast(semantic.shl(semantic.add(ni, 127), 23), core.float32)


def _expm1(x):
    if _f64(x):
        # x (1 + x/2! + x^2/3! + ...): the series, for |x| < 1/2.
        coeffs = [1.0 / _m.factorial(k + 1) for k in range(16, -1, -1)]
        small = x * _poly(x, coeffs)
        large = semantic.unary_math("exp", x) - 1.0
        return _where(_abs(x) < 0.5, small, large)
    # x = n·ln2 + r, |r| <= ln2/2: expm1(x) = 2^n·expm1(r) + (2^n - 1).
    xc = semantic.maximum(semantic.minimum(x, 88.8), -30.0)
    n = semantic.unary_math("floor", xc * (1.0 / _m.log(2.0)) + 0.5)
    r = semantic.fma(-n, _LN2_HI32, xc)
    r = semantic.fma(-n, _LN2_LO32, r)
    p = semantic.fma(r * r, _poly(r, _EXPM1_E32), r)
    n_in = semantic.minimum(n, 127.0)
    s = _pow2i(n_in)
    y = semantic.fma(s, p, s - 1.0)
    # n = 128 (x just below log(FLT_MAX)): 2^127·(2·(expm1(r) + 1)).
    y = _where(n > 127.0, 2.0 * (s * p + s), y)
    y = _where(x > 88.8, float("inf"), y)
    y = _where(x < -30.0, -1.0, y)
    return _where(x != x, x, y)


def _log1p(x):
    # log(u) with u = 1 + x rounded, plus the first-order correction for that rounding.
    u = x + 1.0
    c = semantic.div_rn(x - (u - 1.0), u)
    c = _where((u == 0.0) | (u == float("inf")), 0.0, c)
    return semantic.unary_math("log", u) + c


@_export
def expm1(x, _semantic=None):
    """e**x - 1, accurate near 0."""
    x, dt = _float(x)
    return _back(_signed_zero(x, _expm1(x)), dt)


@_export
def log1p(x, _semantic=None):
    """log(1 + x), accurate near 0."""
    x, dt = _float(x)
    return _back(_signed_zero(x, _log1p(x)), dt)


@_export
def exp10(x, _semantic=None):
    """10**x."""
    x, dt = _float(x)
    return _back(_exp_scaled(x, 3.321928094887362, 1.661617516973592e-16), dt)


@_export
def log10(x, _semantic=None):
    """Base-10 logarithm."""
    x, dt = _float(x)
    return _back(semantic.unary_math("log2", x) * _m.log10(2.0), dt)


def _log_dd(a):
    """log(a) for fp64 a > 0 as hi + lo, good to about 2^-66 relative (what y·log(a) needs when
    |y·log(a)| is near 709): a = m·2^e with m in [√½, √2), f = m - 1 exact, s = f/(2+f) as
    hi + lo, log m = 2s + (2/3)s^3 (double-double) + 2s·z²·Q(z) (z = s², a tail below 2^-13),
    and e·ln2 with ln2 in two parts."""
    bits, e = _normalized(a)
    e = semantic.cast(e, core.float64)
    m = semantic.bitcast(semantic.or_(semantic.and_(bits, (1 << 52) - 1), 1023 << 52), core.float64)
    big = m > 1.4142135623730951
    m = _where(big, m * 0.5, m)
    e = _where(big, e + 1.0, e)
    f = m - 1.0
    d_hi, d_lo = _fast_two_sum(2.0, f)
    s_hi = semantic.div_rn(f, d_hi)
    s_lo = semantic.div_rn(semantic.fma(-s_hi, d_hi, f) - s_hi * d_lo, d_hi)
    z_hi, z_lo = _two_prod(s_hi, s_hi)
    c3_hi, c3_lo = _two_prod(s_hi, z_hi)  # s^3 = s_hi^3 + 3 s_hi^2 s_lo + ...
    c3_lo = c3_lo + s_hi * z_lo + 3.0 * z_hi * s_lo
    t1_hi, t1_lo = _two_prod(c3_hi, 0.6666666666666666)
    t1_lo = t1_lo + c3_lo * 0.6666666666666666 + c3_hi * 3.700743415417188e-17
    q = _poly(z_hi, [2.0 / (2 * k + 1) for k in range(12, 1, -1)])  # 2/5 + 2z/7 + ...
    t2 = s_hi * (z_hi * z_hi * q)
    hi, lo = _fast_two_sum(2.0 * s_hi, t1_hi)
    lo = lo + (2.0 * s_lo + t1_lo + t2)
    hi, lo = _fast_two_sum(hi, lo)
    # + e·ln2: e·LN2_HI exact in two parts, then a full two-sum with log m.
    p_hi, p_lo = _two_prod(e, 0.6931471805599453)
    p_lo = p_lo + e * 2.3190468138462996e-17
    s = p_hi + hi
    v = s - p_hi
    err = (p_hi - (s - v)) + (hi - v)
    return _fast_two_sum(s, err + p_lo + lo)


def _pow64(x, y):
    """|x|**y for fp64: exp(t_hi)·(1 + t_lo) with t = y·log|x| in double-double."""
    a = _abs(x)
    l_hi, l_lo = _log_dd(_where((a == 0.0) | (a == float("inf")) | (a != a), 1.0, a))
    l_hi = _where(a == 0.0, float("-inf"), _where(a == float("inf"), float("inf"), _where(a != a, a, l_hi)))
    t_hi, t_lo = _two_prod(y, l_hi)
    return _times_one_plus(semantic.unary_math("exp", t_hi), t_lo + y * l_lo)


def _pow(x, y):
    # |x|**y: for fp32 through 2**(y log2|x|) in fp64 (whose error stays far below fp32's
    # ulp); for fp64 with y·log|x| in double-double (`_pow64`); the sign for negative bases
    # with odd integer exponents; NaN for negative bases with fractional exponents; x**0 = 1
    # and 1**y = 1, as C's pow.
    if _f64(x):
        r = _pow64(x, y)
    else:
        wide = semantic.cast(x, core.float64)
        yw = semantic.cast(y, core.float64)
        r = semantic.unary_math("exp2", yw * semantic.unary_math("log2", _abs(wide)))
        r = semantic.cast(r, x.dtype)
    is_int = semantic.unary_math("floor", y) == y
    half = y * 0.5
    odd = is_int & (semantic.unary_math("floor", half) != half)
    # The sign goes with the sign bit (pow(-0, 3) = -0); NaN only for finite negative bases
    # (pow(-inf, 0.5) = inf).
    r = _where(_signbit_bool(x) & odd, -r, r)
    r = _where((x < 0) & (x > float("-inf")) & ~is_int, float("nan"), r)
    return _where((y == 0) | (x == 1) | ((x == -1) & (_abs(y) == float("inf"))), 1.0, r)


@_export
def pow(x, y, _semantic=None):
    """x**y (C's pow)."""
    x, dt = _float(x)
    y = semantic.to_tensor(y)
    if y.dtype.is_int():
        y = semantic.cast(y, x.dtype)
    y, _ = _float(y)
    x, y = semantic.binary_operands(x, y)
    return _back(_pow(x, y), dt)


@_export
def powf(x, y, _semantic=None):
    """x**y (fp32)."""
    return pow(x, y)


@_export
def powi(x, n, _semantic=None):
    """x**n for an integer n."""
    return pow(x, n)


@_export
def cbrt(x, _semantic=None):
    """Cube root."""
    x, dt = _float(x)
    a = _abs(x)
    r = semantic.unary_math("exp2", semantic.unary_math("log2", a) * (1.0 / 3.0))
    r = r - (r * r * r - a) / (3.0 * r * r)
    r = _where((a == 0) | (a == float("inf")), a, r)
    return _back(_copysign(r, x), dt)


@_export
def rcbrt(x, _semantic=None):
    """1 / cbrt(x)."""
    return semantic.truediv(1.0, cbrt(x))


# -- hyperbolic -----------------------------------------------------------------------------------

@_export
def tanh(x, _semantic=None):
    """Hyperbolic tangent."""
    x, dt = _float(x)
    if _f64(x):
        e = _expm1(-2.0 * _abs(x))
        t = -e / (e + 2.0)
        return _back(_copysign(t, x), dt)
    a = _abs(x)
    # 1 - 2/(e^2a + 1): near 1 the small term is what carries the accuracy (GELU's
    # 1 + tanh(z) at z = -8 is exactly that term, so tanh must round correctly there).
    e = _expm1(2.0 * semantic.minimum(a, 10.0))
    big = 1.0 - semantic.div_rn(2.0, e + 2.0)
    small = semantic.fma(x * x * x, _poly(x * x, _TANH_T32), x)
    y = _where(a < 0.625, small, _copysign(big, x))
    return _back(_signed_zero(x, _where(x != x, x, y)), dt)


@_export
def sinh(x, _semantic=None):
    """Hyperbolic sine."""
    x, dt = _float(x)
    a = _abs(x)
    e = _expm1(_where(a > 20.0, 0.0, a))
    s = 0.5 * (e + e / (e + 1.0))
    s = _where(a > 20.0, 0.5 * _exp(a), s)
    return _back(_copysign(s, x), dt)


@_export
def cosh(x, _semantic=None):
    """Hyperbolic cosine."""
    x, dt = _float(x)
    e = _exp(_abs(x))
    return _back(0.5 * e + semantic.div_rn(0.5, e), dt)


@_export
def asinh(x, _semantic=None):
    """Inverse hyperbolic sine."""
    x, dt = _float(x)
    a = _abs(x)
    big = a > 1e18
    safe = _where(big, 1.0, a)
    r = _log1p(safe + semantic.div_rn(safe * safe, semantic.unary_math("sqrt", safe * safe + 1.0) + 1.0))
    r = _where(big, semantic.unary_math("log", a) + _m.log(2.0), r)
    return _back(_copysign(r, x), dt)


@_export
def acosh(x, _semantic=None):
    """Inverse hyperbolic cosine."""
    x, dt = _float(x)
    big = x > 1e18
    t = _where(big, 1.0, x) - 1.0
    r = _log1p(t + semantic.unary_math("sqrt", t * (t + 2.0)))
    r = _where(big, semantic.unary_math("log", x) + _m.log(2.0), r)
    return _back(r, dt)


@_export
def atanh(x, _semantic=None):
    """Inverse hyperbolic tangent of a = |x|, with x's sign: below 1/2 its odd series
    a + a z P(z), z = a^2 <= 1/4 (the tail is under a tenth of the result, and no log's error
    enters); from 1/2 on, log1p(2a / (1 - a)) / 2, where 1 - a is exact."""
    x, dt = _float(x)
    a = _abs(x)
    z = a * a
    n = 24 if _f64(x) else 10  # z <= 1/4: z^(n+1) / (2n + 3) is below half an ulp
    series = a + a * (z * _poly(z, [1.0 / (2 * k + 1) for k in range(n, 0, -1)]))
    wide = 0.5 * _log1p(semantic.div_rn(a + a, 1.0 - a))
    return _back(_copysign(_where(a < 0.5, series, wide), x), dt)


# -- trigonometric --------------------------------------------------------------------------------

def _atan(x):
    n = 15 if _f64(x) else 7
    a = _abs(x)
    inv = a > 1.0
    t = _where(inv, semantic.div_rn(1.0, a), a)
    # tan(pi/12) = 2 - sqrt(3): above it, atan(t) = pi/6 + atan((sqrt(3) t - 1) / (sqrt(3) + t)).
    big = t > 0.2679491924311227
    s3 = _m.sqrt(3.0)
    u = _where(big, semantic.div_rn(t * s3 - 1.0, t + s3), t)
    z = u * u
    p = u * _poly(z, [(-1.0) ** k / (2 * k + 1) for k in range(n, -1, -1)])
    r = _where(big, p + _m.pi / 6, p)
    r = _where(inv, _m.pi / 2 - r, r)
    return _copysign(r, x)


def _atan2(y, x):
    r = _atan(semantic.div_rn(y, x))
    pi = _m.pi
    r = _where(x < 0, _where(_signbit_bool(y), r - pi, r + pi), r)
    on_axis = _where(y > 0, pi / 2, _where(y < 0, -pi / 2, 0.0))
    return _where(x == 0, on_axis, r)


@_export
def atan(x, _semantic=None):
    """Arc tangent."""
    x, dt = _float(x)
    return _back(_atan(x), dt)


@_export
def atan2(y, x, _semantic=None):
    """Arc tangent of y / x, in the quadrant of (x, y)."""
    y, x, dt = _float_pair(y, x)
    return _back(_atan2(y, x), dt)


@_export
def asin(x, _semantic=None):
    """Arc sine."""
    x, dt = _float(x)
    c = semantic.unary_math("sqrt", (1.0 - x) * (1.0 + x))
    return _back(_atan2(x, c), dt)


@_export
def acos(x, _semantic=None):
    """Arc cosine."""
    x, dt = _float(x)
    s = semantic.unary_math("sqrt", (1.0 - x) * (1.0 + x))
    return _back(_atan2(s, x), dt)


@_export
def tan(x, _semantic=None):
    """Tangent."""
    x, dt = _float(x)
    return _back(semantic.div_rn(semantic.unary_math("sin", x), semantic.unary_math("cos", x)), dt)


@_export
def sinpi(x, _semantic=None):
    """sin(pi x)."""
    x, dt = _float(x)
    return _back(semantic.unary_math("sin", x * _m.pi), dt)


@_export
def cospi(x, _semantic=None):
    """cos(pi x)."""
    x, dt = _float(x)
    return _back(semantic.unary_math("cos", x * _m.pi), dt)


# -- rounding and parts ---------------------------------------------------------------------------

@_export
def trunc(x, _semantic=None):
    """Rounds toward zero."""
    x, dt = _float(x)
    return _back(_trunc(x), dt)


def _rint(x):
    big = 2.0 ** (52 if _f64(x) else 23)
    a = _abs(x)
    r = (a + big) - big
    return _where(a < big, _copysign(r, x), x)


@_export
def rint(x, _semantic=None):
    """Rounds to the nearest integer, ties to even."""
    x, dt = _float(x)
    return _back(_rint(x), dt)


@_export
def nearbyint(x, _semantic=None):
    """Rounds to the nearest integer, ties to even."""
    return rint(x)


@_export
def round(x, _semantic=None):
    """Rounds to the nearest integer, ties away from zero."""
    x, dt = _float(x)
    t = _trunc(x)
    r = _where(_abs(x - t) >= 0.5, t + _where(x < 0, -1.0, 1.0), t)
    return _back(r, dt)


@_export
def llrint(x, _semantic=None):
    """rint(x) as int64."""
    return semantic.cast(rint(x), core.int64)


@_export
def lrint(x, _semantic=None):
    """rint(x) as int64."""
    return llrint(x)


@_export
def llround(x, _semantic=None):
    """round(x) as int64."""
    return semantic.cast(round(x), core.int64)


@_export
def fmod(x, y, _semantic=None):
    """x - trunc(x / y) * y, with the sign of x (C's fmod). fp32 goes through fp64, where the
    quotient of two fp32 values is never rounded onto the wrong integer and n·y is exact; fp64
    uses a fused multiply-add (exact while the quotient is below 2**53)."""
    x, y, dt = _float_pair(x, y)
    xw = x if _f64(x) else semantic.cast(x, core.float64)
    yw = y if _f64(y) else semantic.cast(y, core.float64)
    n = _trunc(xw / yw)
    if _f64(x):
        # One rounding of the exact x - n y (representable whenever n is right); a quotient
        # rounded up onto the next integer leaves r of the wrong sign: one |y| back.
        r = semantic.fma(-n, yw, xw)
        ay = _abs(yw)
        r = _where((xw >= 0) & (r < 0), r + ay, _where((xw < 0) & (r > 0), r - ay, r))
    else:
        r = xw - n * yw
    r = _where((_abs(yw) == float("inf")) & (_abs(xw) != float("inf")), xw, r)  # C: fmod(x, +-inf) = x
    r = r if _f64(x) else semantic.cast(r, x.dtype)
    return _back(r, dt)


@_export
def copysign(x, y, _semantic=None):
    """|x| with the sign of y."""
    x, y, dt = _float_pair(x, y)
    return _back(_copysign(x, y), dt)


@_export
def ldexp(x, n, _semantic=None):
    """x * 2**n."""
    x, dt = _float(x)
    n = semantic.cast(semantic.to_tensor(n), x.dtype)
    return _back(x * semantic.unary_math("exp2", n), dt)


@_export
def scalbn(x, n, _semantic=None):
    """x * 2**n."""
    return ldexp(x, n)


@_export
def hypot(x, y, _semantic=None):
    """sqrt(x**2 + y**2)."""
    x, y, dt = _float_pair(x, y)
    return _back(semantic.unary_math("sqrt", x * x + y * y), dt)


@_export
def erfc(x, _semantic=None):
    """1 - erf(x), accurate in the tail (computed in fp64: 1 - erf below 2, a continued
    fraction times an exp(-x*x) kept exact to rounding above)."""
    x, dt = _float(x)
    w = x if _f64(x) else semantic.cast(x, core.float64)
    a = _abs(w)
    direct = 1.0 - semantic.unary_math("erf", a)
    tail = _exp_neg_square(a) * _erfcx_tail(a, 60 if _f64(x) else 24)
    e = _where(a < 2.0, direct, tail)
    r = _where(w < 0, 2.0 - e, e)
    r = _where(w != w, w, r)
    return _back(r if _f64(x) else semantic.cast(r, core.float32), dt)


def _erfcx_tail(a, terms):
    """exp(a*a) * erfc(a) for a >= 2 (fp64): the continued fraction
    1 / (sqrt(pi) (a + (1/2) / (a + 1 / (a + (3/2) / (a + ...))))), evaluated from `terms` down."""
    a = semantic.maximum(a, semantic.full(a.shape, 2.0, a.dtype))  # keeps other lanes finite
    f = a
    for n in range(terms, 0, -1):
        f = a + (n * 0.5) / f
    return 0.5641895835477563 / f  # 1 / sqrt(pi)


def _exp_neg_square(a):
    """exp(-a*a) (fp64) without the rounding error of a*a: a = hi + lo with hi*hi exact."""
    a = semantic.minimum(a, semantic.full(a.shape, 28.0, a.dtype))  # exp(-784) is 0 already
    hi = semantic.unary_math("floor", a * 4096.0) * (1.0 / 4096.0)
    return semantic.unary_math("exp", -(hi * hi)) * semantic.unary_math("exp", -((a - hi) * (a + hi)))


@_export
def erfcx(x, _semantic=None):
    """The scaled complementary error function exp(x*x) * erfc(x) (fp64 inside)."""
    x, dt = _float(x)
    w = x if _f64(x) else semantic.cast(x, core.float64)
    direct = semantic.unary_math("exp", w * w) * (1.0 - semantic.unary_math("erf", w))
    r = _where(w >= 2.0, _erfcx_tail(w, 60 if _f64(x) else 24), direct)
    r = _where(w != w, w, r)
    return _back(r if _f64(x) else semantic.cast(r, core.float32), dt)


@_export
def saturatef(x, _semantic=None):
    """Clamps to [0, 1] (in `x`'s own type)."""
    x = semantic.to_tensor(x)
    return semantic.clamp(x, semantic.full((), 0.0, x.dtype), semantic.full((), 1.0, x.dtype))


# -- classification and bits ----------------------------------------------------------------------

def _int_result(b):
    return semantic.cast(b, core.int32)


@_export
def isnan(x, _semantic=None):
    """1 where x is NaN (int32, as libdevice)."""
    x, _ = _float(x)
    return _int_result(x != x)


@_export
def isinf(x, _semantic=None):
    """1 where x is +-inf (int32)."""
    x, _ = _float(x)
    return _int_result(_abs(x) == float("inf"))


@_export
def isfinited(x, _semantic=None):
    """1 where x is finite (int32)."""
    x, _ = _float(x)
    return _int_result(_abs(x) < float("inf"))


@_export
def finitef(x, _semantic=None):
    """1 where x is finite (int32)."""
    return isfinited(x)


@_export
def signbit(x, _semantic=None):
    """1 where the sign bit is set (int32)."""
    x, _ = _float(x)
    return _int_result(_signbit_bool(x))


@_export
def float_as_int(x, _semantic=None):
    """The bits of an fp32 as int32."""
    return semantic.bitcast(x, core.int32)


@_export
def int_as_float(x, _semantic=None):
    """The bits of an int32 as fp32."""
    return semantic.bitcast(x, core.float32)


@_export
def double_as_longlong(x, _semantic=None):
    """The bits of an fp64 as int64."""
    return semantic.bitcast(x, core.int64)


@_export
def longlong_as_double(x, _semantic=None):
    """The bits of an int64 as fp64."""
    return semantic.bitcast(x, core.float64)


@_export
def popc(x, _semantic=None):
    """Number of set bits (int32)."""
    x = semantic.to_tensor(x)
    bits = x.dtype.primitive_bitwidth
    u = semantic.bitcast(x, core.uint64 if bits == 64 else core.uint32)
    m1, m2, m4 = (0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F)
    if bits != 64:
        m1, m2, m4 = m1 & 0xFFFFFFFF, m2 & 0xFFFFFFFF, m4 & 0xFFFFFFFF
    u = u - ((u >> 1) & m1)
    u = (u & m2) + ((u >> 2) & m2)
    u = (u + (u >> 4)) & m4
    total = u
    for shift in (8, 16, 32)[: 3 if bits == 64 else 2]:
        total = total + (total >> shift)
    return semantic.cast(total & 0x7F, core.int32)


@_export
def popcll(x, _semantic=None):
    """Number of set bits of an int64 (int32)."""
    return popc(x)


# -- the same as tiles' own ops -------------------------------------------------------------------

def _same(name, op, doc):
    def f(x, _semantic=None):
        x, dt = _float(x)
        return _back(semantic.unary_math(op, x), dt)

    f.__name__ = name
    f.__doc__ = doc
    return _export(f)


@_export
def exp(x, _semantic=None):
    """e**x, to a couple of ulp (`tl.exp` is the faster hardware approximation)."""
    x, dt = _float(x)
    return _back(_exp(x), dt)



exp2 = _same("exp2", "exp2", "2**x.")
log = _same("log", "log", "Natural logarithm.")
log2 = _same("log2", "log2", "Base-2 logarithm.")
sqrt = _same("sqrt", "sqrt", "Square root.")
rsqrt = _same("rsqrt", "rsqrt", "1 / sqrt(x).")
sin = _same("sin", "sin", "Sine.")
cos = _same("cos", "cos", "Cosine.")
floor = _same("floor", "floor", "Rounds down.")
ceil = _same("ceil", "ceil", "Rounds up.")
erf = _same("erf", "erf", "The error function.")
# libdevice's other names for the same functions (tiles has one precision for each, except
# `fast_expf`, which is `tl.exp`'s approximation, as in libdevice).
fast_expf = _same("fast_expf", "exp", "e**x, the hardware approximation.")
fast_exp10f = exp10
fast_logf = log
fast_log2f = log2
fast_log10f = log10
fast_sinf = sin
fast_cosf = cos
fast_tanf = tan
fast_powf = pow
sqrt_rn = sqrt


@_export
def fabs(x, _semantic=None):
    """Absolute value."""
    return semantic.abs_(x)


abs = fabs


@_export
def fmax(x, y, _semantic=None):
    """The larger of x and y."""
    return semantic.maximum(x, y)


@_export
def fmin(x, y, _semantic=None):
    """The smaller of x and y."""
    return semantic.minimum(x, y)


@_export
def fma(x, y, z, _semantic=None):
    """x * y + z rounded once."""
    return semantic.fma(x, y, z)


@_export
def rcp_rn(x, _semantic=None):
    """1 / x, rounded to nearest."""
    return semantic.div_rn(1.0, x)


@_export
def fast_dividef(x, y, _semantic=None):
    """x / y."""
    return semantic.truediv(x, y)


@_export
def div_rn(x, y, _semantic=None):
    """x / y, rounded to nearest."""
    return semantic.div_rn(x, y)


@_export
def umulhi(x, y, _semantic=None):
    """The high 32 bits of x * y (unsigned)."""
    from . import language

    return language.umulhi(x, y)


@_export
def mulhi(x, y, _semantic=None):
    """The high 32 bits of x * y (signed)."""
    a = semantic.cast(semantic.to_tensor(x), core.int64)
    b = semantic.cast(semantic.to_tensor(y), core.int64)
    return semantic.cast((a * b) >> 32, core.int32)


@_export
def mul24(x, y, _semantic=None):
    """x * y on the low 24 bits (here: the full product's low 32 bits)."""
    return semantic.mul(x, y)



# -- round-to-nearest arithmetic: one PTX `.rn` instruction each, never fused into an fma ---------

def _binary_float(name, op, doc):
    def f(x, y, _semantic=None):
        x, y, dt = _float_pair(x, y)
        return _back(semantic.rounded(op, "rn", [x, y]), dt)

    f.__name__ = name
    f.__doc__ = doc
    return _export(f)


add_rn = _binary_float("add_rn", "add", "x + y, rounded to nearest, never fused with a multiply.")
sub_rn = _binary_float("sub_rn", "sub", "x - y, rounded to nearest, never fused with a multiply.")
mul_rn = _binary_float("mul_rn", "mul", "x * y, rounded to nearest, never fused with an add.")
fma_rn = fma


@_export
def fdim(x, y, _semantic=None):
    """x - y where x > y, else +0 (NaN if either is NaN)."""
    x, y, dt = _float_pair(x, y)
    diff = _where(x > y, x - y, semantic.full(x.shape, 0, x.dtype))
    return _back(_where((x != x) | (y != y), x + y, diff), dt)


@_export
def nextafter(x, y, _semantic=None):
    """The representable number after x in the direction of y."""
    x, y, dt = _float_pair(x, y)
    ity = core.int64 if _f64(x) else core.int32
    bits = semantic.bitcast(x, ity)
    one = semantic.full(bits.shape, 1, ity)
    away = semantic.bitcast(_where((x < y) == (x > 0.0), bits + one, bits - one), x.dtype)
    tiny = _copysign(semantic.bitcast(one, x.dtype), y)
    r = _where(x == 0.0, tiny, away)
    r = _where(x == y, y, r)
    return _back(_where((x != x) | (y != y), x + y, r), dt)


def _normalized(x):
    """(the bits of |x| scaled to a normal number, ilogb(x) as int32), right for finite nonzero x
    (subnormals included)."""
    f64 = _f64(x)
    ity, mbits, bias = (core.int64, 52, 1023) if f64 else (core.int32, 23, 127)
    a = _abs(x)
    sub = a < (2.0 ** -1022 if f64 else 2.0 ** -126)
    bits = semantic.bitcast(_where(sub, a * (2.0 ** 64), a), ity)
    e = ((bits >> mbits) & (2047 if f64 else 255)) - bias
    e = _where(sub, e - 64, e)
    return bits, semantic.cast(e, core.int32)


def _exponent(x):
    """ilogb(x) as int32, right for finite nonzero x (subnormals included)."""
    return _normalized(x)[1]


@_export
def ilogb(x, _semantic=None):
    """The unbiased exponent of x (int32); INT_MIN for 0 and NaN, INT_MAX for infinities."""
    x, _ = _float(x)
    e = _exponent(x)
    lo, hi = semantic.full(e.shape, -(2**31), e.dtype), semantic.full(e.shape, 2**31 - 1, e.dtype)
    e = _where(x == 0.0, lo, e)
    e = _where(x != x, lo, e)
    return _where(_abs(x) == float("inf"), hi, e)


@_export
def logb(x, _semantic=None):
    """The unbiased exponent of x as a float (-inf for 0, +inf for infinities, NaN for NaN)."""
    x, dt = _float(x)
    r = semantic.cast(_exponent(x), x.dtype)
    r = _where(x == 0.0, semantic.full(x.shape, float("-inf"), x.dtype), r)
    r = _where(_abs(x) == float("inf"), _abs(x), r)
    return _back(_where(x != x, x, r), dt)


def _norm(args):
    floats = [_float(a) for a in args]
    vals, dt = [v for v, _ in floats], floats[0][1]
    for i in range(1, len(vals)):
        vals[0], vals[i] = semantic.binary_operands(vals[0], vals[i])
    m = _abs(vals[0])
    for v in vals[1:]:
        m = semantic.maximum(m, _abs(v))
    safe = _where(m == 0.0, semantic.full(m.shape, 1.0, m.dtype), m)
    acc = None
    for v in vals:
        q = v / safe
        acc = q * q if acc is None else acc + q * q
    r = m * semantic.unary_math("sqrt", acc)
    r = _where(m == float("inf"), m, r)
    return r, dt


def _norm_fn(name, n, recip):
    def f(*args, _semantic=None):
        if len(args) != n:
            raise TypeError(f"{name} takes {n} arguments")
        r, dt = _norm(args)
        return _back(1.0 / r if recip else r, dt)

    f.__name__ = name
    f.__doc__ = ("1 / " if recip else "") + f"the Euclidean norm of {n} values (scaled, no overflow)."
    return _export(f)


norm3d = _norm_fn("norm3d", 3, False)
norm4d = _norm_fn("norm4d", 4, False)
rnorm3d = _norm_fn("rnorm3d", 3, True)
rnorm4d = _norm_fn("rnorm4d", 4, True)
rhypot = _norm_fn("rhypot", 2, True)


@_export
def erfinv(x, _semantic=None):
    """The inverse error function (Giles' single-precision approximation; fp64 refines it with
    two Newton steps on erf)."""
    x, dt = _float(x)
    f32 = semantic.cast(x, core.float32) if _f64(x) else x
    w = -semantic.unary_math("log", (1.0 - f32) * (1.0 + f32))
    small = w < 5.0
    ws = w - 2.5
    p1 = _poly(ws, [2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                    -0.00125372503, -0.00417768164, 0.246640727, 1.50140941])
    wl = semantic.unary_math("sqrt", _where(small, semantic.full(w.shape, 9.0, w.dtype), w)) - 3.0
    p2 = _poly(wl, [-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                    -0.0076224613, 0.00943887047, 1.00167406, 2.83297682])
    r = _where(small, p1, p2) * f32
    if _f64(x):
        r = semantic.cast(r, core.float64)
        for _ in range(2):
            err = semantic.unary_math("erf", r) - x
            r = r - err / (1.1283791670955126 * semantic.unary_math("exp", -r * r))
    r = _where(_abs(x) == 1.0, _copysign(semantic.full(x.shape, float("inf"), x.dtype), x), r)
    return _back(_where(_abs(x) > 1.0, semantic.full(x.shape, float("nan"), x.dtype), r), dt)


@_export
def erfcinv(x, _semantic=None):
    """The inverse complementary error function: erfinv(1 - x)."""
    x, dt = _float(x)
    return _back(erfinv(1.0 - x), dt)


@_export
def normcdf(x, _semantic=None):
    """The standard normal distribution function, 0.5 * erfc(-x / sqrt(2))."""
    x, dt = _float(x)
    return _back(0.5 * erfc(-x * 0.7071067811865476), dt)


@_export
def normcdfinv(x, _semantic=None):
    """The inverse of normcdf: sqrt(2) * erfinv(2x - 1)."""
    x, dt = _float(x)
    return _back(1.4142135623730951 * erfinv(2.0 * x - 1.0), dt)


# -- bits ----------------------------------------------------------------------------------------

def _unsigned(x):
    x = semantic.to_tensor(x)
    wide = x.dtype.primitive_bitwidth == 64
    return semantic.bitcast(x, core.uint64 if wide else core.uint32), wide


@_export
def clz(x, _semantic=None):
    """Number of leading zero bits (int32; 32 or 64 for 0)."""
    u, wide = _unsigned(x)
    zero = u == 0
    n = semantic.full(u.shape, 0, core.int32)
    width = 64 if wide else 32
    shift = width // 2
    while shift:
        top = u >> (width - shift)
        empty = top == 0
        n = _where(empty, n + shift, n)
        u = _where(empty, u << shift, u)
        shift //= 2
    return _where(zero, semantic.full(n.shape, width, n.dtype), n)


@_export
def brev(x, _semantic=None):
    """The bits of x in reverse order (int32 or int64, as given)."""
    x = semantic.to_tensor(x)
    u, wide = _unsigned(x)
    masks = [(1, 0x5555555555555555), (2, 0x3333333333333333), (4, 0x0F0F0F0F0F0F0F0F),
             (8, 0x00FF00FF00FF00FF), (16, 0x0000FFFF0000FFFF), (32, 0x00000000FFFFFFFF)]
    for sh, m in masks[: 6 if wide else 5]:
        m = m if wide else m & 0xFFFFFFFF
        u = ((u >> sh) & m) | ((u & m) << sh)
    return semantic.bitcast(u, x.dtype)


@_export
def ffs(x, _semantic=None):
    """1 + the index of the lowest set bit (int32; 0 for 0)."""
    u, wide = _unsigned(x)
    low = u & (0 - u)
    n = popc(low - 1) + 1
    return _where(u == 0, semantic.full(n.shape, 0, n.dtype), n)


@_export
def hadd(x, y, _semantic=None):
    """(x + y) >> 1 without overflow."""
    x, y = semantic.binary_operands(x, y)
    return (x & y) + ((x ^ y) >> 1)


@_export
def rhadd(x, y, _semantic=None):
    """(x + y + 1) >> 1 without overflow."""
    x, y = semantic.binary_operands(x, y)
    return (x | y) - ((x ^ y) >> 1)


@_export
def sad(x, y, z, _semantic=None):
    """|x - y| + z."""
    x = semantic.to_tensor(x)
    unsigned = x.dtype.is_int_unsigned()
    wide = core.uint64 if unsigned else core.int64
    a, b = semantic.cast(x, wide), semantic.cast(semantic.to_tensor(y), wide)
    d = _where(a > b, a - b, b - a) + semantic.cast(semantic.to_tensor(z), wide)
    return semantic.cast(d, core.uint32 if unsigned else core.int32)


# Triton declares float_as_uint's result int32: the same as float_as_int.
float_as_uint = float_as_int
uint_as_float = int_as_float


@_export
def double2hiint(x, _semantic=None):
    """The high 32 bits of an fp64 (int32)."""
    return semantic.cast(semantic.bitcast(x, core.int64) >> 32, core.int32)


@_export
def double2loint(x, _semantic=None):
    """The low 32 bits of an fp64 (int32)."""
    return semantic.cast(semantic.bitcast(x, core.int64), core.int32)


@_export
def hiloint2double(hi, lo, _semantic=None):
    """An fp64 from its high and low 32 bits."""
    h = semantic.cast(semantic.to_tensor(hi), core.int64) << 32
    lo_bits = semantic.cast(semantic.bitcast(semantic.to_tensor(lo), core.uint32), core.int64)
    return semantic.bitcast(h | lo_bits, core.float64)


# -- conversions with a rounding mode (the ones that need no directed rounding of the result) -----

def _convert(name, rounding, to, doc):
    def f(x, _semantic=None):
        x = semantic.to_tensor(x)
        if rounding is not None:
            x = rounding(x)
        return semantic.cast(x, to)

    f.__name__ = name
    f.__doc__ = doc
    return _export(f)


float2int_rn = _convert("float2int_rn", rint, core.int32, "fp32 to int32, rounding to nearest even.")
float2int_rz = _convert("float2int_rz", None, core.int32, "fp32 to int32, rounding toward zero.")
float2int_rd = _convert("float2int_rd", floor, core.int32, "fp32 to int32, rounding down.")
float2int_ru = _convert("float2int_ru", ceil, core.int32, "fp32 to int32, rounding up.")
double2int_rn = _convert("double2int_rn", rint, core.int32, "fp64 to int32, rounding to nearest even.")
double2int_rz = _convert("double2int_rz", None, core.int32, "fp64 to int32, rounding toward zero.")
double2int_rd = _convert("double2int_rd", floor, core.int32, "fp64 to int32, rounding down.")
double2int_ru = _convert("double2int_ru", ceil, core.int32, "fp64 to int32, rounding up.")
float2ll_rn = _convert("float2ll_rn", rint, core.int64, "fp32 to int64, rounding to nearest even.")
float2ll_rz = _convert("float2ll_rz", None, core.int64, "fp32 to int64, rounding toward zero.")
float2ll_rd = _convert("float2ll_rd", floor, core.int64, "fp32 to int64, rounding down.")
float2ll_ru = _convert("float2ll_ru", ceil, core.int64, "fp32 to int64, rounding up.")
double2ll_rn = _convert("double2ll_rn", rint, core.int64, "fp64 to int64, rounding to nearest even.")
double2ll_rz = _convert("double2ll_rz", None, core.int64, "fp64 to int64, rounding toward zero.")
double2ll_rd = _convert("double2ll_rd", floor, core.int64, "fp64 to int64, rounding down.")
double2ll_ru = _convert("double2ll_ru", ceil, core.int64, "fp64 to int64, rounding up.")
int2float_rn = _convert("int2float_rn", None, core.float32, "int32 to fp32, rounding to nearest even.")
uint2float_rn = _convert("uint2float_rn", None, core.float32, "uint32 to fp32, rounding to nearest even.")
ll2float_rn = _convert("ll2float_rn", None, core.float32, "int64 to fp32, rounding to nearest even.")
ull2float_rn = _convert("ull2float_rn", None, core.float32, "uint64 to fp32, rounding to nearest even.")
int2double_rn = _convert("int2double_rn", None, core.float64, "int32 to fp64 (exact).")
uint2double_rn = _convert("uint2double_rn", None, core.float64, "uint32 to fp64 (exact).")
ll2double_rn = _convert("ll2double_rn", None, core.float64, "int64 to fp64, rounding to nearest even.")
ull2double_rn = _convert("ull2double_rn", None, core.float64, "uint64 to fp64, rounding to nearest even.")
double2float_rn = _convert("double2float_rn", None, core.float32, "fp64 to fp32, rounding to nearest even.")


__all__ += ["fast_expf", "fast_exp10f", "fast_logf", "fast_log2f", "fast_log10f", "fast_sinf", "fast_cosf",
            "fast_tanf", "fast_powf", "sqrt_rn", "abs"]
__all__ += ["fma_rn", "float_as_uint", "uint_as_float"]


# -- gamma, remainder, byte permutation, more conversions --------------------------------------

# Lanczos' approximation, g = 7, nine terms (relative error ~1e-15 in fp64).
_LANCZOS_G = 7.0
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
            1.5056327351493116e-7)


def _lanczos(z):
    """(log of the Lanczos sum A(z), t = z + g + 1/2) for Gamma(z + 1) = sqrt(2 pi) t^(z+1/2) e^-t A."""
    acc = semantic.full(z.shape, _LANCZOS[0], z.dtype)
    for i, c in enumerate(_LANCZOS[1:], start=1):
        acc = acc + c / (z + float(i))
    return semantic.unary_math("log", acc), z + (_LANCZOS_G + 0.5)


def _sinpi(x):
    """sin(pi x) (fp64) with the argument reduced exactly: exact zeros at integers."""
    r = x - 2.0 * _rint(x * 0.5)  # [-1, 1]
    r = _where(r > 0.5, 1.0 - r, _where(r < -0.5, -1.0 - r, r))
    return semantic.unary_math("sin", r * _m.pi)


def _lgamma_pos(x):
    """log Gamma(x) for x >= 1/2 (fp64)."""
    z = x - 1.0
    log_a, t = _lanczos(z)
    return 0.9189385332046728 + (z + 0.5) * semantic.unary_math("log", t) - t + log_a  # log sqrt(2 pi)


@_export
def lgamma(x, _semantic=None):
    """log |Gamma(x)| (fp64 inside; +inf at the poles 0, -1, -2, ...)."""
    x, dt = _float(x)
    w = x if _f64(x) else semantic.cast(x, core.float64)
    big = semantic.maximum(w, semantic.full(w.shape, 0.5, w.dtype))
    small = semantic.minimum(w, semantic.full(w.shape, 0.5, w.dtype))
    refl = semantic.unary_math("log", _m.pi / _abs(_sinpi(small))) - _lgamma_pos(1.0 - small)
    r = _where(w >= 0.5, _lgamma_pos(big), refl)
    pole = (w <= 0.0) & (w == semantic.unary_math("floor", w))
    r = _where(pole | (_abs(w) == float("inf")), semantic.full(w.shape, float("inf"), w.dtype), r)
    r = _where(w != w, w, r)
    return _back(r if _f64(x) else semantic.cast(r, core.float32), dt)


@_export
def tgamma(x, _semantic=None):
    """Gamma(x) (fp64 inside): NaN at negative integers and -inf, +-inf at +-0."""
    x, dt = _float(x)
    w = x if _f64(x) else semantic.cast(x, core.float64)
    big = semantic.maximum(w, semantic.full(w.shape, 0.5, w.dtype))
    small = semantic.minimum(w, semantic.full(w.shape, 0.5, w.dtype))
    z = big - 1.0
    log_a, t = _lanczos(z)
    # sqrt(2 pi) t^(z+1/2) e^-t A, with the power split in halves so that it overflows only
    # where Gamma does.
    half = semantic.unary_math("exp", ((z + 0.5) * 0.5) * semantic.unary_math("log", t) - 0.5 * t)
    pos = 2.5066282746310002 * half * half * semantic.unary_math("exp", log_a)
    neg = _m.pi / (_sinpi(small) * _gamma_half_up(1.0 - small))
    r = _where(w >= 0.5, pos, neg)
    bad = ((w < 0.0) & (w == semantic.unary_math("floor", w))) | (w == float("-inf"))
    r = _where(bad, semantic.full(w.shape, float("nan"), w.dtype), r)
    r = _where((w == 0.0) | (w == float("inf")), _copysign(semantic.full(w.shape, float("inf"), w.dtype), w), r)
    r = _where(w != w, w, r)
    return _back(r if _f64(x) else semantic.cast(r, core.float32), dt)


def _gamma_half_up(x):
    """Gamma(x) for x >= 1/2 (fp64), as in tgamma."""
    z = x - 1.0
    log_a, t = _lanczos(z)
    half = semantic.unary_math("exp", ((z + 0.5) * 0.5) * semantic.unary_math("log", t) - 0.5 * t)
    return 2.5066282746310002 * half * half * semantic.unary_math("exp", log_a)


@_export
def remainder(x, y, _semantic=None):
    """IEEE 754 remainder: x - n y with n the integer nearest x / y (ties to even)."""
    x, y, dt = _float_pair(x, y)
    f64 = _f64(x)
    xw = x if f64 else semantic.cast(x, core.float64)
    yw = y if f64 else semantic.cast(y, core.float64)
    a = _abs(yw)
    ax = _abs(xw)
    two_a = a * 2.0
    # t = |x| mod 2a in [0, 2a) (exact), then at most two exact subtractions of a.
    t = _where(two_a == float("inf"), ax, fmod(ax, two_a))
    keep_t = (t * 2.0 < a) | (t * 2.0 == a)
    d = t - a
    r = _where(keep_t, t, _where((d * 2.0 > a) | (d * 2.0 == a), d - a, d))
    r = _where(_signbit_bool(xw), -r, r)
    r = _where((a == 0.0) | (ax == float("inf")) | (yw != yw) | (xw != xw),
               semantic.full(xw.shape, float("nan"), xw.dtype), r)
    return _back(r if f64 else semantic.cast(r, core.float32), dt)


@_export
def byte_perm(x, y, s, _semantic=None):
    """PTX prmt: byte i of the result is byte `(s >> 4i) & 7` of the eight bytes y:x (x low)."""
    ux = semantic.cast(semantic.bitcast(semantic.cast(semantic.to_tensor(x), core.int32), core.uint32), core.uint64)
    uy = semantic.cast(semantic.bitcast(semantic.cast(semantic.to_tensor(y), core.int32), core.uint32), core.uint64)
    sel = semantic.cast(semantic.to_tensor(s), core.int32)
    both = semantic.or_(semantic.shl(uy, 32), ux)
    out = None
    for i in range(4):
        k = semantic.cast(semantic.and_(semantic.shr(sel, 4 * i), 7), core.uint64)
        byte = semantic.and_(semantic.shr(both, k * 8), 0xFF)
        byte = semantic.shl(byte, 8 * i)
        out = byte if out is None else semantic.or_(out, byte)
    return semantic.bitcast(semantic.cast(out, core.uint32), core.int32)


@_export
def rsqrt_rn(x, _semantic=None):
    """1 / sqrt(x), rounded once (fp32 through fp64)."""
    x, dt = _float(x)
    if _f64(x):
        return _back(1.0 / semantic.unary_math("sqrt", x), dt)
    w = semantic.cast(x, core.float64)
    return _back(semantic.cast(1.0 / semantic.unary_math("sqrt", w), core.float32), dt)



# -- Bessel functions -----------------------------------------------------------------------------
# From their definitions (Abramowitz & Stegun 9.1.10-13, 9.2.5-10, 9.6.10, 9.7.1), in fp64:
# power series in z = x^2/4 below a switch point, Hankel's asymptotic expansions above it.
# fp32 inputs are computed in fp64 and rounded once.

_EULER = 0.5772156649015329
_SERIES_TERMS = 31  # (x/2)^(2k) / (k!)^2 has fallen below 1e-17 of the sum by k = 30 up to the switch
_J_SWITCH = 12.0    # at 12, the asymptotic series' smallest terms are near 1e-11
_I_SWITCH = 15.0


def _harmonic(n):
    return sum(1.0 / j for j in range(1, n + 1))


def _series(z, coeff):
    """sum_k coeff(k) z^k for k < _SERIES_TERMS (Horner)."""
    return _poly(z, [coeff(k) for k in range(_SERIES_TERMS - 1, -1, -1)])


def _hankel_terms(nu, n):
    """a_m = prod_{j<=m} (4 nu^2 - (2j - 1)^2) / (m! 8^m), m < n: the asymptotic expansions'
    coefficients in powers of 1/x."""
    mu, out, a = 4.0 * nu * nu, [], 1.0
    for m in range(n):
        out.append(a)
        a *= (mu - (2 * m + 1) ** 2) / ((m + 1) * 8.0)
    return out


def _bessel_pq(nu, x):
    """Hankel's P(nu, x) and Q(nu, x) for large x."""
    a = _hankel_terms(nu, 22)
    t = 1.0 / x
    t2 = t * t
    p = _poly(t2, [(-1) ** k * a[2 * k] for k in range(10, -1, -1)])
    q = t * _poly(t2, [(-1) ** k * a[2 * k + 1] for k in range(10, -1, -1)])
    return p, q


def _bessel_phase(nu, x):
    """(cos, sin) of x - (nu/2 + 1/4) pi, from sin x and cos x (no inexact pi/4 subtracted)."""
    c, s = semantic.unary_math("cos", x), semantic.unary_math("sin", x)
    h = 0.7071067811865476
    if nu == 0:
        return (c + s) * h, (s - c) * h
    return (s - c) * h, -(s + c) * h


def _bessel_large(nu, x):
    """(J_nu(x), Y_nu(x)) for x >= _J_SWITCH."""
    p, q = _bessel_pq(nu, x)
    cos_chi, sin_chi = _bessel_phase(nu, x)
    amp = semantic.unary_math("sqrt", (2.0 / _m.pi) / x)
    return amp * (p * cos_chi - q * sin_chi), amp * (p * sin_chi + q * cos_chi)


def _bessel_in(x, body):
    """`body` on x in fp64, returned in x's dtype."""
    x, dt = _float(x)
    w = x if _f64(x) else semantic.cast(x, core.float64)
    r = body(w)
    return _back(r if _f64(x) else semantic.cast(r, core.float32), dt)


def _j0_f64(w):
    a = _abs(w)
    s = semantic.minimum(a, semantic.full(a.shape, _J_SWITCH, a.dtype))
    small = _series(s * s * 0.25, lambda k: (-1) ** k / _m.factorial(k) ** 2)
    large, _ = _bessel_large(0, semantic.maximum(a, semantic.full(a.shape, _J_SWITCH, a.dtype)))
    return _where(a < _J_SWITCH, small, large)


def _j1_f64(w):
    a = _abs(w)
    s = semantic.minimum(a, semantic.full(a.shape, _J_SWITCH, a.dtype))
    small = s * 0.5 * _series(s * s * 0.25, lambda k: (-1) ** k / (_m.factorial(k) * _m.factorial(k + 1)))
    large, _ = _bessel_large(1, semantic.maximum(a, semantic.full(a.shape, _J_SWITCH, a.dtype)))
    r = _where(a < _J_SWITCH, small, large)
    return _where(w < 0, -r, r)


def _y_edges(w, r):
    """Y at 0 is -inf; below 0 it is NaN (as libdevice and torch)."""
    r = _where(w == 0.0, semantic.full(w.shape, float("-inf"), w.dtype), r)
    return _where(w < 0, semantic.full(w.shape, float("nan"), w.dtype), r)


def _y0_f64(w):
    s = semantic.minimum(_abs(w), semantic.full(w.shape, _J_SWITCH, w.dtype))
    z = s * s * 0.25
    j0 = _series(z, lambda k: (-1) ** k / _m.factorial(k) ** 2)
    rest = z * _series(z, lambda k: (-1) ** k * _harmonic(k + 1) / _m.factorial(k + 1) ** 2)
    small = (2.0 / _m.pi) * ((semantic.unary_math("log", s) + (_EULER - _m.log(2.0))) * j0 + rest)
    _, large = _bessel_large(0, semantic.maximum(w, semantic.full(w.shape, _J_SWITCH, w.dtype)))
    return _y_edges(w, _where(w < _J_SWITCH, small, large))


def _y1_f64(w):
    s = semantic.minimum(_abs(w), semantic.full(w.shape, _J_SWITCH, w.dtype))
    z = s * s * 0.25
    j1 = s * 0.5 * _series(z, lambda k: (-1) ** k / (_m.factorial(k) * _m.factorial(k + 1)))
    # psi(k + 1) + psi(k + 2) = 2 H_k + 1/(k + 1) - 2 gamma
    psi = _series(z, lambda k: (-1) ** k * (2.0 * _harmonic(k) + 1.0 / (k + 1) - 2.0 * _EULER)
                  / (_m.factorial(k) * _m.factorial(k + 1)))
    log_half = semantic.unary_math("log", s) - _m.log(2.0)
    small = (2.0 / _m.pi) * log_half * j1 - (2.0 / _m.pi) / s - (0.5 / _m.pi) * s * psi
    # Below ~1e-300, j1 (x/2) underflows where the log is large: Y1 is -2/(pi x) there.
    small = _where(s < 1e-300, -(2.0 / _m.pi) / s, small)
    _, large = _bessel_large(1, semantic.maximum(w, semantic.full(w.shape, _J_SWITCH, w.dtype)))
    return _y_edges(w, _where(w < _J_SWITCH, small, large))


def _i_f64(nu, w):
    a = _abs(w)
    s = semantic.minimum(a, semantic.full(a.shape, _I_SWITCH, a.dtype))
    if nu == 0:
        small = _series(s * s * 0.25, lambda k: 1.0 / _m.factorial(k) ** 2)
    else:
        small = s * 0.5 * _series(s * s * 0.25, lambda k: 1.0 / (_m.factorial(k) * _m.factorial(k + 1)))
    big = semantic.maximum(a, semantic.full(a.shape, _I_SWITCH, a.dtype))
    c = _hankel_terms(nu, 16)
    expansion = _poly(1.0 / big, [(-1) ** m * c[m] for m in range(15, -1, -1)])
    # e^x / sqrt(2 pi x) as one exponential: finite wherever I is.
    large = semantic.unary_math("exp", big - 0.5 * semantic.unary_math("log", (2.0 * _m.pi) * big)) * expansion
    r = _where(a < _I_SWITCH, small, large)
    return _where(w < 0, -r, r) if nu == 1 else r


@_export
def j0(x, _semantic=None):
    """Bessel function of the first kind of order 0."""
    return _bessel_in(x, _j0_f64)


@_export
def j1(x, _semantic=None):
    """Bessel function of the first kind of order 1."""
    return _bessel_in(x, _j1_f64)


@_export
def y0(x, _semantic=None):
    """Bessel function of the second kind of order 0 (NaN below 0, -inf at 0)."""
    return _bessel_in(x, _y0_f64)


@_export
def y1(x, _semantic=None):
    """Bessel function of the second kind of order 1 (NaN below 0, -inf at 0)."""
    return _bessel_in(x, _y1_f64)


@_export
def cyl_bessel_i0(x, _semantic=None):
    """Modified Bessel function of the first kind of order 0."""
    return _bessel_in(x, lambda w: _i_f64(0, w))


@_export
def cyl_bessel_i1(x, _semantic=None):
    """Modified Bessel function of the first kind of order 1."""
    return _bessel_in(x, lambda w: _i_f64(1, w))

for _src, _sname in (("float", "fp32"), ("double", "fp64")):
    for _dst, _dt, _dname in (("uint", core.uint32, "uint32"), ("ull", core.uint64, "uint64")):
        for _mode, _fn, _how in (("rn", rint, "rounding to nearest even"), ("rz", None, "rounding toward zero"),
                                 ("rd", floor, "rounding down"), ("ru", ceil, "rounding up")):
            _name = f"{_src}2{_dst}_{_mode}"
            globals()[_name] = _convert(_name, _fn, _dt, f"{_sname} to {_dname}, {_how}.")
del _src, _sname, _dst, _dt, _dname, _mode, _fn, _how, _name


# -- arithmetic and conversions with a directed rounding (one PTX instruction each) ---------------

def _rounded(name, op, mode, nargs, what):
    def f(*args, _semantic=None):
        if len(args) != nargs:
            raise TypeError(f"{name} takes {nargs} argument{'s' if nargs > 1 else ''}, got {len(args)}")
        return semantic.rounded(op, mode, args)

    f.__name__ = name
    f.__doc__ = f"{what}, rounded {_ROUNDING_WORDS[mode]} (fp32 or fp64)."
    return _export(f)


def _rounded_convert(name, mode, to, src, what):
    def f(x, _semantic=None):
        literal = not isinstance(x, tensor)
        x = semantic.to_tensor(x)
        if x.dtype != src:
            if not literal:  # as libdevice's own: one source type (a number is converted to it)
                raise semantic.TilesTypeError(f"{name} takes {src}, got {x.dtype}")
            x = semantic.cast(x, src)
        return semantic.rounded("cvt", mode, [x], to)

    f.__name__ = name
    f.__doc__ = f"{what}, rounded {_ROUNDING_WORDS[mode]}."
    return _export(f)


_ROUNDING_WORDS = {"rd": "down (toward -inf)", "ru": "up (toward +inf)", "rz": "toward zero"}
for _mode in ("rd", "ru", "rz"):
    for _op, _n, _what in (("add", 2, "x + y"), ("sub", 2, "x - y"), ("mul", 2, "x * y"), ("div", 2, "x / y"),
                           ("fma", 3, "x * y + z"), ("sqrt", 1, "The square root of x"), ("rcp", 1, "1 / x")):
        globals()[f"{_op}_{_mode}"] = _rounded(f"{_op}_{_mode}", _op, _mode, _n, _what)
    for _name, _to, _src, _what in (
            ("int2float", core.float32, core.int32, "int32 to fp32"),
            ("uint2float", core.float32, core.uint32, "uint32 to fp32"),
            ("ll2float", core.float32, core.int64, "int64 to fp32"),
            ("ull2float", core.float32, core.uint64, "uint64 to fp32"),
            ("ll2double", core.float64, core.int64, "int64 to fp64"),
            ("ull2double", core.float64, core.uint64, "uint64 to fp64"),
            ("double2float", core.float32, core.float64, "fp64 to fp32")):
        globals()[f"{_name}_{_mode}"] = _rounded_convert(f"{_name}_{_mode}", _mode, _to, _src, _what)
del _mode, _op, _n, _what, _name, _to, _src


@_export
def fast_tanhf(x, _semantic=None):
    """tanh(x) by the hardware's approximation (`tanh.approx.f32`, about 2^-11 relative error)."""
    x, dt = _float(x)
    if _f64(x):
        return _back(tanh(x), dt)
    return _back(semantic.approx("tanh", x), dt)


@_export
def rcp64h(x, _semantic=None):
    """A fast approximate fp64 reciprocal (`rcp.approx.ftz.f64`, about single precision;
    subnormals flush to zero)."""
    x = semantic.cast(semantic.to_tensor(x), core.float64)
    return semantic.approx("rcp64h", x)


# -- Bessel functions of integer order: device functions with loops (`_bessel_n`) ----------------

from ._bessel_n import jn, yn  # noqa: E402

__all__ += ["jn", "yn"]
