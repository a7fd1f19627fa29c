"""Triton idioms seen in real kernels, in both modes: `None` for an optional pointer,
cache/eviction hints, bitcasting casts, `static_range`, `tl.range` options, tuple reductions,
`do_not_specialize`."""

import os
import re
from typing import Any, NamedTuple

import numpy as np
import pytest

import tiles
import tiles.language as tl
from tiles.language.extra import cuda as _cuda
from tiles.language.extra import libdevice


@tiles.jit(do_not_specialize=["n"])
def bias_act_kernel(x_ptr, b_ptr, y_ptr, n, BLOCK: tl.constexpr, ACT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0, cache_modifier=".cg", eviction_policy="evict_last")
    if b_ptr is not None:
        x += tl.load(b_ptr + offs, mask=m)
    if ACT == "relu":
        x = tl.maximum(x, 0.0)
    bits = tl.cast(x, tl.int32, bitcast=True)
    w = tl.clamp(x, -1.0, 1.0)
    for i in tl.static_range(2):
        w += i
    for _ in tl.range(0, 2, loop_unroll_factor=2):
        w += 0
    tl.store(y_ptr + offs, w + (bits.to(tl.float32, bitcast=True) - x), mask=m, cache_modifier=".wb")


def test_optional_pointer_and_hints(dev, rng):
    x = rng.standard_normal(300).astype(np.float32)
    b = rng.standard_normal(300).astype(np.float32)
    y = dev.put(np.full(300, np.nan, np.float32))
    bias_act_kernel[(3,)](dev.put(x), None, y, 300, BLOCK=128, ACT="relu")
    np.testing.assert_allclose(dev.get(y), np.clip(np.maximum(x, 0), -1, 1) + 1, rtol=1e-6)
    bias_act_kernel[(3,)](dev.put(x), dev.put(b), y, 300, BLOCK=128, ACT="none")
    np.testing.assert_allclose(dev.get(y), np.clip(x + b, -1, 1) + 1, rtol=1e-6)


@tiles.jit
def _sum_and_max(a0, b0, a1, b1):
    return a0 + a1, tl.maximum(b0, b1)


@tiles.jit
def _add(a, b):
    return a + b


@tiles.jit
def tuple_reduce_kernel(x_ptr, y_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    a, b = tl.reduce((x, x * 2), 0, _sum_and_max)
    s = tl.associative_scan(x, 0, _add)
    tl.store(y_ptr + tl.arange(0, N), s + a + b)


def test_tuple_reduce_and_scan(dev, rng):
    x = rng.standard_normal(64).astype(np.float32)
    y = dev.put(np.zeros(64, np.float32))
    tuple_reduce_kernel[(1,)](dev.put(x), y, N=64)
    np.testing.assert_allclose(dev.get(y), np.cumsum(x) + x.sum() + (2 * x).max(), rtol=1e-4, atol=1e-4)


def test_identity_tests_are_compile_time(ptxas):
    # `is` / `is not` on a tensor argument is decided while compiling (a pointer is not None).
    from test_compile import assemble

    for target in ("sm_80", "sm_90a"):
        k = tiles.compile(bias_act_kernel, signature={"x_ptr": "*fp32", "b_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"},
                          constexprs={"BLOCK": 128, "ACT": "relu"}, target=target)
        assert k.asm["ptx"].count("ld.global") >= 2  # the bias is loaded
        assemble(ptxas, k.asm["ptx"], target)


def test_testing_helpers():
    import tiles.testing as tt

    tt.assert_close(np.ones(4), np.ones(4) * 1.001)
    with pytest.raises(AssertionError):
        tt.assert_close(np.ones(4), np.ones(4) * 2, atol=0, rtol=0.1)
    assert tt.do_bench_cudagraph(lambda: None) >= 0


@tiles.jit
def tuple_args_kernel(ptrs, params, n, BLOCK: tl.constexpr):
    # Tuples as arguments (Triton >= 3.2): a tuple of pointers and one of scalars.
    x_ptr, y_ptr = ptrs
    scale, shift = params
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * scale + shift, mask=m)


def test_tuple_arguments(dev, rng):
    x = rng.standard_normal(300).astype(np.float32)
    y = dev.put(np.full(300, np.nan, np.float32))
    tuple_args_kernel[(3,)]((dev.put(x), y), (2.5, 1), 300, BLOCK=128)
    # atol: where x·2.5 + 1 cancels, an fma (fp fusion on) and a rounded product differ by
    # an ulp of x·2.5.
    np.testing.assert_allclose(dev.get(y), x * 2.5 + 1, rtol=1e-6, atol=1e-6)


def test_tuple_arguments_compile(ptxas):
    from test_compile import assemble

    k = tiles.compile(tuple_args_kernel, signature={"ptrs": "(*fp32,*fp32)", "params": "(fp32,i32)", "n": "i32"},
                      constexprs={"BLOCK": 128}, target="sm_90a")
    assert "ptrs_0" in k.asm["tir"] and "params_1" in k.asm["tir"]
    assemble(ptxas, k.asm["ptx"], "sm_90a")


class Strided(NamedTuple):
    ptr: Any
    shape: tuple
    stride: tuple


class Epilogue(NamedTuple):
    fn: tl.constexpr
    extra: tuple


@tiles.jit
def _scale_shift(x, scale_ptr, shift):
    return x * tl.load(scale_ptr) + shift


@tiles.jit
def _bumped(values):
    return tl.tuple([v + 1 for v in values if v is not None])


@tiles.jit
def _in_bounds(t, BM: tl.constexpr, BN: tl.constexpr):
    return (tl.arange(0, BM)[:, None] < t.shape[0]) & (tl.arange(0, BN)[None, :] < t.shape[1])


@tiles.jit
def named_tuple_kernel(src, dst, epilogue, opts, BM: tl.constexpr, BN: tl.constexpr):
    # NamedTuples (one with a jit function as a constexpr field), nested tuples holding None and
    # tl.constexpr, a comprehension over a tuple, and a NamedTuple built in the kernel.
    tl.static_assert(opts[1][0] is None)
    tl.static_assert(opts[1][1] == 3)
    out = Strided(ptr=dst.ptr, shape=dst.shape, stride=dst.stride)
    rows, cols = tl.arange(0, BM), tl.arange(0, BN)
    x = tl.load(src.ptr + rows[:, None] * src.stride[0] + cols[None, :] * src.stride[1],
                mask=_in_bounds(src, BM, BN), other=0.0)
    y = epilogue.fn(x, *epilogue.extra)
    a, b = _bumped((opts[0], None, opts[1][2]))
    y = y * a + b * opts[1][1]
    tl.store(out.ptr + rows[:, None] * out.stride[0] + cols[None, :] * out.stride[1], y,
             mask=_in_bounds(out, BM, BN))


def test_named_and_nested_tuple_arguments(dev, rng):
    x = rng.standard_normal((20, 24)).astype(np.float32)
    xd = dev.put(x)
    y = dev.put(np.full((12, 16), np.nan, np.float32))
    scale = dev.put(np.array([1.5], np.float32))
    src = Strided(xd, x.shape, (24, 1))
    dst = Strided(y, (12, 16), (16, 1))
    named_tuple_kernel[(1,)](src, dst, Epilogue(_scale_shift, (scale, 0.25)), (2.0, (None, tl.constexpr(3), 5)),
                             BM=32, BN=32)
    want = (x[:12, :16] * 1.5 + 0.25) * 3.0 + 6 * 3
    np.testing.assert_allclose(dev.get(y), want, rtol=1e-6)


def test_named_and_nested_tuple_arguments_warmup_without_a_gpu(ptxas, monkeypatch):
    # `warmup` compiles for an H100 when no GPU is there; device arrays as the interface shows them.
    from test_compile import assemble

    from tiles.runtime import driver

    monkeypatch.setenv("TILES_INTERPRET", "0")
    monkeypatch.setattr(driver, "available", lambda: False)

    class Dev:
        def __init__(self, addr, shape):
            self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "data": (addr, False), "version": 3}

    src = Strided(Dev(1 << 20, (20, 24)), (20, 24), (24, 1))
    dst = Strided(Dev(1 << 21, (12, 16)), (12, 16), (16, 1))
    k = named_tuple_kernel.warmup(src, dst, Epilogue(_scale_shift, (Dev(1 << 22, (1,)), 0.25)),
                                  (2.0, (None, tl.constexpr(3), 5)), BM=32, BN=32, grid=(1,))
    # One parameter per runtime element: src (ptr, 2 shape, 1 stride: the last, 1, is the constant 1
    # as Triton specialises it), dst (4), the epilogue's
    # scale pointer and shift, opts[0] and opts[1][2]; the function, None and 3 are constants.
    assert k.asm["ptx"].count(".param ") == 12
    for name in ("src_0", "src_2_0", "epilogue_1_0", "opts_1_2"):
        assert name in k.asm["tir"]
    assemble(ptxas, k.asm["ptx"], "sm_90a")


def test_warmup_takes_cpu_tensors(ptxas, monkeypatch):
    # `warmup` compiles without launching: a CPU tensor stands for its dtype (as in Triton), so
    # a machine without a GPU can compile ahead of time from the tensors it has.
    torch = pytest.importorskip("torch")
    from test_compile import assemble

    from tiles.runtime import driver

    monkeypatch.setenv("TILES_INTERPRET", "0")
    monkeypatch.setattr(driver, "available", lambda: False)
    x, y = torch.randn(64), torch.empty(64)
    k = bias_act_kernel.warmup(x, None, y, 64, BLOCK=64, ACT="relu", grid=(1,))
    assert "ld.global" in k.asm["ptx"] and "b_ptr" not in k.asm["tir"]
    assemble(ptxas, k.asm["ptx"], "sm_90a")
    with pytest.raises(tiles.LaunchError, match="CPU tensor") as e:
        bias_act_kernel[(1,)](x, None, y, 64, BLOCK=64, ACT="relu")
    assert isinstance(e.value, ValueError)  # what Triton raises for a CPU tensor


def test_compile_only_launches_compile_and_run_nothing(ptxas, monkeypatch):
    # TILES_COMPILE_ONLY=1: a launch compiles its kernel (for sm_90a without a GPU, from numpy
    # arrays too; ptxas assembles it under TILES_ASSEMBLER=ptxas) and returns it; nothing runs.
    from tiles.runtime import driver

    monkeypatch.setenv("TILES_COMPILE_ONLY", "1")
    monkeypatch.setenv("TILES_INTERPRET", "1")  # compile-only wins over the interpreter
    monkeypatch.setenv("TILES_ASSEMBLER", "ptxas")
    monkeypatch.setenv("TRITON_PTXAS_PATH", ptxas)
    monkeypatch.setattr(driver, "available", lambda: False)
    rng = np.random.default_rng()
    x, b = rng.standard_normal(96).astype(np.float32), rng.standard_normal(96).astype(np.float32)
    y = rng.standard_normal(96).astype(np.float32)
    before = y.copy()
    k = bias_act_kernel[(2,)](x, b, y, 96, BLOCK=64, ACT="relu")
    np.testing.assert_array_equal(y, before)
    assert isinstance(k, tiles.compiler.CompiledKernel) and k.metadata.target == "sm_90a"
    assert ".entry bias_act_kernel" in k.asm["ptx"] and k.asm["cubin"][:4] == b"\x7fELF"
    assert bias_act_kernel[lambda meta: (3,)](x, b, y, 96, BLOCK=64, ACT="relu") is k  # from the cache

    @tiles.jit
    def bad(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), tl.arange(0, BLOCK) + tl.arange(0, 2 * BLOCK))

    with pytest.raises(tiles.CompilationError, match="bad") as e:
        bad[(1,)](x, BLOCK=16)
    assert "tl.arange(0, 2 * BLOCK)" in str(e.value)


def test_compile_only_compiles_every_config_an_autotuner_keeps(ptxas, monkeypatch):
    # Under TILES_COMPILE_ONLY an autotuned launch compiles each config pruning keeps (pruning
    # runs once), times none, and stands its first as the choice.
    from tiles.runtime import driver

    monkeypatch.setenv("TILES_COMPILE_ONLY", "1")
    monkeypatch.setattr(driver, "available", lambda: False)
    pruned = []

    def prune(configs, nargs, **kw):
        pruned.append(nargs["n"])
        return [c for c in configs if c.kwargs["BLOCK"] <= nargs["n"]]

    @tiles.jit
    def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr, K: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * K, mask=offs < n)

    configs = [tiles.Config({"BLOCK": b}, num_warps=w) for b, w in [(128, 4), (32, 1), (64, 2), (4096, 8)]]
    tuned = tiles.autotune(configs, key=["n"], prune_configs_by={"early_config_prune": prune})(
        tiles.heuristics({"K": lambda a: 3})(scale))
    x = np.random.default_rng().standard_normal(200).astype(np.float32)
    y = x.copy()
    k = tuned[lambda meta: (tiles.cdiv(200, meta["BLOCK"]),)](x, y, 200)
    np.testing.assert_array_equal(y, x)
    assert pruned == [200] and tuned.best_config is configs[0]
    assert k.metadata.num_warps == 4 and k.constexprs["BLOCK"] == 128 and k.constexprs["K"] == 3
    assert sorted(s.compiled.metadata.num_warps for s in scale.cache.values()) == [1, 2, 4]


