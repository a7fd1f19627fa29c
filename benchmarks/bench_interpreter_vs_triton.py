"""The interpreter beside Triton's (TILES_INTERPRET=1 and TRITON_INTERPRET=1, CPU, one process):
vector add, row softmax, matmul and layernorm written once in the Triton language, on CPU torch
tensors (Triton's interpreter needs torch), medians of 3 runs after one; outputs checked
against torch.

Usage (a CPU machine with torch and triton installed):
    python benchmarks/bench_interpreter_vs_triton.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ["TRITON_INTERPRET"] = "1"
os.environ["TILES_INTERPRET"] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _source import load_source  # noqa: E402

SRC = '''
import {mod} as triton
import {mod}.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * stride + offs, mask=offs < n_cols, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * stride + offs, num / tl.sum(num, axis=0), mask=offs < n_cols)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        acc += tl.dot(tl.load(a, mask=rk[None, :] < K - k * BK, other=0.0),
                      tl.load(b, mask=rk[:, None] < K - k * BK, other=0.0))
        a += BK * sak
        b += BK * sbk
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def layernorm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=m, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    d = tl.where(m, x - mean, 0.0)
    rstd = 1 / tl.sqrt(tl.sum(d * d, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=m)
    b = tl.load(b_ptr + cols, mask=m)
    tl.store(y_ptr + row * stride + cols, d * rstd * w + b, mask=m)
'''


def median_ms(fn, reps: int = 3) -> float:
    fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out) * 1e3


def main():
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    n, rows, cols, size = 1 << 20, 512, 1024, 256
    x, y, o = torch.randn(n), torch.randn(n), torch.empty(n)
    xs, ys = torch.randn(rows, cols), torch.empty(rows, cols)
    w, bias = torch.randn(cols), torch.randn(cols)
    ma, mb, mc = torch.randn(size, size), torch.randn(size, size), torch.empty(size, size)
    cases = {
        "vector_add_2e20": (lambda m: m.add_kernel[(n // 1024,)](x, y, o, n, BLOCK=1024),
                            lambda: torch.testing.assert_close(o, x + y)),
        "softmax_512x1024": (lambda m: m.softmax_kernel[(rows,)](ys, xs, cols, cols, BLOCK=1024),
                             lambda: torch.testing.assert_close(ys, torch.softmax(xs, 1))),
        "matmul_256_64x64x32": (lambda m: m.matmul_kernel[(4, 4)](ma, mb, mc, size, size, size, size, 1, size, 1,
                                                                 size, 1, BM=64, BN=64, BK=32),
                                lambda: torch.testing.assert_close(mc, ma @ mb, rtol=1e-2, atol=0.1)),  # tf32
        "layernorm_512x1024": (lambda m: m.layernorm_kernel[(rows,)](xs, ys, w, bias, cols, cols, 1e-5, BLOCK=1024),
                               lambda: torch.testing.assert_close(
                                   ys, torch.nn.functional.layer_norm(xs, (cols,), w, bias, 1e-5), rtol=1e-4,
                                   atol=1e-4)),
    }
    res = {"cores": os.cpu_count()}
    for mod in ("tiles", "triton"):
        m = load_source(SRC.format(mod=mod), f"interp_{mod}")
        for name, (run, check) in cases.items():
            res[f"{mod}_{name}_ms"] = median_ms(lambda run=run, m=m: run(m))
            check()
    for name in cases:
        t, r = res[f"tiles_{name}_ms"], res[f"triton_{name}_ms"]
        print(f"{name}: tiles {t:.0f} ms, Triton {r:.0f} ms ({t / r:.2f}x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
