"""Reductions, while loops and atomics in both modes against numpy, with odd sizes, masks,
keep_dims, every dtype an op accepts, and NaN/inf for max/min/argmax."""

from __future__ import annotations

import numpy as np
import pytest

import tiles
import tiles.language as tl
from test_language import BF16, np_dtype, random


@tiles.jit
def reduce2d_kernel(x_ptr, out_ptr, M, N, stride, OP: tl.constexpr, AXIS: tl.constexpr, KEEP: tl.constexpr,
                    OTHER: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * stride + rn[None, :], mask=mask, other=OTHER)
    if OP == "sum":
        r = tl.sum(x, axis=AXIS, keep_dims=KEEP)
    elif OP == "max":
        r = tl.max(x, axis=AXIS, keep_dims=KEEP)
    elif OP == "min":
        r = tl.min(x, axis=AXIS, keep_dims=KEEP)
    elif OP == "argmax":
        r = tl.argmax(x, axis=AXIS, keep_dims=KEEP)
    elif OP == "argmin":
        r = tl.argmin(x, axis=AXIS, keep_dims=KEEP)
    elif OP == "xor_sum":
        r = tl.xor_sum(x, axis=AXIS, keep_dims=KEEP)
    if AXIS == 0:
        if KEEP:
            tl.store(out_ptr + rn[None, :], r, mask=rn[None, :] < N)
        else:
            tl.store(out_ptr + rn, r, mask=rn < N)
    else:
        if KEEP:
            tl.store(out_ptr + rm[:, None], r, mask=rm[:, None] < M)
        else:
            tl.store(out_ptr + rm, r, mask=rm < M)


@tiles.jit
def reduce_all_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(out_ptr, tl.sum(x))
    tl.store(out_ptr + 1, x.sum(axis=0) * 2)


@tiles.jit
def _absmax(a, b):
    return tl.maximum(tl.abs(a), tl.abs(b))


@tiles.jit
def _first_positive(v1, i1, v2, i2):
    take_left = (v1 > 0) & ((i1 < i2) | (v2 <= 0))
    return tl.where(take_left, v1, v2), tl.where(take_left, i1, i2)


@tiles.jit
def custom_reduce_kernel(x_ptr, out_ptr, idx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.reduce(x, 0, _absmax))
    v, i = tl.reduce((x, offs), 0, _first_positive)
    tl.store(idx_ptr, i)


@tiles.jit
def softmax_rows_kernel(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * stride + offs, mask=offs < n_cols, other=-float("inf"))
    z = x - tl.max(x, axis=0)
    e = tl.exp(z)
    tl.store(out_ptr + row * stride + offs, e / tl.sum(e, axis=0), mask=offs < n_cols)


@tiles.jit
def while_kernel(x_ptr, out_ptr, steps_ptr, limit):
    pid = tl.program_id(0)
    v = tl.load(x_ptr + pid)
    steps = 0
    while v > limit:
        v = v // 2
        steps += 1
    tl.store(out_ptr + pid, v)
    tl.store(steps_ptr + pid, steps)