def test_compile_only_skips_configs_that_fail_to_compile(ptxas, monkeypatch, capsys):
    # As a timed autotune does: a config failing a static_assert (tritonbench's fused attention
    # asserts BLOCK_N <= HEAD_DIM across its configs) is skipped, the first that compiles
    # stands; when none compiles, the first failure is named.
    from tiles.runtime import driver

    monkeypatch.setenv("TILES_COMPILE_ONLY", "1")
    monkeypatch.setattr(driver, "available", lambda: False)

    @tiles.jit
    def rows(x_ptr, y_ptr, D: tl.constexpr, BLOCK: tl.constexpr):
        tl.static_assert(BLOCK <= D)
        offs = tl.program_id(0) * D + tl.arange(0, D)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2)

    configs = [tiles.Config({"BLOCK": b}, num_warps=w) for b, w in [(128, 4), (64, 2), (32, 1)]]
    tuned = tiles.autotune(configs, key=["D"])(rows)
    x = np.random.default_rng().standard_normal(256).astype(np.float32)
    y = x.copy()
    k = tuned[(4,)](x, y, D=64)
    np.testing.assert_array_equal(y, x)
    assert tuned.best_config is configs[1] and k.metadata.num_warps == 2
    assert "skipping" not in capsys.readouterr().err  # a failed static_assert is quiet, as in Triton
    from tiles.errors import AutotunerError

    with pytest.raises(AutotunerError, match=r"every config of rows failed; the first, \[BLOCK: 128") as e:
        tuned[(8,)](x, y, D=32 // 2)
    assert isinstance(e.value.__cause__, tiles.CompilationError)


def test_compile_only_runs_each_configs_pre_hook_before_its_compile(ptxas, monkeypatch):
    # tritonbench's stream-K matmul sets its host descriptors' block shapes in a config
    # pre_hook: compile-only runs it before each config's compile and before the launch, as a
    # timed autotune does, so each config compiles with its own blocks.
    from tiles.runtime import driver
    from tiles.tools.tensor_descriptor import TensorDescriptor

    monkeypatch.setenv("TILES_COMPILE_ONLY", "1")
    monkeypatch.setenv("TILES_ASSEMBLER", "ptxas")
    monkeypatch.setenv("TRITON_PTXAS_PATH", ptxas)
    monkeypatch.setattr(driver, "available", lambda: False)

    @tiles.jit
    def copy_rows(x_desc, y_desc, BLOCK: tl.constexpr):
        t = x_desc.load([tl.program_id(0) * BLOCK, 0])
        y_desc.store([tl.program_id(0) * BLOCK, 0], t * 2)

    def set_blocks(nargs):
        nargs["x_desc"].block_shape = [nargs["BLOCK"], 32]
        nargs["y_desc"].block_shape = [nargs["BLOCK"], 32]

    configs = [tiles.Config({"BLOCK": b}, num_warps=4, pre_hook=set_blocks) for b in (64, 16)]
    tuned = tiles.autotune(configs, key=[])(copy_rows)
    x = np.random.default_rng().standard_normal((128, 32)).astype(np.float32)
    y = np.empty_like(x)
    xd, yd = TensorDescriptor.from_tensor(x, [1, 1]), TensorDescriptor.from_tensor(y, [1, 1])
    k = tuned[lambda meta: (128 // meta["BLOCK"],)](xd, yd)
    assert tuned.best_config is configs[0] and k.constexprs["BLOCK"] == 64
    assert xd.block_shape == [64, 32] and len(copy_rows.cache) == 2


def test_a_compiled_kernel_takes_every_parameter_or_the_runtime_ones(ptxas, monkeypatch):
    # FlagGems' LibEntry launches the CompiledKernel of a cache hit with the runtime parameters
    # alone; Triton's own call passes every parameter. Both reach the launch in full order.
    from test_compile import assemble

    from tiles.runtime import driver

    monkeypatch.setenv("TILES_INTERPRET", "0")
    monkeypatch.setattr(driver, "available", lambda: False)
    x, y = tiles.MockTensor(tl.float32, [64]), tiles.MockTensor(tl.float32, [64])
    k = bias_act_kernel.warmup(x, None, y, 64, BLOCK=64, ACT="relu", grid=(1,))
    assemble(ptxas, k.asm["ptx"], "sm_90a")
    seen = []
    monkeypatch.setattr(driver, "current_stream", lambda: 0)
    grids = []
    monkeypatch.setattr(type(k), "_launch_natively",
                        lambda self, g0, g1, g2, s, args: grids.append((g0, g1, g2)) or seen.append(args) or True)
    k[(1,)](x, None, y, 64, 64, "relu")
    k[(1,)](x, None, y, 64)  # the parameters not declared constexpr (b_ptr's None is a constant)
    k[(1,)](x, y, 64)  # those the compile kept
    assert seen[0] == seen[1] == seen[2] and seen[1][3:] == (64, 64, "relu") and seen[1][1] is None
    k[[2, 3]](x, y, 64)
    k[lambda meta: (meta["n"] // meta["BLOCK"], 1, 5)](x, y, 128)  # the grid sees constexprs too
    assert grids == [(1, 1, 1)] * 3 + [(2, 3, 1), (2, 1, 5)]
    with pytest.raises(tiles.LaunchError, match=r"takes 6 arguments .* or its 4 runtime ones, got 2"):
        k[(1,)](x, y)


def test_an_interpreted_launch_returns_a_kernel_that_launches_again(monkeypatch):
    # In the interpreter a launch returns a kernel, as a compiled launch returns its
    # CompiledKernel: FlagGems' LibEntry caches it and launches it again with every parameter,
    # the runtime ones, or those a compile keeps; the constexprs stay the first launch's.
    monkeypatch.setenv("TILES_INTERPRET", "1")

    def ref(v):  # bias_act_kernel's output for its activated input
        return np.clip(v, -1.0, 1.0) + 1.0

    rng = np.random.default_rng()
    x, b = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    y = np.zeros(64, np.float32)
    k = bias_act_kernel[(1,)](x, None, y, 64, BLOCK=64, ACT="relu")
    np.testing.assert_allclose(y, ref(np.maximum(x, 0)), rtol=1e-6)
    for args in [(x, None, y, 64, 64, "relu"), (x, None, y, 64), (x, y, 64)]:
        y[:] = 0
        k[(1,)](*args)
        np.testing.assert_allclose(y, ref(np.maximum(x, 0)), rtol=1e-6)
    x2 = rng.standard_normal(128).astype(np.float32)
    y2 = np.zeros(128, np.float32)
    k[lambda meta: (meta["n"] // meta["BLOCK"],)](x2, y2, 128)  # the grid sees the constexprs
    np.testing.assert_allclose(y2, ref(np.maximum(x2, 0)), rtol=1e-6)
    k2 = bias_act_kernel[(1,)](x, b, y, 64, BLOCK=64, ACT="none")
    y[:] = 0
    k2[(1,)](x, b, y, 64)
    # float32 rounds x + b and the + 1: near x + b = -1 that is an ulp of 1, not of the result
    np.testing.assert_allclose(y, ref(x.astype(np.float64) + b), rtol=1e-6, atol=2e-7)
    with pytest.raises(tiles.LaunchError, match=r"takes 6 arguments .* or its 4 runtime ones, got 2"):
        k[(1,)](x, y)


@pytest.mark.gpu
def test_a_compiled_kernel_launches_with_the_runtime_parameters_alone(rng):
    torch = pytest.importorskip("torch")
    xn = rng.standard_normal(64).astype(np.float32)
    x, y = torch.from_numpy(xn).cuda(), torch.full((64,), float("nan"), device="cuda")
    k = bias_act_kernel.warmup(x, None, y, 64, BLOCK=64, ACT="none", grid=(1,))
    for args in ((x, y, 64), (x, None, y, 64)):  # those the compile kept; those not declared constexpr
        y.fill_(float("nan"))
        k[(1,)](*args)
        torch.cuda.synchronize()
        np.testing.assert_allclose(y.cpu().numpy(), np.clip(xn, -1, 1) + 1, rtol=1e-6)


@pytest.mark.gpu
def test_pinned_host_tensors_are_kernel_arguments(rng):
    # Page-locked host memory is reachable from the GPU at its own address (as Triton allows).
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(rng.standard_normal(64).astype(np.float32)).pin_memory()
    y = torch.zeros(64).pin_memory()
    bias_act_kernel[(1,)](x, None, y, 64, BLOCK=64, ACT="none")
    torch.cuda.synchronize()
    xn = x.numpy()
    np.testing.assert_allclose(y.numpy(), np.clip(xn, -1, 1) + 1, rtol=1e-6)


def test_tuple_item_assignment_is_a_compile_error():
    @tiles.jit
    def k(x_ptr):
        t = tl.tuple([5, 6, 7])
        t[0] = 0
        tl.store(x_ptr, t[0])

    with pytest.raises(tiles.CompilationError):
        tiles.compile(k, signature={"x_ptr": "*i32"})


@tiles.jit
def hinted_range_kernel(x_ptr, out_ptr, n, ROWS: tl.constexpr, FLAT: tl.constexpr):
    # Python's `range` with `tl.range`'s loop hints, as Unsloth's MoE kernels write it.
    cols = tl.arange(0, 16)
    acc = tl.zeros((16,), tl.float32)
    for r in range(ROWS, flatten=FLAT):
        for c in range(0, n, 16, num_stages=2, loop_unroll_factor=1):
            acc += tl.load(x_ptr + r * n + c + cols)
    tl.store(out_ptr + cols, acc)


@pytest.mark.parametrize("flat", [False, True])
def test_python_range_takes_loop_hints(dev, rng, flat):
    x = rng.standard_normal((3, 64)).astype(np.float32)
    out = dev.put(np.full(16, np.nan, np.float32))
    hinted_range_kernel[(1,)](dev.put(x), out, 64, ROWS=3, FLAT=flat)
    ref = x.astype(np.float64).reshape(3, 4, 16).sum(axis=(0, 1))
    np.testing.assert_allclose(dev.get(out), ref, rtol=1e-5, atol=1e-5)


def test_python_range_rejects_unknown_keywords():
    @tiles.jit
    def k(x_ptr, n):
        for i in range(n, flaten=True):
            tl.store(x_ptr + i, i)

    with pytest.raises(tiles.CompilationError, match="unexpected keyword argument 'flaten'") as e:
        tiles.compile(k, signature={"x_ptr": "*i32", "n": "i32"})
    assert "^" in str(e.value)


@tiles.jit
def fp8_bytes_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m).to(tl.float32)
    # tl.add/sub/mul/to_tensor are the functions behind the operators; reduce_or is a bitwise reduction.
    y = tl.sub(tl.mul(tl.add(x, tl.to_tensor(1)), 2.0), 1)
    tl.store(out_ptr + offs, y, mask=m)
    tl.store(out_ptr + n + offs, tl.reduce_or(offs * m, 0).to(tl.float32) + offs * 0, mask=m)


def test_reinterpret_bytes_as_fp8(dev, rng):
    import ml_dtypes

    n = 100
    x = rng.standard_normal(n).astype(ml_dtypes.float8_e5m2)
    raw = dev.put(x.view(np.uint8))  # bytes in memory; the kernel reads them as fp8e5
    out = dev.put(np.zeros(2 * n, np.float32))
    fp8_bytes_kernel[(1,)](tiles.reinterpret(raw, tl.float8e5), out, n, BLOCK=128)
    got = dev.get(out)
    np.testing.assert_array_equal(got[:n], (x.astype(np.float32) + 1) * 2 - 1)
    assert (got[n:] == np.bitwise_or.reduce(np.arange(n))).all()


def test_triton_error_classes():
    assert issubclass(tiles.CompilationError, tiles.TritonError)
    assert issubclass(tiles.OutOfResources, tiles.TritonError)
    assert issubclass(tiles.LaunchError, tiles.TritonError)
    # Triton also names it in its errors modules.
    from tiles.compiler.errors import TritonError as compiler_name
    from tiles.errors import TritonError as errors_name

    assert errors_name is compiler_name is tiles.TritonError


@tiles.constexpr_function
def _block_for(n):
    return max(16, 1 << (n - 1).bit_length())


@tiles.must_use_result
@tiles.jit
def _clamp_add(a, b):
    return tl.minimum(a + b, 4.0), a - b


@tiles.jit
def map_kernel(x_ptr, y_ptr, out_ptr, N: tl.constexpr):
    B: tl.constexpr = _block_for(N)
    tl.static_assert(B * 2 <= tl.TRITON_MAX_TENSOR_NUMEL)
    offs = tl.arange(0, B)
    m = offs < N
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr)  # a scalar, broadcast against the tile
    s, d = tl.map_elementwise(_clamp_add, x, y)
    tl.store(out_ptr + offs, s, mask=m)
    tl.store(out_ptr + N + offs, d, mask=m)


def test_map_elementwise_and_constexpr_functions(dev, rng):
    n = 50
    x = rng.standard_normal(n).astype(np.float32) * 4
    y = rng.standard_normal(1).astype(np.float32)
    out = dev.put(np.zeros(2 * n, np.float32))
    map_kernel[(1,)](dev.put(x), dev.put(y), out, N=n)
    got = dev.get(out)
    np.testing.assert_allclose(got[:n], np.minimum(x + y[0], 4.0), rtol=1e-6)
    np.testing.assert_allclose(got[n:], x - y[0], rtol=1e-6)


@tiles.jit
def _divmod2(a0, a1, b0, b1):
    # pack=2: two elements of each argument in, two of each result out (result after result).
    return a0 // b0, a1 // b1, a0 % b0, a1 % b1


@tiles.jit
def packed_map_kernel(a_ptr, b_ptr, q_ptr, r_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    q, r = tl.map_elementwise(_divmod2, tl.load(a_ptr + offs), tl.load(b_ptr + offs), pack=2)
    tl.store(q_ptr + offs, q)
    tl.store(r_ptr + offs, r)


def test_map_elementwise_with_pack(dev, rng):
    a = rng.integers(0, 2**32, 256, dtype=np.uint32)
    b = rng.integers(1, 2**20, 256, dtype=np.uint32)
    q, r = dev.put(np.zeros(256, np.uint32)), dev.put(np.zeros(256, np.uint32))
    packed_map_kernel[(1,)](dev.put(a), dev.put(b), q, r, BLOCK=256)
    np.testing.assert_array_equal(dev.get(q), a // b)
    np.testing.assert_array_equal(dev.get(r), a % b)


@tiles.jit
def _sign_of_difference(x, y):
    # Branches on its arguments' values, as Triton's scalar functions may.
    if x < y:
        return -1
    elif x == y:
        return 0
    else:
        return 1


@tiles.jit
def _clip_scaled(x, lo):
    y = x * 2.0
    if y < lo:
        y = lo
    return y


@tiles.jit
def branching_map_kernel(x_ptr, y_ptr, s_ptr, c_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x, y = tl.load(x_ptr + offs), tl.load(y_ptr + offs)
    tl.store(s_ptr + offs, tl.map_elementwise(_sign_of_difference, x, y))
    tl.store(c_ptr + offs, tl.map_elementwise(_clip_scaled, x.to(tl.float32), -3.0))


def test_map_elementwise_functions_that_branch(dev, rng):
    x = rng.integers(-5, 5, 256).astype(np.int32)
    y = rng.integers(-5, 5, 256).astype(np.int32)
    s, c = dev.put(np.full(256, 7, np.int32)), dev.put(np.zeros(256, np.float32))
    branching_map_kernel[(1,)](dev.put(x), dev.put(y), s, c, BLOCK=256)
    np.testing.assert_array_equal(dev.get(s), np.sign(x - y))
    np.testing.assert_array_equal(dev.get(c), np.maximum(x * 2.0, -3.0).astype(np.float32))


def test_branching_map_elementwise_compiles_to_selects(ptxas):
    from test_compile import assemble

    k = tiles.compile(branching_map_kernel, signature={"x_ptr": "*i32", "y_ptr": "*i32", "s_ptr": "*i32",
                                                       "c_ptr": "*fp32"}, constexprs={"BLOCK": 256}, target="sm_90a")
    ptx = k.asm["ptx"]
    assert "selp" in ptx and not re.search(r"^\s*(@%p\d+\s+)?bra", ptx, re.M)  # selects, no branches
    assemble(ptxas, ptx, "sm_90a")


@tiles.jit
def _returns_on_one_side(x):
    if x > 0:
        return x
    return -x


@tiles.jit
def one_sided_map_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.map_elementwise(_returns_on_one_side, tl.load(x_ptr + offs)))


def test_map_elementwise_function_with_an_early_return(dev, rng):
    # `if c: return a` then more code: the rest is the `else` side, selected element by element.
    x = rng.integers(-50, 50, 64).astype(np.int32)
    xd = dev.put(x)
    one_sided_map_kernel[(1,)](xd, BLOCK=64)
    np.testing.assert_array_equal(dev.get(xd), np.abs(x))


@tiles.jit
def _mul(a, b):
    return a * b


@tiles.jit
def tensor_methods_kernel(x_ptr, out_ptr, N: tl.constexpr):
    # Methods Triton's tensors carry (Liger-style kernels write `x.cast(tl.float32)`).
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs).cast(tl.float32)
    pos = (x > 0).logical_and(offs < N - 1).logical_or(offs == 0)
    s = x.reduce(0, _add)
    p = x.associative_scan(0, _mul)
    q = x.softmax()
    blocks = offs.cdiv(4)
    (out_ptr + offs).store(tl.where(pos, s, p) + q + blocks)


def test_tensor_methods(dev, rng):
    n = 32
    x = (rng.random(n) + 0.5).astype(np.float16) * np.where(rng.random(n) < 0.5, -1, 1).astype(np.float16)
    out = dev.put(np.full(n, np.nan, np.float32))
    tensor_methods_kernel[(1,)](dev.put(x), out, N=n)
    x64 = x.astype(np.float64)
    offs = np.arange(n)
    pos = ((x64 > 0) & (offs < n - 1)) | (offs == 0)
    q = np.exp(x64 - x64.max()) / np.exp(x64 - x64.max()).sum()
    ref = np.where(pos, x64.sum(), np.cumprod(x64)) + q + (offs + 3) // 4
    np.testing.assert_allclose(dev.get(out), ref, rtol=1e-4, atol=1e-5)


def test_tensor_methods_compile(ptxas):
    from test_compile import assemble

    k = tiles.compile(tensor_methods_kernel, signature={"x_ptr": "*fp16", "out_ptr": "*fp32"}, constexprs={"N": 32},
                      target="sm_90a")
    assemble(ptxas, k.asm["ptx"], "sm_90a")


@tiles.jit
def target_info_kernel(out_ptr):
    # Resolved while compiling, from the target being compiled for.
    if tl.target_info.cuda_capability_geq(9, 0):
        v = 90
    else:
        v = 80
    pair = tl.tuple((1, 2))
    tl.store(out_ptr, v + pair[0] + pair[1] + tl.target_info.is_cuda())


def test_target_info_and_tuple(dev):
    out = dev.put(np.zeros(1, np.int32))
    target_info_kernel[(1,)](out)
    assert dev.get(out)[0] in (84, 94)
    assert tl.str_to_ty("*fp16") == tl.pointer_type(tl.float16) and tl.str_to_ty("i32") == tl.int32
    assert str(tl.void) == "void" and tl.standard.sum is tl.sum


def test_target_info_follows_the_compile_target(ptxas):
    from test_compile import assemble

    for target, value in (("sm_80", "84"), ("sm_90a", "94")):
        k = tiles.compile(target_info_kernel, signature={"out_ptr": "*i32"}, target=target)
        assert f"value = {value}" in k.asm["tir_opt"]
        assemble(ptxas, k.asm["ptx"], target)


def test_ahead_of_time_compile_as_triton(ptxas):
    # triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget(...), options=...)
    from test_compile import assemble

    from tiles.backends.compiler import GPUTarget
    from tiles.compiler import ASTSource

    sig = {"x_ptr": "*fp32", "b_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr",
           "ACT": "constexpr"}
    aligned = {(i,): [["tt.divisibility", 16]] for i in range(4)}
    src = ASTSource(bias_act_kernel, sig, constexprs={"BLOCK": 256, (5,): "relu"}, attrs=aligned)
    k = tiles.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 2, "num_stages": 2})
    assert k.metadata.target == "sm_90a" and k.metadata.num_warps == 2
    assert "ld.global.v4" in k.asm["ptx"]  # the divisibility attributes reached the compiler
    assemble(ptxas, k.asm["ptx"], "sm_90a")
    k80 = tiles.compile(ASTSource(bias_act_kernel, sig, constexprs={"BLOCK": 256, "ACT": "none"}),
                        target=GPUTarget("cuda", 80, 32))
    assert k80.metadata.target == "sm_80" and "ld.global.v4" not in k80.asm["ptx"]
    with pytest.raises(TypeError, match="unknown compile option"):
        tiles.compile(src, target="sm_90a", options={"num_wraps": 4})


def test_triton_module_paths():
    import tiles.language.math as tl_math
    from tiles.language.random import philox
    from tiles.runtime import KernelInterface, OutOfResources
    from tiles.runtime.errors import AutotunerError, PTXASError, TritonError

    assert tl_math.exp2 is tl.exp2 and philox is tl.philox
    assert isinstance(bias_act_kernel, KernelInterface) and isinstance(bias_act_kernel, tiles.KernelInterface)
    assert issubclass(OutOfResources, TritonError) and issubclass(PTXASError, TritonError)
    assert issubclass(AutotunerError, RuntimeError)
    from tiles.runtime import autotuner  # torch's inductor imports PTXASError from here

    assert autotuner.PTXASError is PTXASError and autotuner.OutOfResources is OutOfResources
    # `triton.runtime.jit` is the module (test harnesses import names from it), as is
    # `triton.runtime._allocation` (pytest fixtures reset the allocator with its NullAllocator).
    import types

    from tiles.runtime._allocation import NullAllocator
    from tiles.runtime.jit import TensorWrapper, type_canonicalisation_dict

    assert isinstance(tiles.runtime.jit, types.ModuleType) and tiles.runtime.jit.jit is tiles.jit
    assert TensorWrapper is tiles.TensorWrapper
    # Test suites import the compiler's errors from `triton.compiler.errors`.
    from tiles.compiler.errors import CompilationError, CompileTimeAssertionFailure

    assert CompilationError is tiles.CompilationError and issubclass(CompileTimeAssertionFailure, CompilationError)
    assert type_canonicalisation_dict["bool"] == "u1" and type_canonicalisation_dict["float8_e4m3fn"] == "fp8e4nv"
    assert all(tl.str_to_ty(v) is not None for v in type_canonicalisation_dict.values())
    assert tl.str_to_ty("u1") == tl.int1 and tl.str_to_ty("*bf16") == tl.pointer_type(tl.bfloat16)
    tiles.set_allocator(lambda size, align, stream: None)
    tiles.set_allocator(NullAllocator())
    with pytest.raises(RuntimeError, match="no allocator"):
        NullAllocator()(64, 16, None)


@tiles.jit
def bool_arg_kernel(out_ptr, flag, BLOCK: tl.constexpr):
    x = tl.arange(0, BLOCK)
    # A tile's shape equals the list (or tuple) of the same sizes, as in Triton's kernels.
    tl.static_assert(x.shape == [BLOCK] and x[:, None].shape == (BLOCK, 1) and x.shape != [BLOCK, 1])
    tl.store(out_ptr + x, tl.where(flag, x, -x))


def test_bool_signature_and_shape_equality(dev, ptxas):
    from test_compile import assemble

    k = tiles.compile(bool_arg_kernel, signature={"out_ptr": "*i32", "flag": "u1"}, constexprs={"BLOCK": 64})
    assemble(ptxas, k.asm["ptx"], "sm_90a")
    for flag in (True, False):
        out = dev.put(np.zeros(64, np.int32))
        bool_arg_kernel[(1,)](out, flag, BLOCK=64)
        np.testing.assert_array_equal(dev.get(out), np.arange(64) * (1 if flag else -1))


@tiles.jit
def while_condition_kernel(x_ptr: tl.const, out_ptr, n):
    # `tl.condition` wraps a while loop's test (with compiler hints); `tl.const` marks a
    # read-only pointer.
    i = 0
    acc = 0.0
    while tl.condition(i < n, disable_licm=True):
        acc += tl.load(x_ptr + i)
        i += 1
    tl.store(out_ptr, acc)


def test_while_condition_and_const_pointer(dev, rng):
    x = (rng.random(37) + 0.5).astype(np.float32)  # positive: a sum near zero would make rtol meaningless
    out = dev.put(np.zeros(1, np.float32))
    while_condition_kernel[(1,)](dev.put(x), out, 37)
    np.testing.assert_allclose(dev.get(out)[0], x.astype(np.float64).sum(), rtol=1e-5)
    assert tl.pi32_t == tl.pointer_type(tl.int32)


def test_while_condition_compiles(ptxas):
    from test_compile import assemble

    k = tiles.compile(while_condition_kernel, signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                      target="sm_90a")
    assemble(ptxas, k.asm["ptx"], "sm_90a")


@tiles.jit
def warps_kernel(out_ptr):
    tl.store(out_ptr, _cuda.num_warps() * 1000 + _cuda.num_threads())


def test_num_warps_and_threads(dev):
    out = dev.put(np.zeros(1, np.int32))
    warps_kernel[(1,)](out, num_warps=8)
    assert dev.get(out)[0] == 8 * 1000 + 256


def test_num_warps_is_a_compile_time_constant():
    k = tiles.compile(warps_kernel, signature={"out_ptr": "*i32"}, num_warps=2, target="sm_90a")
    assert "value = 2064" in k.asm["tir"]


def test_jit_function_introspection():
    assert tuple_args_kernel.src.startswith("def tuple_args_kernel(")
    assert isinstance(tuple_args_kernel.cache_key, str) and len(tuple_args_kernel.cache_key) >= 16
    assert tuple_args_kernel.cache_key != map_kernel.cache_key
    assert tuple_args_kernel.parse().body[0].name == "tuple_args_kernel"
    # FlagGems' LibEntry reads the parameters' names from `signature`.
    assert list(tuple_args_kernel.signature.parameters) == tuple_args_kernel.arg_names


class DataPtrBuffer:
    """What FlagGems' StridedBuffer is: not a tensor, only `data_ptr()` and a `dtype` (a view of
    `base` from element `offset` on). Triton passes any such object as a pointer."""

    def __init__(self, base: Any, offset: int = 0, dtype: Any = None):
        self.base, self.offset = base, offset
        self.dtype = dtype if dtype is not None else base.dtype

    def data_ptr(self) -> int:
        return self.base.data_ptr() + self.offset * self.base.element_size()


def test_objects_with_a_data_ptr_and_dtype_compile_as_pointers(ptxas, monkeypatch):
    from test_compile import assemble

    from tiles.runtime import driver

    monkeypatch.setenv("TILES_INTERPRET", "0")
    monkeypatch.setattr(driver, "available", lambda: False)

    class Addr:
        def __init__(self, addr):
            self.addr = addr

        def data_ptr(self):
            return self.addr

        def element_size(self):
            return 4

    x, y = DataPtrBuffer(Addr(1 << 20), dtype=tl.float32), DataPtrBuffer(Addr(1 << 21), 4, tl.float32)
    k = bias_act_kernel.warmup(x, None, y, 64, BLOCK=64, ACT="relu", grid=(1,))
    assert "*fp32" in k.asm["tir"] and "ld.global" in k.asm["ptx"]
    assemble(ptxas, k.asm["ptx"], "sm_90a")
    assert tiles.runtime.jit.mangle_type(x) == "*fp32"


def test_the_interpreter_names_a_data_ptr_object_it_cannot_read(monkeypatch):
    monkeypatch.setenv("TILES_INTERPRET", "1")

    class Addr:
        def data_ptr(self):
            return 1 << 20

        def element_size(self):
            return 4

    y = np.zeros(64, np.float32)
    with pytest.raises(tiles.LaunchError, match="'x_ptr' \\(DataPtrBuffer\\) has a data_ptr"):
        bias_act_kernel[(1,)](DataPtrBuffer(Addr(), dtype=tl.float32), None, y, 64, BLOCK=64, ACT="relu")


class HostStridedBuffer:
    """FlagGems' StridedBuffer over host memory: a data_ptr(), dtype, shape and stride() in
    elements, which may be negative (its `flip`)."""

    def __init__(self, arr: np.ndarray, flipped: bool = False):
        self.arr = arr  # keeps the memory alive
        step = arr.itemsize
        self.shape = arr.shape
        self._strides = tuple(s // step for s in arr.strides)
        self._ptr = arr.ctypes.data
        if flipped:
            self._ptr += (arr.shape[0] - 1) * arr.strides[0]
            self._strides = (-self._strides[0],) + self._strides[1:]
        self.dtype = tl.float32

    def data_ptr(self):
        return self._ptr

    def stride(self):
        return self._strides


def test_the_interpreter_reads_host_strided_buffers(rng, monkeypatch):
    from kernels import column_sum_kernel

    monkeypatch.setenv("TILES_INTERPRET", "1")
    M, N = 5, 48
    x = rng.standard_normal((M, N)).astype(np.float32)
    y = np.full(N, np.nan, np.float32)
    flipped = HostStridedBuffer(x, flipped=True)  # rows last to first: row 0 is x's last
    stride = flipped.stride()[0]
    column_sum_kernel[(1,)](flipped, HostStridedBuffer(y), 1, N, stride, BLOCK=64)
    np.testing.assert_array_equal(y, x[-1])
    column_sum_kernel[(1,)](flipped, HostStridedBuffer(y), M, N, stride, BLOCK=64)
    np.testing.assert_allclose(y, x.sum(0), rtol=1e-5, atol=1e-6)
    # Its extent is its shape's: a row past it is caught.
    with pytest.raises(tiles.OutOfBoundsError):
        column_sum_kernel[(1,)](flipped, HostStridedBuffer(y), M + 1, N, stride, BLOCK=64)


@pytest.mark.gpu
def test_objects_with_a_data_ptr_and_dtype_are_launched_as_pointers(rng, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TILES_INTERPRET", "0")
    xn = rng.standard_normal(80).astype(np.float32)
    x = torch.from_numpy(xn).cuda()
    for offset in (16, 3, 16):  # aligned, unaligned, and the aligned one again (the native path)
        y = torch.full((64,), float("nan"), device="cuda")
        bias_act_kernel[(1,)](DataPtrBuffer(x, offset), None, DataPtrBuffer(y), 64, BLOCK=64, ACT="none")
        torch.cuda.synchronize()
        np.testing.assert_allclose(y.cpu().numpy(), np.clip(xn[offset:offset + 64], -1, 1) + 1, rtol=1e-6)


def test_a_data_ptr_object_over_host_memory_is_refused_by_name(rng, monkeypatch):
    # No `is_cuda` and no CUDA `device`: the driver is asked whether the GPU reaches the
    # address (as Triton's launcher asks), here answered "no" without a GPU.
    from tiles.runtime import driver

    monkeypatch.setenv("TILES_INTERPRET", "0")
    asked = []
    monkeypatch.setattr(driver, "device_accessible", lambda addr: asked.append(addr) or False)
    x = HostStridedBuffer(rng.standard_normal(64).astype(np.float32))
    y = np.zeros(64, np.float32)
    with pytest.raises(tiles.errors.HostMemoryError, match="'x_ptr' \\(HostStridedBuffer\\) points at host memory"):
        bias_act_kernel[(1,)](x, None, HostStridedBuffer(y), 64, BLOCK=64, ACT="none")
    assert asked == [x.data_ptr()]


@pytest.mark.gpu
def test_a_data_ptr_object_over_host_memory_raises_on_the_gpu(rng, monkeypatch):
    monkeypatch.setenv("TILES_INTERPRET", "0")
    x = HostStridedBuffer(rng.standard_normal(64).astype(np.float32))
    y = HostStridedBuffer(np.zeros(64, np.float32))
    for _ in range(2):  # the second launch too: the native path leaves such objects to Python
        with pytest.raises(tiles.errors.HostMemoryError, match="'x_ptr' \\(HostStridedBuffer\\)"):
            bias_act_kernel[(1,)](x, None, y, 64, BLOCK=64, ACT="none")
    from tiles.runtime import driver

    driver.synchronize()  # the context is still good


@pytest.mark.gpu
def test_a_compiled_kernel_refuses_a_cpu_tensor_by_name(rng, monkeypatch):
    # The native launcher of `ck[grid]` and `ck.run` leaves a tensor not on the GPU to the
    # Python path, which raises rather than let the kernel fault.
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TILES_INTERPRET", "0")
    x, y = torch.randn(64, device="cuda"), torch.empty(64, device="cuda")
    k = bias_act_kernel.warmup(x, None, y, 64, BLOCK=64, ACT="none", grid=(1,))
    host = torch.randn(64)
    with pytest.raises(tiles.errors.HostMemoryError, match="'x_ptr'"):
        k[(1,)](host, None, y, 64)
    with pytest.raises(tiles.errors.HostMemoryError, match="'x_ptr'"):
        k.run(1, 1, 1, 0, k.function, None, None, None, None, host, None, y, 64, 64, "none")
    k[(1,)](x, None, y, 64)
    torch.cuda.synchronize()  # the context is still good
    np.testing.assert_allclose(y.cpu().numpy(), np.clip(x.cpu().numpy(), -1, 1) + 1, rtol=1e-6)


def test_triton_knobs_tiles_does_not_use_read_their_defaults(monkeypatch):
    # torch's inductor reads `knobs.nvidia.libdevice_path` before compiling; an unset knob
    # reads as Triton's default (from its environment variable), never an AttributeError.
    from tiles import knobs

    monkeypatch.delenv("TRITON_LIBDEVICE_PATH", raising=False)
    assert knobs.nvidia.libdevice_path is None and knobs.compilation.listener is None
    assert knobs.compilation.always_compile is False and knobs.compilation.instrumentation_mode == ""
    monkeypatch.setenv("TRITON_LIBDEVICE_PATH", "/opt/libdevice.10.bc")
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")
    assert knobs.nvidia.libdevice_path == "/opt/libdevice.10.bc" and knobs.compilation.always_compile is True
    with knobs.nvidia.scope():
        knobs.nvidia.libdevice_path = "/elsewhere.bc"
        assert knobs.nvidia.libdevice_path == "/elsewhere.bc"
    assert knobs.nvidia.libdevice_path == "/opt/libdevice.10.bc"
    with pytest.raises(AttributeError):
        knobs.nvidia.no_such_setting  # noqa: B018


def test_the_compilation_listener_and_always_compile(tmp_path, monkeypatch):
    # Triton's `knobs.compilation.listener`: told of each compile (stage times) and disk-cache
    # hit (none); `always_compile` makes a kernel in the cache compile again.
    from tiles import knobs

    monkeypatch.setenv("TILES_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TRITON_ALWAYS_COMPILE", raising=False)
    seen = []
    sig = {"x_ptr": "*fp32", "b_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"}
    cx = {"BLOCK": 64, "ACT": "relu"}
    with knobs.compilation.scope():
        knobs.compilation.listener = lambda **kw: seen.append(kw)
        first = tiles.compile(bias_act_kernel, signature=sig, constexprs=cx)
        tiles.compile(tiles.jit(bias_act_kernel.fn), signature=sig, constexprs=cx)
        knobs.compilation.always_compile = True
        tiles.compile(tiles.jit(bias_act_kernel.fn), signature=sig, constexprs=cx)
    assert knobs.compilation.listener is None and knobs.compilation.always_compile is False
    assert [kw["cache_hit"] for kw in seen] == [False, True, False]
    made, hit = seen[0], seen[1]
    assert made["metadata"]["hash"] == first.hash == hit["metadata"]["hash"]
    assert made["metadata"]["target"] == tiles.backends.compiler.GPUTarget("cuda", 90, 32)
    assert made["src"].fn is bias_act_kernel and made["times"].total_lowering > 0 and made["times"].total > 0
    stages = [n for n, _ in made["times"].lowering_stages]
    assert stages[-2:] == ["llvm_opt", "ptx"] and "assign_layouts" in stages  # each pass, then LLVM
    assert hit["times"].total_lowering == 0 and hit["times"].lowering_stages == []


def test_knobs_and_triton_environment_names(monkeypatch):
    # `triton.knobs` settings tiles has map to its own; Triton's environment names work too.
    monkeypatch.delenv("TILES_PRINT_AUTOTUNING", raising=False)
    tiles.knobs.autotuning.print = True
    assert tiles.knobs.autotuning.print and os.environ["TILES_PRINT_AUTOTUNING"] == "1"
    tiles.knobs.autotuning.print = False
    assert not tiles.knobs.autotuning.print
    with tiles.knobs.compilation.scope():
        tiles.knobs.compilation.front_end_debugging = True  # kept, no effect
        assert tiles.knobs.compilation.front_end_debugging is True
    with pytest.raises(AttributeError):
        tiles.knobs.runtime.no_such_knob  # noqa: B018
    from tiles.runtime.jit import interpreting

    monkeypatch.delenv("TILES_INTERPRET", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert interpreting(bias_act_kernel)
    monkeypatch.setenv("TILES_INTERPRET", "0")  # tiles' own name wins
    assert not interpreting(bias_act_kernel)
    # The CUDA tools Triton's knobs name: their version reads as "major.minor" (test harnesses
    # gate TMA tests on it), whether or not the tool is installed.
    monkeypatch.setenv("TRITON_PTXAS_PATH", "/nonexistent/ptxas")
    assert tiles.knobs.nvidia.ptxas.path == "/nonexistent/ptxas"
    major, minor = map(int, tiles.knobs.nvidia.ptxas.version.split("."))
    assert major >= 12 and minor >= 0


def test_knob_groups_scope_copy_and_reset(monkeypatch, tmp_path):
    # What Triton's test fixtures use: `scope()` restores a group's settings, `copy().reset()`
    # gives a fresh group, `knob_descriptors` name the environment variables behind them.
    knobs = tiles.knobs
    monkeypatch.delenv("TILES_CACHE_DIR", raising=False)
    with knobs.cache.scope():
        knobs.cache.dir = str(tmp_path)
        knobs.cache.home_dir = "kept"
        assert knobs.cache.dir == str(tmp_path) and os.environ["TILES_CACHE_DIR"] == str(tmp_path)
    assert knobs.cache.dir is None and "TILES_CACHE_DIR" not in os.environ
    assert knobs.cache.home_dir == os.environ.get("TRITON_HOME", os.path.expanduser("~/"))  # Triton's default
    fusion = knobs.language.default_fp_fusion
    with knobs.language.scope():
        knobs.language.default_fp_fusion = not fusion
    assert knobs.language.default_fp_fusion == fusion
    monkeypatch.delenv("TRITON_ALWAYS_COMPILE", raising=False)
    with knobs.compilation.scope():  # the setting has an effect: it must not outlive the test
        knobs.compilation.always_compile = True
        fresh = knobs.compilation.copy().reset()
        assert isinstance(fresh, knobs.base_knobs) and knobs.compilation.always_compile is True
        assert fresh.always_compile is False  # Triton's default again
    assert knobs.runtime.knob_descriptors["interpret"].key == "TILES_INTERPRET"
    assert knobs.nvidia.copy().reset().ptxas.name == "ptxas" and knobs.propagate_env


def test_extra_cuda_submodules_as_triton_lays_them_out():
    from tiles.language.extra.cuda.gdc import gdc_launch_dependents, gdc_wait
    from tiles.language.extra.cuda.utils import globaltimer, num_threads, num_warps, smid

    cuda = tl.extra.cuda
    assert (gdc_wait, gdc_launch_dependents) == (cuda.gdc_wait, cuda.gdc_launch_dependents)
    assert (globaltimer, smid, num_warps, num_threads) == (cuda.globaltimer, cuda.smid, cuda.num_warps,
                                                          cuda.num_threads)


def test_pre_run_hooks_see_every_launch(dev, rng):
    k = tiles.jit(tuple_args_kernel.fn)
    seen = []
    k.add_pre_run_hook(lambda *args, **kwargs: seen.append((len(args), sorted(kwargs))))
    x = rng.standard_normal(64).astype(np.float32)
    y = dev.put(np.zeros(64, np.float32))
    for _ in range(2):
        k[(1,)]((dev.put(x), y), (2.0, 0), 64, BLOCK=64)
    assert seen == [(3, ["BLOCK"])] * 2
    np.testing.assert_allclose(dev.get(y), 2 * x, rtol=1e-6)
    with pytest.raises(TypeError):
        k.add_pre_run_hook(3)


def test_dtype_interface_of_triton(dev):
    assert (tl.int8.get_int_max_value(), tl.int8.get_int_min_value()) == (127, -128)
    assert (tl.uint16.get_int_max_value(), tl.uint16.get_int_min_value()) == (65535, 0)
    assert tl.int1.is_int1() and tl.int1.get_int_max_value() == 1
    assert [d.codegen_name() for d in (tl.float16, tl.bfloat16, tl.int32, tl.float8e4nv)] == [
        "float16", "bfloat16", "int32", "float8e4nv"]
    assert tl.bfloat16.is_standard_floating() and not tl.float8e5.is_standard_floating()
    assert tl.dtype.is_dtype("fp32") and not tl.dtype.is_dtype("fp33")
    # Float layouts: 1 + exponent + mantissa bits, and the exponent bias (test harnesses decode
    # floats by hand from these).
    for d, bias in ((tl.float16, 15), (tl.bfloat16, 127), (tl.float32, 127), (tl.float64, 1023), (tl.float8e5, 15),
                    (tl.float8e4nv, 7), (tl.float8e4b15, 15)):
        exp_bits = d.primitive_bitwidth - d.fp_mantissa_width - 1
        assert d.exponent_bias == bias and (exp_bits in (4, 5) or bias == 2 ** (exp_bits - 1) - 1)

    @tiles.jit
    def k(out_ptr, DT: tl.constexpr):
        tl.store(out_ptr + tl.arange(0, 2), tl.where(tl.arange(0, 2) == 0, DT.get_int_max_value(),
                                                      DT.get_int_min_value()))

    out = dev.put(np.zeros(2, np.int32))
    k[(1,)](out, DT=tl.int16)
    assert dev.get(out).tolist() == [32767, -32768]


@tl.core._aggregate
class _Cursor:
    # Triton's aggregate classes (triton.language.core._aggregate): named tensors and constants.
    ptr: tl.tensor
    offs: tl.tensor
    step: tl.constexpr

    def __init__(self, ptr, offs, step):
        self.ptr = ptr
        self.offs = offs
        self.step = step

    @tiles.jit
    def load(self, n):
        return tl.load(self.ptr + self.offs, mask=self.offs < n, other=0.0)

    def advanced(self):
        return _Cursor(self.ptr, self.offs + self.step, self.step)


@tiles.jit
def _sum_from(cur, n, ITERS: tl.constexpr):
    acc = tl.zeros(cur.offs.shape, tl.float32)
    for _ in range(ITERS):
        acc += cur.load(n)
        cur = cur.advanced()  # an aggregate carried through the loop
    return acc


@tiles.jit
def aggregate_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    cur = _Cursor(x_ptr, tl.arange(0, BLOCK), BLOCK)
    tl.store(out_ptr + tl.arange(0, BLOCK), _sum_from(cur, n, ITERS))


def test_aggregate_classes(dev, rng):
    x = rng.standard_normal(200).astype(np.float32)
    out = dev.put(np.zeros(64, np.float32))
    aggregate_kernel[(1,)](dev.put(x), out, 200, BLOCK=64, ITERS=4)
    want = np.pad(x, (0, 56)).reshape(4, 64).sum(0)
    np.testing.assert_allclose(dev.get(out), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(AttributeError, match="no field"):
        _Cursor(1, 2, 3).other = 4


def test_aggregate_classes_compile(ptxas):
    from test_compile import assemble

    k = tiles.compile(aggregate_kernel, signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                      constexprs={"BLOCK": 64, "ITERS": 4}, target="sm_90a")
    assemble(ptxas, k.asm["ptx"], "sm_90a")


@tiles.jit
def one_element_tiles_kernel(x_ptr, out_ptr, EXPLICIT: tl.constexpr):
    # Scalars and one-element tiles convert both ways, as in Triton: join of two scalars is a
    # [2] tile, split of a [2] tile two scalars, `item()` / `reshape(x, [])` a scalar, and a
    # one-element tile serves as an `if` condition and a loop bound.
    first = tl.load(x_ptr + tl.arange(0, 1))
    pair = tl.join(tl.load(x_ptr + 1), tl.load(x_ptr + 2))
    tl.static_assert(pair.shape == [2])
    lo, hi = tl.split(pair)
    tl.static_assert(lo.shape == [] and hi.shape == [])
    cond = first > 0
    if EXPLICIT:
        cond = cond.item()
    total = tl.reshape(first, []) + tl.reshape(lo, [1, 1]).sum()
    if cond:
        total += hi
    for _ in range(tl.load(x_ptr + 3 + tl.arange(0, 1))):
        total += 1
    tl.store(out_ptr, total)


@pytest.mark.parametrize("explicit", [False, True])
def test_one_element_tiles_and_scalars(dev, rng, explicit, ptxas):
    from test_compile import assemble

    for _ in range(2):
        x = rng.integers(-5, 6, size=4).astype(np.int32)
        x[3] = abs(x[3])
        out = dev.put(np.zeros(1, np.int32))
        one_element_tiles_kernel[(1,)](dev.put(x), out, EXPLICIT=explicit)
        want = x[0] + x[1] + (x[2] if x[0] > 0 else 0) + x[3]
        assert dev.get(out)[0] == want
    k = tiles.compile(one_element_tiles_kernel, signature={"x_ptr": "*i32", "out_ptr": "*i32"},
                      constexprs={"EXPLICIT": explicit})
    assemble(ptxas, k.asm["ptx"], "sm_90a")


@tiles.jit
def expand_dims_axes_kernel(out_ptr, N: tl.constexpr):
    x = tl.arange(0, N)
    # Axes count in the result, negative ones from its end (Triton's rule).
    tl.static_assert(tl.expand_dims(x, -2).shape == [1, N])
    tl.static_assert(tl.expand_dims(x, (0, -1)).shape == [1, N, 1])
    tl.static_assert(tl.expand_dims(x, (-4, 2, -1)).shape == [1, N, 1, 1])
    tl.static_assert(tl.expand_dims(x, (3, 1, 2)).shape == [N, 1, 1, 1])
    y = tl.expand_dims(x, (-4, 2, -1))
    tl.store(out_ptr + tl.reshape(y, [N]), tl.reshape(y, [N]) * 2)


def test_expand_dims_axes_count_in_the_result(dev):
    out = dev.put(np.zeros(8, np.int32))
    expand_dims_axes_kernel[(1,)](out, N=8)
    np.testing.assert_array_equal(dev.get(out), np.arange(8) * 2)
    with pytest.raises(tiles.CompilationError, match="invalid axis -3"):
        tiles.compile(expand_dims_bad_axis_kernel, signature={"out_ptr": "*i32"})


@tiles.jit
def expand_dims_bad_axis_kernel(out_ptr):
    tl.store(out_ptr + tl.expand_dims(tl.arange(0, 8), -3), 0)


@tiles.jit
def patched_template_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)  # noqa: F841 -- read by the text that replaces the next line
    z = GENERATE_TEST_HERE  # noqa: F821 -- replaced before any launch
    tl.store(out_ptr + offs, z)


def test_unsafe_update_src_replaces_the_body(dev, rng, tmp_path, monkeypatch):
    # Triton's test suites patch a template kernel's text before launching it.
    monkeypatch.setenv("TILES_CACHE_DIR", str(tmp_path))
    template = patched_template_kernel.src
    x = rng.uniform(-2, 2, 64).astype(np.float32)
    for expr, ref in (("x * 2 + 1", x * 2 + 1), ("tl.abs(x) - x", np.abs(x) - x)):
        patched_template_kernel._unsafe_update_src(template.replace("GENERATE_TEST_HERE", expr))
        out = dev.put(np.zeros(64, np.float32))
        patched_template_kernel[(1,)](dev.put(x), out, BLOCK=64)
        np.testing.assert_allclose(dev.get(out), ref, rtol=1e-6)
    k = tiles.compile(patched_template_kernel, signature={"x_ptr": "*fp32", "out_ptr": "*fp32"},
                      constexprs={"BLOCK": 64})
    assert "abs.f32" in k.asm["ptx"]


@tiles.jit
def conditional_expression_kernel(x_ptr, out_ptr, count_ptr):
    pid = tl.program_id(0)
    # A scalar condition runs one side only: one store and one atomic per program.
    tl.store(out_ptr + pid, tl.load(x_ptr + pid)) if pid % 2 == 0 else tl.store(out_ptr + pid, -tl.load(x_ptr + pid))
    old = tl.atomic_add(count_ptr, 1) if pid % 2 == 0 else tl.atomic_add(count_ptr + 1, 1)
    if hasattr(old, "dtype") and not callable(old):  # Python's introspection on a tile
        tl.static_assert(old.dtype == tl.int32)
    pair = tl.interleave(pid, pid * 10)  # two scalars interleave into [pid, 10 pid]
    tl.store(out_ptr + 8 + pid * 2 + tl.arange(0, 2), pair.to(tl.float32))


def test_conditional_expression_runs_one_side(dev, rng, ptxas):
    from test_compile import assemble

    x = rng.standard_normal(8).astype(np.float32)
    out, count = dev.put(np.zeros(24, np.float32)), dev.put(np.zeros(2, np.int32))
    conditional_expression_kernel[(8,)](dev.put(x), out, count)
    got = dev.get(out)
    np.testing.assert_array_equal(got[:8], np.where(np.arange(8) % 2 == 0, x, -x))
    np.testing.assert_array_equal(got[8:], np.stack([np.arange(8), np.arange(8) * 10], 1).ravel())
    np.testing.assert_array_equal(dev.get(count), [4, 4])
    k = tiles.compile(conditional_expression_kernel, signature={"x_ptr": "*fp32", "out_ptr": "*fp32",
                                                                "count_ptr": "*i32"})
    assert k.asm["ptx"].count("atom.") == 2
    assemble(ptxas, k.asm["ptx"], "sm_90a")


@tiles.jit
def constexpr_type_kernel(out_ptr, GIVEN: tl.constexpr):
    local: tl.constexpr = 10
    tl.static_assert(local.type == tl.core.constexpr_type(10) and GIVEN.type == local.type)
    tl.store(out_ptr, tl.full((), GIVEN, tl.int32))


def test_constexpr_type():
    # Compiled kernels see constexprs as such (the interpreter runs them as plain Python values,
    # which have no `.type`).
    assert tl.constexpr(3).type == tl.core.constexpr_type(3) != tl.core.constexpr_type(4)
    tiles.compile(constexpr_type_kernel, signature={"out_ptr": "*i32"}, constexprs={"GIVEN": 10})


@tiles.jit
def operand_errors_kernel(x_ptr, y_ptr, OP: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, 16))
    y = tl.load(y_ptr + tl.arange(0, 16))
    z = x & y if OP == "&" else x // y
    tl.store(x_ptr + tl.arange(0, 16), z)


@pytest.mark.parametrize("op,types,message", [
    ("&", ("*fp32", "*fp32"), "invalid operands of type fp32 and fp32"),
    ("//", ("*i8", "*u8"), "Cannot use /, // or % with int8 and uint8 because they have different signedness")])
def test_operand_errors_use_tritons_phrases(op, types, message):
    # Test suites match Triton's error messages; tiles' say the same, with the kernel's line.
    with pytest.raises(tiles.CompilationError, match=message) as e:
        tiles.compile(operand_errors_kernel, signature={"x_ptr": types[0], "y_ptr": types[1]}, constexprs={"OP": op})
    assert "z = x & y if" in str(e.value)


def test_tensor_wrapper_methods_keep_the_dtype():
    # Triton's test helpers call these on the wrappers `to_triton` returns for unsigned dtypes.
    torch = pytest.importorskip("torch")
    w = tiles.reinterpret(torch.arange(12, dtype=torch.int16).reshape(3, 4), tl.uint16)
    for v in (w.new_empty((2, 5)), w.clone(), w.cpu(), w.to("cpu")):
        assert isinstance(v, tiles.TensorWrapper) and v.dtype is tl.uint16
    assert w.new_empty((2, 5)).shape == (2, 5) and tuple(w.data.shape) == (3, 4)
    c = w.clone()
    c.copy_(tiles.reinterpret(torch.full((3, 4), 7, dtype=torch.int16), tl.uint16))
    assert c.base.tolist() == [[7] * 4] * 3 and w.base[2, 3].item() == 11


@tiles.jit
def licm_hints_kernel(x_ptr, n, BLOCK: tl.constexpr):
    i = 0
    while tl.condition(arg1=i < n, disable_licm=True):
        i += 1
    for j in tl.range(0, 1, disable_licm=True):
        tl.store(x_ptr + tl.arange(0, BLOCK), tl.ravel(x=tl.full((BLOCK, 1), i + j, tl.int32)))


def test_loop_hint_keywords(dev):
    out = dev.put(np.zeros(8, np.int32))
    licm_hints_kernel[(1,)](out, 5, BLOCK=8)
    np.testing.assert_array_equal(dev.get(out), np.full(8, 5, np.int32))


@tiles.jit
def half_scalar_kernel(out_ptr, h: tl.float16, b: tl.bfloat16):
    tl.static_assert(h.dtype == tl.float16 and b.dtype == tl.bfloat16)
    tl.store(out_ptr + tl.arange(0, 2), tl.join(h.to(tl.float32), b.to(tl.float32)))


def test_half_precision_scalar_annotations(dev):
    # `h: tl.float16` makes a float argument an fp16 kernel parameter (rounded to it), as in Triton.
    out = dev.put(np.zeros(2, np.float32))
    half_scalar_kernel[(1,)](out, 1.0009765625 + 2 ** -12, 3.0 + 2 ** -9)
    # fp16 rounds 1 + 2^-10 + 2^-12 to 1 + 2^-10; bf16 rounds 3 + 2^-9 to 3 (ties to even).
    np.testing.assert_array_equal(dev.get(out), np.array([1.0009765625, 3.0], np.float32))


def test_half_precision_scalar_annotations_compile(ptxas):
    from test_compile import assemble

    k = tiles.compile(half_scalar_kernel, signature={"out_ptr": "*fp32", "h": "fp16", "b": "bf16"},
                      target="sm_90a")
    assert ".param .b16" in k.asm["ptx"] or ".param .align 2 .b8" in k.asm["ptx"], k.asm["ptx"][:600]
    assemble(ptxas, k.asm["ptx"], "sm_90a")
    from tiles.runtime.jit import _bf16_bits, _fp16_bits

    assert _fp16_bits(1.5).value == 0x3E00 and _bf16_bits(-2.0).value == 0xC000
    assert _bf16_bits(1.0 + 2 ** -8).value == 0x3F80 and _bf16_bits(1.0 + 3 * 2 ** -8).value == 0x3F82
    assert _bf16_bits(float("nan")).value & 0x7FC0 == 0x7FC0 and _bf16_bits(float("inf")).value == 0x7F80


@tiles.jit
def strides_tuple_kernel(out_ptr, strides, n):
    # An integer tuple element equal to 1 is the constant 1 (Triton specialises it so).
    tl.static_assert(isinstance(strides[1], tl.constexpr) and strides[1] == 1)
    offs = tl.arange(0, 16)
    tl.store(out_ptr + offs * strides[1], offs * strides[0] + n, mask=offs < n)


def test_tuple_elements_equal_to_1_are_constants(dev):
    out = dev.put(np.zeros(16, np.int32))
    strides_tuple_kernel[(1,)](out, (3, 1), 10)
    want = np.where(np.arange(16) < 10, np.arange(16) * 3 + 10, 0)
    np.testing.assert_array_equal(dev.get(out), want)


def test_shapes_equal_lists_without_the_source(monkeypatch):
    # Kernels built with exec (Triton's test helpers patch source text so) have no source to
    # rewrite for the interpreter: the shape itself equals the list of its sizes.
    monkeypatch.setenv("TILES_INTERPRET", "1")
    ns = {"tiles": tiles, "tl": tl}
    exec("@tiles.jit\n"
         "def k(out):\n"
         "    a = tl.full((), 2, tl.int8)\n"
         "    b = tl.full((128,), 3, tl.int8)\n"
         "    tl.static_assert(a.shape == [] and b.shape == [128] and [128] == b.shape and b.shape != [64])\n"
         "    tl.store(out + tl.arange(0, 128), b + a)\n", ns)
    out = np.zeros(128, np.int8)
    ns["k"][(1,)](out)
    assert (out == 5).all()
    s = tl.core.shape_tuple((4, 8))
    assert s == [4, 8] and s == (4, 8) and s != [8, 4] and hash(s) == hash((4, 8))


def _bytes_metadata(grid, metadata, args):
    return {"name": f"scale[{grid[0]}]", "bytes": args["n"] * 8}


@tiles.jit(launch_metadata=_bytes_metadata)
def hooked_scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def test_launch_hooks_of_the_runtime_knobs(dev, rng):
    # knobs.runtime.launch_enter_hook / launch_exit_hook (Triton's HookChains, or one callable
    # assigned) see every launch with its metadata, the kernel's launch_metadata folded in by
    # get(); exit hooks run in reverse order; with no hook left, launches stop calling them.
    from tiles import knobs
    from tiles.compiler import LazyDict

    n = 300
    x = rng.standard_normal(n).astype(np.float32)
    y = dev.put(np.zeros(n, np.float32))
    seen = []
    first = lambda md: seen.append(("enter", md.get()["name"], md.get()["bytes"]))  # noqa: E731
    second = lambda md: seen.append(("exit2", md["name"]))  # noqa: E731
    with knobs.runtime.scope():
        knobs.runtime.launch_enter_hook.add(first)
        knobs.runtime.launch_exit_hook.add(lambda md: seen.append(("exit1", isinstance(md, LazyDict))))
        knobs.runtime.launch_exit_hook.add(second)
        for _ in range(2):
            hooked_scale_kernel[(3,)](dev.put(x), y, n, BLOCK=128)
        assert seen == [("enter", "scale[3]", 2400), ("exit2", "scale[3]"), ("exit1", True)] * 2
        knobs.runtime.launch_enter_hook = None
        knobs.runtime.launch_exit_hook.remove(second)
        seen.clear()
        hooked_scale_kernel[(3,)](dev.put(x), y, n, BLOCK=128)
        assert seen == [("exit1", True)]
    assert knobs.runtime.launch_exit_hook.calls == [] and knobs.runtime.launch_enter_hook.calls == []
    seen.clear()
    hooked_scale_kernel[(3,)](dev.put(x), y, n, BLOCK=128)
    assert seen == []
    np.testing.assert_allclose(dev.get(y), 2 * x, rtol=1e-6)


def test_jit_cache_and_post_compile_hooks(monkeypatch):
    # jit_cache_hook runs before each new specialisation compiles (a true result skips it, and
    # the warmup returns None); jit_post_compile_hook after; neither for a specialisation in
    # the cache. Without a GPU a warmup compiles for sm_90a.
    from tiles import knobs

    monkeypatch.setenv("TILES_INTERPRET", "0")

    k = tiles.jit(hooked_scale_kernel.fn)
    calls = []

    def cache_hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        calls.append(("cache", fn.name, compile["num_warps"], compile["signature"]["n"], is_manual_warmup))
        return compile["num_warps"] == 8  # "handled elsewhere": skip

    def post_hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        import json

        data = json.loads(compile["specialization_data"])
        calls.append(("post", repr.split("[")[0], data["constants"]["BLOCK"], already_compiled))

    x = tiles.MockTensor(tl.float32, [64])
    with knobs.runtime.scope():
        knobs.runtime.jit_cache_hook = cache_hook
        knobs.runtime.jit_post_compile_hook = post_hook
        assert k.warmup(x, x, 64, BLOCK=64, grid=(1,)) is not None
        assert k.warmup(x, x, 64, BLOCK=64, grid=(1,)) is not None  # cached: no hooks
        assert k.warmup(x, x, 64, BLOCK=64, num_warps=8, grid=(1,)) is None
    assert calls == [("cache", "hooked_scale_kernel", 4, "i32", True), ("post", "hooked_scale_kernel", 64, False),
                     ("cache", "hooked_scale_kernel", 8, "i32", True)]
    assert knobs.runtime.jit_cache_hook is None and knobs.runtime.jit_post_compile_hook is None


def test_kernel_load_hooks(rng, monkeypatch):
    # kernel_load_start_hook / kernel_load_end_hook around a module's load (Triton's arguments);
    # without a GPU a warmup compiles and loads nothing, so neither runs.
    from tiles import knobs
    from tiles.runtime import driver

    monkeypatch.setenv("TILES_INTERPRET", "0")
    k = tiles.jit(hooked_scale_kernel.fn)
    seen = []
    with knobs.runtime.scope():
        knobs.runtime.kernel_load_start_hook = lambda m, f, name, group, h: seen.append(("start", m, f, name))
        knobs.runtime.kernel_load_end_hook = lambda m, f, name, group, h: seen.append(("end", bool(m), bool(f), name))
        k.warmup(tiles.MockTensor(tl.float32, [64]), tiles.MockTensor(tl.float32, [64]), 64, BLOCK=64, grid=(1,))
    want = [("start", None, None, "hooked_scale_kernel"), ("end", True, True, "hooked_scale_kernel")]
    assert seen == (want if driver.available() else [])


def test_kernel_load_hooks_are_chains(monkeypatch):
    # Triton's tests `add` and `remove` load hooks on the chains knobs.runtime holds.
    from tiles import knobs

    seen = []

    def start(m, f, name, group, h):
        seen.append(("start", name, h))

    def end(m, f, name, group, h):
        seen.append(("end", name, h))

    with knobs.runtime.scope():
        knobs.runtime.kernel_load_start_hook.add(start)
        knobs.runtime.kernel_load_end_hook.add(end)
        assert knobs.runtime.kernel_load_start_hook.calls == [start]
        knobs.runtime.kernel_load_start_hook(None, None, "k", {}, "h")
        knobs.runtime.kernel_load_end_hook.remove(end)
        knobs.runtime.kernel_load_end_hook(None, None, "k", {}, "h")
    assert seen == [("start", "k", "h")]
    assert knobs.runtime.kernel_load_start_hook.calls == []
    # Triton's unload hook is there to add to (proton does); tiles never unloads a module.
    with knobs.runtime.scope():
        knobs.runtime.kernel_unload_hook.add(end)
        assert knobs.runtime.kernel_unload_hook.calls == [end]
    assert knobs.runtime.kernel_unload_hook.calls == []


def test_too_many_threads_is_out_of_resources():
    # 64 warps are 2048 threads: Triton's OutOfResources("threads"), raised before the driver
    # is asked (so also on a machine without a GPU).
    k = tiles.compile(hooked_scale_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"},
                      constexprs={"BLOCK": 64}, num_warps=64)
    with pytest.raises(tiles.OutOfResources, match="out of resource: threads, Required: 2048, Hardware limit: 1024"):
        k.load()


@tiles.jit
def nested_tuple_kernel(p, t):
    tl.static_assert(t[1][0] == 2)
    tl.store(p + t[0][0], t[1][1] * 2.0)


def test_preload_of_tuple_parameters_and_clearing_device_caches(monkeypatch):
    # As Triton's test does it: clear the kernel's device cache so that a warmup compiles (and
    # calls the hook) again; preload the hook's specialisation, nested tuples with constexprs.
    from tiles import knobs

    monkeypatch.setenv("TILES_INTERPRET", "0")
    saved = []
    args = (tiles.MockTensor(tl.float32, [64]), ((3,), (tl.constexpr(2), 1.5)))
    k = tiles.jit(nested_tuple_kernel.fn)
    with knobs.runtime.scope():
        knobs.runtime.jit_cache_hook = lambda **h: saved.append(h["compile"]["specialization_data"])
        first = k.warmup(*args, grid=(1,))
        k.device_caches[0][0].clear()
        assert k.device_caches[0][0] == {}
        again = k.warmup(*args, grid=(1,))
    assert len(saved) == 2 and again.hash == first.hash
    fresh = tiles.jit(nested_tuple_kernel.fn)
    loaded = fresh.preload(saved[0])
    assert loaded.hash == first.hash and fresh.warmup(*args, grid=(1,)) is loaded


def test_jit_run_with_warmup_compiles_only(monkeypatch):
    monkeypatch.setenv("TILES_INTERPRET", "0")
    k = tiles.jit(hooked_scale_kernel.fn)
    x = tiles.MockTensor(tl.float32, [64])
    compiled = k.run(x, x, 64, BLOCK=64, grid=(1,), warmup=True)
    assert "ld.global" in compiled.asm["ptx"] and k.warmup(x, x, 64, BLOCK=64, grid=(1,)) is compiled


@tiles.jit
def preload_kernel(x_ptr, y_ptr, n, scale, DT: tl.constexpr, BLOCK: tl.constexpr, SHAPE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, (tl.load(x_ptr + offs, mask=m) * scale).to(DT) + SHAPE[0], mask=m)


def test_preload_from_a_hooks_specialization_data(monkeypatch):
    # A run's jit_post_compile_hook saves `specialization_data`; a later process's preload
    # compiles that specialisation, so the warmup (or launch) with such arguments finds it.
    from tiles import knobs

    monkeypatch.setenv("TILES_INTERPRET", "0")
    saved, compiles = [], []
    args = (tiles.MockTensor(tl.float32, [64]), tiles.MockTensor(tl.float16, [64]), 64, 0.5)
    kw = dict(DT=tl.float16, BLOCK=64, SHAPE=(3, 4), grid=(1,))
    with knobs.runtime.scope():
        knobs.runtime.jit_post_compile_hook = lambda **h: saved.append(h["compile"]["specialization_data"])
        tiles.jit(preload_kernel.fn).warmup(*args, **kw)
    assert len(saved) == 1
    fresh = tiles.jit(preload_kernel.fn)
    compiled = fresh.preload(saved[0])
    assert "st.global" in compiled.asm["ptx"]
    with knobs.runtime.scope():
        knobs.runtime.jit_cache_hook = lambda **h: compiles.append(h["key"])
        assert fresh.warmup(*args, **kw) is compiled
        assert compiles == []  # found, not compiled again
        fresh.warmup(*args[:2], 63, 0.5, **kw)  # another specialisation compiles
        assert len(compiles) == 1
    with pytest.raises(RuntimeError, match="specialization data is for"):
        tiles.jit(hooked_scale_kernel.fn).preload(saved[0])


def test_compiler_compiler_module_names():
    # triton.compiler.compiler's names, reached through the module as Triton lays it out.
    import tiles.compiler.compiler as cc
    from tiles.runtime import driver

    assert cc.CompiledKernel is tiles.compiler.CompiledKernel and cc.ASTSource is tiles.compiler.ASTSource
    assert cc.compile is tiles.compile and issubclass(cc.OutOfResources, Exception)
    assert tiles.compiler.max_shared_mem(0) == (driver.max_shared() if driver.available() else 232448)


def test_device_caches_show_what_was_compiled(monkeypatch):
    # Triton's debugging idiom: the PTX of what a kernel compiled, through device_caches.
    monkeypatch.setenv("TILES_INTERPRET", "0")
    k = tiles.jit(hooked_scale_kernel.fn)
    assert k.device_caches[0][0] == {}
    x = tiles.MockTensor(tl.float32, [64])
    compiled = k.warmup(x, x, 64, BLOCK=64, grid=(1,))
    kernels = k.device_caches[0][0]
    assert list(kernels.values()) == [compiled] and "ld.global" in kernels[next(iter(kernels))].asm["ptx"]
    assert k.device_caches[0][2].backend == "cuda"


@tiles.jit
def deep_stages_kernel(src, N, N_STAGES: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    for _ in tl.range(tl.cdiv(N, BLOCK), num_stages=N_STAGES):
        tl.store(src + offs, tl.load(src + offs, mask=offs < N) + 1, mask=offs < N)
        offs += BLOCK


def test_loops_may_ask_for_more_than_16_stages(dev, rng):
    # Triton's autotuner test asks tl.range for 100 stages: accepted (16 are used at most).
    x = rng.standard_normal(1000).astype(np.float32)
    xd = dev.put(x)
    deep_stages_kernel[(1,)](xd, 1000, N_STAGES=100, BLOCK=32)
    np.testing.assert_allclose(dev.get(xd), x + 1, rtol=1e-6)
    k = tiles.compile(deep_stages_kernel, signature={"src": "*fp32", "N": "i32"},
                      constexprs={"N_STAGES": 100, "BLOCK": 32})
    assert "ld.global" in k.asm["ptx"] or "cp.async" in k.asm["ptx"]
    with pytest.raises(tiles.CompilationError, match="must not be negative"):
        tiles.compile(deep_stages_kernel, signature={"src": "*fp32", "N": "i32"},
                      constexprs={"N_STAGES": -1, "BLOCK": 32})


@tiles.jit
def takes_an_int_kernel(VALUE, X):
    pass


@pytest.mark.parametrize("value,overflow", [(2**64 - 1, False), (2**64, True), (-2**63, False), (-2**63 - 1, True)])
def test_integer_arguments_beyond_64_bits_overflow(monkeypatch, value, overflow):
    # As Triton: an OverflowError (tiles' is also a LaunchError naming the argument).
    monkeypatch.setenv("TILES_INTERPRET", "0")
    x = tiles.MockTensor(tl.float32, [1])
    if overflow:
        with pytest.raises(OverflowError, match="argument 'VALUE'"):
            takes_an_int_kernel.warmup(value, x, grid=(1,))
    else:
        assert takes_an_int_kernel.warmup(value, x, grid=(1,)) is not None


def test_dtype_repr_is_the_qualified_name():
    # Code generators put repr(dtype) into kernel source, as Triton spells it.
    for name in ("int8", "uint32", "float16", "bfloat16", "float32", "float8e4nv", "int1"):
        dt = getattr(tl, name)
        assert repr(dt) == f"triton.language.{name}"
        assert eval(repr(dt), {"triton": tiles}) == dt


def test_warmup_takes_torch_dtypes_for_tensors(monkeypatch):
    # Triton's `kernel.warmup(torch.float32, ..., grid=...)`: a dtype where a tensor goes.
    monkeypatch.setenv("TILES_INTERPRET", "0")
    fake_torch_dtype = type("dtype", (), {"__module__": "torch", "__str__": lambda self: "torch.float32"})()
    k = tiles.jit(hooked_scale_kernel.fn)
    compiled = k.warmup(fake_torch_dtype, fake_torch_dtype, 64, BLOCK=64, grid=(1,))
    assert "ld.global" in compiled.asm["ptx"] and len(k.device_caches[0][0]) == 1
    x = tiles.MockTensor(tl.float32, [64])
    assert k.warmup(x, x, 64, BLOCK=64, grid=(1,)) is compiled


def test_compile_takes_its_source_by_keyword():
    from tiles.compiler import ASTSource

    src = ASTSource(fn=hooked_scale_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32",
                                                       "BLOCK": "constexpr"}, constexprs={"BLOCK": 32})
    assert "st.global" in tiles.compile(src=src, target=tiles.runtime.driver.GPUTarget("cuda", 90, 32)).asm["ptx"]
    with pytest.raises(TypeError, match="needs the kernel"):
        tiles.compile()


@pytest.mark.parametrize("text,on", [("1", True), ("true", True), ("ON", True), ("yes", True), ("y", True),
                                     ("0", False), ("false", False), ("Off", False), ("NO", False), ("n", False),
                                     ("", False)])
def test_boolean_settings_read_as_triton_reads_them(monkeypatch, text, on):
    from tiles import knobs
    from tiles.runtime.jit import env_flag

    monkeypatch.setenv("TRITON_DEBUG", text)
    monkeypatch.delenv("TILES_DEBUG", raising=False)
    assert env_flag("DEBUG") is on
    assert knobs.runtime.debug is on
    knobs.refresh_knobs()  # Triton's; tiles' knobs read the environment at each use


GUARDED = tl.constexpr(1)


@tiles.jit
def reads_a_global_kernel(X):
    tl.store(X, GUARDED)


def test_a_changed_global_is_an_error_not_a_stale_kernel(dev, monkeypatch):
    # As Triton: a global the kernel was compiled with that changes since raises (its compiled
    # code and cache key hold the old value); rebinding it to an equal value does not.
    global GUARDED
    k = tiles.jit(reads_a_global_kernel.fn)
    x = dev.put(np.zeros(1, np.int32))
    try:
        k[(1,)](x)
        k[(1,)](x)  # the native dispatcher's launch, on a GPU
        assert dev.get(x)[0] == 1 and ("GUARDED", id(reads_a_global_kernel.fn.__globals__)) in k.used_global_vals
        GUARDED = tl.constexpr(1)
        k[(1,)](x)
        GUARDED = tl.constexpr(2)
        with pytest.raises(RuntimeError, match="Global variable GUARDED has changed"):
            k[(1,)](x)  # in both modes
    finally:
        GUARDED = tl.constexpr(1)
    assert not tiles.jit(hooked_scale_kernel.fn).used_global_vals  # tl and tiles are not values


GLOBAL_DTYPE = tl.float16


@tiles.jit
def reads_a_global_dtype_kernel(X):
    tl.store(X, tl.full([1], 3, GLOBAL_DTYPE).to(tl.int32).reshape(()))


def test_a_global_dtype_is_checked_by_identity(monkeypatch):
    # A dtype has a `value` (itself, for helpers that read `dtype.value`), yet it cannot change in
    # place as a constexpr can: the check on each launch compares the object, no fingerprint.
    from tiles.runtime import cache

    monkeypatch.setenv("TILES_INTERPRET", "1")
    k = tiles.jit(reads_a_global_dtype_kernel.fn)
    x = np.zeros(1, np.int32)
    k[(1,)](x)
    seen = []
    fingerprint = cache._value_fingerprint
    monkeypatch.setattr(cache, "_value_fingerprint", lambda v: seen.append(v) or fingerprint(v))
    k[(1,)](x)
    assert x[0] == 3 and not seen


def test_a_changed_global_is_caught_before_compiling_again(monkeypatch):
    global GUARDED
    monkeypatch.setenv("TILES_INTERPRET", "0")
    k = tiles.jit(reads_a_global_kernel.fn)
    x = tiles.MockTensor(tl.int32, [1])
    k.warmup(x, grid=(1,))
    try:
        GUARDED = 5
        with pytest.raises(RuntimeError, match="from constexpr\\[1\\] to 5"):
            k.warmup(x, num_warps=2, grid=(1,))
    finally:
        GUARDED = tl.constexpr(1)


@tiles.jit
def returns_a_number():
    return 0


@tiles.jit
def calls_its_argument_kernel(out, F: tl.constexpr):
    tl.store(out, F())


def test_a_jit_function_argument_edited_compiles_again(dev):
    # Triton's higher-order kernels: the function passed as a constexpr is keyed by its code.
    f = tiles.jit(returns_a_number.fn)
    k = tiles.jit(calls_its_argument_kernel.fn)
    out = dev.put(np.full(1, 7, np.int32))
    k[(1,)](out, f)
    assert dev.get(out)[0] == 0
    f._unsafe_update_src(f.src.replace("return 0", "return 1"))
    k[(1,)](out, f)
    assert dev.get(out)[0] == 1


@tiles.jit
def add_one_helper(i):
    return i + 1


@tiles.jit
def calls_add_one_kernel(X, i):
    tl.store(X, add_one_helper(i))


@tiles.constexpr_function
def flag_helper():
    return False


@tiles.jit
def reads_a_flag_kernel(out):
    FLAG: tl.constexpr = flag_helper()
    tl.store(out, FLAG)


def test_cache_key_follows_edited_callees_once_hash_is_reset():
    # Triton's cache tests: edit a callee with `_unsafe_update_src`, reset the caller's `hash`
    # (its memo of `cache_key`), and the key changes; the same text gives the same key.
    base = calls_add_one_kernel.cache_key
    assert calls_add_one_kernel.hash == base
    text = add_one_helper.src
    try:
        for new, changed in ((text, False), (text.replace("i + 1", "i + 2"), True)):
            add_one_helper._unsafe_update_src(new)
            calls_add_one_kernel.hash = None
            assert (calls_add_one_kernel.cache_key != base) is changed
    finally:
        add_one_helper._unsafe_update_src(text)
        calls_add_one_kernel.hash = None
    assert calls_add_one_kernel.cache_key == base
    k = tiles.jit(calls_add_one_kernel.fn)
    assert k.is_gluon() is False  # Triton's check, asked by tools that handle both dialects
    k.hash = "given"  # a memo set by hand is the key, and the globals are still guarded
    assert k.cache_key == "given" and isinstance(k.used_global_vals, dict)
    # A constexpr function's new text is the one kernels call and key on.
    base = reads_a_flag_kernel.cache_key
    text = flag_helper.src
    try:
        flag_helper._unsafe_update_src(text.replace("False", "True"))
        assert flag_helper() is True
        reads_a_flag_kernel.hash = None
        assert reads_a_flag_kernel.cache_key != base
    finally:
        flag_helper._unsafe_update_src(text)
        reads_a_flag_kernel.hash = None
    assert reads_a_flag_kernel.cache_key == base and flag_helper() is False


def test_a_kernel_moved_to_other_lines_has_another_key(tmp_path):
    # Its asserts and errors report other lines, so a stored compile must not answer for it.
    import importlib.util

    body = "import tiles\n\n@tiles.jit\ndef moved_kernel(X):\n    tl_ok = 1\n"
    keys = []
    for n in (0, 1):
        path = tmp_path / f"moved{n}.py"
        path.write_text("# a line\n" * n + body)
        spec = importlib.util.spec_from_file_location("moved_module", str(path))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        keys.append(mod.moved_kernel.cache_key)
    assert keys[0] != keys[1]


def test_an_updated_source_reports_its_own_lines():
    # The text from the `def` on starts where the def did, decorators above it or not.
    k = tiles.jit(patched_template_kernel.fn)  # a fresh one: another test leaves the original edited
    k._unsafe_update_src(k.src.replace("GENERATE_TEST_HERE", "undefined_name"))
    with pytest.raises(tiles.CompilationError) as e:
        tiles.compile(k, signature={"x_ptr": "*fp32", "out_ptr": "*fp32"}, constexprs={"BLOCK": 64})
    line = next(i for i, ln in enumerate(open(__file__), 1) if "z = GENERATE_TEST_HERE" in ln)
    assert f"test_compat.py:{line}:" in str(e.value)


DEFAULT_SOURCE = 1


@tiles.jit
def default_from_a_global_kernel(X, i: tl.constexpr = DEFAULT_SOURCE):
    tl.store(X, i)


def test_a_global_read_only_as_a_default_is_not_guarded(dev):
    # The default was taken when the function was defined (Triton's test_kernel_default_arg).
    global DEFAULT_SOURCE
    k = tiles.jit(default_from_a_global_kernel.fn)
    x = dev.put(np.zeros(1, np.int32))
    k[(1,)](x)
    try:
        DEFAULT_SOURCE = 2
        k[(1,)](x)
        assert dev.get(x)[0] == 1 and not k.used_global_vals
    finally:
        DEFAULT_SOURCE = 1


@tiles.jit
def asserting_kernel(x_ptr):
    tl.device_assert(tl.load(x_ptr) == 1, "x == 1")


def test_debug_as_a_launch_option_is_its_own_specialisation(monkeypatch):
    # Triton's test_jit_debug: `kernel[grid](x, debug=True)` compiles with the asserts.
    monkeypatch.setenv("TILES_INTERPRET", "0")
    monkeypatch.delenv("TILES_DEBUG", raising=False)
    k = tiles.jit(asserting_kernel.fn)
    x = tiles.MockTensor(tl.int32, [1])
    plain = k.warmup(x, debug=False, grid=(1,))
    checked = k.warmup(x, debug=True, grid=(1,))
    assert len(k.device_caches[0][0]) == 2 and plain.asm["ptx"] != checked.asm["ptx"]


def test_an_equal_global_rebound_keeps_the_guard_current(dev):
    # Rebinding a guarded name to an equal, new object is no change; the guard then holds the
    # new object, so the native dispatcher (which compares objects) launches again by itself.
    global GUARDED
    k = tiles.jit(reads_a_global_kernel.fn)
    x = dev.put(np.zeros(1, np.int32))
    k[(1,)](x)
    try:
        GUARDED = tl.constexpr(1)
        k[(1,)](x)
        assert k.used_global_vals[("GUARDED", id(reads_a_global_kernel.fn.__globals__))][0] is GUARDED
        k[(1,)](x)
        assert dev.get(x)[0] == 1
    finally:
        GUARDED = tl.constexpr(1)


@tiles.jit
def standard_helpers_kernel(x_ptr, y_ptr, B: tl.constexpr):
    b = tl.load(x_ptr + tl.arange(0, B))
    # Triton's tl.standard helpers on a tile's shape (flash-linear-attention's NSA uses _log2).
    n_dims: tl.constexpr = tl.standard._log2(b.shape[0])
    pow2: tl.constexpr = tl.standard._is_power_of_two(b.shape[0])
    tl.store(y_ptr + tl.arange(0, B), b * n_dims + pow2)


@pytest.mark.parametrize("block", [1, 2, 16, 128])
def test_standard_log2_and_is_power_of_two(dev, rng, block):
    x = rng.standard_normal(block).astype(np.float32)
    y = dev.put(np.zeros(block, np.float32))
    standard_helpers_kernel[(1,)](dev.put(x), y, B=block)
    np.testing.assert_allclose(dev.get(y), x * np.float32(int(np.log2(block))) + 1, rtol=1e-6)
    assert tl.standard._log2(1000) == 9 and not tl.standard._is_power_of_two(12)


@tiles.jit
def mul_add_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, x * 1.5 + x)


def test_fp_fusion_settings(monkeypatch):
    # Triton's settings: `enable_fp_fusion` per launch or compile, the default
    # (`knobs.language.default_fp_fusion`), and `force_disable_fp_fusion`, which wins over both.
    calls = []
    monkeypatch.setattr(tiles._tiles, "forget_learned_launches", lambda: calls.append(1))
    knobs = tiles.knobs
    x = tiles.MockTensor(tl.float32)
    fused = lambda **o: "fma.rn.f32" in mul_add_kernel.warmup(x, x, BLOCK=128, grid=(1,), **o).asm["ptx"]  # noqa: E731
    compiled = lambda **o: "fma.rn.f32" in tiles.compile(  # noqa: E731
        mul_add_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32"}, constexprs={"BLOCK": 128}, **o).asm["ptx"]
    with knobs.language.scope():
        knobs.language.default_fp_fusion = False
        assert not fused() and fused(enable_fp_fusion=True) and not compiled() and compiled(enable_fp_fusion=True)
        knobs.language.default_fp_fusion = True
        assert fused() and not fused(enable_fp_fusion=False) and compiled()
        knobs.language.force_disable_fp_fusion = True
        assert os.environ["TILES_FORCE_DISABLE_FP_FUSION"] == "1"
        assert not fused() and not fused(enable_fp_fusion=True) and not compiled(enable_fp_fusion=True)
    assert not knobs.language.force_disable_fp_fusion
    # Each change of a setting that changes code makes the native launchers forget.
    assert len(calls) >= 3


@tiles.jit
def rn_mul_add_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, libdevice.add_rn(libdevice.mul_rn(x, 1.5), x))


def test_rn_arithmetic_is_never_fused(dev, rng):
    # libdevice's add_rn/mul_rn round each op, as Triton's (__nv_fadd_rn): with fusion on too.
    x = rng.standard_normal(128).astype(np.float32)
    mock = tiles.MockTensor(tl.float32)
    ptx = rn_mul_add_kernel.warmup(mock, mock, BLOCK=128, grid=(1,), enable_fp_fusion=True).asm["ptx"]
    assert "fma" not in ptx and "mul.rn.f32" in ptx and "add.rn.f32" in ptx
    y = dev.put(np.zeros(128, np.float32))
    rn_mul_add_kernel[(1,)](dev.put(x), y, BLOCK=128, enable_fp_fusion=True)
    np.testing.assert_array_equal(dev.get(y), x * np.float32(1.5) + x)


@tiles.jit
def fp32_dot_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(a_ptr + r[:, None] * N + r[None, :])
    b = tl.load(b_ptr + r[:, None] * N + r[None, :])
    tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b))


def test_fp32_default_sets_the_dot_precision_kernels_leave_open(dev, rng, monkeypatch):
    # Triton's knobs.language.fp32_default (TRITON_F32_DEFAULT): "ieee" makes an fp32 tl.dot
    # without input_precision exact; by default it runs in tf32.
    monkeypatch.delenv("TILES_F32_DEFAULT", raising=False)
    monkeypatch.delenv("TRITON_F32_DEFAULT", raising=False)
    a, b = (rng.standard_normal((32, 32)).astype(np.float32) for _ in range(2))
    want = a.astype(np.float64) @ b.astype(np.float64)

    def run():
        c = dev.put(np.zeros((32, 32), np.float32))
        fp32_dot_kernel[(1,)](dev.put(a), dev.put(b), c, N=32)
        return np.abs(dev.get(c) - want).max() / np.abs(want).max()

    assert 1e-5 < run() < 1e-2  # tf32
    with tiles.knobs.language.scope():
        tiles.knobs.language.fp32_default = "ieee"
        assert os.environ["TILES_F32_DEFAULT"] == "ieee"
        assert run() < 1e-5
        x = tiles.MockTensor(tl.float32)
        ptx = fp32_dot_kernel.warmup(x, x, x, N=32, grid=(1,)).asm["ptx"]
        assert "tf32" not in ptx
    assert tiles.knobs.language.fp32_default is None


@tiles.jit
def to_by_keyword_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + o, mask=o < n)
    # Triton's parameter names, as flash-linear-attention calls it.
    tl.store(y_ptr + o, x.to(dtype=y_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=o < n)


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_tensor_to_takes_dtype_by_keyword(dev, rng, dt):
    import ml_dtypes

    npdt = np.float16 if dt == "float16" else ml_dtypes.bfloat16
    x = (rng.standard_normal(3001) * 100).astype(np.float32)
    y = dev.put(np.zeros(len(x), npdt))
    to_by_keyword_kernel[(3,)](dev.put(x), y, len(x), BLOCK=1024)
    np.testing.assert_array_equal(dev.get(y).astype(np.float32), x.astype(npdt).astype(np.float32))


def test_next_power_of_2_is_tritons_at_zero():
    # Triton's bit trick gives 0 for n <= 0; lmdeploy sizes an absent value block with it
    # (`BLOCK_DV = next_power_of_2(0)`) and skips the block when it is 0.
    assert [tiles.next_power_of_2(n) for n in (0, -3, 1, 2, 3, 17, 1000, 1 << 40)] == \
        [0, 0, 1, 2, 4, 32, 1024, 1 << 40]


@tiles.jit
def range_step_keyword_kernel(x_ptr, n):
    # LightLLM's spelling: Triton ignores every keyword of Python's `range`, so this loop steps by 1.
    for i in range(tl.program_id(0), n, step=tl.num_programs(axis=0)):
        tl.atomic_add(x_ptr + i, 1)


def test_range_ignores_a_step_keyword_as_triton_does(dev):
    import warnings

    x = dev.put(np.zeros(10, np.int32))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        range_step_keyword_kernel[(3,)](x, 10)
    np.testing.assert_array_equal(dev.get(x), np.minimum(np.arange(10) + 1, 3))
    if dev.mode == "interpreter":  # a compiled kernel warns when it compiles, not on a cache hit
        assert any("ignores its keyword 'step'" in str(w.message) for w in seen)
