"""flip, sort, topk, histogram, gather and 3-D (batched) dot — written with tiles' shape ops, in
both modes, against numpy."""

import numpy as np
import pytest

import tiles
import tiles.language as tl


@tiles.jit
def rows_kernel(x_ptr, y_ptr, OP: tl.constexpr, R: tl.constexpr, C: tl.constexpr, K: tl.constexpr):
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + r * C + c)
    if OP == "flip":
        y = tl.flip(x, 1)
        tl.store(y_ptr + r * C + c, y)
    elif OP == "flip0":
        y = tl.flip(x, 0)
        tl.store(y_ptr + r * C + c, y)
    elif OP == "sort":
        tl.store(y_ptr + r * C + c, tl.sort(x))
    elif OP == "sort_desc":
        tl.store(y_ptr + r * C + c, tl.sort(x, descending=True))
    elif OP == "topk":
        kk = tl.arange(0, K)[None, :]
        tl.store(y_ptr + r * K + kk, tl.topk(x, K))
    else:  # the K smallest, smallest first
        kk = tl.arange(0, K)[None, :]
        tl.store(y_ptr + r * K + kk, tl.topk(x, K, descending=False))


@tiles.jit
def bitonic_merge_kernel(x_ptr, y_ptr, R: tl.constexpr, C: tl.constexpr, DESC: tl.constexpr):
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    tl.store(y_ptr + r * C + c, tl.bitonic_merge(tl.load(x_ptr + r * C + c), descending=DESC))


