"""Runtime: the on-disk cache (hits, edits, corruption, unwritable directories, concurrent
writers), autotune / heuristics / Config, compile_many, do_bench and perf_report."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

import tiles
import tiles.language as tl
from kernels import binary_kernel, copy_kernel
from tiles.runtime.autotuner import Autotuner

SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("TILES_CACHE_DIR", str(d))
    return d


def entries(d):
    return sorted(p for p in d.glob("*/*") if p.is_dir())


def test_second_compile_is_a_disk_hit(cache_dir, capfd, monkeypatch):
    monkeypatch.setenv("TILES_TIMING", "1")
    a = tiles.compile(binary_kernel, signature=SIG, constexprs={"OP": "add", "BLOCK": 256})
    b = tiles.compile(binary_kernel, signature=SIG, constexprs={"OP": "add", "BLOCK": 256})
    err = capfd.readouterr().err
    assert "frontend" in err and "disk cache hit" in err
    assert a.asm["ptx"] == b.asm["ptx"] and a.cache_key == b.cache_key
    c = tiles.compile(binary_kernel, signature=SIG, constexprs={"OP": "sub", "BLOCK": 256})
    assert c.cache_key != a.cache_key and len(entries(cache_dir)) == 2


def test_llvm_ir_is_made_when_read_and_left_out_of_the_cache(cache_dir):
    sig = dict(SIG, x_ptr="*fp32:16")
    a = tiles.compile(binary_kernel, signature=sig, constexprs={"OP": "mul", "BLOCK": 512}, enable_fp_fusion=True)
    (entry,) = entries(cache_dir)
    assert "llir" not in json.loads((entry / "stages.json").read_text())
    b = tiles.compile(binary_kernel, signature=sig, constexprs={"OP": "mul", "BLOCK": 512}, enable_fp_fusion=True)
    assert b.cache_key == a.cache_key
    assert list(a.asm) == ["tir", "tir_opt", "llir", "ptx"]
    # Made from the input IR with the kernel's options: the same text a compile prints.
    expected = tiles._tiles.parse_ir(a.asm["tir"]).compile("sm_90a", fp_fusion=True)["llir"]
    for k in (a, b):
        assert k.asm["llir"] == expected and k.asm.get("llir") == expected
        assert dict(k.asm)["llir"] == expected and "define ptx_kernel" in expected


CROSS_PROCESS = """
import sys, tiles as tt
import tiles.language as lang

def scale(x):
    return (lambda y: y * 2)(x)

@tt.jit
def k(x_ptr, out_ptr, n, BLOCK: lang.constexpr):
    offs = lang.arange(0, BLOCK)
    lang.store(out_ptr + offs, lang.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

c = tt.compile(k, signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}, constexprs={"BLOCK": 128})
print(c.cache_key)
"""


def test_the_disk_cache_hits_in_a_new_process(cache_dir, tmp_path):
    # The key must not depend on the process: an aliased decorator (`@tt.jit`) and helpers
    # with nested code objects used to put memory addresses into it.
    script = tmp_path / "cross.py"
    script.write_text(CROSS_PROCESS)
    env = dict(os.environ, TILES_CACHE_DIR=str(cache_dir), TILES_TIMING="1")
    runs = [subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr + runs[1].stderr
    assert runs[0].stdout == runs[1].stdout
    assert "disk cache hit" in runs[1].stderr and "disk cache hit" not in runs[0].stderr


def write_module(path, body):
    path.write_text(textwrap.dedent(body))
    spec = importlib.util.spec_from_file_location(path.stem + str(abs(hash(body))), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_kernel_sources_are_read_as_inspect_reads_them(tmp_path):
    # tiles reads a kernel's lines by indentation (faster than inspect's tokenizer) and falls
    # back to inspect where that reading is unsure; either way the lines, first line and AST
    # are inspect's, and compile errors point at the right line.
    import inspect

    from tiles.frontend import FunctionSource, _indented_block

    mod = write_module(tmp_path / "shapes.py", """
        import tiles
        import tiles.language as tl


        @tiles.autotune(
            configs=[tiles.Config({"BLOCK": 64})],
            key=["n"],
        )
        @tiles.jit
        def autotuned(x_ptr, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
        # a comment at column 0 inside the body
            tl.store(x_ptr + offs, offs, mask=offs < n)

            # a trailing comment, indented: the function's


        # a comment between kernels: not the function's
        @tiles.jit
        def docstring_at_column_0(x_ptr):
            \"\"\"A docstring with a line
        at column 0.\"\"\"
            tl.store(x_ptr, 1)


        @tiles.jit
        def continued(x_ptr,
        y_ptr):
            v = tl.load(x_ptr) + \\
        tl.load(y_ptr)
            tl.store(x_ptr, v + undefined_name)


        def make():
            @tiles.jit
            def nested(x_ptr):
                tl.store(x_ptr, 2)
            return nested


        @tiles.jit
        def one_line(x_ptr): tl.store(x_ptr, 3)
    """)
    kernels = {"autotuned": mod.autotuned.fn, "docstring_at_column_0": mod.docstring_at_column_0,
               "continued": mod.continued, "nested": mod.make(), "one_line": mod.one_line}
    by_indentation = set()
    for name, k in kernels.items():
        src = FunctionSource(k.fn)
        lines, start = inspect.getsourcelines(k.fn)
        assert (src.lines, src.first_line, src.node.name) == (lines, start, name)
        if _indented_block(k.fn) is not None:
            by_indentation.add(name)
    assert by_indentation == {"autotuned", "nested", "one_line"}  # the others are inspect's
    with pytest.raises(tiles.CompilationError) as e:
        tiles.compile(mod.continued, signature={"x_ptr": "*fp32", "y_ptr": "*fp32"})
    assert e.value.line == 32 and "undefined_name" in e.value.source_line


def test_loop_carried_names_walk_statements_only_where_safe():
    # A loop's carried names come from a walk of its body; where a function's text has no `:=`
    # and no comprehension the walk skips expressions. Both walks agree on every loop and `if`
    # of the test kernels, and the text check says "unsure" for the cases that need the full one.
    import ast
    import glob

    from tiles.frontend import _assigned_names, _plain_targets

    compared = 0
    for path in sorted(glob.glob(os.path.join(os.path.dirname(__file__), "*.py"))):
        text = open(path).read()
        for fn in ast.walk(ast.parse(text)):
            if not isinstance(fn, ast.FunctionDef):
                continue
            if not _plain_targets(ast.get_source_segment(text, fn, padded=True).splitlines(keepends=True)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.For, ast.While)):
                    stmts = node.body
                elif isinstance(node, ast.If):
                    stmts = node.body + node.orelse
                else:
                    continue
                assert _assigned_names(stmts, None, True) == _assigned_names(stmts), (path, node.lineno)
                compared += 1
    assert compared > 200
    unsure = ["x = [i for i in r]\n", "if (y := f()):\n", "for i in range(\n", "    for a in b)\n",
              "for k in [k for k in d]:\n", "t = 'for you'\n"]
    assert not any(_plain_targets([line]) for line in unsure)
    assert _plain_targets(["for i in range(n):  # a comment\n", "    async for x in y:\n", "acc += x\n"])
    body = ast.parse("for i in r:\n    a = 1\n    for j in r:\n        b, *c = 2\n    while a:\n        d += 1\n"
                     "        return\n").body
    assert _assigned_names(body, None, True) == ["i", "a", "j", "b", "c", "d", "$return"]


def test_an_edited_kernel_or_helper_is_recompiled(cache_dir, tmp_path):
    src = """
        import tiles
        import tiles.language as tl
        SCALE = {scale}

        @tiles.jit
        def helper(x):
            return x * {factor}

        @tiles.jit
        def k(x_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, helper(tl.load(x_ptr + offs)) + SCALE)
    """
    keys = set()
    for scale, factor in ((1, 2), (1, 3), (5, 3)):
        mod = write_module(tmp_path / "kmod.py", src.format(scale=scale, factor=factor))
        ck = tiles.compile(mod.k, signature={"x_ptr": "*fp32"}, constexprs={"BLOCK": 64})
        keys.add(ck.cache_key)
        assert f"{factor}.0" in ck.asm["tir"] or f"value = {factor}" in ck.asm["tir"]
    assert len(keys) == 3


def test_a_corrupt_entry_is_rebuilt_not_loaded(cache_dir):
    a = tiles.compile(copy_kernel, signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                      constexprs={"BLOCK": 128})
    (entry,) = entries(cache_dir)
    stages = entry / "stages.json"
    stages.write_bytes(stages.read_bytes()[:100])  # truncated
    b = tiles.compile(copy_kernel, signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                      constexprs={"BLOCK": 128})
    assert b.asm["ptx"] == a.asm["ptx"]
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["stages_sha"]


def test_an_unwritable_cache_directory_only_warns(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TILES_CACHE_DIR", str(blocker / "cache"))
    with pytest.warns(RuntimeWarning, match="cannot write the kernel cache"):
        k = tiles.compile(binary_kernel, signature=SIG, constexprs={"OP": "mul", "BLOCK": 512})
    assert ".entry binary_kernel" in k.asm["ptx"]


def test_concurrent_processes_fill_one_entry(cache_dir):
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import tiles
        from kernels import binary_kernel
        k = tiles.compile(binary_kernel, signature={SIG!r}, constexprs={{"OP": "xor", "BLOCK": 128}},
                          target="sm_80")
        print(k.cache_key)
    """).replace('"xor"', '"and"')
    env = dict(os.environ, TILES_CACHE_DIR=str(cache_dir))
    sig_int = {k: v.replace("fp32", "i32") for k, v in SIG.items()}
    script = script.replace(repr(SIG), repr(sig_int))
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    keys = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs) and len(keys) == 1
    (entry,) = entries(cache_dir)
    assert not [f for f in os.listdir(entry) if f.startswith(".tmp")]
    from tiles.runtime import cache

    assert cache.load(keys.pop())["stages"]["ptx"]


def test_compile_many_on_threads(cache_dir):
    jobs = [dict(fn=binary_kernel, signature=SIG, constexprs={"OP": op, "BLOCK": 256}, target="sm_90a")
            for op in ("add", "sub", "mul", "truediv", "maximum", "minimum")]
    out = tiles.compile_many(jobs, max_workers=4)
    assert [k.function_name for k in out] == ["binary_kernel"] * 6
    assert len({k.asm["ptx"] for k in out}) == 6


