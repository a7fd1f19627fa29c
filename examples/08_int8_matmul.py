"""int8 x int8 -> int32 matrix multiplication on tensor cores (exact), with a fused dequantizing
epilogue: per-row scales of A and per-column scales of B turn the int32 tile into fp16."""

import numpy as np
from _host import Host

import tiles as triton
import tiles.language as tl


@triton.jit
def int8_matmul_kernel(a_ptr, b_ptr, c_ptr, y_ptr, sa_ptr, sb_ptr, M, N, K, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * N + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k * BLOCK_K), other=0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_K) & (offs_n[None, :] < N), other=0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc, mask=mask)
    sa = tl.load(sa_ptr + offs_m, mask=offs_m < M, other=0.0)
    sb = tl.load(sb_ptr + offs_n, mask=offs_n < N, other=0.0)
    y = acc.to(tl.float32) * sa[:, None] * sb[None, :]
    tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], y.to(tl.float16), mask=mask)


def main():
    host = Host(int8_matmul_kernel)
    rng = np.random.default_rng()
    M, K, N = (512, 1024, 384) if host.gpu else (96, 128, 80)
    a = rng.integers(-127, 128, size=(M, K), dtype=np.int8)
    b = rng.integers(-127, 128, size=(K, N), dtype=np.int8)
    sa = rng.uniform(0.001, 0.01, size=M).astype(np.float32)
    sb = rng.uniform(0.001, 0.01, size=N).astype(np.float32)
    c = host.empty((M, N), np.int32)
    y = host.empty((M, N), np.float16)
    bm, bn, bk = 64, 64, 64
    grid = (triton.cdiv(M, bm), triton.cdiv(N, bn))
    int8_matmul_kernel[grid](host.put(a), host.put(b), c, y, host.put(sa), host.put(sb), M, N, K, BLOCK_M=bm,
                             BLOCK_N=bn, BLOCK_K=bk)
    exact = a.astype(np.int64) @ b.astype(np.int64)
    assert np.array_equal(host.get(c), exact.astype(np.int32)), "int32 result differs"
    ref = exact * sa[:, None].astype(np.float64) * sb[None, :].astype(np.float64)
    err = np.linalg.norm(host.get(y).astype(np.float64) - ref) / np.linalg.norm(ref)
    print(f"int8 matmul {M}x{K} @ {K}x{N} on the {host.where}: int32 exact, dequantized fp16 relative error "
          f"{err:.1e}")
    assert err < 1e-2


if __name__ == "__main__":
    main()
