"""Runtime costs on a GPU machine, tiles against Triton in one run: the first call of a kernel in
a fresh process with an empty and with a warm on-disk cache, one more kernel in a warm process,
and K kernels compiled on K threads.

Usage: python benchmarks/bench_runtime.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

FIRST_CALL = r'''
import os, sys, time
import torch
x = torch.randn(1 << 20, device="cuda"); y = torch.randn(1 << 20, device="cuda"); out = torch.empty_like(x)
torch.cuda.synchronize()
t0 = time.perf_counter()
import {mod} as triton
sys.path.insert(0, {here!r})
from bench_vector_add import make_kernel
k = make_kernel({mod!r})
t1 = time.perf_counter()
k[(1024,)](x, y, out, 1 << 20, BLOCK_SIZE=1024)
torch.cuda.synchronize()
t2 = time.perf_counter()
assert torch.equal(out, x + y)
print(f"{{(t2 - t1) * 1e3:.2f}} {{(t2 - t0) * 1e3:.2f}}")
'''


def first_call(mod: str, cache: str):
    env = dict(os.environ, TRITON_CACHE_DIR=cache, TILES_CACHE_DIR=cache)
    r = subprocess.run([sys.executable, "-c", FIRST_CALL.format(mod=mod, here=HERE)], capture_output=True, text=True,
                       env=env)
    if r.returncode:
        raise RuntimeError(r.stderr)
    call, with_import = (float(v) for v in r.stdout.split())
    return call, with_import


def one_more_kernel(mod: str):
    """A second kernel (new constexpr) in a process that already ran one."""
    import torch

    sys.path.insert(0, HERE)
    from bench_vector_add import make_kernel

    os.environ["TILES_CACHE_DIR"] = os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
    k = make_kernel(mod)
    x = torch.randn(1 << 20, device="cuda")
    out = torch.empty_like(x)
    k[(1024,)](x, x, out, 1 << 20, BLOCK_SIZE=1024)
    torch.cuda.synchronize()
    times = []
    for block in (256, 512, 2048, 4096):
        t0 = time.perf_counter()
        k[((1 << 20) // block,)](x, x, out, 1 << 20, BLOCK_SIZE=block)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def threads(k: int, reps: int = 3):
    """K equal layernorm compiles one after another, then on K threads with `compile_many`: the
    best of `reps` rounds of each (bench_compile_cpu's measure, with the disk cache off)."""
    sys.path.insert(0, HERE)
    from bench_compile_cpu import threads_speedup

    os.environ["TILES_CACHE"] = "0"
    try:
        return threads_speedup(k, reps)
    finally:
        os.environ.pop("TILES_CACHE")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    res = {}
    for mod in ("tiles", "triton"):
        colds, warms = [], []
        for _ in range(3):
            cache = tempfile.mkdtemp()
            colds.append(first_call(mod, cache))
            warms.append(first_call(mod, cache))
        res[f"{mod}_cold_first_call_ms"] = statistics.median(c[0] for c in colds)
        res[f"{mod}_warm_cache_first_call_ms"] = statistics.median(w[0] for w in warms)
        res[f"{mod}_warm_cache_first_call_with_import_ms"] = statistics.median(w[1] for w in warms)
        res[f"{mod}_one_more_kernel_ms"] = one_more_kernel(mod)
    for k in (4, 8):
        res[f"tiles_threads_{k}_speedup"] = threads(k)
    res["cpu_cores"] = os.cpu_count()
    for mod in ("tiles", "triton"):
        print(f"{mod}: first call, empty cache {res[f'{mod}_cold_first_call_ms']:.1f} ms; warm cache "
              f"{res[f'{mod}_warm_cache_first_call_ms']:.1f} ms "
              f"({res[f'{mod}_warm_cache_first_call_with_import_ms']:.1f} ms with the import); one more kernel "
              f"{res[f'{mod}_one_more_kernel_ms']:.1f} ms")
    print(f"compile_many: 4 threads {res['tiles_threads_4_speedup']:.2f}x, 8 threads "
          f"{res['tiles_threads_8_speedup']:.2f}x ({res['cpu_cores']} cores)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