def test_compile_many_keeps_its_threads_and_may_be_nested(cache_dir):
    import threading

    def job(op):
        return dict(fn=binary_kernel, signature=SIG, constexprs={"OP": op, "BLOCK": 128}, target="sm_90a")

    tiles.compile_many([job("add"), job("sub")], max_workers=2)
    before = {t.ident for t in threading.enumerate() if t.name.startswith("tiles-compile")}
    assert before
    tiles.compile_many([job("mul"), job("maximum")], max_workers=2)
    after = {t.ident for t in threading.enumerate() if t.name.startswith("tiles-compile")}
    assert after == before  # the same threads compiled the second batch

    # A job that itself calls compile_many (all workers busy) runs its inner jobs inline.
    def outer(op):
        return tiles.compile_many([job(op)], max_workers=2)[0]

    from concurrent.futures import wait

    from tiles import compiler
    pool = compiler._pool(2)
    futs = [pool.submit(outer, op) for op in ("minimum", "truediv")]
    done, pending = wait(futs, timeout=120)
    assert not pending
    assert {f.result().function_name for f in done} == {"binary_kernel"}


def test_compile_many_matches_compile_and_raises_in_job_order(cache_dir, monkeypatch):
    monkeypatch.setenv("TILES_CACHE", "0")

    def job(op, block=256):
        return dict(fn=binary_kernel, signature=SIG, constexprs={"OP": op, "BLOCK": block}, target="sm_90a")

    ops = ["add", "sub", "mul", "truediv", "maximum", "minimum", "add", "sub", "mul"]
    many = tiles.compile_many([job(op) for op in ops], max_workers=3)
    assert [k.asm["ptx"] for k in many] == [tiles.compile(**job(op)).asm["ptx"] for op in ops]
    # BLOCK 100 is not a power of two: the frontend refuses the third job, after the first two.
    with pytest.raises(tiles.CompilationError, match="power of 2"):
        tiles.compile_many([job("add"), job("sub"), job("mul", 100), job("add")], max_workers=3)
    assert len(tiles.compile_many([job("minimum"), job("maximum")], max_workers=3)) == 2


def _fresh_binary_kernel():
    # A new JITFunction over the same function: its specialisations start uncompiled.
    return tiles.jit(binary_kernel.fn)


def test_async_compile_mode_compiles_warmups_on_the_executor(cache_dir, monkeypatch):
    # Triton's AsyncCompileMode: warmup returns a FutureKernel; leaving the block waits. The
    # frontends (GIL held) run on the submitting thread, the GIL-free rest on the executor.
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from tiles import compiler

    k = _fresh_binary_kernel()
    x = tiles.MockTensor(tl.float32, [1024])
    fronts, backs = [], set()
    orig_front, orig_finish = compiler._front, compiler._Backend.finish

    def front(*a, **kw):
        fronts.append(threading.current_thread().name)
        return orig_front(*a, **kw)

    def finish(self):
        backs.add(threading.current_thread().name)
        return orig_finish(self)

    monkeypatch.setattr(compiler, "_front", front)
    monkeypatch.setattr(compiler._Backend, "finish", finish)
    ops = ("add", "sub", "mul", "maximum")
    interval = sys.getswitchinterval()
    with ThreadPoolExecutor(4, thread_name_prefix="exec") as pool, tiles.AsyncCompileMode(pool):
        futs = [k.warmup(x, x, x, 1000, OP=op, BLOCK=256, grid=(4,)) for op in ops]
        assert all(isinstance(f, tiles.FutureKernel) for f in futs)
        assert k.warmup(x, x, x, 1000, OP="add", BLOCK=256, grid=(4,)) is futs[0]  # submitted once
    assert sys.getswitchinterval() == interval
    assert fronts == [threading.current_thread().name] * 4  # one frontend a kernel, on this thread
    assert backs and all(n.startswith("exec") for n in backs)
    done = [f.result() for f in futs]
    assert len({c.asm["ptx"] for c in done}) == 4
    # The compiled kernels are the JITFunction's own now: a warmup outside the block finds them.
    assert k.warmup(x, x, x, 1000, OP="mul", BLOCK=256, grid=(4,)) is done[2]


def test_async_compile_mode_raises_or_ignores_compile_errors(cache_dir):
    from concurrent.futures import ThreadPoolExecutor

    k = _fresh_binary_kernel()
    x = tiles.MockTensor(tl.float32, [64])
    with ThreadPoolExecutor(2) as pool:
        with pytest.raises(tiles.CompilationError):
            with tiles.AsyncCompileMode(pool):
                k.warmup(x, x, x, 64, OP="add", BLOCK=100, grid=(1,))  # arange needs a power of two
        with tiles.AsyncCompileMode(pool, ignore_errors=True):
            bad = k.warmup(x, x, x, 64, OP="add", BLOCK=100, grid=(1,))
            good = k.warmup(x, x, x, 64, OP="add", BLOCK=64, grid=(1,))
        assert bad.result(ignore_errors=True) is None and good.result().asm["ptx"]
        with tiles.AsyncCompileMode(pool), pytest.raises(RuntimeError, match="already active"):
            with tiles.AsyncCompileMode(pool):
                pass


@pytest.mark.gpu
def test_async_compile_mode_launches_wait_for_their_kernel(rng):
    from concurrent.futures import ThreadPoolExecutor

    import torch

    k = _fresh_binary_kernel()
    x, y = (torch.from_numpy(rng.standard_normal(1000).astype(np.float32)).cuda() for _ in range(2))
    out = torch.empty_like(x)
    with ThreadPoolExecutor(2) as pool, tiles.AsyncCompileMode(pool):
        k.warmup(x, y, out, 1000, OP="sub", BLOCK=128, grid=(8,))
        k[(8,)](x, y, out, 1000, OP="add", BLOCK=128)
        torch.testing.assert_close(out, x + y)
    k[(8,)](x, y, out, 1000, OP="sub", BLOCK=128)
    torch.testing.assert_close(out, x - y)


_WARMUP_SCRIPT = textwrap.dedent("""
    import sys, threading, tiles, tiles.language as tl
    from tiles.runtime import driver

    @tiles.jit
    def k(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    sig = {"x_ptr": "*fp32", "n": "i32"}
    tiles.compile(k, signature=sig, constexprs={"BLOCK": 64})
    # Compiling alone never starts CUDA (torch's compile workers only compile).
    untouched = "count" not in driver._state and "warm" not in driver._state
    gpu = driver.available()  # what a launch or warmup does first
    tiles.compile(k, signature=sig, constexprs={"BLOCK": 128})
    tiles.compile(k, signature=sig, constexprs={"BLOCK": 256})
    w = driver._state.get("warm")
    names = [t.name for t in threading.enumerate() if t.name == "tiles-jit-warmup"]
    if w is not None:
        w.join()
    print(untouched, gpu, w is not None, len(names) <= 1)
""")


@pytest.mark.parametrize("setting", ["1", "0"])
def test_jit_warmup_starts_once_where_a_gpu_assembles(cache_dir, tmp_path, setting):
    """A compile that misses the cache in a process that uses the driver starts the driver's JIT
    on a thread, once per process; never without a GPU, with TILES_JIT_WARMUP=0, or in a
    process that only compiles (there it does not start CUDA either)."""
    script = tmp_path / "warm.py"
    script.write_text(_WARMUP_SCRIPT)
    env = dict(os.environ, TILES_JIT_WARMUP=setting)
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    untouched, gpu, started, once = r.stdout.split()
    assert untouched == "True" and once == "True"
    assert started == str(gpu == "True" and setting == "1")


@pytest.mark.gpu
def test_jit_warmup_ptx_assembles():
    from tiles.runtime import driver

    assert driver.link_ptx(driver._EMPTY_PTX, "tiles_jit_warmup")[:4] == b"\x7fELF"
    driver._native().cuda_warm_jit(driver._EMPTY_PTX, "tiles_jit_warmup")  # TILES_ASSEMBLER=load's


_PTXAS_ASSEMBLY_SCRIPT = """
import sys
import numpy as np
import tiles
import tiles.language as tl


@tiles.jit
def scaled_copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3.0 + 1.0, mask=offs < n)


sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"}
c = tiles.compile(scaled_copy_kernel, signature=sig, constexprs={"BLOCK": 256}, target=sys.argv[1])
assert "cubin" not in c.asm and c.asm.get("cubin") is None  # made when read, as Triton has it
cubin = c.asm["cubin"]
print(cubin[:4] == b"\\x7fELF", c.link() is cubin)
if sys.argv[2] == "gpu":
    import torch

    x = torch.randn(1000, device="cuda")
    y = torch.empty_like(x)
    k = scaled_copy_kernel[(4,)](x, y, 1000, BLOCK=256)
    torch.testing.assert_close(y, x * 3 + 1)
    print(k.n_regs > 0)
"""


