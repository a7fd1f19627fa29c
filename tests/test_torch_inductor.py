"""What torch's inductor asks of Triton, asked of tiles: `torch.compile` under
`TILES_AS_TRITON=1` compiles its generated kernels with tiles (in its compile workers, which
pickle each CompiledKernel back to the launching process) and launches them through
`CompiledKernel.run` with Triton's launcher arguments.

The CPU tests check each piece inductor uses without torch; the GPU tests run torch.compile."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from test_compile import assemble

import tiles
import tiles.language as tl
from tiles.backends.compiler import GPUTarget
from tiles.compiler import ASTSource, CompiledKernel


@tiles.jit
def scale_rows(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK: tl.constexpr, R0_BLOCK: tl.constexpr):
    # The shape of inductor's persistent reductions: rows of a [XBLOCK, R0_BLOCK] tile.
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0 = tl.arange(0, R0_BLOCK)[None, :]
    rmask = r0 < r0_numel
    x = tl.load(in_ptr0 + (r0 + r0_numel * xindex), xmask & rmask, other=0.0)
    s = tl.sum(x, 1)[:, None]
    tl.store(out_ptr0 + (r0 + r0_numel * xindex), x / s, xmask & rmask)


SIGNATURE = {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i32", "r0_numel": "i32", "XBLOCK": "constexpr",
             "R0_BLOCK": "constexpr"}
# What inductor passes: attributes by (index,), and its options (Triton's names).
ATTRS = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}
OPTIONS = {"num_warps": 4, "num_stages": 1, "debug": True, "sanitize_overflow": False,
           "launch_cooperative_grid": False, "launch_pdl": False}


def _compile_as_inductor(xblock: int = 4, rblock: int = 64) -> CompiledKernel:
    src = ASTSource(scale_rows, SIGNATURE, {"XBLOCK": xblock, "R0_BLOCK": rblock}, ATTRS)
    return tiles.compile(src, target=GPUTarget("cuda", 90, 32), options=OPTIONS)


class _ConstRepr:
    def __init__(self, value):
        self.value = value

    def __call__(self, *_):
        return self.value


def _send_as_inductor_does(k: CompiledKernel) -> CompiledKernel:
    """torch clears the JITFunction's process-bound fields (`prepare_for_pickle`), pickles the
    kernel's `__dict__` with `module`, `function` and `run` set to None, and rebuilds the
    kernel with `CompiledKernel.__new__` in the launching process."""
    fn = k.src.fn
    saved = (fn.fn, fn.__globals__, fn.repr)
    fn.fn = None
    fn.__globals__ = None
    fn.used_global_vals = None
    fn.repr = _ConstRepr(fn.repr(fn))
    fn._hash_lock = None
    try:
        state = pickle.dumps({**k.__dict__, "module": None, "function": None, "run": None})
    finally:
        fn.fn, fn.__globals__, fn.repr = saved
        del fn.__dict__["repr"]
    out = CompiledKernel.__new__(CompiledKernel)
    out.__dict__.update(pickle.loads(state))
    return out


def test_compiled_kernel_crosses_processes_as_inductor_sends_it(ptxas):
    k = _compile_as_inductor()
    back = _send_as_inductor_does(k)
    assert callable(back.run)  # a property: the `run: None` in the copied dict does not hide it
    assert back.src.fn.arg_names == ["in_ptr0", "out_ptr0", "xnumel", "r0_numel", "XBLOCK", "R0_BLOCK"]
    # torch's get_constexprs: [p.num for p in fn.params if p.is_constexpr]
    assert [p.num for p in back.src.fn.params if p.is_constexpr] == [4, 5]
    assert back.asm["ptx"] == k.asm["ptx"] and back.hash == k.hash
    assert back.metadata.num_warps == 4 and back.metadata.num_ctas == 1 and back.metadata.cluster_dims == (1, 1, 1)
    assert "scale_rows" in back.asm["llir"]  # made again from the pickled tir
    assemble(ptxas, back.asm["ptx"], "sm_90a")


def test_compile_takes_triton_option_names():
    src = ASTSource(scale_rows, SIGNATURE, {"XBLOCK": 2, "R0_BLOCK": 32}, ATTRS)
    k = tiles.compile(src, target=GPUTarget("cuda", 90, 32),
                      options=dict(OPTIONS, launch_pdl=True, extern_libs={"libdevice": "/x.bc"}, ptx_version=80,
                                   warp_size=32, instrumentation_mode=""))
    assert k.metadata.launch_pdl is True and k.metadata.launch_cooperative_grid is False
    with pytest.raises(TypeError, match="num_warp"):
        tiles.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warp": 4})


@tiles.jit
def fp32_dot(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    idx = offs[:, None] * N + offs[None, :]
    tl.store(c_ptr + idx, tl.dot(tl.load(a_ptr + idx), tl.load(b_ptr + idx)))


def test_default_dot_input_precision_option_sets_fp32_dots():
    sig = {"a_ptr": "*fp32", "b_ptr": "*fp32", "c_ptr": "*fp32", "N": "constexpr"}
    tf32 = tiles.compile(ASTSource(fp32_dot, sig, {"N": 32}), target=GPUTarget("cuda", 80, 32))
    ieee = tiles.compile(ASTSource(fp32_dot, sig, {"N": 32}), target=GPUTarget("cuda", 80, 32),
                         options={"default_dot_input_precision": "ieee"})
    assert "mma.sync" in tf32.asm["ptx"] and "mma.sync" not in ieee.asm["ptx"]


def test_backend_and_driver_tables():
    from tiles.compiler.compiler import make_backend, triton_key
    from tiles.runtime.driver import driver

    backend = tiles.backends.backends["nvidia"]
    assert backend.driver.is_active()  # asked of the class
    assert isinstance(driver.active, backend.driver)
    options = make_backend(GPUTarget("cuda", 90, 32)).parse_options({"num_warps": 8, "unknown": 1})
    assert options.num_warps == 8 and options.num_stages == 3 and options.__dict__["num_ctas"] == 1
    assert isinstance(make_backend(GPUTarget("cuda", 90, 32)).hash(), str)
    assert triton_key().startswith("tiles-")
    other = object()
    driver.set_active(other)
    try:
        assert driver.active is other
    finally:
        driver.reset_active()
    assert isinstance(driver.active, backend.driver)


def test_constexpr_function_is_triton_s_wrapper():
    @tiles.constexpr_function
    def twice(x):
        return 2 * x

    assert isinstance(twice, tiles.runtime.jit.ConstexprFunction)
    assert twice(21) == 42 and twice.src.startswith("def twice(x):")
    assert tiles.constexpr_function(twice) is twice


def test_jit_function_pickles_after_prepare(tmp_path):
    fn = scale_rows
    saved = fn.fn
    fn.fn = None
    try:
        back = pickle.loads(pickle.dumps(fn))
    finally:
        fn.fn = saved
    assert back.arg_names == fn.arg_names and back.constexprs == fn.constexprs
    assert back.cache == {} and back.used_global_vals == {}


@tiles.jit
def writes_some(a, b, c, d, e, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    p = b
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(n):
        acc += tl.load(a + i * BLOCK + offs)
        p += BLOCK
    tl.store(p + offs, acc)  # b, through a loop-carried pointer
    if n > 2:
        tl.atomic_add(c + offs, acc)  # c, in a branch
    tl.atomic_cas(d, 0, 1)  # d
    s = tl.sum(tl.load(e + offs), 0)  # e is only read
    tl.store(b + offs, tl.cumsum(acc, 0) + s)


def _written_params(module) -> set:
    """The kernel parameters that stores and atomics reach, traced back through operands and
    loop-carried block arguments (what torch's mutation analysis does with the view)."""
    producers, params, carried = {}, [], {}

    def visit(op):
        for i in range(op.get_num_results()):
            producers[op.get_result(i).id()] = op
        if op.get_name() == "tt.func":
            block = op.get_region(0).blocks[0]
            params.extend(block.get_argument(i).id() for i in range(block.get_num_arguments()))
        if op.get_name() == "scf.for":
            block = op.get_region(0).blocks[0]
            for i in range(1, block.get_num_arguments()):  # carried value i-1 starts as operand i+2
                carried[block.get_argument(i).id()] = op.get_operand(i + 2).id()
    module.walk(visit)
    writers = []
    module.walk(lambda op: writers.append(op.get_operand(0).id())
                if op.get_name() in ("tt.store", "tt.atomic_rmw", "tt.atomic_cas") else None)
    found, stack, seen = set(), list(writers), set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in params:
            found.add(params.index(v))
        if v in carried:
            stack.append(carried[v])
        op = producers.get(v)
        if op is not None:
            stack.extend(op.get_operand(i).id() for i in range(op.get_num_operands()))
    return found


def test_make_ir_gives_a_ttir_shaped_view():
    import tiles._C

    sig = {"a": "*fp32", "b": "*fp32", "c": "*fp32", "d": "*i32", "e": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    # torch passes every scalar as a constant, so the parameters are the tensors.
    src = ASTSource(writes_some, sig, {"n": 5, "BLOCK": 64}, {(0,): [["tt.divisibility", 16]]})
    module = src.make_ir(GPUTarget("cuda", 90, 32), tiles.backends.BaseBackend(GPUTarget("cuda", 90, 32))
                         .parse_options({}), {}, {}, tiles._C.libtriton.ir.context())
    assert module.verify() and module.get_name() == "builtin.module"
    names = []
    module.walk(lambda op: names.append(op.get_name()))
    assert names[-2:] == ["tt.func", "builtin.module"]  # post-order, as MLIR walks
    for name in ("scf.for", "scf.yield", "tt.reduce", "tt.reduce.return", "tt.scan", "tt.store", "tt.atomic_rmw",
                 "tt.atomic_cas", "tt.addptr", "tt.load"):
        assert name in names, name
    assert _written_params(module) == {1, 2, 3}  # b, c, d
    with pytest.raises(NotImplementedError, match="tensordesc"):
        ASTSource(writes_some, dict(sig, a="tensordesc<fp32[64]>"), {"n": 5, "BLOCK": 64}).make_ir(
            GPUTarget("cuda", 90, 32), None, {}, {}, None)


_MUTATIONS = textwrap.dedent("""
    import torch, triton
    from torch._higher_order_ops.triton_kernel_wrap import identify_mutated_tensors
    from test_torch_inductor import writes_some
    assert triton.__name__ == "tiles"
    t = lambda: torch.empty(64)
    got = identify_mutated_tensors(writes_some, {"a": t(), "b": t(), "c": t(), "d": torch.zeros(4, dtype=torch.int32),
                                                 "e": t(), "n": 5, "BLOCK": 64}, {})
    print(sorted(got))
""")


def _torch_mutations(script: str) -> str:
    """The last line `script` prints, run with tiles as `triton`; torch's TTIR analysis must
    have run on tiles' view (no "assuming every input is mutated" warning)."""
    pytest.importorskip("torch")
    env = dict(os.environ, TILES_AS_TRITON="1", PYTHONPATH=os.pathsep.join([os.path.dirname(__file__)] + sys.path))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "identify_mutated_tensors" not in r.stderr, r.stderr[-3000:]
    return r.stdout.strip().splitlines()[-1]


def test_torch_finds_the_tensors_a_user_kernel_writes():
    assert _torch_mutations(_MUTATIONS) == "['b', 'c', 'd']"


@tiles.jit
def rotate_in_place(OUT, X, OFFSETS, n, HAS_OFFSETS: tl.constexpr, BLOCK: tl.constexpr):
    # flash-attn's rotary kernel's shape: an optional pointer given as None, OUT and X the same
    # tensor, an early return.
    if tl.program_id(0) > 0:
        return
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n, other=0.0)
    if HAS_OFFSETS:
        x += tl.load(OFFSETS)
    tl.store(OUT + offs, x * 2, mask=offs < n)


def test_none_and_constexpr_arguments_specialise_as_triton_s():
    from tiles.runtime.jit import mangle_type, native_specialize_impl

    for v in (None, tl.constexpr(3)):
        assert mangle_type(v) == "constexpr"
        assert native_specialize_impl(None, v) == ("constexpr", v)
    assert native_specialize_impl(None, 32) == ("i32", "D") and native_specialize_impl(None, 33) == ("i32", None)


_NONE_ARGUMENT = textwrap.dedent("""
    import torch, triton
    from torch._higher_order_ops.triton_kernel_wrap import identify_mutated_tensors
    from test_torch_inductor import rotate_in_place
    x = torch.empty(64)
    print(sorted(identify_mutated_tensors(rotate_in_place, {"OUT": x, "X": x, "OFFSETS": None, "n": 60,
                                                            "HAS_OFFSETS": False, "BLOCK": 64}, {})))
""")


def test_torch_finds_the_writes_of_a_kernel_given_none():
    # torch asks every argument's type and specialisation, None's too. When that failed it
    # assumed every input written, and inductor copied X's stale clone over OUT (flash-attn's
    # in-place rotary under torch.compile came out unrotated).
    assert _torch_mutations(_NONE_ARGUMENT) == "['OUT']"


@pytest.mark.gpu
def test_run_takes_triton_launcher_arguments(rng):
    import torch

    k = _compile_as_inductor(xblock=4, rblock=64)
    x = torch.from_numpy(rng.random((37, 50), dtype=np.float32) + 0.5).cuda()
    out = torch.full_like(x, float("nan"))
    seen = []
    stream = torch.cuda.current_stream().cuda_stream
    # (grid, stream, function, metadata, launch_metadata, enter hook, exit hook, *every argument)
    k.run(10, 1, 1, stream, k.function, k.metadata, "md", seen.append, None, x, out, 37, 50, 4, 64)
    torch.cuda.synchronize()
    ref = x.double() / x.double().sum(1, keepdim=True)
    assert torch.allclose(out.double(), ref, rtol=1e-5) and seen == ["md"]
    with pytest.raises(tiles.LaunchError, match="takes 6 arguments"):
        k.run(10, 1, 1, stream, k.function, k.metadata, None, None, None, x, out, 37)
    # A pointer given as a __cuda_array_interface__ object (no data_ptr): the Python path.
    out.fill_(float("nan"))

    class Interface:
        __cuda_array_interface__ = out.__cuda_array_interface__

    k.run(10, 1, 1, stream, k.function, k.metadata, None, None, None, x, Interface(), 37, 50, 4, 64)
    torch.cuda.synchronize()
    assert torch.allclose(out.double(), ref, rtol=1e-5)
    # Triton's CompiledKernel[grid](*args, stream=...) form, natively.
    out.fill_(float("nan"))
    k[(10, 1, 1)](x, out, 37, 50, 4, 64, stream=stream)
    torch.cuda.synchronize()
    assert torch.allclose(out.double(), ref, rtol=1e-5)


def test_the_native_run_hands_hooks_and_other_contexts_to_the_python_run():
    # `_tiles.RunLauncher` is `CompiledKernel.run` once a launch went native. Without the GPU
    # (no current context) and with a hook given, it calls its fallback with every argument.
    # The fallback refers back to the kernel holding the launcher: the cycle is collected.
    import gc
    import weakref

    from tiles import _tiles

    launcher = _tiles.KernelLauncher(1, 0, 128, 0, 2, [(0, "ptr", "x"), (1, "i32", "n")])

    class Kernel:
        def __init__(self):
            self.calls = []
            self.fast = _tiles.RunLauncher(launcher, 0x5EED, self.run)

        def run(self, *args):
            self.calls.append(args)

    k = Kernel()
    hook = object()
    k.fast(2, 1, 1, 0, "f", "md", "lmd", None, None, 7, 37)
    k.fast(1, 1, 1, 5, "f", "md", "lmd", hook, None, 8, 38)
    assert k.calls == [(2, 1, 1, 0, "f", "md", "lmd", None, None, 7, 37),
                       (1, 1, 1, 5, "f", "md", "lmd", hook, None, 8, 38)]
    gone = weakref.ref(k)
    del k
    gc.collect()
    assert gone() is None


@pytest.mark.gpu
def test_run_is_native_after_the_first_launch(rng):
    import gc
    import weakref

    import torch

    from tiles import _tiles

    k = _compile_as_inductor(xblock=4, rblock=64)
    stream = torch.cuda.current_stream().cuda_stream
    ref = None
    for i in range(3):
        x = torch.from_numpy(rng.random((37, 50), dtype=np.float32) + 0.5).cuda()
        out = torch.full_like(x, float("nan"))
        k.run(10, 1, 1, stream, k.function, k.metadata, None, None, None, x, out, 37, 50, 4, 64)
        torch.cuda.synchronize()
        ref = x.double() / x.double().sum(1, keepdim=True)
        assert torch.allclose(out.double(), ref, rtol=1e-5), i
        assert isinstance(k.run, _tiles.RunLauncher)
    # Hooks, a wrong count and host memory still take the Python path's handling.
    seen = []
    out.fill_(float("nan"))
    k.run(10, 1, 1, stream, k.function, k.metadata, "md", seen.append, seen.append, x, out, 37, 50, 4, 64)
    torch.cuda.synchronize()
    assert seen == ["md", "md"] and torch.allclose(out.double(), ref, rtol=1e-5)
    with pytest.raises(tiles.LaunchError, match="takes 6 arguments"):
        k.run(10, 1, 1, stream, k.function, k.metadata, None, None, None, x, out, 37)
    with pytest.raises(tiles.errors.HostMemoryError, match="'in_ptr0'"):
        k.run(10, 1, 1, stream, k.function, k.metadata, None, None, None, x.cpu(), out, 37, 50, 4, 64)
    torch.cuda.synchronize()  # the context is still good
    gone = weakref.ref(k)
    del k
    gc.collect()
    assert gone() is None


_TORCH_COMPILE = textwrap.dedent("""
    import torch, triton, triton.language as tl
    assert triton.__name__ == "tiles"

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

    def user_kernel(x, y):
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
        return out * 2

    cases = [
        (lambda x: torch.sin(x) * 2 + 1, (torch.randn(100003, device="cuda"),)),
        (lambda x: torch.softmax(x, -1), (torch.randn(300, 1000, device="cuda", dtype=torch.float16),)),
        (lambda x: torch.var_mean(x, 1), (torch.randn(1024, 2000, device="cuda"),)),
        (lambda x: (x.sum(0), x.argmax(1)), (torch.randn(513, 257, device="cuda"),)),
        (lambda x, i: x[i] * 3, (torch.randn(5000, 64, device="cuda"), torch.randint(0, 5000, (999,), device="cuda"))),
        (user_kernel, (torch.randn(100000, device="cuda"), torch.randn(100000, device="cuda"))),
    ]
    for f, args in cases:
        out, ref = torch.compile(f)(*args), f(*args)
        for o, r in zip(out if isinstance(out, tuple) else (out,), ref if isinstance(ref, tuple) else (ref,)):
            if o.is_floating_point():
                err = ((o.double() - r.double()).norm() / r.double().norm()).item()
                assert err < 1e-3, err
            else:
                assert torch.equal(o, r)
    print("ok")
""")


@pytest.mark.gpu
def test_torch_compile_runs_on_tiles(tmp_path):
    env = dict(os.environ, TILES_AS_TRITON="1", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               TILES_CACHE_DIR=str(tmp_path / "tiles"))
    script = tmp_path / "compiled.py"  # a file: torch reads the user kernel's source
    script.write_text(_TORCH_COMPILE)
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-4000:]
    # torch analysed the user kernel's writes on tiles' TTIR view (no "assuming every input is
    # mutated" warning from identify_mutated_tensors).
    assert "identify_mutated_tensors" not in r.stderr, r.stderr[-4000:]


@tiles.jit
def pure_asm_kernel(p):
    x = tl.load(p)
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(p, y)


def test_ttir_view_reads_inline_asm_purity():
    from tiles import frontend
    from tiles._ttir_view import view

    ops = []
    view(frontend.generate_ir(pure_asm_kernel, {"p": "*i32"}, {}, 4, {})).walk(ops.append)
    asm = next(op for op in ops if op.get_name() == "tt.elementwise_inline_asm")
    load = next(op for op in ops if op.get_name() == "tt.load")
    assert asm.get_bool_attr("pure")
    assert [asm.get_operand(i).id() for i in range(asm.get_num_operands())] == [load.get_result(0).id()]
    assert [op.get_name() for op in ops] == ["tt.load", "tt.elementwise_inline_asm", "tt.store", "tt.return",
                                             "tt.func", "builtin.module"]
