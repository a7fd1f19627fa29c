"""Arithmetic with a chosen IEEE rounding direction, on numpy arrays: the interpreter's side of
libdevice's `add_rd`, `div_ru`, `int2float_rz`, ... (the GPU runs the PTX instruction with that
rounding modifier). numpy rounds to nearest only, so each result is the exact value rounded
the asked way (rd, ru or rz): sums, products and conversions from error-free transformations
in float64 (vectorised; 64-bit integers as two 32-bit halves); division, square root,
reciprocal, fma and fp64 products past float64's range from the exact rational value of each
element."""

from __future__ import annotations

from fractions import Fraction
from math import isqrt
from typing import Callable, Sequence

import numpy as np

# (significand bits including the implicit one, smallest normal exponent, largest exponent)
_FORMATS = {np.dtype(np.float32): (24, -126, 127), np.dtype(np.float64): (53, -1022, 1023)}


def _step(r: np.ndarray, toward: float) -> np.ndarray:
    return np.nextafter(r, np.asarray(toward, r.dtype))


def directed(r: np.ndarray, above: np.ndarray, below: np.ndarray, mode: str) -> np.ndarray:
    """`r`, the nearest rounding of an exact value v, moved one step where `mode` asks for a
    neighbour: `above` where r > v, `below` where r < v."""
    if mode == "rd":
        return np.where(above, _step(r, -np.inf), r)
    if mode == "ru":
        return np.where(below, _step(r, np.inf), r)
    # rz: where r is farther from zero than v
    away = np.where(np.signbit(r), below, above)
    return np.where(away, _step(r, 0.0), r)


def _two_sum(a: np.ndarray, b: np.ndarray):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a: np.ndarray):
    c = a * 134217729.0  # 2^27 + 1
    hi = c - (c - a)
    return hi, a - hi


def _two_product(a: np.ndarray, b: np.ndarray):
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _from_pair(s: np.ndarray, e: np.ndarray, out: np.dtype, mode: str, finite_in: np.ndarray) -> np.ndarray:
    """The exact value s + e (float64s, |e| at most half an ulp of s) rounded to `out` in a
    directed mode (rd, ru, rz); `finite_in` marks elements whose inputs were finite (where s is
    infinite there, the exact value overflowed float64)."""
    r = s.astype(out)
    r64 = r.astype(np.float64)
    over = finite_in & np.isinf(s)
    above = (finite_in & ((r64 > s) | ((r64 == s) & (e < 0)))) | (over & (s > 0))
    below = (finite_in & ((r64 < s) | ((r64 == s) & (e > 0)))) | (over & (s < 0))
    return directed(r, above, below, mode)


def _exact_zero_sign(a: np.ndarray, b: np.ndarray, r: np.ndarray, mode: str) -> np.ndarray:
    """IEEE's sign of an exact zero sum a + b: -0 when rounding down unless both are +0; else
    -0 only when both are -0."""
    zero = (r == 0) & (a == -b)
    both_neg = np.signbit(a) & np.signbit(b)
    both_pos = ~np.signbit(a) & ~np.signbit(b) & (a == 0) & (b == 0)
    neg = both_neg if mode != "rd" else ~both_pos
    return np.where(zero, np.where(neg, -np.zeros_like(r), np.zeros_like(r)), r)


def round_fraction(q: Fraction, out: np.dtype, mode: str) -> float:
    """The rational `q` rounded to the float format `out` in direction `mode` (rd, ru, rz)."""
    p, emin, emax = _FORMATS[np.dtype(out)]
    if q == 0:
        return 0.0
    neg = q < 0
    a = -q if neg else q
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, emin)  # below the normal range: fixed subnormal spacing
    scale = p - 1 - e
    scaled = a * (Fraction(2) ** scale)
    m, rest = divmod(scaled.numerator, scaled.denominator)
    if rest and ((mode == "ru" and not neg) or (mode == "rd" and neg)):
        m += 1
    if m >= (1 << p):  # carried into the next binade
        m >>= 1
        scale -= 1
    if -scale + p - 1 > emax:  # overflow: infinity, or the largest finite toward zero
        if (mode == "ru" and not neg) or (mode == "rd" and neg):
            v = float("inf")
        else:
            v = float(np.finfo(out).max)
        return -v if neg else v
    v = float(np.ldexp(np.float64(m), -scale)) if out == np.float64 else float(
        np.ldexp(np.float64(m), -scale).astype(np.float32))
    return -v if neg else v


def _elementwise(exact: Callable[..., Fraction], nearest: np.ndarray, args: Sequence[np.ndarray],
                 out: np.dtype, mode: str) -> np.ndarray:
    """`exact(*finite elements)` rounded per element; non-finite inputs or results keep numpy's."""
    res = np.array(nearest, dtype=out, copy=True)
    flat = [np.broadcast_to(a, res.shape).ravel() for a in args]
    view = res.reshape(-1)
    for i in range(view.size):
        xs = [f[i] for f in flat]
        if not all(np.isfinite(x) for x in xs):
            continue
        q = exact(*xs)
        if q is None:
            continue
        view[i] = round_fraction(q, out, mode)
    return res


