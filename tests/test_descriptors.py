"""Tensor descriptors (Triton >= 3.6): `tl.make_tensor_descriptor` in the kernel and host
`TensorDescriptor` arguments; block loads and stores with out-of-range elements padded (zero or
NaN) and not written — in both modes, and compile-only under ptxas."""

from __future__ import annotations

import numpy as np
import pytest

import tiles
import tiles.language as tl


@tiles.jit
def device_desc_kernel(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr, PAD: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN], padding_option=PAD)
    yd = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    block = xd.load([pid_m * BM, pid_n * BN])
    yd.store([pid_m * BM, pid_n * BN], block * 2 + 1)


@pytest.mark.parametrize("pad", ["zero", "nan"])
def test_device_descriptor_copy_with_ragged_edges(dev, rng, pad):
    M, N, BM, BN = 100, 70, 32, 32
    x = rng.standard_normal((M, N)).astype(np.float32)
    y = dev.put(np.full((M, N), -7.0, np.float32))
    device_desc_kernel[(4, 3)](dev.put(x), y, M, N, BM=BM, BN=BN, PAD=pad)
    np.testing.assert_allclose(dev.get(y), x * 2 + 1, rtol=1e-6)


@tiles.jit
def expert_matmul_kernel(x_ptr, w_ptr, y_ptr, M, E, N: tl.constexpr, K: tl.constexpr, BM: tl.constexpr,
                         BN: tl.constexpr, BK: tl.constexpr):
    # The style of grouped-GEMM MoE kernels: a 3-d weight [E, N, K] read in [1, BN, BK] blocks,
    # reshaped to [BN, BK] and transposed into the dot.
    e, pm, pn = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[E * M, K], strides=[K, 1], block_shape=[BM, BK])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[E, N, K], strides=[N * K, K, 1], block_shape=[1, BN, BK])
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        x = x_desc.load([e * M + pm * BM, k])
        w = tl.reshape(w_desc.load([e, pn * BN, k]), (BN, BK))
        acc += tl.dot(x, w.T)
    rows = e * M + pm * BM + tl.arange(0, BM)
    cols = pn * BN + tl.arange(0, BN)
    tl.store(y_ptr + rows[:, None] * N + cols[None, :], acc, mask=(cols[None, :] < N) & (rows[:, None] < E * M))


