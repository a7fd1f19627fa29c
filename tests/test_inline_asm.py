"""`tl.inline_asm_elementwise`: PTX applied elementwise, with `pack` elements per statement
(narrow elements packed into 32-bit registers), several results, on the GPU; compile-only
twins check the PTX with ptxas; the interpreter refuses clearly."""

import numpy as np
import pytest

import tiles
import tiles.language as tl


@tiles.jit
def shift_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    s = tl.full([BLOCK], n, tl.int32)
    z = tl.inline_asm_elementwise("shf.l.wrap.b32 $0, $1, $2, $3;", "=r,r, r, r", [x, y, s], dtype=tl.int32,
                                  is_pure=True, pack=1)
    tl.store(z_ptr + offs, z)


@tiles.jit
def bytes_to_float_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    # Four uint8 per statement (one register in), four fp32 out.
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.inline_asm_elementwise(
        """{
        .reg .b8 a<4>;
        mov.b32 {a0, a1, a2, a3}, $4;
        cvt.rn.f32.u8 $0, a0;
        cvt.rn.f32.u8 $1, a1;
        cvt.rn.f32.u8 $2, a2;
        cvt.rn.f32.u8 $3, a3;
        }""", "=r,=r,=r,=r,r", [x], dtype=tl.float32, is_pure=True, pack=4)
    tl.store(y_ptr + offs, y)


@tiles.jit
def two_results_kernel(x_ptr, lo_ptr, hi_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    lo, hi = tl.inline_asm_elementwise("mov.b64 {$0, $1}, $2;", "=r,=r,l", [x], dtype=(tl.int32, tl.int32),
                                       is_pure=True, pack=1)
    tl.store(lo_ptr + offs, lo)
    tl.store(hi_ptr + offs, hi)


@tiles.jit
def pointer_operands_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    # Pointer operands are their 64-bit addresses ("l"): the asm loads, shifts and stores itself.
    x_ptrs = x_ptr + tl.arange(0, BLOCK)
    y_ptrs = y_ptr + tl.arange(0, BLOCK)
    tl.inline_asm_elementwise("ld.global.b8 $0, [$1]; shl.b32 $0, $0, 3; st.global.b8 [$2], $0;", "=r,l,l",
                              [x_ptrs, y_ptrs], dtype=tl.int8, is_pure=False, pack=1)


@pytest.mark.gpu
def test_inline_asm_on_the_gpu(rng):
    import torch

    n = 128
    x = rng.integers(0, 2**31 - 1, n, dtype=np.int64).astype(np.int32)
    y = rng.integers(0, 2**31 - 1, n, dtype=np.int64).astype(np.int32)
    z = torch.zeros(n, dtype=torch.int32, device="cuda")
    shift_kernel[(1,)](torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda(), z, 5, BLOCK=n)
    ux, uy = x.astype(np.uint64) & 0xFFFFFFFF, y.astype(np.uint64) & 0xFFFFFFFF
    want = (((uy << 32) | ux) << 5 >> 32) & 0xFFFFFFFF
    np.testing.assert_array_equal(z.cpu().numpy().astype(np.uint64) & 0xFFFFFFFF, want)

    b = rng.integers(0, 256, 512).astype(np.uint8)
    f = torch.full((512,), float("nan"), device="cuda")
    bytes_to_float_kernel[(1,)](torch.from_numpy(b).cuda(), f, BLOCK=512)
    np.testing.assert_array_equal(f.cpu().numpy(), b.astype(np.float32))

    w = rng.integers(-2**62, 2**62, 256, dtype=np.int64)
    lo = torch.zeros(256, dtype=torch.int32, device="cuda")
    hi = torch.zeros(256, dtype=torch.int32, device="cuda")
    two_results_kernel[(1,)](torch.from_numpy(w).cuda(), lo, hi, BLOCK=256)
    np.testing.assert_array_equal(lo.cpu().numpy(), w.view(np.int32)[0::2])
    np.testing.assert_array_equal(hi.cpu().numpy(), w.view(np.int32)[1::2])

    b = rng.integers(0, 256, 512).astype(np.uint8)
    out = torch.zeros(512, dtype=torch.uint8, device="cuda")
    pointer_operands_kernel[(1,)](torch.from_numpy(b).cuda(), out, BLOCK=512)
    np.testing.assert_array_equal(out.cpu().numpy(), (b.astype(np.int32) << 3).astype(np.uint8))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_inline_asm_assembles(ptxas, target):
    from test_compile import assemble

    k = tiles.compile(shift_kernel, signature={"x_ptr": "*i32", "y_ptr": "*i32", "z_ptr": "*i32", "n": "i32"},
                      constexprs={"BLOCK": 128}, target=target)
    assert "shf.l.wrap.b32" in k.asm["ptx"]
    assemble(ptxas, k.asm["ptx"], target)
    k = tiles.compile(bytes_to_float_kernel, signature={"x_ptr": "*u8", "y_ptr": "*fp32"}, constexprs={"BLOCK": 512},
                      target=target)
    assert k.asm["ptx"].count("cvt.rn.f32.u8") >= 4
    assemble(ptxas, k.asm["ptx"], target)
    k = tiles.compile(two_results_kernel, signature={"x_ptr": "*i64", "lo_ptr": "*i32", "hi_ptr": "*i32"},
                      constexprs={"BLOCK": 256}, target=target)
    assemble(ptxas, k.asm["ptx"], target)
    ir = k.asm["tir"]
    assert 'inline_asm {asm = "mov.b64 {$0, $1}, $2;", constraints = "=r,=r,l", pack = 1, pure}' in ir
    k = tiles.compile(pointer_operands_kernel, signature={"x_ptr": "*u8", "y_ptr": "*u8"}, constexprs={"BLOCK": 512},
                      target=target)
    assert k.asm["ptx"].count("st.global.b8") == 4  # one statement per element, 4 per thread
    assemble(ptxas, k.asm["ptx"], target)
    assert tiles._tiles.parse_ir(ir).text() == ir  # the text form round-trips


def test_bad_constraints_are_reported(ptxas):
    @tiles.jit
    def bad(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r", [x], dtype=tl.int32, is_pure=True, pack=1)
        tl.store(x_ptr + offs, y)

    with pytest.raises(tiles.CompilationError, match="constraints"):
        tiles.compile(bad, signature={"x_ptr": "*i32"}, constexprs={"BLOCK": 128})


def test_interpreter_refuses(monkeypatch):
    monkeypatch.setenv("TILES_INTERPRET", "1")
    x = np.zeros(128, np.int32)
    with pytest.raises(Exception, match="only compiled"):
        shift_kernel[(1,)](x, x, x, 1, BLOCK=128)
