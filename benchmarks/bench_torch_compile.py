"""torch.compile's cold start with its kernels compiled by tiles (TILES_AS_TRITON=1) against
Triton, in one run on a GPU machine: a fresh process compiles a dozen functions (pointwise,
norms, softmax, reductions, scans, gathers, an mm epilogue) with empty caches, then a second
process does the same with the caches it left (inductor's FX graph cache and the compiler's).
Every output is checked against eager PyTorch; the warm call of each function is timed too.

Usage: python benchmarks/bench_torch_compile.py [--json out.json] [--reps 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r'''
import json, sys, time
import torch
import torch.nn.functional as F
import triton
assert triton.__name__ == sys.argv[1], triton.__name__
torch.manual_seed(0)
d = "cuda"


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=d).to(dtype)


FNS = [
    ("pointwise", lambda x: torch.sin(x) * torch.exp(-x.abs()) + torch.tanh(x), lambda: (r(1 << 20),)),
    ("silu_mul", lambda x, y: F.silu(x) * y, lambda: (r(4096, 2048, dtype=torch.bfloat16),
                                                     r(4096, 2048, dtype=torch.bfloat16))),
    ("layernorm", lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b),
     lambda: (r(4096, 1024, dtype=torch.float16), r(1024, dtype=torch.float16), r(1024, dtype=torch.float16))),
    ("rmsnorm", lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
     lambda: (r(2048, 4096, dtype=torch.bfloat16), r(4096, dtype=torch.bfloat16))),
    ("softmax", lambda x: torch.softmax(x, -1), lambda: (r(4096, 2000),)),
    ("log_softmax", lambda x: F.log_softmax(x, -1), lambda: (r(64, 50257),)),
    ("row_reductions", lambda x: (x.sum(1), x.amax(1), x.argmax(1)), lambda: (r(1000, 3000),)),
    ("col_reductions", lambda x: (x.sum(0), x.var(0)), lambda: (r(4096, 512),)),
    ("cumsum", lambda x: torch.cumsum(x, 1), lambda: (r(128, 4000),)),
    ("embedding", lambda w, i: F.embedding(i, w) * 2,
     lambda: (r(50000, 256), torch.randint(0, 50000, (8, 512), device=d))),
    ("index_add", lambda x, i, s: x.index_add(0, i, s),
     lambda: (r(1000, 64), torch.randint(0, 1000, (5000,), device=d), r(5000, 64))),
    ("mm_epilogue", lambda a, b, c: F.gelu(a @ b + c),
     lambda: (r(1024, 512, dtype=torch.float16), r(512, 768, dtype=torch.float16), r(768, dtype=torch.float16))),
]
out = {"per_fn": {}}
torch.cuda.synchronize()
t_all = time.perf_counter()
for name, f, make in FNS:
    args = make()
    cf = torch.compile(f)
    t0 = time.perf_counter()
    got = cf(*args)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    ref = f(*args)
    gots = got if isinstance(got, tuple) else (got,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    for g, e in zip(gots, refs):
        if g.is_floating_point():
            err = ((g.double() - e.double()).norm() / e.double().norm()).item()
            assert err < 1e-2, (name, err)
        else:
            assert torch.equal(g, e), name
    for _ in range(5):
        cf(*args)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(100):
        cf(*args)
    torch.cuda.synchronize()
    out["per_fn"][name] = {"first_call_ms": first * 1e3, "warm_call_us": (time.perf_counter() - t0) * 1e4}
out["all_first_calls_s"] = time.perf_counter() - t_all
print(json.dumps(out))
'''


def run(mod: str, cache: str) -> dict:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
               TRITON_CACHE_DIR=os.path.join(cache, "triton"), TILES_CACHE_DIR=os.path.join(cache, "tiles"),
               TILES_AS_TRITON="1" if mod == "tiles" else "0")
    r = subprocess.run([sys.executable, "-c", CHILD, mod], capture_output=True, text=True, env=env, timeout=600)
    if r.returncode:
        raise RuntimeError(f"{mod}: {r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--reps", type=int, default=2, help="cold/warm process pairs per compiler")
    a = ap.parse_args()
    res = {}
    for mod in ("tiles", "triton"):
        colds, warms = [], []
        for _ in range(a.reps):
            cache = tempfile.mkdtemp()
            colds.append(run(mod, cache))
            warms.append(run(mod, cache))
        res[f"{mod}_cold_s"] = statistics.median(c["all_first_calls_s"] for c in colds)
        res[f"{mod}_warm_cache_s"] = statistics.median(w["all_first_calls_s"] for w in warms)
        res[f"{mod}_per_fn"] = {
            n: {"cold_first_call_ms": statistics.median(c["per_fn"][n]["first_call_ms"] for c in colds),
                "warm_call_us": statistics.median(w["per_fn"][n]["warm_call_us"] for w in warms)}
            for n in colds[0]["per_fn"]}
        print(f"{mod}: {len(colds[0]['per_fn'])} functions, first calls {res[f'{mod}_cold_s']:.2f} s with empty "
              f"caches, {res[f'{mod}_warm_cache_s']:.2f} s with warm caches", flush=True)
    print(f"{'function':16} {'tiles cold ms':>14} {'triton cold ms':>15} {'tiles warm us':>14} {'triton warm us':>15}")
    for n, t in res["tiles_per_fn"].items():
        g = res["triton_per_fn"][n]
        print(f"{n:16} {t['cold_first_call_ms']:14.0f} {g['cold_first_call_ms']:15.0f} {t['warm_call_us']:14.1f} "
              f"{g['warm_call_us']:15.1f}")
    print(f"cold start: tiles {res['tiles_cold_s']:.2f} s vs Triton {res['triton_cold_s']:.2f} s "
          f"({res['tiles_cold_s'] / res['triton_cold_s']:.2f}x); warm caches: {res['tiles_warm_cache_s']:.2f} s vs "
          f"{res['triton_warm_cache_s']:.2f} s ({res['tiles_warm_cache_s'] / res['triton_warm_cache_s']:.2f}x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
