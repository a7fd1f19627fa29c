"""The LLVM pass pipeline's effect on kernel speed and compile time: the benchmark kernels
compiled by tiles with its default pipeline and with candidate pipelines
(`TILES_LLVM_PIPELINE`), timed in one process, interleaved (default, candidates, Triton,
then the tiles variants again in reverse order; each figure is the better of its two
readings). Each variant's first call (compile, driver load, launch) is timed too, with a
fresh on-disk cache and the driver's PTX cache off.

Usage (GPU machine): CUDA_CACHE_DISABLE=1 python benchmarks/bench_llvm_pipeline.py
    [--pipeline NAME=PIPELINE ...] [--cases a,b] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _measure import rel_err  # noqa: E402
from _source import load_source  # noqa: E402

IC = "instcombine<max-iterations=1;no-verify-fixpoint>"
# The candidates measured in stop 25 (see benchmarks/results/).
CANDIDATES = {
    "lean": f"function(sroa,early-cse,{IC},simplifycfg,loop-mssa(licm),gvn<no-memdep>,{IC},adce)",
    "unroll": f"function(sroa,early-cse,{IC},simplifycfg,loop(loop-rotate<header-duplication;no-prepare-for-lto>),"
              f"loop-mssa(licm),loop(indvars,loop-unroll-full),gvn<no-memdep>,{IC},adce,simplifycfg)",
}


def cases(torch):
    """name -> (module name, source, setup() -> (make_run(mod) -> run, err(out) or None, work, unit))."""
    import bench_attention
    import bench_attention_bwd
    import bench_fp8_block_matmul
    import bench_int8_matmul
    import bench_matmul
    import bench_matmul_descriptor
    import bench_norms
    import bench_strided
    import bench_vector_add

    def vadd():
        n = 1 << 26
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")

        def make(m):
            out = torch.empty_like(x)
            return (lambda: m.add_kernel[(n // 1024,)](x, y, out, n, BLOCK_SIZE=1024)), (lambda: rel_err(out, x + y))
        return make, 3 * n * 4, "GB/s"

    def rows(kernel):
        M, N = 32768, 4096
        x = torch.randn(M, N, device="cuda", dtype=torch.float16)
        w = torch.rand(N, device="cuda", dtype=torch.float16) + 0.5
        b = torch.randn(N, device="cuda", dtype=torch.float16)

        def make(m):
            y = torch.empty_like(x)
            if kernel == "softmax":
                ref = torch.softmax(x.float(), 1)
                return (lambda: m.softmax_kernel[(M,)](y, x, N, N, N, BLOCK_SIZE=4096, num_warps=8),
                        lambda: rel_err(y, ref))
            mean = torch.empty(M, device="cuda")
            rstd = torch.empty(M, device="cuda")
            ref = torch.nn.functional.layer_norm(x.float(), (N,), w.float(), b.float(), 1e-5)
            return (lambda: m.layer_norm_fwd[(M,)](x, y, w, b, mean, rstd, N, N, 1e-5, BLOCK_SIZE=4096,
                                                   num_warps=8), lambda: rel_err(y, ref))
        return make, 2 * M * N * 2, "GB/s"

    def matmul(cfg, dt=torch.float16):
        n = 4096
        x, y = torch.randn(n, n, device="cuda", dtype=dt), torch.randn(n, n, device="cuda", dtype=dt)
        ref = x.float() @ y.float()

        def make(m):
            out = torch.empty(n, n, device="cuda", dtype=dt)
            return bench_matmul.launcher(m, x, y, out, cfg), lambda: rel_err(out, ref)
        return make, 2 * n ** 3, "TFLOP/s"

    def matmul_desc():
        n = 4096
        x, y = torch.randn(n, n, device="cuda", dtype=torch.float16), torch.randn(n, n, device="cuda",
                                                                                  dtype=torch.float16)
        ref = x.float() @ y.float()

        def make(m):
            # Descriptors made in a kernel need scratch memory from the allocator (Triton's API).
            m.triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
            out = torch.empty(n, n, device="cuda", dtype=torch.float16)
            return (lambda: m.mm_desc[((n // 128) * (n // 256),)](x, y, out, n, n, n, BM=128, BN=256, BK=64,
                                                                  num_warps=8, num_stages=3)), lambda: rel_err(out, ref)
        return make, 2 * n ** 3, "TFLOP/s"

    def attention():
        B, H, S, D = 4, 16, 4096, 64
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) for _ in range(3))
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.125)

        def make(m):
            out = torch.empty_like(q)
            return (lambda: m.attn_fwd[(S // 128, B * H)](q, k, v, out, 0.125, S, D=D, BLOCK_M=128, BLOCK_N=64,
                                                          K_T=False, num_warps=8, num_stages=3)), \
                lambda: rel_err(out, ref)
        return make, 4 * B * H * S * S * D, "TFLOP/s"

    def attention_bwd(kernel):
        B, H, S, D = 4, 16, 4096, 64
        q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) * 0.5 for _ in range(4))
        m_ = torch.randn(B, H, S, device="cuda")
        di = torch.randn(B, H, S, device="cuda")

        def make(m):
            outs = [torch.empty_like(q) for _ in range(2)]
            if kernel == "dkdv":
                return (lambda: m.bwd_dkdv[(S // 128, B * H)](q, k, v, do, m_, di, outs[0], outs[1], 0.125, S,
                                                              HEAD_DIM=D, BLOCK_M1=32, BLOCK_N1=128, num_warps=4,
                                                              num_stages=5)), None
            return (lambda: m.bwd_dq[(S // 128, B * H)](q, k, v, do, m_, di, outs[0], S, HEAD_DIM=D, BLOCK_M2=128,
                                                        BLOCK_N2=32, num_warps=4, num_stages=5)), None
        return make, (8 if kernel == "dkdv" else 6) * B * H * S * S * D, "TFLOP/s"

    def int8():
        n = 4096
        a = torch.randint(-128, 128, (n, n), dtype=torch.int8, device="cuda")
        b = torch.randint(-128, 128, (n, n), dtype=torch.int8, device="cuda")

        def make(m):
            c = torch.empty((n, n), dtype=torch.int32, device="cuda")
            return (lambda: m.matmul_i8[((n // 128) ** 2,)](a, b, c, n, n, n, n, 1, 1, n, n, 1, BLOCK_M=128,
                                                            BLOCK_N=128, BLOCK_K=128, GROUP_M=8, ACC=m.tl.int32,
                                                            num_warps=8, num_stages=3)), None
        return make, 2 * n ** 3, "TFLOP/s"

    def fp8_block():
        M = N = K = 4096
        kb = K // 128
        A = (torch.randn(M, K, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        Bm = (torch.randn(N, K, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        a_s = torch.rand(M, kb, device="cuda") + 0.5
        b_s = torch.rand(N // 128, kb, device="cuda") + 0.5

        def make(m):
            out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            return (lambda: m.fp8_block_mm[((M // 128) * (N // 128),)](A, Bm, out, a_s, b_s, M, N, K, kb,
                                                                       BLOCK_M=128, BLOCK_N=128, BLOCK_K=128,
                                                                       GROUP_M=8, num_warps=8, num_stages=3)), None
        return make, 2 * M * N * K, "TFLOP/s"

    def transpose():
        T = 8192
        x = torch.randn(T, T, device="cuda", dtype=torch.float16)

        def make(m):
            y = torch.empty_like(x)
            return (lambda: m.transpose_kernel[(T // 64, T // 64)](x, y, T, T, T, 1, T, 1, BM=64, BN=64)), \
                lambda: rel_err(y, x.t())
        return make, 2 * T * T * 2, "GB/s"

    norms = ("norms", bench_norms.SRC)
    attn_bwd = ("attn_bwd", bench_attention_bwd.SRC)
    i8 = ("i8mm", bench_int8_matmul.SRC)
    return {
        "vector_add": (("vadd", "import {mod} as triton\nimport {mod}.language as tl\n"
                        + bench_vector_add.KERNEL_SRC.replace("{mod}.jit", "triton.jit")), vadd),
        "softmax": (norms, lambda: rows("softmax")),
        "layernorm": (norms, lambda: rows("layernorm")),
        "matmul_fp16": (("mm", bench_matmul.SRC), lambda: matmul((128, 256, 64, 8, 3))),
        "matmul_fp16_128x128x32_w4": (("mm", bench_matmul.SRC), lambda: matmul((128, 128, 32, 4, 4))),
        "matmul_bf16": (("mm", bench_matmul.SRC), lambda: matmul((128, 256, 64, 8, 3), torch.bfloat16)),
        "matmul_descriptor": (("mm_desc", bench_matmul_descriptor.SRC), matmul_desc),
        "attention_fwd": (("attn", bench_attention.SRC), attention),
        "attention_bwd_dkdv": (attn_bwd, lambda: attention_bwd("dkdv")),
        "attention_bwd_dq": (attn_bwd, lambda: attention_bwd("dq")),
        "int8_matmul": (i8, int8),
        "fp8_block_matmul": (("fp8mm", bench_fp8_block_matmul.SRC), fp8_block),
        "transpose_fp16": (("strided", bench_strided.SRC), transpose),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipeline", action="append", default=[],
                    help="NAME=PIPELINE (default: the candidates in this file)")
    ap.add_argument("--cases")
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch
    import triton.testing

    os.environ["TILES_CACHE_DIR"] = tempfile.mkdtemp(prefix="tiles-pipeline-")
    os.environ.pop("TILES_LLVM_PIPELINE", None)
    pipes = dict(p.split("=", 1) for p in a.pipeline) if a.pipeline else dict(CANDIDATES)
    table = cases(torch)
    names = a.cases.split(",") if a.cases else list(table)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE)
    res = {"date": time.strftime("%Y-%m-%d"), "commit": commit.stdout.strip() or None,
           "gpu": torch.cuda.get_device_name(), "pipelines": pipes, "cases": []}
    print(f"GPU: {res['gpu']}")
    for name in names:
        (mod_name, src), setup = table[name]
        make, work, unit = setup()
        variants = {"tiles": None, **{f"tiles_{p}": pipe for p, pipe in pipes.items()}, "triton": None}
        runs, row = {}, {"case": name, "unit": unit}
        for v, pipe in variants.items():
            mod = "triton" if v == "triton" else "tiles"
            m = load_source(src.format(mod=mod), f"pl_{mod_name}_{v}")
            run, err = make(m)
            if pipe:
                os.environ["TILES_LLVM_PIPELINE"] = pipe
            try:
                t0 = time.perf_counter()
                run()
                torch.cuda.synchronize()
                row[f"{v}_first_call_ms"] = (time.perf_counter() - t0) * 1e3
                if err is not None:
                    row[f"{v}_rel_err"] = err()
                runs[v] = run
            except Exception as e:  # a variant that cannot compile or run this kernel
                row[f"{v}_error"] = f"{type(e).__name__}: {e}"[:300]
            finally:
                os.environ.pop("TILES_LLVM_PIPELINE", None)
        order = list(runs) + [v for v in reversed(list(runs)) if v != "triton"]
        for v in order:
            if variants[v]:
                os.environ["TILES_LLVM_PIPELINE"] = variants[v]
            try:
                ms = triton.testing.do_bench(runs[v], return_mode="median")
            finally:
                os.environ.pop("TILES_LLVM_PIPELINE", None)
            rate = work / (ms * 1e-3) / (1e12 if unit == "TFLOP/s" else 1e9)
            row[f"{v}_rate"] = max(row.get(f"{v}_rate", 0.0), rate)
        res["cases"].append(row)
        base = row.get("tiles_rate")
        parts = []
        for v in variants:
            r = row.get(f"{v}_rate")
            if r is None:
                parts.append(f"{v} error")
                continue
            rel = f" ({r / base:.3f}x)" if base and v != "tiles" else ""
            parts.append(f"{v} {r:.0f}{rel}, first call {row[f'{v}_first_call_ms']:.0f} ms")
        print(f"{name} [{unit}]: " + "; ".join(parts), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
