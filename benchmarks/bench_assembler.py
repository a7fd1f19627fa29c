"""tiles' three assemblers, with Triton beside them, one run.

tiles makes cubins with the driver's JIT linker by default (relocatable code);
`TILES_ASSEMBLER=load` has the driver's JIT compile the PTX as it loads the module (a
whole-program build); `TILES_ASSEMBLER=ptxas` assembles with ptxas, as Triton does (here Triton's bundled ptxas
unless `TRITON_PTXAS_PATH` names another).
For each kernel: bandwidth or TFLOP/s and the registers per thread of tiles with each assembler
and of Triton.

Usage (GPU machine): python benchmarks/bench_assembler.py [--json out.json] [--quick]
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
def swiglu_fwd(a_ptr, b_ptr, c_ptr, stride, n_cols: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    a = tl.load(a_ptr + row * stride + offs, mask=mask, other=0).to(tl.float32)
    b = tl.load(b_ptr + row * stride + offs, mask=mask, other=0)
    tl.store(c_ptr + row * stride + offs, (a * tl.sigmoid(a)).cast(b.dtype) * b, mask=mask)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)
'''


def triton_ptxas() -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true", help="the memory-bound kernels only")
    a = ap.parse_args()
    os.environ.setdefault("TRITON_PTXAS_PATH", triton_ptxas())
    import bench_attention
    import bench_matmul
    import bench_norms
    import torch
    import triton.testing

    res = {"gpu": torch.cuda.get_device_name(), "ptxas": os.environ["TRITON_PTXAS_PATH"], "cases": []}
    variants = [("tiles_driver", "tiles", "driver"), ("tiles_load", "tiles", "load"), ("tiles_ptxas", "tiles", "ptxas"),
                ("triton", "triton", None)]

    def measure(case, unit, work, make):
        """`make(mod, variant)` loads a fresh module (each variant's kernels are its own, built with
        its own assembler) and gives a launch that returns the compiled kernel."""
        row = {"case": case}
        for name, mod, assembler in variants:
            if assembler is not None:
                os.environ["TILES_ASSEMBLER"] = assembler
            run = make(mod, name)
            compiled = run()
            torch.cuda.synchronize()
            ms = triton.testing.do_bench(run, return_mode="median")
            row[f"{name}_{unit}"] = work / (ms * 1e-3) / (1e9 if unit == "gbps" else 1e12)
            row[f"{name}_regs"] = int(getattr(compiled, "n_regs", -1))
        os.environ["TILES_ASSEMBLER"] = "driver"
        res["cases"].append(row)
        cells = ", ".join(f"{n} {row[f'{n}_{unit}']:.0f} ({row[f'{n}_regs']} regs)" for n, _, _ in variants)
        print(f"{case}: {cells}  [{'GB/s' if unit == 'gbps' else 'TFLOP/s'}]", flush=True)

    M, N = 32768, 4096
    x = torch.randn(M, N, device="cuda", dtype=torch.float16)
    w = torch.rand(N, device="cuda", dtype=torch.float16) + 0.5
    b = torch.randn(N, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    mean = torch.empty(M, device="cuda")
    rstd = torch.empty(M, device="cuda")
    moved = 2 * M * N * 2
    for fusion in (False, True):
        def make_ln(mod, name, fusion=fusion):
            m = bench_norms.load(mod)
            return lambda: m.layer_norm_fwd[(M,)](x, y, w, b, mean, rstd, N, N, 1e-5, BLOCK_SIZE=4096, num_warps=8,
                                                  enable_fp_fusion=fusion)
        measure(f"layernorm fp16 {M}x{N}{' fusion' if fusion else ''}", "gbps", moved, make_ln)

    def make_sm(mod, name):
        m = bench_norms.load(mod)
        return lambda: m.softmax_kernel[(M,)](y, x, N, N, N, BLOCK_SIZE=4096, num_warps=8)
    measure(f"softmax fp16 {M}x{N}", "gbps", moved, make_sm)

    rows, cols = 16384, 8192
    sa = torch.randn(rows, cols, device="cuda", dtype=torch.float16)
    sb = torch.randn(rows, cols, device="cuda", dtype=torch.float16)
    sc = torch.empty_like(sa)

    def make_swiglu(mod, name):
        m = load_source(SRC.format(mod=mod), f"asm_{mod}_{name}")
        return lambda: m.swiglu_fwd[(rows,)](sa, sb, sc, cols, n_cols=cols, BLOCK=8192, num_warps=16)
    measure(f"SwiGLU (Liger) fp16 {rows}x{cols}", "gbps", 3 * rows * cols * 2, make_swiglu)

    n = 1 << 28
    vx = torch.randn(n, device="cuda")
    vy = torch.randn(n, device="cuda")
    vo = torch.empty_like(vx)

    def make_add(mod, name):
        m = load_source(SRC.format(mod=mod), f"asm_{mod}_{name}_add")
        return lambda: m.add_kernel[(triton.cdiv(n, 1024),)](vx, vy, vo, n, BLOCK=1024)
    measure("vector add fp32 2^28", "gbps", 3 * n * 4, make_add)

    if not a.quick:
        s = 4096
        mx = torch.randn(s, s, device="cuda", dtype=torch.float16)
        my = torch.randn(s, s, device="cuda", dtype=torch.float16)
        mo = torch.empty(s, s, device="cuda", dtype=torch.float16)

        def make_mm(mod, name):
            m = bench_matmul.load(mod)
            grid = (triton.cdiv(s, 128) * triton.cdiv(s, 256),)
            return lambda: m.matmul_kernel[grid](mx, my, mo, s, s, s, mx.stride(0), mx.stride(1), my.stride(0),
                                                 my.stride(1), mo.stride(0), mo.stride(1), BLOCK_SIZE_M=128,
                                                 BLOCK_SIZE_N=256, BLOCK_SIZE_K=64, GROUP_SIZE_M=8, num_warps=8,
                                                 num_stages=3)
        measure("matmul fp16 4096^3 128x256x64 w8 s3", "tflops", 2 * s ** 3, make_mm)

        B, H, S, D = 4, 16, 4096, 64
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) for _ in range(3))
        ao = torch.empty_like(q)

        def make_attn(mod, name):
            m = bench_attention.load(mod)
            return lambda: m.attn_fwd[(S // 128, B * H)](q, k, v, ao, D ** -0.5, S, D=D, BLOCK_M=128, BLOCK_N=128,
                                                        K_T=False, num_warps=8, num_stages=3)
        measure("attention 128x128 w8 s3", "tflops", 4 * B * H * S * S * D, make_attn)

    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
