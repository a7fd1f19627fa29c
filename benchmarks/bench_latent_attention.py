"""Attention with a 512-wide head, as multi-head latent attention's prefill and decode kernels
run it: a 32-row `q` block on 8 warps, 64 keys a step, one stage (as SGLang launches its
extend kernel). tiles (its loop-invariant `q` read from shared memory, and with
`TILES_PERSISTENT_MMA_OPERANDS=0` held in registers) against Triton, one run.

The kernel is ours, written once and run by both compilers. 132 x 4 blocks of 32 query rows,
4096 keys and values, fp16, fp32 accumulation. us = do_bench median.

Usage (GPU machine): python benchmarks/bench_latent_attention.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os

from _source import load_source

SRC = '''
import {mod} as triton
import {mod}.language as tl


@triton.jit
def wide_attention(q_ptr, k_ptr, v_ptr, out_ptr, n_kv, scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   D: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for start in range(0, n_kv, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        kv_mask = offs_n[:, None] < n_kv
        k = tl.load(k_ptr + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
        qk = tl.dot(q, tl.trans(k)) * scale
        qk = tl.where(offs_n[None, :] < n_kv, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
        m_i = m_new
    tl.store(out_ptr + offs_m[:, None] * D + offs_d[None, :], (acc / l_i[:, None]).to(tl.float16))
'''


def load(mod: str, name: str = ""):
    """The kernel's module under `mod` (tiles or triton); a distinct `name` gives a distinct
    kernel object (each keeps what it compiled)."""
    return load_source(SRC.format(mod=mod), name or f"wide_attention_{mod}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch
    import triton.testing

    M, N, D, BM, BN = 32 * 132 * 4, 4096, 512, 32, 64
    torch.manual_seed(0)
    q, k, v = (torch.randn(r, D, device="cuda", dtype=torch.float16) for r in (M, N, N))
    scale = D ** -0.5
    ref = torch.softmax(q.float() @ k.float().T * scale, 1) @ v.float()
    res = {"gpu": torch.cuda.get_device_name(), "M": M, "N": N, "D": D}
    # One module a variant: the switch is read when a kernel compiles, and each kernel keeps
    # what it compiled.
    mods = {name: load(mod, f"wide_attention_{name}")
            for name, mod in (("tiles_persistent1", "tiles"), ("tiles_persistent0", "tiles"), ("triton", "triton"))}
    for _ in range(2):  # interleaved rounds: the host's clock drifts
        for name, m in mods.items():
            if name.startswith("tiles"):
                os.environ["TILES_PERSISTENT_MMA_OPERANDS"] = name[-1]
            out = torch.empty(M, D, device="cuda", dtype=torch.float16)

            def run(m=m, out=out):
                m.wide_attention[(M // BM,)](q, k, v, out, N, scale, BLOCK_M=BM, BLOCK_N=BN, D=D, num_warps=8,
                                             num_stages=1)

            run()
            torch.cuda.synchronize()
            err = ((out.float() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, f"{name}: relative error {err}"
            us = triton.testing.do_bench(run, warmup=25, rep=200, return_mode="median") * 1e3
            res[f"{name}_us"] = min(res.get(f"{name}_us", us), us)
    os.environ.pop("TILES_PERSISTENT_MMA_OPERANDS", None)
    print(f"GPU: {res['gpu']}; {M} query rows, {N} keys, head {D}")
    print(f"tiles, q in shared memory {res['tiles_persistent1_us']:.1f} us; q in registers "
          f"{res['tiles_persistent0_us']:.1f} us; triton {res['triton_us']:.1f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
