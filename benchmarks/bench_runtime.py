"""Runtime costs on a GPU machine, tiles against Triton in one run: the first call of a kernel in
a fresh process with an empty and with a warm on-disk cache (vector add, softmax, matmul,
attention), one more kernel in a warm process, and K kernels compiled on K threads.

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

# One kernel of each kind the goals name: (setup before the clock, kernel loading, the call, a check).
CASES = {
    "vector_add": (
        "x = torch.randn(1 << 20, device='cuda'); y = torch.randn(1 << 20, device='cuda'); "
        "out = torch.empty_like(x)",
        "from bench_vector_add import make_kernel; k = make_kernel({mod!r})",
        "k[(1024,)](x, y, out, 1 << 20, BLOCK_SIZE=1024)",
        "assert torch.equal(out, x + y)",
    ),
    "softmax": (
        "x = torch.randn(4096, 4096, device='cuda', dtype=torch.float16); y = torch.empty_like(x)",
        "from bench_norms import load; m = load({mod!r})",
        "m.softmax_kernel[(4096,)](y, x, 4096, 4096, 4096, BLOCK_SIZE=4096, num_warps=8)",
        "assert torch.allclose(y.float(), torch.softmax(x.float(), 1), atol=2e-3)",
    ),
    "matmul": (
        "x = torch.randn(2048, 2048, device='cuda', dtype=torch.float16); y = torch.randn_like(x); "
        "out = torch.empty_like(x)",
        "from bench_matmul import load, launcher; run = launcher(load({mod!r}), x, y, out, (128, 256, 64, 8, 3))",
        "run()",
        "ref = x.float() @ y.float(); assert ((out.float() - ref).norm() / ref.norm()).item() < 1e-2",
    ),
    "attention": (
        "q, k, v = (torch.randn(1, 4, 1024, 64, device='cuda', dtype=torch.float16) for _ in range(3)); "
        "out = torch.empty_like(q)",
        "from bench_attention import load; m = load({mod!r})",
        "m.attn_fwd[(1024 // 128, 4)](q, k, v, out, 0.125, 1024, D=64, BLOCK_M=128, BLOCK_N=64, K_T=False, "
        "num_warps=8, num_stages=3)",
        "ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.125); "
        "assert ((out.float() - ref.float()).norm() / ref.float().norm()).item() < 1e-2",
    ),
}

FIRST_CALL = r'''
import os, sys, time
import torch
sys.path.insert(0, {here!r})
{setup}
torch.cuda.synchronize()
t0 = time.perf_counter()
import {mod} as triton
{load}
t1 = time.perf_counter()
{call}
torch.cuda.synchronize()
t2 = time.perf_counter()
{check}
print(f"{{(t2 - t1) * 1e3:.2f}} {{(t2 - t0) * 1e3:.2f}}")
'''


def fresh_process(src: str, cache: str, env=None, timeout: float = 120) -> str:
    """Runs `python -c src` in a fresh process whose tiles and Triton caches are `cache`, with
    the driver's own cache of PTX it assembled (`~/.nv/ComputeCache`) off: with it, every run
    after the first would skip assembling tiles' PTX, which an empty cache must pay (Triton
    ships cubins, unaffected). `env` adds to the environment (a None value removes a name).
    Returns the process's output; its error output's end is the error when it fails."""
    full = dict(os.environ, TRITON_CACHE_DIR=cache, TILES_CACHE_DIR=cache, CUDA_CACHE_DISABLE="1")
    for k, v in (env or {}).items():
        if v is None:
            full.pop(k, None)
        else:
            full[k] = v
    r = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, env=full, timeout=timeout)
    if r.returncode:
        raise RuntimeError(r.stderr[-3000:])
    return r.stdout


def first_call(mod: str, cache: str, case: str = "vector_add"):
    """(first call, first call with the import) in a fresh process, ms (`fresh_process`).
    With `TILES_ASSEMBLER=load` the disk cache holds no cubins, so the driver's cache is on,
    moved into `cache`: empty for the first call, warm for the next, as on a user's machine."""
    setup, load, call, check = CASES[case]
    src = FIRST_CALL.format(mod=mod, here=HERE, setup=setup, load=load.format(mod=mod), call=call, check=check)
    env = {}
    if mod == "tiles" and os.environ.get("TILES_ASSEMBLER", "").strip().lower() == "load":
        env = {"CUDA_CACHE_PATH": os.path.join(cache, "nv"), "CUDA_CACHE_DISABLE": None}
    call, with_import = (float(v) for v in fresh_process(src, cache, env).split())
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


def processes(k: int):
    """The same compiles in K processes at once: what the host's cores give (bench_compile_cpu)."""
    sys.path.insert(0, HERE)
    from bench_compile_cpu import processes_speedup

    return processes_speedup(k)