@pytest.mark.parametrize("where", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_ptxas_can_assemble_instead_of_the_driver(cache_dir, tmp_path, ptxas, where):
    """TILES_ASSEMBLER=ptxas assembles with ptxas, as Triton does: a cubin without a GPU (CPU),
    and launches that run on the GPU."""
    script = tmp_path / "asm.py"
    script.write_text(_PTXAS_ASSEMBLY_SCRIPT)
    env = dict(os.environ, TILES_ASSEMBLER="ptxas", TRITON_PTXAS_PATH=ptxas)
    target = "sm_90a" if where == "cpu" else tiles.runtime.driver.default_target()
    r = subprocess.run([sys.executable, str(script), target, where], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["True"] * (3 if where == "gpu" else 2)


_LOAD_MODE_SCRIPT = _PTXAS_ASSEMBLY_SCRIPT.split("sig = ")[0] + """
import os
import torch

x = torch.randn(1000, device="cuda")
y = torch.empty_like(x)
k = scaled_copy_kernel[(4,)](x, y, 1000, BLOCK=256)
torch.testing.assert_close(y, x * 3 + 1)
entry = os.path.join(os.environ["TILES_CACHE_DIR"], k.cache_key[:2], k.cache_key)
print(k.n_regs > 0, dict.__contains__(k.asm, "cubin"), os.path.exists(os.path.join(entry, "kernel.cubin")))
"""


@pytest.mark.gpu
def test_kernels_can_load_from_their_ptx(cache_dir, tmp_path):
    """By default the driver's linker makes a cubin, which the cache keeps. With
    `TILES_ASSEMBLER=load` the driver's JIT compiles the PTX as a whole program while loading
    it: no cubin is made or cached, and a warm cache loads the PTX again. Each mode runs twice:
    an empty cache, then a warm one. (CPU twin: test_ptxas_can_assemble_instead_of_the_driver[cpu]
    validates the PTX.)"""
    script = tmp_path / "load.py"
    script.write_text(_LOAD_MODE_SCRIPT)
    for mode, expected in (("", "True True True"), ("load", "True False False")):
        env = dict(os.environ, TILES_ASSEMBLER=mode, TILES_CACHE_DIR=str(cache_dir))
        for _ in range(2):
            r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, r.stderr[-3000:]
            assert r.stdout.split() == expected.split(), mode


def test_a_truncated_cubin_in_the_cache_is_not_loaded(cache_dir, monkeypatch, ptxas):
    # Where the cache keeps cubins (here ptxas's, which needs no GPU), a cut one is refused and
    # the entry rebuilt.
    monkeypatch.setenv("TILES_ASSEMBLER", "ptxas")
    monkeypatch.setenv("TRITON_PTXAS_PATH", ptxas)
    sig = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}
    a = tiles.compile(copy_kernel, signature=sig, constexprs={"BLOCK": 128})
    cubin = a.asm["cubin"]
    (entry,) = entries(cache_dir)
    assert (entry / "kernel.cubin").read_bytes() == cubin
    (entry / "kernel.cubin").write_bytes(cubin[: len(cubin) // 2])
    b = tiles.compile(copy_kernel, signature=sig, constexprs={"BLOCK": 128})
    assert not dict.__contains__(b.asm, "cubin")  # the cut cubin was not taken
    assert b.asm["cubin"] == cubin and b.asm["ptx"] == a.asm["ptx"]


def test_assembler_setting_and_ptxas_errors(monkeypatch, ptxas):
    from tiles.runtime import driver

    for v, expected in (("", "driver"), ("Driver", "driver"), ("load", "load"), ("ptxas", "ptxas")):
        monkeypatch.setenv("TILES_ASSEMBLER", v)
        assert driver.assembler() == expected and driver.loads_ptx() == (expected == "load")
    monkeypatch.setenv("TILES_ASSEMBLER", "nvcc")
    with pytest.raises(ValueError, match="TILES_ASSEMBLER='nvcc': expected 'driver', 'load' or 'ptxas'"):
        driver.assembler()
    monkeypatch.setenv("TILES_ASSEMBLER", "ptxas")
    monkeypatch.setenv("TRITON_PTXAS_PATH", ptxas)
    with pytest.raises(RuntimeError, match="ptxas .* failed on broken for sm_90a"):
        driver.assemble(".version 8.0\n.target sm_90a\nnot ptx", "broken", "sm_90a")
    if not driver.available():  # the driver's JIT without a driver: the error says what to do
        monkeypatch.setenv("TILES_ASSEMBLER", "driver")
        with pytest.raises(tiles.LaunchError, match="TILES_ASSEMBLER=ptxas"):
            driver.assemble(driver._EMPTY_PTX, "empty", "sm_90a")


def test_ptxas_is_found_in_an_installed_tritons_bundle(tmp_path, monkeypatch):
    # Where nothing else provides ptxas, the copy Triton ships is used (Triton not imported).
    import shutil

    from tiles import knobs

    tool = tmp_path / "triton" / "backends" / "nvidia" / "bin" / "ptxas"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    (tmp_path / "triton" / "__init__.py").write_text("raise ImportError('not to be imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "triton", raising=False)
    monkeypatch.delenv("TRITON_PTXAS_PATH", raising=False)
    monkeypatch.setitem(sys.modules, "nvidia", None)  # no pip nvidia-cuda-nvcc
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert knobs.nvidia.ptxas.path == str(tool)
    # Triton imported: its spec still leads to the bundle.
    import importlib.util
    import types

    imported = types.ModuleType("triton")
    imported.__spec__ = importlib.util.spec_from_file_location("triton", tmp_path / "triton" / "__init__.py")
    monkeypatch.setitem(sys.modules, "triton", imported)
    assert knobs.nvidia.ptxas.path == str(tool)
    # tiles aliased as triton (TILES_AS_TRITON) bundles none; nor does a module without a spec.
    monkeypatch.setitem(sys.modules, "triton", tiles)
    assert knobs.nvidia.ptxas.path is None
    monkeypatch.setitem(sys.modules, "triton", types.ModuleType("triton"))
    assert knobs.nvidia.ptxas.path is None


def test_peak_figure_helpers_follow_the_device_properties():
    import tiles.testing as tt
    from tiles.runtime import driver

    p = driver.active.utils.get_device_properties(None)
    assert tt.get_dram_gbps() == pytest.approx(p["mem_clock_rate"] * 2 * p["mem_bus_width"] / 8 / 1e6)
    clock = 1.5e6  # kHz
    tf32, fp16, fp8 = (tt.get_max_tensorcore_tflops(d, clock) for d in ("float32", tl.float16, tl.float8e4nv))
    assert fp16 == pytest.approx(2 * tf32) and fp8 == pytest.approx(4 * tf32)
    assert tf32 == pytest.approx(p["multiprocessor_count"] * 4 * clock * 256 * 1e-9)
    assert tt.get_max_simd_tflops("float16", clock) == pytest.approx(2 * tt.get_max_simd_tflops("float32", clock))
    with pytest.raises(RuntimeError):
        tt.get_max_tensorcore_tflops("float64", clock)

    ran = []

    @tt.cuda_memcheck(n=3)
    def check(request=None, n=0):  # without compute-sanitizer on PATH the test runs as is
        ran.append(n)

    if not __import__("shutil").which("compute-sanitizer"):
        check(request=None, n=3)
        assert ran == [3]


@tiles.autotune(configs=[tiles.Config({"BLOCK": 100}), tiles.Config({"BLOCK": 64}, num_warps=2),
                         tiles.Config({"BLOCK": 256}, num_warps=4)], key=["n"], reset_to_zero=["out_ptr"])
@tiles.heuristics({"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})
@tiles.jit
def tuned_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        x = tl.load(x_ptr + offs)
        tl.atomic_add(out_ptr + offs, x * 2)
    else:
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.atomic_add(out_ptr + offs, x * 2, mask=offs < n)


def test_autotune_skips_failing_configs_and_keeps_the_choice(dev, cache_dir, capfd, monkeypatch):
    monkeypatch.setenv("TILES_PRINT_AUTOTUNING", "1")
    tuned_kernel.cache.clear()  # the other mode's run (same process) must not answer for this one
    jit_fn = tuned_kernel.fn.fn
    jit_fn.cache.clear()
    n = 1000
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    xd, od = dev.put(x), dev.put(np.zeros(n, np.float32))
    grid = lambda meta: (tiles.cdiv(meta["n"], meta["BLOCK"]),)
    tuned_kernel[grid](xd, od, n)
    err = capfd.readouterr().err
    assert "skipping config [BLOCK: 100" in err and "chose [" in err
    if dev.mode == "gpu":
        # Compiled ahead of the timing, each config once: the timed and chosen launches found
        # the compiles of the same specialisations (the one that fails is not launched).
        assert len(jit_fn.cache) == 2
    assert tuned_kernel.best_config.kwargs["BLOCK"] in (64, 256)
    np.testing.assert_allclose(dev.get(od), 2 * x, rtol=1e-6)  # reset_to_zero kept the benchmarks out
    tuned_kernel.cache.clear()
    tuned_kernel[grid](xd, od, n)
    assert "cached choice" in capfd.readouterr().err


@tiles.autotune(configs=[tiles.Config({"BLOCK": 100}), tiles.Config({"BLOCK": 48}, num_warps=2)], key=["n"])
@tiles.jit
def never_fits_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)  # neither block is a power of two
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def test_autotune_names_the_first_failure_when_every_config_fails(dev, cache_dir, capfd):
    # The error itself says why (FlagGems' users saw only "every config failed", the reasons
    # in a captured stderr), and chains the first config's exception.
    never_fits_kernel.cache.clear()
    xd = dev.put(np.random.default_rng().standard_normal(64).astype(np.float32))
    with pytest.raises(tiles.errors.AutotunerError, match=r"the first, \[BLOCK: 100.*power of 2") as e:
        never_fits_kernel[(1,)](xd, 64)
    assert e.value.__cause__ is not None and "power of 2" in str(e.value.__cause__)
    capfd.readouterr()


def test_autotuner_do_bench_and_check_disk_cache_for_subclasses(cache_dir):
    # Triton's Autotuner offers subclasses `do_bench` (the timing function) and
    # `check_disk_cache(key, configs, bench_fn)` (the stored choice, else bench_fn's).
    from tiles.runtime.autotuner import Autotuner

    calls = []
    timer = lambda fn, quantiles=None: calls.append(quantiles) or [1.0, 1.0, 1.0]  # noqa: E731
    configs = [tiles.Config({"BLOCK": 64}), tiles.Config({"BLOCK": 256}, num_warps=4)]

    def tuner():
        return Autotuner(tuned_kernel.fn, tuned_kernel.arg_names, configs, ["n"], do_bench=timer)

    first = tuner()
    assert first.do_bench is timer

    def bench():
        first.cache[(1000, "float32")] = configs[1]

    assert first.check_disk_cache((1000, "float32"), configs, bench) is False
    again = tuner()
    assert again.check_disk_cache((1000, "float32"), configs, lambda: pytest.fail("benchmarked again")) is True
    assert again.cache[(1000, "float32")] is configs[1]
    assert tuner().check_disk_cache((999, "float32"), configs, lambda: calls.append("bench")) is False
    assert calls == ["bench"]
    default = Autotuner(tuned_kernel.fn, tuned_kernel.arg_names, configs, ["n"]).do_bench
    assert callable(default)


@pytest.fixture
def backend_threads(monkeypatch):
    """The names of the threads that run compiles' back halves (passes, LLVM, PTX), in order;
    compiles go to the code generator even without a GPU (for sm_90a, as warmup's)."""
    import threading

    from tiles import compiler

    monkeypatch.setenv("TILES_INTERPRET", "0")
    names = []
    finish = compiler._Backend.finish
    monkeypatch.setattr(compiler._Backend, "finish",
                        lambda self: names.append(threading.current_thread().name) or finish(self))
    return names


def test_autotune_compiles_its_configs_ahead_on_the_pool(cache_dir, backend_threads, monkeypatch):
    # Before timing, the tuner compiles every config it will time at once: the frontends on
    # this thread, the rest on the compile pool's threads. A config that fails to compile
    # (BLOCK=100: arange needs a power of two) comes back reported and timed inf.
    jit_fn = tuned_kernel.fn.fn
    jit_fn.cache.clear()
    x = tiles.MockTensor(tl.float32, [300])
    failed = tuned_kernel._compile_ahead(tuned_kernel.configs, (x, x, 300), {}, (3,))
    assert failed == {tuned_kernel.configs[0]: float("inf")}
    assert len(backend_threads) == 2 and all(t.startswith("tiles-compile") for t in backend_threads)
    assert len(jit_fn.cache) == 2
    # Nothing ahead with one config, or when switched off.
    jit_fn.cache.clear()
    tuned_kernel._compile_ahead(tuned_kernel.configs[1:2], (x, x, 300), {}, (3,))
    monkeypatch.setenv("TILES_AUTOTUNE_COMPILE_AHEAD", "0")
    tuned_kernel._compile_ahead(tuned_kernel.configs, (x, x, 300), {}, (3,))
    assert len(backend_threads) == 2 and not jit_fn.cache


def test_autotune_times_no_config_that_failed_to_compile_ahead(cache_dir, backend_threads, capfd, monkeypatch):
    # A config that failed to compile ahead is neither screened nor timed (whose launches
    # compiled it a second time): its one report comes from the compile ahead, and it keeps
    # inf among the timings.
    from tiles.runtime import jit

    x = tiles.MockTensor(tl.float32, [300])
    timed = []
    monkeypatch.setattr(type(tuned_kernel), "_time_config", lambda self, cfg, *a, quick=False, **k:
                        timed.append((cfg.kwargs["BLOCK"], quick)) or {64: 2.0, 256: 1.0}[cfg.kwargs["BLOCK"]])
    monkeypatch.setattr(jit, "interpreting", lambda fn: False)
    tuned_kernel.fn.fn.cache.clear()
    tuned_kernel.cache.clear()
    tuned_kernel.nargs = {"x_ptr": x, "out_ptr": np.ones(4, np.float32), "n": 300}  # the hooks' view
    try:
        cfg = tuned_kernel._choose((x, x, 300), {}, (3,), dict(tuned_kernel.nargs))
    finally:
        tuned_kernel.nargs = None
    assert cfg.kwargs["BLOCK"] == 256 and 100 not in [b for b, _ in timed]
    assert sorted(timed) == [(64, False), (256, False)]  # two left: timed in full, not screened
    assert {c.kwargs["BLOCK"]: t for c, t in tuned_kernel.configs_timings.items()}[100] == float("inf")
    assert capfd.readouterr().err.count("skipping config [BLOCK: 100") == 1
    tuned_kernel.cache.clear()


@tiles.autotune(configs=[tiles.Config({"BLOCK": 64}, num_warps=2), tiles.Config({"BLOCK": 256}),
                         tiles.Config({"BLOCK": 128}, num_stages=2)], key=["n"])
@tiles.jit
def _tuned_twice(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def test_autotuned_kernel_warmup_compiles_its_configs_at_once(cache_dir, backend_threads):
    # Autotuner.warmup outside AsyncCompileMode: the configs compile on the pool together and
    # come back compiled, in the configs' order; the first config that fails raises its error
    # once the others are compiled.
    x = tiles.MockTensor(tl.float32, [500])
    _tuned_twice.fn.cache.clear()
    done = _tuned_twice.warmup(x, x, 500, grid=(4,))
    assert [k.constexprs["BLOCK"] for k in done] == [64, 256, 128]
    assert [k.metadata.num_warps for k in done] == [2, 4, 4] and done[2].metadata.num_stages == 2
    assert len(backend_threads) == 3 and all(t.startswith("tiles-compile") for t in backend_threads)
    tuned_kernel.fn.fn.cache.clear()
    with pytest.raises(tiles.CompilationError, match="power of 2|power of two"):
        tuned_kernel.warmup(x, x, 300, grid=(3,))  # BLOCK=100 first
    assert len(tuned_kernel.fn.fn.cache) == 2
    tuned_kernel.fn.fn.cache.clear()  # other tests warm it up and expect to compile


@tiles.jit
def _scaled_copy(x_ptr, out_ptr, acc_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, x * 3, mask=offs < n)
    if acc_ptr is not None:
        tl.atomic_add(acc_ptr + offs, x, mask=offs < n)


def test_interpreter_autotune_runs_each_config_once(cache_dir, monkeypatch):
    # The interpreter times each config by one run (do_bench's repeats made a debugging run of
    # an autotuned kernel several times its number of configs slower); the choice then runs.
    monkeypatch.setenv("TILES_INTERPRET", "1")
    runs = []
    configs = [tiles.Config({"BLOCK": b}, num_warps=4, pre_hook=lambda a, b=b: runs.append(b))
               for b in (32, 64, 128, 256)]
    tuned = tiles.autotune(configs, key=["n"])(_scaled_copy)
    n = 500
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    tuned[lambda m: (tiles.cdiv(n, m["BLOCK"]),)](x, out, None, n)
    assert sorted(runs[:4]) == [32, 64, 128, 256] and len(runs) == 5, runs
    assert runs[4] == tuned.best_config.kwargs["BLOCK"]
    assert all(t > 0 for t in tuned.configs_timings.values())
    np.testing.assert_allclose(out, 3 * x, rtol=1e-6)


class _CachingTuner(Autotuner):
    """What model libraries do with Triton's Autotuner: subclass it with Triton's positional
    arguments, fill `cache` with a stored choice under Triton's key, replace hooks."""

    def __init__(self, fn, arg_names, configs, key, reset_to_zero, restore_value, **kwargs):
        super().__init__(fn, arg_names, configs, key, reset_to_zero, restore_value, **kwargs)
        self.benched = []
        assert not self.user_defined_pre_hook and not self.user_defined_post_hook

    def run(self, *args, **kwargs):
        return super().run(*args, **kwargs)


@tiles.autotune(configs=[tiles.Config({"BLOCK": 256, "SPIN": s}) for s in (1, 256, 2, 1024)], key=["n"])
@tiles.jit
def _spin_tuned(x_ptr, out_ptr, n, BLOCK: tl.constexpr, SPIN: tl.constexpr):
    # SPIN rounds of the same work: configs of known relative cost.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for _ in range(SPIN):
        acc = acc * 0.5 + tl.sqrt(x * x + 1.0)
    tl.store(out_ptr + offs, acc, mask=m)


def test_autotune_screens_out_configs_far_slower_than_the_fastest(cache_dir, monkeypatch):
    # The screen's estimates decide which configs get do_bench's full timing: those within
    # TILES_AUTOTUNE_SCREEN (1.5) times the fastest; the choice is among them.
    from tiles.runtime import jit

    cfgs = _spin_tuned.configs
    screened = {1: 1.0, 256: 40.0, 2: 1.4, 1024: float("inf")}  # SPIN=1024 "fails"
    full = {1: 1.1, 2: 1.05, 256: 44.0, 1024: float("inf")}
    timed, screens = [], []

    def bench(self, cfg, args, kwargs, grid, nargs, quick=False, warmup_ms=0.0):
        if quick:
            screens.append((cfg.kwargs["SPIN"], warmup_ms))
            return screened[cfg.kwargs["SPIN"]]
        timed.append(cfg.kwargs["SPIN"])
        return full[cfg.kwargs["SPIN"]]

    monkeypatch.setattr(type(_spin_tuned), "_time_config", bench)
    monkeypatch.setattr(type(_spin_tuned), "_compile_ahead", lambda self, *a: {})
    monkeypatch.setattr(jit, "interpreting", lambda fn: False)
    _spin_tuned.cache.clear()
    _spin_tuned.nargs = {}
    cfg = _spin_tuned._choose((None, None, 1000), {}, (4,), {"n": 1000})
    assert timed == [1, 2] and cfg.kwargs["SPIN"] == 2  # the full timing decides between the two
    # The first screen warms the GPU up; the one over the margin is screened twice.
    assert screens == [(1, 10.0), (256, 0.0), (2, 0.0), (1024, 0.0), (256, 0.0)]
    assert {c.kwargs["SPIN"]: t for c, t in _spin_tuned.configs_timings.items()} == {
        1: 1.1, 256: 40.0, 2: 1.05, 1024: float("inf")}
    # Off (Triton's way): every config that works is timed in full.
    timed.clear()
    monkeypatch.setenv("TILES_AUTOTUNE_SCREEN", "0")
    _spin_tuned._choose((None, None, 2000), {}, (4,), {"n": 2000})  # a new key
    assert timed == [1, 256, 2, 1024]
    monkeypatch.setenv("TILES_AUTOTUNE_SCREEN", "0.5")
    with pytest.raises(ValueError, match="TILES_AUTOTUNE_SCREEN"):
        _spin_tuned._choose((None, None, 3000), {}, (4,), {"n": 3000})
    assert len(cfgs) == 4


@pytest.mark.gpu
def test_autotune_screen_keeps_the_fastest_config_on_the_gpu(rng, cache_dir, monkeypatch):
    import torch

    from tiles import testing

    full_runs = []
    real = testing.do_bench

    def counting(fn, *a, **kw):
        full_runs.append(1)
        return real(fn, *a, **kw)

    monkeypatch.setattr(testing, "do_bench", counting)
    n = 1 << 24  # SPIN=1 and 2 take about the memory's time; 256 and 1024 many times it
    x = torch.from_numpy(rng.standard_normal(n).astype(np.float32)).cuda()
    out = torch.empty_like(x)
    _spin_tuned.cache.clear()
    _spin_tuned[lambda m: (triton_cdiv(n, m["BLOCK"]),)](x, out, n)
    chosen = _spin_tuned.best_config.kwargs["SPIN"]
    timings = {c.kwargs["SPIN"]: t for c, t in _spin_tuned.configs_timings.items()}
    # SPIN=256 and 1024 are screened out. (Other tests' kernels on the GPU may make SPIN=1 or 2
    # screen slow too; the choice is then the other.)
    assert chosen in (1, 2) and 1 <= len(full_runs) <= 2, timings
    ref = np.zeros(n, np.float32)
    xs = x.cpu().numpy()
    for _ in range(chosen):
        ref = ref * 0.5 + np.sqrt(xs * xs + 1.0)
    np.testing.assert_allclose(out.cpu().numpy(), ref, rtol=1e-5)


def test_autotuner_subclasses_see_tritons_surface(dev, cache_dir):
    configs = [tiles.Config({"BLOCK": 64}, num_warps=2), tiles.Config({"BLOCK": 128}, num_warps=4)]
    timed = []

    def bench(fn, quantiles=None):
        timed.append(1)
        fn()
        return [1.0, 1.0, 1.0]

    # Triton's positional order: ..., warmup, rep, use_cuda_graph, do_bench, cache_results.
    tuner = _CachingTuner(_scaled_copy, _scaled_copy.arg_names, configs, ["n"], ["acc_ptr"], None,
                          pre_hook=None, post_hook=None, prune_configs_by=None, warmup=None, rep=None,
                          use_cuda_graph=False, do_bench=bench, cache_results=False)
    n = 300
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    xd, od = dev.put(x), dev.put(np.zeros(n, np.float32))
    grid = lambda meta: (tiles.cdiv(n, meta["BLOCK"]),)  # noqa: E731
    # A stored choice under Triton's key (key values, then each argument's dtype): no timing.
    dtypes = tuple(str(v.dtype) for v in (xd, od) if hasattr(v, "dtype"))
    tuner.cache[(n,) + dtypes] = configs[1]
    tuner[grid](xd, od, None, n)
    assert timed == [] and tuner.best_config is configs[1]
    np.testing.assert_allclose(dev.get(od), 3 * x, rtol=1e-6)
    # A new key is timed; `reset_to_zero` names an argument passed as None: skipped, no error.
    tuner[grid](xd, od, None, n - 1)
    assert len(timed) == 2
    # An accumulator argument is zeroed before each timed launch and before the real one.
    ad = dev.put(np.full(n, 5.0, np.float32))
    tuner.cache.clear()
    tuner[grid](xd, od, ad, n)
    np.testing.assert_allclose(dev.get(ad), x, rtol=1e-6)
    # Hooks replaced after construction are the ones called.
    calls = []
    tuner.pre_hook = lambda kw, reset_only=False: calls.append(("pre", reset_only))
    tuner.post_hook = lambda kw, exception: calls.append(("post", exception))
    tuner.cache.clear()
    tuner[grid](xd, od, None, n)
    assert ("pre", False) in calls and ("post", None) in calls and ("pre", True) in calls


class _TimingTuner(Autotuner):
    """A tuner that chooses by itself, as FlagGems' LibTuner does: it times each config through
    Triton's `_bench(*args, config=..., **kwargs)` (whose kwargs hold `grid`), keeps the
    fastest median, and launches it through `fn.run`."""

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        timings = {c: self._bench(*args, config=c, **kwargs) for c in self.configs}
        self.configs_timings = timings
        self.best_config = min(timings, key=lambda c: timings[c][0])
        self.pre_hook({**self.nargs, **kwargs, **self.best_config.all_kwargs()}, reset_only=True)
        try:
            return self.fn.run(*args, **kwargs, **self.best_config.all_kwargs())
        finally:
            self.nargs = None


def test_autotuner_subclasses_time_configs_through_tritons_bench(dev, cache_dir):
    configs = [tiles.Config({"BLOCK": 64}), tiles.Config({"BLOCK": 128}), tiles.Config({"BLOCK": 4096})]
    medians = {64: 2.0, 128: 1.0, 4096: 3.0}

    def bench(fn, quantiles=None):
        fn()
        return [medians[bench.block], 0.5, 4.0]

    tuner = _TimingTuner(_scaled_copy, _scaled_copy.arg_names, configs, ["n"], ["acc_ptr"], None, do_bench=bench)
    n = 300
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    xd, od, ad = dev.put(x), dev.put(np.zeros(n, np.float32)), dev.put(np.full(n, 7.0, np.float32))

    def grid(meta):
        bench.block = meta["BLOCK"]
        return (tiles.cdiv(n, meta["BLOCK"]),)

    tuner[grid](xd, od, ad, n)
    # Each config's three quantiles, as Triton's `_bench` returns them; the fastest median runs.
    assert {c.kwargs["BLOCK"]: t for c, t in tuner.configs_timings.items()} == {
        64: [2.0, 0.5, 4.0], 128: [1.0, 0.5, 4.0], 4096: [3.0, 0.5, 4.0]}
    assert tuner.best_config is configs[1]
    np.testing.assert_allclose(dev.get(od), 3 * x, rtol=1e-6)
    # `reset_to_zero`: the accumulator is zeroed before each timed launch and the real one.
    np.testing.assert_allclose(dev.get(ad), x, rtol=1e-6)


class _OwnBenchTuner(Autotuner):
    """Overrides Triton's `_bench`: the inherited `run` times the configs through it."""

    def _bench(self, *args, config, **meta):
        assert "grid" in meta and self.nargs is not None
        return [{64: 3.0, 256: 1.0}[config.kwargs["BLOCK"]], 0.0, 9.0]


def test_an_overridden_bench_times_the_configs(dev, cache_dir):
    configs = [tiles.Config({"BLOCK": 64}), tiles.Config({"BLOCK": 256})]
    tuner = _OwnBenchTuner(_scaled_copy, _scaled_copy.arg_names, configs, ["n"], cache_results=False)
    n = 300
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    xd, od = dev.put(x), dev.put(np.zeros(n, np.float32))
    tuner[lambda meta: (tiles.cdiv(n, meta["BLOCK"]),)](xd, od, None, n)
    assert tuner.best_config is configs[1] and tuner.configs_timings[configs[0]] == 3.0
    np.testing.assert_allclose(dev.get(od), 3 * x, rtol=1e-6)


def test_config_takes_tritons_arguments_and_version_reads_as_tritons():
    from packaging.version import Version

    c = tiles.Config({"B": 1}, num_warps=8, num_stages=2, num_ctas=1, maxnreg=128, pre_hook=None, ir_override=None)
    assert tiles.Config(**c.__dict__).all_kwargs() == {"B": 1, "num_warps": 8, "num_stages": 2, "maxnreg": 128}
    with pytest.raises(NotImplementedError, match="ir_override"):
        tiles.Config({}, ir_override="k.ttgir").all_kwargs()
    # Libraries gate on `triton.__version__`: tiles reports the Triton API it implements.
    assert Version(tiles.__version__) >= Version("3.6.0")
    assert tiles.TILES_VERSION


def test_do_bench_and_perf_report(tmp_path, monkeypatch):
    monkeypatch.setenv("TILES_INTERPRET", "1")
    x = np.ones(4096, np.float32)
    out = np.zeros_like(x)
    ms = tiles.testing.do_bench(lambda: copy_kernel[(4,)](x, out, 4096, BLOCK=1024), rep=20)
    assert ms > 0
    q = tiles.testing.do_bench(lambda: None, rep=5, quantiles=[0.5, 0.2, 0.8])
    assert len(q) == 3

    # Triton's report: run() returns None unless asked for the table; columns "<line> (<ylabel>)";
    # extra keywords of run() reach the function; (value, min, max) results keep the value.
    rng = np.random.default_rng()
    scale = float(rng.uniform(1, 3))
    bench_runs = tiles.testing.Benchmark(x_names=["n"], x_vals=[1, 2, 4], line_arg="p", line_vals=[1, 2],
                                         line_names=["one", "two"], plot_name="demo", args={"s": scale},
                                         ylabel="GB/s")

    @tiles.testing.perf_report(bench_runs)
    def bench(n, p, s, extra):
        v = n * p * s + extra
        return (v, v - 1, v + 1) if p == 2 else v

    assert bench.run(save_path=str(tmp_path), extra=0.5) is None
    df = bench.run(print_data=True, return_df=True, extra=0.5)
    assert list(df.columns) == ["n", "one (GB/s)", "two (GB/s)"]
    np.testing.assert_allclose(list(df["two (GB/s)"]), [2 * scale * n + 0.5 for n in (1, 2, 4)])
    csv = (tmp_path / "demo.csv").read_text().splitlines()
    assert csv[0] == "n,one (GB/s),two (GB/s)" and csv[1] == f"1,{scale + 0.5:.6f},{2 * scale + 0.5:.6f}"
    assert "demo.png" in (tmp_path / "results.html").read_text()
    two = tiles.testing.perf_report([bench_runs, bench_runs])(bench.fn).run(return_df=True, extra=0.0)
    assert len(two) == 2 and len(two[1]) == 3

    # diff_col: with one x name and one line, the line less the x value (Triton's "Diff").
    diff = tiles.testing.perf_report(tiles.testing.Benchmark(
        x_names=["n"], x_vals=[3, 5], line_arg="p", line_vals=[2], line_names=["v"], plot_name="d", args={}))(
        lambda n, p: float(n * p)).run(return_df=True, diff_col=True)
    assert list(diff["Diff"]) == [3.0, 5.0]
    # do_bench's quantiles interpolate between ranks, as numpy's.
    times = list(rng.uniform(0, 1, 11))
    got = tiles.testing._summarise(times, [0.5, 0.2, 0.83], "mean")
    np.testing.assert_allclose(got, np.quantile(times, [0.5, 0.2, 0.83]))
    with pytest.raises(ValueError, match="return_mode"):
        tiles.testing.do_bench(lambda: None, return_mode="avg")


def test_driver_active_reports_target_and_properties():
    # What Triton's tutorials read first: `triton.runtime.driver.active`.
    from tiles.runtime import driver

    target = tiles.runtime.driver.active.get_current_target()
    assert target.backend == "cuda" and target.warp_size == 32 and target.arch >= 80
    props = driver.active.utils.get_device_properties(0)
    for key in ("multiprocessor_count", "max_num_regs", "max_shared_mem", "warpSize"):
        assert props[key] > 0, key
    assert callable(driver.active.get_benchmarker())


@tiles.jit
def persistent_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                              BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr):
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
        col_offsets = tl.arange(0, BLOCK_SIZE)
        mask = col_offsets < n_cols
        row = tl.load(input_ptr + row_idx * input_row_stride + col_offsets, mask=mask, other=-float("inf"))
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        out = numerator / tl.sum(numerator, axis=0)
        tl.store(output_ptr + row_idx * output_row_stride + col_offsets, out, mask=mask)


@pytest.mark.gpu
def test_warmup_then_launch_the_compiled_kernel_with_every_argument():
    # The fused-softmax tutorial's flow: warmup, read registers and shared memory, then launch
    # the compiled kernel with all arguments, constexprs included, on a persistent grid.
    import torch

    x = torch.randn(1823, 781, device="cuda")
    y = torch.empty_like(x)
    kernel = persistent_softmax_kernel.warmup(y, x, x.stride(0), y.stride(0), 1823, 781, BLOCK_SIZE=1024,
                                              num_stages=4, num_warps=8, grid=(1,))
    kernel._init_handles()
    assert kernel.n_regs > 0 and kernel.n_spills == 0 and kernel.metadata.shared >= 0
    kernel[(132, 1, 1)](y, x, x.stride(0), y.stride(0), 1823, 781, 1024, 4)
    torch.testing.assert_close(y, torch.softmax(x, dim=1))


@pytest.mark.gpu
def test_options_python_ignores_keep_launches_on_the_native_path(monkeypatch):
    # Tutorial 05 launches with `num_ctas=1`: after the first launch teaches the dispatcher,
    # later launches with it (or `extern_libs`) do not come back to the Python launcher.
    import torch

    x = torch.randn(37, 50, device="cuda")
    y = torch.empty_like(x)
    launch = lambda **kw: persistent_softmax_kernel[(4,)](y, x, 50, 50, 37, 50, BLOCK_SIZE=64, num_stages=2, **kw)  # noqa: E731
    launch(num_ctas=1)
    calls = []
    run = persistent_softmax_kernel.run
    monkeypatch.setattr(persistent_softmax_kernel, "run", lambda *a, **k: calls.append(1) or run(*a, **k))
    y.zero_()
    launch(num_ctas=1)
    launch(num_ctas=1, extern_libs={"libdevice": "/nowhere"})
    torch.testing.assert_close(y, torch.softmax(x, dim=1))
    assert calls == []


@pytest.mark.gpu
def test_code_options_keep_launches_on_the_native_path(monkeypatch):
    # `enable_fp_fusion` and `maxnreg` change only the code: after a first launch with each
    # value, launches go native (they took ~60 us in Python each), each to its own kernel.
    import torch

    x = torch.randn(37, 50, device="cuda")
    y = torch.empty_like(x)
    launch = lambda **kw: persistent_softmax_kernel[(4,)](y, x, 50, 50, 37, 50, BLOCK_SIZE=64, num_stages=2, **kw)  # noqa: E731
    variants = [{"enable_fp_fusion": True}, {"enable_fp_fusion": False}, {"maxnreg": 64},
                {"enable_fp_fusion": True, "maxnreg": 128}]
    compiled = [launch(**kw) for kw in variants]
    assert len({id(c) for c in compiled}) == len(variants)
    calls = []
    run = persistent_softmax_kernel.run
    monkeypatch.setattr(persistent_softmax_kernel, "run", lambda *a, **k: calls.append(1) or run(*a, **k))
    for kw, c in zip(variants, compiled):
        y.zero_()
        assert launch(**kw) is c
        torch.testing.assert_close(y, torch.softmax(x, dim=1))
    assert calls == []


@tiles.autotune(configs=[tiles.Config({"BLOCK": 128}, num_warps=4), tiles.Config({"BLOCK": 256}, num_warps=2)],
                key=["n"])
@tiles.heuristics(values={"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})
@tiles.jit
def tuned_scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 3)
    else:
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3, mask=offs < n)


@pytest.mark.gpu
def test_autotuned_launches_take_the_native_path(monkeypatch):
    # Once a key's config is chosen, the autotuner and heuristics launch through the kernel's
    # native dispatcher: the Python launcher (`run`) is not called again.
    import torch

    x = torch.randn(1000, device="cuda")
    y = torch.empty_like(x)
    grid = lambda meta: (triton_cdiv(1000, meta["BLOCK"]),)  # noqa: E731
    tuned_scale_kernel[grid](x, y, 1000)
    tuned_scale_kernel[grid](x, y, 1000)  # the chosen config's first launch teaches it
    jit_fn = tuned_scale_kernel.fn.fn
    calls = []
    run = jit_fn.run
    monkeypatch.setattr(jit_fn, "run", lambda *a, **k: calls.append(1) or run(*a, **k))
    y.zero_()
    tuned_scale_kernel[grid](x, y, 1000)
    torch.testing.assert_close(y, x * 3)
    assert calls == []


def triton_cdiv(a, b):
    return (a + b - 1) // b


@pytest.mark.parametrize("n", [1000, 1024])
def test_autotuned_heuristic_kernel(dev, rng, n):
    # The native path's twin: the same kernel's values, both modes (EVEN taken and not).
    x = rng.standard_normal(n).astype(np.float32)
    y = dev.put(np.full(n, np.nan, np.float32))
    for _ in range(2):
        tuned_scale_kernel[lambda meta: (triton_cdiv(n, meta["BLOCK"]),)](dev.put(x), y, n)
    np.testing.assert_allclose(dev.get(y), x * 3, rtol=1e-6)


@pytest.mark.gpu
def test_interpreter_takes_gpu_tensors(monkeypatch):
    # As Triton's interpreter: CUDA tensors are copied to the host, and results copied back.
    import torch

    monkeypatch.setenv("TILES_INTERPRET", "1")
    x = torch.randn(300, 200, device="cuda")
    y = torch.empty_like(x)
    persistent_softmax_kernel[(7,)](y, x, x.stride(0), y.stride(0), 300, 200, BLOCK_SIZE=256, num_stages=2)
    torch.testing.assert_close(y, torch.softmax(x, dim=1))


def test_persistent_softmax_over_tl_range_with_runtime_bounds(dev):
    rng = np.random.default_rng()
    x = rng.standard_normal((123, 81)).astype(np.float32)
    dx, dy = dev.put(x), dev.put(np.zeros_like(x))
    persistent_softmax_kernel[(10,)](dy, dx, 81, 81, 123, 81, BLOCK_SIZE=128, num_stages=3)
    ref = np.exp(x - x.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(dev.get(dy), ref, rtol=1e-5, atol=1e-6)


def test_no_driver_is_a_clear_error_not_a_crash():
    from tiles.runtime import driver

    if driver.available():
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="CUDA"):
        tiles._tiles.cuda_primary_context()


@pytest.mark.gpu
def test_native_driver_agrees_with_cuda_python_and_skips_its_import(tmp_path):
    # The runtime talks to libcuda.so.1 itself: a launch imports no cuda-python, and what it
    # reads matches cuda-python's view of the device.
    code = textwrap.dedent("""
        import sys, torch, tiles, tiles.language as tl
        @tiles.jit
        def k(x_ptr, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, offs.to(tl.float32), mask=offs < n)
        x = torch.zeros(100, device="cuda")
        k[(1,)](x, 100, BLOCK=128)
        torch.cuda.synchronize()
        assert x[99].item() == 99.0
        print("cuda.bindings" in sys.modules)
    """)
    script = tmp_path / "no_cuda_python.py"
    script.write_text(code)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
    cu = pytest.importorskip("cuda.bindings.driver")
    from tiles.runtime import driver

    props = driver.active.utils.get_device_properties(0)
    cu.cuInit(0)
    _, dev = cu.cuDeviceGet(0)
    a = cu.CUdevice_attribute
    for key, name in (("multiprocessor_count", "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
                      ("max_shared_mem", "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
                      ("max_num_regs", "CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK"),
                      ("warpSize", "CU_DEVICE_ATTRIBUTE_WARP_SIZE")):
        assert props[key] == cu.cuDeviceGetAttribute(getattr(a, name), dev)[1], key
    _, major = cu.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
    _, minor = cu.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
    assert driver.capability() == (major, minor)


def _prune_small(configs, named_args, **kwargs):
    # Triton's calling convention: positional arguments by name, then the launch's keywords.
    assert "x_ptr" in named_args and "n" in named_args and kwargs == {"SCALE": 3.0}
    return [c for c in configs if c.kwargs["BLOCK"] <= named_args["n"]]


def _model(**kw):
    assert {"x_ptr", "out_ptr", "n", "SCALE", "BLOCK"} <= set(kw)
    return -kw["BLOCK"]  # the largest block is "fastest"


@tiles.autotune(configs=[tiles.Config({"BLOCK": b}) for b in (32, 64, 128, 1024)], key=["n"],
                prune_configs_by={"early_config_prune": _prune_small, "perf_model": _model, "top_k": 1})
@tiles.jit
def pruned_kernel(x_ptr, out_ptr, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * SCALE, mask=offs < n)


def test_autotune_prune_configs_by_gets_named_args_and_keywords(dev, cache_dir):
    pruned_kernel.cache.clear()
    n = 200
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    out = dev.put(np.full(n, np.nan, np.float32))
    pruned_kernel[lambda m: (tiles.cdiv(n, m["BLOCK"]),)](dev.put(x), out, n, SCALE=3.0)
    assert pruned_kernel.best_config.kwargs["BLOCK"] == 128  # 1024 pruned early, then the model's pick
    np.testing.assert_allclose(dev.get(out), 3 * x, rtol=1e-6)


def test_autotune_prunes_before_using_the_disk_choice(dev, cache_dir):
    # A choice on disk is used only among the configs pruning keeps now, and the prune runs for
    # every new key in a process, as Triton's does (its hooks count on it).
    calls = []
    limit = {"block": 1024}

    def prune(configs, named_args, **kwargs):
        calls.append(named_args["n"])
        return [c for c in configs if c.kwargs["BLOCK"] <= limit["block"]]

    def make():
        @tiles.autotune(configs=[tiles.Config({"BLOCK": b}) for b in (64, 1024)], key=["n"],
                        prune_configs_by={"early_config_prune": prune})
        @tiles.jit
        def disk_pruned_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

        return disk_pruned_kernel

    n = 300
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    for k, block in ((make(), 1024), (make(), 1024), (make(), 64)):
        limit["block"] = block
        out = dev.put(np.full(n, np.nan, np.float32))
        k[lambda m: (tiles.cdiv(n, m["BLOCK"]),)](dev.put(x), out, n)
        np.testing.assert_allclose(dev.get(out), x + 1, rtol=1e-6)
        assert k.best_config.kwargs["BLOCK"] <= block
    assert calls == [n, n, n]


def test_autotune_with_every_config_pruned_says_so_as_triton_does(cache_dir):
    @tiles.autotune(configs=[tiles.Config({"BLOCK": b}) for b in (32, 64)], key=["n"],
                    prune_configs_by={"early_config_prune": lambda configs, nargs, **kw: []})
    @tiles.jit
    def all_pruned_kernel(x_ptr, n, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)

    with pytest.raises(tiles.TritonError) as e:
        all_pruned_kernel[(1,)](np.zeros(64, np.float32), 64)
    assert str(e.value) == ("Autotuner error: No valid autotuner configs after pruning. "
                            "`early_config_prune` should return at least one config.")


def test_autotuned_kernel_warmup_compiles_the_pruned_configs(cache_dir):
    # Triton's Autotuner.warmup: every config pruning keeps, compiled (here without a GPU: for
    # sm_90a); under AsyncCompileMode they compile on the executor.
    from concurrent.futures import ThreadPoolExecutor

    x = tiles.MockTensor(tl.float32, [200])
    done = pruned_kernel.warmup(x, x, 200, SCALE=3.0, grid=(2,))
    assert len(done) == 1 and "ld.global" in done[0].asm["ptx"]  # 1024 pruned, then the model's top 1
    with ThreadPoolExecutor(3) as pool, tiles.AsyncCompileMode(pool, ignore_errors=True):
        futs = tuned_kernel.warmup(x, x, 300, grid=(3,))
    # BLOCK=100 does not compile (arange needs a power of two); the other two do.
    results = [f.result(ignore_errors=True) for f in futs]
    assert results[0] is None and all(r.asm["ptx"] for r in results[1:])


@tiles.jit
def pdl_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, USE_GDC: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    if USE_GDC:
        tl.extra.cuda.gdc_wait()
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    if USE_GDC:
        tl.extra.cuda.gdc_launch_dependents()
    t = tl.extra.cuda.globaltimer()
    sm = tl.extra.cuda.smid()
    tl.store(out_ptr + offs, x + y + (t > 0).to(tl.float32) + (sm >= 0).to(tl.float32), mask=m)


def test_programmatic_dependent_launch(dev, rng):
    # Tutorial 11: chained launches with launch_pdl=True, each waiting on the previous grid.
    n = 5000
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    xd, yd = dev.put(x), dev.put(y)
    a, b = dev.put(np.full(n, np.nan, np.float32)), dev.put(np.full(n, np.nan, np.float32))
    grid = (tiles.cdiv(n, 1024),)
    pdl_add_kernel[grid](xd, yd, a, n, BLOCK=1024, USE_GDC=True, launch_pdl=True)
    pdl_add_kernel[grid](a, yd, b, n, BLOCK=1024, USE_GDC=True, launch_pdl=True)
    pdl_add_kernel[grid](a, yd, a, n, BLOCK=1024, USE_GDC=False, launch_cooperative_grid=True)
    expect = x + y + 2
    np.testing.assert_allclose(dev.get(b), expect + y + 2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dev.get(a), expect + y + 2, rtol=1e-5, atol=1e-6)


def test_programmatic_dependent_launch_ptx(ptxas):
    from test_compile import assemble

    k = tiles.compile(pdl_add_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                      constexprs={"BLOCK": 1024, "USE_GDC": True}, target="sm_90a")
    ptx = k.asm["ptx"]
    assert "griddepcontrol.wait;" in ptx and "griddepcontrol.launch_dependents;" in ptx
    assert "%globaltimer" in ptx and "%smid" in ptx
    assemble(ptxas, ptx, "sm_90a")


def _scaled_copy_metadata(grid, kernel, args):
    return {"name": f"{kernel.name} [n={args['n']}]", "bytes": 8 * args["n"], "flops32": args["n"]}


@tiles.jit(launch_metadata=_scaled_copy_metadata)
def profiled_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def test_profiler_scopes_and_launch_hook(dev, rng, tmp_path, monkeypatch):
    # Tutorial 09's use of Triton's proton: a session with the launch hook, scopes with
    # metrics, paused warm-up, then the viewer's derived metrics.
    import tiles.profiler as proton
    import tiles.profiler.viewer as viewer

    monkeypatch.chdir(tmp_path)
    n = 4096
    x = rng.standard_normal(n).astype(np.float32)
    xd, out = dev.put(x), dev.put(np.zeros(n, np.float32))
    grid = (tiles.cdiv(n, 1024),)
    sid = proton.start("prof", hook="triton")
    proton.deactivate(sid)
    profiled_kernel[grid](xd, out, n, BLOCK=1024)  # warm-up, not recorded
    proton.activate(sid)
    for _ in range(3):
        with proton.scope("outer", {"flops16": 1000.0}):
            profiled_kernel[grid](xd, out, n, BLOCK=1024)
    proton.finalize()
    np.testing.assert_allclose(dev.get(out), 2 * x, rtol=1e-6)
    tree, metrics = viewer.parse(["time/ms", "gflop32/s", "avg_time/us"], "prof.hatchet")
    (outer,) = tree.children
    assert outer.name == "outer" and outer.metrics["count"] == 3 and outer.metrics["flops16"] == 3000.0
    (kern,) = outer.children
    assert kern.name == f"profiled_kernel [n={n}]" and kern.metrics["count"] == 3
    assert kern.metrics["bytes"] == 3 * 8 * n and viewer.derive(kern.metrics, "gflop32/s") > 0
    assert viewer.derive(kern.metrics, "time/ms") <= viewer.derive(outer.metrics, "time/ms") + 1e-3
    text = viewer.format_tree(tree, metrics)
    assert "outer" in text and "profiled_kernel" in text and "(time/ms)" in text
    # After finalize, launches take the native fast path again and are not recorded.
    profiled_kernel[grid](xd, out, n, BLOCK=1024)
    assert not sys.modules["tiles.runtime.jit"]._launch_hooks


@pytest.mark.gpu
def test_cublaslt_matmul_for_comparisons(rng):
    # Tutorial 09 builds `triton._C.libtriton.nvidia.cublas.CublasLt(workspace)` for its cuBLAS line.
    import torch

    from tiles._C.libtriton import nvidia

    blas = nvidia.cublas.CublasLt(torch.empty(32 * 1024 * 1024, device="cuda", dtype=torch.uint8))
    M, N, K = 192, 256, 320
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((N, K)).astype(np.float16)
    c = torch.empty((M, N), device="cuda", dtype=torch.float16)
    blas.matmul(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), c)
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(c.cpu().numpy().astype(np.float64), ref, rtol=2e-2, atol=5e-2)
    with pytest.raises(ValueError, match="matmul shapes"):
        blas.matmul(torch.from_numpy(a).cuda(), torch.from_numpy(b[:, :64]).cuda(), c)


def test_cublaslt_with_a_host_workspace_multiplies_on_the_host(rng):
    # The CPU twin: a workspace in host memory (a script under the interpreter, a machine
    # without a GPU; tritonbench builds its CublasLt at import) gives a host stand-in.
    from tiles._C.libtriton import nvidia

    blas = nvidia.cublas.CublasLt(np.empty(1 << 20, np.uint8))
    M, N, K = 48, 40, 72
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((N, K)).astype(np.float16)
    c = np.empty((M, N), np.float16)
    blas.matmul(a, b, c)
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2e-2, atol=5e-2)
    with pytest.raises(ValueError, match="matmul shapes"):
        blas.matmul(a, b[:, :64], c)
    try:
        import torch
    except ImportError:
        return
    c2 = torch.empty((M, N), dtype=torch.bfloat16)
    blas.matmul(torch.from_numpy(a).bfloat16(), torch.from_numpy(b).bfloat16(), c2)
    np.testing.assert_allclose(c2.double().numpy(), ref, rtol=3e-2, atol=2e-1)


def test_fit_shared_memory_drops_stages_until_the_kernel_fits():
    from tiles.runtime.jit import fit_shared_memory

    per_stage = 40_000
    built = []

    def build(stages):
        built.append(stages)
        return type("K", (), {"metadata": type("M", (), {"shared": 8_000 + per_stage * stages,
                                                          "num_stages": stages})})()

    with pytest.warns(UserWarning, match="compiled with num_stages=5"):
        k = fit_shared_memory(build, 7, 232_448, "kern")
    assert k.metadata.num_stages == 5 and built == [7, 6, 5]
    assert fit_shared_memory(build, 3, 232_448, "kern").metadata.num_stages == 3  # fits: unchanged
    k = fit_shared_memory(build, 3, 10_000, "kern")  # never fits: the smallest, for the load to report
    assert k.metadata.num_stages == 1
    from tiles.runtime.jit import _tuning

    _tuning.active = True  # autotuning skips configs that do not fit instead
    try:
        assert fit_shared_memory(build, 7, 232_448, "kern").metadata.num_stages == 7
    finally:
        _tuning.active = False


@tiles.jit
def big_pipeline_matmul(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * BN + offs_n[None, :]
    acc = tl.zeros((BM, BN), tl.float32)
    for _ in range(0, K, BK):
        acc += tl.dot(tl.load(a_ptrs), tl.load(b_ptrs))
        a_ptrs += BK
        b_ptrs += BK * BN
    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc)


@pytest.mark.gpu
def test_too_many_stages_still_launch(rng):
    # 9 stages of 128x64 + 64x128 fp16 tiles need ~288 KB; fewer stages fit in the H100/H200's 227 KB.
    import torch

    K = 64 * 12
    a = rng.standard_normal((128, K)).astype(np.float16)
    b = rng.standard_normal((K, 128)).astype(np.float16)
    c = torch.empty((128, 128), device="cuda", dtype=torch.float32)
    with pytest.warns(UserWarning, match="needs more shared memory"):
        big_pipeline_matmul[(1,)](torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), c, K, BM=128, BN=128,
                                  BK=64, num_stages=9, num_warps=8)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.cpu().numpy(), ref, rtol=2e-2, atol=5e-2)


def test_mxfp_helpers():
    # `tiles.tools.mxfp` (what Triton's block-scaled matmul tutorial imports), on CPU tensors.
    torch = pytest.importorskip("torch")
    from tiles.tools.mxfp import MXFP4Tensor, MXScaleTensor

    vals = torch.tensor([[0.0, 0.5, -1.0, 1.5], [2.0, -3.0, 4.0, 6.0], [0.74, 5.2, -7.0, 2.5]])
    t = MXFP4Tensor(vals)
    assert t.to(torch.float32).tolist() == [[0.0, 0.5, -1.0, 1.5], [2.0, -3.0, 4.0, 6.0], [0.5, 6.0, -6.0, 2.0]]
    packed = t.to_packed_tensor(dim=1)
    assert packed.shape == (3, 2) and packed.dtype == torch.uint8
    assert int(packed[0, 0]) == int(t.data[0, 0]) | (int(t.data[0, 1]) << 4)
    r = MXFP4Tensor(size=(64, 32), device="cpu").random()
    assert set(r.to(torch.float32).abs().unique().tolist()) <= {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0}
    s = MXScaleTensor(torch.tensor([1.0, 0.25, 3.0, 1e-3]))
    assert s.to(torch.float32).tolist() == [1.0, 0.25, 4.0, 2.0 ** -10]
    s = MXScaleTensor(size=(100,), device="cpu").random(low=1 / 8, high=4)
    assert s.to(torch.float32).min() >= 1 / 8 and s.to(torch.float32).max() <= 4
    # -0.0 keeps its sign bit (code 8), as does a negative value rounding to zero.
    assert MXFP4Tensor(torch.tensor([0.0, -0.0, -0.1])).data.tolist() == [0, 8, 8]
    # Odd lengths pack with a zero code at the end; unpacking drops it.
    odd = MXFP4Tensor(size=(7, 5), device="cpu").random()
    p = odd.to_packed_tensor(dim=1)
    assert p.shape == (7, 3) and (p[:, 2] >> 4).eq(0).all()
    assert torch.equal(odd.unpack_packed_tensor(p, dim=1, original_shape=(7, 5)), odd.data)
    # Scales with no E8M0 value (zero, negative, infinite, NaN) are the NaN code.
    bad = MXScaleTensor(torch.tensor([0.0, -1.0, float("inf"), float("nan"), 2.0]))
    assert bad.data.tolist() == [255, 255, 255, 255, 128]


def test_every_variable_the_compiler_reads_is_in_the_cache_key():
    # A switch the Rust stages read changes the code they make: a cache entry compiled without
    # it must not be loaded with it (and the other way round).
    import pathlib
    import re

    from tiles.runtime import cache

    root = pathlib.Path(__file__).resolve().parent.parent / "crates"
    read = set()
    for path in root.rglob("*.rs"):
        read.update(re.findall(r'env::var(?:_os)?\("(TILES_[A-Z0-9_]+)"', path.read_text()))
    assert read, "no TILES_ variable found in the crates"
    assert read <= set(cache._COMPILER_ENV), sorted(read - set(cache._COMPILER_ENV))


def test_triton_cache_manager_api(cache_dir, monkeypatch):
    # Programs written against triton.runtime.cache store and read their own files.
    from tiles.runtime import cache

    m = cache.get_cache_manager("some key")
    assert isinstance(m, cache.FileCacheManager) and m.get_file("a.bin") is None
    pa = m.put(b"\x00\x01binary", "a.bin")
    pb = m.put("text", "b.txt", binary=False)
    assert m.get_file("a.bin") == pa and open(pa, "rb").read() == b"\x00\x01binary" and open(pb).read() == "text"
    m.put_group("g", {"a.bin": pa, "b.txt": pb, "gone": pa + ".missing"})
    assert m.get_group("g") == {"a.bin": pa, "b.txt": pb} and m.get_group("none") is None
    assert cache.get_cache_manager("some key").get_file("a.bin") == pa  # the same key, the same place

    class Mine(cache.FileCacheManager):
        pass

    monkeypatch.setitem(sys.modules, "mine_cache_mod", types.SimpleNamespace(Mine=Mine))
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "mine_cache_mod:Mine")
    assert type(cache.get_cache_manager("k2")) is Mine
    assert isinstance(cache.get_dump_manager("k"), cache.FileCacheManager)
    import tiles

    assert tiles.runtime.cache.FileCacheManager is cache.FileCacheManager


def _specialisation_kernels():
    """One store kernel under each of Triton's three specialisation settings for `i`."""
    def store_i(x_ptr, i, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), tl.full((BLOCK,), i, tl.int32))

    return {"enable": tiles.jit(store_i), "disable": tiles.jit(do_not_specialize=["i"])(store_i),
            "disable_on_alignment": tiles.jit(do_not_specialize_on_alignment=["i"])(store_i),
            "pointer_too": tiles.jit(do_not_specialize_on_alignment=[0, "i"])(store_i)}


# Specialisations of the values 1, 2, 4, 8, 16, 32 (as Triton's test counts them): all of them
# tell 1, 16-divisible and others apart; `do_not_specialize_on_alignment` only 1 from others.
_SPECIALISATIONS = {"enable": 3, "disable": 1, "disable_on_alignment": 2, "pointer_too": 2}


@pytest.mark.parametrize("mode", list(_SPECIALISATIONS))
def test_do_not_specialize_on_alignment_compiles(mode):
    kernel = _specialisation_kernels()[mode]
    for i in np.random.default_rng().permutation([1, 2, 4, 8, 16, 32]):
        kernel.warmup(tiles.MockTensor(tl.int32), int(i), BLOCK=64, grid=(1,))
    keys = list(kernel.device_caches[0][0])
    assert len(keys) == _SPECIALISATIONS[mode]
    aligned = {k[0][0][2] for k in keys}  # the pointer's part of the key: ('p', 'i32', alignment)
    assert aligned == ({1} if mode == "pointer_too" else {16})


@pytest.mark.gpu
@pytest.mark.parametrize("mode", list(_SPECIALISATIONS))
def test_do_not_specialize_on_alignment_launches(monkeypatch, mode):
    import torch

    monkeypatch.setenv("TILES_INTERPRET", "0")
    kernel = _specialisation_kernels()[mode]
    x = torch.empty(64, dtype=torch.int32, device="cuda")
    values = [int(v) for v in np.random.default_rng().permutation([1, 2, 4, 8, 16, 32])]
    for _ in range(2):  # the second round runs through the native dispatcher
        for v in values:
            kernel[(1,)](x, v, BLOCK=64)
            assert int(x[17]) == v
    assert len(kernel.device_caches[0][0]) == _SPECIALISATIONS[mode]


@tiles.jit
def scale_shift_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 1.5 + 1.0)


