"""Scalar loads at an unknown stride: a transposing copy and a column sum over a column-major
fp32 matrix of odd size (no divisibility to specialise on), tiles against Triton in one run.
This is where LLVM's address strength reduction (which tiles leaves out) would matter most.
Also a true transpose of a row-major fp16 matrix (reads along rows, writes along columns: a
coalesced kernel converts its layout through shared memory between the load and the store).

Usage (GPU machine): python benchmarks/bench_strided.py [--json out.json]
GB/s counts the input read once (and, for the copy, the output written once).
"""

from __future__ import annotations

import argparse
import json

from _source import load_source

SRC = '''
import {mod} as triton
import {mod}.language as tl


@triton.jit
def transpose_kernel(x, y, M, N, sxm, sxn, syn, sym, BM: tl.constexpr, BN: tl.constexpr):
    om = tl.program_id(0) * BM + tl.arange(0, BM)
    on = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (om[:, None] < M) & (on[None, :] < N)
    v = tl.load(x + om[:, None] * sxm + on[None, :] * sxn, mask=mask)
    tl.store(y + on[None, :] * syn + om[:, None] * sym, v, mask=mask)


@triton.jit
def colsum_kernel(x, out, M, N, sxm, sxn, BM: tl.constexpr, BN: tl.constexpr):
    on = tl.program_id(0) * BN + tl.arange(0, BN)
    acc = tl.zeros([BN], dtype=tl.float32)
    for m0 in range(0, M, BM):
        om = m0 + tl.arange(0, BM)
        mask = (om[:, None] < M) & (on[None, :] < N)
        acc += tl.sum(tl.load(x + om[:, None] * sxm + on[None, :] * sxn, mask=mask, other=0.0), axis=0)
    tl.store(out + on, acc, mask=on < N)
'''


def load(mod: str):
    return load_source(SRC.format(mod=mod), f"strided_{mod}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch
    import triton.testing

    M, N = 8191, 8193
    x = torch.randn(N, M, device="cuda").t()  # M x N, strides (1, M)
    res = {"gpu": torch.cuda.get_device_name(), "M": M, "N": N}
    for mod in ("tiles", "triton"):
        m = load(mod)
        y = torch.empty(N, M, device="cuda")  # y[n, m] = x[m, n]
        cp = lambda m=m, y=y: m.transpose_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](
            x, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), BM=64, BN=64)
        cp()
        torch.cuda.synchronize()
        assert torch.equal(y.t(), x), f"{mod} transpose is wrong"
        res[f"{mod}_transpose_gbps"] = 2 * M * N * 4 / (triton.testing.do_bench(cp, return_mode="median") * 1e-3) / 1e9
        out = torch.empty(N, device="cuda")
        cs = lambda m=m, out=out: m.colsum_kernel[(triton.cdiv(N, 32),)](
            x, out, M, N, x.stride(0), x.stride(1), BM=64, BN=32)
        cs()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, x.double().sum(0).float(), rtol=1e-4, atol=1e-2)
        res[f"{mod}_colsum_gbps"] = M * N * 4 / (triton.testing.do_bench(cs, return_mode="median") * 1e-3) / 1e9
    T = 8192
    xr = torch.randn(T, T, device="cuda", dtype=torch.float16)
    for mod in ("tiles", "triton"):
        m = load(mod)
        yr = torch.empty(T, T, device="cuda", dtype=torch.float16)
        tr = lambda m=m, yr=yr: m.transpose_kernel[(T // 64, T // 64)](
            xr, yr, T, T, xr.stride(0), xr.stride(1), yr.stride(0), yr.stride(1), BM=64, BN=64)
        tr()
        torch.cuda.synchronize()
        assert torch.equal(yr.t(), xr), f"{mod} row-major transpose is wrong"
        res[f"{mod}_transpose_rowmajor_gbps"] = 2 * T * T * 2 / (triton.testing.do_bench(tr, return_mode="median")
                                                                * 1e-3) / 1e9
    print(f"GPU: {res['gpu']}")
    for k in ("transpose", "colsum"):
        t, r = res[f"tiles_{k}_gbps"], res[f"triton_{k}_gbps"]
        print(f"{k} fp32 {M}x{N} column-major: tiles {t:.0f} GB/s, triton {r:.0f} GB/s ({t / r:.3f}x)")
    t, r = res["tiles_transpose_rowmajor_gbps"], res["triton_transpose_rowmajor_gbps"]
    print(f"transpose fp16 {T}x{T} row-major: tiles {t:.0f} GB/s, triton {r:.0f} GB/s ({t / r:.3f}x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
