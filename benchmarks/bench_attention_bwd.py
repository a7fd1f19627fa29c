"""Attention backward (non-causal), fp16: tiles against Triton, one run.

The two inner loops of Triton's fused-attention tutorial backward, as two kernels. They are
ours, written once in the Triton language and run by both compilers.

- `bwd_dkdv`: one program per 128 keys of one head. It walks the queries 32 at a time, with
  four dots per step. `qT` and `do` are each read as loaded and transposed.
- `bwd_dq`: one program per 128 queries. It walks the keys 32 at a time, with three dots per
  step. `kT` is read both ways.

Shape: B 4, H 16, S 4096, D 64. FLOPs: 8 B H S^2 D for dK/dV and 6 B H S^2 D for dQ. The
results are checked against the same formulas in float32 torch.

Usage (GPU machine): python benchmarks/bench_attention_bwd.py [--json out.json]
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
def bwd_dkdv(Q, K, V, DO, M, Dl, DK, DV, sm_scale, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M1: tl.constexpr,
             BLOCK_N1: tl.constexpr):
    bhid = tl.program_id(1)
    off = (bhid * N_CTX * HEAD_DIM).to(tl.int64)
    Q += off
    K += off
    V += off
    DO += off
    DK += off
    DV += off
    M += bhid * N_CTX
    Dl += bhid * N_CTX
    start_n = tl.program_id(0) * BLOCK_N1
    offs_n = start_n + tl.arange(0, BLOCK_N1)
    offs_k = tl.arange(0, HEAD_DIM)
    k = tl.load(K + offs_n[:, None] * HEAD_DIM + offs_k[None, :])
    v = tl.load(V + offs_n[:, None] * HEAD_DIM + offs_k[None, :])
    dv = tl.zeros([BLOCK_N1, HEAD_DIM], dtype=tl.float32)
    dk = tl.zeros([BLOCK_N1, HEAD_DIM], dtype=tl.float32)
    offs_m = tl.arange(0, BLOCK_M1)
    qT_ptrs = Q + offs_m[None, :] * HEAD_DIM + offs_k[:, None]
    do_ptrs = DO + offs_m[:, None] * HEAD_DIM + offs_k[None, :]
    curr_m = 0
    for blk_idx in range(N_CTX // BLOCK_M1):
        qT = tl.load(qT_ptrs)
        offs_m = curr_m + tl.arange(0, BLOCK_M1)
        m = tl.load(M + offs_m)
        qkT = tl.dot(k, qT)
        pT = tl.math.exp2(qkT - m[None, :])
        do = tl.load(do_ptrs)
        dv += tl.dot(pT.to(tl.float16), do)
        Di = tl.load(Dl + offs_m)
        dpT = tl.dot(v, tl.trans(do)).to(tl.float32)
        dsT = (pT * (dpT - Di[None, :])).to(tl.float16)
        dk += tl.dot(dsT, tl.trans(qT))
        curr_m += BLOCK_M1
        qT_ptrs += BLOCK_M1 * HEAD_DIM
        do_ptrs += BLOCK_M1 * HEAD_DIM
    tl.store(DV + offs_n[:, None] * HEAD_DIM + offs_k[None, :], dv.to(tl.float16))
    tl.store(DK + offs_n[:, None] * HEAD_DIM + offs_k[None, :], (dk * sm_scale).to(tl.float16))


@triton.jit
def bwd_dq(Q, K, V, DO, M, Dl, DQ, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M2: tl.constexpr,
           BLOCK_N2: tl.constexpr):
    bhid = tl.program_id(1)
    off = (bhid * N_CTX * HEAD_DIM).to(tl.int64)
    Q += off
    K += off
    V += off
    DO += off
    DQ += off
    M += bhid * N_CTX
    Dl += bhid * N_CTX
    start_m = tl.program_id(0) * BLOCK_M2
    offs_m = start_m + tl.arange(0, BLOCK_M2)
    offs_k = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + offs_m[:, None] * HEAD_DIM + offs_k[None, :])
    do = tl.load(DO + offs_m[:, None] * HEAD_DIM + offs_k[None, :])
    m = tl.load(M + offs_m)[:, None]
    Di = tl.load(Dl + offs_m)
    dq = tl.zeros([BLOCK_M2, HEAD_DIM], dtype=tl.float32)
    offs_n = tl.arange(0, BLOCK_N2)
    kT_ptrs = K + offs_n[None, :] * HEAD_DIM + offs_k[:, None]
    vT_ptrs = V + offs_n[None, :] * HEAD_DIM + offs_k[:, None]
    for blk_idx in range(N_CTX // BLOCK_N2):
        kT = tl.load(kT_ptrs)
        vT = tl.load(vT_ptrs)
        qk = tl.dot(q, kT)
        p = tl.math.exp2(qk - m)
        dp = tl.dot(do, vT).to(tl.float32)
        ds = (p * (dp - Di[:, None])).to(tl.float16)
        dq += tl.dot(ds, tl.trans(kT))
        kT_ptrs += BLOCK_N2 * HEAD_DIM
        vT_ptrs += BLOCK_N2 * HEAD_DIM
    tl.store(DQ + offs_m[:, None] * HEAD_DIM + offs_k[None, :], dq.to(tl.float16))
'''


def load(mod: str):
    return load_source(SRC.format(mod=mod), f"attn_bwd_{mod}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch

    B, H, S, D = 4, 16, 4096, 64
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) * 0.5 for _ in range(4))
    sm_scale = D ** -0.5
    # The forward's row statistics (log2 domain, q pre-scaled as the tutorial does) and
    # D_i = rowsum(o * do), computed by torch.
    qs = (q.float() * sm_scale * 1.4426950408889634)
    s = qs @ k.float().transpose(-1, -2)
    m = torch.logsumexp(s * 0.6931471805599453, -1) * 1.4426950408889634
    p = torch.exp2(s - m[..., None])
    o = p @ v.float()
    di = (o * do.float()).sum(-1)
    ref_dv = p.transpose(-1, -2) @ do.float()
    ds = p * (do.float() @ v.float().transpose(-1, -2) - di[..., None])
    ref_dk = ds.transpose(-1, -2) @ qs * sm_scale
    ref_dq = ds @ k.float()
    qs16 = qs.half()
    res = {"gpu": torch.cuda.get_device_name(), "shape": [B, H, S, D], "cases": []}
    mods = {"tiles": load("tiles"), "triton": load("triton")}
    for kernel, flops in (("dkdv", 8 * B * H * S * S * D), ("dq", 6 * B * H * S * S * D)):
        row = {"kernel": kernel, "config": [32, 128, 4, 5] if kernel == "dkdv" else [128, 32, 4, 5]}
        for name, mod in mods.items():
            outs = [torch.full_like(q, float("nan")) for _ in range(2)]
            if kernel == "dkdv":
                def run(mod=mod, outs=outs):
                    mod.bwd_dkdv[(S // 128, B * H)](qs16, k, v, do, m, di, outs[0], outs[1], sm_scale, S, HEAD_DIM=D,
                                                    BLOCK_M1=32, BLOCK_N1=128, num_warps=4, num_stages=5)

                def err(outs=outs):
                    return max(rel_err(outs[0], ref_dk), rel_err(outs[1], ref_dv))
            else:
                def run(mod=mod, outs=outs):
                    mod.bwd_dq[(S // 128, B * H)](qs16, k, v, do, m, di, outs[0], S, HEAD_DIM=D, BLOCK_M2=128,
                                                  BLOCK_N2=32, num_warps=4, num_stages=5)

                def err(outs=outs):
                    return rel_err(outs[0], ref_dq)
            time_case(row, name, run, err, flops)
        res["cases"].append(row)
        t, r = row.get("tiles_tflops"), row.get("triton_tflops")
        print(f"attention bwd {kernel}: tiles {t or 0:.0f} TFLOP/s (err {row.get('tiles_rel_err', float('nan')):.1e}), "
              f"triton {r or 0:.0f} (err {row.get('triton_rel_err', float('nan')):.1e}, {ratio(row)})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