@tiles.jit
def histogram_kernel(x_ptr, hist_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    b = tl.load(x_ptr + offs, mask=mask, other=0)
    tl.atomic_add(hist_ptr + b, 1, mask=mask)


@tiles.jit
def atomic_ops_kernel(x_ptr, max_ptr, min_ptr, or_ptr, old_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.atomic_max(max_ptr, x, mask=mask)
    tl.atomic_min(min_ptr, x, mask=mask)
    tl.atomic_or(or_ptr + offs % 4, (offs % 31).to(tl.int32), mask=mask)
    old = tl.atomic_xchg(old_ptr + offs, offs.to(tl.float32), mask=mask)
    tl.store(old_ptr + offs + n, old, mask=mask)


@tiles.jit
def locked_sum_kernel(x_ptr, total_ptr, lock_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    part = tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0)
    while tl.atomic_cas(lock_ptr, 0, 1) == 1:
        pass
    tl.store(total_ptr, tl.load(total_ptr) + part)
    tl.debug_barrier()
    tl.atomic_xchg(lock_ptr, 0)


SENTINEL = {"sum": 0, "max": -float("inf"), "min": float("inf"), "argmax": -float("inf"),
            "argmin": float("inf"), "xor_sum": 0}


def ref_reduce(op, x, axis, keep):
    f = {"sum": np.sum, "max": np.max, "min": np.min, "argmax": np.argmax, "argmin": np.argmin,
         "xor_sum": np.bitwise_xor.reduce}[op]
    r = f(x.astype(np.float64) if op == "sum" and x.dtype.kind == "f" else x, axis=axis)
    return np.expand_dims(r, axis) if keep else r


@pytest.mark.parametrize("op,name", [("sum", "float32"), ("sum", "float16"), ("sum", "int8"), ("sum", "int32"),
                                     ("max", "float32"), ("max", "bfloat16"), ("min", "int16"),
                                     ("max", "uint32"), ("argmax", "float32"), ("argmin", "int32"),
                                     ("xor_sum", "int64"), ("sum", "float64")])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("keep", [False, True])
def test_reduce_2d(dev, rng, op, name, axis, keep):
    M, N = 13, 37
    x = random(rng, (M, N), name, *((-50, 50) if name.startswith("int") else (None, None)))
    ref = ref_reduce(op, x, axis, keep)
    out_dt = np.int32 if op.startswith("arg") else (
        np.float32 if name in ("float16", "bfloat16") and op in ("max", "min") else
        np.int32 if op == "sum" and name in ("int8", "int16") else np_dtype(name))
    out = np.zeros(ref.size, dtype=out_dt)
    other = SENTINEL[op] if x.dtype.kind == "f" or x.dtype == BF16 else (
        0 if op in ("sum", "xor_sum") else {"max": -128, "argmax": -128, "min": 127, "argmin": 127}[op])
    if op in ("max", "argmax") and name == "uint32":
        other = 0
    xd, od = dev.put(x), dev.put(out)
    reduce2d_kernel[(1,)](xd, od, M, N, N, OP=op, AXIS=axis, KEEP=keep, OTHER=other, BM=16, BN=64)
    got = dev.get(od).reshape(-1)
    want = np.asarray(ref).reshape(-1)
    if op in ("sum",) and name in ("float16", "float32", "float64"):
        tol = {"float16": 2e-2, "float32": 1e-5, "float64": 1e-12}[name]
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * 10)
    else:
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


def test_reduce_over_all_axes_and_methods(dev, rng):
    x = rng.integers(-1000, 1000, 200).astype(np.int32)
    out = np.zeros(2, np.int32)
    xd, od = dev.put(x), dev.put(out)
    reduce_all_kernel[(1,)](xd, od, 200, BLOCK=256)
    np.testing.assert_array_equal(dev.get(od), [x.sum(), 2 * x.sum()])


def test_custom_combine_functions(dev, rng):
    n = 100
    x = rng.standard_normal(n).astype(np.float32)
    x[:7] = -np.abs(x[:7])
    out, idx = np.zeros(1, np.float32), np.zeros(1, np.int32)
    xd, od, idd = dev.put(x), dev.put(out), dev.put(idx)
    custom_reduce_kernel[(1,)](xd, od, idd, n, BLOCK=128)
    assert dev.get(od)[0] == np.abs(x).max()
    assert dev.get(idd)[0] == np.flatnonzero(x > 0)[0]


def test_nan_and_inf_in_max_min_argmax(dev):
    with_nan = np.array([[1.0, np.nan, 3.0, -np.inf], [np.inf, 2.0, np.nan, 5.0]], np.float32)
    for op in ("max", "min", "argmax"):
        # argmax with NaN depends on the reduction order (`>` with NaN is not associative), in Triton too.
        x = np.nan_to_num(with_nan, nan=-np.inf) if op == "argmax" else with_nan
        out = np.zeros(2, np.float32 if op != "argmax" else np.int32)
        xd, od = dev.put(x), dev.put(out)
        reduce2d_kernel[(1,)](xd, od, 2, 4, 4, OP=op, AXIS=1, KEEP=False, OTHER=0.0, BM=2, BN=4)
        got = dev.get(od)
        # maximum/minimum ignore NaN (like fmax/fmin); argmax compares with >, as Triton does.
        want = {"max": [3.0, np.inf], "min": [-np.inf, 2.0], "argmax": [2, 0]}[op]
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", ["float32", "float16"])
def test_row_softmax(dev, rng, name):
    rows, cols = 37, 781
    x = rng.standard_normal((rows, cols)).astype(np_dtype(name))
    out = np.zeros_like(x)
    xd, od = dev.put(x), dev.put(out)
    softmax_rows_kernel[(rows,)](od, xd, cols, cols, BLOCK=1024)
    xf = x.astype(np.float64)
    ref = np.exp(xf - xf.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    tol = 2e-3 if name == "float16" else 1e-5
    np.testing.assert_allclose(dev.get(od).astype(np.float64), ref, rtol=tol, atol=tol)


def test_while_loops(dev, rng):
    x = rng.integers(1, 1 << 20, 50).astype(np.int32)
    out, steps = np.zeros_like(x), np.zeros_like(x)
    xd, od, sd = dev.put(x), dev.put(out), dev.put(steps)
    while_kernel[(50,)](xd, od, sd, 100)
    v, s = x.copy(), np.zeros_like(x)
    while (v > 100).any():
        s += v > 100
        v = np.where(v > 100, v // 2, v)
    np.testing.assert_array_equal(dev.get(od), v)
    np.testing.assert_array_equal(dev.get(sd), s)


def test_atomic_add_histogram_with_collisions(dev, rng):
    n = 5000
    x = rng.integers(0, 17, n).astype(np.int32)
    hist = np.zeros(17, np.int32)
    xd, hd = dev.put(x), dev.put(hist)
    histogram_kernel[(tiles.cdiv(n, 256),)](xd, hd, n, BLOCK=256)
    np.testing.assert_array_equal(dev.get(hd), np.bincount(x, minlength=17))


def test_atomic_max_min_or_xchg(dev, rng):
    n = 1000
    x = (rng.standard_normal(n) * 10).astype(np.float32)
    mx, mn = np.full(1, -np.inf, np.float32), np.full(1, np.inf, np.float32)
    orv = np.zeros(4, np.int32)
    old = np.concatenate([rng.standard_normal(n).astype(np.float32), np.zeros(n, np.float32)])
    before = old[:n].copy()
    d = [dev.put(a) for a in (x, mx, mn, orv, old)]
    atomic_ops_kernel[(tiles.cdiv(n, 128),)](*d, n, BLOCK=128)
    assert dev.get(d[1])[0] == x.max() and dev.get(d[2])[0] == x.min()
    offs = np.arange(n)
    want_or = [np.bitwise_or.reduce((offs % 31)[offs % 4 == k]) for k in range(4)]
    np.testing.assert_array_equal(dev.get(d[3]), want_or)
    got = dev.get(d[4])
    np.testing.assert_array_equal(got[:n], offs.astype(np.float32))
    np.testing.assert_array_equal(got[n:], before)


@tiles.jit
def block_extrema_kernel(x_ptr, max_ptr, min_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    # One scalar per program: a float atomic on a single address with a 0-d value.
    tl.atomic_max(max_ptr, tl.max(x, 0))
    tl.atomic_min(min_ptr, tl.min(x, 0))


def test_scalar_float_atomic_max_min(dev, rng):
    n = 1024
    x = (rng.standard_normal(n) * 10).astype(np.float32)
    mx, mn = np.full(1, -np.inf, np.float32), np.full(1, np.inf, np.float32)
    xd, mxd, mnd = dev.put(x), dev.put(mx), dev.put(mn)
    block_extrema_kernel[(n // 128,)](xd, mxd, mnd, n, BLOCK=128)
    assert dev.get(mxd)[0] == x.max() and dev.get(mnd)[0] == x.min()


@tiles.jit
def signed_zero_extrema_kernel(x_ptr, max_ptr, min_ptr):
    i = tl.program_id(0)
    x = tl.load(x_ptr + i)
    tl.atomic_max(max_ptr + i, x)
    tl.atomic_min(min_ptr + i, x)


def test_float_atomic_max_min_order_signed_zeros(dev, rng):
    # -0.0 has the sign bit set: max(-big, -0.0) and min(big, -0.0) are -0.0 (and +0.0 the same
    # way round); each program starts from a random bound on its own address.
    x = np.array([-0.0, 0.0, -0.0, 0.0], np.float32)
    big = (np.abs(rng.standard_normal(4)) + 1).astype(np.float32) * 1e30
    mx, mn = dev.put(-big), dev.put(big.copy())
    signed_zero_extrema_kernel[(4,)](dev.put(x), mx, mn)
    for got in (dev.get(mx), dev.get(mn)):
        np.testing.assert_array_equal(np.signbit(got), np.signbit(x))
        np.testing.assert_array_equal(got, 0.0)


def test_spin_lock_with_cas_and_xchg(dev, rng):
    n = 4096
    x = rng.standard_normal(n).astype(np.float32)
    total, lock = np.zeros(1, np.float32), np.zeros(1, np.int32)
    xd, td, ld = dev.put(x), dev.put(total), dev.put(lock)
    locked_sum_kernel[(n // 256,)](xd, td, ld, n, BLOCK=256)
    np.testing.assert_allclose(dev.get(td)[0], x.sum(), rtol=1e-4, atol=1e-3)
    assert dev.get(ld)[0] == 0


COMPILE_CASES = [
    (reduce2d_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "M": "i32", "N": "i32", "stride": "i32"},
     {"OP": "sum", "AXIS": 1, "KEEP": False, "OTHER": 0.0, "BM": 16, "BN": 64}, "shfl.sync.bfly"),
    (reduce2d_kernel, {"x_ptr": "*fp16", "out_ptr": "*fp32", "M": "i32", "N": "i32", "stride": "i32"},
     {"OP": "max", "AXIS": 0, "KEEP": True, "OTHER": 0.0, "BM": 64, "BN": 64}, "cvt.f32.f16"),
    (reduce2d_kernel, {"x_ptr": "*fp32", "out_ptr": "*i32", "M": "i32", "N": "i32", "stride": "i32"},
     {"OP": "argmax", "AXIS": 1, "KEEP": False, "OTHER": 0.0, "BM": 16, "BN": 64}, "shfl.sync.bfly"),
    (reduce2d_kernel, {"x_ptr": "*i64", "out_ptr": "*i64", "M": "i32", "N": "i32", "stride": "i32"},
     {"OP": "xor_sum", "AXIS": 1, "KEEP": False, "OTHER": 0, "BM": 16, "BN": 64}, "shfl.sync.bfly"),
    (reduce_all_kernel, {"x_ptr": "*i32", "out_ptr": "*i32", "n": "i32"}, {"BLOCK": 256}, "bar.sync"),
    (custom_reduce_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "idx_ptr": "*i32", "n": "i32"},
     {"BLOCK": 128}, "shfl.sync.bfly"),
    (softmax_rows_kernel, {"out_ptr": "*fp16", "in_ptr": "*fp16", "stride": "i32", "n_cols": "i32"},
     {"BLOCK": 1024}, "ex2.approx"),
    (while_kernel, {"x_ptr": "*i32", "out_ptr": "*i32", "steps_ptr": "*i32", "limit": "i32"}, {}, "bra"),
    (histogram_kernel, {"x_ptr": "*i32", "hist_ptr": "*i32", "n": "i32"}, {"BLOCK": 256},
     "atom.global.gpu.acq_rel.add"),
    (atomic_ops_kernel, {"x_ptr": "*fp32", "max_ptr": "*fp32", "min_ptr": "*fp32", "or_ptr": "*i32",
                         "old_ptr": "*fp32", "n": "i32"}, {"BLOCK": 128}, "atom.global.gpu.acq_rel.max.s32"),
    (locked_sum_kernel, {"x_ptr": "*fp32", "total_ptr": "*fp32", "lock_ptr": "*i32", "n": "i32"}, {"BLOCK": 256},
     "atom.global.acq_rel.gpu.cas.b32"),
]


@pytest.mark.parametrize("case", range(len(COMPILE_CASES)))
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_reduction_kernels_compile(ptxas, case, target):
    from test_compile import assemble

    fn, sig, cx, marker = COMPILE_CASES[case]
    k = tiles.compile(fn, signature=sig, constexprs=cx, target=target)
    assert marker in k.asm["ptx"], marker
    assemble(ptxas, k.asm["ptx"], target)


@tiles.jit
def long_sum_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    tl.store(out_ptr, tl.sum(tl.load(x_ptr + tl.arange(0, BLOCK)), axis=0))


def test_a_thread_sums_its_elements_as_a_tree(dev, rng):
    # One warp sums 4096 floats, 128 a thread: one 1.0 among values under half its ulp. Folded
    # one after another, the thread holding the 1.0 would drop its other 127 values (a relative
    # error near 4e-6); folded as a tree, they add up among themselves first.
    n = 4096
    x = (rng.uniform(0.5, 1.5, n) * 2.0**-25).astype(np.float32)
    x[int(rng.integers(0, n))] = 1.0
    out = dev.put(np.zeros(1, np.float32))
    long_sum_kernel[(1,)](dev.put(x), out, BLOCK=n, num_warps=1)
    exact = x.astype(np.float64).sum()
    assert abs(float(dev.get(out)[0]) - exact) / exact < 1e-6
