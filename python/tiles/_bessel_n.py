"""libdevice's Bessel functions of integer order n, `jn(n, x)` and `yn(n, x)`, written in the
tiles language (they loop over the order, so they are kernels' device functions rather than
straight-line ops). Both work in fp64 and return x's dtype; `n` is an int32 tile or number,
broadcast against x.

- `yn`: the upward recurrence Y_{k+1} = (2k/x) Y_k - Y_{k-1} from y0 and y1, stable for all
  x > 0; NaN below 0, -inf at 0.
- `jn`: the same recurrence upward from j0 and j1 where |x| > n (stable there); else Miller's
  downward recurrence from an even order m = n + sqrt(160 n) with the sum J_0 + 2 (J_2 + J_4 +
  ...) = 1 normalising it, rescaled where it grows past 1e100.
- Negative orders and arguments: J_{-n} = (-1)^n J_n, J_n(-x) = (-1)^n J_n(x), Y_{-n} = (-1)^n Y_n.
"""

from __future__ import annotations

from . import language as tl
from . import libdevice
from .runtime.jit import jit


@jit
def _max_order(na):
    if len(na.shape) > 0:
        return tl.max(na, axis=None)
    else:
        return na


@jit
def _upward(f0, f1, x, na):
    """F_n(x) for each element's order n, by F_{k+1} = (2k/x) F_k - F_{k-1} from F_0 and F_1."""
    nmax = _max_order(na)
    prev = f0
    cur = f1
    r = tl.where(na == 0, f0, f1)
    for k in range(1, nmax):
        nxt = (2.0 * k / x) * cur - prev
        prev = cur
        cur = nxt
        r = tl.where(na == k + 1, cur, r)
    return r


@jit
def jn(n, x):
    """Bessel function of the first kind of integer order n."""
    tl.static_assert(x.dtype.is_floating(), "jn takes a floating-point x")
    xd = x.to(tl.float64)
    nt = tl.full(xd.shape, 0, tl.int32) + n
    na = tl.abs(nt)
    a = tl.abs(xd)
    j0 = libdevice.j0(a)
    j1 = libdevice.j1(a)
    up = _upward(j0, j1, a, na)  # for |x| > n
    # downward (Miller), for |x| <= n
    m = ((na + tl.sqrt(160.0 * na.to(tl.float64)).to(tl.int32)) // 2) * 2
    mmax = _max_order(m)
    tox = 2.0 / a
    bj = tl.full(xd.shape, 1.0, tl.float64)
    bjp = tl.full(xd.shape, 0.0, tl.float64)
    ans = tl.full(xd.shape, 0.0, tl.float64)
    total = tl.full(xd.shape, 0.0, tl.float64)
    for i in range(0, mmax):
        j = mmax - i
        live = j <= m
        bjm = j * tox * bj - bjp
        big = tl.abs(bjm) > 1.0e100
        scale = tl.where(big, 1.0e-100, 1.0)
        nbjp = tl.where(live, bj * scale, bjp)
        nbj = tl.where(live, bjm * scale, bj)
        ans = tl.where(live, ans * scale, ans)
        total = tl.where(live, total * scale, total)
        total = tl.where(live & (j % 2 == 1), total + nbj, total)
        ans = tl.where(live & (j == na), nbjp, ans)
        bj = nbj
        bjp = nbjp
    down = ans / (2.0 * total - bj)
    r = tl.where(a > na.to(tl.float64), up, down)
    r = tl.where(na == 0, j0, tl.where(na == 1, j1, r))
    r = tl.where(a == 0.0, tl.where(na == 0, 1.0, 0.0), r)
    flip = ((na % 2) == 1) & ((xd < 0.0) != (nt < 0))
    r = tl.where(flip, -r, r)
    return r.to(x.dtype)


@jit
def yn(n, x):
    """Bessel function of the second kind of integer order n (NaN below 0, -inf at 0)."""
    tl.static_assert(x.dtype.is_floating(), "yn takes a floating-point x")
    xd = x.to(tl.float64)
    nt = tl.full(xd.shape, 0, tl.int32) + n
    na = tl.abs(nt)
    r = _upward(libdevice.y0(xd), libdevice.y1(xd), xd, na)
    r = tl.where(xd == 0.0, float("-inf"), r)
    r = tl.where(xd < 0.0, float("nan"), r)
    flip = ((na % 2) == 1) & (nt < 0)
    r = tl.where(flip, -r, r)
    return r.to(x.dtype)
