"""Random elementwise kernels (hypothesis): the interpreter must agree with a numpy evaluation
of the same expression (everywhere) and with the compiled kernel (on a GPU)."""

from __future__ import annotations

import importlib.util
import itertools
import os
import tempfile

import numpy as np
import pytest
from conftest import GPU
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

LEAVES = [("x", lambda x, y: x), ("y", lambda x, y: y), ("0.5", lambda x, y: np.float32(0.5)),
          ("3.0", lambda x, y: np.float32(3))]
# The reference's exp is scaled by `_EXP_SCALE[0]`: the interpreter computes exp as the GPU does
# (ex2.approx, within 2 ulp), so where an expression cancels (`3.0 - exp(y)` near 0) the
# numpy reference is evaluated with exp a few ulp off either way, and the result must fall
# within the range those give.
_EXP_SCALE = [np.float32(1)]
UNARY = [("(-{a})", np.negative), ("tl.abs({a})", np.abs), ("tl.exp(tl.minimum({a}, 4.0))",
                                                             lambda a: np.exp(np.minimum(a, np.float32(4)))
                                                             * _EXP_SCALE[0]),
         ("tl.sqrt(tl.abs({a}))", lambda a: np.sqrt(np.abs(a))), ("tl.floor({a})", np.floor)]
BINARY = [("({a} + {b})", np.add), ("({a} - {b})", np.subtract), ("({a} * {b})", np.multiply),
          ("tl.maximum({a}, {b})", np.fmax), ("tl.minimum({a}, {b})", np.fmin),
          ("tl.where({a} > {b}, {a}, {b} * 0.5)", lambda a, b: np.where(a > b, a, b * np.float32(0.5)))]


def exprs(depth: int):
    leaf = st.sampled_from(LEAVES)
    if depth == 0:
        return leaf
    sub = exprs(depth - 1)
    un = st.tuples(st.sampled_from(UNARY), sub).map(
        lambda t: (t[0][0].format(a=t[1][0]), lambda x, y, f=t[0][1], a=t[1][1]: f(a(x, y))))
    bi = st.tuples(st.sampled_from(BINARY), sub, sub).map(
        lambda t: (t[0][0].format(a=t[1][0], b=t[2][0]),
                   lambda x, y, f=t[0][1], a=t[1][1], b=t[2][1]: f(a(x, y), b(x, y))))
    return st.one_of(leaf, un, bi)


_counter = itertools.count()
_dir = tempfile.mkdtemp(prefix="tiles-diff-")


def make_kernel(expr: str):
    path = os.path.join(_dir, f"k{next(_counter)}.py")
    with open(path, "w") as f:
        f.write(f"""import tiles
import tiles.language as tl


@tiles.jit
def k(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, {expr}, mask=mask)
""")
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.k


def interpret(kernel, x, y):
    os.environ["TILES_INTERPRET"] = "1"
    try:
        out = np.zeros_like(x)
        kernel[(-(-len(x) // 128),)](x, y, out, len(x), BLOCK=128)
        return out
    finally:
        del os.environ["TILES_INTERPRET"]


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(exprs(3), st.integers(1, 700), st.integers(0, 2**32 - 1))
def test_interpreter_matches_numpy(e, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, n).astype(np.float32)
    y = rng.uniform(-2, 2, n).astype(np.float32)
    src, ref = e
    got = interpret(make_kernel(src), x, y)
    wants = []
    for scale in (1, 1 + 2**-21, 1 - 2**-21):  # exp exact, then 4 ulp up and down
        _EXP_SCALE[0] = np.float32(scale)
        wants.append(np.broadcast_to(np.asarray(ref(x, y), dtype=np.float32), x.shape))
    _EXP_SCALE[0] = np.float32(1)
    want = wants[0]
    lo, hi = np.minimum.reduce(wants), np.maximum.reduce(wants)
    # Where the exp variants disagree, the result may lie anywhere between them.
    inside = (got >= lo) & (got <= hi)
    np.testing.assert_allclose(np.where(inside, want, got), want, rtol=1e-5, atol=1e-6, err_msg=src)


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs an NVIDIA GPU")
@SETTINGS
@given(exprs(3), st.integers(1, 700), st.integers(0, 2**32 - 1))
def test_compiled_matches_interpreter(e, n, seed):
    import torch

    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, n).astype(np.float32)
    y = rng.uniform(-2, 2, n).astype(np.float32)
    src, _ = e
    kernel = make_kernel(src)
    want = interpret(kernel, x, y)
    os.environ["TILES_INTERPRET"] = "0"
    try:
        xd, yd = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
        out = torch.zeros_like(xd)
        kernel[(-(-n // 128),)](xd, yd, out, n, BLOCK=128)
        got = out.cpu().numpy()
    finally:
        del os.environ["TILES_INTERPRET"]
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, err_msg=src)
