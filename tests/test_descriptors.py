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
    with pytest.raises(ValueError, match="powers of 2"):
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
def desc_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # The modern style of Triton's matmul: descriptors made in the kernel, loaded in the loop.
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
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


@pytest.mark.parametrize("K", [96, 40])
def test_device_descriptor_matmul_loop(dev, rng, K):
    # K = 96: rows of whole 16-byte granules (exact masks, pipelined when compiled); K = 40:
    # granule-wide reads with the elements past K replaced.
    M, N, BM, BN, BK = 64, 48, 32, 16, 32
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = dev.put(np.full((M, N), np.nan, np.float32))
    desc_matmul_kernel[(M // BM, N // BN)](dev.put(a), dev.put(b), c, M, N, K, BM=BM, BN=BN, BK=BK)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(dev.get(c), ref, rtol=1e-2, atol=1e-2)


def test_device_descriptor_loads_are_pipelined_when_rows_are_whole_granules(ptxas):
    from test_compile import assemble

    sig = {"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "c_ptr": "*fp32:16", "M": "i32:16", "N": "i32:16"}
    cx = {"BM": 128, "BN": 128, "BK": 64}
    whole = tiles.compile(desc_matmul_kernel, signature=dict(sig, K="i32:16"), constexprs=cx, target="sm_90a",
                          num_warps=8)
    ragged = tiles.compile(desc_matmul_kernel, signature=dict(sig, K="i32"), constexprs=cx, target="sm_90a",
                           num_warps=8)
    assert "cp.async.cg.shared.global" in whole.asm["ptx"] and "wgmma.mma_async" in whole.asm["ptx"]
    # With K unknown, `a` (whose rows are K long) is read in granules and not pipelined; `b`
    # (rows of N) still is.
    copies = [k.asm["ptx"].count("cp.async.cg.shared.global") for k in (whole, ragged)]
    assert copies[0] > copies[1] > 0 and "ld.global.v4" in ragged.asm["ptx"]
    # Bounds-checked copies take their mask as cp.async's ignore-src predicate, not as a
    # source size picked by `selp` chains.
    masked = [line.split() for line in whole.asm["ptx"].splitlines() if "cp.async.cg.shared.global" in line]
    assert all(len(c) == 5 and c[-1].startswith("%p") for c in masked), masked[:2]
    for k in (whole, ragged):
        assemble(ptxas, k.asm["ptx"], "sm_90a")
