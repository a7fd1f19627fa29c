"""`tl.rand`, `tl.randint`, `tl.randn` (Philox4x32-10) in both modes against a numpy reference of
the published generator, and against Triton's own streams where Triton is installed; plus the
small standard-library builtins (`umulhi`, `softmax`, `cat`, `swizzle2d`, `squeeze`)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import tiles
import tiles.language as tl

M32 = 0xFFFFFFFF


def philox_ref(seed, c0, n_rounds=10):
    """Philox4x32 with counters (c0, 0, 0, 0) and key (seed lo, seed hi), in numpy uint64 math."""
    c0 = c0.astype(np.uint64) & M32
    c1 = np.zeros_like(c0)
    c2 = np.zeros_like(c0)
    c3 = np.zeros_like(c0)
    k0 = np.uint64(seed & M32)
    k1 = np.uint64((seed >> 32) & M32)
    for _ in range(n_rounds):
        p_b = np.uint64(0xCD9E8D57) * c2
        p_a = np.uint64(0xD2511F53) * c0
        c0, c1, c2, c3 = ((p_b >> np.uint64(32)) ^ c1 ^ k0, p_b & M32, (p_a >> np.uint64(32)) ^ c3 ^ k1, p_a & M32)
        k0 = (k0 + np.uint64(0x9E3779B9)) & M32
        k1 = (k1 + np.uint64(0xBB67AE85)) & M32
    return [c.astype(np.uint32) for c in (c0, c1, c2, c3)]


def uniform_ref(u):
    i = u.view(np.int32).astype(np.int64)
    i = np.where(i < 0, -i - 1, i)
    return (i * np.float32(4.6566127342e-10)).astype(np.float32)


@tiles.jit
def random_kernel(out_i, out_f, out_n, seed, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_i + offs, tl.randint(seed, offs).to(tl.int32, bitcast=True))
    tl.store(out_f + offs, tl.rand(seed, offs))
    tl.store(out_n + offs, tl.randn(seed, offs + 1000))


@pytest.mark.parametrize("seed", [0, 1234567, 2**40 + 77])
def test_random_streams_match_the_philox_reference(dev, seed):
    n = 256
    oi, of, on = (dev.put(np.zeros(n, dt)) for dt in (np.int32, np.float32, np.float32))
    random_kernel[(1,)](oi, of, on, seed, BLOCK=n)
    c = philox_ref(seed, np.arange(n))
    np.testing.assert_array_equal(dev.get(oi).view(np.uint32), c[0])
    np.testing.assert_allclose(dev.get(of), uniform_ref(c[0]), rtol=1e-6)
    c2 = philox_ref(seed, np.arange(n) + 1000)
    u1 = np.maximum(1e-7, uniform_ref(c2[0]).astype(np.float64))
    u2 = uniform_ref(c2[1]).astype(np.float64)
    normal = np.sqrt(-2.0 * np.log(u1)) * np.cos(6.283185307179586 * u2)
    np.testing.assert_allclose(dev.get(on), normal, rtol=1e-4, atol=1e-4)
    f = dev.get(of)
    assert 0.0 <= f.min() and f.max() < 1.0 and 0.35 < f.mean() < 0.65


@tiles.jit
def philox_impl_kernel(out, k0, k1, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    c = offs.to(tl.uint32)
    z = c * 0
    a, b, _, _ = tl.philox_impl(c, z, z, z, k0.to(tl.uint32) + z, k1.to(tl.uint32) + z, 7)
    tl.store(out + offs, a.to(tl.int32, bitcast=True))
    tl.store(out + BLOCK + offs, b.to(tl.int32, bitcast=True))


def test_philox_impl_takes_counters_and_key(dev):
    out = dev.put(np.zeros(256, np.int32))
    seed = 0x12345678_9ABCDEF1
    philox_impl_kernel[(1,)](out, seed & M32, (seed >> 32) & M32, BLOCK=128)
    c = philox_ref(seed, np.arange(128), n_rounds=7)
    got = dev.get(out).view(np.uint32)
    np.testing.assert_array_equal(got[:128], c[0])
    np.testing.assert_array_equal(got[128:], c[1])


TRITON_SCRIPT = r"""
import os, sys, numpy as np, torch
os.environ["TRITON_INTERPRET"] = "1"
import triton, triton.language as tl
@triton.jit
def k(out_i, out_f, seed, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_i + offs, tl.randint(seed, offs).to(tl.int32, bitcast=True))
    tl.store(out_f + offs, tl.rand(seed, offs))
