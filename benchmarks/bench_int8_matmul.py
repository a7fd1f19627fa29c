"""int8 matmul (int32 accumulator and output) and fp32 matmul as tf32 on tensor cores, tiles
against Triton, one run.

The kernel is the Triton tutorial's grouped matmul with the accumulator's dtype a parameter,
written once and run by both compilers: 8 warps, 3 stages, 128x128x128 tiles for int8,
128x128x32 for tf32. `b` is stored two ways: [N, K] (K-major, how weights are usually kept; the
kernel reads it through its strides) and [K, N] row-major. TOPS = 2 M N K / time.

Usage (GPU machine): python benchmarks/bench_int8_matmul.py [--json out.json] [--size 4096]
                                                            [--dtype int8|tf32]
"""

from __future__ import annotations

import argparse
import json

from _source import load_source

SRC = '''
import {mod} as triton
import {mod}.language as tl


@triton.jit
def matmul_i8(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
              ACC: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc, out_dtype=ACC)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :], acc)
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--dtype", default="int8", choices=["int8", "tf32"])
    args = ap.parse_args()
    import torch
    import triton.testing

    n = args.size
    int8 = args.dtype == "int8"
    if int8:
        a = torch.randint(-128, 128, (n, n), dtype=torch.int8, device="cuda")
        b_nk = torch.randint(-128, 128, (n, n), dtype=torch.int8, device="cuda")  # [N, K]
    else:
        a = torch.randn((n, n), device="cuda")
        b_nk = torch.randn((n, n), device="cuda")
    b_kn = b_nk.t().contiguous()  # the same matrix stored [K, N]
    ref = (a.double() @ b_nk.double().t())
    res = {"gpu": torch.cuda.get_device_name(), "size": n, "dtype": args.dtype}
    for mod in ("tiles", "triton"):
        m = load_source(SRC.format(mod=mod), f"i8mm_{mod}")
        for name, (bt, sbk, sbn) in {"b_nk": (b_nk, 1, n), "b_kn": (b_kn, n, 1)}.items():
            c = torch.empty((n, n), dtype=torch.int32 if int8 else torch.float32, device="cuda")
            grid = ((n // 128) * (n // 128),)

            def run(m=m, bt=bt, sbk=sbk, sbn=sbn, c=c, grid=grid):
                acc = m.tl.int32 if int8 else m.tl.float32
                m.matmul_i8[grid](a, bt, c, n, n, n, n, 1, sbk, sbn, n, 1, BLOCK_M=128, BLOCK_N=128,
                                  BLOCK_K=128 if int8 else 32, GROUP_M=8, ACC=acc, num_warps=8, num_stages=3)

            run()
            torch.cuda.synchronize()
            if int8:
                assert torch.equal(c.double(), ref), f"{mod} {name}: wrong result"
            else:  # tf32 products: about 1e-3 relative
                err = ((c.double() - ref).norm() / ref.norm()).item()
                assert err < 2e-3, f"{mod} {name}: relative error {err}"
            ms = triton.testing.do_bench(run, warmup=25, rep=200, return_mode="median")
            res[f"{mod}_{name}_tops"] = 2 * n ** 3 / (ms * 1e-3) / 1e12
    print(f"GPU: {res['gpu']}")
    for name in ("b_nk", "b_kn"):
        t, r = res[f"tiles_{name}_tops"], res[f"triton_{name}_tops"]
        print(f"{args.dtype} matmul {n}^3, {name}: tiles {t:.0f} TOPS, triton {r:.0f} TOPS ({t / r:.3f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
