"""4-bit weight matmul (w4a16, AWQ-style packing): eight 4-bit weights a 32-bit word, unpacked
in the loop by three `tl.interleave`s and a shift by each nibble's place, less a 4-bit zero
point of the row group, times the group's fp16 scale, then `tl.dot`; split-K partial sums
reduced by torch afterwards. tiles against Triton, one run.

The kernel is ours, written once and run by both compilers. It carries `offs_k` and masks both
operands with it, as AWQ GEMMs in serving code do. N = K = 4096, group 128, 4 warps, the
compilers' default stages. us = do_bench median.

Usage (GPU machine): python benchmarks/bench_int4_matmul.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json

from _source import load_source

SRC = '''
import {mod} as triton
import {mod}.language as tl


@triton.jit
def w4a16_matmul(a_ptr, q_ptr, z_ptr, s_ptr, c_ptr, M, N, K, GROUP, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr):
    pid = tl.program_id(0)
    split = tl.program_id(1)
    tiles_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // tiles_n
    pid_n = pid % tiles_n
    # Word j of a packed row holds columns 8j..8j+7; nibble i is column 8j + PLACE[i] (the
    # packing order [0, 2, 4, 6, 1, 3, 5, 7]), so column c's nibble sits at bit 4 * SLOT[c % 8].
    slot = (tl.arange(0, 4)[:, None] + (tl.arange(0, 2) * 4)[None, :]).reshape(8)
    shifts = tl.reshape(tl.broadcast_to((slot * 4)[None, :], (BLOCK_K * (BLOCK_N // 8), 8)), (BLOCK_K, BLOCK_N))
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    words_n = pid_n * (BLOCK_N // 8) + tl.arange(0, BLOCK_N // 8)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = split * BLOCK_K + tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    q_ptrs = q_ptr + offs_k[:, None] * (N // 8) + words_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)
    for step in range(0, tl.cdiv(K, BLOCK_K * SPLIT)):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
        q = tl.load(q_ptrs, mask=(offs_k[:, None] < K) & (words_n[None, :] < N // 8), other=0)
        w = tl.interleave(q, q)
        w = tl.interleave(w, w)
        w = tl.interleave(w, w)
        g = (step * BLOCK_K * SPLIT + split * BLOCK_K) // GROUP
        z = tl.load(z_ptr + g * (N // 8) + words_n)[None, :]
        z = tl.interleave(z, z)
        z = tl.interleave(z, z)
        z = tl.interleave(z, z)
        s = tl.load(s_ptr + g * N + offs_n)[None, :]
        b = (((w >> shifts) & 0xF) - ((tl.broadcast_to(z, (BLOCK_K, BLOCK_N)) >> shifts) & 0xF)).to(tl.float16)
        acc = tl.dot(a, b * s, acc, out_dtype=tl.float16)
        offs_k += BLOCK_K * SPLIT
        a_ptrs += BLOCK_K * SPLIT
        q_ptrs += BLOCK_K * SPLIT * (N // 8)
    c_ptrs = c_ptr + split * M * N + offs_m[:, None] * N + offs_n[None, :]
    tl.store(c_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
'''

# (M, (BLOCK_M, BLOCK_N, BLOCK_K), split-K)
CASES = [(16, (32, 32, 32), 8), (16, (16, 64, 128), 1), (16, (32, 32, 32), 1), (256, (64, 128, 64), 1),
         (256, (32, 32, 32), 8)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch
    import triton.testing

    N, K, G = 4096, 4096, 128
    torch.manual_seed(0)
    q = torch.randint(-2**31, 2**31 - 1, (K, N // 8), dtype=torch.int32, device="cuda")
    z = torch.randint(-2**31, 2**31 - 1, (K // G, N // 8), dtype=torch.int32, device="cuda")
    s = (torch.rand(K // G, N, device="cuda") / 16 + 0.01).half()
    slot = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7], device="cuda")

    def unpack(x):
        return (x.repeat_interleave(8, dim=1) >> (slot * 4).repeat(x.shape[1])) & 0xF

    w = (unpack(q) - unpack(z).repeat_interleave(G, 0)).double() * s.double().repeat_interleave(G, 0)
    res = {"gpu": torch.cuda.get_device_name(), "N": N, "K": K, "group": G}
    mods = {mod: load_source(SRC.format(mod=mod), f"int4_{mod}") for mod in ("tiles", "triton")}
    for M, (bm, bn, bk), split in CASES:
        a = (torch.randn(M, K, device="cuda") / 8).half()
        ref = a.double() @ w
        key = f"M{M}_{bm}x{bn}x{bk}_split{split}"
        for mod, m in mods.items():
            c = torch.zeros(split, M, N, device="cuda", dtype=torch.float16)
            grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn), split)

            def run(m=m, c=c, grid=grid, a=a, M=M, t=(bm, bn, bk), split=split):
                m.w4a16_matmul[grid](a, q, z, s, c, M, N, K, G, BLOCK_M=t[0], BLOCK_N=t[1], BLOCK_K=t[2],
                                     SPLIT=split, num_warps=4)

            run()
            torch.cuda.synchronize()
            err = ((c.double().sum(0) - ref).norm() / ref.norm()).item()
            assert err < 1e-2, f"{mod} {key}: relative error {err}"
            res[f"{mod}_{key}_us"] = triton.testing.do_bench(run, warmup=25, rep=200, return_mode="median") * 1e3
    print(f"GPU: {res['gpu']}")
    for M, (bm, bn, bk), split in CASES:
        key = f"M{M}_{bm}x{bn}x{bk}_split{split}"
        t, r = res[f"tiles_{key}_us"], res[f"triton_{key}_us"]
        print(f"w4a16 {key}: tiles {t:.1f} us, triton {r:.1f} us ({r / t:.3f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
