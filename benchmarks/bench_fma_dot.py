"""fp32 matmul with `input_precision="ieee"` (CUDA cores) and fp64 matmul (tensor cores, `mma.sync`
f64, in both compilers), tiles against Triton, one run.

The kernel is `bench_int8_matmul`'s grouped matmul (Triton's tutorial, accumulator dtype a
parameter) with `input_precision="ieee"`, run by both compilers. `b` is stored two ways: [K, N]
row-major and [N, K] (read through its strides), so each dot operand is read from shared memory
along and across K. FLOP/s = 2 M N K / time.

Usage (GPU machine): python benchmarks/bench_fma_dot.py [--json out.json] [--size 2048] [--mods tiles,triton]
                                                       [--dtypes fp32,fp64]
"""

from __future__ import annotations

import argparse
import functools
import json

from _source import load_source
from bench_int8_matmul import SRC as INT8_SRC

# The int8 benchmark's grouped matmul (the tutorial's, accumulator dtype a parameter), its dot in
# IEEE precision.
SRC = INT8_SRC.replace("def matmul_i8(", "def matmul_fma(").replace(
    "acc = tl.dot(a, b, acc, out_dtype=ACC)", 'acc = tl.dot(a, b, acc, input_precision="ieee", out_dtype=ACC)')
assert "def matmul_fma(" in SRC and 'input_precision="ieee"' in SRC

# (dtype, BLOCK_M, BLOCK_N, BLOCK_K, warps)
CONFIGS = [("fp32", 64, 64, 32, 4), ("fp32", 128, 128, 32, 8), ("fp32", 64, 64, 16, 4), ("fp64", 64, 64, 16, 4),
           ("fp64", 64, 64, 32, 4), ("fp64", 128, 64, 16, 8)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--mods", default="tiles,triton")
    ap.add_argument("--dtypes", default="fp32,fp64", help="comma-separated")
    args = ap.parse_args()
    import torch
    import triton.testing

    n = args.size
    res = {"gpu": torch.cuda.get_device_name(), "size": n}
    mods = {mod: load_source(SRC.format(mod=mod), f"fmadot_{mod}") for mod in args.mods.split(",")}
    for dt, bm, bn, bk, warps in (c for c in CONFIGS if c[0] in args.dtypes.split(",")):
        tdt = torch.float32 if dt == "fp32" else torch.float64
        a = torch.randn((n, n), device="cuda", dtype=tdt)
        b_kn = torch.randn((n, n), device="cuda", dtype=tdt)
        b_nk = b_kn.t().contiguous()
        ref = a.double() @ b_kn.double()
        for bname, (bt, sbk, sbn) in {"b_kn": (b_kn, n, 1), "b_nk": (b_nk, 1, n)}.items():
            for mod, m in mods.items():
                c = torch.empty((n, n), dtype=tdt, device="cuda")
                grid = ((n // bm) * (n // bn),)
                acc = m.tl.float32 if dt == "fp32" else m.tl.float64

                run = functools.partial(m.matmul_fma[grid], a, bt, c, n, n, n, n, 1, sbk, sbn, n, 1, BLOCK_M=bm,
                                        BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, ACC=acc, num_warps=warps)

                run()
                err = ((c.double() - ref).norm() / ref.norm()).item()
                assert err < (1e-5 if dt == "fp32" else 1e-12), (mod, dt, bname, err)
                ms = triton.testing.do_bench(run, warmup=50, rep=400)
                key = f"{mod}_{dt}_{bm}x{bn}x{bk}w{warps}_{bname}_tflops"
                res[key] = round(2 * n**3 / (ms * 1e-3) / 1e12, 2)
                print(f"{key}: {res[key]}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
