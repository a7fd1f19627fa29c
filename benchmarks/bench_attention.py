"""Attention forward (non-causal), fp16: tiles against Triton and torch SDPA, one run.

The kernel is ours, written once in the Triton language and run by both compilers: one program
per (128-row query block, head), the query block kept in registers, keys and values streamed in
64-row blocks with an online softmax in base 2. FLOPs = 4 B H S^2 D.

Usage (GPU machine): python benchmarks/bench_attention.py [--json out.json]
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
def attn_fwd(Q, K, V, Out, sm_scale, S, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             K_T: tl.constexpr):
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
        if K_T:  # k loaded as stored and transposed, as Triton's tutorial writes it
            k = tl.load(K + head + (start_n + offs_n)[:, None] * D + offs_d[None, :])
            s = tl.dot(q, k.T) * scale
        else:
            kt = tl.load(K + head + (start_n + offs_n)[None, :] * D + offs_d[:, None])
            s = tl.dot(q, kt) * scale
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + head + (start_n + offs_n)[:, None] * D + offs_d[None, :])
        acc = tl.dot(p.to(tl.float16), v, acc * alpha[:, None])
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(Out + head + offs_m[:, None] * D + offs_d[None, :], acc.to(tl.float16))
'''


def load(mod: str):
    return load_source(SRC.format(mod=mod), f"attn_{mod}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch
    import triton.testing

    B, H, S, D = 4, 16, 4096, 64
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) for _ in range(3))
    scale = D ** -0.5
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)
    flops = 4 * B * H * S * S * D
    res = {"gpu": torch.cuda.get_device_name(), "shape": [B, H, S, D], "cases": []}
    mods = {"tiles": load("tiles"), "triton": load("triton")}
    for bm, bn, warps, stages, kt in [(128, 64, 8, 3, False), (128, 128, 8, 3, False), (128, 64, 4, 3, False),
                                      (128, 64, 8, 3, True), (128, 128, 8, 3, True)]:
        row = {"config": [bm, bn, warps, stages], "k_transposed_in_kernel": kt}
        for name, m in mods.items():
            out = torch.full_like(q, float("nan"))

            def run(m=m, out=out, bm=bm, bn=bn, warps=warps, stages=stages, kt=kt):
                m.attn_fwd[(S // bm, B * H)](q, k, v, out, scale, S, D=D, BLOCK_M=bm, BLOCK_N=bn, K_T=kt,
                                             num_warps=warps, num_stages=stages)

            time_case(row, name, run, lambda out=out: rel_err(out, ref), flops)
        res["cases"].append(row)
        t, r = row.get("tiles_tflops"), row.get("triton_tflops")
        print(f"attention {bm}x{bn} w{warps} s{stages}{' k.T' if kt else ''}: tiles {t or 0:.0f} TFLOP/s "
              f"(err {row.get('tiles_rel_err', float('nan')):.1e}), triton {r or 0:.0f} ({ratio(row)})")
    ms = triton.testing.do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale),
                                 return_mode="median")
    res["sdpa_tflops"] = flops / (ms * 1e-3) / 1e12
    print(f"SDPA {res['sdpa_tflops']:.0f} TFLOP/s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
