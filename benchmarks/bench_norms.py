"""Row softmax and layernorm forward, fp16 32768 x 4096: tiles against Triton and torch, one run.

Usage (GPU machine): python benchmarks/bench_norms.py [--json out.json]
GB/s counts the input read once and the output written once.
"""

from __future__ import annotations

import argparse
import json

from _source import load_source

SRC = '''
import {mod} as triton
import {mod}.language as tl


@triton.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row_idx = tl.program_id(0)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    row = tl.load(input_ptr + row_idx * input_row_stride + col_offsets, mask=mask, other=-float("inf"))
    row_minus_max = row - tl.max(row, axis=0)
    numerator = tl.exp(row_minus_max)
    denominator = tl.sum(numerator, axis=0)
    tl.store(output_ptr + row_idx * output_row_stride + col_offsets, numerator / denominator, mask=mask)


@triton.jit
def layer_norm_fwd(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        tl.store(Y + cols, y, mask=mask)
'''


def load(mod: str):
    return load_source(SRC.format(mod=mod), f"norms_{mod}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch
    import triton.testing

    M, N = 32768, 4096
    x = torch.randn(M, N, device="cuda", dtype=torch.float16)
    w = torch.rand(N, device="cuda", dtype=torch.float16) + 0.5
    b = torch.randn(N, device="cuda", dtype=torch.float16)
    bytes_moved = 2 * M * N * 2
    res = {"gpu": torch.cuda.get_device_name(), "M": M, "N": N}
    ref_sm = torch.softmax(x.float(), dim=1)
    ref_ln = torch.nn.functional.layer_norm(x.float(), (N,), w.float(), b.float(), 1e-5)
    variants = [("tiles", "tiles", {}), ("triton", "triton", {}),
                ("tiles_fusion", "tiles", {"enable_fp_fusion": True}),
                ("tiles_maxnreg32", "tiles", {"maxnreg": 32})]
    for name, mod, opts in variants:
        m = load(mod)
        y = torch.empty_like(x)
        sm = lambda m=m, y=y, o=opts: m.softmax_kernel[(M,)](y, x, N, N, N, BLOCK_SIZE=4096, num_warps=8, **o)
        sm()
        torch.cuda.synchronize()
        assert torch.allclose(y.float(), ref_sm, atol=2e-3), f"{name} softmax is wrong"
        res[f"{name}_softmax_gbps"] = bytes_moved / (triton.testing.do_bench(sm, return_mode="median") * 1e-3) / 1e9
        yl = torch.empty_like(x)
        mean = torch.empty(M, device="cuda", dtype=torch.float32)
        rstd = torch.empty(M, device="cuda", dtype=torch.float32)
        ln = lambda m=m, yl=yl, mean=mean, rstd=rstd, o=opts: m.layer_norm_fwd[(M,)](
            x, yl, w, b, mean, rstd, N, N, 1e-5, BLOCK_SIZE=4096, num_warps=8, **o)
        ln()
        torch.cuda.synchronize()
        assert torch.allclose(yl.float(), ref_ln, atol=2e-2), f"{name} layer norm is wrong"
        res[f"{name}_layernorm_gbps"] = bytes_moved / (triton.testing.do_bench(ln, return_mode="median") * 1e-3) / 1e9
    res["torch_softmax_gbps"] = bytes_moved / (triton.testing.do_bench(
        lambda: torch.softmax(x, dim=1), return_mode="median") * 1e-3) / 1e9
    res["torch_layernorm_gbps"] = bytes_moved / (triton.testing.do_bench(
        lambda: torch.nn.functional.layer_norm(x, (N,), w, b), return_mode="median") * 1e-3) / 1e9
    print(f"GPU: {res['gpu']}")
    for k in ("softmax", "layernorm"):
        t, r, p = res[f"tiles_{k}_gbps"], res[f"triton_{k}_gbps"], res[f"torch_{k}_gbps"]
        nf = res[f"tiles_fusion_{k}_gbps"]
        m32 = res[f"tiles_maxnreg32_{k}_gbps"]
        print(f"{k} fp16 {M}x{N}: tiles {t:.0f} GB/s, triton {r:.0f} GB/s ({t / r:.3f}x), torch {p:.0f} GB/s; "
              f"tiles with fp fusion {nf:.0f} GB/s ({nf / r:.3f}x), maxnreg=32 {m32:.0f} GB/s ({m32 / r:.3f}x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