def test_unit_block_dimensions_are_loaded_as_a_smaller_tile(dev, rng):
    E, M, N, K, BM, BN, BK = 3, 32, 48, 64, 32, 32, 32
    x = rng.standard_normal((E * M, K)).astype(np.float16)
    w = rng.standard_normal((E, N, K)).astype(np.float16)
    y = dev.put(np.full((E * M, N), np.nan, np.float32))
    expert_matmul_kernel[(E, M // BM, 2)](dev.put(x), dev.put(w), y, M, E, N=N, K=K, BM=BM, BN=BN, BK=BK)
    ref = np.concatenate([x[i * M:(i + 1) * M].astype(np.float64) @ w[i].astype(np.float64).T for i in range(E)])
    np.testing.assert_allclose(dev.get(y), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_unit_block_dimensions_do_not_stop_pipelining(ptxas, target):
    # The [1, BN, BK] block is loaded as [BN, BK] and the user's reshape folds away: both
    # operands go through rings, as with 2-d descriptors.
    from test_compile import assemble

    sig = {"x_ptr": "*fp16:16", "w_ptr": "*fp16:16", "y_ptr": "*fp32:16", "M": "i32:16", "E": "i32"}
    k = tiles.compile(expert_matmul_kernel, signature=sig, target=target, num_warps=4, num_stages=3,
                      constexprs=dict(N=1024, K=2048, BM=64, BN=128, BK=64))
    ir = k.asm["tir_opt"]
    assert "reshape" not in ir and "async_copy {buf = 1" in ir, ir
    assert "<1x128x64x" not in ir, "a 3-d block is left"
    assemble(ptxas, k.asm["ptx"], target)


@tiles.jit
def padded_rows_kernel(x_ptr, y_ptr, M, N, ld, BM: tl.constexpr, BN: tl.constexpr):
    # Rows of N elements `ld` apart: a row can end inside a 16-byte granule.
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[ld, 1], block_shape=[BM, BN])
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    block = xd.load([pid_m * BM, pid_n * BN])
    offs_m = pid_m * BM + tl.arange(0, BM)[:, None]
    offs_n = pid_n * BN + tl.arange(0, BN)[None, :]
    tl.store(y_ptr + offs_m * BN * 2 + offs_n, block.to(tl.float32) * 2 + 1, mask=offs_m < M)


@pytest.mark.parametrize("N", [44, 37, 48])
def test_device_descriptor_rows_ending_inside_a_granule(dev, rng, N):
    # fp16 rows of N in rows of 48 (16-byte multiples, as the contract asks) whose padding is
    # NaN: the elements past N read as zero, never the NaN beside them.
    M, ld, BM, BN = 64, 48, 32, 32
    x = np.full((M, ld), np.nan, np.float16)
    x[:, :N] = rng.standard_normal((M, N))
    y = dev.put(np.full((M, 2 * BN), -7.0, np.float32))
    padded_rows_kernel[(M // BM, 2)](dev.put(x), y, M, N, ld, BM=BM, BN=BN)
    want = np.ones((M, 2 * BN), np.float32)
    want[:, :N] = x[:, :N].astype(np.float32) * 2 + 1
    np.testing.assert_allclose(dev.get(y), want, rtol=1e-3)


def test_padded_rows_read_whole_granules(ptxas):
    # The compiled load reads 4 elements at once (the width its user stores) though N is
    # unknown: the row's last granule is read whole, its elements past N selected out after.
    from test_compile import assemble

    k = tiles.compile(padded_rows_kernel, signature={"x_ptr": "*fp16:16", "y_ptr": "*fp32:16", "M": "i32",
                                                     "N": "i32", "ld": "i32:16"},
                      constexprs={"BM": 32, "BN": 32}, target="sm_90a")
    assert "whole_granules" in k.asm["tir"]
    assert "ld.global.v2.b32" in k.asm["ptx"] and "selp" in k.asm["ptx"]
    assemble(ptxas, k.asm["ptx"], "sm_90a")


@tiles.jit
def padding_kernel(x_ptr, out_ptr, M, N, B: tl.constexpr, PAD: tl.constexpr):
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[B, B], padding_option=PAD)
    blk = xd.load([M - B // 2, N - B // 2])
    r = tl.arange(0, B)
    tl.store(out_ptr + r[:, None] * B + r[None, :], blk)


@pytest.mark.parametrize("pad", ["zero", "nan"])
def test_descriptor_padding(dev, rng, pad):
    M, N, B = 40, 24, 16
    x = rng.standard_normal((M, N)).astype(np.float32)
    out = dev.put(np.zeros((B, B), np.float32))
    padding_kernel[(1,)](dev.put(x), out, M, N, B=B, PAD=pad)
    got = dev.get(out)
    want = np.full((B, B), 0.0 if pad == "zero" else np.nan, np.float32)
    want[:B // 2, :B // 2] = x[M - B // 2:, N - B // 2:]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_descriptor_kernels_assemble(ptxas, target):
    from test_compile import assemble

    k = tiles.compile(device_desc_kernel, signature={"x_ptr": "*fp32:16", "y_ptr": "*fp32:16", "M": "i32",
                                                     "N": "i32:16"}, constexprs={"BM": 64, "BN": 64, "PAD": "zero"},
                      target=target)
    assemble(ptxas, k.asm["ptx"], target)


@tiles.jit
def host_desc_kernel(x_desc, y_desc, BM: tl.constexpr, BN: tl.constexpr):
    # Host descriptors: the block shape comes with the argument.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    block = x_desc.load([pid_m * BM, pid_n * BN])
    y_desc.store([pid_m * BM, pid_n * BN], block.to(tl.float32) * 3)


def test_host_tensor_descriptors(dev, rng):
    from tiles.tools.tensor_descriptor import TensorDescriptor

    M, N, BM, BN = 70, 90, 32, 64
    x = rng.standard_normal((M, N)).astype(np.float16)
    y = np.zeros((M, N), np.float32)
    dx, dy = dev.put(x), dev.put(y)
    xd = TensorDescriptor.from_tensor(dx, [BM, BN])
    yd = TensorDescriptor.from_tensor(dy, [BM, BN])
    host_desc_kernel[(3, 2)](xd, yd, BM=BM, BN=BN)
    np.testing.assert_allclose(dev.get(dy), x.astype(np.float32) * 3, rtol=1e-6)


def _rows_block_hook(nargs):
    # Triton's tutorials (fused attention, persistent matmul) make host descriptors with a
    # dummy block and let each config's pre_hook set the real one before its launch.
    nargs["x_desc"].block_shape = [nargs["BM"], nargs["D"]]
    nargs["y_desc"].block_shape = [nargs["BM"], nargs["D"]]


@tiles.autotune(configs=[tiles.Config({"BM": bm}, num_warps=w, pre_hook=_rows_block_hook)
                         for bm, w in ((16, 4), (32, 4), (64, 8))], key=["M"])
@tiles.jit
def autotuned_rows_kernel(x_desc, y_desc, M, D: tl.constexpr, BM: tl.constexpr, STAGE: tl.constexpr):
    LN2: tl.constexpr = 0.6931471824645996
    scale: tl.constexpr = (2, 1) if STAGE & 2 else (1, 2)
    off = tl.program_id(0) * BM
    x = x_desc.load([off, 0])
    y_desc.store([off, 0], (x.T.T.to(tl.float32) * LN2 * scale[0]).to(tl.float16))


def test_autotune_pre_hook_sets_the_descriptor_blocks(dev, rng):
    from tiles.tools.tensor_descriptor import TensorDescriptor

    M, D = 200, 32
    x = rng.standard_normal((M, D)).astype(np.float16)
    dx, dy = dev.put(x), dev.put(np.full((M, D), np.nan, np.float16))
    xd = TensorDescriptor(dx, shape=[M, D], strides=[D, 1], block_shape=[1, 1])
    yd = TensorDescriptor(dy, shape=[M, D], strides=[D, 1], block_shape=[1, 1])
    autotuned_rows_kernel.cache.clear()
    autotuned_rows_kernel.fn.cache.clear()
    autotuned_rows_kernel[lambda meta: ((M + meta["BM"] - 1) // meta["BM"],)](xd, yd, M, D=D, STAGE=3)
    ref = x.astype(np.float64) * 0.6931471824645996 * 2
    np.testing.assert_allclose(dev.get(dy).astype(np.float64), ref, rtol=2e-3, atol=2e-3)
    assert autotuned_rows_kernel.best_config.kwargs["BM"] in (16, 32, 64)
    if dev.mode == "gpu":
        # Compiled ahead of the timing with each config's hook run first: one compile per
        # config, the blocks its hook set (none for the placeholder [1, 1] blocks).
        assert len(autotuned_rows_kernel.fn.cache) == 3


def test_descriptor_type_in_a_compile_signature(ptxas):
    from test_compile import assemble

    k = tiles.compile(host_desc_kernel, signature={"x_desc": "tensordesc<fp16[32, 64]>",
                                                   "y_desc": "tensordesc<fp32[32, 64]>"},
                      constexprs={"BM": 32, "BN": 64}, target="sm_90a")
    assert k.asm["tir"].count("_stride") >= 4
    assemble(ptxas, k.asm["ptx"], "sm_90a")


def test_bad_descriptors_are_clear_errors():
    from tiles.tools.tensor_descriptor import TensorDescriptor

    x = np.zeros((8, 8), np.float32)
    with pytest.raises(ValueError, match="Shape element 0 must be a power of 2"):
        TensorDescriptor.from_tensor(x, [3, 8])
    with pytest.raises(ValueError, match="contiguous"):
        TensorDescriptor(x, [8, 8], [1, 8], [8, 8])


@tiles.jit
def _desc_or_pointer(x, shape, strides, block_shape):
    # Triton's attention tutorial: a host descriptor passes through, a pointer gets one made.
    if isinstance(x, tl.tensor_descriptor):
        return x
    else:
        return tl.make_tensor_descriptor(x, shape, strides, block_shape)


@tiles.jit
def either_desc_kernel(x, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    x = _desc_or_pointer(x, [M, N], [N, 1], [BM, BN])
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    block = x.load([pid_m * BM, pid_n * BN])
    is_tensor = isinstance(block, tl.tensor) and not isinstance(BM, (tl.tensor, tl.tensor_descriptor))
    offs_m = pid_m * BM + tl.arange(0, BM)[:, None]
    offs_n = pid_n * BN + tl.arange(0, BN)[None, :]
    tl.store(y_ptr + offs_m * N + offs_n, block.to(tl.float32) * 2 + is_tensor, mask=(offs_m < M) & (offs_n < N))


@pytest.mark.parametrize("host", [False, True])
def test_isinstance_picks_descriptor_or_pointer(dev, rng, host):
    from tiles.tools.tensor_descriptor import TensorDescriptor

    M, N, BM, BN = 40, 72, 32, 64
    x = rng.standard_normal((M, N)).astype(np.float16)
    dx, dy = dev.put(x), dev.put(np.full((M, N), np.nan, np.float32))
    arg = TensorDescriptor.from_tensor(dx, [BM, BN]) if host else dx
    either_desc_kernel[(2, 2)](arg, dy, M, N, BM=BM, BN=BN)
    np.testing.assert_allclose(dev.get(dy), x.astype(np.float32) * 2 + 1, rtol=1e-6)


@tiles.jit
def desc_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, lda, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # The modern style of Triton's matmul: descriptors made in the kernel, loaded in the loop.
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[lda, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([pm * BM, k * BK])
        b = b_desc.load([k * BK, pn * BN])
        acc = tl.dot(a, b, acc)
    c_desc.store([pm * BM, pn * BN], acc)


@pytest.mark.parametrize("K, lda", [(96, 96), (40, 40), (44, 48)])
def test_device_descriptor_matmul_loop(dev, rng, K, lda):
    # K = 96: rows of whole 16-byte granules; K = 40: a K the compiler cannot know is whole
    # granules (40 is no multiple of 16: not specialised); K = 44 in rows of 48: each row of
    # `a` ends inside a granule whose last elements (NaN here) must not be read as data.
    M, N, BM, BN, BK = 64, 48, 32, 16, 32
    a = np.full((M, lda), np.nan, np.float16)
    a[:, :K] = rng.standard_normal((M, K))
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = dev.put(np.full((M, N), np.nan, np.float32))
    desc_matmul_kernel[(M // BM, N // BN)](dev.put(a), dev.put(b), c, M, N, K, lda, BM=BM, BN=BN, BK=BK)
    ref = a[:, :K].astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(dev.get(c), ref, rtol=1e-2, atol=1e-2)


def test_device_descriptor_loads_are_pipelined_with_rows_of_any_length(ptxas):
    from test_compile import assemble

    sig = {"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "c_ptr": "*fp32:16", "M": "i32:16", "N": "i32:16"}
    cx = {"BM": 128, "BN": 128, "BK": 64}
    whole = tiles.compile(desc_matmul_kernel, signature=dict(sig, K="i32:16", lda="i32:16"), constexprs=cx,
                          target="sm_90a", num_warps=8)
    ragged = tiles.compile(desc_matmul_kernel, signature=dict(sig, K="i32", lda="i32"), constexprs=cx,
                           target="sm_90a", num_warps=8)
    copies = [[line.split() for line in k.asm["ptx"].splitlines() if "cp.async.cg.shared.global" in line]
              for k in (whole, ragged)]
    assert "wgmma.mma_async" in whole.asm["ptx"] and "wgmma.mma_async" in ragged.asm["ptx"]
    # Both operands are pipelined either way. Bounds-checked copies take a mask uniform over
    # the copy as cp.async's ignore-src predicate (not a source size picked by `selp` chains);
    # with K unknown, `a`'s rows may end inside a copy, which then reads a source size.
    assert len(copies[0]) == len(copies[1]) > 0
    assert all(len(c) == 5 and c[-1].startswith("%p") for c in copies[0]), copies[0][:2]
    sizes = [c for c in copies[1] if c[-1].startswith("%r")]
    assert 0 < len(sizes) < len(copies[1])
    for k in (whole, ragged):
        assemble(ptxas, k.asm["ptx"], "sm_90a")


@tiles.jit
def rows_gather_scatter_kernel(x_ptr, idx_ptr, out_ptr, M, N, y0, R: tl.constexpr, BN: tl.constexpr):
    # Triton's row gather and scatter: one-row blocks, rows picked by a tile of indices.
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[1, BN])
    od = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[1, BN])
    rows = tl.load(idx_ptr + tl.arange(0, R))
    block = xd.gather(rows, y0)
    od.scatter(block * 2, rows + 1, y0)


def test_descriptor_row_gather_and_scatter(dev, rng):
    # Rows -2 and M are outside the tensor (read as zero, not written); the columns from y0
    # run past N (the same).
    M, N, R, BN, y0 = 40, 56, 16, 32, 40
    x = rng.standard_normal((M, N)).astype(np.float32)
    idx = rng.permutation(M - 1)[:R].astype(np.int32)
    idx[3], idx[7] = -2, M
    out = dev.put(np.full((M, N), -5.0, np.float32))
    rows_gather_scatter_kernel[(1,)](dev.put(x), dev.put(idx), out, M, N, y0, R=R, BN=BN)
    want = np.full((M, N), -5.0, np.float32)
    for r in idx:
        if 0 <= r < M and 0 <= r + 1 < M:
            want[r + 1, y0:] = x[r, y0:] * 2
    np.testing.assert_array_equal(dev.get(out), want)


@tiles.jit
def desc_reduce_kernel(x_ptr, v_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr, OP: tl.constexpr):
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    offs = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    v = tl.load(v_ptr + offs)
    m, n = tl.program_id(0) * BM, tl.program_id(1) * BN
    if OP == "add":
        xd.atomic_add([m, n], v)
    elif OP == "max":
        xd.atomic_max([m, n], v)
    else:
        xd.atomic_xor([m, n], v)


@pytest.mark.parametrize("op", ["add", "max", "xor"])
def test_descriptor_atomic_reductions(dev, rng, op):
    # Every program adds its block into the same (ragged) tensor: elements outside it untouched.
    M, N, BM, BN = 24, 40, 16, 32
    dt = np.float32 if op == "add" else np.int32
    x = rng.integers(-50, 50, (M, N)).astype(dt)
    v = rng.integers(-50, 50, (BM, BN)).astype(dt)
    dx = dev.put(x)
    desc_reduce_kernel[(2, 2)](dx, dev.put(v), M, N, BM=BM, BN=BN, OP=op)
    want = x.copy()
    f = {"add": np.add, "max": np.maximum, "xor": np.bitwise_xor}[op]
    for m in (0, BM):
        for n in (0, BN):
            blk = want[m:m + BM, n:n + BN]
            blk[...] = f(blk, v[:blk.shape[0], :blk.shape[1]])
    np.testing.assert_array_equal(dev.get(dx), want)


@tiles.jit
def tuple_of_descs_kernel(out_ptr, payload, BM: tl.constexpr, BN: tl.constexpr):
    a, b, k = payload[0], payload[1], payload[2]
    block = a.load([k * BM, 0]) + b.load([k * BM, BN]).to(tl.float32)
    offs = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    tl.store(out_ptr + offs, block)


def test_host_descriptors_inside_a_tuple(dev, rng):
    from tiles.tools.tensor_descriptor import TensorDescriptor

    BM, BN, k = 8, 16, 2
    a = rng.standard_normal((40, 32)).astype(np.float32)
    b = rng.standard_normal((48, 48)).astype(np.float16)
    da, db = dev.put(a), dev.put(b)
    out = dev.put(np.zeros((BM, BN), np.float32))
    payload = (TensorDescriptor.from_tensor(da, [BM, BN]), TensorDescriptor.from_tensor(db, [BM, BN]), k)
    tuple_of_descs_kernel[(1,)](out, payload, BM=BM, BN=BN)
    want = a[k * BM:(k + 1) * BM, :BN] + b[k * BM:(k + 1) * BM, BN:2 * BN].astype(np.float32)
    np.testing.assert_allclose(dev.get(out), want, rtol=1e-6)


@tiles.jit
def desc_remade_in_branches_kernel(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    # Triton's persistent batched GEMM remakes its descriptors inside an `if` in the loop: the
    # loop and the `if` carry them.
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    yd = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    for i in range(0, tl.cdiv(N, BN)):
        if i % 2 == 1:
            # The odd blocks read the second half of the rows, from a descriptor of its own.
            xd = tl.make_tensor_descriptor(x_ptr + (M // 2) * N, shape=[M - M // 2, N], strides=[N, 1],
                                           block_shape=[BM, BN])
        else:
            xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        yd.store([0, i * BN], xd.load([0, i * BN]) + 1)


def test_descriptors_carried_by_loops_and_ifs(dev, rng):
    M, N, BM, BN = 32, 64, 16, 16
    x = rng.standard_normal((M, N)).astype(np.float32)
    y = dev.put(np.zeros((M, N), np.float32))
    desc_remade_in_branches_kernel[(1,)](dev.put(x), y, M, N, BM=BM, BN=BN)
    want = np.zeros((M, N), np.float32)
    for i in range(N // BN):
        src = x[M // 2:M // 2 + BM] if i % 2 else x[:BM]
        want[:BM, i * BN:(i + 1) * BN] = src[:, i * BN:(i + 1) * BN] + 1
    np.testing.assert_allclose(dev.get(y), want, rtol=1e-6)


def test_new_descriptor_kernels_assemble(ptxas):
    from test_compile import assemble

    ks = [
        tiles.compile(rows_gather_scatter_kernel, signature={"x_ptr": "*fp16:16", "idx_ptr": "*i32:16",
                                                             "out_ptr": "*fp16:16", "M": "i32", "N": "i32:16",
                                                             "y0": "i32"}, constexprs={"R": 32, "BN": 64}),
        tiles.compile(desc_reduce_kernel, signature={"x_ptr": "*fp32:16", "v_ptr": "*fp32:16", "M": "i32",
                                                     "N": "i32"}, constexprs={"BM": 32, "BN": 32, "OP": "add"}),
        tiles.compile(tuple_of_descs_kernel,
                      signature={"out_ptr": "*fp32:16",
                                 "payload": "(tensordesc<fp32[8, 16]>,tensordesc<fp16[8, 16]>,i32)"},
                      constexprs={"BM": 8, "BN": 16}),
        tiles.compile(desc_remade_in_branches_kernel, signature={"x_ptr": "*fp32:16", "y_ptr": "*fp32:16",
                                                                 "M": "i32", "N": "i32"},
                      constexprs={"BM": 64, "BN": 64}),
    ]
    for k in ks:
        assemble(ptxas, k.asm["ptx"], "sm_90a")


def test_descriptor_gather_and_carry_errors():
    @tiles.jit
    def bad_gather(x_ptr, idx_ptr):
        xd = tl.make_tensor_descriptor(x_ptr, shape=[16, 16], strides=[16, 1], block_shape=[2, 16])
        xd.gather(tl.load(idx_ptr + tl.arange(0, 8)), 0)

    @tiles.jit
    def bad_if(x_ptr, c):
        xd = tl.make_tensor_descriptor(x_ptr, shape=[16, 16], strides=[16, 1], block_shape=[16, 16])
        if c > 0:
            xd = tl.make_tensor_descriptor(x_ptr, shape=[16, 16], strides=[16, 1], block_shape=[8, 16])
        tl.store(x_ptr, tl.sum(xd.load([0, 0])))

    with pytest.raises(tiles.CompilationError, match="one-row blocks"):
        tiles.compile(bad_gather, signature={"x_ptr": "*fp32", "idx_ptr": "*i32"})
    with pytest.raises(tiles.CompilationError, match="different tensor_descriptor"):
        tiles.compile(bad_if, signature={"x_ptr": "*fp32", "c": "i32"})


@tiles.jit
def descriptor_type_kernel(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    ty = xd.type
    tl.static_assert(isinstance(ty, tl.tensor_descriptor_type))
    tl.static_assert(ty.block_type == tl.block_type(tl.float32, [BM, BN]))
    tl.static_assert(len(ty.shape_type) == 2)
    block = xd.load([0, 0])
    tl.store(y_ptr + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :], block + 1)


def test_descriptor_and_tuple_types(dev, rng):
    # Triton's type classes: a descriptor's `.type` inside a kernel, and both built on the host.
    x = rng.standard_normal((16, 16)).astype(np.float32)
    y = dev.put(np.zeros((16, 16), np.float32))
    descriptor_type_kernel[(1,)](dev.put(x), y, 16, 16, BM=16, BN=16)
    np.testing.assert_allclose(dev.get(y), x + 1, rtol=1e-6)
    t = tl.tuple_type([tl.int32, tl.float16], ["a", "b"])
    assert list(t) == [tl.int32, tl.float16] and t[1] == tl.float16 and len(t) == 2
    assert str(t) == "[a:int32,b:fp16]" and t == tl.tuple_type([tl.int32, tl.float16], ["a", "b"])
    assert t != tl.tuple_type([tl.int32, tl.float16])
    d = tl.tensor_descriptor_type(tl.block_type(tl.float16, [64, 32]))
    assert str(d) == "tensor_descriptor<fp16[64, 32]>" and d.block_type.shape == (64, 32)
    assert d == tl.tensor_descriptor_type(tl.block_type(tl.float16, [64, 32]))


def test_descriptor_type_compiles(ptxas):
    from test_compile import assemble

    k = tiles.compile(descriptor_type_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "M": "i32", "N": "i32"},
                      constexprs={"BM": 16, "BN": 16}, target="sm_90a")
    assemble(ptxas, k.asm["ptx"], "sm_90a")


@tiles.jit
def desc_half_minmax_kernel(x_ptr, v_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr, OP: tl.constexpr):
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    pid = tl.program_id(0)
    offs = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    v = tl.load(v_ptr + pid * BM * BN + offs)
    m, n = tl.program_id(1) * BM, tl.program_id(2) * BN
    if OP == "min":
        xd.atomic_min([m, n], v)
    else:
        xd.atomic_max([m, n], v)


@pytest.mark.parametrize("op", ["min", "max"])
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_descriptor_half_min_max(dev, rng, dt, op):
    # fp16/bf16 descriptor min/max (Hopper's 16-bit float atomics): 6 programs reduce into each
    # block of a ragged tensor with rows of an odd length (elements at both halves of a 4-byte
    # word); NaN operands lose; elements outside the tensor are untouched.
    import ml_dtypes

    npdt = np.float16 if dt == "float16" else ml_dtypes.bfloat16
    M, N, BM, BN, P = 20, 37, 16, 32, 6
    x = rng.standard_normal((M, N)).astype(npdt)
    v = rng.standard_normal((P, BM, BN)).astype(npdt)
    v[0, :2, :5] = np.nan
    dx = dev.put(x)
    desc_half_minmax_kernel[(P, 2, 2)](dx, dev.put(v), M, N, BM=BM, BN=BN, OP=op)
    pick = np.fmin if op == "min" else np.fmax
    want = x.astype(np.float32)
    for m in (0, BM):
        for n in (0, BN):
            blk = want[m:m + BM, n:n + BN]
            for p in range(P):
                blk[...] = pick(blk, v[p, :blk.shape[0], :blk.shape[1]].astype(np.float32))
    np.testing.assert_array_equal(dev.get(dx).astype(np.float32), want)


@pytest.mark.parametrize("dt", ["fp16", "bf16"])
def test_descriptor_half_min_max_compiles(ptxas, dt):
    from test_compile import assemble

    sig = {"x_ptr": f"*{dt}", "v_ptr": f"*{dt}", "M": "i32", "N": "i32"}
    for op in ("min", "max"):
        k = tiles.compile(desc_half_minmax_kernel, signature=sig, constexprs={"BM": 16, "BN": 32, "OP": op},
                          target="sm_90a")
        assert f"atom.global.{op}.noftz.v2.{dt.replace('fp', 'f')}" in k.asm["ptx"]
        assemble(ptxas, k.asm["ptx"], "sm_90a")
    with pytest.raises(tiles.CompilationError, match="sm_90"):
        tiles.compile(desc_half_minmax_kernel, signature=sig, constexprs={"BM": 16, "BN": 32, "OP": "min"},
                      target="sm_80")


@tiles.jit
def tf32_descriptor_kernel(desc, out_ptr, N: tl.constexpr):
    block = desc.load([0, 0])
    tl.store(out_ptr + tl.arange(0, N)[None, :], block)


def _tf32_ties_to_even(x: np.ndarray) -> np.ndarray:
    bits = x.view(np.uint32).astype(np.uint64)
    special = (bits & 0x7F800000) == 0x7F800000
    up = ((bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000).astype(np.uint32)
    return np.where(special, x, up.view(np.float32))


def test_descriptor_loads_round_fp32_to_tf32_when_asked(dev, rng):
    # TensorDescriptor(round_f32_to_tf32=True): loads through it see TF32 values (ties to
    # even: the exact ties below go both ways), infinities and NaN unchanged.
    from tiles.tools.tensor_descriptor import TensorDescriptor

    x = rng.standard_normal((1, 64)).astype(np.float32)
    ties = np.array([0x3F801000, 0x3F803000, 0x3F801001, 0x7F7FFFFF], np.uint32).view(np.float32)
    x[0, :4] = ties
    x[0, 4:7] = [np.inf, -np.inf, np.nan]
    out = dev.put(np.zeros((1, 64), np.float32))
    xd = dev.put(x)
    tf32_descriptor_kernel[(1,)](TensorDescriptor.from_tensor(xd, [1, 64], round_f32_to_tf32=True), out, N=64)
    got = dev.get(out)
    want = _tf32_ties_to_even(x)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert got[0, 0] == 1.0 and got[0, 1] == np.float32(1.0 + 2 ** -9)  # a tie down to even, one up
    plain = dev.put(np.zeros((1, 64), np.float32))
    tf32_descriptor_kernel[(1,)](TensorDescriptor.from_tensor(xd, [1, 64]), plain, N=64)
    np.testing.assert_array_equal(dev.get(plain).view(np.uint32), x.view(np.uint32))
    with pytest.raises(tiles.LaunchError, match="round_f32_to_tf32 needs an fp32"):
        half = dev.put(np.zeros((1, 64), np.float16))
        tf32_descriptor_kernel[(1,)](TensorDescriptor.from_tensor(half, [1, 64], round_f32_to_tf32=True), out, N=64)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_tf32_descriptor_kernel_assembles(ptxas, target):
    from test_compile import assemble

    k = tiles.compile(tf32_descriptor_kernel, signature={"desc": "tensordesc<fp32[1, 64], tf32>", "out_ptr": "*fp32"},
                      constexprs={"N": 64}, target=target)
    assert "and.b32" in k.asm["ptx"]  # the rounding's mask
    assemble(ptxas, k.asm["ptx"], target)
