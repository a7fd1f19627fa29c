"""Attention forward in fp8 (non-causal): tiles against Triton, one run.

The kernel follows the fp8 path of Triton's fused-attention tutorial. It is ours, written once
in the Triton language and run by both compilers:
- q, k and v are fp8, e5m2 or e4m3; v is stored transposed (D x S), so both dots read their
  operands K-major;
- the probabilities are rounded to the same fp8 type for the second dot;
- accumulation is fp32, and the output is fp16.

FLOPs = 4 B H S^2 D. The error is measured against torch SDPA in fp16 on the fp8-rounded
inputs; it is dominated by the fp8 probabilities and is the same for both compilers.

Usage (GPU machine): python benchmarks/bench_attention_fp8.py [--json out.json]
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
def attn_fp8(Q, K, Vt, Out, sm_scale, S, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             FP8: tl.constexpr):
    start_m = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64) * S * D
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + head + offs_m[:, None] * D + offs_d[None, :])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    scale = sm_scale * 1.4426950408889634
    for start_n in range(0, S, BLOCK_N):
        k = tl.load(K + head + (start_n + offs_n)[:, None] * D + offs_d[None, :])
        s = tl.dot(q, k.T) * scale
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        vt = tl.load(Vt + head + offs_d[:, None] * S + (start_n + offs_n)[None, :])
        acc = tl.dot(p.to(FP8), vt.T, acc * alpha[:, None])
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(Out + head + offs_m[:, None] * D + offs_d[None, :], acc.to(tl.float16))
'''


def load(mod: str):
    return load_source(SRC.format(mod=mod), f"attn_fp8_{mod}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch

    B, H, S, D = 4, 16, 4096, 64
    flops = 4 * B * H * S * S * D
    res = {"gpu": torch.cuda.get_device_name(), "shape": [B, H, S, D], "cases": []}
    mods = {"tiles": load("tiles"), "triton": load("triton")}
    for fp8_name, torch_fp8, tl_name in (("e5m2", torch.float8_e5m2, "float8e5"),
                                         ("e4m3", torch.float8_e4m3fn, "float8e4nv")):
        q, k, v = (torch.randn(B, H, S, D, device="cuda").to(torch_fp8) for _ in range(3))
        vt = v.transpose(-1, -2).contiguous()
        ref = torch.nn.functional.scaled_dot_product_attention(q.half(), k.half(), v.half(), scale=D ** -0.5)
        for bm, bn, warps in [(128, 64, 8), (128, 128, 8), (128, 64, 4)]:
            row = {"fp8": fp8_name, "config": [bm, bn, warps, 3]}
            for name, m in mods.items():
                out = torch.full((B, H, S, D), float("nan"), device="cuda", dtype=torch.float16)
                fp8 = getattr(m.tl, tl_name)

                def run(m=m, out=out, fp8=fp8, bm=bm, bn=bn, warps=warps, q=q, k=k, vt=vt):
                    m.attn_fp8[(S // bm, B * H)](q, k, vt, out, D ** -0.5, S, D=D, BLOCK_M=bm, BLOCK_N=bn,
                                                 FP8=fp8, num_warps=warps, num_stages=3)

                time_case(row, name, run, lambda out=out, ref=ref: rel_err(out, ref), flops)
            res["cases"].append(row)
            t, r = row.get("tiles_tflops"), row.get("triton_tflops")
            print(f"attention fp8 {fp8_name} {bm}x{bn} w{warps} s3: tiles {t or 0:.0f} TFLOP/s "
                  f"(err {row.get('tiles_rel_err', float('nan')):.1e}), triton {r or 0:.0f} "
                  f"(err {row.get('triton_rel_err', float('nan')):.1e}, {ratio(row)})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
