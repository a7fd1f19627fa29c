"""The first call of an autotuned matmul in a fresh process with an empty cache: every config is
compiled, then timed, then the fastest runs. tiles compiles the configs ahead of the timing on
its compile pool's threads (`TILES_AUTOTUNE_COMPILE_AHEAD`, on by default) and screens them,
timing in full only those within 1.5x of the fastest (`TILES_AUTOTUNE_SCREEN`); the same
without the screen; with neither (each config compiled at its first timed launch, one after
another, and every config timed, as Triton does); and Triton, in one run. Each case also
records the config it chose.

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
c = tuned.best_config
print(f"{{(t1 - t0) * 1e3:.1f}} {{c.kwargs['BLOCK_SIZE_M']}}x{{c.kwargs['BLOCK_SIZE_N']}}x{{c.kwargs['BLOCK_SIZE_K']}}"
      f"w{{c.num_warps}}s{{c.num_stages}}")
'''


def first_call(mod: str, warmup: int, rep: int, ahead: bool = True, screen: bool = True):
    """(ms from the launch to the result, the chosen config), in a fresh process with empty
    caches (`bench_runtime.fresh_process`)."""
    src = FIRST_CALL.format(mod=mod, here=HERE, configs=CONFIGS, warmup=warmup, rep=rep)
    env = {"TILES_AUTOTUNE_COMPILE_AHEAD": "1" if ahead else "0", "TILES_AUTOTUNE_SCREEN": None if screen else "0"}
    ms, chosen = fresh_process(src, tempfile.mkdtemp(), env, timeout=300).split()[-2:]
    return float(ms), chosen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--runs", type=int, default=3, help="fresh processes per case (median)")
    a = ap.parse_args()
    res = {"configs": CONFIGS, "cpu_cores": os.cpu_count()}
    cases = [("tiles", "tiles", True, True), ("tiles_no_screen", "tiles", True, False),
             ("tiles_one_by_one", "tiles", False, False), ("triton", "triton", True, False)]
    for timing, (warmup, rep) in (("default", (25, 100)), ("short", (1, 1))):
        for name, mod, ahead, screen in cases:
            runs = [first_call(mod, warmup, rep, ahead, screen) for _ in range(a.runs)]
            res[f"{name}_{timing}_ms"] = statistics.median(ms for ms, _ in runs)
            res[f"{name}_{timing}_runs"] = [ms for ms, _ in runs]
            res[f"{name}_{timing}_chosen"] = [c for _, c in runs]
        print(f"{len(CONFIGS)} configs, timing {timing} (warm-up {warmup} ms, {rep} ms of runs): "
              + ", ".join(f"{name} {res[f'{name}_{timing}_ms']:.0f} ms ({' '.join(res[f'{name}_{timing}_chosen'])})"
                          for name, *_ in cases), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
