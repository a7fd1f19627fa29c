"""Where one launch's CPU time goes, next to the driver's floor (`launch_floor.c`): the parts a
tiles launch of the 4-argument vector add pays in Python and torch (`kernel[grid]`, three
attribute reads of each torch tensor), the whole launch with and without `kernel[grid]`, a
CompiledKernel's own launches (`ck[grid](...)`, `ck.run(...)`), and Triton's and torch.add's,
in one process, no sync. Each case twice: sustained (medians of 7 runs of 5,000 calls, which
fill the launch queue) and in bursts (medians of 400 bursts of 64 calls from an idle GPU: the
CPU's own cost).

Usage (on a GPU machine): python benchmarks/bench_launch_parts.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_vector_add import make_kernel, per_call_us  # noqa: E402


def main():
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    n = 1 << 20
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    k, kt = make_kernel("tiles"), make_kernel("triton")
    g = (1,)
    k[g](x, y, out, n, BLOCK_SIZE=1024)
    kt[g](x, y, out, n, BLOCK_SIZE=1024)
    torch.cuda.synchronize()
    launcher = k[g]
    # A CompiledKernel launched directly: `ck[grid](*args)` (FlagGems' LibEntry on a cache hit;
    # every parameter, or the runtime ones alone) and `ck.run(...)`, Triton's launcher call
    # (torch's inductor).
    ck, ckt = k.warmup(x, y, out, n, BLOCK_SIZE=1024, grid=g), kt.warmup(x, y, out, n, BLOCK_SIZE=1024, grid=g)
    ck_launch, ckt_launch = ck[g], ckt[(1, 1, 1)]  # Triton's takes a 3-tuple only
    stream = torch.cuda.current_stream().cuda_stream
    ckt.run(1, 1, 1, stream, ckt.function, ckt.packed_metadata, None, None, None, x, y, out, n, 1024)
    cases = {
        "empty_lambda": lambda: None,
        "tiles_getitem": lambda: k[g],
        "torch_data_ptr_x3": lambda: (x.data_ptr(), y.data_ptr(), out.data_ptr()),
        "torch_is_cuda_x3": lambda: (x.is_cuda, y.is_cuda, out.is_cuda),
        "torch_dtype_x3": lambda: (x.dtype, y.dtype, out.dtype),
        "tiles_launch": lambda: k[g](x, y, out, n, BLOCK_SIZE=1024),
        "tiles_launch_launcher_kept": lambda: launcher(x, y, out, n, BLOCK_SIZE=1024),
        "triton_launch": lambda: kt[g](x, y, out, n, BLOCK_SIZE=1024),
        "tiles_compiled_getitem_every_param": lambda: ck_launch(x, y, out, n, 1024),
        "tiles_compiled_getitem_runtime_params": lambda: ck_launch(x, y, out, n),
        "tiles_compiled_run": lambda: ck.run(1, 1, 1, stream, ck.function, None, None, None, None, x, y, out, n, 1024),
        "triton_compiled_getitem_every_param": lambda: ckt_launch(x, y, out, n, 1024),
        "triton_compiled_run": lambda: ckt.run(1, 1, 1, stream, ckt.function, ckt.packed_metadata, None, None, None,
                                               x, y, out, n, 1024),
        "torch_add": lambda: torch.add(x, y, out=out),
    }
    res = {"gpu": torch.cuda.get_device_name()}
    for name, fn in cases.items():
        res[f"{name}_us"] = per_call_us(fn)
        res[f"{name}_burst_us"] = per_call_us(fn, n_launch=64, reps=400)
        print(f"{name:28s} {res[f'{name}_us']:.2f} us sustained, {res[f'{name}_burst_us']:.2f} us in bursts",
              flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
