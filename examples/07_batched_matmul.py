"""Batched matrix multiplication: program (i, j, batch) computes one output tile of one batch
entry; each batch entry has its own strides (here, B is stored transposed)."""

import numpy as np
from _host import Host

import tiles as triton
import tiles.language as tl


@triton.jit
def bmm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn,
               stride_cb, stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    batch = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + batch * stride_ab + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + batch * stride_bb + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K, num_stages=3):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + batch * stride_cb + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(tl.bfloat16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def main():
    host = Host(bmm_kernel)
    rng = np.random.default_rng()
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    B, M, K, N = (12, 384, 256, 320) if host.gpu else (3, 96, 64, 80)
    a = rng.standard_normal((B, M, K)).astype(bf16)
    bt = rng.standard_normal((B, N, K)).astype(bf16)  # B transposed: K is contiguous
    c = host.empty((B, M, N), bf16) if not host.gpu else None
    if host.gpu:
        import torch

        da = torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16)
        db = torch.from_numpy(bt.view(np.int16)).cuda().view(torch.bfloat16)
        c = torch.empty((B, M, N), device="cuda", dtype=torch.bfloat16)
    else:
        da, db = host.put(a), host.put(bt)
    bm, bn, bk = 64, 64, 32
    grid = (triton.cdiv(M, bm), triton.cdiv(N, bn), B)
    bmm_kernel[grid](da, db, c, M, N, K, M * K, K, 1, N * K, 1, K, M * N, N, 1, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk)
    if host.gpu:
        out = c.float().cpu().numpy().astype(np.float64)
    else:
        out = c.astype(np.float64)
    ref = a.astype(np.float64) @ bt.astype(np.float64).transpose(0, 2, 1)
    err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    print(f"batched matmul {B} x ({M}x{K} @ {K}x{N}) bf16 on the {host.where}: relative error {err:.1e}")
    assert err < 1e-2


if __name__ == "__main__":
    main()
