"""A library's autotuned kernels on their first call: flash-linear-attention's chunked gated
linear attention (`chunk_gla`), forward and backward, in a fresh process with empty caches,
run unchanged on tiles (`TILES_AS_TRITON=1`) with its autotuner compiling ahead and screening
(the defaults), without the screen (`TILES_AUTOTUNE_SCREEN=0`), one config at a time and
without the screen (`TILES_AUTOTUNE_COMPILE_AHEAD=0`, Triton's order), and on Triton, in one run.

Needs a checkout of flash-linear-attention (`--fla PATH`); FLA refuses Triton 3.4-3.7.0 on
Hopper for a Triton bug, so a checkout with that guard lifted runs on both.

Usage (GPU machine): python benchmarks/bench_fla_first_call.py --fla PATH [--json out.json] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile

from bench_runtime import fresh_process

FIRST_CALL = r'''
import sys, time
import torch
import torch.nn.functional as F
sys.path.insert(0, {fla!r})
from fla.ops.gla import chunk_gla
B, T, H, D = 2, 2048, 4, 128
torch.manual_seed(0)
mk = lambda: torch.rand((B, T, H, D), dtype=torch.bfloat16, device="cuda").requires_grad_()
q, k, v = mk(), mk(), mk()
g = (F.logsigmoid(torch.rand((B, T, H, D), dtype=torch.bfloat16, device="cuda")) / 16).requires_grad_()
h0 = torch.rand((B, H, D, D), dtype=torch.float32, device="cuda").requires_grad_()
do = torch.randn_like(v)
torch.cuda.synchronize()
t0 = time.perf_counter()
o, ht = chunk_gla(q=q, k=k, v=v, g=g, initial_state=h0, output_final_state=True)
torch.cuda.synchronize()
t1 = time.perf_counter()
((o * do).sum() + ht.sum().to(do.dtype)).backward()
torch.cuda.synchronize()
t2 = time.perf_counter()
assert torch.isfinite(o).all() and torch.isfinite(q.grad).all() and torch.isfinite(g.grad).all()
print(f"{{(t1 - t0) * 1e3:.1f}} {{(t2 - t1) * 1e3:.1f}}")
'''


def first_call(fla: str, mod: str, ahead: bool = True, screen: bool = True):
    """(forward, backward) ms of the first call, in a fresh process with empty caches
    (`bench_runtime.fresh_process`)."""
    env = {"FLA_CACHE_RESULTS": "0", "TILES_AUTOTUNE_COMPILE_AHEAD": "1" if ahead else "0",
           "TILES_AUTOTUNE_SCREEN": None if screen else "0", "TILES_AS_TRITON": "1" if mod == "tiles" else None}
    out = fresh_process(FIRST_CALL.format(fla=os.path.abspath(fla)), tempfile.mkdtemp(), env, timeout=580)
    fwd, bwd = (float(x) for x in out.split()[-2:])
    return fwd, bwd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fla", required=True, help="a flash-linear-attention checkout")
    ap.add_argument("--json")
    ap.add_argument("--runs", type=int, default=1, help="fresh processes per case (median)")
    ap.add_argument("--cases", default="tiles,tiles_no_screen,tiles_one_by_one,triton")
    a = ap.parse_args()
    res = {"shape": "B 2, T 2048, H 4, D 128, bf16", "cpu_cores": os.cpu_count()}
    for name in a.cases.split(","):
        mod, ahead = ("triton", True) if name == "triton" else ("tiles", name != "tiles_one_by_one")
        runs = [first_call(a.fla, mod, ahead, screen=name == "tiles") for _ in range(a.runs)]
        res[f"{name}_forward_ms"] = statistics.median(f for f, _ in runs)
        res[f"{name}_backward_ms"] = statistics.median(b for _, b in runs)
        res[f"{name}_runs"] = runs
        print(f"{name}: forward {res[f'{name}_forward_ms']:.0f} ms, backward {res[f'{name}_backward_ms']:.0f} ms",
              flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
