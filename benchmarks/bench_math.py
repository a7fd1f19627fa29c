"""Elementwise fp32 math (log, log2, sin, cos, erf) and a JSD-style loss: tiles against Triton,
one run. These functions follow libdevice's accuracy in both, so they cost more than the
hardware approximations; this measures whether the cost shows in memory-bound kernels.

Usage (GPU machine): python benchmarks/bench_math.py [--json out.json]
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
def unary(X, Y, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    x = tl.load(X + o, mask=m)
    if FN == "log":
        y = tl.log(x)
    elif FN == "log2":
        y = tl.log2(x)
    elif FN == "sin":
        y = tl.sin(x)
    elif FN == "cos":
        y = tl.cos(x)
    elif FN == "erf":
        y = tl.erf(x)
    else:
        y = tl.exp(x)
    tl.store(Y + o, y, mask=m)


@triton.jit
def jsd(X, Yp, L, n, beta: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    x = tl.load(X + o, mask=m)
    y = tl.load(Yp + o, mask=m)
    q = tl.exp(x)
    p = tl.exp(y)
    mix = beta * p + (1 - beta) * q
    tl.store(L + o, beta * p * y + (1 - beta) * q * x - mix * tl.log(mix), mask=m)
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch
    import triton.testing

    n = 1 << 26
    x = torch.rand(n, device="cuda") * 4 + 0.01
    res = {"gpu": torch.cuda.get_device_name(), "n": n}
    mods = {name: load_source(SRC.format(mod=name), f"math_{name}") for name in ("tiles", "triton")}
    print(f"GPU: {res['gpu']}")
    for fn in ("exp", "log", "log2", "sin", "cos", "erf"):
        for name, m in mods.items():
            y = torch.empty_like(x)
            run = lambda m=m, y=y, fn=fn: m.unary[(n // 1024,)](x, y, n, FN=fn, BLOCK=1024)  # noqa: E731
            run()
            ms = triton.testing.do_bench(run, return_mode="median")
            res[f"{name}_{fn}_gbps"] = 8 * n / (ms * 1e-3) / 1e9
        t, r = res[f"tiles_{fn}_gbps"], res[f"triton_{fn}_gbps"]
        print(f"{fn:5s} fp32 {n}: tiles {t:.0f} GB/s, triton {r:.0f} GB/s ({t / r:.3f}x)")
    xl = torch.log_softmax(torch.randn(n, device="cuda"), 0)
    yl = torch.log_softmax(torch.randn(n, device="cuda"), 0)
    for name, m in mods.items():
        out = torch.empty_like(xl)
        run = lambda m=m, out=out: m.jsd[(n // 1024,)](xl, yl, out, n, beta=0.5, BLOCK=1024)  # noqa: E731
        run()
        ms = triton.testing.do_bench(run, return_mode="median")
        res[f"{name}_jsd_gbps"] = 12 * n / (ms * 1e-3) / 1e9
    t, r = res["tiles_jsd_gbps"], res["triton_jsd_gbps"]
    print(f"jsd   fp32 {n}: tiles {t:.0f} GB/s, triton {r:.0f} GB/s ({t / r:.3f}x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
