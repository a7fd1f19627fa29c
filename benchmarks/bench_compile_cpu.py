"""Compile time without a GPU, side by side with Triton: Python source -> PTX (Triton's cubin
stage excluded), the same kernels, in one run; K kernels on K threads; `import` time.

Usage: python benchmarks/bench_compile_cpu.py [--json out.json] [--contention 4,8]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _source import load_source  # noqa: E402
from bench_attention import SRC as ATTN_SRC  # noqa: E402
from bench_matmul import SRC as MATMUL_SRC  # noqa: E402
from bench_norms import SRC as NORMS_SRC  # noqa: E402
from bench_vector_add import KERNEL_SRC as ADD_SRC  # noqa: E402

KERNELS = {
    "vector_add": ("add_kernel", {"x_ptr": "*fp32", "y_ptr": "*fp32", "output_ptr": "*fp32", "n_elements": "i32"},
                   {"BLOCK_SIZE": 1024}, 4),
    "softmax": ("softmax_kernel", {"output_ptr": "*fp16", "input_ptr": "*fp16", "input_row_stride": "i32",
                                   "output_row_stride": "i32", "n_cols": "i32"}, {"BLOCK_SIZE": 1024}, 4),
    "layernorm": ("layer_norm_fwd", {"X": "*fp16", "Y": "*fp16", "W": "*fp16", "B": "*fp16", "Mean": "*fp32",
                                     "Rstd": "*fp32", "stride": "i32", "N": "i32", "eps": "fp32"},
                  {"BLOCK_SIZE": 1024}, 4),
    "matmul": ("matmul_kernel", {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32",
                                 "K": "i32", "stride_am": "i32", "stride_ak": "i32", "stride_bk": "i32",
                                 "stride_bn": "i32", "stride_cm": "i32", "stride_cn": "i32"},
               {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}, 4),
    "attention": ("attn_fwd", {"Q": "*fp16", "K": "*fp16", "V": "*fp16", "Out": "*fp16", "sm_scale": "fp32",
                               "S": "i32"}, {"D": 64, "BLOCK_M": 64, "BLOCK_N": 64, "K_T": True}, 4),
}

# What a launch specialises for the benchmark's shapes: every pointer and these integers are
# multiples of 16, these strides are 1 (Triton and tiles both specialise so on a launch).
AS_LAUNCHED = {
    "vector_add": (("n_elements",), ()),
    "softmax": (("input_row_stride", "output_row_stride", "n_cols"), ()),
    "layernorm": (("stride", "N"), ()),
    "matmul": (("M", "N", "K", "stride_am", "stride_bk", "stride_cm"), ("stride_ak", "stride_bn", "stride_cn")),
    "attention": (("S",), ()),
}


def as_launched(kernel: str):
    """The kernel's (signature, constexprs, divisible-by-16 names) as a launch specialises it."""
    _, sig, cx, _ = KERNELS[kernel]
    div, ones = AS_LAUNCHED[kernel]
    sig2 = {k: v for k, v in sig.items() if k not in ones}
    cx2 = dict(cx, **{k: 1 for k in ones})
    return sig2, cx2, [k for k, v in sig2.items() if v.startswith("*") or k in div]


def load(mod: str, copy: int = 0):
    """The benchmark kernels under `mod` (tiles or triton). A nonzero `copy` marks each kernel's
    source with a comment, so that neither compiler's caches know it."""
    src = (f"import {mod} as triton\nimport {mod}.language as tl\n" + ADD_SRC.format(mod="triton")
           + NORMS_SRC.format(mod=mod).split("\n", 3)[3] + MATMUL_SRC.format(mod=mod).split("\n", 3)[3]
           + ATTN_SRC.format(mod=mod).split("\n", 3)[3])
    if copy:
        src = re.sub(r"(tl\.program_id\(.*)", rf"\1  # copy {copy}", src)
    return load_source(src, f"cc_{mod}")


def time_tiles(m, name, sig, cx, warps, reps=7, div=()):
    import tiles

    fn = getattr(m, name)
    sig = {k: (f"{v}:16" if k in div else v) for k, v in sig.items()}
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        tiles.compile(fn, signature=sig, constexprs=cx, target="sm_90a", num_warps=warps)
        out.append(time.perf_counter() - t0)
    return statistics.median(out[1:]) * 1e3


