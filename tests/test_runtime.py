"""Runtime: the on-disk cache (hits, edits, corruption, unwritable directories, concurrent
writers), autotune / heuristics / Config, compile_many, do_bench and perf_report."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tiles
import tiles.language as tl
from kernels import binary_kernel, copy_kernel

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


def write_module(path, body):
    path.write_text(textwrap.dedent(body))
    spec = importlib.util.spec_from_file_location(path.stem + str(abs(hash(body))), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
    n = 1000
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    xd, od = dev.put(x), dev.put(np.zeros(n, np.float32))
    grid = lambda meta: (tiles.cdiv(meta["n"], meta["BLOCK"]),)
    tuned_kernel[grid](xd, od, n)
    err = capfd.readouterr().err
    assert "skipping config [BLOCK: 100" in err and "chose [" in err
    assert tuned_kernel.best_config.kwargs["BLOCK"] in (64, 256)
    np.testing.assert_allclose(dev.get(od), 2 * x, rtol=1e-6)  # reset_to_zero kept the benchmarks out
    tuned_kernel.cache.clear()
    tuned_kernel[grid](xd, od, n)
    assert "cached choice" in capfd.readouterr().err


def test_do_bench_and_perf_report(tmp_path, monkeypatch):
    monkeypatch.setenv("TILES_INTERPRET", "1")
    x = np.ones(4096, np.float32)
    out = np.zeros_like(x)
    ms = tiles.testing.do_bench(lambda: copy_kernel[(4,)](x, out, 4096, BLOCK=1024), rep=20)
    assert ms > 0
    q = tiles.testing.do_bench(lambda: None, rep=5, quantiles=[0.5, 0.2, 0.8])
    assert len(q) == 3

    @tiles.testing.perf_report(tiles.testing.Benchmark(x_names=["n"], x_vals=[1, 2, 4], line_arg="p",
                                                       line_vals=[1, 2], line_names=["one", "two"],
                                                       plot_name="demo", args={}))
    def bench(n, p):
        return float(n * p)

    rows = bench.run(save_path=str(tmp_path), print_data=True)
    assert rows == [[1, 1.0, 2.0], [2, 2.0, 4.0], [4, 4.0, 8.0]]
    assert (tmp_path / "demo.csv").read_text().startswith("n,one,two")
