"""The first call of an autotuned matmul in a fresh process with an empty cache: every config is
compiled, then timed, then the fastest runs. tiles compiles the configs ahead of the timing on
its compile pool's threads (`TILES_AUTOTUNE_COMPILE_AHEAD`, on by default); the same with it
off (each config compiled at its first timed launch, one after another, as Triton does); and
Triton, in one run.

Two timings per case: with the autotuner's default timing (warm-up 25 ms, 100 ms of runs per
config), and with 1 ms of each, where the compiles are most of the time.

Usage (GPU machine): python benchmarks/bench_autotune.py [--json out.json] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile

from bench_runtime import fresh_process

HERE = os.path.dirname(os.path.abspath(__file__))

# (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages): tensor-core tiles of the sizes H100 matmuls use.
CONFIGS = [(128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 4, 4), (128, 128, 32, 4, 4),
           (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (64, 64, 64, 4, 4), (64, 64, 32, 2, 5)]

FIRST_CALL = r'''
import sys, time
import torch
sys.path.insert(0, {here!r})
import {mod} as triton
from bench_matmul import load
m = load({mod!r})
configs = [triton.Config(dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8), num_warps=w,
                         num_stages=s) for bm, bn, bk, w, s in {configs!r}]
tuned = triton.autotune(configs=configs, key=["M", "N", "K"], warmup={warmup}, rep={rep})(m.matmul_kernel)
n = 2048
x = torch.randn(n, n, device="cuda", dtype=torch.float16); y = torch.randn_like(x); out = torch.empty_like(x)
grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE_M"]) * triton.cdiv(n, meta["BLOCK_SIZE_N"]),)
torch.cuda.synchronize()
t0 = time.perf_counter()
tuned[grid](x, y, out, n, n, n, x.stride(0), x.stride(1), y.stride(0), y.stride(1), out.stride(0), out.stride(1))
torch.cuda.synchronize()
t1 = time.perf_counter()
ref = x.float() @ y.float()
assert ((out.float() - ref).norm() / ref.norm()).item() < 1e-2
print(f"{{(t1 - t0) * 1e3:.1f}}")
'''


def first_call(mod: str, warmup: int, rep: int, ahead: bool = True) -> float:
    """ms from the launch to the result, in a fresh process with empty caches
    (`bench_runtime.fresh_process`)."""
    src = FIRST_CALL.format(mod=mod, here=HERE, configs=CONFIGS, warmup=warmup, rep=rep)
    env = {"TILES_AUTOTUNE_COMPILE_AHEAD": "1" if ahead else "0"}
    return float(fresh_process(src, tempfile.mkdtemp(), env, timeout=300).split()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--runs", type=int, default=3, help="fresh processes per case (median)")
    a = ap.parse_args()
    res = {"configs": CONFIGS, "cpu_cores": os.cpu_count()}
    cases = [("tiles", "tiles", True), ("tiles_one_by_one", "tiles", False), ("triton", "triton", True)]
    for timing, (warmup, rep) in (("default", (25, 100)), ("short", (1, 1))):
        for name, mod, ahead in cases:
            runs = [first_call(mod, warmup, rep, ahead) for _ in range(a.runs)]
            res[f"{name}_{timing}_ms"] = statistics.median(runs)
            res[f"{name}_{timing}_runs"] = runs
        print(f"{len(CONFIGS)} configs, timing {timing} (warm-up {warmup} ms, {rep} ms of runs): tiles "
              f"{res[f'tiles_{timing}_ms']:.0f} ms, one by one {res[f'tiles_one_by_one_{timing}_ms']:.0f} ms, "
              f"Triton {res[f'triton_{timing}_ms']:.0f} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
