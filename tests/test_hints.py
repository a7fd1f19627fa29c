"""Axis hints (`tl.multiple_of`, `tl.max_contiguous`, `tl.max_constancy`) reach the compiler:
Triton's persistent matmul clamps its offsets with `tl.where` and restores their contiguity
with hints; without them its loads would be scalar and unpipelined."""

import numpy as np
import pytest

import tiles
import tiles.language as tl


@tiles.jit
def _compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M, NUM_SMS):
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


def _meta(grid, kernel, args):
    return {"name": kernel.name}


@tiles.jit(launch_metadata=_meta)
def matmul_kernel_persistent(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                             stride_cn, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                             BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr, NUM_SMS: tl.constexpr,
                             WARP_SPECIALIZE: tl.constexpr):
    # Triton's persistent matmul tutorial (09), unchanged.
    start_pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    k_tiles = tl.cdiv(K, BLOCK_SIZE_K)
    num_tiles = num_pid_m * num_pid_n
    tile_id_c = start_pid - NUM_SMS
    offs_k_for_mask = tl.arange(0, BLOCK_SIZE_K)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = _compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M, NUM_SMS)
        start_m = pid_m * BLOCK_SIZE_M
        start_n = pid_n * BLOCK_SIZE_N
        offs_am = start_m + tl.arange(0, BLOCK_SIZE_M)
        offs_bn = start_n + tl.arange(0, BLOCK_SIZE_N)
        offs_am = tl.where(offs_am < M, offs_am, 0)
        offs_bn = tl.where(offs_bn < N, offs_bn, 0)
        offs_am = tl.max_contiguous(tl.multiple_of(offs_am, BLOCK_SIZE_M), BLOCK_SIZE_M)
        offs_bn = tl.max_contiguous(tl.multiple_of(offs_bn, BLOCK_SIZE_N), BLOCK_SIZE_N)
        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for ki in range(k_tiles):
            offs_k = ki * BLOCK_SIZE_K + tl.arange(0, BLOCK_SIZE_K)
            a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
            b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
            a = tl.load(a_ptrs, mask=offs_k_for_mask[None, :] < K - ki * BLOCK_SIZE_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k_for_mask[:, None] < K - ki * BLOCK_SIZE_K, other=0.0)
            accumulator = tl.dot(a, b, accumulator)
        tile_id_c += NUM_SMS
        pid_m, pid_n = _compute_pid(tile_id_c, num_pid_in_group, num_pid_m, GROUP_SIZE_M, NUM_SMS)
        offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        if (c_ptr.dtype.element_ty == tl.float8e4nv):
            c = accumulator.to(tl.float8e4nv)
        else:
            c = accumulator.to(tl.float16)
        tl.store(c_ptrs, c, mask=c_mask)


@pytest.mark.parametrize("shape", [(96, 80, 72), (256, 256, 128)])
def test_persistent_matmul(dev, rng, shape):
    M, N, K = shape
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = dev.put(np.full((M, N), np.nan, np.float16))
    big = dev.mode == "gpu"
    bm, bn, bk, sms = (128, 128, 64, 8) if big else (32, 32, 16, 4)
    matmul_kernel_persistent[(sms,)](dev.put(a), dev.put(b), c, M, N, K, K, 1, N, 1, N, 1, BLOCK_SIZE_M=bm,
                                     BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, NUM_SMS=sms,
                                     WARP_SPECIALIZE=False, num_warps=8 if big else 4, num_stages=3)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    got = dev.get(c).astype(np.float64)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-2


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_hints_vectorise_and_pipeline(ptxas, target):
    from test_compile import assemble

    p = "*fp16:16"
    sig = {"a_ptr": p, "b_ptr": p, "c_ptr": p, "M": "i32:16", "N": "i32:16", "K": "i32:16", "stride_am": "i32:16",
           "stride_ak": "i32", "stride_bk": "i32:16", "stride_bn": "i32", "stride_cm": "i32:16", "stride_cn": "i32"}
    k = tiles.compile(matmul_kernel_persistent, signature=sig, target=target, num_warps=8, num_stages=3,
                      equal_to_1=("stride_ak", "stride_bn", "stride_cn"),
                      constexprs=dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=64, GROUP_SIZE_M=8,
                                      NUM_SMS=132, WARP_SPECIALIZE=False))
    ir = k.asm["tir_opt"]
    assert "hint {multiple_of = [128" in ir and "hint {max_contiguous = [128" in ir
    # Both operands: 16-byte cp.async into ring buffers (B is N-contiguous only through the hints).
    assert ir.count("async_copy {buf = 0") >= 2 and ir.count("async_copy {buf = 1") >= 2
    assert "vector = 1}" not in ir.split("for")[1].split("dot")[0]
    assemble(ptxas, k.asm["ptx"], target)


@tiles.jit
def scalar_hint_kernel(x_ptr, n, BLOCK: tl.constexpr):
    start = tl.multiple_of(tl.program_id(0) * BLOCK, BLOCK)
    offs = tl.max_constancy(start + tl.arange(0, BLOCK), 1)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def test_scalar_hints(dev, rng):
    x = rng.standard_normal(100).astype(np.float32)
    d = dev.put(x)
    scalar_hint_kernel[(2,)](d, 100, BLOCK=64)
    np.testing.assert_array_equal(dev.get(d), x + 1)


def test_hints_validate():
    @tiles.jit
    def bad(x_ptr):
        offs = tl.multiple_of(tl.arange(0, 16), [4, 4])
        tl.store(x_ptr + offs, 1.0)

    with pytest.raises(tiles.CompilationError, match="2 values for a tensor of rank 1"):
        tiles.compile(bad, signature={"x_ptr": "*fp32"})


@tiles.jit
def hinted_statement_kernel(dst, src, off, N, BLOCK: tl.constexpr, HINT: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offsets = offsets + tl.load(off)
    if HINT:
        # A nest of hints as a bare statement marks `offsets` itself (Triton's semantics).
        tl.max_contiguous(tl.multiple_of(offsets, 1024), 1024)
    tl.store(dst + offsets, tl.load(src + offsets, mask=offsets < N), mask=offsets < N)


@pytest.mark.parametrize("hint", [False, True])
def test_nested_hint_statements_mark_the_value(dev, rng, ptxas, hint):
    from test_compile import assemble

    src = rng.standard_normal(1024).astype(np.float32)
    dst = dev.put(np.zeros(1024, np.float32))
    hinted_statement_kernel[(1,)](dst, dev.put(src), dev.put(np.zeros(1, np.int32)), 1024, BLOCK=1024, HINT=hint)
    np.testing.assert_array_equal(dev.get(dst), src)
    k = tiles.compile(hinted_statement_kernel, signature={"dst": "*fp32:16", "src": "*fp32:16", "off": "*i32",
                                                          "N": "i32:16"}, constexprs={"BLOCK": 1024, "HINT": hint})
    assert ("ld.global.v4.b32" in k.asm["ptx"]) == hint
    assemble(ptxas, k.asm["ptx"], "sm_90a")
