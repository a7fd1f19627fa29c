"""`tl.float8e4b15`, Triton's fp8 with fp16's exponent bias (largest value 1.875, no infinities
or NaN): bytes passed through `tiles.reinterpret`, widened exactly (its bits move into an fp16),
narrowed as Triton converts on NVIDIA GPUs (to fp16 toward zero, the magnitude clamped to 1.75,
rounded to nearest with ties away from zero), arithmetic in fp16, `dot` of fp16-widened
operands, `abs` by the sign bit. In both modes, against float64 references written here."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_fp8 import fp8_widen_kernel  # loads, then stores as fp32 and fp16

import tiles
import tiles.language as tl
from tiles.language.extra.cuda import convert_custom_float8_sm80


def decode(bits: np.ndarray) -> np.ndarray:
    """The value of each fp8e4b15 byte, in float64."""
    out = []
    for b in np.asarray(bits, np.uint8).ravel().tolist():
        e, m = (b >> 3) & 0xF, b & 7
        v = m * 2.0 ** -17 if e == 0 else (1 + m / 8) * 2.0 ** (e - 15)
        out.append(-v if b & 0x80 else v)
    return np.array(out).reshape(np.shape(bits))


_POSITIVE = {decode(np.uint8(b)).item(): b for b in range(0x7F)}  # 0x7F (1.875) is never made


def encode(values: np.ndarray, from_fp16: bool = False) -> np.ndarray:
    """The fp8e4b15 byte each number converts to, from its fp32 (or fp16) value, in float64 steps."""
    out = []
    for v in np.asarray(values).ravel().tolist():
        v = float(np.float16(v)) if from_fp16 else float(np.float32(v))
        sign = 0x80 if math.copysign(1.0, v) < 0 else 0
        a = abs(v)
        if math.isnan(a) or a >= 1.75:
            out.append(sign | 0x7E)
            continue
        if a > 0:
            q16 = 2.0 ** (math.floor(math.log2(a)) - 10) if a >= 2.0 ** -14 else 2.0 ** -24
            a = math.floor(a / q16) * q16  # fp16, toward zero
        if a > 0:
            q8 = 2.0 ** (math.floor(math.log2(a)) - 3) if a >= 2.0 ** -14 else 2.0 ** -17
            a = math.floor(a / q8 + 0.5) * q8  # ties away from zero
        out.append(sign | _POSITIVE[a])
    return np.array(out, np.uint8).reshape(np.shape(values))


def _special_values() -> np.ndarray:
    return np.array([0.0, -0.0, 1.0, -1.0, 1.75, -1.8, 1.875, 2.0, 100.0, -1e30, np.inf, -np.inf, np.nan,
                     2.0 ** -17, 2.0 ** -18, -(2.0 ** -19), 1 + 1 / 16, 1 + 3 / 16, 0.5 + 1 / 32, 1e-9,
                     2.0 ** -14, 2.0 ** -14 * (1 + 1 / 16), 1.0 - 2.0 ** -12])


def _put(dev, bits: np.ndarray):
    """fp8e4b15 bytes where `dev` runs kernels, typed for tiles."""
    return tiles.reinterpret(dev.put(np.asarray(bits, np.uint8)), tl.float8e4b15)


def _get(dev, t) -> np.ndarray:
    return dev.get(t.base).view(np.uint8)


def test_widening_is_exact_for_every_value(dev):
    bits = np.arange(256, dtype=np.uint8)
    f32 = dev.put(np.full(256, np.nan, np.float32))
    f16 = dev.put(np.full(256, np.nan, np.float16))
    fp8_widen_kernel[(1,)](_put(dev, bits), f32, f16, BLOCK=256)
    np.testing.assert_array_equal(dev.get(f32), decode(bits).astype(np.float32))
    np.testing.assert_array_equal(dev.get(f16), decode(bits).astype(np.float16))
    assert dev.get(f32)[0x7F] == 1.875 and dev.get(f32)[0xF8] == -1.0


@tiles.jit
def narrow_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x.to(tl.float8e4b15), mask=mask)


@pytest.mark.parametrize("src", [np.float32, np.float16, np.float64, np.int32])
def test_narrowing_clamps_and_rounds_as_triton(dev, rng, src):
    x = rng.standard_normal(1000) * 0.7
    if src is np.int32:
        x = rng.integers(-3, 4, 1000)
    else:
        x[:23] = _special_values()
    with np.errstate(over="ignore"):  # -1e30 is -inf in fp16
        x = x.astype(src)
    n = x.size
    y = _put(dev, np.full(n, 0x55, np.uint8))
    narrow_kernel[(1,)](dev.put(x), y, n, BLOCK=1024)
    want = encode(x.astype(np.float32) if src is np.float64 else x, from_fp16=src is np.float16)
    np.testing.assert_array_equal(_get(dev, y), want)


@tiles.jit
def arith_kernel(x_ptr, y_ptr, sum_ptr, abs_ptr, max_ptr, const_ptr, neg_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(sum_ptr + offs, x + y)  # in fp16, rounded back to fp8e4b15
    tl.store(abs_ptr + offs, tl.abs(x))
    tl.store(max_ptr + offs, tl.maximum(x, y))
    tl.store(const_ptr + offs, tl.full((BLOCK,), 0.3, tl.float8e4b15))
    tl.store(neg_ptr + offs, -x)


def test_arithmetic_abs_and_constants(dev, rng):
    n = 256
    xb = np.arange(256, dtype=np.uint8)
    yb = rng.integers(0, 256, n).astype(np.uint8)
    outs = [_put(dev, np.zeros(n, np.uint8)) for _ in range(5)]
    arith_kernel[(1,)](_put(dev, xb), _put(dev, yb), *outs, BLOCK=n)
    x, y = decode(xb), decode(yb)
    s, a, m, c, neg = (_get(dev, o) for o in outs)
    np.testing.assert_array_equal(neg, xb ^ 0x80)  # the sign bit flips (1.875 included)
    np.testing.assert_array_equal(s, encode((x.astype(np.float16) + y.astype(np.float16)), from_fp16=True))
    np.testing.assert_array_equal(a, xb & 0x7F)  # 1.875 (0x7F) stays: only the sign bit clears
    np.testing.assert_array_equal(decode(m), np.maximum(decode(encode(x)), decode(encode(y))))
    np.testing.assert_array_equal(c, np.full(n, encode(np.array([0.3]))[0]))


@tiles.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))


def test_dot_of_fp8e4b15_operands(dev, rng):
    M, N, K = 64, 32, 64
    ab = rng.integers(0, 256, (M, K)).astype(np.uint8)
    bb = rng.integers(0, 256, (K, N)).astype(np.uint8)
    c = dev.put(np.full((M, N), np.nan, np.float32))
    dot_kernel[(1,)](_put(dev, ab), _put(dev, bb), c, M=M, N=N, K=K)
    ref = decode(ab) @ decode(bb)
    # fp16 products are exact; fp32 accumulation.
    np.testing.assert_allclose(dev.get(c), ref, rtol=1e-5, atol=1e-5)


@tiles.jit
def custom_convert_kernel(x_ptr, y_ptr, z_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    q = convert_custom_float8_sm80(x, tl.float8e4b15)
    tl.store(y_ptr + offs, q)
    tl.store(z_ptr + offs, convert_custom_float8_sm80(q, tl.float32))


def test_triton_custom_float8_converters(dev, rng):
    x = (rng.standard_normal(128) * 0.8).astype(np.float32)
    y = _put(dev, np.zeros(128, np.uint8))
    z = dev.put(np.zeros(128, np.float32))
    custom_convert_kernel[(1,)](dev.put(x), y, z, BLOCK=128)
    np.testing.assert_array_equal(_get(dev, y), encode(x))
    np.testing.assert_array_equal(dev.get(z), decode(encode(x)).astype(np.float32))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_fp8e4b15_kernels_assemble(ptxas, target):
    from test_compile import assemble

    k = tiles.compile(narrow_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp8e4b15", "n": "i32"},
                      constexprs={"BLOCK": 1024}, target=target)
    assert "cvt.rz.f16.f32" in k.asm["ptx"] and "e4m3" not in k.asm["ptx"]
    assemble(ptxas, k.asm["ptx"], target)
    k = tiles.compile(fp8_widen_kernel, signature={"x_ptr": "*fp8e4b15", "f32_ptr": "*fp32", "f16_ptr": "*fp16"},
                      constexprs={"BLOCK": 256}, target=target)
    assert "e4m3" not in k.asm["ptx"]
    assemble(ptxas, k.asm["ptx"], target)
    k = tiles.compile(dot_kernel, signature={"a_ptr": "*fp8e4b15", "b_ptr": "*fp8e4b15", "c_ptr": "*fp32"},
                      constexprs={"M": 64, "N": 32, "K": 64}, target=target)
    ptx = k.asm["ptx"]
    assert ".f16.f16" in ptx and "e4m3" not in ptx  # widened to fp16 for the tensor cores
    assemble(ptxas, ptx, target)


def test_the_reference_encoder_round_trips():
    bits = np.arange(0x7F, dtype=np.uint8)
    np.testing.assert_array_equal(encode(decode(bits)), bits)
    np.testing.assert_array_equal(encode(-decode(bits)), bits | 0x80)


@tiles.jit
def print_kernel(x_ptr):
    tl.device_print("v=", tl.load(x_ptr + tl.arange(0, 2)))


def test_the_interpreter_prints_values(capfd, monkeypatch):
    monkeypatch.setenv("TILES_INTERPRET", "1")
    print_kernel[(1,)](tiles.reinterpret(np.array([0x78, 0xF4], np.uint8), tl.float8e4b15))
    out = capfd.readouterr().out
    assert "v=: 1.0" in out and "v=: -0.75" in out, out