def _triton_to_ptx_only():
    """Drops Triton's cubin (ptxas) stage, so both sides stop at PTX."""
    from triton.backends.nvidia.compiler import CUDABackend

    if getattr(CUDABackend, "_tiles_ptx_only", False):
        return
    original = CUDABackend.add_stages

    def add_stages(self, stages, options, *rest):
        original(self, stages, options, *rest)
        stages["cubin"] = lambda src, metadata: b""  # no ptxas: both sides stop at PTX

    CUDABackend.add_stages = add_stages
    CUDABackend._tiles_ptx_only = True


def time_triton(m, name, sig, cx, warps, reps=3, div=()):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    _triton_to_ptx_only()

    fn = getattr(m, name)
    s = dict(sig, **{k: "constexpr" for k in cx})
    out = []
    for _ in range(reps):
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
        attrs = {(fn.arg_names.index(k),): [["tt.divisibility", 16]] for k in div}
        src = ASTSource(fn, s, constexprs=cx, attrs=attrs)
        t0 = time.perf_counter()
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
        out.append(time.perf_counter() - t0)
        _ = k
    return statistics.median(out) * 1e3


def import_ms(mod: str, reps=5):
    out = []
    for _ in range(reps):
        r = subprocess.run([sys.executable, "-c", f"import time; t=time.perf_counter(); import {mod}; "
                                                  "print(time.perf_counter()-t)"], capture_output=True, text=True)
        out.append(float(r.stdout.strip()) * 1e3)
    return statistics.median(out)


def _job(kernel: str = "layernorm", launched: bool = False):
    """One of KERNELS as `compile` takes it: plain, or specialised as a launch would."""
    import tiles

    m = load("tiles")
    name, sig, cx, warps = KERNELS[kernel]
    if launched:
        sig, cx, div = as_launched(kernel)
        sig = {k: (f"{v}:16" if k in div else v) for k, v in sig.items()}
    return tiles, dict(fn=getattr(m, name), signature=sig, constexprs=cx, num_warps=warps)


def threads_speedup(k_threads: int, reps: int = 5, per_thread: int = 1, kernel: str = "layernorm",
                    launched: bool = False):
    """K·`per_thread` equal compiles of `kernel` (layernorm's plain signature by default, as the
    earlier results) one after another, then with `compile_many` on K threads: the best of
    `reps` rounds of each, the two alternating (after one round of each that is not counted:
    the pool's threads start, and the host settles)."""
    tiles, job = _job(kernel, launched)
    jobs = [job] * (k_threads * per_thread)
    seq, par = [], []
    for r in range(reps + 1):
        t0 = time.perf_counter()
        for j in jobs:
            tiles.compile(**j)
        t1 = time.perf_counter()
        tiles.compile_many(jobs, max_workers=k_threads)
        t2 = time.perf_counter()
        if r:
            seq.append(t1 - t0)
            par.append(t2 - t1)
    return min(seq) / min(par)


def _process_compiles(barrier, results, n):
    os.environ["TILES_CACHE"] = "0"
    tiles, job = _job()
    for _ in range(2):
        tiles.compile(**job)
    barrier.wait()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        tiles.compile(**job)
        out.append(time.perf_counter() - t0)
    results.put(statistics.median(out))


