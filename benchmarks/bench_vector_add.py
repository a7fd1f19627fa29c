"""Vector add and launch/cold-start costs: tiles against Triton and torch, in one run.

Usage (on a GPU machine): python benchmarks/bench_vector_add.py [--json out.json]
Figures: vector add fp32 at 2^28 elements with BLOCK 1024 (GB/s, each input read once and
the output written once); the CPU cost of one launch of a 4-argument kernel (no sync); the
first call of a kernel in a fresh process with an empty cache (compile + load + launch).
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

from _source import load_source

KERNEL_SRC = '''
@{mod}.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)
'''


def make_kernel(mod_name: str):
    if mod_name == "tiles":
        import tiles as mod
        import tiles.language as tl
    else:
        import triton as mod
        import triton.language as tl
    src = "import {0} as mod\nimport {0}.language as tl\n".format(mod_name) + KERNEL_SRC.format(mod="mod")
    m = load_source(src, f"add_{mod_name}")
    _ = (mod, tl)
    return m.add_kernel


def bandwidth(kernel, x, y, out, n):
    import triton.testing

    grid = ((n + 1023) // 1024,)
    fn = lambda: kernel[grid](x, y, out, n, BLOCK_SIZE=1024)
    fn()
    ms = triton.testing.do_bench(fn, warmup=100, rep=500, return_mode="median")
    return 3 * n * x.element_size() / (ms * 1e-3) / 1e9


def per_call_us(call, n_launch=5000, reps=7):
    """CPU microseconds one `call()` takes, no sync: the median of `reps` runs of `n_launch`
    calls, after 200 (the GPU drained between runs). 5,000 calls in a row fill the launch
    queue, after which each waits for the GPU to retire a kernel, so a GPU slower at
    back-to-back kernels than the CPU at launching them is what that times; runs of 64 from the
    drained GPU (`per_call_us(call, 64, 400)`) stay below the queue's depth and time the CPU's
    work alone."""
    import torch

    for _ in range(200):
        call()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n_launch):
            call()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        samples.append((t1 - t0) / n_launch * 1e6)
    return statistics.median(samples)


def launch_cost_us(kernel, args, n_launch=5000, reps=7):
    return per_call_us(lambda: kernel[(1,)](*args, BLOCK_SIZE=1024), n_launch, reps)


COLD = r'''
import os, sys, time
t0 = time.perf_counter()
import torch
x = torch.randn(1 << 20, device="cuda"); y = torch.randn(1 << 20, device="cuda"); out = torch.empty_like(x)
torch.cuda.synchronize()
sys.path.insert(0, os.path.dirname(os.path.abspath({bench!r})))
from bench_vector_add import make_kernel
t_import = time.perf_counter()
k = make_kernel({mod!r})
t1 = time.perf_counter()
k[(1024,)](x, y, out, 1 << 20, BLOCK_SIZE=1024)
torch.cuda.synchronize()
t2 = time.perf_counter()
assert torch.allclose(out, x + y)
print(f"{{(t2 - t1) * 1e3:.1f}} {{(t1 - t_import) * 1e3:.1f}}")
'''


def cold_start_ms(mod: str, runs: int = 3):
    out = []
    for _ in range(runs):
        env = dict(os.environ)
        env["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
        env["TILES_CACHE_DIR"] = tempfile.mkdtemp()
        env["CUDA_CACHE_DISABLE"] = "1"  # the driver's cache of assembled PTX: an empty cache has none
        r = subprocess.run([sys.executable, "-c", COLD.format(bench=__file__, mod=mod)], capture_output=True,
                           text=True, env=env)
        if r.returncode != 0:
            raise RuntimeError(r.stderr)
        out.append(float(r.stdout.split()[0]))
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--log2n", type=int, default=28)
    a = ap.parse_args()
    import torch

    n = 1 << a.log2n
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    res = {"gpu": torch.cuda.get_device_name(), "n": n}
    tk, rk = make_kernel("tiles"), make_kernel("triton")
    for name, k in (("tiles", tk), ("triton", rk)):
        out = torch.full_like(x, float("nan"))
        res[f"{name}_gbps"] = bandwidth(k, x, y, out, n)
        assert torch.equal(out, x + y), f"{name} computed a wrong sum"
    import triton.testing

    out = torch.empty_like(x)
    ms = triton.testing.do_bench(lambda: torch.add(x, y, out=out), warmup=100, rep=500, return_mode="median")
    res["torch_gbps"] = 3 * n * 4 / (ms * 1e-3) / 1e9
    small = [torch.randn(1024, device="cuda") for _ in range(3)]
    for name, k in (("tiles", tk), ("triton", rk)):
        res[f"{name}_launch_us"] = launch_cost_us(k, (*small, 1024))
    torch_add = type("K", (), {"__getitem__": lambda s, g: (lambda a, b, c, n, BLOCK_SIZE: torch.add(a, b, out=c))})
    res["torch_add_launch_us"] = launch_cost_us(torch_add(), (*small, 1024))
    for name in ("tiles", "triton"):
        res[f"{name}_cold_first_call_ms"] = cold_start_ms(name)
    print(f"GPU: {res['gpu']}")
    print(f"vector add fp32 2^{a.log2n}: tiles {res['tiles_gbps']:.0f} GB/s, triton {res['triton_gbps']:.0f} GB/s "
          f"({res['tiles_gbps'] / res['triton_gbps']:.3f}x), torch {res['torch_gbps']:.0f} GB/s")
    print(f"launch (4 args, no sync): tiles {res['tiles_launch_us']:.2f} us, triton {res['triton_launch_us']:.2f} us, "
          f"torch.add {res['torch_add_launch_us']:.2f} us")
    print(f"first call, fresh process, empty cache: tiles {res['tiles_cold_first_call_ms']:.0f} ms, "
          f"triton {res['triton_cold_first_call_ms']:.0f} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
