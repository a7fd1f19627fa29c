"""The same kernels under Triton and tiles, where Triton is installed: result dtypes and values of
binary operators (tensor, literal and runtime-scalar operands), reductions and casts over the
integer and float dtypes, in both interpreters and, with a GPU, compiled by both (then also with
NaN, infinities, out-of-range casts and oversized shifts). Triton's interpreter emulates bf16 and
NaN-propagating min/max with numpy, unlike its compiled kernels, so neither is compared there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

KERNELS = r'''
import contextlib, io, itertools, json, sys
import numpy as np
import torch
if sys.argv[1] == "triton":
    import triton, triton.language as tl
else:
    import tiles as triton, tiles.language as tl


@triton.jit
def binary(X, Y, s, O, OP: tl.constexpr, N: tl.constexpr):
    o = tl.arange(0, N)
    x = tl.load(X + o)
    y = tl.load(Y + o)
    if OP == "+": z = x + y
    elif OP == "-": z = x - y
    elif OP == "*": z = x * y
    elif OP == "/": z = x / y
    elif OP == "//": z = x // y
    elif OP == "%": z = x % y
    elif OP == "&": z = x & y
    elif OP == "^": z = x ^ y
    elif OP == "<<": z = x << y
    elif OP == ">>": z = x >> y
    elif OP == "<": z = x < y
    elif OP == "max": z = tl.maximum(x, y)
    elif OP == "+1": z = x + 1
    elif OP == "*0.5": z = x * 0.5
    elif OP == "/2": z = x / 2
    elif OP == "+big": z = x + 100000
    elif OP == "+s": z = x + s
    elif OP == "s*": z = s * x
    elif OP == "where": z = tl.where(x > y, x, 0)
    tl.static_print("DTYPE", z.dtype)
    tl.store(O + o, z.to(tl.float64))


@triton.jit
def reduce(X, O, OP: tl.constexpr, N: tl.constexpr):
    x = tl.load(X + tl.arange(0, N))
    if OP == "sum": z = tl.sum(x, 0)
    elif OP == "max": z = tl.max(x, 0)
    elif OP == "argmax": z = tl.argmax(x, 0)
    elif OP == "argmin": z = tl.argmin(x, 0)
    elif OP == "xor_sum": z = tl.xor_sum(x, 0)
    elif OP == "cumsum": z = tl.max(tl.cumsum(x, 0), 0)
    tl.static_print("DTYPE", z.dtype)
    tl.store(O, z.to(tl.float64))


@triton.jit
def cast(X, O, DST: tl.constexpr, N: tl.constexpr):
    o = tl.arange(0, N)
    tl.store(O + o, tl.load(X + o).to(DST).to(tl.float64))


INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "float32", "float64"]
N = 16
rng = np.random.default_rng(int(sys.argv[3]))


DEV = sys.argv[4]
EDGES = DEV == "cuda"  # NaN, infinities, out-of-range casts, oversized shifts: compiled kernels only


def values(dt, low, high):
    if dt.startswith("float"):
        return torch.tensor(rng.uniform(low, high, N), dtype=getattr(torch, dt)).to(DEV)
    return torch.tensor(rng.integers(max(low, 0) if dt.startswith("uint") else low, high, N)).to(
        getattr(torch, dt)).to(DEV)


def zeros(n):
    return torch.zeros(n, dtype=torch.float64, device=DEV)


out = {}


def run(key, fn):
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            o = fn()
        seen = [l.split("DTYPE")[-1].strip() for l in buf.getvalue().splitlines() if "DTYPE" in l]
        out[key] = [seen[-1].replace("tl.", "").replace("triton.language.", "") if seen else "", o.cpu().tolist()]
    except Exception as e:
        out[key] = ["error", type(e).__name__]


for a, b, op in itertools.product(INTS + FLOATS, INTS + FLOATS, ["+", "-", "*", "/", "//", "%", "&", "^", "<<",
                                                               ">>", "<", "max", "where"]):
    ints = not (a.startswith("float") or b.startswith("float"))
    if op in ("//", "%", "&", "^", "<<", ">>") and not ints:
        continue
    x = values(a, -100, 100)
    y = values(b, 1, 8) if op in ("/", "//", "%", "<<", ">>") else values(b, -100, 100)
    o = zeros(N)
    run(f"{a} {op} {b}", lambda: (binary[(1,)](x, y, 0, o, op, N), o)[1])
for a, (sn, s), op in itertools.product(INTS + FLOATS, [("int", 7), ("neg", -3), ("big", 2 ** 40)],
                                        ["+1", "*0.5", "/2", "+big", "+s", "s*"]):
    if sn != "int" and op not in ("+s", "s*"):
        continue
    x = values(a, 1, 100)
    o = zeros(N)
    run(f"{a} {op} {sn}", lambda: (binary[(1,)](x, x, s, o, op, N), o)[1])
for a, op in itertools.product(INTS + FLOATS, ["sum", "max", "argmax", "argmin", "xor_sum", "cumsum"]):
    if op == "xor_sum" and a.startswith("float"):
        continue
    x = values(a, -100, 100).round() if a.startswith("float") else values(a, -100, 100)  # exact sums
    x[3] = x[11] = x.to(torch.float64).max().to(x.dtype)  # a tie for argmax
    o = zeros(1)
    run(f"{op}({a})", lambda: (reduce[(1,)](x, o, op, N), o)[1])
for a, b in itertools.product(INTS + FLOATS, INTS + FLOATS):
    x = values(a, 0 if b.startswith("uint") else -100, 100)  # values every type holds
    o = zeros(N)
    run(f"{a}.to({b})", lambda: (cast[(1,)](x, o, getattr(tl, b), N), o)[1])
if EDGES:
    for a, b in itertools.product(FLOATS, INTS):
        x = values(a, -1000, 1000)
        x[0], x[1], x[2], x[3] = float("nan"), float("inf"), -float("inf"), 60000.0
        o = zeros(N)
        run(f"{a}.to({b}), out of range", lambda: (cast[(1,)](x, o, getattr(tl, b), N), o)[1])
    for a in INTS:
        x = values(a, -100, 100)
        y = torch.full((N,), 8 * x.element_size() + 3, dtype=torch.int64).to(x.dtype).to(DEV)
        o = zeros(N)
        run(f"{a} << oversized", lambda: (binary[(1,)](x, y, 0, o, "<<", N), o)[1])
        run(f"{a} >> oversized", lambda: (binary[(1,)](x, y, 0, o, ">>", N), o)[1])
    for a, op in itertools.product(FLOATS, ["max", "+", "<"]):
        x, y = values(a, -10, 10), values(a, -10, 10)
        x[::3] = float("nan")
        o = zeros(N)
        run(f"{a} {op} NaN", lambda: (binary[(1,)](x, y, 0, o, op, N), o)[1])
json.dump(out, open(sys.argv[2], "w"))
'''


def _run(tmp_path, mod: str, seed: int, device: str = "cpu") -> dict:
    script = tmp_path / "kernels.py"
    script.write_text(KERNELS)
    result = tmp_path / f"{mod}.json"
    env = dict(os.environ)
    # Fresh caches: a kernel either compiler finds in its disk cache skips its `static_print`,
    # which reports the result dtypes compared here.
    env.update(TRITON_CACHE_DIR=str(tmp_path / f"{mod}-triton-cache"), TILES_CACHE_DIR=str(tmp_path / f"{mod}-cache"))
    if device == "cpu":
        env.update(TRITON_INTERPRET="1", TILES_INTERPRET="1")
    else:
        for v in ("TRITON_INTERPRET", "TILES_INTERPRET"):
            env.pop(v, None)
    r = subprocess.run([sys.executable, str(script), mod, str(result), str(seed), device], capture_output=True,
                       text=True, env=env, timeout=600)
    if r.returncode:
        if mod == "triton":
            pytest.skip(f"Triton did not run: {r.stderr[-300:]}")
        raise AssertionError(r.stderr[-3000:])
    return json.loads(result.read_text())


def _compare(theirs: dict, ours: dict) -> None:
    assert theirs.keys() == ours.keys() and len(ours) > 1000
    bad = []
    for key in theirs:
        (t_dt, t_val), (o_dt, o_val) = theirs[key], ours[key]
        if t_dt == "error":
            continue  # tiles may accept what Triton's interpreter refuses (e.g. ~ on unsigned)
        if o_dt == "error" or t_dt != o_dt:
            bad.append(f"{key}: dtype {t_dt} (Triton) vs {o_dt}")
            continue
        t, o = np.array(t_val), np.array(o_val)
        if t_dt.startswith("uint"):
            # Triton's interpreter keeps a signed numpy array under an unsigned type after an
            # arithmetic shift (int8 >> uint8); the bits are the same.
            bits = int("".join(ch for ch in t_dt if ch.isdigit()))
            t = np.where(t < 0, t + 2.0**bits, t)
        if not np.allclose(t, o, rtol=2e-3, atol=1e-6, equal_nan=True):
            i = int(np.argmax(~np.isclose(t, o, rtol=2e-3, atol=1e-6, equal_nan=True)))
            bad.append(f"{key}: value {t[i]} (Triton) vs {o[i]}")
    assert not bad, f"{len(bad)} differences:\n" + "\n".join(bad[:40])


def test_operators_reductions_and_casts_match_tritons_interpreter(tmp_path, rng):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    seed = int(rng.integers(1 << 30))
    _compare(_run(tmp_path, "triton", seed), _run(tmp_path, "tiles", seed))


@pytest.mark.gpu
def test_compiled_kernels_match_tritons_on_the_gpu(tmp_path, rng):
    # Both compilers' kernels on the GPU, with NaN, infinities, out-of-range casts and oversized
    # shifts too.
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    seed = int(rng.integers(1 << 30))
    _compare(_run(tmp_path, "triton", seed, "cuda"), _run(tmp_path, "tiles", seed, "cuda"))
