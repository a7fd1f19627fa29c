"""Warming kernels up on threads, as a model server does at start: K distinct kernels warmed up
one after another, then K others under `AsyncCompileMode` on a pool of K threads, the best of a
few rounds of each (on a GPU machine: each warmup compiles, assembles the PTX with the driver
and loads the module; the driver's cache of compiled PTX is off). Each kernel is a copy of the
source with its own mark, so that every warmup compiles under both compilers; Triton's figures
for the same kernels come from the same run.

Usage (on a GPU machine): python benchmarks/bench_warmup_threads.py [--json out.json]
    [--mods tiles,triton] [--rounds 3]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_compile_cpu import load  # noqa: E402


def _args(kind: str):
    import torch

    h = dict(dtype=torch.float16, device="cuda")
    if kind == "layernorm":
        x = torch.randn(64, 1024, **h)
        f32 = torch.empty(64, dtype=torch.float32, device="cuda")
        return "layer_norm_fwd", (x, x, x[0], x[0], f32, f32, 1024, 1024, 1e-5), dict(BLOCK_SIZE=1024)
    a = torch.randn(512, 512, **h)
    return "matmul_kernel", (a, a, a, 512, 512, 512, 512, 1, 512, 1, 512, 1), dict(
        BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=64, GROUP_SIZE_M=8, num_warps=8, num_stages=3)


_copies = itertools.count(1)


def _kernels(mod: str, kind: str, k: int):
    """k kernels no cache of either compiler has seen (each a copy of the source with a mark)."""
    name, args, kw = _args(kind)
    return [getattr(load(mod, copy=next(_copies)), name) for _ in range(k)], args, kw


def _async_mode(mod: str):
    if mod == "tiles":
        import tiles

        return tiles.AsyncCompileMode
    from triton.runtime._async_compile import AsyncCompileMode

    return AsyncCompileMode


def _warm_all(fns, args, kw, pool=None, mode=None):
    """Seconds to warm `fns` up: one after another, or under `mode` on `pool`."""
    import torch

    t0 = time.perf_counter()
    if pool is None:
        for f in fns:
            f.warmup(*args, grid=(1,), **kw)
    else:
        with mode(pool):
            for f in fns:
                f.warmup(*args, grid=(1,), **kw)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def speedup(mod: str, kind: str, k: int, rounds: int):
    """(ms a kernel one after another, ms of wall a kernel on k threads, speed-up): the best of
    `rounds` rounds of each, alternating, on one pool of k threads made first (as a server
    keeps its pool)."""
    mode = _async_mode(mod)
    pool = ThreadPoolExecutor(k)
    _warm_all(*_kernels(mod, kind, k), pool=pool, mode=mode)  # the pool's threads start
    seq, par = [], []
    for _ in range(rounds):
        seq.append(_warm_all(*_kernels(mod, kind, k)))
        par.append(_warm_all(*_kernels(mod, kind, k), pool=pool, mode=mode))
    pool.shutdown()
    return min(seq) / k * 1e3, min(par) / k * 1e3, min(seq) / min(par)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--mods", default="tiles,triton")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    os.environ["TILES_CACHE_DIR"] = tempfile.mkdtemp()
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
    # The copies differ in their source only, so their PTX is the same: the driver's cache would
    # answer every assembly after the first (its linker's, tiles' default, as its loads').
    os.environ["CUDA_CACHE_DISABLE"] = "1"
    import torch

    torch.zeros(1, device="cuda")
    res = {"cpu_cores": os.cpu_count(), "gpu": torch.cuda.get_device_name()}
    for mod in a.mods.split(","):
        for kind in ("layernorm", "matmul"):
            _warm_all(*_kernels(mod, kind, 2))  # the driver's JIT and the allocator warm up
            for k in (4, 8, 16):
                try:
                    one, many, s = speedup(mod, kind, k, a.rounds)
                except Exception as e:  # a case a compiler cannot run: reported, the rest go on
                    print(f"{mod} {kind} K={k}: {type(e).__name__}: {e}")
                    break
                res[f"{mod}_{kind}_{k}"] = dict(sequential_ms=one, threads_ms=many, speedup=s)
                print(f"{mod} {kind} K={k}: {one:.1f} ms a kernel one after another, {many:.1f} ms of wall a "
                      f"kernel on {k} threads: {s:.2f}x", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