@pytest.mark.parametrize("arch,target", [("sm80", "sm_80"), ("sm_86", "sm_86"), (90, "sm_90a"), ("cuda:89", "sm_89"),
                                         ("sm100", "sm_90")])
def test_arch_option_compiles_for_another_gpu(monkeypatch, arch, target):
    # Triton's `arch` launch/warmup option and `knobs.runtime.override_arch` pick the GPU the
    # code is for; GPUs newer than Hopper get sm_90 PTX, which their driver compiles.
    monkeypatch.delenv("TILES_OVERRIDE_ARCH", raising=False)
    monkeypatch.delenv("TRITON_OVERRIDE_ARCH", raising=False)
    k = tiles.jit(scale_shift_kernel.fn)
    x = tiles.MockTensor(tl.float32)
    h = k.warmup(x, x, BLOCK=128, arch=arch, grid=(1,))
    assert f".target {target}\n" in h.asm["ptx"] and h.metadata.target == target
    tiles.knobs.runtime.override_arch = arch
    try:
        assert tiles.knobs.runtime.override_arch == str(arch)
        assert k.warmup(x, x, BLOCK=128, grid=(1,)).metadata.target == target
    finally:
        tiles.knobs.runtime.override_arch = None
    from tiles.runtime import driver

    base = k.warmup(x, x, BLOCK=128, grid=(1,))  # this GPU's target again (an H100's without one)
    assert base.metadata.target == (driver.default_target() if driver.available() else "sm_90a")
    assert len(k.device_caches[0][0]) == 2  # with and without `arch`