def threads(k: int, per_thread: int = 1, kernel: str = "layernorm"):
    """K·`per_thread` equal compiles one after another, then on K threads with `compile_many`
    (bench_compile_cpu's measure, with the disk cache off): layernorm's plain signature, or the
    matmul as launched."""
    sys.path.insert(0, HERE)
    from bench_compile_cpu import threads_speedup

    os.environ["TILES_CACHE"] = "0"
    try:
        return threads_speedup(k, per_thread=per_thread, kernel=kernel, launched=kernel == "matmul")
    finally:
        os.environ.pop("TILES_CACHE")


def contention(ks=(4, 8)) -> dict:
    """The time of one compile's Rust stages alone, on 1 thread, on K threads and in K processes
    at once (`bench_compile_cpu.backend_contention`), in a fresh process: it forks, and this one
    has threads by now."""
    out = subprocess.run([sys.executable, os.path.join(HERE, "bench_compile_cpu.py"), "--contention",
                          ",".join(map(str, ks))], capture_output=True, text=True, timeout=900, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--cases", default=",".join(CASES), help="first-call cases, comma-separated")
    ap.add_argument("--first-calls-only", action="store_true", help="skip one-more-kernel and the thread figures")
    ap.add_argument("--mods", default="tiles,triton", help="compilers, comma-separated")
    ap.add_argument("--threads-only", action="store_true", help="only the thread and process figures")
    a = ap.parse_args()
    res = {}

    def save():  # after each measure, so that a run cut short keeps what it measured
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=2)

    for mod in [] if a.threads_only else a.mods.split(","):
        for case in a.cases.split(","):
            colds, warms = [], []
            for _ in range(3):
                cache = tempfile.mkdtemp()
                colds.append(first_call(mod, cache, case))
                warms.append(first_call(mod, cache, case))
            # Vector add keeps the keys of earlier results files.
            tag = "" if case == "vector_add" else f"_{case}"
            res[f"{mod}_cold_first_call{tag}_ms"] = statistics.median(c[0] for c in colds)
            res[f"{mod}_warm_cache_first_call{tag}_ms"] = statistics.median(w[0] for w in warms)
            res[f"{mod}_warm_cache_first_call_with_import{tag}_ms"] = statistics.median(w[1] for w in warms)
            print(f"{mod} {case}: first call, empty cache {res[f'{mod}_cold_first_call{tag}_ms']:.1f} ms; "
                  f"warm cache {res[f'{mod}_warm_cache_first_call{tag}_ms']:.1f} ms "
                  f"({res[f'{mod}_warm_cache_first_call_with_import{tag}_ms']:.1f} ms with the import)", flush=True)
            save()
        if not a.first_calls_only:
            res[f"{mod}_one_more_kernel_ms"] = one_more_kernel(mod)
    if a.first_calls_only:
        return
    for k in (4, 8):
        res[f"tiles_threads_{k}_speedup"] = threads(k)
        res[f"tiles_threads_{k}_x4_speedup"] = threads(k, per_thread=4)
        res[f"tiles_threads_{k}_matmul_speedup"] = threads(k, kernel="matmul")
        res[f"tiles_processes_{k}_speedup"] = processes(k)
        save()
    for case, times in contention().items():
        for setting, ms in times.items():
            res[f"tiles_backend_{case}_{setting}_ms"] = ms
    save()
    res["cpu_cores"] = os.cpu_count()
    for mod in [] if a.threads_only else a.mods.split(","):
        print(f"{mod}: one more kernel {res[f'{mod}_one_more_kernel_ms']:.1f} ms")
    print(f"compile_many: K kernels on 4 / 8 threads {res['tiles_threads_4_speedup']:.2f}x / "
          f"{res['tiles_threads_8_speedup']:.2f}x, 4K kernels {res['tiles_threads_4_x4_speedup']:.2f}x / "
          f"{res['tiles_threads_8_x4_speedup']:.2f}x, K matmuls {res['tiles_threads_4_matmul_speedup']:.2f}x / "
          f"{res['tiles_threads_8_matmul_speedup']:.2f}x ({res['cpu_cores']} cores); K compiles in 4 / 8 "
          f"processes: {res['tiles_processes_4_speedup']:.2f}x / {res['tiles_processes_8_speedup']:.2f}x")
    for kernel in ("layernorm", "matmul"):
        for k in (4, 8):
            p = f"tiles_backend_{kernel}_{k}"
            print(f"{kernel}'s Rust stages, one compile: {res[p + '_one_thread_ms']:.1f} ms alone, "
                  f"{res[p + '_threads_ms']:.1f} on {k} threads, {res[p + '_processes_ms']:.1f} in {k} processes")
    save()


if __name__ == "__main__":
    main()
