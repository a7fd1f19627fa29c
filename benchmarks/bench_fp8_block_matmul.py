"""Blockwise-scaled fp8 GEMM (DeepSeek-style: a scale per row and 128-column block of `a`, per
128 x 128 block of `b`), as model codebases write it: tiles against Triton, one run.

C[M, N] (bf16) = sum over K blocks of (A_k @ B_k^T) * a_s[:, k] * b_s[n // 128, k]; A is M x K and
B is N x K, both e4m3. FLOPs = 2 M N K. The two scale loads of each K step are the loop's small
loads (tiles issues them an iteration ahead). Errors are against the same sum in float32 torch.

Usage (GPU machine): python benchmarks/bench_fp8_block_matmul.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json

from _measure import ratio, rel_err, time_case
from _source import load_source

SRC = '''
import {mod} as triton
import {mod}.language as tl


@triton.jit
def fp8_block_mm(a_ptr, b_ptr, c_ptr, as_ptr, bs_ptr, M, N, K, stride_as, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_n
    first_m = pid // group * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_n[None, :] * K + offs_k[:, None]
    as_ptrs = as_ptr + offs_m * stride_as
    bs_ptrs = bs_ptr + (offs_n // BLOCK_K) * stride_as
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        a_s = tl.load(as_ptrs + k)
        b_s = tl.load(bs_ptrs + k)
        acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))
'''


def load(mod: str):
    return load_source(SRC.format(mod=mod), f"fp8_block_mm_{mod}")


def case(mods, M: int, N: int, K: int, cfg) -> dict:
    import torch

    bm, bn, warps, stages = cfg
    BK = 128
    kb = K // BK
    A = (torch.randn(M, K, device="cuda") * 0.5).to(torch.float8_e4m3fn)
    B = (torch.randn(N, K, device="cuda") * 0.5).to(torch.float8_e4m3fn)
    a_s = torch.rand(M, kb, device="cuda") + 0.5
    b_s = torch.rand(N // BK, kb, device="cuda") + 0.5
    parts = A.float().view(M, kb, BK).transpose(0, 1) @ B.float().view(N, kb, BK).permute(1, 2, 0)
    ref = (parts * a_s.t()[:, :, None] * b_s.t().repeat_interleave(BK, dim=1)[:, None, :]).sum(0)
    row = {"shape": [M, N, K], "config": list(cfg)}
    grid = (triton_cdiv(M, bm) * triton_cdiv(N, bn),)
    for name, mod in mods.items():
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)

        def run(mod=mod, out=out):
            mod.fp8_block_mm[grid](A, B, out, a_s, b_s, M, N, K, kb, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=BK, GROUP_M=8,
                                   num_warps=warps, num_stages=stages)

        time_case(row, name, run, lambda out=out: rel_err(out, ref), 2 * M * N * K)
    t, r = row.get("tiles_tflops"), row.get("triton_tflops")
    print(f"fp8 block matmul {M}x{N}x{K} {bm}x{bn} w{warps} s{stages}: tiles {t or 0:.0f} TFLOP/s "
          f"(err {row.get('tiles_rel_err', float('nan')):.1e}), triton {r or 0:.0f} "
          f"(err {row.get('triton_rel_err', float('nan')):.1e}, {ratio(row)})"
          + (f" tiles: {row['tiles_error']}" if "tiles_error" in row else "")
          + (f" triton: {row['triton_error']}" if "triton_error" in row else ""))
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch

    torch.manual_seed(0)
    res = {"gpu": torch.cuda.get_device_name(), "cases": []}
    mods = {"tiles": load("tiles"), "triton": load("triton")}
    for M, N, K, cfg in [(4096, 4096, 4096, (128, 128, 8, 3)), (4096, 4096, 4096, (128, 128, 4, 4)),
                         (8192, 7168, 2048, (128, 128, 8, 3))]:
        res["cases"].append(case(mods, M, N, K, cfg))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


def triton_cdiv(x: int, y: int) -> int:
    return (x + y - 1) // y


if __name__ == "__main__":
    main()