def _concurrent_compile_time(k: int, n: int) -> float:
    """The median compile time of K fresh processes compiling at once."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(k, timeout=120), ctx.Queue()
    procs = [ctx.Process(target=_process_compiles, args=(barrier, results, n)) for _ in range(k)]
    for p in procs:
        p.start()
    try:
        # A child that fails never reports: give up on it rather than wait forever.
        return statistics.median(results.get(timeout=120) for _ in range(k))
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


def processes_speedup(k: int, n: int = 8):
    """The host's own ceiling for `threads_speedup`: the same layernorm compiles in K processes
    at once (nothing shared: no GIL, no allocator), as K times the compile time of one such
    process alone over theirs."""
    return k * _concurrent_compile_time(1, n) / _concurrent_compile_time(k, n)


def _backend(b):
    """The Rust stages (passes, LLVM, PTX) of a kernel whose frontend ran: no GIL held."""
    return b.kernel.compile(b.target, all_stages=False, fp_fusion=b.fp_fusion, maxnreg=b.maxnreg, llir=False,
                            ftz=b.ftz)


def _timed_backends(backends) -> list:
    out = []
    for b in backends:
        t0 = time.perf_counter()
        _backend(b)
        out.append(time.perf_counter() - t0)
    return out


def backend_contention(k: int, kernel: str = "layernorm", n: int = 6, rounds: int = 4) -> dict:
    """Whether compiles on threads get in each other's way: the Rust stages of `kernel` (its
    frontends run beforehand), `n` one after another on each of K threads of this process, and
    on each of K forked processes, against the same on one thread; the rounds alternate. The
    median time of one compile in each setting (ms). Threads as slow as processes lose nothing
    to sharing (locks, the allocator, the address space); what both lose against one thread is
    the host's (clock speed with more cores busy, shared caches)."""
    import multiprocessing
    import threading

    import tiles.compiler as tc

    tiles, job = _job(kernel, kernel == "matmul")
    for _ in range(2):
        tiles.compile(**job)
    ctx = multiprocessing.get_context("fork")  # before any thread of this measure starts
    go, results = ctx.Barrier(k + 1, timeout=300), ctx.Queue()

    def child():
        try:
            for _ in range(rounds):
                backends = [tc._front(**job) for _ in range(n)]
                go.wait()
                results.put(_timed_backends(backends))
        finally:
            results.close()
            results.join_thread()  # what was put reaches the parent before the exit
            os._exit(0)

    procs = [ctx.Process(target=child) for _ in range(k)]
    for p in procs:
        p.start()
    times: dict = {"one_thread": [], "threads": [], "processes": []}
    try:
        for _ in range(rounds):
            times["one_thread"] += _timed_backends([tc._front(**job) for _ in range(n)])
            go.wait()
            for _ in range(k):
                times["processes"] += results.get(timeout=300)
            sets = [[tc._front(**job) for _ in range(n)] for _ in range(k)]
            outs: list = [[] for _ in range(k)]
            threads = [threading.Thread(target=lambda b, o: o.extend(_timed_backends(b)), args=(b, o))
                       for b, o in zip(sets, outs)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for o in outs:
                times["threads"] += o
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return {name: statistics.median(v) * 1e3 for name, v in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--contention", metavar="K,...",
                    help="only backend_contention for these thread counts (layernorm and matmul), as JSON")
    a = ap.parse_args()
    os.environ["TILES_CACHE"] = "0"
    if a.contention:
        res = {f"{kernel}_{k}": backend_contention(int(k), kernel) for kernel in ("layernorm", "matmul")
               for k in a.contention.split(",")}
        print(json.dumps(res))
        return
    res = {"cpu_cores": os.cpu_count()}
    tm, rm = load("tiles"), load("triton")
    for k, (name, sig, cx, warps) in KERNELS.items():
        for variant in ("", "launched_"):
            s, c, div = as_launched(k) if variant else (sig, cx, ())
            key = f"{variant}{k}"
            res[f"tiles_{key}_ms"] = time_tiles(tm, name, s, c, warps, div=div)
            try:
                res[f"triton_{key}_ms"] = time_triton(rm, name, s, c, warps, div=div)
            except Exception as e:  # Triton may need ptxas for its last stage; report what ran
                res[f"triton_{key}_error"] = f"{type(e).__name__}: {e}"[:200]
    res["import_tiles_ms"] = import_ms("tiles")
    res["import_triton_ms"] = import_ms("triton")
    res["threads_speedup_2"] = threads_speedup(2)
    for variant in ("", "launched_"):
        for k in KERNELS:
            t = res[f"tiles_{variant}{k}_ms"]
            r = res.get(f"triton_{variant}{k}_ms")
            print(f"{variant}{k}: tiles {t:.1f} ms" + (f", triton {r:.0f} ms ({t / r:.3f}x)" if r else
                                                        f", triton failed: {res.get(f'triton_{variant}{k}_error')}"))
        tt = sum(res[f"tiles_{variant}{k}_ms"] for k in KERNELS)
        rr = [res.get(f"triton_{variant}{k}_ms") for k in KERNELS]
        if all(rr):
            res[f"{variant}total_ratio"] = tt / sum(rr)
            print(f"{variant}total: tiles {tt:.1f} ms, triton {sum(rr):.0f} ms ({tt / sum(rr):.3f}x)")
    print(f"import: tiles {res['import_tiles_ms']:.0f} ms, triton {res['import_triton_ms']:.0f} ms")
    print(f"2 kernels on 2 threads: {res['threads_speedup_2']:.2f}x speed-up ({res['cpu_cores']} cores)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
