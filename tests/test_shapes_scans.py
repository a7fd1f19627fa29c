"""Scans (cumsum, cumprod, associative_scan, reverse) and shape ops (trans, permute, reshape,
view, ravel, join, split, interleave) in both modes, and compiled by ptxas."""

from __future__ import annotations

import numpy as np
import pytest
from test_compile import assemble

import tiles
import tiles.language as tl


@tiles.jit
def scan_kernel(x_ptr, out_ptr, OP: tl.constexpr, AXIS: tl.constexpr, REVERSE: tl.constexpr, M: tl.constexpr,
                N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    offs = rm[:, None] * N + rn[None, :]
    x = tl.load(x_ptr + offs)
    if OP == "cumsum":
        y = tl.cumsum(x, axis=AXIS, reverse=REVERSE)
    elif OP == "cumprod":
        y = tl.cumprod(x, axis=AXIS, reverse=REVERSE)
    else:
        y = tl.associative_scan(x, AXIS, _last_nonzero, reverse=REVERSE)
    tl.store(out_ptr + offs, y)


@tiles.jit
def _last_nonzero(a, b):
    return tl.where(b != 0, b, a)


@tiles.jit
def scan1d_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(out_ptr + offs, tl.cumsum(x, 0), mask=offs < n)


@tiles.jit
def shapes_kernel(x_ptr, t_ptr, r_ptr, j_ptr, s_ptr, i_ptr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    xt = tl.trans(x)
    tl.store(t_ptr + rn[:, None] * M + rm[None, :], xt)
    flat = tl.reshape(x, [M * N])
    tl.store(r_ptr + tl.arange(0, M * N), flat * 2)
    j = tl.join(x, x + 1000)
    jr = tl.ravel(j)
    tl.store(j_ptr + tl.arange(0, 2 * M * N), jr)
    a, b = tl.split(tl.reshape(x, [M, N // 2, 2]))
    rh = tl.arange(0, N // 2)
    tl.store(s_ptr + rm[:, None] * (N // 2) + rh[None, :], a - b)
    il = tl.interleave(rm, rm + 100)
    tl.store(i_ptr + tl.arange(0, 2 * M), il)


@tiles.jit
def permute3d_kernel(x_ptr, out_ptr, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr):
    ra = tl.arange(0, A)[:, None, None]
    rb = tl.arange(0, B)[None, :, None]
    rc = tl.arange(0, C)[None, None, :]
    x = tl.load(x_ptr + ra * B * C + rb * C + rc)
    y = tl.permute(x, (2, 0, 1))
    oc = tl.arange(0, C)[:, None, None]
    oa = tl.arange(0, A)[None, :, None]
    ob = tl.arange(0, B)[None, None, :]
    tl.store(out_ptr + oc * A * B + oa * B + ob, y)


def ref_scan(op, x, axis, reverse):
    y = np.flip(x, axis) if reverse else x
    if op == "cumsum":
        r = np.cumsum(y, axis=axis, dtype=np.float64 if x.dtype.kind == "f" else None).astype(x.dtype)
    elif op == "cumprod":
        r = np.cumprod(y, axis=axis).astype(x.dtype)
    else:
        r = np.copy(y)
        moved = np.moveaxis(r, axis, 0)
        for j in range(1, moved.shape[0]):
            moved[j] = np.where(moved[j] != 0, moved[j], moved[j - 1])
    return np.flip(r, axis) if reverse else r


@pytest.mark.parametrize("op", ["cumsum", "cumprod", "last_nonzero"])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shape", [(8, 256), (64, 32), (128, 16)])
def test_scans(dev, rng, op, axis, reverse, shape):
    M, N = shape
    if op == "cumprod":
        x = rng.choice(np.array([1, 1, 1, -1, 2], np.int32), size=shape)
    elif op == "last_nonzero":
        x = rng.integers(-3, 3, size=shape).astype(np.int32) * (rng.random(shape) < 0.3)
        x = x.astype(np.int32)
    else:
        x = rng.standard_normal(shape).astype(np.float32)
    out = np.zeros_like(x)
    xd, od = dev.put(x), dev.put(out)
    scan_kernel[(1,)](xd, od, OP=op, AXIS=axis, REVERSE=reverse, M=M, N=N)
    np.testing.assert_allclose(dev.get(od), ref_scan(op, x, axis, reverse), rtol=1e-5, atol=1e-4)


def test_long_1d_cumsum_with_mask(dev, rng):
    n = 3000
    x = rng.integers(-100, 100, n).astype(np.int16)
    out = np.zeros(n, np.int32)
    xd, od = dev.put(x), dev.put(out)
    scan1d_kernel[(1,)](xd, od, n, BLOCK=4096)
    np.testing.assert_array_equal(dev.get(od), np.cumsum(x.astype(np.int32)))


def test_shape_ops(dev, rng):
    M, N = 16, 32
    x = rng.integers(-500, 500, (M, N)).astype(np.int32)
    t, r, j = np.zeros((N, M), np.int32), np.zeros(M * N, np.int32), np.zeros(2 * M * N, np.int32)
    s, il = np.zeros((M, N // 2), np.int32), np.zeros(2 * M, np.int32)
    d = [dev.put(a) for a in (x, t, r, j, s, il)]
    shapes_kernel[(1,)](*d, M=M, N=N)
    np.testing.assert_array_equal(dev.get(d[1]), x.T)
    np.testing.assert_array_equal(dev.get(d[2]), x.reshape(-1) * 2)
    np.testing.assert_array_equal(dev.get(d[3]), np.stack([x, x + 1000], -1).reshape(-1))
    pairs = x.reshape(M, N // 2, 2)
    np.testing.assert_array_equal(dev.get(d[4]), pairs[..., 0] - pairs[..., 1])
    np.testing.assert_array_equal(dev.get(d[5]), np.stack([np.arange(M), np.arange(M) + 100], -1).reshape(-1))


def test_permute_3d(dev, rng):
    A, B, C = 4, 8, 16
    x = rng.standard_normal((A, B, C)).astype(np.float32)
    out = np.zeros((C, A, B), np.float32)
    xd, od = dev.put(x), dev.put(out)
    permute3d_kernel[(1,)](xd, od, A=A, B=B, C=C)
    np.testing.assert_array_equal(dev.get(od), np.transpose(x, (2, 0, 1)))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_scan_and_shape_kernels_assemble(ptxas, target):
    cases = [
        (scan_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32"},
         {"OP": "cumsum", "AXIS": 1, "REVERSE": True, "M": 8, "N": 256}),
        (scan_kernel, {"x_ptr": "*i32", "out_ptr": "*i32"},
         {"OP": "last_nonzero", "AXIS": 0, "REVERSE": False, "M": 128, "N": 16}),
        (scan1d_kernel, {"x_ptr": "*i16", "out_ptr": "*i32", "n": "i32"}, {"BLOCK": 4096}),
        (shapes_kernel, {k: "*i32" for k in ("x_ptr", "t_ptr", "r_ptr", "j_ptr", "s_ptr", "i_ptr")},
         {"M": 16, "N": 32}),
        (permute3d_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32"}, {"A": 4, "B": 8, "C": 16}),
    ]
    for fn, sig, cx in cases:
        k = tiles.compile(fn, signature=sig, constexprs=cx, target=target)
        assemble(ptxas, k.asm["ptx"], target)


@tiles.jit
def rank6_kernel(x_ptr, out_ptr, sum_ptr, cum_ptr):
    # Tiles of rank 5 and 6 (Triton's limit is 8): block-scaled matmuls reshape their scales so.
    x = tl.load(x_ptr + tl.arange(0, 512))
    x5 = tl.reshape(x, (2, 4, 4, 2, 8))
    y = tl.permute(x5, (3, 0, 2, 1, 4)) * 2 + tl.expand_dims(tl.arange(0, 8), (0, 1, 2, 3)).to(tl.float32)
    tl.store(out_ptr + tl.arange(0, 512), tl.reshape(y, (512,)))
    x6 = tl.reshape(x, (2, 2, 2, 4, 4, 4))
    s = tl.sum(x6, axis=3)  # (2, 2, 2, 4, 4)
    tl.store(sum_ptr + tl.arange(0, 128), tl.ravel(s))
    c = tl.cumsum(x5, axis=4)
    tl.store(cum_ptr + tl.arange(0, 512), tl.reshape(c, (512,)))


def test_rank_5_and_6_tiles(dev, rng):
    x = rng.standard_normal(512).astype(np.float32)
    out, sums, cum = (dev.put(np.zeros(n, np.float32)) for n in (512, 128, 512))
    rank6_kernel[(1,)](dev.put(x), out, sums, cum)
    x5 = x.reshape(2, 4, 4, 2, 8)
    want = x5.transpose(3, 0, 2, 1, 4) * 2 + np.arange(8, dtype=np.float32)
    np.testing.assert_allclose(dev.get(out), want.reshape(-1), rtol=1e-6)
    np.testing.assert_allclose(dev.get(sums), x.astype(np.float64).reshape(2, 2, 2, 4, 4, 4).sum(3).reshape(-1),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dev.get(cum), np.cumsum(x5.astype(np.float64), axis=4).reshape(-1), rtol=1e-5,
                               atol=1e-5)


def test_rank_6_kernel_assembles(ptxas):
    k = tiles.compile(rank6_kernel, signature={"x_ptr": "*fp32:16", "out_ptr": "*fp32:16", "sum_ptr": "*fp32:16",
                                               "cum_ptr": "*fp32:16"}, target="sm_90a")
    assemble(ptxas, k.asm["ptx"], "sm_90a")


def test_rank_above_16_is_a_clear_error():
    @tiles.jit
    def too_deep(x_ptr):
        x = tl.load(x_ptr + tl.arange(0, 131072))
        tl.store(x_ptr + tl.arange(0, 131072), tl.ravel(tl.reshape(x, [2] * 17)))

    with pytest.raises(tiles.CompilationError, match="rank"):
        tiles.compile(too_deep, signature={"x_ptr": "*fp32"})


@tiles.jit
def unpack_nibbles_kernel(q_ptr, s_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr):
    # Eight 4-bit values a 32-bit word, unpacked by interleaving the words thrice (a join and a
    # reshape each) and shifting each copy by its own amount, then split back into halves and
    # rejoined: the shape ops of 4-bit weight dequantisation.
    rr = tl.arange(0, R)
    rc = tl.arange(0, C)
    q = tl.load(q_ptr + rr[:, None] * C + rc[None, :])
    w = tl.interleave(q, q)
    w = tl.interleave(w, w)
    w = tl.interleave(w, w)
    order = ((tl.arange(0, 2) * 4)[None, :] + tl.arange(0, 4)[:, None]).reshape(8)
    shifts = tl.reshape(tl.broadcast_to(order[None, :] * 4, (R * C, 8)), (R, C * 8))
    v = (w >> shifts) & 0xF
    lo, hi = tl.split(tl.reshape(v, (R, C * 4, 2)))
    v = tl.reshape(tl.join(hi, lo), (R, C * 8))
    scale = tl.load(s_ptr + tl.arange(0, C * 8))
    y = (v.to(tl.float32) * scale[None, :]).to(tl.float16)
    tl.store(out_ptr + rr[:, None] * (C * 8) + tl.arange(0, C * 8)[None, :], y)


def _unpack_nibbles_ref(q, s):
    order = [0, 4, 1, 5, 2, 6, 3, 7]
    u = q.astype(np.int64) & 0xFFFFFFFF
    v = np.zeros((q.shape[0], q.shape[1] * 8), np.int64)
    for j in range(8):
        v[:, j::8] = (u >> (order[j] * 4)) & 0xF
    v = v.reshape(q.shape[0], -1, 2)[:, :, ::-1].reshape(q.shape[0], -1)  # halves swapped
    return (v.astype(np.float32) * s[None, :]).astype(np.float16)  # rounded from fp32, as the kernel


@pytest.mark.parametrize("in_registers", ["0", "1"])
def test_unpacking_shape_ops(dev, rng, monkeypatch, in_registers):
    # By default (TILES_SHAPE_OPS_IN_REGISTERS=0 turns it off) the joins, splits and reshapes
    # whose elements stay in their threads take no shared memory (the interpreter runs the
    # same semantics either way).
    monkeypatch.setenv("TILES_SHAPE_OPS_IN_REGISTERS", in_registers)
    R, C = 32, 16
    q = rng.integers(-2**31, 2**31, (R, C), dtype=np.int64).astype(np.int32)
    s = (rng.random(C * 8) + 0.5).astype(np.float32)
    out = dev.put(np.zeros((R, C * 8), np.float16))
    unpack_nibbles_kernel[(1,)](dev.put(q), dev.put(s), out, R=R, C=C)
    np.testing.assert_array_equal(dev.get(out), _unpack_nibbles_ref(q, s))


@tiles.jit
def unpack_to_dot_kernel(a_ptr, q_ptr, z_ptr, s_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                         BK: tl.constexpr):
    # 4-bit weights and zero points unpacked by three interleaves each, as vLLM's AWQ GEMM does,
    # scaled, into a dot's `b`: the chains' results are wanted in the dot operand's layout.
    rm = tl.arange(0, M)
    rk = tl.arange(0, BK)
    rn8 = tl.arange(0, N // 8)
    order = ((tl.arange(0, 2) * 4)[None, :] + tl.arange(0, 4)[:, None]).reshape(8)
    shifts = tl.reshape(tl.broadcast_to(order[None, :] * 4, (BK * (N // 8), 8)), (BK, N))
    acc = tl.zeros((M, N), tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
        q = tl.load(q_ptr + (k0 + rk)[:, None] * (N // 8) + rn8[None, :])
        w = tl.interleave(q, q)
        w = tl.interleave(w, w)
        w = tl.interleave(w, w)
        z = tl.load(z_ptr + (k0 // BK) * (N // 8) + rn8)[None, :]
        z = tl.interleave(z, z)
        z = tl.interleave(z, z)
        z = tl.interleave(z, z)
        z = tl.broadcast_to(z, (BK, N))
        sc = tl.load(s_ptr + (k0 // BK) * N + tl.arange(0, N))[None, :]
        b = (((w >> shifts) & 0xF) - ((z >> shifts) & 0xF)).to(tl.float16) * sc
        acc = tl.dot(a, b, acc)
    tl.store(out_ptr + rm[:, None] * N + tl.arange(0, N)[None, :], acc)


def _unpack_to_dot_ref(a, q, z, s, bk):
    def unpack(x):
        order = [0, 4, 1, 5, 2, 6, 3, 7]
        u = x.astype(np.int64) & 0xFFFFFFFF
        out = np.zeros((x.shape[0], x.shape[1] * 8), np.int64)
        for j in range(8):
            out[:, j::8] = (u >> (order[j] * 4)) & 0xF
        return out
    b = (unpack(q) - np.repeat(unpack(z), bk, axis=0)).astype(np.float16)
    b = (b * np.repeat(s, bk, axis=0)).astype(np.float64)  # rounded to fp16, as the kernel
    return a.astype(np.float64) @ b


def _unpack_to_dot_args(rng, M=16, N=64, K=256, BK=128):
    a = (rng.random((M, K)) - 0.5).astype(np.float16)
    q = rng.integers(-2**31, 2**31, (K, N // 8), dtype=np.int64).astype(np.int32)
    z = rng.integers(-2**31, 2**31, (K // BK, N // 8), dtype=np.int64).astype(np.int32)
    s = (rng.random((K // BK, N)) / 8 + 0.01).astype(np.float16)
    return a, q, z, s


@pytest.mark.parametrize("in_registers", ["0", "1"])
def test_unpacking_into_a_dot(dev, rng, monkeypatch, in_registers):
    monkeypatch.setenv("TILES_SHAPE_OPS_IN_REGISTERS", in_registers)
    a, q, z, s = _unpack_to_dot_args(rng)
    out = dev.put(np.zeros((16, 64), np.float32))
    unpack_to_dot_kernel[(1,)](dev.put(a), dev.put(q), dev.put(z), dev.put(s), out, M=16, N=64, K=256, BK=128)
    ref = _unpack_to_dot_ref(a, q, z, s, 128)
    np.testing.assert_allclose(dev.get(out), ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_unpacking_into_a_dot_assemble(ptxas, monkeypatch, target):
    # The interleaves' results are wanted in the dot operand's layout: the chains, the shifts and
    # the scaling run in a blocked layout with the chains' 8-element run in each thread (no data
    # moves), and one conversion of the fp16 `b` follows.
    def compile_(flag):
        monkeypatch.setenv("TILES_SHAPE_OPS_IN_REGISTERS", flag)
        return tiles.compile(unpack_to_dot_kernel, signature={"a_ptr": "*fp16", "q_ptr": "*i32", "z_ptr": "*i32",
                                                              "s_ptr": "*fp16", "out_ptr": "*fp32"},
                             constexprs={"M": 16, "N": 64, "K": 256, "BK": 128},
                             specialization={"a_ptr": 16, "q_ptr": 16, "z_ptr": 16, "s_ptr": 16, "out_ptr": 16},
                             target=target, num_warps=4)

    k = compile_("1")
    # The words, and the zero points and scales loaded as vectors and used as rows
    # (`load(...)[None, :]`), all come through cp.async rings two iterations ahead.
    reads = [line for line in k.asm["tir_opt"].splitlines() if "local_load" in line]
    assert len(reads) == 3 and any("<1x8xi32" in r for r in reads) and any("<1x64xfp16" in r for r in reads), reads
    off, on = compile_("0").asm["ptx"], k.asm["ptx"]
    assert on.count("bar.sync") * 3 <= off.count("bar.sync"), (on.count("bar.sync"), off.count("bar.sync"))
    assert on.count("st.shared") * 2 <= off.count("st.shared"), (on.count("st.shared"), off.count("st.shared"))
    report = assemble(ptxas, on, target)
    assert "0 bytes spill stores" in report, report


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_unpacking_shape_ops_in_registers_assemble(ptxas, monkeypatch, target):
    # With the switch on, the three interleaves, the split and the join move nothing through
    # shared memory (only the shifts' reshape of a broadcast does), and ptxas takes the PTX.
    def ptx(flag):
        monkeypatch.setenv("TILES_SHAPE_OPS_IN_REGISTERS", flag)
        k = tiles.compile(unpack_nibbles_kernel, signature={"q_ptr": "*i32", "s_ptr": "*fp32", "out_ptr": "*fp16"},
                          constexprs={"R": 32, "C": 16}, specialization={"q_ptr": 16, "s_ptr": 16, "out_ptr": 16},
                          target=target, num_warps=4)
        return k.asm["ptx"]

    off, on = ptx("0"), ptx("1")
    assert on.count("bar.sync") * 4 <= off.count("bar.sync"), (on.count("bar.sync"), off.count("bar.sync"))
    assert on.count("st.shared") * 2 <= off.count("st.shared")
    report = assemble(ptxas, on, target)
    assert "0 bytes spill stores" in report, report


@tiles.jit
def hypercube_kernel(x_ptr, y_ptr, AXIS: tl.constexpr):
    # A 2048-element tile as an 11-dimensional hypercube of 2s, the shape bitonic sorts written
    # in the language work on (lmdeploy's top-k): XOR one half of each pair along AXIS with
    # the pair's XOR.
    offs = tl.arange(0, 2048)
    x = tl.load(x_ptr + offs)
    h = tl.reshape(x, [2] * 11)
    s = tl.xor_sum(h, AXIS, keep_dims=True)
    right = tl.reshape(tl.arange(0, 2), [1] * (10 - AXIS) + [2] + [1] * AXIS)
    z = tl.where(right == 1, h ^ s, h)
    tl.store(y_ptr + offs, tl.reshape(z, [2048]))


@pytest.mark.parametrize("axis", [0, 4, 10])
def test_rank_eleven_tiles(dev, rng, axis):
    x = rng.integers(-2**31, 2**31 - 1, 2048, dtype=np.int64).astype(np.int32)
    y = dev.put(np.zeros(2048, np.int32))
    hypercube_kernel[(1,)](dev.put(x), y, AXIS=axis)
    h = x.reshape([2] * 11)
    s = np.bitwise_xor.reduce(h, axis=axis, keepdims=True)
    right = (np.arange(2) == 1).reshape([1] * (10 - axis) + [2] + [1] * axis)
    np.testing.assert_array_equal(dev.get(y), np.where(right, h ^ s, h).reshape(-1))


def test_rank_eleven_tiles_assemble(ptxas):
    k = tiles.compile(hypercube_kernel, signature={"x_ptr": "*i32", "y_ptr": "*i32"}, constexprs={"AXIS": 4},
                      target="sm_90a")
    assemble(ptxas, k.asm["ptx"], "sm_90a")


@tiles.jit
def rank_twelve_kernel(x_ptr, y_ptr, OP: tl.constexpr):
    # Shape ops, scans, sorts and reductions on a 12-dimensional tile of 2s.
    offs = tl.arange(0, 4096)
    h = tl.reshape(tl.load(x_ptr + offs), [2] * 12)
    if OP == "permute":
        z = tl.permute(h, [11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0])
    elif OP == "cumsum":
        z = tl.cumsum(h, 7)
    elif OP == "sort":
        z = tl.sort(h, 11)
    elif OP == "sum":
        z = tl.broadcast_to(tl.sum(h, 3, keep_dims=True), [2] * 12)
    elif OP == "split_join":
        a, b = tl.split(h)
        z = tl.join(b, a)
    elif OP == "flip":
        z = tl.flip(h, 5)
    else:
        z = h + tl.trans(h, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 10])
    tl.store(y_ptr + offs, tl.reshape(z, [4096]))


RANK_TWELVE_OPS = ["permute", "cumsum", "sort", "sum", "split_join", "flip", "trans"]


@pytest.mark.parametrize("op", RANK_TWELVE_OPS)
def test_rank_twelve_ops(dev, rng, op):
    x = rng.integers(-1000, 1000, 4096).astype(np.int32)
    y = dev.put(np.zeros(4096, np.int32))
    rank_twelve_kernel[(1,)](dev.put(x), y, OP=op)
    h = x.reshape([2] * 12)
    want = {"permute": lambda: h.transpose(list(range(11, -1, -1))), "cumsum": lambda: np.cumsum(h, 7),
            "sort": lambda: np.sort(h, 11), "sum": lambda: np.broadcast_to(h.sum(3, keepdims=True), h.shape),
            "split_join": lambda: np.stack([h[..., 1], h[..., 0]], -1), "flip": lambda: np.flip(h, 5),
            "trans": lambda: h + np.swapaxes(h, 10, 11)}[op]()
    np.testing.assert_array_equal(dev.get(y), np.ascontiguousarray(want).reshape(-1))


def test_rank_twelve_ops_assemble(ptxas):
    for op in RANK_TWELVE_OPS:
        k = tiles.compile(rank_twelve_kernel, signature={"x_ptr": "*i32", "y_ptr": "*i32"}, constexprs={"OP": op},
                          target="sm_90a")
        assemble(ptxas, k.asm["ptx"], "sm_90a")
