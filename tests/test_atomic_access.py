"""Triton's atomic loads, stores and polls (`tl.atomic_load`, `tl.atomic_store`,
`tl.atomic_poll`), `tl.expect_zero` and `tl.aggregate_replace`, in both modes against numpy,
with PTX twins that ptxas assembles."""

from __future__ import annotations

import numpy as np
import pytest

import tiles
import tiles.language as tl
from test_language import random

WIDTHS = ["bool", "int8", "uint8", "int16", "float16", "bfloat16", "int32", "float32", "int64", "float64"]


@tiles.jit
def copy_kernel(x_ptr, y_ptr, z_ptr, n, LOAD_SEM: tl.constexpr, STORE_SEM: tl.constexpr, SCOPE: tl.constexpr,
                BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.atomic_load(x_ptr + offs, mask=m, sem=LOAD_SEM, scope=SCOPE)
    tl.atomic_store(y_ptr + offs, x, mask=m, sem=STORE_SEM, scope=SCOPE)
    # A method, unmasked, on one address per program; masked-off elements read as zero.
    first = (x_ptr + tl.program_id(0) * BLOCK).atomic_load()
    tl.store(z_ptr + tl.program_id(0), first)
    zeros = tl.atomic_load(x_ptr + offs, mask=offs < 0)
    tl.store(y_ptr + n + offs, zeros, mask=m)


@pytest.mark.parametrize("name", WIDTHS)
@pytest.mark.parametrize("sems", [(None, None, None), ("relaxed", "relaxed", "cta"), ("acquire", "release", "sys")])
def test_atomic_load_and_store(dev, rng, name, sems):
    n, block = 300, 128
    x = random(rng, n, name)
    y = random(rng, 2 * n, name)
    z = random(rng, 3, name)
    xd, yd, zd = dev.put(x), dev.put(y), dev.put(z)
    copy_kernel[(3,)](xd, yd, zd, n, *sems, BLOCK=block)
    got = dev.get(yd)
    np.testing.assert_array_equal(got[:n].view(np.uint8), x.view(np.uint8))
    np.testing.assert_array_equal(got[n:].astype(np.float64), 0)
    np.testing.assert_array_equal(dev.get(zd), x[[0, block, 2 * block]])


@tiles.jit
def chain_kernel(x_ptr, partial_ptr, flag_ptr, seen_ptr, BLOCK: tl.constexpr):
    # Program i waits for program i - 1's partial sum (a flag stored with release semantics,
    # polled with acquire), adds its own block and publishes its sum the same way.
    pid = tl.program_id(0)
    s = tl.sum(tl.load(x_ptr + pid * BLOCK + tl.arange(0, BLOCK)), 0)
    if pid > 0:
        seen = tl.atomic_poll(flag_ptr + pid - 1, 1, timeout_ns=5_000_000_000)
        tl.store(seen_ptr + pid, seen.to(tl.int32))
        s += tl.load(partial_ptr + pid - 1)
    tl.store(partial_ptr + pid, s)
    tl.debug_barrier()
    tl.atomic_store(flag_ptr + pid, 1)


def test_ordered_chain_through_atomic_store_and_poll(dev, rng):
    programs, block = 8, 256
    x = rng.integers(-50, 50, programs * block).astype(np.int32)
    partial, flags = np.zeros(programs, np.int32), np.zeros(programs, np.int32)
    seen = np.full(programs, 7, np.int32)
    pd, fd, sd = dev.put(partial), dev.put(flags), dev.put(seen)
    chain_kernel[(programs,)](dev.put(x), pd, fd, sd, BLOCK=block)
    np.testing.assert_array_equal(dev.get(pd), np.cumsum(x.reshape(programs, block).sum(1)))
    np.testing.assert_array_equal(dev.get(sd)[1:], 1)
    np.testing.assert_array_equal(dev.get(fd), 1)


@tiles.jit
def poll_kernel(flag_ptr, out_ptr, expected, TIMEOUT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    hit = tl.atomic_poll(flag_ptr + offs, expected, sem="relaxed", timeout_ns=TIMEOUT)
    tl.store(out_ptr + offs, hit.to(tl.int32))


@pytest.mark.parametrize("name", ["int16", "int32", "uint64"])
def test_atomic_poll_times_out_where_the_value_never_comes(dev, rng, name):
    block = 64
    flags = random(rng, block, name, 0, 5)
    out = np.full(block, 9, np.int32)
    od = dev.put(out)
    poll_kernel[(1,)](dev.put(flags), od, 3, TIMEOUT=20_000, BLOCK=block)
    np.testing.assert_array_equal(dev.get(od), (flags == 3).astype(np.int32))


def test_a_poll_without_timeout_that_cannot_end_is_an_interpreter_error(monkeypatch):
    monkeypatch.setenv("TILES_INTERPRET", "1")
    flags = np.array([3, 4], np.int32)
    out = np.zeros(2, np.int32)
    with pytest.raises(tiles.InterpreterError, match="would wait forever"):
        poll_kernel[(1,)](flags, out, 3, TIMEOUT=None, BLOCK=2)


@tiles.jit
def bad_sem_kernel(p, WHICH: tl.constexpr):
    if WHICH == 0:
        tl.atomic_load(p, sem="release")
    elif WHICH == 1:
        tl.atomic_store(p, 1, sem="acquire")
    elif WHICH == 2:
        tl.atomic_poll(p.to(tl.pointer_type(tl.float32)), 1.0)
    else:
        tl.atomic_poll(p, 1, timeout_ns=-1)


@pytest.mark.parametrize("which,match", [(0, "acquire"), (1, "release"), (2, "16, 32 or 64-bit integers"),
                                         (3, "non-negative")])
@pytest.mark.parametrize("mode", ["interpreter", "compile"])
def test_atomic_access_misuse_fails_alike_in_both_modes(monkeypatch, which, match, mode):
    monkeypatch.setenv("TILES_INTERPRET", "1" if mode == "interpreter" else "0")
    with pytest.raises(Exception, match=match):
        if mode == "interpreter":
            bad_sem_kernel[(1,)](np.zeros(1, np.int32), WHICH=which)
        else:
            tiles.compile(bad_sem_kernel, signature={"p": "*i32"}, constexprs={"WHICH": which}, target="sm_90a")


@tiles.jit
def expect_zero_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(y_ptr + offs, tl.expect_zero(x, x < 1e-30), mask=offs < n)


def test_expect_zero_keeps_its_value_and_is_checked_in_the_interpreter(dev, rng):
    x = np.abs(rng.standard_normal(100)).astype(np.float32) + 1
    x[rng.integers(0, 100, 10)] = 0
    yd = dev.put(np.zeros(100, np.float32))
    expect_zero_kernel[(1,)](dev.put(x), yd, 100, BLOCK=128)
    np.testing.assert_array_equal(dev.get(yd), x)
    if dev.mode == "interpreter":
        tiny = x.copy()
        tiny[3] = 1e-35  # below the threshold, yet not zero
        with pytest.raises(AssertionError, match="expect_zero"):
            expect_zero_kernel[(1,)](tiny, np.zeros(100, np.float32), 100, BLOCK=128)


@tiles.aggregate
class Span:
    ptr: tl.tensor
    scale: tl.tensor
    WIDTH: tl.constexpr

    def __init__(self, ptr, scale, WIDTH):
        self.ptr = ptr
        self.scale = scale
        self.WIDTH = WIDTH


@tiles.jit
def span_kernel(x_ptr, y_ptr, s):
    a = Span(x_ptr, s, 64)
    b = tl.aggregate_replace(a, ptr=y_ptr, scale=s * 2)
    offs = tl.arange(0, a.WIDTH)
    tl.store(b.ptr + offs, tl.load(a.ptr + offs) * b.scale + a.scale)


def test_aggregate_replace_copies_with_fields_changed(dev, rng):
    x = rng.standard_normal(64).astype(np.float32)
    yd = dev.put(np.zeros(64, np.float32))
    span_kernel[(1,)](dev.put(x), yd, 1.5)
    np.testing.assert_allclose(dev.get(yd), x * 3.0 + 1.5, rtol=1e-6)
    with pytest.raises(TypeError, match="no field"):
        tl.aggregate_replace(Span(1, 2, 3), nope=1)
    with pytest.raises(TypeError, match="aggregate instance"):
        tl.aggregate_replace((1, 2), ptr=1)


COMPILE_CASES = [
    (copy_kernel, {"x_ptr": "*i1", "y_ptr": "*i1", "z_ptr": "*i1", "n": "i32"},
     {"LOAD_SEM": None, "STORE_SEM": None, "SCOPE": None, "BLOCK": 128}, "ld.acquire.gpu.global.b8"),
    (copy_kernel, {"x_ptr": "*bf16", "y_ptr": "*bf16", "z_ptr": "*bf16", "n": "i32"},
     {"LOAD_SEM": "relaxed", "STORE_SEM": "relaxed", "SCOPE": "cta", "BLOCK": 128}, "st.relaxed.cta.global.b16"),
    (copy_kernel, {"x_ptr": "*fp64", "y_ptr": "*fp64", "z_ptr": "*fp64", "n": "i32"},
     {"LOAD_SEM": "acquire", "STORE_SEM": "release", "SCOPE": "sys", "BLOCK": 128}, "st.release.sys.global.b64"),
    (chain_kernel, {"x_ptr": "*i32", "partial_ptr": "*i32", "flag_ptr": "*i32", "seen_ptr": "*i32"},
     {"BLOCK": 256}, "ld.acquire.gpu.global.b32"),
    (poll_kernel, {"flag_ptr": "*u16", "out_ptr": "*i32", "expected": "i32"}, {"TIMEOUT": 100, "BLOCK": 64},
     "%globaltimer"),
    (poll_kernel, {"flag_ptr": "*i64", "out_ptr": "*i32", "expected": "i64"}, {"TIMEOUT": None, "BLOCK": 64},
     "ld.relaxed.gpu.global.b64"),
    (span_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "s": "fp32"}, {}, "st.global"),
    (expect_zero_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"}, {"BLOCK": 128}, "st.global"),
]


@pytest.mark.parametrize("case", range(len(COMPILE_CASES)))
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_atomic_access_kernels_assemble(ptxas, case, target):
    from test_compile import assemble

    fn, sig, cx, marker = COMPILE_CASES[case]
    k = tiles.compile(fn, signature=sig, constexprs=cx, target=target, num_warps=4)
    assert marker in k.asm["ptx"], marker
    assemble(ptxas, k.asm["ptx"], target)
