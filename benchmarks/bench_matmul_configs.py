"""The matmul tutorial's kernel at each of `bench_autotune`'s 8 configurations, timed by one
compiler's `do_bench` (median), the configurations interleaved over rounds. Run it once per
compiler (and once per `TILES_*` switch being compared, each with its own `TILES_CACHE_DIR`)
on the same machine, and compare the best round of each.

Usage (GPU machine): python benchmarks/bench_matmul_configs.py --mod tiles|triton
                         [--sizes 2048,4096] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_autotune import CONFIGS  # noqa: E402
from bench_matmul import load  # noqa: E402


def launch(lib, m, x, y, o, c):
    """One launch of the kernel on `x @ y -> o` at configuration `c`."""
    n = x.shape[0]
    bm, bn, bk, w, s = c
    grid = (lib.cdiv(n, bm) * lib.cdiv(n, bn),)
    m.matmul_kernel[grid](x, y, o, n, n, n, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                          o.stride(0), o.stride(1), BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk,
                          GROUP_SIZE_M=8, num_warps=w, num_stages=s)


def main():
    import functools

    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--mod", default="tiles", choices=("tiles", "triton"))
    ap.add_argument("--sizes", default="2048,4096")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    lib = importlib.import_module(a.mod)
    testing = importlib.import_module(a.mod + ".testing")
    m = load(a.mod)
    out = {"gpu": torch.cuda.get_device_name(), "mod": a.mod, "us": {}}
    for n in (int(s) for s in a.sizes.split(",")):
        x = torch.randn(n, n, device="cuda", dtype=torch.float16)
        y = torch.randn_like(x)
        o = torch.empty_like(x)
        call = functools.partial(launch, lib, m, x, y, o)
        ref = x.float() @ y.float()
        for c in CONFIGS:
            call(c)
            err = ((o.float() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, (c, err)
        rows = {str(c): [] for c in CONFIGS}
        for _ in range(a.rounds):
            for c in CONFIGS:
                ms = testing.do_bench(functools.partial(call, c), warmup=25, rep=100, return_mode="median")
                rows[str(c)].append(ms * 1e3)
        for c in CONFIGS:
            t = rows[str(c)]
            print(f"{a.mod} {n}^3 {c}: " + " ".join(f"{v:.1f}" for v in t)
                  + f" us, best {2 * n ** 3 / min(t) / 1e6:.0f} TFLOP/s", flush=True)
        out["us"][str(n)] = rows
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