oi, of = torch.zeros(64, dtype=torch.int32), torch.zeros(64)
k[(1,)](oi, of, int(sys.argv[1]), BLOCK=64)
np.save(sys.argv[2], np.stack([oi.numpy().view(np.float32), of.numpy()]))
"""


def test_random_streams_match_triton(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    script = tmp_path / "t.py"
    script.write_text(TRITON_SCRIPT)
    out = tmp_path / "t.npy"
    r = subprocess.run([sys.executable, str(script), "987654", str(out)], capture_output=True, text=True,
                       env=dict(os.environ, TRITON_INTERPRET="1"))
    if r.returncode:
        pytest.skip(f"Triton's interpreter did not run: {r.stderr[-300:]}")
    want = np.load(out)
    monkeypatch.setenv("TILES_INTERPRET", "1")
    oi, of, on = np.zeros(64, np.int32), np.zeros(64, np.float32), np.zeros(64, np.float32)
    random_kernel[(1,)](oi, of, on, 987654, BLOCK=64)
    np.testing.assert_array_equal(oi, want[0].view(np.int32))
    np.testing.assert_array_equal(of, want[1])


@tiles.jit
def stdlib_kernel(x_ptr, a_ptr, b_ptr, out_ptr, cat_ptr, sw_ptr, hi_ptr):
    r = tl.arange(0, 16)
    x = tl.load(x_ptr + r[:, None] * 16 + r[None, :])
    tl.store(out_ptr + r[:, None] * 16 + r[None, :], tl.softmax(x, 1))
    a = tl.load(a_ptr + r)
    b = tl.load(b_ptr + r)
    r32 = tl.arange(0, 32)
    tl.store(cat_ptr + r32, tl.cat(a, b))
    i, j = tl.swizzle2d(r // 4, r % 4, 4, 4, 2)
    tl.store(sw_ptr + r, i * 4 + j)
    tl.store(hi_ptr + r, tl.umulhi(a, b))
    tl.assume(a.sum() != 12345)


def test_standard_library_builtins(dev, rng):
    x = rng.standard_normal((16, 16)).astype(np.float32)
    a = rng.integers(0, 2**31 - 1, 16, dtype=np.int32)
    b = rng.integers(0, 2**31 - 1, 16, dtype=np.int32)
    out = dev.put(np.zeros((16, 16), np.float32))
    cat = dev.put(np.zeros(32, np.int32))
    sw = dev.put(np.zeros(16, np.int32))
    hi = dev.put(np.zeros(16, np.int32))
    stdlib_kernel[(1,)](dev.put(x), dev.put(a), dev.put(b), out, cat, sw, hi)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(dev.get(out), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(dev.get(cat), np.concatenate([a, b]))
    # swizzle2d(4, 4, group 2): element k of the row-major grid goes to column-major order within
    # groups of two rows (k = 1 -> (1, 0) = 4).
    np.testing.assert_array_equal(dev.get(sw), [0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15])
    want = ((a.astype(np.uint64) * b.astype(np.uint64)) >> np.uint64(32)).astype(np.uint32).view(np.int32)
    np.testing.assert_array_equal(dev.get(hi), want)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_random_and_stdlib_kernels_assemble(ptxas, target):
    from test_compile import assemble

    k = tiles.compile(random_kernel, signature={"out_i": "*i32", "out_f": "*fp32", "out_n": "*fp32", "seed": "i64"},
                      constexprs={"BLOCK": 256}, target=target)
    assert "mul.hi.u32" in k.asm["ptx"] or "mul.wide.u32" in k.asm["ptx"]
    assemble(ptxas, k.asm["ptx"], target)
    k = tiles.compile(stdlib_kernel, signature={n: "*fp32" if n in ("x_ptr", "out_ptr") else "*i32" for n in
                                                ("x_ptr", "a_ptr", "b_ptr", "out_ptr", "cat_ptr", "sw_ptr", "hi_ptr")},
                      target=target)
    assemble(ptxas, k.asm["ptx"], target)
    k = tiles.compile(philox_impl_kernel, signature={"out": "*i32", "k0": "i32", "k1": "i32"},
                      constexprs={"BLOCK": 128}, target=target)
    assemble(ptxas, k.asm["ptx"], target)


def test_seed_must_be_an_integer():
    @tiles.jit
    def seeded(x_ptr, seed):
        tl.store(x_ptr + tl.arange(0, 16), tl.rand(seed, tl.arange(0, 16)))

    tiles.compile(seeded, signature={"x_ptr": "*fp32", "seed": "i64"})
    for bad in ("fp32", "*i32"):
        with pytest.raises(tiles.CompilationError, match="seed must be an integer"):
            tiles.compile(seeded, signature={"x_ptr": "*fp32", "seed": bad})
