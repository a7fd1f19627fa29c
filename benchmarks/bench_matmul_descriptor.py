"""Matmul through tensor descriptors made in the kernel (`tl.make_tensor_descriptor`, the style
of Triton's persistent-matmul tutorial): tiles against Triton, fp16, one run.

Triton 3.6 lowers these descriptors to TMA; tiles lowers them to bounds-checked `cp.async`
copies into the same pipelined rings as pointer loads. Shape 4096^3; tile 128x256x64,
8 warps, 3 stages; row-major program order.

Usage (GPU machine): python benchmarks/bench_matmul_descriptor.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json

from _measure import ratio, rel_err, time_case
from _source import load_source

SRC = '''
import {mod} as triton
import {mod}.language as tl


@triton.jit
def mm_desc(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BN)
    pid_m = pid // num_n
    pid_n = pid % num_n
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([pid_m * BM, k * BK])
        b = b_desc.load([k * BK, pid_n * BN])
        acc = tl.dot(a, b, acc)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.float16))
'''


def load(mod: str):
    return load_source(SRC.format(mod=mod), f"mm_desc_{mod}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch
    import triton.testing

    M = N = K = 4096
    BM, BN, BK = 128, 256, 64
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    y = torch.randn(K, N, device="cuda", dtype=torch.float16)
    ref = (x.float() @ y.float())
    res = {"gpu": torch.cuda.get_device_name(), "shape": [M, N, K], "config": [BM, BN, BK, 8, 3]}
    for name in ("tiles", "triton"):
        m = load(name)
        mod = __import__(name)
        # Descriptors made in a kernel need scratch memory from the allocator (Triton's API).
        mod.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)

        def run(m=m, out=out):
            m.mm_desc[(triton.cdiv(M, BM) * triton.cdiv(N, BN),)](x, y, out, M, N, K, BM=BM, BN=BN, BK=BK,
                                                                  num_warps=8, num_stages=3)

        time_case(res, name, run, lambda out=out: rel_err(out, ref), 2 * M * N * K)
    t, r = res.get("tiles_tflops"), res.get("triton_tflops")
    print(f"descriptor matmul fp16 {M}^3 {BM}x{BN}x{BK} w8 s3: tiles {t or 0:.0f} TFLOP/s "
          f"(err {res.get('tiles_rel_err', float('nan')):.1e}), triton {r or 0:.0f} ({ratio(res)})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
