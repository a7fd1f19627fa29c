"""Decode attention over a paged KV cache, tiles against Triton, one run.

The kernel is ours, written once and run by both compilers, in the shape of vLLM's unified
attention for decode: one program per (sequence, KV head) takes that head's G query heads
(padded to 16 rows) against the sequence's keys, a tile of 32 tokens at a time; each tile
looks its blocks (16 tokens) up in the block table inside the loop, and K and V (fp16, or fp8
e4m3 with a scale) are widened to fp16 before their dots. Cache layout [blocks, 16, KV heads,
head], as vLLM's. 4 warps, 3 stages. Times are do_bench medians.

Usage (GPU machine): python benchmarks/bench_paged_attention.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json

from _source import load_source

SRC = '''
import {mod} as triton
import {mod}.language as tl


@triton.jit
def paged_decode(q_ptr, k_cache, v_cache, k_scale, v_scale, block_tables, out_ptr, seq_len, scale,
                 stride_blk, stride_tok, stride_kvh, MAXB, G: tl.constexpr, KVH: tl.constexpr,
                 D: tl.constexpr, BS: tl.constexpr, TILE: tl.constexpr, ROWS: tl.constexpr):
    seq = tl.program_id(0)
    kvh = tl.program_id(1)
    rr = tl.arange(0, ROWS)
    rd = tl.arange(0, D)
    rt = tl.arange(0, TILE)
    row_ok = rr < G
    head = kvh * G + rr
    q = tl.load(q_ptr + (seq * KVH * G + head)[:, None] * D + rd[None, :], mask=row_ok[:, None], other=0.0)
    ks = tl.load(k_scale)
    vs = tl.load(v_scale)
    m = tl.full([ROWS], float("-inf"), tl.float32)
    den = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, D], tl.float32)
    for j in range(0, tl.cdiv(seq_len, TILE)):
        tok = j * TILE + rt
        tok_ok = tok < seq_len
        blk = tl.load(block_tables + seq * MAXB + tok // BS, mask=tok_ok, other=0)
        off = blk.to(tl.int64) * stride_blk + (tok % BS) * stride_tok + kvh * stride_kvh
        k = tl.load(k_cache + off[None, :] + rd[:, None], mask=tok_ok[None, :], other=0.0)
        v = tl.load(v_cache + off[:, None] + rd[None, :], mask=tok_ok[:, None], other=0.0)
        s = tl.dot(q, (k.to(tl.float32) * ks).to(tl.float16)) * scale
        s = tl.where(tok_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        den = den * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), (v.to(tl.float32) * vs).to(tl.float16))
        m = m_new
    o = acc / den[:, None]
    tl.store(out_ptr + (seq * KVH * G + head)[:, None] * D + rd[None, :], o.to(tl.float16), mask=row_ok[:, None])
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=2048)
    args = ap.parse_args()
    import torch
    import triton.testing

    S, L, H, KVH, D, BS, TILE = args.seqs, args.seq_len, 32, 8, 128, 16, 32
    G = H // KVH
    maxb = (L + BS - 1) // BS
    torch.manual_seed(0)
    table = torch.randperm(S * maxb, device="cuda", dtype=torch.int32).reshape(S, maxb)
    q = torch.randn(S, H, D, device="cuda", dtype=torch.float16)
    kc16 = torch.randn(S * maxb, BS, KVH, D, device="cuda", dtype=torch.float16)
    vc16 = torch.randn(S * maxb, BS, KVH, D, device="cuda", dtype=torch.float16)
    res = {"gpu": torch.cuda.get_device_name(), "seqs": S, "seq_len": L, "heads": H, "kv_heads": KVH, "head": D}
    mods = {mod: load_source(SRC.format(mod=mod), f"paged_{mod}") for mod in ("tiles", "triton")}
    for kv in ("fp16", "fp8"):
        if kv == "fp8":
            kc, vc = (kc16 * 0.5).to(torch.float8_e4m3fn), (vc16 * 0.5).to(torch.float8_e4m3fn)
            ksc = vsc = torch.tensor([2.0], device="cuda")
        else:
            kc, vc = kc16, vc16
            ksc = vsc = torch.tensor([1.0], device="cuda")
        k = (kc.float() * ksc)[table.long()].reshape(S, maxb * BS, KVH, D)[:, :L].double()
        v = (vc.float() * vsc)[table.long()].reshape(S, maxb * BS, KVH, D)[:, :L].double()
        qh = q.double().reshape(S, KVH, G, D)
        s = torch.einsum("skgd,stkd->skgt", qh, k) * D ** -0.5
        ref = torch.einsum("skgt,stkd->skgd", torch.softmax(s, -1), v).reshape(S, H, D)
        for mod, m in mods.items():
            out = torch.empty_like(q)

            def run(m=m, out=out, kc=kc, vc=vc, ksc=ksc, vsc=vsc):
                m.paged_decode[(S, KVH)](q, kc, vc, ksc, vsc, table, out, L, D ** -0.5, kc.stride(0), kc.stride(1),
                                         kc.stride(2), maxb, G=G, KVH=KVH, D=D, BS=BS, TILE=TILE, ROWS=16,
                                         num_warps=4, num_stages=3)

            run()
            torch.cuda.synchronize()
            err = (out.double() - ref).abs().max().item()
            assert err < 2e-2, f"{mod} {kv}: max error {err}"
            res[f"{mod}_{kv}_us"] = triton.testing.do_bench(run, warmup=25, rep=200, return_mode="median") * 1e3
    print(f"GPU: {res['gpu']}")
    for kv in ("fp16", "fp8"):
        t, r = res[f"tiles_{kv}_us"], res[f"triton_{kv}_us"]
        print(f"paged decode attention, {S} x {L} tokens, {H}/{KVH} heads of {D}, KV {kv}: tiles {t:.1f} us, "
              f"triton {r:.1f} us ({r / t:.3f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
