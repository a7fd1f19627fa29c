"""Pointers held as 64-bit integers (Triton's grouped GEMM tutorial): `int64.to(pointer_type)`
and back, in both modes, and the tutorial's kernel itself."""

import numpy as np
import pytest

import tiles
import tiles.language as tl


@tiles.jit
def scale_rows_kernel(table, a0, a1, a2, out, addr_out, n, BLOCK: tl.constexpr):
    # a0..a2 are passed so the interpreter knows their bounds; the kernel reaches them through
    # the table of addresses only.
    g = tl.program_id(0)
    p = tl.load(table + g).to(tl.pointer_type(tl.float32))
    offs = tl.arange(0, BLOCK)
    x = tl.load(p + offs, mask=offs < n, other=0.0)
    tl.store(out + g * BLOCK + offs, x * (g + 1), mask=offs < n)
    tl.store(addr_out + g, p.to(tl.int64))


def test_pointer_table_round_trip(dev, rng):
    n, block = 100, 128
    rows = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    bufs = [dev.put(r) for r in rows]
    table = dev.put(np.array([dev.addr(b) for b in bufs], np.int64))
    out = dev.put(np.full(3 * block, np.nan, np.float32))
    addrs = dev.put(np.zeros(3, np.int64))
    scale_rows_kernel[(3,)](table, *bufs, out, addrs, n, BLOCK=block)
    got = dev.get(out).reshape(3, block)[:, :n]
    np.testing.assert_allclose(got, np.stack(rows) * np.array([[1], [2], [3]], np.float32), rtol=1e-6)
    np.testing.assert_array_equal(dev.get(addrs), dev.get(table))


@tiles.jit
def grouped_matmul_kernel(group_a_ptrs, group_b_ptrs, group_c_ptrs, group_gemm_sizes, g_lds, group_size,
                          NUM_SM: tl.constexpr, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                          BLOCK_SIZE_K: tl.constexpr):
    # Triton's grouped GEMM tutorial, unchanged.
    tile_idx = tl.program_id(0)
    last_problem_end = 0
    for g in range(group_size):
        gm = tl.load(group_gemm_sizes + g * 3)
        gn = tl.load(group_gemm_sizes + g * 3 + 1)
        gk = tl.load(group_gemm_sizes + g * 3 + 2)
        num_m_tiles = tl.cdiv(gm, BLOCK_SIZE_M)
        num_n_tiles = tl.cdiv(gn, BLOCK_SIZE_N)
        num_tiles = num_m_tiles * num_n_tiles
        while (tile_idx >= last_problem_end and tile_idx < last_problem_end + num_tiles):
            k = gk
            lda = tl.load(g_lds + g * 3)
            ldb = tl.load(g_lds + g * 3 + 1)
            ldc = tl.load(g_lds + g * 3 + 2)
            a_ptr = tl.load(group_a_ptrs + g).to(tl.pointer_type(tl.float16))
            b_ptr = tl.load(group_b_ptrs + g).to(tl.pointer_type(tl.float16))
            c_ptr = tl.load(group_c_ptrs + g).to(tl.pointer_type(tl.float16))
            tile_idx_in_gemm = tile_idx - last_problem_end
            tile_m_idx = tile_idx_in_gemm // num_n_tiles
            tile_n_idx = tile_idx_in_gemm % num_n_tiles
            offs_am = tile_m_idx * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
            offs_bn = tile_n_idx * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
            offs_k = tl.arange(0, BLOCK_SIZE_K)
            a_ptrs = a_ptr + offs_am[:, None] * lda + offs_k[None, :]
            b_ptrs = b_ptr + offs_k[:, None] * ldb + offs_bn[None, :]
            accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
            for kk in range(0, tl.cdiv(k, BLOCK_SIZE_K)):  # noqa: B007
                tl.multiple_of(a_ptrs, [16, 16])
                tl.multiple_of(b_ptrs, [16, 16])
                a = tl.load(a_ptrs)
                b = tl.load(b_ptrs)
                accumulator += tl.dot(a, b)
                a_ptrs += BLOCK_SIZE_K
                b_ptrs += BLOCK_SIZE_K * ldb
            c = accumulator.to(tl.float16)
            offs_cm = tile_m_idx * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
            offs_cn = tile_n_idx * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
            c_ptrs = c_ptr + ldc * offs_cm[:, None] + offs_cn[None, :]
            tl.store(c_ptrs, c)
            tile_idx += NUM_SM
        last_problem_end = last_problem_end + num_tiles


@pytest.mark.gpu
def test_grouped_gemm_tutorial(rng):
    import torch

    dims = [(256, 128, 128), (128, 256, 64), (128, 128, 256)]
    a = [torch.from_numpy(rng.standard_normal((m, k)).astype(np.float16)).cuda() for m, n, k in dims]
    b = [torch.from_numpy(rng.standard_normal((k, n)).astype(np.float16)).cuda() for m, n, k in dims]
    c = [torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda") for m, n, k in dims]
    ptrs = [torch.tensor([t.data_ptr() for t in ts], device="cuda") for ts in (a, b, c)]
    sizes = torch.tensor([v for d in dims for v in d], dtype=torch.int32, device="cuda")
    lds = torch.tensor([v for (m, n, k) in dims for v in (k, n, n)], dtype=torch.int32, device="cuda")
    grouped_matmul_kernel[(8,)](*ptrs, sizes, lds, len(dims), NUM_SM=8, BLOCK_SIZE_M=64, BLOCK_SIZE_N=64,
                                BLOCK_SIZE_K=32)
    for x, y, z in zip(a, b, c):
        ref = x.double() @ y.double()
        assert ((z.double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_grouped_gemm_tutorial_assembles(ptxas, target):
    from test_compile import assemble

    sig = {"group_a_ptrs": "*i64", "group_b_ptrs": "*i64", "group_c_ptrs": "*i64", "group_gemm_sizes": "*i32",
           "g_lds": "*i32", "group_size": "i32"}
    k = tiles.compile(grouped_matmul_kernel, signature=sig, target=target, num_warps=4,
                      constexprs=dict(NUM_SM=84, BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=32))
    ptx = k.asm["ptx"]
    assert ("wgmma.mma_async" in ptx) == (target == "sm_90a")
    # The kernel's bare `tl.multiple_of(a_ptrs, [16, 16])` statements hold for `a_ptrs` itself (as
    # in Triton): 16-byte cp.async into the pipeline's buffers, not 2-byte loads.
    assert "cp.async.cg.shared.global" in ptx and "ld.global.b16" not in ptx
    assemble(ptxas, ptx, target)


def test_integer_pointer_casts_need_64_bits():
    @tiles.jit
    def bad(p, out):
        q = tl.load(p).to(tl.pointer_type(tl.float32))
        tl.store(out, tl.load(q))

    with pytest.raises(tiles.CompilationError, match="64-bit integers"):
        tiles.compile(bad, signature={"p": "*i32", "out": "*fp32"})
