"""`tl.dot` in both modes against a float64 reference, by ||out - ref|| / ||ref||, with
Triton's usual bounds: every supported dtype pair, odd shapes, transposed (strided) operands,
accumulation forms, epilogues and warps; plus ptxas checks of the PTX (the CPU twins)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tiles
import tiles.language as tl
from test_language import np_dtype, random


@tiles.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  ACC: tl.constexpr, PRECISION: tl.constexpr, FORM: tl.constexpr, STAGES: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    for k in tl.range(0, tl.cdiv(K, BLOCK_K), num_stages=STAGES):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k * BLOCK_K), other=0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_K) & (offs_n[None, :] < N), other=0)
        if FORM == "acc":
            acc = tl.dot(a, b, acc, input_precision=PRECISION, out_dtype=ACC)
        else:
            acc += tl.dot(a, b, input_precision=PRECISION, out_dtype=ACC)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@tiles.jit
def single_dot_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                      ACT: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    c = tl.dot(a, b) * 0.5 + tl.load(bias_ptr + rn)[None, :]
    if ACT == "leaky_relu":
        c = tl.where(c >= 0, c, 0.01 * c)
    row_max = tl.max(c, axis=1)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)
    tl.store(c_ptr + M * N + rm, row_max)


# (operand dtype, accumulator dtype, output dtype, input_precision, bound on the relative error)
CASES = [
    ("float16", "float32", "float16", "tf32", 1e-2),
    ("float16", "float32", "float32", "tf32", 1e-2),
    ("float16", "float16", "float16", "tf32", 1e-2),
    ("bfloat16", "float32", "bfloat16", "tf32", 1e-2),
    ("float32", "float32", "float32", "tf32", 1e-3),
    ("float32", "float32", "float32", "tf32x3", 1e-5),
    ("float32", "float32", "float32", "bf16x3", 1e-4),
    ("float32", "float32", "float32", "bf16x6", 1e-5),
    ("float32", "float32", "float32", "ieee", 1e-5),
    ("float64", "float64", "float64", "ieee", 1e-12),
    ("int8", "int32", "int32", "tf32", 0.0),
]
TL = {"float16": tl.float16, "float32": tl.float32, "float64": tl.float64, "int32": tl.int32}


def _operands(rng, dt, shape):
    if dt == "int8":
        return random(rng, shape, "int8", -100, 100)
    return random(rng, shape, dt, -1.0, 1.0)


def _rel_err(out, ref):
    out = out.astype(np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def run_matmul(dev, rng, M, N, K, dt, acc, out_dt, precision, blocks=(32, 32, 32), num_warps=4,
               trans_a=False, trans_b=False, form="acc", stages=1):
    a = _operands(rng, dt, (M, K))
    b = _operands(rng, dt, (K, N))
    # Transposed operands: the matrix is stored column-major and read through its strides.
    a_store = np.ascontiguousarray(a.T) if trans_a else a
    b_store = np.ascontiguousarray(b.T) if trans_b else b
    sa = (1, M) if trans_a else (K, 1)
    sb = (1, K) if trans_b else (N, 1)
    c = np.zeros((M, N), np_dtype(out_dt))
    da, db, dc = dev.put(a_store), dev.put(b_store), dev.put(c)
    bm, bn, bk = blocks
    grid = (triton_cdiv(M, bm), triton_cdiv(N, bn))
    matmul_kernel[grid](da, db, dc, M, N, K, sa[0], sa[1], sb[0], sb[1], N, 1,
                        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, ACC=TL[acc], PRECISION=precision, FORM=form,
                        STAGES=stages, num_warps=num_warps)
    out = dev.get(dc)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    return out, ref


def triton_cdiv(a, b):
    return (a + b - 1) // b


@pytest.mark.parametrize("dt,acc,out_dt,precision,bound", CASES, ids=[f"{c[0]}-{c[1]}-{c[3]}" for c in CASES])
def test_dot_dtypes(dev, rng, dt, acc, out_dt, precision, bound):
    out, ref = run_matmul(dev, rng, 100, 70, 90, dt, acc, out_dt, precision)
    if bound == 0.0:
        np.testing.assert_array_equal(out, ref.astype(out.dtype))
    else:
        assert _rel_err(out, ref) <= bound


@pytest.mark.parametrize("dt,acc,out_dt,precision,bound", CASES, ids=[f"{c[0]}-{c[1]}-{c[3]}" for c in CASES])
def test_dot_dtypes_pipelined(dev, rng, dt, acc, out_dt, precision, bound):
    # Every dimension a multiple of 16: both operands take the cp.async pipeline (3 stages);
    # K = 160 leaves the last 64-wide step half masked.
    out, ref = run_matmul(dev, rng, 128, 96, 160, dt, acc, out_dt, precision, blocks=(64, 32, 64), stages=3)
    if bound == 0.0:
        np.testing.assert_array_equal(out, ref.astype(out.dtype))
    else:
        assert _rel_err(out, ref) <= bound


@pytest.mark.parametrize("trans_a,trans_b", [(False, True), (True, False), (True, True)])
@pytest.mark.parametrize("dt", ["float16", "float32"])
def test_dot_transposed_operands(dev, rng, trans_a, trans_b, dt):
    out, ref = run_matmul(dev, rng, 96, 80, 72, dt, "float32", "float32", "tf32", trans_a=trans_a, trans_b=trans_b)
    assert _rel_err(out, ref) <= (1e-2 if dt == "float16" else 1e-3)


FMA_SHAPES = [((16, 16, 16), 1), ((32, 32, 32), 4), ((64, 32, 16), 4), ((32, 64, 8), 8), ((64, 64, 32), 8)]


@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("blocks,num_warps", FMA_SHAPES, ids=[f"{b[0]}x{b[1]}x{b[2]}w{w}" for b, w in FMA_SHAPES])
@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("stages", [1, 3])
def test_ieee_dots_operands_stored_either_way(dev, rng, trans_a, trans_b, blocks, num_warps, dt, stages):
    # fp32 "ieee" dots run on CUDA cores, reading their shared-memory operands in vector runs along
    # K or along the rows / columns, whichever way each operand is stored; fp64 dots run on tensor
    # cores (mma.sync f64), their fragments read element by element.
    out, ref = run_matmul(dev, rng, 70, 90, 100, dt, dt, dt, "ieee", blocks=blocks, num_warps=num_warps,
                          trans_a=trans_a, trans_b=trans_b, stages=stages)
    assert _rel_err(out, ref) <= (1e-5 if dt == "float32" else 1e-12)


def _compile_ieee_matmul(dt, transposed, block_mn, stages, target):
    """`matmul_kernel` in IEEE precision, BLOCK_M = BLOCK_N = `block_mn`, BLOCK_K 32, 4 warps. Unit
    strides: `a` along K and `b` along N, or, `transposed`, `a` along M and `b` along K."""
    ones = ("stride_am", "stride_bk") if transposed else ("stride_ak", "stride_bn")
    sig = dict(SIG, a_ptr=PTR[dt], b_ptr=PTR[dt], c_ptr=PTR[dt], K="i32:16",
               **{s: "i32:16" for s in ("stride_am", "stride_ak", "stride_bk", "stride_bn") if s not in ones})
    return tiles.compile(matmul_kernel, signature=sig,
                         constexprs={"BLOCK_M": block_mn, "BLOCK_N": block_mn, "BLOCK_K": 32, "ACC": TL[dt],
                                     "PRECISION": "ieee", "FORM": "acc", "STAGES": stages},
                         specialization={"a_ptr": 16, "b_ptr": 16, "c_ptr": 16}, equal_to_1=ones + ("stride_cn",),
                         target=target, num_warps=4)


@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, True)])
@pytest.mark.parametrize("dt,target", [("float32", "sm_90a"), ("float64", "sm_75")])
def test_fma_dot_reads_shared_memory_in_vectors(ptxas, trans_a, trans_b, dt, target):
    # (fp64 dots run on CUDA cores only before sm_80.)
    from test_compile import assemble

    k = _compile_ieee_matmul(dt, trans_a, 32, 1, target)
    ptx = k.asm["ptx"]
    assert "mma.sync" not in ptx
    # 32 K steps of 2 rows of `a` and 4 columns of `b` a thread, in runs of 16 bytes: at least 48
    # vector loads; scalar ones (at most 8) only where the epilogue converts the result's layout.
    # (Element by element, LLVM merged under a fifth of them.)
    loads = [ln for ln in ptx.splitlines() if "ld.shared" in ln]
    vector = sum("ld.shared.v" in ln for ln in loads)
    assert vector >= 48 and len(loads) - vector <= 8, loads
    report = assemble(ptxas, ptx, target)
    assert "0 bytes spill stores" in report, report


@pytest.mark.parametrize("trans_a", [False, True])
def test_fma_dot_operands_are_pipelined(ptxas, trans_a):
    # CUDA-core dots take their operands through the cp.async ring as tensor-core dots do.
    from test_compile import assemble

    k = _compile_ieee_matmul("float32", trans_a, 64, 3, "sm_90a")
    ptx = k.asm["ptx"]
    assert "cp.async" in ptx and "mma" not in ptx
    # Two slots for three stages: the dot reads a slot into registers before it is refilled.
    assert 2 * (64 * 32 + 32 * 64) * 4 <= k.metadata.shared < 3 * (64 * 32 + 32 * 64) * 4
    report = assemble(ptxas, ptx, "sm_90a")
    assert "0 bytes spill stores" in report, report


@pytest.mark.parametrize("blocks,num_warps", [((16, 16, 16), 1), ((64, 64, 32), 4), ((128, 64, 32), 4),
                                              ((64, 128, 64), 8), ((16, 64, 32), 8), ((128, 128, 32), 8)])
def test_dot_block_shapes_and_warps(dev, rng, blocks, num_warps):
    out, ref = run_matmul(dev, rng, 200, 190, 130, "float16", "float32", "float32", "tf32", blocks=blocks,
                          num_warps=num_warps)
    assert _rel_err(out, ref) <= 1e-2


@pytest.mark.parametrize("dt", ["float16", "int8"])
def test_dot_plus_equals_form(dev, rng, dt):
    acc, out_dt = ("int32", "int32") if dt == "int8" else ("float32", "float32")
    out, ref = run_matmul(dev, rng, 64, 64, 96, dt, acc, out_dt, "tf32", form="plus")
    if dt == "int8":
        np.testing.assert_array_equal(out, ref.astype(np.int32))
    else:
        assert _rel_err(out, ref) <= 1e-2


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_dot_num_stages(dev, rng, stages):
    out, ref = run_matmul(dev, rng, 130, 120, 304, "float16", "float32", "float16", "tf32", blocks=(64, 64, 32),
                          stages=stages)
    assert _rel_err(out, ref) <= 1e-2


@tiles.jit
def stepped_pointers_kernel(a_ptr, b_ptr, c_ptr, out_ptr, K, stride_ak, stride_bk,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # A matmul whose pointer tiles step by a runtime stride (a), by a constant (b), and are
    # read again after the loop: the final pointers point at the K-block past the last one.
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * BLOCK_N + rn[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _k in tl.range(0, K // BLOCK_K - 1, num_stages=3):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * BLOCK_N
    acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
    tl.store(c_ptr + rm[:, None] * BLOCK_N + rn[None, :], acc.to(tl.float16))
    tl.store(out_ptr + rm[:, None] * BLOCK_K + rk[None, :], tl.load(a_ptrs))


def test_pointers_stepped_in_a_loop_and_read_after_it(dev, rng):
    M, N, K, BK = 128, 128, 256, 32
    a = random(rng, (M, K), "float16")
    b = random(rng, (K, N), "float16")
    c = np.zeros((M, N), np.float16)
    last = np.zeros((M, BK), np.float16)
    dc, dl = dev.put(c), dev.put(last)
    stepped_pointers_kernel[(1,)](dev.put(a), dev.put(b), dc, dl, K, 1, N, BLOCK_M=M, BLOCK_N=N, BLOCK_K=BK)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert _rel_err(dev.get(dc), ref) <= 1e-2
    np.testing.assert_array_equal(dev.get(dl), a[:, K - BK:])


@tiles.jit
def step_first_kernel(x_ptr, out_ptr, n_steps, stride, BLOCK: tl.constexpr):
    # The pointer tile is stepped before the body reads it, and both tiles are read.
    # (A 64-row accumulator: on one warp, enough registers a thread for the loop to carry one
    # base pointer instead of the tile.)
    offs = tl.arange(0, BLOCK)
    p = x_ptr + offs
    acc = tl.zeros((64, BLOCK), dtype=tl.float32)
    for _i in range(n_steps):
        q = p + stride
        acc += (tl.load(q) * 2.0 + tl.load(p))[None, :]
        p = q
    tl.store(out_ptr + offs, tl.sum(acc, axis=0) / 64 + tl.load(p))


def test_pointer_stepped_before_its_reads(dev, rng):
    n, block, stride = 5, 64, 96
    x = random(rng, ((n + 1) * stride + block,), "float32")
    out = np.zeros(block, np.float32)
    d = dev.put(out)
    step_first_kernel[(1,)](dev.put(x), d, n, stride, BLOCK=block, num_warps=1)
    rows = [x[i * stride:i * stride + block].astype(np.float64) for i in range(n + 1)]
    ref = sum(rows[i + 1] * 2.0 + rows[i] for i in range(n)) + rows[n]
    np.testing.assert_allclose(dev.get(d), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_stepped_pointer_tiles_become_one_offset(ptxas, target):
    # The pipelined loop (a 128x128 fp32 accumulator on 4 warps) carries no pointer tile: each
    # steps as one base pointer, so every copy reads a fresh address instead of a pointer
    # stepped in place (which ptxas kept twice and moved between register pairs).
    from test_compile import assemble

    sig = {"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "c_ptr": "*fp16:16", "out_ptr": "*fp16:16", "K": "i32:16",
           "stride_ak": "i32", "stride_bk": "i32:16"}
    k = tiles.compile(stepped_pointers_kernel, signature=sig,
                      constexprs={"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}, target=target, num_warps=4)
    tir = k.asm["tir_opt"]
    loop = next(line for line in tir.splitlines() if " = for " in line)
    carried = loop.split(" : ", 1)[1].split(" (")[0]
    assert "<" not in carried.replace("<128x128xfp32", ""), loop
    assert "cp.async.cg.shared.global" in k.asm["ptx"]
    assemble(ptxas, k.asm["ptx"], target)


@tiles.jit
def carried_offsets_kernel(a_ptr, b_ptr, out_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_K: tl.constexpr):
    # `offs_k` is carried and masks both operands (vLLM's AWQ GEMM steps it so): read as a row
    # for `a` and as a column for `b`, in two layouts.
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for _ in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptr + rm[:, None] * K + offs_k[None, :], mask=(rm[:, None] < M) & (offs_k[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + offs_k[:, None] * N + rn[None, :], mask=(offs_k[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc = tl.dot(a, b, acc)
        offs_k += BLOCK_K
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("per_layout", ["0", "1"])
def test_offsets_carried_in_two_layouts(dev, rng, monkeypatch, per_layout):
    monkeypatch.setenv("TILES_CARRY_PER_LAYOUT", per_layout)
    M, N, K = 30, 20, 100  # K not a multiple of BLOCK_K: the masks matter
    a = random(rng, (M, K), "float16", -1, 1)
    b = random(rng, (K, N), "float16", -1, 1)
    out = dev.put(np.zeros((M, N), np.float32))
    carried_offsets_kernel[(1,)](dev.put(a), dev.put(b), out, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(dev.get(out), ref, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_offsets_carried_per_layout(ptxas, monkeypatch, target):
    # The loop carries `offs_k` once per layout it is read in, each stepped on its own: no
    # conversion through shared memory in the loop.
    from test_compile import assemble

    def compile_(flag):
        monkeypatch.setenv("TILES_CARRY_PER_LAYOUT", flag)
        sig = {"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "out_ptr": "*fp32:16", "M": "i32", "N": "i32", "K": "i32"}
        return tiles.compile(carried_offsets_kernel, signature=sig,
                             constexprs={"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, target=target, num_warps=4)

    def loop(k):
        tir = k.asm["tir_opt"]
        body = tir.split(" = for ", 1)[1].split("yield", 1)[0]
        return sum("convert_layout" in line and ": <32xi32" in line for line in body.splitlines())

    off, on = compile_("0"), compile_("1")
    assert loop(off) >= 2 and loop(on) == 0, (loop(off), loop(on))
    assert on.asm["ptx"].count("bar.sync") < off.asm["ptx"].count("bar.sync")
    assemble(ptxas, on.asm["ptx"], target)


@tiles.jit
def stored_offsets_kernel(out_ptr, n, B: tl.constexpr):
    # A carried tile that a store reads as it is: `carry_per_layout` leaves it alone.
    offs = tl.arange(0, B)
    for i in range(0, n):
        tl.store(out_ptr + i * B + tl.arange(0, B), offs)
        offs += B


def test_carried_tile_stored_in_the_loop(dev):
    out = dev.put(np.zeros((5, 64), np.int32))
    stored_offsets_kernel[(1,)](out, 5, B=64)
    np.testing.assert_array_equal(dev.get(out), np.arange(5 * 64, dtype=np.int32).reshape(5, 64))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_carried_tile_stored_in_the_loop_assembles(ptxas, target):
    from test_compile import assemble

    k = tiles.compile(stored_offsets_kernel, signature={"out_ptr": "*i32:16", "n": "i32"}, constexprs={"B": 64},
                      target=target, num_warps=4)
    assemble(ptxas, k.asm["ptx"], target)


def _latent_attention():
    """`bench_latent_attention.py`'s kernel: attention with a 512-wide head (multi-head latent
    attention's). On 8 warps its 32-row `q` is split over 2 warps along M and repeated over
    the other 4, 128 registers a thread in the `mma.sync` operand layout for the whole loop; it
    is read from shared memory instead."""
    global _LATENT
    if _LATENT is None:
        import os
        import sys

        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
        import bench_latent_attention

        _LATENT = bench_latent_attention.load("tiles").wide_attention
    return _LATENT


_LATENT = None
_LATENT_SIG = {"q_ptr": "*fp16:16", "k_ptr": "*fp16:16", "v_ptr": "*fp16:16", "out_ptr": "*fp16:16", "n_kv": "i32",
               "scale": "fp32"}


@pytest.mark.parametrize("persistent", ["0", "1"])
def test_wide_loop_invariant_operand(dev, rng, monkeypatch, persistent):
    monkeypatch.setenv("TILES_PERSISTENT_MMA_OPERANDS", persistent)
    kernel = _latent_attention()
    kernel.device_caches[0][0].clear()  # the switch is not in the in-memory key
    M, N, D = 64, 150, 512  # N not a multiple of BLOCK_N: the masks matter
    q = random(rng, (M, D), "float16", -1, 1)
    k = random(rng, (N, D), "float16", -1, 1)
    v = random(rng, (N, D), "float16", -1, 1)
    out = dev.put(np.zeros((M, D), np.float16))
    scale = 1 / np.sqrt(D)
    kernel[(M // 32,)](dev.put(q), dev.put(k), dev.put(v), out, N, scale, BLOCK_M=32, BLOCK_N=64, D=D, num_warps=8,
                       num_stages=1)
    s = q.astype(np.float64) @ k.astype(np.float64).T * scale
    p = np.exp(s - s.max(1, keepdims=True))
    ref = (p / p.sum(1, keepdims=True)) @ v.astype(np.float64)
    np.testing.assert_allclose(dev.get(out), ref, rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_wide_loop_invariant_operand_in_shared_memory(ptxas, monkeypatch, target):
    # `q` is staged once before the loop and read back with ldmatrix at each of its dots:
    # it no longer holds 128 registers a thread, and the kernel (nearly) stops spilling.
    from test_compile import assemble

    def compile_(flag):
        monkeypatch.setenv("TILES_PERSISTENT_MMA_OPERANDS", flag)
        return tiles.compile(_latent_attention(), signature=_LATENT_SIG,
                             constexprs={"BLOCK_M": 32, "BLOCK_N": 64, "D": 512}, target=target, num_warps=8,
                             num_stages=1)

    def spilled(report):
        return sum(int(w) for w in re.findall(r"(\d+) bytes spill stores", report))

    off, on = compile_("0"), compile_("1")
    assert on.asm["ptx"].count("ldmatrix") > off.asm["ptx"].count("ldmatrix")
    spilled_off = spilled(assemble(ptxas, off.asm["ptx"], target))
    spilled_on = spilled(assemble(ptxas, on.asm["ptx"], target))
    assert spilled_on * 4 < spilled_off, (spilled_on, spilled_off)


@tiles.jit
def invariant_weights_kernel(x_ptr, w_ptr, out_ptr, n_rows, BLOCK_M: tl.constexpr, K: tl.constexpr,
                             N: tl.constexpr):
    # A loop-invariant `b`: the weights, 512 x 64, are read by the dot of every step; on warps
    # [1, 4] each thread would hold 128 registers of them for the whole loop.
    rk = tl.arange(0, K)
    rn = tl.arange(0, N)
    w = tl.load(w_ptr + rk[:, None] * N + rn[None, :])
    for m0 in range(0, n_rows, BLOCK_M):
        rm = m0 + tl.arange(0, BLOCK_M)
        x = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=rm[:, None] < n_rows, other=0.0)
        y = tl.dot(x, w)
        tl.store(out_ptr + rm[:, None] * N + rn[None, :], y, mask=rm[:, None] < n_rows)


@pytest.mark.parametrize("persistent", ["0", "1"])
def test_loop_invariant_b_operand(dev, rng, monkeypatch, persistent):
    monkeypatch.setenv("TILES_PERSISTENT_MMA_OPERANDS", persistent)
    invariant_weights_kernel.device_caches[0][0].clear()  # the switch is not in the in-memory key
    rows, K, N = 70, 512, 64  # rows not a multiple of BLOCK_M: the last step is masked
    x = random(rng, (rows, K), "float16", -1, 1)
    w = random(rng, (K, N), "float16", -1, 1)
    out = dev.put(np.zeros((rows, N), np.float32))
    invariant_weights_kernel[(1,)](dev.put(x), dev.put(w), out, rows, BLOCK_M=16, K=K, N=N, num_warps=4,
                                   num_stages=1)
    np.testing.assert_allclose(dev.get(out), x.astype(np.float64) @ w.astype(np.float64), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_loop_invariant_b_operand_in_shared_memory(ptxas, monkeypatch, target):
    # The weights are staged once before the loop and read with ldmatrix at each step.
    from test_compile import assemble

    def compile_(flag):
        monkeypatch.setenv("TILES_PERSISTENT_MMA_OPERANDS", flag)
        sig = {"x_ptr": "*fp16:16", "w_ptr": "*fp16:16", "out_ptr": "*fp32:16", "n_rows": "i32"}
        return tiles.compile(invariant_weights_kernel, signature=sig, constexprs={"BLOCK_M": 16, "K": 512, "N": 64},
                             target=target, num_warps=4, num_stages=1)

    off, on = compile_("0"), compile_("1")
    assert on.asm["ptx"].count("ldmatrix") > off.asm["ptx"].count("ldmatrix")
    registers = lambda report: int(re.search(r"Used (\d+) registers", report).group(1))  # noqa: E731
    assert registers(assemble(ptxas, on.asm["ptx"], target)) < registers(assemble(ptxas, off.asm["ptx"], target))


def test_loop_invariant_operand_too_large_to_stage(monkeypatch):
    # 1024x64 weights take 128 KiB: more than a staged operand may take (the rings and scratch
    # need shared memory too), so they stay in registers, as with the switch off.
    def ptx(flag):
        monkeypatch.setenv("TILES_PERSISTENT_MMA_OPERANDS", flag)
        sig = {"x_ptr": "*fp16:16", "w_ptr": "*fp16:16", "out_ptr": "*fp32:16", "n_rows": "i32"}
        return tiles.compile(invariant_weights_kernel, signature=sig, constexprs={"BLOCK_M": 16, "K": 1024, "N": 64},
                             target="sm_80", num_warps=4, num_stages=1).asm["ptx"]

    assert ptx("1") == ptx("0")


@tiles.jit
def transposed_operand_kernel(a_ptr, b_ptr, out_ptr, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                              BLOCK_K: tl.constexpr, TRANS: tl.constexpr):
    # `b` as attention's `tl.trans(k)` (an N x K tile, transposed), or loaded K x N as it is.
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
        if TRANS:
            b = tl.trans(tl.load(b_ptr + rn[:, None] * K + (k0 + rk)[None, :]))
        else:
            b = tl.load(b_ptr + (k0 + rk)[:, None] * BLOCK_N + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(out_ptr + rm[:, None] * BLOCK_N + rn[None, :], acc)


@pytest.mark.parametrize("trans", [False, True])
def test_transposed_operand_unpipelined(dev, rng, trans):
    M, N, K = 64, 64, 96
    a = random(rng, (M, K), "float16", -1, 1)
    b = random(rng, (K, N), "float16", -1, 1)
    out = dev.put(np.zeros((M, N), np.float32))
    stored = np.ascontiguousarray(b.T) if trans else b
    transposed_operand_kernel[(1,)](dev.put(a), dev.put(stored), out, K, BLOCK_M=M, BLOCK_N=N, BLOCK_K=32, TRANS=trans,
                                    num_stages=1)
    np.testing.assert_allclose(dev.get(out), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_transposed_operand_read_with_ldmatrix(ptxas, target):
    # Without a pipeline ring, `tl.trans(b)` is staged as loaded and the mma.sync dot reads it
    # through a transposed view with ldmatrix, as it reads a `b` loaded K x N: no shared
    # memory round trip into registers first (which cost attention with a 512-wide head 1.9x).
    from test_compile import assemble

    def ptx(trans):
        sig = {"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "out_ptr": "*fp32:16", "K": "i32:16"}
        k = tiles.compile(transposed_operand_kernel, signature=sig,
                          constexprs={"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "TRANS": trans}, target=target,
                          num_warps=4, num_stages=1)
        assemble(ptxas, k.asm["ptx"], target)
        return k.asm["ptx"]

    plain, transposed = ptx(False), ptx(True)
    shared_loads = lambda p: len(re.findall(r"\bld\.shared", p))  # noqa: E731 -- ldmatrix aside
    assert "ldmatrix" in transposed
    assert shared_loads(transposed) <= shared_loads(plain), (shared_loads(transposed), shared_loads(plain))


@tiles.jit
def gathered_transposed_a_kernel(d_ptr, x_ptr, rows_ptr, out_ptr, M, BLOCK_M: tl.constexpr,
                                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # A MoE weight gradient's shape: out = d[rows].T @ x[rows], over blocks of gathered rows,
    # the loads under an `if` (no ring takes them); `a` is the transpose of a loaded tile.
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_N, BLOCK_K), tl.float32)
    for m0 in range(0, M, BLOCK_M):
        left = tl.minimum(BLOCK_M, M - m0)
        if left > 0:
            rm = m0 + tl.arange(0, BLOCK_M)
            rows = tl.load(rows_ptr + rm, mask=rm < M, other=0)
            d = tl.load(d_ptr + rows[:, None] * BLOCK_N + rn[None, :], mask=(rm < M)[:, None])
            x = tl.load(x_ptr + rm[:, None] * BLOCK_K + rk[None, :], mask=(rm < M)[:, None])
            acc += tl.dot(d.T, x)
    tl.store(out_ptr + rn[:, None] * BLOCK_K + rk[None, :], acc)


def test_transposed_warpgroup_a_from_gathered_rows(dev, rng):
    M, N, K = 200, 128, 64
    d = random(rng, (M, N), "float16", -1, 1)
    x = random(rng, (M, K), "float16", -1, 1)
    rows = rng.permutation(M).astype(np.int32)
    out = dev.put(np.full((N, K), np.nan, np.float32))
    gathered_transposed_a_kernel[(1,)](dev.put(d), dev.put(x), dev.put(rows), out, M, BLOCK_M=64, BLOCK_N=N,
                                       BLOCK_K=K)
    ref = d[rows].astype(np.float64).T @ x.astype(np.float64)
    np.testing.assert_allclose(dev.get(out), ref, rtol=1e-3, atol=1e-3)


def test_transposed_warpgroup_a_is_read_through_a_view(ptxas):
    # wgmma reads `d.T` from the tile staged as loaded, through an MN-major descriptor: no
    # shared memory round trip into registers (64 scalar 16-bit loads a thread before).
    from test_compile import assemble

    sig = {"d_ptr": "*fp16:16", "x_ptr": "*fp16:16", "rows_ptr": "*i32:16", "out_ptr": "*fp32:16", "M": "i32"}
    k = tiles.compile(gathered_transposed_a_kernel, signature=sig, target="sm_90a", num_warps=4,
                      constexprs={"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64})
    ptx = k.asm["ptx"]
    assert "wgmma.mma_async" in ptx and "ld.shared.b16" not in ptx
    # Both operands from shared memory; `a` (M-contiguous) takes the transpose flag.
    assert re.search(r"wgmma\.mma_async[^;]*%rd\d+, %rd\d+, p, 1, 1, 1, [01];", ptx), ptx[ptx.find("wgmma.mma"):][:300]
    assemble(ptxas, ptx, "sm_90a")


@tiles.jit
def vector_scaled_operands_kernel(a_ptr, b_ptr, sk_ptr, sn_ptr, out_ptr, K, BLOCK_M: tl.constexpr,
                                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # `b` scaled by a vector along K (a column, `[:, None]`) and one along N (a row,
    # `[None, :]`), each loaded as a vector every step: both go through cp.async rings.
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
        b = tl.load(b_ptr + (k0 + rk)[:, None] * BLOCK_N + rn[None, :])
        sk = tl.load(sk_ptr + k0 + rk)[:, None]
        sn = tl.load(sn_ptr + (k0 // BLOCK_K) * BLOCK_N + rn)[None, :]
        acc = tl.dot(a, (b.to(tl.float32) * sk * sn).to(tl.float16), acc)
    tl.store(out_ptr + rm[:, None] * BLOCK_N + rn[None, :], acc)


def test_vector_scaled_operands(dev, rng):
    M, N, K, BK = 32, 32, 128, 32
    a = random(rng, (M, K), "float16", -1, 1)
    b = rng.integers(-8, 8, (K, N)).astype(np.int8)
    sk = random(rng, (K,), "float32", 0.5, 1.5)
    sn = random(rng, (K // BK, N), "float32", 0.5, 1.5)
    out = dev.put(np.zeros((M, N), np.float32))
    vector_scaled_operands_kernel[(1,)](dev.put(a), dev.put(b), dev.put(sk), dev.put(sn), out, K, BLOCK_M=M,
                                        BLOCK_N=N, BLOCK_K=BK)
    w = (b.astype(np.float32) * sk[:, None] * np.repeat(sn, BK, axis=0)).astype(np.float16)
    ref = a.astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(dev.get(out), ref, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_vector_scales_take_rings(ptxas, target):
    from test_compile import assemble

    sig = {"a_ptr": "*fp16:16", "b_ptr": "*i8:16", "sk_ptr": "*fp32:16", "sn_ptr": "*fp32:16", "out_ptr": "*fp32:16",
           "K": "i32:16"}
    k = tiles.compile(vector_scaled_operands_kernel, signature=sig,
                      constexprs={"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, target=target, num_warps=4)
    reads = [line for line in k.asm["tir_opt"].splitlines() if "local_load" in line]
    assert any("<32x1xfp32" in r for r in reads) and any("<1x32xfp32" in r for r in reads), reads
    assemble(ptxas, k.asm["ptx"], target)


@pytest.mark.parametrize("act", ["none", "leaky_relu"])
def test_dot_epilogue_and_reduction(dev, rng, act):
    M, N, K = 64, 32, 32
    a = random(rng, (M, K), "float16", -1, 1)
    b = random(rng, (K, N), "float16", -1, 1)
    bias = random(rng, (N,), "float32", -1, 1)
    c = np.zeros(M * N + M, np.float32)
    dc = dev.put(c)
    single_dot_kernel[(1,)](dev.put(a), dev.put(b), dev.put(bias), dc, M=M, N=N, K=K, ACT=act)
    out = dev.get(dc)
    ref = (a.astype(np.float64) @ b.astype(np.float64)) * 0.5 + bias[None, :]
    if act == "leaky_relu":
        ref = np.where(ref >= 0, ref, 0.01 * ref)
    assert _rel_err(out[: M * N].reshape(M, N), ref) <= 1e-2
    assert _rel_err(out[M * N:], ref.max(axis=1)) <= 1e-2


@tiles.jit
def small_dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                     OUT: tl.constexpr, PRECISION: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    acc = tl.load(c_ptr + rm[:, None] * N + rn[None, :])
    c = tl.dot(a, b, acc, input_precision=PRECISION, out_dtype=OUT)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)


# Dots with a dimension under 16 (Triton's interpreter takes any size, its compiler M and N of
# 1): (M, N, K, operand dtype, accumulator dtype).
SMALL_DOTS = [(1, 32, 32, "float16", "float32"), (32, 2, 32, "float32", "float32"), (8, 8, 32, "float16", "float16"),
              (16, 16, 8, "float32", "float32"), (4, 16, 16, "int8", "int32"), (2, 4, 64, "float64", "float64")]


@pytest.mark.parametrize("M,N,K,dt,acc", SMALL_DOTS)
def test_small_dots(dev, rng, M, N, K, dt, acc):
    a = random(rng, (M, K), dt, -1, 1) if dt != "int8" else random(rng, (M, K), dt)
    b = random(rng, (K, N), dt, -1, 1) if dt != "int8" else random(rng, (K, N), dt)
    c0 = random(rng, (M, N), acc, -1, 1) if acc != "int32" else random(rng, (M, N), "int8").astype(np.int32)
    dc = dev.put(c0)
    small_dot_kernel[(1,)](dev.put(a), dev.put(b), dc, M=M, N=N, K=K, OUT=TL[acc],
                           PRECISION="ieee" if dt == "float64" else "tf32")
    out = dev.get(dc)
    ref = a.astype(np.float64) @ b.astype(np.float64) + c0.astype(np.float64)
    if acc == "int32":
        np.testing.assert_array_equal(out, ref.astype(np.int32))
    else:
        assert _rel_err(out, ref) <= (2e-3 if acc == "float16" else 1e-6)


@pytest.mark.parametrize("M,N,K,dt,acc", SMALL_DOTS)
def test_small_dot_ptx_is_accepted(ptxas, M, N, K, dt, acc):
    from test_compile import assemble

    k = tiles.compile(small_dot_kernel, signature={"a_ptr": PTR[dt], "b_ptr": PTR[dt], "c_ptr": PTR[acc]},
                      constexprs={"M": M, "N": N, "K": K, "OUT": TL[acc], "PRECISION": "tf32"}, target="sm_90a")
    assemble(ptxas, k.asm["ptx"], "sm_90a")


@tiles.jit
def bad_dot_kernel(a_ptr, b_ptr, KIND: tl.constexpr):
    r16 = tl.arange(0, 16)
    a = tl.load(a_ptr + r16[:, None] * 16 + r16[None, :])
    b = tl.load(b_ptr + r16[:, None] * 16 + r16[None, :]).to(tl.float32)
    c = tl.dot(a, b)
    tl.store(a_ptr + r16, tl.sum(c, axis=1).to(tl.float16))


@pytest.mark.parametrize("kind,message", [("mixed", "one dtype")])
def test_dot_errors_are_clear(kind, message):
    with pytest.raises(tiles.CompilationError) as e:
        tiles.compile(bad_dot_kernel, signature={"a_ptr": "*fp16", "b_ptr": "*fp16"}, constexprs={"KIND": kind})
    assert message in str(e.value)
    assert "c = tl.dot(a, b)" in str(e.value)


SIG = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
       "stride_am": "i32", "stride_ak": "i32", "stride_bk": "i32", "stride_bn": "i32", "stride_cm": "i32",
       "stride_cn": "i32"}
PTR = {"float16": "*fp16", "bfloat16": "*bf16", "float32": "*fp32", "float64": "*fp64", "int8": "*i8",
       "int32": "*i32"}


@pytest.mark.parametrize("dt,acc,out_dt,precision,bound", CASES, ids=[f"{c[0]}-{c[1]}-{c[3]}" for c in CASES])
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_dot_ptx_is_accepted(ptxas, dt, acc, out_dt, precision, bound, target):
    from test_compile import assemble

    sig = dict(SIG, a_ptr=PTR[dt], b_ptr=PTR[dt], c_ptr=PTR[out_dt], stride_am="i32:16", stride_bk="i32:16",
               stride_cm="i32:16", K="i32:16")
    k = tiles.compile(matmul_kernel, signature=sig,
                      constexprs={"BLOCK_M": 32 if dt == "float64" else 64, "BLOCK_N": 64, "BLOCK_K": 32,
                                  "ACC": TL[acc], "PRECISION": precision, "FORM": "acc", "STAGES": 3},
                      specialization={"a_ptr": 16, "b_ptr": 16, "c_ptr": 16},
                      equal_to_1=("stride_ak", "stride_bn", "stride_cn"), target=target, num_warps=4)
    ptx = k.asm["ptx"]
    # fp64 runs on tensor cores too (mma.sync f64), fp32 "ieee" on CUDA cores.
    tensor_cores = dt == "float64" or precision != "ieee"
    # On sm_90a 16-bit dots run on warpgroups (wgmma, operands read from shared memory through
    # descriptors); elsewhere on mma.sync with operands read by ldmatrix (here `a` is
    # K-contiguous, which ldmatrix serves for every type).
    # fp32 as split bf16 terms runs bf16 dots on operands converted in registers.
    split = precision in ("bf16x3", "bf16x6")
    warpgroup = tensor_cores and target == "sm_90a" and (dt in ("float16", "bfloat16") or split)
    assert ("wgmma.mma_async.sync.aligned.m64n64k16" in ptx) == warpgroup
    assert ("mma.sync.aligned" in ptx) == (tensor_cores and not warpgroup)
    # (ldmatrix moves 16-bit pairs; fp64 fragments are read element by element.)
    assert ("ldmatrix.sync.aligned" in ptx) == (tensor_cores and not warpgroup and not split and dt != "float64")
    # On sm_90 a 16-bit result leaves its tensor-core fragments through shared memory as whole
    # 8x8 matrices (stmatrix), four to an instruction, on its way to coalesced stores.
    fragments = tensor_cores and out_dt in ("float16", "bfloat16") and dt != "float64"
    assert ("stmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx) == (fragments and target == "sm_90a")
    if dt == "float64":
        shape = "m16n8k8" if target == "sm_90a" else "m8n8k4"
        assert f"mma.sync.aligned.{shape}.row.col.f64.f64.f64.f64" in ptx
    # Dot operands are pipelined through shared memory with cp.async (3 stages), on tensor
    # cores or not; the split bf16 dots' fp32 operands too, read back into registers to be split.
    assert "cp.async.cg.shared.global" in ptx
    # Tiles landed by cp.async are read by wgmma after the wait and a barrier, with no proxy
    # fence; tiles stored from registers (an operand staged by the dot) get one.
    for part in ptx.split("cp.async.wait_group")[1:]:
        assert "fence.proxy" not in part.split("bar.sync")[0]
    if warpgroup and "st.shared" in ptx:
        assert "fence.proxy.async.shared::cta" in ptx
    report = assemble(ptxas, ptx, target)
    assert "0 bytes spill stores" in report, report


@tiles.jit
def int8_k16_kernel(a_ptr, b_ptr, c_ptr):
    r = tl.arange(0, 16)
    r32 = tl.arange(0, 32)
    a = tl.load(a_ptr + r32[:, None] * 16 + r[None, :])
    b = tl.load(b_ptr + r[:, None] * 32 + r32[None, :])
    tl.store(c_ptr + r32[:, None] * 32 + r32[None, :], tl.dot(a, b))


def test_dot_int8_with_k16_is_exact(dev, rng):
    a = random(rng, (32, 16), "int8")
    b = random(rng, (16, 32), "int8")
    c = dev.put(np.zeros((32, 32), np.int32))
    int8_k16_kernel[(1,)](dev.put(a), dev.put(b), c)
    np.testing.assert_array_equal(dev.get(c), a.astype(np.int32) @ b.astype(np.int32))


@pytest.mark.parametrize("dt,config", [("fp16", (128, 256, 64, 8, 3)), ("bf16", (128, 256, 64, 8, 3)),
                                       ("fp32", (128, 128, 32, 8, 3))])
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_benchmark_configs_have_no_spills(ptxas, dt, config, target):
    # The matmul benchmark's kernel and configurations, specialised as a launch on contiguous
    # 4096x4096 matrices specialises them: zero spills, pipelined, shared memory > 48 KB.
    import os
    import sys

    from test_compile import assemble

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import bench_matmul

    bm, bn, bk, warps, stages = config
    p = f"*{dt}:16"
    sig = {"a_ptr": p, "b_ptr": p, "c_ptr": p, "M": "i32:16", "N": "i32:16", "K": "i32:16", "stride_am": "i32:16",
           "stride_ak": "i32", "stride_bk": "i32:16", "stride_bn": "i32", "stride_cm": "i32:16", "stride_cn": "i32"}
    k = tiles.compile(bench_matmul.load("tiles").matmul_kernel, signature=sig,
                      constexprs={"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8},
                      equal_to_1=("stride_ak", "stride_bn", "stride_cn"), target=target, num_warps=warps,
                      num_stages=stages)
    ptx = k.asm["ptx"]
    assert "cp.async.cg.shared.global" in ptx
    if target == "sm_90a" and dt != "fp32":
        # One warpgroup instruction per 64 rows, K step of 16 and 256 columns.
        assert ptx.count("wgmma.mma_async.sync.aligned.m64n256k16") == 4 and "ldmatrix" not in ptx
    else:
        assert "ldmatrix" in ptx and "mma.sync.aligned" in ptx
    assert k.metadata.shared > 48 * 1024
    report = assemble(ptxas, ptx, target)
    assert "0 bytes spill stores" in report, report


@tiles.jit
def attention_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq_len, sm_scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, K_T: tl.constexpr = False):
    # Online-softmax attention for one head: two dots per step, the softmax on the first's
    # #mma result, the probabilities fed to the second dot from registers.
    start_m = tl.program_id(0)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :], mask=offs_m[:, None] < seq_len, other=0.0)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    for start_n in range(0, seq_len, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        if K_T:
            # As Triton's tutorial writes it: k loaded row-major and transposed with `.T` (the
            # pipeline then reads its ring slot transposed).
            k = tl.load(k_ptr + offs_n[:, None] * D + offs_d[None, :], mask=offs_n[:, None] < seq_len, other=0.0)
            qk = tl.dot(q, k.T) * sm_scale
        else:
            kt = tl.load(k_ptr + offs_n[None, :] * D + offs_d[:, None], mask=offs_n[None, :] < seq_len, other=0.0)
            qk = tl.dot(q, kt) * sm_scale
        qk = tl.where(offs_n[None, :] < seq_len, qk, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + offs_n[:, None] * D + offs_d[None, :], mask=offs_n[:, None] < seq_len, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + offs_m[:, None] * D + offs_d[None, :], out.to(tl.float16), mask=offs_m[:, None] < seq_len)


def _check_attention(dev, rng, seq_len, **launch):
    D = 64
    q, k, v = (random(rng, (seq_len, D), "float16", -1, 1) for _ in range(3))
    o = dev.put(np.zeros((seq_len, D), np.float16))
    scale = 1.0 / np.sqrt(D)
    attention_fwd_kernel[(triton_cdiv(seq_len, 64),)](dev.put(q), dev.put(k), dev.put(v), o, seq_len, scale, D=D,
                                                       BLOCK_M=64, BLOCK_N=64, **launch)
    s = (q.astype(np.float64) @ k.astype(np.float64).T) * scale
    p = np.exp(s - s.max(1, keepdims=True))
    ref = (p / p.sum(1, keepdims=True)) @ v.astype(np.float64)
    assert _rel_err(dev.get(o), ref) < 1e-2


@pytest.mark.parametrize("seq_len", [128, 200])
def test_attention_forward_two_dots(dev, rng, seq_len):
    _check_attention(dev, rng, seq_len)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_attention_forward_assembles_without_spills(ptxas, target):
    from test_compile import assemble

    sig = {"q_ptr": "*fp16:16", "k_ptr": "*fp16:16", "v_ptr": "*fp16:16", "o_ptr": "*fp16:16", "seq_len": "i32:16",
           "sm_scale": "fp32"}
    k = tiles.compile(attention_fwd_kernel, signature=sig, constexprs={"D": 64, "BLOCK_M": 64, "BLOCK_N": 64},
                      target=target, num_warps=4)
    assert k.asm["ptx"].count("wgmma.mma_async" if target == "sm_90a" else "mma.sync.aligned") > 0
    report = assemble(ptxas, k.asm["ptx"], target)
    assert "0 bytes spill stores" in report, report


@pytest.mark.parametrize("causal", [False, True])
def test_attention_second_dot_stays_in_flight(ptxas, causal):
    # The probabilities-times-values dot is left running into the next iteration (as Triton's
    # pipeliner leaves it): one `wgmma.wait_group 1` after it, a barrier before the ring refills,
    # and ptxas keeps the instructions asynchronous (no serialisation report, no spills).
    from test_compile import assemble

    if causal:
        fn, n = causal_attention_kernel, "n_ctx"
        scale = "qk_scale"
    else:
        fn, n = attention_fwd_kernel, "seq_len"
        scale = "sm_scale"
    sig = {"q_ptr": "*fp16:16", "k_ptr": "*fp16:16", "v_ptr": "*fp16:16", "o_ptr": "*fp16:16", n: "i32:16",
           scale: "fp32"}
    ptx = tiles.compile(fn, signature=sig, constexprs={"D": 64, "BLOCK_M": 128, "BLOCK_N": 64}, target="sm_90a",
                        num_warps=8, num_stages=3).asm["ptx"]
    loop = ptx[ptx.index("wgmma.fence"):]
    assert loop.count("wgmma.wait_group.sync.aligned 1;") == 1
    after = loop[loop.index("wgmma.wait_group.sync.aligned 1;"):]
    assert after.index("bar.sync") < after.index("cp.async.cg.shared.global")
    report = assemble(ptxas, ptx, "sm_90a")
    assert "serialized" not in report and "0 bytes spill stores" in report, report


def test_attention_ptx_is_the_same_in_every_process():
    # The wgmma path once ordered register fragments by a HashMap's iteration, so the PTX (and
    # what a user debugs) changed from process to process. Compile-only, three fresh processes.
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    code = ("import sys, hashlib; sys.path.insert(0, %r); import test_dot, tiles; "
            "sig = {'q_ptr': '*fp16:16', 'k_ptr': '*fp16:16', 'v_ptr': '*fp16:16', 'o_ptr': '*fp16:16', "
            "'seq_len': 'i32:16', 'sm_scale': 'fp32'}; "
            "k = tiles.compile(test_dot.attention_fwd_kernel, signature=sig, "
            "constexprs={'D': 64, 'BLOCK_M': 128, 'BLOCK_N': 64}, target='sm_90a', num_warps=8); "
            "print(hashlib.sha1(k.asm['ptx'].encode()).hexdigest())") % here
    env = dict(os.environ, TILES_CACHE="0")
    digests = {subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              check=True).stdout.strip() for _ in range(3)}
    assert len(digests) == 1, digests


@tiles.jit
def dot_in_while_kernel(a_ptr, c_ptr, n):
    r = tl.arange(0, 16)
    a = tl.load(a_ptr + r[:, None] * 16 + r[None, :])
    acc = tl.zeros((16, 16), dtype=tl.float32)
    i = 0
    while i < n:
        acc = tl.dot(a, a, acc)
        i += 1
    tl.store(c_ptr + r[:, None] * 16 + r[None, :], acc)


def test_dot_inside_a_while_loop(dev, rng):
    a = random(rng, (16, 16), "float16", -1, 1)
    c = dev.put(np.zeros((16, 16), np.float32))
    dot_in_while_kernel[(1,)](dev.put(a), c, 3)
    af = a.astype(np.float64)
    assert _rel_err(dev.get(c), 3 * (af @ af)) < 1e-2


@pytest.mark.parametrize("seq_len", [128, 200])
def test_attention_with_transposed_k(dev, rng, seq_len):
    _check_attention(dev, rng, seq_len, K_T=True, num_stages=3)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_transposed_operand_is_pipelined(ptxas, target):
    from test_compile import assemble

    sig = {"q_ptr": "*fp16:16", "k_ptr": "*fp16:16", "v_ptr": "*fp16:16", "o_ptr": "*fp16:16", "seq_len": "i32:16",
           "sm_scale": "fp32"}
    k = tiles.compile(attention_fwd_kernel, signature=sig,
                      constexprs={"D": 64, "BLOCK_M": 64, "BLOCK_N": 64, "K_T": True}, target=target, num_warps=4,
                      num_stages=3)
    ir = k.asm["tir_opt"]
    slots = 3 if target == "sm_90a" else 2  # a wgmma reads its slot in place, mma.sync into registers
    assert f"local_view {{buf = 0, stages = {slots}, trans}}" in ir and "permute" not in ir.split(" for ")[1]
    assert tiles._tiles.parse_ir(ir).text() == ir
    report = assemble(ptxas, k.asm["ptx"], target)
    assert "0 bytes spill stores" in report, report


@tiles.jit
def causal_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, n_ctx, qk_scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                            BLOCK_N: tl.constexpr):
    # Causal masking in a branch inside the loop, as Triton's tutorial does: the probabilities
    # computed after the branch feed the second dot from registers (wgmma's register form
    # needs them written before its fence; a regression test for exactly that).
    start_m = tl.program_id(0)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :])
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    causal_start = start_m * BLOCK_M
    for start_n in range(0, n_ctx, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        kt = tl.load(k_ptr + (start_n + offs_n)[None, :] * D + offs_d[:, None])
        qk = tl.dot(q, kt)
        if start_n >= causal_start:
            mask = offs_m[:, None] >= (start_n + offs_n[None, :])
            qk = qk * qk_scale + tl.where(mask, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + (start_n + offs_n)[:, None] * D + offs_d[None, :])
        acc = tl.dot(p.to(tl.float16), v, acc * alpha[:, None])
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(o_ptr + offs_m[:, None] * D + offs_d[None, :], acc.to(tl.float16))


@pytest.mark.parametrize("stages", [1, 3])
def test_causal_attention_branch_in_loop(dev, rng, stages):
    n, D = 256, 64
    q, k, v = (random(rng, (n, D), "float16", -1, 1) for _ in range(3))
    o = dev.put(np.full((n, D), np.nan, np.float16))
    causal_attention_kernel[(n // 64,)](dev.put(q), dev.put(k), dev.put(v), o, n, 0.125 * 1.44269504, D=D,
                                         BLOCK_M=64, BLOCK_N=64, num_stages=stages)
    s = (q.astype(np.float64) @ k.astype(np.float64).T) * 0.125
    s = np.where(np.tril(np.ones((n, n))) > 0, s, -np.inf)
    p = np.exp(s - s.max(1, keepdims=True))
    ref = (p / p.sum(1, keepdims=True)) @ v.astype(np.float64)
    assert _rel_err(dev.get(o), ref) < 1e-2


def test_wgmma_register_operands_precede_the_fence():
    # Every instruction writing wgmma's register operands comes before wgmma.fence.
    sig = {"q_ptr": "*fp16:16", "k_ptr": "*fp16:16", "v_ptr": "*fp16:16", "o_ptr": "*fp16:16", "n_ctx": "i32:16",
           "qk_scale": "fp32"}
    ptx = tiles.compile(causal_attention_kernel, signature=sig, constexprs={"D": 64, "BLOCK_M": 64, "BLOCK_N": 64},
                        target="sm_90a", num_warps=4, num_stages=1).asm["ptx"]
    lines = ptx.splitlines()
    for i, line in enumerate(lines):
        if "wgmma.fence" in line:
            j = next(j for j in range(i, len(lines)) if "wgmma.commit_group" in lines[j])
            assert not any("cvt.rn.f16x2" in x for x in lines[i:j]), "a register operand is written after the fence"


@tiles.jit
def dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, dk_ptr, dv_ptr, n_ctx, D: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr):
    # The shape of attention's backward (dK, dV) inner loop: four dots per step, two of them
    # with `a` computed in the step (register form on Hopper), two with loop-invariant `a`.
    start_n = tl.program_id(0) * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    k = tl.load(k_ptr + offs_n[:, None] * D + offs_d[None, :])
    v = tl.load(v_ptr + offs_n[:, None] * D + offs_d[None, :])
    dk = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    for start_m in range(0, n_ctx, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        qT = tl.load(q_ptr + offs_m[None, :] * D + offs_d[:, None])
        do = tl.load(do_ptr + offs_m[:, None] * D + offs_d[None, :])
        qkT = tl.dot(k, qT)
        pT = tl.math.exp2(qkT * 0.1)
        if start_m >= start_n:
            pT = tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)
        dv += tl.dot(pT.to(tl.float16), do)
        dpT = tl.dot(v, tl.trans(do))
        dsT = pT * dpT * 0.01
        dk += tl.dot(dsT.to(tl.float16), tl.trans(qT))
    tl.store(dk_ptr + offs_n[:, None] * D + offs_d[None, :], dk)
    tl.store(dv_ptr + offs_n[:, None] * D + offs_d[None, :], dv)


def test_four_dot_backward_loop(dev, rng):
    n, D = 256, 64
    q, k, v, do = (random(rng, (n, D), "float16", -1, 1) for _ in range(4))
    dk = dev.put(np.full((n, D), np.nan, np.float32))
    dv = dev.put(np.full((n, D), np.nan, np.float32))
    dkdv_kernel[(n // 64,)](dev.put(q), dev.put(k), dev.put(v), dev.put(do), dk, dv, n, D=D, BLOCK_M=64,
                            BLOCK_N=64, num_warps=4)
    f = lambda x: x.astype(np.float64)  # noqa: E731
    pT = np.exp2((f(k) @ f(q).T) * 0.1)
    rows, cols = np.arange(n)[:, None], np.arange(n)[None, :]
    masked = (cols // 64 >= rows // 64) & (cols < rows)  # the branch masks blocks at or after the diagonal
    pT = np.where(masked, 0.0, pT)
    pT16 = pT.astype(np.float16).astype(np.float64)
    ref_dv = pT16 @ f(do)
    dsT = pT * (f(v) @ f(do).T) * 0.01
    ref_dk = dsT.astype(np.float16).astype(np.float64) @ f(q)
    assert _rel_err(dev.get(dv), ref_dv) < 1e-2
    assert _rel_err(dev.get(dk), ref_dk) < 1e-2


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_backward_loop_pipelines_operands_read_both_ways(ptxas, target):
    # `qT` and `do` each feed one dot as loaded and another transposed: both become cp.async
    # rings, read through a plain and a transposed view of the same slot.
    from test_compile import assemble

    sig = {"q_ptr": "*fp16:16", "k_ptr": "*fp16:16", "v_ptr": "*fp16:16", "do_ptr": "*fp16:16",
           "dk_ptr": "*fp32:16", "dv_ptr": "*fp32:16", "n_ctx": "i32:16"}
    k = tiles.compile(dkdv_kernel, signature=sig, constexprs={"D": 64, "BLOCK_M": 64, "BLOCK_N": 64}, target=target,
                      num_warps=4, num_stages=3)
    ir = k.asm["tir_opt"]
    loop = ir.split(" for ")[1]
    assert loop.count("async_copy") == 2 and " load " not in loop.split("yield")[0].replace("local_view", "")
    slots = 3 if target == "sm_90a" else 2
    for buf in (0, 1):
        assert f"local_view {{buf = {buf}, stages = {slots}}}" in loop
        assert f"local_view {{buf = {buf}, stages = {slots}, trans}}" in loop
    if target == "sm_90a":
        # The two accumulating dots with computed `a` stay in flight: `dv`'s until the next
        # dot's wait, `dk`'s into the next iteration; one barrier before the ring refills.
        ptx = k.asm["ptx"]
        assert ptx.count("wgmma.wait_group.sync.aligned 1;") == 2
    report = assemble(ptxas, k.asm["ptx"], target)
    assert "0 bytes spill stores" in report, report


@tiles.jit
def gram_kernel(x_ptr, g_ptr, K, N: tl.constexpr, BK: tl.constexpr):
    # One loaded tile is both operands of a dot, `a` as loaded and `b` transposed: one ring,
    # two views of each slot.
    rn = tl.arange(0, N)
    rk = tl.arange(0, BK)
    acc = tl.zeros((N, N), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(x_ptr + rn[:, None] * K + (k + rk)[None, :])
        acc += tl.dot(x, tl.trans(x))
    tl.store(g_ptr + rn[:, None] * N + rn[None, :], acc)


def test_one_load_as_both_dot_operands(dev, rng):
    n, k = 64, 256
    x = random(rng, (n, k), "float16", -1, 1)
    g = dev.put(np.full((n, n), np.nan, np.float32))
    gram_kernel[(1,)](dev.put(x), g, k, N=n, BK=64, num_stages=3)
    xf = x.astype(np.float64)
    assert _rel_err(dev.get(g), xf @ xf.T) < 1e-2


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_one_load_as_both_dot_operands_is_pipelined(ptxas, target):
    from test_compile import assemble

    k = tiles.compile(gram_kernel, signature={"x_ptr": "*fp16:16", "g_ptr": "*fp32:16", "K": "i32:16"},
                      constexprs={"N": 64, "BK": 64}, target=target, num_warps=4, num_stages=3)
    loop = k.asm["tir_opt"].split(" for ")[1]
    assert loop.count("async_copy") == 1
    slots = 3 if target == "sm_90a" else 2
    assert f"local_view {{buf = 0, stages = {slots}}}" in loop
    assert f"local_view {{buf = 0, stages = {slots}, trans}}" in loop
    assemble(ptxas, k.asm["ptx"], target)


@tiles.jit
def two_phase_kernel(a_ptr, b_ptr, c_ptr, d_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # Two pipelined matmul loops one after the other (a backward-attention kernel's phases):
    # the second loop's buffers reuse the first one's shared memory.
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + offs_m[:, None] * K + (k + offs_k)[None, :])
        b = tl.load(b_ptr + (k + offs_k)[:, None] * BN + offs_n[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc)
    acc2 = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + offs_m[:, None] * K + (k + offs_k)[None, :])
        b = tl.load(b_ptr + (k + offs_k)[:, None] * BN + offs_n[None, :])
        acc2 += tl.dot(a * 2, b)
    tl.store(d_ptr + offs_m[:, None] * BN + offs_n[None, :], acc2)


def test_sequential_loops_share_shared_memory(dev, rng):
    big = dev.mode == "gpu"
    bm, bn, bk, K = (128, 128, 64, 512) if big else (32, 32, 16, 64)
    a = rng.standard_normal((bm, K)).astype(np.float16)
    b = rng.standard_normal((K, bn)).astype(np.float16)
    c, d = dev.put(np.full((bm, bn), np.nan, np.float32)), dev.put(np.full((bm, bn), np.nan, np.float32))
    two_phase_kernel[(1,)](dev.put(a), dev.put(b), c, d, K, BM=bm, BN=bn, BK=bk, num_warps=4, num_stages=4)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(dev.get(c), ref, rtol=2e-2, atol=5e-2)
    np.testing.assert_allclose(dev.get(d), 2 * ref, rtol=2e-2, atol=1e-1)


def test_sequential_loops_share_shared_memory_compile(ptxas):
    from test_compile import assemble

    sig = {"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "c_ptr": "*fp32:16", "d_ptr": "*fp32:16", "K": "i32:16"}
    k = tiles.compile(two_phase_kernel, signature=sig, constexprs=dict(BM=128, BN=128, BK=64), target="sm_90a",
                      num_warps=4, num_stages=4)
    one_phase = 4 * (128 * 64 + 64 * 128) * 2  # four stages of both operands
    assert k.asm["tir_opt"].count("async_copy {buf = 2") >= 1  # the second loop is pipelined too
    # ... in the first loop's memory: both of its rings (`a * 2` reads its slot into registers),
    # placed after the first loop's, would double the total. (The first loop's epilogue converts
    # its accumulator in 64 KiB of scratch past them.)
    assert k.asm["tir_opt"].count("async_copy {buf = 3") >= 1
    assert one_phase <= k.metadata.shared < 2 * one_phase
    assemble(ptxas, k.asm["ptx"], "sm_90a")


@tiles.jit
def scaled_steps_kernel(a_ptr, b_ptr, s_ptr, c_ptr, log_ptr, K, NV, BM: tl.constexpr, BN: tl.constexpr,
                        BK: tl.constexpr, MASKED: tl.constexpr, LOG: tl.constexpr):
    # Each step's product is scaled by that step's row of `s`: a small load in a pipelined
    # loop that no dot reads (it is issued an iteration ahead, unless the loop also stores).
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        if MASKED:
            s = tl.load(s_ptr + k // BK * BN + rn, mask=rn < NV, other=2.0)
        else:
            s = tl.load(s_ptr + k // BK * BN + rn)
        acc += tl.dot(a, b) * s[None, :]
        if LOG:
            tl.store(log_ptr + k // BK * BN + rn, s * 3)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


@pytest.mark.parametrize("steps", [0, 1, 3, 8])
@pytest.mark.parametrize("masked, log", [(False, False), (True, False), (False, True)])
def test_small_load_in_a_pipelined_loop(dev, rng, steps, masked, log):
    BM, BN, BK, nv = 64, 64, 32, 40
    K = steps * BK
    a = random(rng, (BM, max(K, 1)), "float16", -1, 1)
    b = random(rng, (max(K, 1), BN), "float16", -1, 1)
    s = random(rng, (max(steps, 1), BN), "float32", 0.5, 1.5)
    c = dev.put(np.full((BM, BN), np.nan, np.float32))
    lg = dev.put(np.full((max(steps, 1), BN), np.nan, np.float32))
    scaled_steps_kernel[(1,)](dev.put(a), dev.put(b), dev.put(s), c, lg, K, nv, BM=BM, BN=BN, BK=BK,
                              MASKED=masked, LOG=log, num_stages=3)
    f = lambda x: x.astype(np.float64)  # noqa: E731
    sv = f(s).copy()
    if masked:
        sv[:, nv:] = 2.0
    ref = np.zeros((BM, BN))
    for i in range(steps):
        ref += (f(a[:, i * BK:(i + 1) * BK]) @ f(b[i * BK:(i + 1) * BK])) * sv[i][None, :]
    out = dev.get(c)
    if steps == 0:
        assert np.array_equal(out, ref)
    else:
        assert _rel_err(out, ref) < 1e-2
    if log and steps:
        np.testing.assert_allclose(dev.get(lg), sv[:steps] * 3, rtol=1e-6)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("masked, log", [(False, False), (True, False), (False, True)])
def test_small_load_in_a_pipelined_loop_goes_ahead(ptxas, target, masked, log):
    from test_compile import assemble

    sig = {"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "s_ptr": "*fp32:16", "c_ptr": "*fp32:16",
           "log_ptr": "*fp32:16", "K": "i32:16", "NV": "i32"}
    k = tiles.compile(scaled_steps_kernel, signature=sig, target=target, num_warps=4, num_stages=3,
                      constexprs={"BM": 64, "BN": 64, "BK": 32, "MASKED": masked, "LOG": log})
    before, loop = k.asm["tir_opt"].split(" for ", 1)
    body = loop.split("yield")[0]
    # Without a store in the loop: the first step's row is loaded before the loop and the next
    # step's at the end of the body, masked off past the end; with one, where it was.
    assert (" load {masked" in before) == (not log)
    loads = [line for line in body.splitlines() if " load " in line]
    assert len(loads) == 1 and ("masked" in loads[0]) == (masked or not log)
    if not log:
        assert body.index(" load ") > body.index(" dot ")
    report = assemble(ptxas, k.asm["ptx"], target)
    assert "0 bytes spill stores" in report, report


@tiles.jit
def indexed_scales_kernel(a_ptr, b_ptr, idx_ptr, s_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr,
                          BK: tl.constexpr):
    # Each step's scale row is chosen by an index loaded in the step: the index (a scalar) and
    # the row it selects both go an iteration ahead, the row's address from the carried index.
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        row = tl.load(idx_ptr + k // BK)
        s = tl.load(s_ptr + row * BN + rn)
        acc += tl.dot(a, b) * s[None, :]
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


@pytest.mark.parametrize("steps", [1, 2, 5])
def test_small_loads_chained_through_an_index(dev, rng, steps):
    BM, BN, BK, rows = 64, 64, 32, 7
    K = steps * BK
    a = random(rng, (BM, K), "float16", -1, 1)
    b = random(rng, (K, BN), "float16", -1, 1)
    idx = rng.integers(0, rows, steps).astype(np.int32)
    s = random(rng, (rows, BN), "float32", 0.5, 1.5)
    c = dev.put(np.full((BM, BN), np.nan, np.float32))
    indexed_scales_kernel[(1,)](dev.put(a), dev.put(b), dev.put(idx), dev.put(s), c, K, BM=BM, BN=BN, BK=BK,
                                num_stages=3)
    f = lambda x: x.astype(np.float64)  # noqa: E731
    ref = sum((f(a[:, i * BK:(i + 1) * BK]) @ f(b[i * BK:(i + 1) * BK])) * f(s[idx[i]])[None, :]
              for i in range(steps))
    assert _rel_err(dev.get(c), ref) < 1e-2


def test_small_loads_chained_through_an_index_go_ahead(ptxas):
    from test_compile import assemble

    sig = {"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "idx_ptr": "*i32:16", "s_ptr": "*fp32:16", "c_ptr": "*fp32:16",
           "K": "i32:16"}
    k = tiles.compile(indexed_scales_kernel, signature=sig, target="sm_90a", num_warps=4, num_stages=3,
                      constexprs={"BM": 64, "BN": 64, "BK": 32})
    before, loop = k.asm["tir_opt"].split(" for ", 1)
    # Both loads of the first step before the loop; in the body, both after the dot.
    assert before.count(" load {masked") == 2
    body = loop.split("yield")[0]
    loads = [i for i, line in enumerate(body.splitlines()) if " load " in line]
    dot = next(i for i, line in enumerate(body.splitlines()) if " dot " in line)
    assert len(loads) == 2 and min(loads) > dot
    assemble(ptxas, k.asm["ptx"], "sm_90a")


@tiles.jit
def grouped_scales_kernel(a_ptr, b_ptr, s_ptr, t_ptr, c_ptr, K, NV, BM: tl.constexpr, BN: tl.constexpr,
                          BK: tl.constexpr, G: tl.constexpr, GM: tl.constexpr, MASKED: tl.constexpr):
    # One scale per G columns (and, added at the end, one value per GM x G block), read as a
    # column tile through `rn // G`: each thread loads a run of G columns it holds once.
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        if MASKED:
            s = tl.load(s_ptr + k // BK * (BN // G) + rn // G, mask=rn < NV, other=2.0)
        else:
            s = tl.load(s_ptr + k // BK * (BN // G) + rn // G)
        acc += tl.dot(a, b) * s[None, :]
    t = tl.load(t_ptr + (rm // GM)[:, None] * (BN // G) + (rn // G)[None, :])
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc + t)


@pytest.mark.parametrize("G, GM", [(2, 1), (16, 8), (64, 16)])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("warps", [4, 8])
def test_loads_by_groups_of_columns(dev, rng, G, GM, masked, warps):
    BM, BN, BK, steps, nv = 64, 128, 32, 3, 40
    K = steps * BK
    a = random(rng, (BM, K), "float16", -1, 1)
    b = random(rng, (K, BN), "float16", -1, 1)
    s = random(rng, (steps, BN // G), "float32", 0.5, 1.5)
    t = random(rng, (BM // GM, BN // G), "float32", -1, 1)
    c = dev.put(np.full((BM, BN), np.nan, np.float32))
    grouped_scales_kernel[(1,)](dev.put(a), dev.put(b), dev.put(s), dev.put(t), c, K, nv, BM=BM, BN=BN, BK=BK,
                                G=G, GM=GM, MASKED=masked, num_warps=warps, num_stages=3)
    f = lambda x: x.astype(np.float64)  # noqa: E731
    cols = np.arange(BN) // G
    sv = f(s)[:, cols]
    if masked:
        sv[:, nv:] = 2.0
    ref = sum((f(a[:, i * BK:(i + 1) * BK]) @ f(b[i * BK:(i + 1) * BK])) * sv[i][None, :] for i in range(steps))
    ref = ref + f(t)[np.arange(BM)[:, None] // GM, cols[None, :]]
    assert _rel_err(dev.get(c), ref) < 1e-2


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("masked", [False, True])
def test_loads_by_groups_of_columns_load_each_group_once(ptxas, target, masked):
    from test_compile import assemble

    sig = {"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "s_ptr": "*fp32:16", "t_ptr": "*fp32:16", "c_ptr": "*fp32:16",
           "K": "i32:16", "NV": "i32:16"}
    k = tiles.compile(grouped_scales_kernel, signature=sig, target=target, num_warps=4, num_stages=3,
                      constexprs={"BM": 64, "BN": 128, "BK": 32, "G": 16, "GM": 8, "MASKED": masked})
    tir = k.asm["tir_opt"]
    # The column scales (and the block tile, in the accumulator's layout) load runs once.
    assert " runs = [16]}" in tir and ", runs = [8, 16]}" in tir, tir
    report = assemble(ptxas, k.asm["ptx"], target)
    assert "0 bytes spill stores" in report, report


@tiles.jit
def layout_mm_kernel(a_ptr, b_ptr, c_ptr, K, sam, sb, scm, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                     B_LAYOUT: tl.constexpr, ACC: tl.constexpr, PREC: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), ACC)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * sam + (k + rk)[None, :])
        if B_LAYOUT == "nk":  # b stored [N, K] (K-major), used as its transpose
            b = tl.trans(tl.load(b_ptr + rn[:, None] * sb + (k + rk)[None, :]))
        elif B_LAYOUT == "kn_kmajor":  # b [K, N] read through pointers contiguous along K
            b = tl.load(b_ptr + rn[None, :] * sb + (k + rk)[:, None])
        else:  # b stored [K, N] row-major (N-major)
            b = tl.load(b_ptr + (k + rk)[:, None] * sb + rn[None, :])
        acc = tl.dot(a, b, acc, input_precision=PREC, out_dtype=ACC)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :], acc)


@pytest.mark.parametrize("b_layout", ["nk", "kn_kmajor", "kn"])
@pytest.mark.parametrize("warps,bm", [(8, 128), (4, 64)])
def test_int8_matmul_operand_layouts(dev, rng, b_layout, warps, bm):
    # On sm_90a int8 dots whose operands are K-major run on warpgroups (wgmma .s32.s8.s8);
    # a row-major `b` keeps mma.sync. Exact integer results either way.
    M, N, K = 2 * bm, 256, 192
    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    if b_layout == "kn":
        bs, sb = b, N
    else:  # both read the [N, K] storage of b (column-major b), through different pointer tiles
        bs, sb = np.ascontiguousarray(b.T), K
    c = dev.put(np.zeros((M, N), np.int32))
    layout_mm_kernel[(M // bm, N // 128)](dev.put(a), dev.put(bs), c, K, K, sb, N, BM=bm, BN=128, BK=64,
                                          B_LAYOUT=b_layout, ACC=tl.int32, PREC=None, num_warps=warps)
    np.testing.assert_array_equal(dev.get(c), a.astype(np.int64) @ b.astype(np.int64))


def test_int8_warpgroup_dots_assemble(ptxas):
    from test_compile import assemble

    sig = {"a_ptr": "*i8:16", "b_ptr": "*i8:16", "c_ptr": "*i32:16", "K": "i32:16", "sam": "i32:16",
           "sb": "i32:16", "scm": "i32:16"}
    for b_layout, wgmma in (("nk", True), ("kn_kmajor", True), ("kn", False)):
        k = tiles.compile(layout_mm_kernel, signature=sig,
                          constexprs=dict(BM=128, BN=128, BK=64, B_LAYOUT=b_layout, ACC=tl.int32, PREC=None),
                          num_warps=8, target="sm_90a")
        ptx = k.asm["ptx"]
        assert ("wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8" in ptx) == wgmma, b_layout
        assert ("mma.sync" in ptx) != wgmma
        # mma.sync saturates an overflowing int32 accumulator, as Triton's int8 dot does.
        assert ("mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32" in ptx) != wgmma
        assemble(ptxas, ptx, "sm_90a")


@pytest.mark.parametrize("b_nk", [True, False])
@pytest.mark.parametrize("prec", ["tf32", "tf32x3"])
def test_fp32_matmul_operand_layouts(dev, rng, b_nk, prec):
    # On sm_90a a tf32 dot with K-major operands runs on warpgroups (wgmma .f32.tf32.tf32).
    M, N, K = 256, 256, 160
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    bs, sb = (np.ascontiguousarray(b.T), K) if b_nk else (b, N)
    c = dev.put(np.zeros((M, N), np.float32))
    layout_mm_kernel[(M // 128, N // 128)](dev.put(a), dev.put(bs), c, K, K, sb, N, BM=128, BN=128, BK=32,
                                           B_LAYOUT="nk" if b_nk else "kn", ACC=tl.float32, PREC=prec, num_warps=8)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = np.linalg.norm(dev.get(c) - ref) / np.linalg.norm(ref)
    assert err < (2e-3 if prec == "tf32" else 1e-5), err


def test_tf32_warpgroup_dots_assemble(ptxas):
    from test_compile import assemble

    sig = {"a_ptr": "*fp32:16", "b_ptr": "*fp32:16", "c_ptr": "*fp32:16", "K": "i32:16", "sam": "i32:16",
           "sb": "i32:16", "scm": "i32:16"}
    for b_nk, prec, wgmma in ((True, "tf32", True), (False, "tf32", False), (True, "tf32x3", False)):
        k = tiles.compile(layout_mm_kernel, signature=sig,
                          constexprs=dict(BM=128, BN=128, BK=32, B_LAYOUT="nk" if b_nk else "kn", ACC=tl.float32,
                                          PREC=prec), num_warps=8, target="sm_90a")
        ptx = k.asm["ptx"]
        assert ("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32" in ptx) == wgmma, (b_nk, prec)
        assemble(ptxas, ptx, "sm_90a")


@tiles.jit
def rms_mix_bwd_kernel(x_ptr, w_ptr, mix_ptr, scale_ptr, g_ptr, gx_ptr, gw_ptr, N: tl.constexpr, K: tl.constexpr,
                       M: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BM: tl.constexpr):
    # The backward of mix = (x @ w) * scale[:, None], scale = rsqrt(mean(x^2)): dx through one
    # dot per block of outputs plus x times a row factor, dw = x^T @ (g * scale) added
    # atomically. On sm_90a, `x` lives in the mma.sync dot's accumulator layout and reaches
    # wgmma as a register-form `a` whose accumulator starts at zero.
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    cols = tl.program_id(1) * BK + tl.arange(0, BK)
    rmask = rows < N
    scale = tl.load(scale_ptr + rows, mask=rmask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + rows[:, None] * K + cols[None, :], mask=rmask[:, None] & (cols[None, :] < K), other=0.0)
    xf = x.to(tl.float32)
    dx = tl.zeros((BN, BK), tl.float32)
    row_dot = tl.zeros((BN,), tl.float32)
    for m0 in tl.static_range(0, M, BM):
        outs = m0 + tl.arange(0, BM)
        omask = rmask[:, None] & (outs[None, :] < M)
        gm = tl.load(g_ptr + rows[:, None] * M + outs[None, :], mask=omask, other=0.0).to(tl.float32)
        mix = tl.load(mix_ptr + rows[:, None] * M + outs[None, :], mask=omask, other=0.0).to(tl.float32)
        row_dot += tl.sum(gm * mix, axis=1)
        wmask = (cols[:, None] < K) & (outs[None, :] < M)
        w = tl.load(w_ptr + cols[:, None] * M + outs[None, :], mask=wmask, other=0.0)
        gs = (gm * scale[:, None]).to(w.dtype)
        dx += tl.dot(gs, tl.trans(w))
        dw = tl.dot(tl.trans(x), gs)
        tl.atomic_add(gw_ptr + cols[:, None] * M + outs[None, :], dw, mask=wmask)
    factor = -(row_dot / scale) * scale * scale * scale / K
    dx = dx + xf * factor[:, None]
    tl.store(gx_ptr + rows[:, None] * K + cols[None, :], dx.to(x.dtype), mask=rmask[:, None] & (cols[None, :] < K))


@pytest.mark.parametrize("K", [64, 128, 256])
def test_masked_mixed_dots_with_an_atomic_gradient(dev, rng, K):
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    N, M = 8, 8
    x = rng.standard_normal((N, K)).astype(bf16)
    w = rng.standard_normal((K, M)).astype(bf16)
    mix = rng.standard_normal((N, M)).astype(np.float32)
    scale = (rng.random(N) + 0.5).astype(np.float32)
    g = rng.standard_normal((N, M)).astype(np.float32)
    gx = dev.put(np.zeros((N, K), bf16))
    gw = dev.put(np.zeros((K, M), np.float32))
    rms_mix_bwd_kernel[(1, 1)](dev.put(x), dev.put(w), dev.put(mix), dev.put(scale), dev.put(g), gx, gw, N=N, K=K,
                               M=M, BN=32, BK=256, BM=32, num_warps=4)
    gs = (g * scale[:, None]).astype(bf16).astype(np.float64)
    want_gw = x.astype(np.float64).T @ gs
    factor = -((g * mix).sum(1) / scale) * scale**3 / K
    want_gx = gs @ w.astype(np.float64).T + x.astype(np.float64) * factor[:, None]
    gw_err = np.abs(dev.get(gw) - want_gw).max() / np.abs(want_gw).max()
    gx_err = np.abs(dev.get(gx).astype(np.float64) - want_gx).max() / np.abs(want_gx).max()
    # Found in Liger-Kernel's mHC backward (stop 26): dw came out wrong for K < BK, because ptxas
    # moved a wgmma accumulator between in-flight instructions when a zero accumulator was
    # passed as tied inputs (see test_zero_accumulator_wgmma_reads_no_inputs).
    assert gw_err < 1e-2 and gx_err < 2e-2, (gw_err, gx_err)


def test_zero_accumulator_wgmma_reads_no_inputs(ptxas):
    # A zero accumulator is not fed to wgmma: each 64-row block's first K step runs with
    # scale-d false (`pz`), later ones accumulate (`p`); the outputs are not tied to inputs.
    from test_compile import assemble

    sig = {"x_ptr": "*bf16:16", "w_ptr": "*bf16:16", "mix_ptr": "*fp32:16", "scale_ptr": "*fp32:16",
           "g_ptr": "*fp32:16", "gx_ptr": "*bf16:16", "gw_ptr": "*fp32:16"}
    k = tiles.compile(rms_mix_bwd_kernel, signature=sig, constexprs=dict(N=8, K=64, M=8, BN=32, BK=256, BM=32),
                      num_warps=4, target="sm_90a")
    ptx = k.asm["ptx"]
    wgmma = [line for line in ptx.splitlines() if line.startswith("wgmma.mma_async")]
    assert len(wgmma) == 8, wgmma  # 4 blocks of 64 rows x 2 K steps of 16
    assert sum(", pz, " in w for w in wgmma) == 4 and sum(", p, " in w for w in wgmma) == 4
    assemble(ptxas, ptx, "sm_90a")


def _warpgroup_kernels():
    """Kernels whose sm_90a code issues wgmma: dots with zero and carried accumulators,
    register and shared `a`, in and out of loops, and a spread of matmul and attention
    configurations."""
    f16 = {"q_ptr": "*fp16:16", "k_ptr": "*fp16:16", "v_ptr": "*fp16:16", "o_ptr": "*fp16:16"}
    mix = {"x_ptr": "*bf16:16", "w_ptr": "*bf16:16", "mix_ptr": "*fp32:16", "scale_ptr": "*fp32:16",
           "g_ptr": "*fp32:16", "gx_ptr": "*bf16:16", "gw_ptr": "*fp32:16"}
    yield from ((f"rms_mix_bwd K={k}", rms_mix_bwd_kernel, mix, dict(N=8, K=k, M=8, BN=32, BK=256, BM=32), {})
                for k in (64, 128, 256))
    yield ("attention_fwd", attention_fwd_kernel, dict(f16, seq_len="i32:16", sm_scale="fp32"),
           {"D": 64, "BLOCK_M": 64, "BLOCK_N": 64}, {})
    yield ("causal_attention", causal_attention_kernel, dict(f16, n_ctx="i32:16", qk_scale="fp32"),
           {"D": 64, "BLOCK_M": 64, "BLOCK_N": 64}, {"num_stages": 1})
    mm = dict(SIG, stride_am="i32:16", stride_bk="i32:16", stride_cm="i32:16", K="i32:16")
    for dt, acc, out, bm, bn, bk, stages, form in (("float16", "float32", "float16", 128, 256, 64, 3, "acc"),
                                                  ("bfloat16", "float32", "bfloat16", 64, 128, 32, 1, "plus"),
                                                  ("float16", "float32", "float16", 64, 64, 64, 2, "plus"),
                                                  ("bfloat16", "float32", "bfloat16", 128, 128, 32, 3, "acc")):
        yield (f"matmul {dt} {bm}x{bn}x{bk}", matmul_kernel,
               dict(mm, a_ptr=PTR[dt] + ":16", b_ptr=PTR[dt] + ":16", c_ptr=PTR[out] + ":16"),
               {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "ACC": TL[acc], "PRECISION": "tf32", "FORM": form,
                "STAGES": stages}, {"num_warps": 8 if bm == 128 else 4})
    yield ("attention_fwd D=128 stages=2", attention_fwd_kernel, dict(f16, seq_len="i32:16", sm_scale="fp32"),
           {"D": 128, "BLOCK_M": 128, "BLOCK_N": 64}, {"num_stages": 2, "num_warps": 8})
    qkv = {k: v for k, v in f16.items() if k != "o_ptr"}
    yield ("dkdv", dkdv_kernel, dict(qkv, do_ptr="*fp16:16", dk_ptr="*fp32:16", dv_ptr="*fp32:16", n_ctx="i32:16"),
           {"D": 64, "BLOCK_M": 64, "BLOCK_N": 64}, {"num_stages": 3})


@pytest.mark.parametrize("name,kernel,sig,constexprs,opts", list(_warpgroup_kernels()),
                         ids=[k[0] for k in _warpgroup_kernels()])
def test_wgmma_sass_leaves_in_flight_registers_alone(ptxas, name, kernel, sig, constexprs, opts):
    # Between a HGMMA and the wait that completes it nothing may touch its accumulators or
    # rewrite its `a` fragment (ptxas did, for a zero accumulator passed as tied inputs).
    from sass_hazards import find_nvdisasm, hazards, sass_of

    nvdisasm = find_nvdisasm()
    if nvdisasm is None:
        pytest.skip("no nvdisasm (pip install nvidia-cuda-nvdisasm)")
    opts = dict({"num_warps": 4}, **opts)
    k = tiles.compile(kernel, signature=sig, constexprs=constexprs, target="sm_90a", **opts)
    sass = sass_of(ptxas, nvdisasm, k.asm["ptx"])
    assert "HGMMA" in sass
    assert hazards(sass) == []


@tiles.jit
def dequant_b_matmul_kernel(a_ptr, b_ptr, s_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            BLOCK_K: tl.constexpr, B_FP8: tl.constexpr, ASM: tl.constexpr = False):
    # int8 (or fp8) weights dequantised in the loop, per output column, before the dot (as
    # vLLM's w8a16 MoE and fp8-KV attention do).
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    scale = tl.load(s_ptr + rn, mask=rn < N, other=0.0)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        kk = k * BLOCK_K + rk
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0)
        if B_FP8:
            b = b.to(tl.float32)
        if ASM:  # the rounding to fp16 in inline PTX
            b = tl.inline_asm_elementwise("cvt.rn.f16.f32 $0, $1;", "=h,f", [b.to(tl.float32) * scale[None, :]],
                                          dtype=tl.float16, is_pure=True, pack=1)
        else:
            b = (b.to(tl.float32) * scale[None, :]).to(tl.float16)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("b_fp8,asm", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("K", [200, 512])
def test_dot_of_dequantised_b(dev, rng, b_fp8, asm, K):
    # A dot's `b` computed in the loop from narrower loads and a per-column scale. With K a
    # multiple of 16 the loads are pipelined (the weights through a ring read back into
    # registers), 16 iterations.
    M, N = 70, 96
    a = rng.standard_normal((M, K)).astype(np.float16)
    if b_fp8:
        import ml_dtypes

        b = (rng.standard_normal((K, N)) * 4).astype(ml_dtypes.float8_e4m3fn)
    else:
        b = rng.integers(-127, 128, (K, N)).astype(np.int8)
    s = (rng.random(N) / 32 + 1 / 64).astype(np.float32)
    c = dev.put(np.full((M, N), np.nan, np.float32))
    dequant_b_matmul_kernel[(tiles.cdiv(M, 64), tiles.cdiv(N, 64))](dev.put(a), dev.put(b), dev.put(s), c, M, N, K,
                                                                 BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, B_FP8=b_fp8,
                                                                 ASM=asm)
    w = (b.astype(np.float64) * s[None, :]).astype(np.float16).astype(np.float64)
    ref = a.astype(np.float64) @ w
    np.testing.assert_allclose(dev.get(c), ref, rtol=2e-3, atol=2e-3 * np.abs(ref).max())


@tiles.jit
def biased_softmax_dot_kernel(bias_ptr, v_ptr, o_ptr, M, N, D: tl.constexpr, BLOCK_M: tl.constexpr,
                              BLOCK_N: tl.constexpr):
    # o = sum over column blocks of exp(bias) @ v, the bias read with other=-1.0 past row M
    # (so exp gives 1/e there, not 1): its ring slot, zero-filled past M, is read back into
    # registers and `other` selected in.
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, D)
    acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        rn = n0 + tl.arange(0, BLOCK_N)
        bias = tl.load(bias_ptr + rm[:, None] * N + rn[None, :], mask=rm[:, None] < M, other=-1.0)
        v = tl.load(v_ptr + rn[:, None] * D + rd[None, :])
        acc = tl.dot(tl.exp(bias.to(tl.float32)).to(tl.float16), v, acc)
    tl.store(o_ptr + rm[:, None] * D + rd[None, :], acc)


def test_dot_of_loads_through_registers(dev, rng):
    # Loads that reach a dot through other ops (a cast, an exp) pipelined through rings and
    # read back into registers; rows past M take `other`, which cp.async cannot write.
    M, N, D = 100, 256, 64
    Mp = 128
    bias = (rng.standard_normal((Mp, N)) * 0.5).astype(np.float16)
    v = rng.standard_normal((N, D)).astype(np.float16)
    o = dev.put(np.full((Mp, D), np.nan, np.float32))
    biased_softmax_dot_kernel[(Mp // 64,)](dev.put(bias), dev.put(v), o, M, N, D=D, BLOCK_M=64, BLOCK_N=32)
    b = np.where(np.arange(Mp)[:, None] < M, bias.astype(np.float64), -1.0)
    p = np.exp(b).astype(np.float16).astype(np.float64)
    ref = p @ v.astype(np.float64)
    np.testing.assert_allclose(dev.get(o), ref, rtol=2e-3, atol=2e-3 * np.abs(ref).max())


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_loads_through_registers_are_pipelined(ptxas, target):
    # The dequantised int8 `b` and the bias with other=-1.0 are each copied through a ring
    # (cp.async) and read back into registers (`local_load`); ptxas takes the PTX, no spills.
    from test_compile import assemble

    dq = tiles.compile(dequant_b_matmul_kernel,
                       signature={"a_ptr": "*fp16", "b_ptr": "*i8", "s_ptr": "*fp32", "c_ptr": "*fp32",
                                  "M": "i32", "N": "i32:16", "K": "i32:16"},
                       constexprs={"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "B_FP8": False},
                       specialization={"a_ptr": 16, "b_ptr": 16, "s_ptr": 16, "c_ptr": 16}, target=target,
                       num_warps=4, num_stages=3)
    sm = tiles.compile(biased_softmax_dot_kernel,
                       signature={"bias_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp32", "M": "i32", "N": "i32:16"},
                       constexprs={"D": 64, "BLOCK_M": 64, "BLOCK_N": 32},
                       specialization={"bias_ptr": 16, "v_ptr": 16, "o_ptr": 16}, target=target,
                       num_warps=4, num_stages=3)
    for k, selects in ((dq, False), (sm, True)):
        tir = k.asm["tir_opt"]
        body = [line.strip() for line in tir.splitlines()]
        reads = [i for i, line in enumerate(body) if " = local_load " in line]
        assert len(reads) == 1, tir
        assert (" = select " in body[reads[0] + 1]) == selects, body[reads[0] + 1]
        assert not any(" = load " in line and "x*" not in line and "<" in line.split(" : ")[-1][:2]
                       for line in body[reads[0]:]), "no tile load left in the loop"
        assert "cp.async" in k.asm["ptx"]
        report = assemble(ptxas, k.asm["ptx"], target)
        assert "0 bytes spill stores" in report, report


@tiles.jit
def paged_dot_attention_kernel(q_ptr, k_cache, v_cache, block_tables, out_ptr, n_tiles, scale, H: tl.constexpr,
                               D: tl.constexpr, BS: tl.constexpr, TILE: tl.constexpr, MAXB: tl.constexpr):
    # Decode attention over a paged KV cache (vLLM's layout: [blocks, BS, D] per head), the
    # block of each key looked up in the loop, K and V widened to fp16 before their dots.
    seq = tl.program_id(0)
    rh = tl.arange(0, H)
    rd = tl.arange(0, D)
    rt = tl.arange(0, TILE)
    q = tl.load(q_ptr + seq * H * D + rh[:, None] * D + rd[None, :])
    m = tl.full([H], float("-inf"), tl.float32)
    den = tl.zeros([H], tl.float32)
    acc = tl.zeros([H, D], tl.float32)
    for j in range(0, n_tiles):
        tok = j * TILE + rt
        blk = tl.load(block_tables + seq * MAXB + tok // BS)
        off = blk.to(tl.int64) * (BS * D) + (tok % BS) * D
        k = tl.load(k_cache + off[None, :] + rd[:, None])
        v = tl.load(v_cache + off[:, None] + rd[None, :])
        s = tl.dot(q, k.to(tl.float16)) * scale
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        den = den * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v.to(tl.float16))
        m = m_new
    tl.store(out_ptr + seq * H * D + rh[:, None] * D + rd[None, :], acc / den[:, None])


@pytest.mark.parametrize("kv", ["fp16", "fp8e4nv"])
def test_paged_attention_with_dots(dev, rng, kv):
    # The block-table load is recomputed ahead with the copies of K and V (masked off past the
    # loop's end, where the table has no entry).
    import ml_dtypes

    seqs, H, D, BS, TILE, n_tiles = 3, 16, 64, 16, 32, 5
    maxb = n_tiles * TILE // BS
    blocks = seqs * maxb + 3
    table = rng.permutation(blocks)[:seqs * maxb].reshape(seqs, maxb).astype(np.int32)
    kdt = np.float16 if kv == "fp16" else ml_dtypes.float8_e4m3fn
    q = (rng.standard_normal((seqs, H, D)) * 0.5).astype(np.float16)
    kc = rng.standard_normal((blocks, BS, D)).astype(kdt)
    vc = rng.standard_normal((blocks, BS, D)).astype(kdt)
    out = dev.put(np.full((seqs, H, D), np.nan, np.float32))
    scale = D ** -0.5
    paged_dot_attention_kernel[(seqs,)](dev.put(q), dev.put(kc), dev.put(vc), dev.put(table), out, n_tiles, scale,
                                       H=H, D=D, BS=BS, TILE=TILE, MAXB=maxb)
    k = kc.astype(np.float64)[table].reshape(seqs, maxb * BS, D)
    v = vc.astype(np.float64)[table].reshape(seqs, maxb * BS, D)
    s = np.einsum("shd,std->sht", q.astype(np.float64), k) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("sht,std->shd", p, v) / p.sum(-1, keepdims=True)
    np.testing.assert_allclose(dev.get(out), ref, rtol=1e-2, atol=1e-2 * np.abs(ref).max())


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_paged_loads_are_pipelined(ptxas, target):
    # K and V go through rings although their addresses need a load in the loop: it moves
    # ahead with the copies, masked by the iteration's validity; ptxas takes it, no spills.
    from test_compile import assemble

    k = tiles.compile(paged_dot_attention_kernel,
                      signature={"q_ptr": "*fp16", "k_cache": "*fp8e4nv", "v_cache": "*fp8e4nv",
                                 "block_tables": "*i32", "out_ptr": "*fp32", "n_tiles": "i32", "scale": "fp32"},
                      constexprs={"H": 16, "D": 64, "BS": 16, "TILE": 32, "MAXB": 64},
                      specialization={p: 16 for p in ("q_ptr", "k_cache", "v_cache", "block_tables", "out_ptr")},
                      target=target, num_warps=4, num_stages=3)
    tir = k.asm["tir_opt"]
    loop = tir[tir.index(" = for "):]
    assert loop.count(" = local_load ") == 2, tir
    table_loads = [line for line in loop.splitlines() if " = load {masked" in line and "xi32" in line]
    assert table_loads, tir
    report = assemble(ptxas, k.asm["ptx"], target)
    assert "0 bytes spill stores" in report, report


@pytest.mark.parametrize("b_fp8,asm", [(False, False), (True, False), (False, True)])
def test_dequantised_b_converts_once_on_warpgroups(ptxas, b_fp8, asm):
    # On sm_90a wgmma reads `b` from shared memory: the casts and the scaling run in the load's
    # layout (a #dot_op operand layout would repeat them in every warp along M), and one
    # convert_layout of the fp16 tile feeds the dot. No spills.
    from test_compile import assemble

    k = tiles.compile(dequant_b_matmul_kernel,
                      signature={"a_ptr": "*fp16", "b_ptr": "*fp8e4nv" if b_fp8 else "*i8", "s_ptr": "*fp32",
                                 "c_ptr": "*fp32", "M": "i32", "N": "i32:16", "K": "i32:16"},
                      constexprs={"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "B_FP8": b_fp8, "ASM": asm},
                      specialization={"a_ptr": 16, "b_ptr": 16, "s_ptr": 16, "c_ptr": 16}, target="sm_90a",
                      num_warps=4)
    tir = k.asm["tir_opt"]
    ids = dict(line.split(" = ", 1) for line in tir.splitlines() if line.startswith("#"))
    operand_b = {i for i, text in ids.items() if "opIdx = 1" in text and "versionMajor = 3" in text}
    assert operand_b, "a warpgroup dot"
    for line in tir.splitlines():
        if " = cast " in line or " = mul " in line or " = inline_asm" in line:
            assert not any(line.rstrip().split(" loc(")[0].endswith(f"{i}>") for i in operand_b), line
    # The loads are pipelined (K a multiple of 16), the int8 one read back into registers.
    assert " = local_load " in tir
    report = assemble(ptxas, k.asm["ptx"], "sm_90a")
    assert "0 bytes spill stores" in report, report


@tiles.jit
def gathered_decode_kernel(q_ptr, kv_ptr, idx_ptr, out_ptr, n_keys, H: tl.constexpr, D: tl.constexpr,
                           BLOCK_N: tl.constexpr):
    # A decode step's shape: 16 heads against keys gathered through an index vector, read by
    # `mma.sync` (too few rows for a warpgroup) from a ring.
    rh = tl.arange(0, H)
    rd = tl.arange(0, D)
    q = tl.load(q_ptr + rh[:, None] * D + rd[None, :])
    acc = tl.zeros((H, D), dtype=tl.float32)
    for start in range(0, n_keys, BLOCK_N):
        rn = start + tl.arange(0, BLOCK_N)
        loc = tl.load(idx_ptr + rn, mask=rn < n_keys, other=0)
        kt = tl.load(kv_ptr + loc[None, :] * D + rd[:, None], mask=rn[None, :] < n_keys, other=0.0)
        s = tl.dot(q, kt)
        v = tl.load(kv_ptr + loc[:, None] * D + rd[None, :], mask=rn[:, None] < n_keys, other=0.0)
        acc += tl.dot(s.to(tl.float16), v)
    tl.store(out_ptr + rh[:, None] * D + rd[None, :], acc)


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_ring_read_into_registers(dev, rng, stages):
    # With `mma.sync` the ring has `num_stages - 1` slots (one, at two stages), each refilled
    # in the iteration that read it.
    h, d, rows, n = 16, 64, 300, 200
    q = random(rng, (h, d), "float16", -0.5, 0.5)
    kv = random(rng, (rows, d), "float16", -0.5, 0.5)
    idx = rng.permutation(rows)[:n].astype(np.int32)
    out = dev.put(np.full((h, d), np.nan, np.float32))
    gathered_decode_kernel[(1,)](dev.put(q), dev.put(kv), dev.put(idx), out, n, H=h, D=d, BLOCK_N=32,
                                 num_stages=stages)
    g = kv[idx].astype(np.float64)
    s = (q.astype(np.float64) @ g.T).astype(np.float16).astype(np.float64)
    assert _rel_err(dev.get(out), s @ g) < 1e-2


@tiles.jit
def tile_matmul_kernel(a_ptr, b_ptr, c_ptr, K, stride_am, stride_bk, stride_cm, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K, BLOCK_K):
        acc += tl.dot(tl.load(a_ptrs), tl.load(b_ptrs))
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * stride_bk
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(tl.float16))


@tiles.jit
def guarded_decode_kernel(q_ptr, kv_ptr, idx_ptr, out_ptr, n_keys, H: tl.constexpr, D: tl.constexpr,
                          BLOCK_N: tl.constexpr):
    # gathered_decode_kernel with its loop and store under a runtime `if`, as SGLang's decode
    # kernel has them (`if split_kv_end > split_kv_start:`).
    rh = tl.arange(0, H)
    rd = tl.arange(0, D)
    if n_keys > 0:
        q = tl.load(q_ptr + rh[:, None] * D + rd[None, :])
        acc = tl.zeros((H, D), dtype=tl.float32)
        for start in range(0, n_keys, BLOCK_N):
            rn = start + tl.arange(0, BLOCK_N)
            loc = tl.load(idx_ptr + rn, mask=rn < n_keys, other=0)
            kt = tl.load(kv_ptr + loc[None, :] * D + rd[:, None], mask=rn[None, :] < n_keys, other=0.0)
            s = tl.dot(q, kt)
            v = tl.load(kv_ptr + loc[:, None] * D + rd[None, :], mask=rn[:, None] < n_keys, other=0.0)
            acc += tl.dot(s.to(tl.float16), v)
        tl.store(out_ptr + rh[:, None] * D + rd[None, :], acc)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_scratch_reuses_rings_after_a_loop_under_an_if(target):
    # After the loop's final wait, the epilogue's scratch takes the finished rings' memory
    # whether or not the loop sits in a branch (3b84cbf lost that under an `if`: SGLang's
    # decode kernel went from 88 to 119 KB).
    sig = {"q_ptr": "*fp16:16", "kv_ptr": "*fp16:16", "idx_ptr": "*i32:16", "out_ptr": "*fp32:16", "n_keys": "i32"}
    kw = dict(signature=sig, constexprs={"H": 16, "D": 256, "BLOCK_N": 32}, target=target, num_warps=4,
              num_stages=3)
    plain = tiles.compile(gathered_decode_kernel, **kw).metadata.shared
    assert tiles.compile(guarded_decode_kernel, **kw).metadata.shared == plain


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_ring_slots_follow_triton(monkeypatch, target, stages):
    # Triton's sizes for the same `num_stages`: `num_stages - 1` slots where `mma.sync` reads the
    # ring into registers, `num_stages` where a `wgmma` reads it in place (a 128x128x64 fp16
    # matmul: 32 KiB a stage). `TILES_RING_SLOTS=stages` keeps `num_stages` slots everywhere.
    sig = {"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "c_ptr": "*fp16:16", "K": "i32:16", "stride_am": "i32:16",
           "stride_bk": "i32:16", "stride_cm": "i32:16"}
    kw = dict(signature=sig, constexprs={"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, target=target,
              num_warps=4, num_stages=stages)
    # (The epilogue's layout conversion reuses the ring's memory; at one slot it needs 34 KiB.)
    slots = stages if target == "sm_90a" else stages - 1
    assert tiles.compile(tile_matmul_kernel, **kw).metadata.shared // 32768 == slots
    monkeypatch.setenv("TILES_RING_SLOTS", "stages")
    assert tiles.compile(tile_matmul_kernel, **kw).metadata.shared // 32768 == stages


@tiles.jit
def persistent_tiles_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                            PROGRAMS: tl.constexpr):
    # A persistent matmul: each program takes tiles PROGRAMS apart; the K loop is pipelined
    # inside the tile loop, and the epilogue converts the result's layout to store it.
    tiles_n = tl.cdiv(N, BN)
    for t in range(tl.program_id(0), tl.cdiv(M, BM) * tiles_n, PROGRAMS):
        rm = (t // tiles_n) * BM + tl.arange(0, BM)
        rn = (t % tiles_n) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
            b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
            acc = tl.dot(a, b, acc)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


@pytest.mark.parametrize("reuse", ["0", "1"])
def test_persistent_matmul_with_rings_reused_as_scratch(dev, rng, monkeypatch, reuse):
    # By default the epilogue's scratch takes the K loop's ring memory, and the next tile's
    # prologue refills the ring after a barrier (TILES_NESTED_RING_REUSE=0: apart). 4 programs,
    # 9 tiles each.
    monkeypatch.setenv("TILES_NESTED_RING_REUSE", reuse)
    m, n, k = 384, 384, 256
    a = random(rng, (m, k), "float16", -1, 1)
    b = random(rng, (k, n), "float16", -1, 1)
    c = dev.put(np.full((m, n), np.nan, np.float16))
    persistent_tiles_kernel.device_caches.clear()
    persistent_tiles_kernel[(4,)](dev.put(a), dev.put(b), c, m, n, k, BM=128, BN=128, BK=64, PROGRAMS=4,
                                  num_stages=3)
    assert _rel_err(dev.get(c), a.astype(np.float64) @ b.astype(np.float64)) < 1e-2


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_persistent_matmul_rings_reused_as_scratch_compile(ptxas, monkeypatch, target):
    # Triton's sizes: the 128x256x64 tiles' ring (3 slots, 144 KiB, for wgmma; 2 for mma.sync)
    # holds the epilogue's 64 KiB conversion too; without the reuse it comes on top.
    from test_compile import assemble

    sig = {"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "c_ptr": "*fp16:16", "M": "i32:16", "N": "i32:16",
           "K": "i32:16"}
    kw = dict(signature=sig, constexprs={"BM": 128, "BN": 256, "BK": 64, "PROGRAMS": 132}, target=target,
              num_warps=8, num_stages=3)
    stage = (128 * 64 + 64 * 256) * 2
    slots = 3 if target == "sm_90a" else 2
    monkeypatch.setenv("TILES_NESTED_RING_REUSE", "0")
    apart = tiles.compile(persistent_tiles_kernel, **kw)
    monkeypatch.setenv("TILES_NESTED_RING_REUSE", "1")
    shared = tiles.compile(persistent_tiles_kernel, **kw)
    assert apart.metadata.shared > slots * stage + 64 * 1024
    assert shared.metadata.shared == slots * stage
    # One more barrier: before the next tile's prologue refills the ring.
    assert shared.asm["ptx"].count("bar.sync") == apart.asm["ptx"].count("bar.sync") + 1
    report = assemble(ptxas, shared.asm["ptx"], target)
    assert "0 bytes spill stores" in report, report
