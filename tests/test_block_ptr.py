"""Block pointers (`tl.make_block_ptr`, `tl.advance`, `boundary_check`, `padding_option`) as
older Triton kernels use them: carried through loops, in both modes; a pipelined matmul."""

import numpy as np
import pytest

import tiles
import tiles.language as tl


@tiles.jit
def bp_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_bp = tl.make_block_ptr(base=a_ptr, shape=(M, K), strides=(stride_am, stride_ak),
                             offsets=(pid_m * BLOCK_M, 0), block_shape=(BLOCK_M, BLOCK_K), order=(1, 0))
    b_bp = tl.make_block_ptr(base=b_ptr, shape=(K, N), strides=(stride_bk, stride_bn),
                             offsets=(0, pid_n * BLOCK_N), block_shape=(BLOCK_K, BLOCK_N), order=(1, 0))
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K, BLOCK_K):
        a = tl.load(a_bp, boundary_check=(0, 1))
        b = tl.load(b_bp, boundary_check=(0, 1), padding_option="zero")
        acc += tl.dot(a, b)
        a_bp = tl.advance(a_bp, (0, BLOCK_K))
        b_bp = tl.advance(b_bp, (BLOCK_K, 0))
    c_bp = tl.make_block_ptr(base=c_ptr, shape=(M, N), strides=(stride_cm, stride_cn),
                             offsets=(pid_m * BLOCK_M, pid_n * BLOCK_N), block_shape=(BLOCK_M, BLOCK_N), order=(1, 0))
    tl.store(c_bp, acc.to(tl.float16), boundary_check=(0, 1))


@pytest.mark.parametrize("shape", [(64, 64, 64), (100, 72, 90)])
def test_block_pointer_matmul(dev, rng, shape):
    M, N, K = shape
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = dev.put(np.full((M, N), np.nan, np.float16))
    grid = ((M + 31) // 32, (N + 31) // 32)
    bp_matmul_kernel[grid](dev.put(a), dev.put(b), c, M, N, K, K, 1, N, 1, N, 1, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    got = dev.get(c).astype(np.float64)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-2


@tiles.jit
def bp_rows_kernel(x_ptr, y_ptr, R, C, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # A while loop carrying a block pointer; NaN padding read back through a mask.
    bp = tl.make_block_ptr(x_ptr, (R, C), (C, 1), (0, 0), (BLOCK_R, BLOCK_C), (1, 0))
    out = tl.make_block_ptr(y_ptr, (R, C), (C, 1), (0, 0), (BLOCK_R, BLOCK_C), (1, 0))
    i = 0
    while i < R:
        x = tl.load(bp, boundary_check=(0, 1), padding_option="nan")
        tl.store(out, tl.where(x == x, x * 2, -1.0), boundary_check=(0, 1))
        bp = tl.advance(bp, (BLOCK_R, 0))
        out = tl.advance(out, (BLOCK_R, 0))
        i += BLOCK_R


def test_block_pointer_while_and_padding(dev, rng):
    R, C = 37, 20
    x = rng.standard_normal((R, C)).astype(np.float32)
    y = dev.put(np.zeros((R, C), np.float32))
    bp_rows_kernel[(1,)](dev.put(x), y, R, C, BLOCK_R=8, BLOCK_C=32)
    np.testing.assert_array_equal(dev.get(y), x * 2)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_block_pointer_matmul_compiles_pipelined(ptxas, target):
    from test_compile import assemble

    p = "*fp16:16"
    sig = {"a_ptr": p, "b_ptr": p, "c_ptr": p, "M": "i32:16", "N": "i32:16", "K": "i32:16", "stride_am": "i32:16",
           "stride_ak": "i32", "stride_bk": "i32:16", "stride_bn": "i32", "stride_cm": "i32:16", "stride_cn": "i32"}
    k = tiles.compile(bp_matmul_kernel, signature=sig, constexprs=dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64),
                      equal_to_1=("stride_ak", "stride_bn", "stride_cn"), target=target, num_warps=4, num_stages=3)
    assert "async_copy" in k.asm["tir_opt"]
    assemble(ptxas, k.asm["ptx"], target)