def test_arch_option_rejects_what_names_no_nvidia_gpu():
    x = tiles.MockTensor(tl.float32)
    for bad in ("gfx942", "hopper", "sm_x"):
        with pytest.raises(ValueError, match="names no NVIDIA GPU"):
            scale_shift_kernel.warmup(x, x, BLOCK=128, arch=bad, grid=(1,))
    k = tiles.compile(scale_shift_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32"}, constexprs={"BLOCK": 128},
                      options={"arch": "sm80"})
    assert k.metadata.target == "sm_80"
    with pytest.raises(Exception, match="unknown target `sm_942`"):
        tiles.compile(scale_shift_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32"}, constexprs={"BLOCK": 128},
                      target="sm_942")


@pytest.mark.gpu
def test_arch_option_launches_older_code_on_the_gpu(monkeypatch):
    import torch

    monkeypatch.setenv("TILES_INTERPRET", "0")
    x = torch.randn(128, device="cuda")
    y = torch.empty_like(x)
    scale_shift_kernel[(1,)](x, y, BLOCK=128, arch="sm80")
    torch.testing.assert_close(y, x * 1.5 + 1.0)
    targets = {c.metadata.target for c in scale_shift_kernel.device_caches[0][0].values()}
    assert "sm_80" in targets


_AS_TRITON_SCRIPT = textwrap.dedent("""
    import numpy as np
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice
    from triton.runtime import autotuner
    import tiles

    assert triton is tiles and tl is tiles.language and autotuner is tiles.runtime.autotuner
    assert tiles.__spec__.name == "tiles"

    @triton.jit
    def exp_kernel(x, y, N: tl.constexpr):
        o = tl.arange(0, N)
        tl.store(y + o, libdevice.exp(tl.load(x + o)))

    a = np.random.default_rng().standard_normal(16).astype(np.float32)
    b = np.zeros_like(a)
    exp_kernel[(1,)](a, b, N=16)
    np.testing.assert_allclose(b, np.exp(a), rtol=1e-5)
    print("ok")
""")


