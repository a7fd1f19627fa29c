"""Interpreter speed: a 2^20-element vector add with BLOCK 1024 on the CPU (TILES_INTERPRET=1).

Usage: python benchmarks/bench_interpreter.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

os.environ["TILES_INTERPRET"] = "1"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

from importlib import import_module  # noqa: E402

add_kernel = import_module("01_vector_add").add_kernel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    n = 1 << 20
    rng = np.random.default_rng()
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    out = np.empty_like(x)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        add_kernel[(n // 1024,)](x, y, out, n, BLOCK_SIZE=1024)
        times.append(time.perf_counter() - t0)
    assert np.array_equal(out, x + y)
    res = {"n": n, "block": 1024, "programs": n // 1024, "median_s": statistics.median(times),
           "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    print(f"interpreter vector add 2^20 (1024 programs of 1024): median {res['median_s'] * 1e3:.0f} ms "
          f"on {res['cores']} cores")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
