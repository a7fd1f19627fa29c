"""Matmul on tensor cores: tiles against Triton and cuBLAS (torch.matmul), one run.

The kernel is the Triton tutorial's, written once and run by both compilers: grouped
ordering of program ids (GROUP_M 8), 128x256x64 tiles, 8 warps, 3 stages (tf32: 128x128x32,
8 warps, 3 stages). FLOPs = 2 M N K.

Usage (GPU machine): python benchmarks/bench_matmul.py [--json out.json] [--quick]
                                                       [--config BM,BN,BK,WARPS,STAGES]
"""

from __future__ import annotations

import argparse
import functools
import json

from _source import load_source

SRC = '''
import {mod} as triton
import {mod}.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(c_ptr.dtype.element_ty)
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)
'''


def load(mod: str):
    return load_source(SRC.format(mod=mod), f"mm_{mod}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true", help="fp16 4096^3 only")
    ap.add_argument("--config", help="BM,BN,BK,WARPS,STAGES for fp16/bf16")
    ap.add_argument("--only", help="run only these cases, e.g. fp16:4096,bf16:4096")
    a = ap.parse_args()
    import torch
    import triton.testing

    torch.backends.cuda.matmul.allow_tf32 = True
    big = (128, 256, 64, 8, 3)
    if a.config:
        big = tuple(int(x) for x in a.config.split(","))
    cases = [("fp16", 4096, big), ("fp16", 8192, big), ("bf16", 4096, big), ("bf16", 8192, big),
             ("tf32", 4096, (128, 128, 32, 8, 3))]
    if a.quick:
        cases = cases[:1]
    if a.only:
        wanted = {tuple(c.split(":")) for c in a.only.split(",")}
        cases = [c for c in cases if (c[0], str(c[1])) in wanted]
    res = {"gpu": torch.cuda.get_device_name(), "cases": []}
    mods = {"tiles": load("tiles"), "triton": load("triton")}
    print(f"GPU: {res['gpu']}")
    for dt, n, (bm, bn, bk, warps, stages) in cases:
        tdt = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32}[dt]
        x = torch.randn(n, n, device="cuda", dtype=tdt)
        y = torch.randn(n, n, device="cuda", dtype=tdt)
        ref = torch.matmul(x.float(), y.float())
        row = {"dtype": dt, "n": n, "config": [bm, bn, bk, warps, stages]}
        for name, m in mods.items():
            out = torch.empty(n, n, device="cuda", dtype=tdt)
            run = launcher(m, x, y, out, (bm, bn, bk, warps, stages))
            run()
            torch.cuda.synchronize()
            err = ((out.float() - ref).norm() / ref.norm()).item()
            row[f"{name}_rel_err"] = err
            ms = triton.testing.do_bench(run, return_mode="median")
            row[f"{name}_tflops"] = 2 * n**3 / (ms * 1e-3) / 1e12
        ms = triton.testing.do_bench(functools.partial(torch.matmul, x, y), return_mode="median")
        row["cublas_tflops"] = 2 * n**3 / (ms * 1e-3) / 1e12
        res["cases"].append(row)
        t, r, c = row["tiles_tflops"], row["triton_tflops"], row["cublas_tflops"]
        print(f"{dt} {n}^3 {bm}x{bn}x{bk} w{warps} s{stages}: tiles {t:.0f} TFLOP/s (err {row['tiles_rel_err']:.1e}), "
              f"triton {r:.0f} ({t / r:.3f}x), cuBLAS {c:.0f} ({t / c:.3f}x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


def launcher(m, x, y, out, config):
    bm, bn, bk, warps, stages = config
    n = x.shape[0]
    grid = (triton_cdiv(n, bm) * triton_cdiv(n, bn),)

    def run():
        m.matmul_kernel[grid](x, y, out, n, n, n, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                              out.stride(0), out.stride(1), BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn,
                              BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, num_warps=warps, num_stages=stages)

    return run


def triton_cdiv(a, b):
    return (a + b - 1) // b


if __name__ == "__main__":
    main()