def _run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TILES_INTERPRET="1", **env))


def test_use_as_triton_runs_triton_code_unchanged():
    r = _run_python("import tiles; assert tiles.use_as_triton()\n" + _AS_TRITON_SCRIPT)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_tiles_as_triton_environment_variable():
    pth = os.path.join(os.path.dirname(os.path.dirname(tiles.__file__)), "tiles_as_triton.pth")
    if not os.path.exists(pth):
        pytest.skip("tiles is not installed from its wheel (no tiles_as_triton.pth)")
    r = _run_python(_AS_TRITON_SCRIPT, TILES_AS_TRITON="1")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    r = _run_python("import sys; print('triton' in sys.modules)", TILES_AS_TRITON="0")
    assert r.stdout.strip() == "False"  # off: nothing imported at start


def test_use_as_triton_leaves_an_imported_triton_alone():
    if importlib.util.find_spec("triton") is None:
        pytest.skip("Triton is not installed")
    r = _run_python("import triton, tiles; print(tiles.use_as_triton(), triton.__name__)")
    assert r.stdout.split() == ["False", "triton"], r.stderr


def test_num_ctas_above_one_needs_hopper(monkeypatch):
    # Triton refuses thread-block clusters before sm_90; tiles runs each program as one CTA,
    # and refuses the same way.
    monkeypatch.delenv("TILES_OVERRIDE_ARCH", raising=False)
    x = tiles.MockTensor(tl.float32)
    k = tiles.jit(scale_shift_kernel.fn)
    with pytest.raises(ValueError, match=r"num_ctas > 1 requires NVIDIA SM90\+ \(Hopper\)"):
        k.warmup(x, x, BLOCK=128, num_ctas=2, arch="sm80", grid=(1,))
    assert k.warmup(x, x, BLOCK=128, num_ctas=2, arch="sm90", grid=(1,)).metadata.target == "sm_90a"


