"""Weight-only quantised matmul (w8a16): fp16 activations times int8 or fp8 weights widened to
fp16 in the loop before `tl.dot`, a per-column scale after it (as vLLM's fused MoE and its
fp8-KV attention widen their operands). tiles against Triton, one run.

The kernel is ours, written once and run by both compilers: `b` [K, N] stored K-contiguous
([N, K] in memory, how weights are kept), 4 warps, 3 stages. Two shapes: decode (M = 16,
16x64x128 tiles, mma.sync on Hopper) and prefill (M = 2048, 64x128x64 tiles, wgmma), N = 14336,
K = 4096. TFLOPS = 2 M N K / time.

Usage (GPU machine): python benchmarks/bench_dequant.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json

from _source import load_source

SRC = '''
import {mod} as triton
import {mod}.language as tl


@triton.jit
def w8a16_matmul(a_ptr, b_ptr, s_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_bn, stride_cm,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_m[:, None] < M, other=0.0)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b.to(tl.float16), acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * stride_bk
    scale = tl.load(s_ptr + offs_n)
    c = (acc * scale[None, :]).to(tl.float16)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], c, mask=offs_m[:, None] < M)
'''

SHAPES = {"decode": (16, (16, 64, 128)), "prefill": (2048, (64, 128, 64))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch
    import triton.testing

    N, K = 14336, 4096
    torch.manual_seed(0)
    w = torch.randint(-127, 128, (N, K), device="cuda", dtype=torch.int8)
    weights = {"int8": w, "fp8": (torch.randn(N, K, device="cuda") * 4).to(torch.float8_e4m3fn)}
    scale = torch.rand(N, device="cuda") / 64 + 1 / 128
    res = {"gpu": torch.cuda.get_device_name(), "N": N, "K": K}
    mods = {mod: load_source(SRC.format(mod=mod), f"dequant_{mod}") for mod in ("tiles", "triton")}
    for shape, (M, (bm, bn, bk)) in SHAPES.items():
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        for wname, wq in weights.items():
            ref = ((a.double() @ wq.double().t()) * scale.double()[None, :])
            for mod, m in mods.items():
                c = torch.empty(M, N, device="cuda", dtype=torch.float16)
                grid = (triton.cdiv(M, bm), N // bn)

                def run(m=m, c=c, grid=grid, wq=wq, a=a, M=M, tile=(bm, bn, bk)):
                    m.w8a16_matmul[grid](a, wq, scale, c, M, N, K, K, 1, K, N, BLOCK_M=tile[0], BLOCK_N=tile[1],
                                         BLOCK_K=tile[2], num_warps=4, num_stages=3)

                run()
                torch.cuda.synchronize()
                err = ((c.double() - ref).norm() / ref.norm()).item()
                assert err < 2e-3, f"{mod} {shape} {wname}: relative error {err}"
                ms = triton.testing.do_bench(run, warmup=25, rep=200, return_mode="median")
                res[f"{mod}_{shape}_{wname}_us"] = ms * 1e3
                res[f"{mod}_{shape}_{wname}_tflops"] = 2 * M * N * K / (ms * 1e-3) / 1e12
    print(f"GPU: {res['gpu']}")
    for shape, (M, tile) in SHAPES.items():
        for wname in weights:
            t, r = res[f"tiles_{shape}_{wname}_us"], res[f"triton_{shape}_{wname}_us"]
            print(f"w8a16 {wname} {shape} M{M} N{N} K{K} tile {'x'.join(map(str, tile))}: "
                  f"tiles {t:.1f} us, triton {r:.1f} us ({r / t:.3f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