@pytest.mark.parametrize("desc", [False, True])
def test_bitonic_merge_sorts_a_bitonic_sequence(dev, rng, desc):
    R, C = 4, 64
    x = (rng.standard_normal((R, C)) * 100).astype(np.float32)
    # Ascending then descending halves: a bitonic sequence per row.
    x = np.concatenate([np.sort(x[:, :C // 2], 1), -np.sort(-x[:, C // 2:], 1)], 1)
    y = dev.put(np.zeros_like(x))
    bitonic_merge_kernel[(1,)](dev.put(x), y, R=R, C=C, DESC=desc)
    want = -np.sort(-x, 1) if desc else np.sort(x, 1)
    np.testing.assert_array_equal(dev.get(y), want)


@pytest.mark.parametrize("op", ["flip", "flip0", "sort", "sort_desc", "topk", "topk_asc"])
@pytest.mark.parametrize("dt", [np.float32, np.int32])
def test_rows(dev, rng, op, dt):
    R, C, K = 4, 32, 8
    x = (rng.standard_normal((R, C)) * 100).astype(dt)
    out = np.zeros((R, K) if op.startswith("topk") else (R, C), dt)
    y = dev.put(out)
    rows_kernel[(1,)](dev.put(x), y, OP=op, R=R, C=C, K=K)
    ref = {"flip": x[:, ::-1], "flip0": x[::-1], "sort": np.sort(x, 1), "sort_desc": -np.sort(-x, 1),
           "topk": -np.sort(-x, 1)[:, :K], "topk_asc": np.sort(x, 1)[:, :K]}[op]
    np.testing.assert_array_equal(dev.get(y), ref)


@tiles.jit
def histogram_kernel(x_ptr, h_ptr, n, N: tl.constexpr, BINS: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(h_ptr + tl.arange(0, BINS), tl.histogram(x, BINS, mask=offs < n))


def test_histogram(dev, rng):
    x = rng.integers(-3, 40, 200).astype(np.int32)
    h = dev.put(np.full(32, -1, np.int32))
    histogram_kernel[(1,)](dev.put(x), h, 200, N=256, BINS=32)
    np.testing.assert_array_equal(dev.get(h), np.bincount(x[(x >= 0) & (x < 32)], minlength=32)[:32])


@tiles.jit
def gather_kernel(src_ptr, idx_ptr, out_ptr, N: tl.constexpr, M: tl.constexpr, P: tl.constexpr):
    s = tl.load(src_ptr + tl.arange(0, N)[:, None] * M + tl.arange(0, M)[None, :])
    i = tl.load(idx_ptr + tl.arange(0, P)[:, None] * M + tl.arange(0, M)[None, :])
    tl.store(out_ptr + tl.arange(0, P)[:, None] * M + tl.arange(0, M)[None, :], tl.gather(s, i, 0))


def test_gather(dev, rng):
    N, M, P = 16, 8, 32
    src = rng.standard_normal((N, M)).astype(np.float32)
    idx = rng.integers(0, N, (P, M)).astype(np.int32)
    out = dev.put(np.full((P, M), np.nan, np.float32))
    gather_kernel[(1,)](dev.put(src), dev.put(idx), out, N=N, M=M, P=P)
    np.testing.assert_array_equal(dev.get(out), np.take_along_axis(src, idx, 0))


@tiles.jit
def gather_any_kernel(src_ptr, idx_ptr, out_ptr, N: tl.constexpr, M: tl.constexpr, P: tl.constexpr,
                      Q: tl.constexpr, AXIS: tl.constexpr):
    # src [N, M]; index and result [P, Q] (P = N along axis 1, Q = M along axis 0).
    s = tl.load(src_ptr + tl.arange(0, N)[:, None] * M + tl.arange(0, M)[None, :])
    i = tl.load(idx_ptr + tl.arange(0, P)[:, None] * Q + tl.arange(0, Q)[None, :])
    tl.store(out_ptr + tl.arange(0, P)[:, None] * Q + tl.arange(0, Q)[None, :], tl.gather(s, i, AXIS))


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dt", [np.float32, np.float16, np.int64])
def test_large_gather(dev, rng, axis, dt):
    # 128x64 sources (Triton's test_gather sizes), any element type; -0.0 comes back as -0.0.
    N, M = 128, 64
    P, Q = (256, M) if axis == 0 else (N, 32)
    src = (rng.standard_normal((N, M)) * 100).astype(dt)
    if dt != np.int64:
        src[3, 5] = -0.0
    idx = rng.integers(0, src.shape[axis], (P, Q)).astype(np.int64 if dt == np.int64 else np.int32)
    if axis == 0:
        idx[0, 5] = 3
    out = dev.put(np.zeros((P, Q), dt))
    gather_any_kernel[(1,)](dev.put(src), dev.put(idx), out, N=N, M=M, P=P, Q=Q, AXIS=axis)
    got = dev.get(out)
    np.testing.assert_array_equal(got, np.take_along_axis(src, idx, axis))
    if axis == 0 and dt != np.int64:
        assert np.signbit(got[0, 5])


def test_large_gather_compiles_small_through_shared_memory(ptxas):
    from test_compile import assemble

    k = tiles.compile(gather_any_kernel, signature={"src_ptr": "*fp32", "idx_ptr": "*i32", "out_ptr": "*fp32"},
                      constexprs=dict(N=128, M=64, P=256, Q=64, AXIS=0), target="sm_90a", num_warps=4)
    ptx = k.asm["ptx"]
    # One shared-memory read per result element a thread holds, not a sum over the source.
    assert ptx.count("ld.shared") == 256 * 64 // 128 and len(ptx) < 200_000, len(ptx)
    assemble(ptxas, ptx, "sm_90a")


def test_gather_checks_its_operands(monkeypatch):
    @tiles.jit
    def bad_shape(src_ptr, out_ptr):
        s = tl.load(src_ptr + tl.arange(0, 8)[:, None] * 4 + tl.arange(0, 4)[None, :])
        i = tl.zeros((8, 2), tl.int32)
        tl.store(out_ptr + tl.arange(0, 8)[:, None] * 2 + tl.arange(0, 2)[None, :], tl.gather(s, i, 0))

    with pytest.raises(tiles.CompilationError, match="every dimension but axis 0"):
        tiles.compile(bad_shape, signature={"src_ptr": "*fp32", "out_ptr": "*fp32"})
    # The interpreter, a bounds-checked debugger, names an index outside the source.
    monkeypatch.setenv("TILES_INTERPRET", "1")
    src = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    idx = np.zeros((32, 8), np.int32)
    idx[4, 2] = 16
    with pytest.raises(Exception, match="outside the source's 16 elements"):
        gather_kernel[(1,)](src, idx, np.zeros((32, 8), np.float32), N=16, M=8, P=32)


@tiles.jit
def shape_op_kernel(x_ptr, OP: tl.constexpr, DIM: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, 8)[:, None] * 4 + tl.arange(0, 4)[None, :])
    if OP == "sort_scalar":
        tl.store(x_ptr, tl.sort(tl.max(tl.max(x, 1), 0)))
    else:
        tl.store(x_ptr + tl.arange(0, 8)[:, None] * 4 + tl.arange(0, 4)[None, :], tl.flip(x, DIM))


@pytest.mark.parametrize("op, dim, msg", [("sort_scalar", 0, "sort needs a tensor of one or more dimensions"),
                                          ("flip", 2, "flip: dim 2 is out of range for a 2-D tensor"),
                                          ("flip", -3, "flip: dim -3 is out of range")])
def test_sort_and_flip_name_a_bad_dimension(op, dim, msg, monkeypatch):
    with pytest.raises(tiles.CompilationError, match=msg):
        tiles.compile(shape_op_kernel, signature={"x_ptr": "*fp32"}, constexprs={"OP": op, "DIM": dim})
    monkeypatch.setenv("TILES_INTERPRET", "1")
    with pytest.raises(Exception, match=msg):
        shape_op_kernel[(1,)](np.zeros(32, np.float32), OP=op, DIM=dim)


@tiles.jit
def bmm_kernel(a_ptr, b_ptr, c_ptr, B: tl.constexpr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    bi = tl.arange(0, B)[:, None, None]
    mi = tl.arange(0, M)[None, :, None]
    ki = tl.arange(0, K)[None, None, :]
    a = tl.load(a_ptr + bi * M * K + mi * K + ki)
    kr = tl.arange(0, K)[None, :, None]
    ni = tl.arange(0, N)[None, None, :]
    b = tl.load(b_ptr + bi * K * N + kr * N + ni)
    acc = tl.zeros((B, M, N), dtype=tl.float32) + 1.0
    c = tl.dot(a, b, acc)
    tl.store(c_ptr + bi * M * N + mi * N + ni, c)


def test_batched_dot(dev, rng):
    B, M, N, K = 4, 32, 16, 32
    a = rng.standard_normal((B, M, K)).astype(np.float16)
    b = rng.standard_normal((B, K, N)).astype(np.float16)
    c = dev.put(np.full((B, M, N), np.nan, np.float32))
    bmm_kernel[(1,)](dev.put(a), dev.put(b), c, B=B, M=M, N=N, K=K)
    ref = np.einsum("bmk,bkn->bmn", a.astype(np.float64), b.astype(np.float64)) + 1.0
    got = dev.get(c)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-2


@tiles.jit
def multidim_dot_kernel(x_ptr, y_ptr, z_ptr, RANK: tl.constexpr, TRANS: tl.constexpr):
    # Two batch dimensions; `tl.trans` with no dims swaps the last two (a batched transpose).
    n = 256 << RANK
    x = tl.load(x_ptr + tl.arange(0, n)).reshape([2] * (RANK - 2) + [32, 32])
    y = tl.load(y_ptr + tl.arange(0, n)).reshape([2] * (RANK - 2) + [32, 32])
    if TRANS:
        x = tl.trans(x)
    z = tl.dot(x, y, tl.full([2] * (RANK - 2) + [32, 32], 0.5, tl.float32))
    tl.store(z_ptr + tl.arange(0, n), z.reshape([n]))


@pytest.mark.parametrize("trans", [False, True])
def test_dot_with_several_batch_dimensions(dev, rng, trans):
    shape = (2, 2, 32, 32)
    x = rng.integers(-4, 5, shape).astype(np.float16)
    y = rng.integers(-4, 5, shape).astype(np.float16)
    z = dev.put(np.zeros(shape, np.float32))
    multidim_dot_kernel[(1,)](dev.put(x), dev.put(y), z, RANK=4, TRANS=trans)
    xa = np.swapaxes(x, -1, -2) if trans else x
    np.testing.assert_array_equal(dev.get(z), xa.astype(np.float64) @ y.astype(np.float64) + 0.5)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_compile(ptxas, target):
    from test_compile import assemble

    for op in ("flip", "sort", "topk"):
        k = tiles.compile(rows_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32"},
                          constexprs=dict(OP=op, R=4, C=32, K=8), target=target)
        assemble(ptxas, k.asm["ptx"], target)
    k = tiles.compile(bmm_kernel, signature={"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32"},
                      constexprs=dict(B=4, M=32, N=16, K=32), target=target)
    assemble(ptxas, k.asm["ptx"], target)
    for kern, sig, cx in [(histogram_kernel, {"x_ptr": "*i32", "h_ptr": "*i32", "n": "i32"}, dict(N=256, BINS=32)),
                          (gather_kernel, {"src_ptr": "*fp32", "idx_ptr": "*i32", "out_ptr": "*fp32"},
                           dict(N=16, M=8, P=32)),
                          (bitonic_merge_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32"}, dict(R=4, C=64, DESC=True)),
                          (multidim_dot_kernel, {"x_ptr": "*fp16", "y_ptr": "*fp16", "z_ptr": "*fp32"},
                           dict(RANK=4, TRANS=True))]:
        assemble(ptxas, tiles.compile(kern, signature=sig, constexprs=cx, target=target).asm["ptx"], target)
