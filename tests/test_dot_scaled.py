"""`tl.dot_scaled` (microscaled MX operands: e2m1 packed two per byte, e4m3, e5m2, bf16, fp16,
with e8m0 scales per 32 elements along K), emulated as Triton does on Hopper: decoded, scaled,
upcast to bf16 (fp16 beside an fp16 operand) and multiplied with fp32 accumulation — in both
modes, and compiled under ptxas."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tiles
import tiles.language as tl

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float64)


@tiles.jit
def mx_kernel(a_ptr, as_ptr, b_ptr, bs_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
              A_FMT: tl.constexpr, B_FMT: tl.constexpr, KA: tl.constexpr, KB: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    ks = tl.arange(0, K // 32)
    a = tl.load(a_ptr + rm[:, None] * KA + tl.arange(0, KA)[None, :])
    b = tl.load(b_ptr + tl.arange(0, KB)[:, None] * N + rn[None, :])
    sa = tl.load(as_ptr + rm[:, None] * (K // 32) + ks[None, :])
    sb = tl.load(bs_ptr + rn[:, None] * (K // 32) + ks[None, :])
    c = tl.dot_scaled(a, sa, A_FMT, b, sb, B_FMT)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)


def _operand(rng, fmt, rows, k, k_axis):
    """Random operand bytes in `fmt` and its float64 values ([rows, k] for lhs, [k, rows] for rhs)."""
    if fmt == "e2m1":
        codes = rng.integers(0, 16, (rows, k)).astype(np.uint8)
        packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)  # first element low
        vals = E2M1[codes]
        return (packed, vals) if k_axis == 1 else (packed.T.copy(), vals.T.copy())
    np_fp8 = ml_dtypes.float8_e4m3fn if fmt == "e4m3" else ml_dtypes.float8_e5m2
    x = (rng.standard_normal((rows, k)) * 2).astype(np_fp8)
    raw, vals = x.view(np.uint8), x.astype(np.float64)
    return (raw, vals) if k_axis == 1 else (raw.T.copy(), vals.T.copy())


@pytest.mark.parametrize("a_fmt,b_fmt", [("e2m1", "e2m1"), ("e4m3", "e2m1"), ("e5m2", "e4m3"), ("e4m3", "e4m3")])
def test_dot_scaled(dev, rng, a_fmt, b_fmt):
    M, N, K = 32, 32, 64
    a, av = _operand(rng, a_fmt, M, K, 1)
    b, bv = _operand(rng, b_fmt, N, K, 0)
    sa = rng.integers(120, 134, (M, K // 32)).astype(np.uint8)
    sb = rng.integers(120, 134, (N, K // 32)).astype(np.uint8)
    c = dev.put(np.full((M, N), np.nan, np.float32))
    mx_kernel[(1,)](dev.put(a), dev.put(sa), dev.put(b), dev.put(sb), c, M=M, N=N, K=K, A_FMT=a_fmt, B_FMT=b_fmt,
                    KA=a.shape[1], KB=b.shape[0])
    a_scaled = av * np.exp2(np.repeat(sa.astype(np.float64) - 127, 32, axis=1))
    b_scaled = bv * np.exp2(np.repeat(sb.astype(np.float64) - 127, 32, axis=1)).T
    ref = a_scaled @ b_scaled  # the scaled values are exact in bf16
    np.testing.assert_allclose(dev.get(c), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_dot_scaled_compiles(ptxas, target):
    from test_compile import assemble

    sig = {"a_ptr": "*u8", "as_ptr": "*u8", "b_ptr": "*u8", "bs_ptr": "*u8", "c_ptr": "*fp32"}
    k = tiles.compile(mx_kernel, signature=sig, constexprs=dict(M=64, N=64, K=64, A_FMT="e2m1", B_FMT="e4m3", KA=32,
                                                                  KB=64), target=target)
    assemble(ptxas, k.asm["ptx"], target)


def test_dot_scaled_rejects_bad_scale_shapes():
    @tiles.jit
    def bad(a_ptr, s_ptr, c_ptr):
        r = tl.arange(0, 32)
        a = tl.load(a_ptr + r[:, None] * 32 + r[None, :])
        s = tl.load(s_ptr + r[:, None] * 2 + tl.arange(0, 2)[None, :])  # 2 scales for K = 32
        tl.store(c_ptr + r[:, None] * 32 + r[None, :], tl.dot_scaled(a, s, "e4m3", a, None, "e4m3"))

    with pytest.raises(tiles.CompilationError, match="scale of shape"):
        tiles.compile(bad, signature={"a_ptr": "*u8", "s_ptr": "*u8", "c_ptr": "*fp32"}, target="sm_90a")


@tiles.jit
def mx_m_packed_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    # e2m1 lhs packed along M (lhs_k_pack=False): byte (i, k) holds rows 2i (low) and 2i + 1.
    a = tl.load(a_ptr + tl.arange(0, M // 2)[:, None] * K + tl.arange(0, K)[None, :])
    b = tl.load(b_ptr + tl.arange(0, K)[:, None] * N + tl.arange(0, N)[None, :])
    c = tl.dot_scaled(a, None, "e2m1", b, None, "bf16", lhs_k_pack=False)
    tl.store(c_ptr + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :], c)


def test_dot_scaled_packed_along_m_without_scales(dev, rng):
    M, N, K = 32, 16, 32
    codes = rng.integers(0, 16, (M, K)).astype(np.uint8)
    packed = (codes[0::2, :] | (codes[1::2, :] << 4)).astype(np.uint8)
    b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    c = dev.put(np.full((M, N), np.nan, np.float32))
    mx_m_packed_kernel[(1,)](dev.put(packed), dev.put(b), c, M=M, N=N, K=K)
    ref = E2M1[codes] @ b.astype(np.float64)
    np.testing.assert_allclose(dev.get(c), ref, rtol=1e-5, atol=1e-4)


@tiles.jit
def mx_fp16_kernel(a_ptr, as_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm = tl.arange(0, M)
    a = tl.load(a_ptr + rm[:, None] * K + tl.arange(0, K)[None, :])
    sa = tl.load(as_ptr + rm[:, None] * (K // 32) + tl.arange(0, K // 32)[None, :])
    b = tl.load(b_ptr + tl.arange(0, K)[:, None] * N + tl.arange(0, N)[None, :])
    tl.store(c_ptr + rm[:, None] * N + tl.arange(0, N)[None, :], tl.dot_scaled(a, sa, "e4m3", b, None, "fp16"))


def test_dot_scaled_beside_fp16_upcasts_to_fp16(dev, rng):
    # Beside an fp16 operand both upcast to fp16 (Triton's rule), which holds the fp16 values
    # exactly where bf16 would round them.
    M, N, K = 32, 32, 64
    a, av = _operand(rng, "e4m3", M, K, 1)
    sa = rng.integers(122, 132, (M, K // 32)).astype(np.uint8)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = dev.put(np.full((M, N), np.nan, np.float32))
    mx_fp16_kernel[(1,)](dev.put(a), dev.put(sa), dev.put(b), c, M=M, N=N, K=K)
    ref = (av * np.exp2(np.repeat(sa.astype(np.float64) - 127, 32, axis=1))) @ b.astype(np.float64)
    np.testing.assert_allclose(dev.get(c), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    k = tiles.compile(mx_fp16_kernel, signature={"a_ptr": "*u8", "as_ptr": "*u8", "b_ptr": "*fp16", "c_ptr": "*fp32"},
                      constexprs=dict(M=M, N=N, K=K), target="sm_90a")
    assert "cvt.rn.bf16" not in k.asm["ptx"]