def _fr(x) -> Fraction:
    return Fraction(float(x))


def arithmetic(op: str, mode: str, args: Sequence[np.ndarray], out: np.dtype) -> np.ndarray:
    """`op` (add, sub, mul, div, fma, sqrt, rcp, cvt) of `args`, rounded to `out` per `mode`."""
    out = np.dtype(out)
    wide = np.float64
    with np.errstate(all="ignore"):
        if op in ("add", "sub", "mul") and args[0].dtype in (np.float32, np.float64):
            a, b = (np.asarray(x, wide) for x in args)
            if op == "sub":
                b = -b
            finite_in = np.isfinite(a) & np.isfinite(b)
            if op == "mul":
                s, e = _two_product(a, b)
                e = np.where(np.isfinite(e), e, 0.0)
                r = _from_pair(s, e, out, mode, finite_in)
                return _extreme_product(a, b, r, out, mode)
            s, e = _two_sum(a, b)
            e = np.where(np.isfinite(e), e, 0.0)
            return _exact_zero_sign(a, b, _from_pair(s, e, out, mode, finite_in), mode)
        if op == "cvt" and (args[0].dtype.kind == "f" or args[0].dtype.itemsize <= 4):
            s = np.asarray(args[0], wide)  # exact in float64
            return _from_pair(s, np.zeros_like(s), out, mode, np.isfinite(s))
        if op == "cvt":  # 64-bit integers: the two 32-bit halves, summed without error
            x = np.asarray(args[0])
            hi = np.asarray(x >> 32, wide) * 4294967296.0
            lo = np.asarray(x & 0xFFFFFFFF, wide)
            s, e = _two_sum(hi, lo)
            return _from_pair(s, e, out, mode, np.ones(s.shape, bool))
        if op == "div":
            a, b = args
            nearest = (np.asarray(a, wide) / np.asarray(b, wide)).astype(out)
            return _elementwise(lambda x, y: None if y == 0 else _fr(x) / _fr(y), nearest, args, out, mode)
        if op == "rcp":
            (a,) = args
            nearest = (1.0 / np.asarray(a, wide)).astype(out)
            return _elementwise(lambda x: None if x == 0 else 1 / _fr(x), nearest, args, out, mode)
        if op == "fma":
            a, b, c = args
            nearest = (np.asarray(a, wide) * np.asarray(b, wide) + np.asarray(c, wide)).astype(out)

            def exact(x, y, z):
                q = _fr(x) * _fr(y) + _fr(z)
                return None if q == 0 else q  # numpy's signed zero stands

            return _elementwise(exact, nearest, args, out, mode)
        if op == "sqrt":
            (a,) = args
            nearest = np.sqrt(np.asarray(a, wide)).astype(out)
            return _elementwise(lambda x: None if x <= 0 else _sqrt_bracket(_fr(x), out), nearest, args, out, mode)
    raise ValueError(f"no rounded {op} for {[a.dtype for a in args]}")


def _extreme_product(a, b, r, out, mode):
    """fp64 products whose error term float64 cannot hold (tiny products; factors so large
    that splitting them overflows): those elements exactly."""
    if out != np.float64:
        return r
    p = np.abs(a * b)
    big = (np.abs(a) > 2.0 ** 995) | (np.abs(b) > 2.0 ** 995)
    # (a product that underflowed to 0 from nonzero factors is one of the tiny ones)
    risky = np.isfinite(a) & np.isfinite(b) & (a != 0) & (b != 0) & ((p < 2.0 ** -969) | big)
    if not risky.any():
        return r
    fixed = _elementwise(lambda x, y: _fr(x) * _fr(y), r, [a, b], out, mode)
    return np.where(risky, fixed, r)


def _sqrt_bracket(q: Fraction, out: np.dtype) -> Fraction:
    """A rational within far less than half an ulp of sqrt(q), never equal to it unless exact:
    enough for any rounding direction, since an irrational root never ties."""
    p = _FORMATS[np.dtype(out)][0]
    # sqrt(n / d) = sqrt(n d 4^k) / (d 2^k), with k large enough for 2p + 8 bits of root
    k = max(0, (4 * p + 17 - q.numerator.bit_length() - q.denominator.bit_length()) // 2)
    num = q.numerator * q.denominator * 4 ** k
    s = isqrt(num)
    if s * s == num:
        return Fraction(s, q.denominator * 2 ** k)
    # between s and s + 1: nudge off the grid so that the direction is right
    return Fraction(2 * s + 1, 2 * q.denominator * 2 ** k)
