"""Compile-only tests (no GPU): every conformance kernel compiles for sm_80 and sm_90a and
ptxas accepts its PTX. These are the CPU twins of the GPU tests in test_language.py."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading

import numpy as np
import pytest

import tiles
import tiles.language as tl
from kernels import (
    axpby_kernel,
    binary_kernel,
    branch_kernel,
    column_sum_kernel,
    copy_kernel,
    full_kernel,
    grid_kernel,
    helpers_kernel,
    literal_carry_kernel,
    outer_kernel,
    scalar_kernel,
    unary_kernel,
    where_cast_kernel,
)
from test_language import FLOAT_OPS, INT_OPS, NUMERIC

TARGETS = ["sm_80", "sm_90a"]
IR = {"int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16",
      "uint32": "u32", "uint64": "u64", "float16": "fp16", "bfloat16": "bf16", "float32": "fp32",
      "float64": "fp64", "bool": "i1"}


def assemble(ptxas: str, ptx: str, arch: str) -> str:
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        r = subprocess.run([ptxas, f"-arch={arch}", "-v", src, "-o", os.path.join(d, "k.cubin")],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"ptxas rejected the PTX for {arch}:\n{r.stderr}\n{ptx}"
        if "wgmma.mma_async" in ptx:
            # Nothing may touch a wgmma's registers while it runs (see sass_hazards).
            from sass_hazards import find_nvdisasm, hazards

            nvdisasm = find_nvdisasm()
            if nvdisasm is not None:
                sass = subprocess.run([nvdisasm, "-c", os.path.join(d, "k.cubin")], check=True,
                                      capture_output=True, text=True).stdout
                found = hazards(sass)
                assert found == [], "\n".join(found)
        return r.stderr


def compile_and_check(ptxas, fn, signature, constexprs, target, **kw):
    k = tiles.compile(fn, signature=signature, constexprs=constexprs, target=target, **kw)
    for stage in ("tir", "tir_opt", "llir", "ptx"):
        assert k.asm[stage], stage
    report = assemble(ptxas, k.asm["ptx"], target)
    assert "spill" not in report or "0 bytes spill stores" in report, report
    return k


def sig(**kw):
    return {k: v for k, v in kw.items()}


@pytest.mark.parametrize("target", TARGETS)
def test_vector_add_is_vectorised(ptxas, target):
    k = compile_and_check(ptxas, binary_kernel,
                          sig(x_ptr="*fp32:16", y_ptr="*fp32:16", out_ptr="*fp32:16", n="i32:16"),
                          {"OP": "add", "BLOCK": 1024}, target)
    ptx = k.asm["ptx"]
    assert "ld.global.v4.b32" in ptx and "st.global.v4.b32" in ptx
    assert "vector = 4" in k.asm["tir_opt"]
    assert ".reqntid 128" in ptx


def test_unaligned_sizes_fall_back_to_scalar_accesses(ptxas):
    k = compile_and_check(ptxas, copy_kernel, sig(x_ptr="*fp32:16", out_ptr="*fp32:16", n="i32"),
                          {"BLOCK": 1024}, "sm_90a")
    assert "ld.global.v4" not in k.asm["ptx"]


def test_addresses_sit_next_to_their_accesses():
    # LLVM's straight-line strength reduction asks, per address, whether poison there would be
    # UB, scanning a few instructions ahead for a memory use; addresses placed next to their
    # accesses (and `noundef` on predicated, inline-asm ones) keep that cheap. Compile time
    # depends on it (vector add 6.6 -> 3.5 ms to PTX), so the LLVM IR's shape is checked here.
    import re

    k = tiles.compile(copy_kernel, signature=sig(x_ptr="*fp32:16", out_ptr="*fp32:16", n="i32"),
                      constexprs={"BLOCK": 1024}, target="sm_90a")
    lines = [ln.strip() for ln in k.asm["llir"].splitlines()]
    accesses = 0
    for i, ln in enumerate(lines):
        if "ld.global" not in ln and "st.global" not in ln:
            continue
        accesses += 1
        addr = re.search(r"ptr addrspace\(1\) noundef (%[\w.]+)", ln)
        assert addr, ln
        window = lines[max(0, i - 8):i]
        assert any(w.startswith(addr.group(1) + " = getelementptr") for w in window), (ln, window)
    assert accesses >= 2


def test_barriers_stay_in_uniform_control_flow(ptxas):
    # A scalar atomic runs in one thread and broadcasts its result through shared memory between
    # barriers. Collective asm (bar.sync, shfl.sync, mma, wgmma, ...) is `convergent`, so LLVM
    # may not clone a barrier into the thread-dependent branches around it: that hung the GPU.
    import re

    from test_reductions import block_extrema_kernel

    for target in ("sm_80", "sm_90a"):
        k = tiles.compile(block_extrema_kernel, signature=sig(x_ptr="*fp32", max_ptr="*fp32", min_ptr="*fp32", n="i32"),
                          constexprs={"BLOCK": 128}, target=target)
        barriers_ir = len(re.findall(r'asm sideeffect "bar\.sync', k.asm["llir"]))
        assert barriers_ir >= 4 and barriers_ir == k.asm["ptx"].count("bar.sync")
        assert re.search(r"attributes #\d+ = \{[^}]*convergent", k.asm["llir"])
        assemble(ptxas, k.asm["ptx"], target)


@pytest.mark.parametrize("name", NUMERIC + ["bool"])
def test_copy_every_dtype(ptxas, name):
    t = IR[name]
    for target in TARGETS:
        compile_and_check(ptxas, copy_kernel, sig(x_ptr=f"*{t}:16", out_ptr=f"*{t}:16", n="i32:16"),
                          {"BLOCK": 256}, target)


@pytest.mark.parametrize("name", NUMERIC)
def test_binary_ops(ptxas, name):
    is_float = name.startswith("float") or name == "bfloat16"
    t = IR[name]
    for op in FLOAT_OPS if is_float else INT_OPS:
        out = "i1" if op in ("lt", "le", "eq", "ne") else t
        if op == "truediv":
            out = "fp64" if name in ("float64",) else "fp32"
        compile_and_check(ptxas, binary_kernel, sig(x_ptr=f"*{t}", y_ptr=f"*{t}", out_ptr=f"*{out}", n="i32"),
                          {"OP": op, "BLOCK": 128}, "sm_90a")


@pytest.mark.parametrize("name", ["fp32", "fp16", "bf16"])
def test_math(ptxas, name):
    from test_language import UNARY

    for fn in sorted(UNARY):
        out = "fp32" if fn == "sigmoid" and name != "fp32" else name
        for target in TARGETS:
            compile_and_check(ptxas, unary_kernel, sig(x_ptr=f"*{name}", out_ptr=f"*{out}", n="i32"),
                              {"FN": fn, "BLOCK": 256}, target)


def test_fp64_math_is_lowered_without_libdevice(ptxas):
    from test_language import UNARY

    for fn in sorted(UNARY):
        k = compile_and_check(ptxas, unary_kernel, sig(x_ptr="*fp64", out_ptr="*fp64", n="i32"),
                              {"FN": fn, "BLOCK": 256}, "sm_90a")
        assert "__nv_" not in k.asm["ptx"]


OTHER = [
    (axpby_kernel, sig(x_ptr="*fp16", out_ptr="*fp16", alpha="fp32", beta="i32", n="i32"), {"BLOCK": 128}),
    (outer_kernel, sig(x_ptr="*fp32", y_ptr="*fp32", out_ptr="*fp32", M="i32", N="i32", stride_m="i32"),
     {"BLOCK_M": 16, "BLOCK_N": 32}),
    (outer_kernel, sig(x_ptr="*fp32:16", y_ptr="*fp32:16", out_ptr="*fp32:16", M="i32:16", N="i32:16",
                       stride_m="i32:16"), {"BLOCK_M": 64, "BLOCK_N": 64}),
    (column_sum_kernel, sig(x_ptr="*fp32", out_ptr="*fp32", M="i32", N="i32", stride="i32"), {"BLOCK": 128}),
    (literal_carry_kernel, sig(x_ptr="*fp32", out_ptr="*fp32", n="i32", steps="i32"), {"BLOCK": 128}),
    (branch_kernel, sig(x_ptr="*fp32", out_ptr="*fp32", n="i32", threshold="i32"), {"BLOCK": 128}),
    (helpers_kernel, sig(x_ptr="*fp32", out_ptr="*fp32", n="i32"), {"BLOCK": 256, "REPEAT": 3}),
    (where_cast_kernel, sig(x_ptr="*fp32", i_ptr="*i32", h_ptr="*fp16", b_ptr="*i32", n="i32"), {"BLOCK": 128}),
    (scalar_kernel, sig(x_ptr="*i64", out_ptr="*i64", n="i32"), {}),
    (grid_kernel, sig(out_ptr="*i32"), {}),
    (full_kernel, sig(out_ptr="*i32", n="i32", value="i32"), {"BLOCK": 64}),
]


@pytest.mark.parametrize("case", range(len(OTHER)))
@pytest.mark.parametrize("target", TARGETS)
def test_conformance_kernels_compile(ptxas, case, target):
    fn, s, c = OTHER[case]
    compile_and_check(ptxas, fn, s, c, target)


def test_2d_tiles_are_coalesced_along_rows(ptxas):
    fn, s, c = OTHER[2]
    k = compile_and_check(ptxas, fn, s, c, "sm_90a")
    assert "st.global.v4.b32" in k.asm["ptx"]
    assert "#blocked<{sizePerThread = [1, 4]" in k.asm["tir_opt"]


def test_parallel_compiles_in_threads():
    errors = []

    def work(i):
        try:
            tiles.compile(binary_kernel, signature=sig(x_ptr="*fp32", y_ptr="*fp32", out_ptr="*fp32", n="i32"),
                          constexprs={"OP": "add", "BLOCK": 64 << (i % 4)})
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_dump_ir_writes_every_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("TILES_DUMP_IR", str(tmp_path))
    tiles.compile(copy_kernel, signature=sig(x_ptr="*fp32", out_ptr="*fp32", n="i32"), constexprs={"BLOCK": 128})
    names = sorted(p.name for p in tmp_path.iterdir())
    assert any(n.endswith(".ptx") for n in names) and any(n.endswith(".ll") for n in names)
    assert any("assign_layouts" in n for n in names)


def test_exp2_and_rsqrt_flush_subnormals_as_triton(ptxas):
    # Triton lowers tl.exp2 / rsqrt to the flush-to-zero forms (one MUFU instruction each; the
    # IEEE forms add a compare and two multiplies per element: attention's softmax loop ran
    # 424 SASS instructions instead of 302). tl.exp keeps subnormal results, as in Triton.
    for fn, want, unwanted in (("exp2", "ex2.approx.ftz.f32", "ex2.approx.f32"),
                               ("rsqrt", "rsqrt.approx.ftz.f32", "rsqrt.approx.f32"),
                               ("exp", "ex2.approx.f32", "ex2.approx.ftz.f32")):
        k = compile_and_check(ptxas, unary_kernel, sig(x_ptr="*fp32", out_ptr="*fp32", n="i32"),
                              {"FN": fn, "BLOCK": 128}, "sm_90a")
        assert want in k.asm["ptx"] and unwanted not in k.asm["ptx"], fn


@tiles.jit
def transposed_copy_kernel(x_ptr, sxm, sxn, z_ptr, szm, szn, BM: tl.constexpr, BN: tl.constexpr):
    om = tl.arange(0, BM)
    on = tl.arange(0, BN)
    tl.store(z_ptr + om[:, None] * szm + on[None, :] * szn, tl.load(x_ptr + om[:, None] * sxm + on[None, :] * sxn))


@pytest.mark.parametrize("dt", ["fp16", "fp32"])
def test_transposed_copy_reads_and_writes_vectors(ptxas, dt):
    # The load runs along rows, the store along columns: each is coalesced in its own layout and
    # the tile converts between them (through shared memory), as in Triton.
    k = tiles.compile(transposed_copy_kernel,
                      signature={"x_ptr": f"*{dt}:16", "sxm": "i32:16", "z_ptr": f"*{dt}:16", "szn": "i32:16"},
                      constexprs={"sxn": 1, "szm": 1, "BM": 64, "BN": 64}, target="sm_90a")
    ptx = k.asm["ptx"]
    assert "ld.global.v4" in ptx and "st.global.v4" in ptx and "bar.sync" in ptx
    assemble(ptxas, ptx, "sm_90a")


@pytest.mark.gpu
def test_transposed_copy_on_the_gpu(rng):
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(rng.standard_normal((64, 64)).astype(np.float32)).cuda()
    z = torch.empty_like(x)
    transposed_copy_kernel[(1,)](x, x.stride(0), x.stride(1), z, z.stride(1), z.stride(0), BM=64, BN=64)
    assert torch.equal(z, x.t())


@tiles.jit
def cache_hint_kernel(dst, src, n, LC: tl.constexpr, SC: tl.constexpr, LE: tl.constexpr, SE: tl.constexpr):
    offs = tl.arange(0, 512)
    x = tl.load(src + offs, cache_modifier=LC, eviction_policy=LE)
    y = tl.load(src + offs, mask=offs < n, other=1.0, cache_modifier=LC, eviction_policy=LE)
    tl.store(dst + offs, x + y, mask=offs < n, cache_modifier=SC, eviction_policy=SE)
    tl.store(dst + 512 + offs, x, cache_modifier=SC, eviction_policy=SE)


@pytest.mark.parametrize("lc, sc, le, se, want", [
    ("", "", "", "", ["ld.global.v4.b32", "st.global.v4.b32"]),
    (".cg", ".wt", "", "", ["ld.global.cg.v4.b32", "st.global.wt.v4.b32"]),
    (".ca", ".cs", "", "evict_first", ["ld.global.ca.v4.b32", "st.global.cs.v4.b32"]),
    (".cv", ".wb", "evict_last", "evict_last", ["ld.global.cv.v4.b32", "st.global.wb.v4.b32"]),
    ("", "", "evict_last", "evict_first", ["ld.global.L1::evict_last.v4.b32", "st.global.L1::evict_first.v4.b32"]),
])
def test_cache_modifiers_and_eviction_policies_reach_the_ptx(ptxas, lc, sc, le, se, want):
    # Triton's `cache_modifier` / `eviction_policy`: PTX takes a cache operator or an L1
    # eviction priority, not both, so the operator wins where both are given.
    k = tiles.compile(cache_hint_kernel, signature={"dst": "*fp32:16", "src": "*fp32:16", "n": "i32"},
                      constexprs=dict(LC=lc, SC=sc, LE=le, SE=se), target="sm_90a")
    ptx = k.asm["ptx"]
    for w in want:
        assert w in ptx, w
    if not (le or se):
        assert "evict" not in ptx
    if not (lc or sc):
        assert not any(f".global.{c}." in ptx for c in ("ca", "cg", "cs", "cv", "wb", "wt"))
    assemble(ptxas, ptx, "sm_90a")


def test_unknown_cache_modifier_is_a_clear_error():
    with pytest.raises(tiles.CompilationError, match="cache modifier '.xx' not supported"):
        tiles.compile(cache_hint_kernel, signature={"dst": "*fp32", "src": "*fp32", "n": "i32"},
                      constexprs=dict(LC=".xx", SC="", LE="", SE=""))


def test_cache_hinted_accesses_compute_the_same(dev, rng):
    x = rng.standard_normal(512).astype(np.float32)
    out = dev.put(np.zeros(1024, np.float32))
    cache_hint_kernel[(1,)](out, dev.put(x), 300, LC=".cg", SC=".cs", LE="", SE="evict_last")
    got = dev.get(out)
    np.testing.assert_allclose(got[:300], 2 * x[:300], rtol=1e-6)
    np.testing.assert_allclose(got[512:], x, rtol=1e-6)
    assert not got[300:512].any()