def test_autotune_skip_message_says_why_in_one_line(dev, cache_dir, capfd, monkeypatch):
    monkeypatch.delenv("TILES_PRINT_AUTOTUNING", raising=False)
    monkeypatch.delenv("TRITON_PRINT_AUTOTUNING", raising=False)
    tuned_kernel.cache.clear()
    n = 1000
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    tuned_kernel[lambda meta: (tiles.cdiv(meta["n"], meta["BLOCK"]),)](dev.put(x), dev.put(np.zeros(n, np.float32)), n)
    lines = [ln for ln in capfd.readouterr().err.splitlines() if "skipping config [BLOCK: 100" in ln]
    # The compile error's location and its reason (arange's power-of-2 rule), on one line.
    assert len(lines) == 1 and "power of 2" in lines[0], lines
    tuned_kernel.cache.clear()


def test_the_current_stream_comes_from_torchs_c_calls(monkeypatch):
    # `torch.cuda.current_stream()` costs microseconds a launch; torch's C functions give the
    # raw stream of the current device directly (a device given still goes through torch).
    import sys
    import types

    from tiles.runtime import driver

    asked = []
    fake = types.SimpleNamespace(
        cuda=types.SimpleNamespace(is_initialized=lambda: True,
                                   current_stream=lambda d: types.SimpleNamespace(cuda_stream=asked.append(d) or 7)),
        _C=types.SimpleNamespace(_cuda_getDevice=lambda: 3, _cuda_getCurrentRawStream=lambda d: 1000 + d))
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert driver.current_stream() == 1003
    assert driver.current_stream(1) == 7 and asked == [1]
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=types.SimpleNamespace(
        is_initialized=lambda: False)))
    assert driver.current_stream() == 0
