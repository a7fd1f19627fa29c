"""Debug ops in both modes: static_print/static_assert at compile time, device_print,
device_assert (and Python assert/print inside kernels), breakpoints."""

from __future__ import annotations

import numpy as np
import pytest
from test_compile import assemble

import tiles
import tiles.language as tl


@tiles.jit
def print_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.device_print("x: ", x)
    print("pid", tl.program_id(0))


@tiles.jit
def assert_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0)
    tl.device_assert(x >= 0, "x must be non-negative", mask=mask)
    assert x < 100, "x must be below 100"
    tl.store(x_ptr + offs, x + 1, mask=mask)


@tiles.jit
def static_kernel(x_ptr, BLOCK: tl.constexpr):
    tl.static_print("BLOCK is", BLOCK)
    tl.static_assert(BLOCK >= 16, "BLOCK too small")
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@tiles.jit
def breakpoint_kernel(x_ptr):
    breakpoint()
    tl.store(x_ptr, 1.0)


def test_static_print_and_assert_at_compile_time(capsys):
    tiles.compile(static_kernel, signature={"x_ptr": "*fp32"}, constexprs={"BLOCK": 32})
    assert "BLOCK is 32" in capsys.readouterr().out
    from tiles.errors import CompileTimeAssertionFailure

    with pytest.raises(CompileTimeAssertionFailure, match="BLOCK too small"):
        tiles.compile(static_kernel, signature={"x_ptr": "*fp32"}, constexprs={"BLOCK": 8})


def test_static_ops_in_the_interpreter(monkeypatch, capsys):
    monkeypatch.setenv("TILES_INTERPRET", "1")
    x = np.zeros(32, np.float32)
    static_kernel[(1,)](x, BLOCK=32)
    assert "BLOCK is 32" in capsys.readouterr().out and (x == 1).all()
    with pytest.raises(AssertionError, match="BLOCK too small"):
        static_kernel[(1,)](x, BLOCK=8)


def test_device_print_in_the_interpreter(monkeypatch, capsys):
    monkeypatch.setenv("TILES_INTERPRET", "1")
    x = np.array([1.5, -2.0, 3.25, 4.0], np.float32)
    print_kernel[(2,)](x, BLOCK=4)
    out = capsys.readouterr().out.splitlines()
    assert "pid (0, 0, 0) idx (2) x: 3.25" in out
    assert "pid (1, 0, 0) idx (3) x: 4.0" in out
    assert "pid (1, 0, 0) pid: 1" in out  # Triton adds the ": "


def test_device_assert_in_the_interpreter(monkeypatch):
    monkeypatch.setenv("TILES_INTERPRET", "1")
    x = np.arange(40, dtype=np.int32)
    assert_kernel[(3,)](x, 40, BLOCK=16)
    np.testing.assert_array_equal(x, np.arange(1, 41))
    x[33] = -5
    with pytest.raises(AssertionError, match="x must be non-negative") as e:
        assert_kernel[(3,)](x, 40, BLOCK=16)
    assert "program id (2, 0, 0)" in str(e.value) and "test_debug.py" in str(e.value)
    x[33] = 500
    with pytest.raises(AssertionError, match="below 100"):
        assert_kernel[(3,)](x, 40, BLOCK=16)


def test_breakpoints_run_in_the_interpreter_and_are_ignored_when_compiling(monkeypatch):
    calls = []
    monkeypatch.setattr("sys.breakpointhook", lambda *a, **k: calls.append(1))
    monkeypatch.setenv("TILES_INTERPRET", "1")
    x = np.zeros(1, np.float32)
    breakpoint_kernel[(2,)](x)
    assert len(calls) == 2 and x[0] == 1
    tiles.compile(breakpoint_kernel, signature={"x_ptr": "*fp32"})
    assert len(calls) == 2


def test_debug_ops_compile_to_vprintf_and_an_assert_flag(ptxas):
    k = tiles.compile(print_kernel, signature={"x_ptr": "*fp32"}, constexprs={"BLOCK": 8})
    assert "vprintf" in k.asm["ptx"]
    assemble(ptxas, k.asm["ptx"], "sm_90a")
    k = tiles.compile(assert_kernel, signature={"x_ptr": "*i32", "n": "i32"}, constexprs={"BLOCK": 16}, debug=True,
                      target="sm_80")
    assert "tiles_assert_line" in k.asm["ptx"] and len(k.metadata.asserts) == 2
    assemble(ptxas, k.asm["ptx"], "sm_80")
    k = tiles.compile(assert_kernel, signature={"x_ptr": "*i32", "n": "i32"}, constexprs={"BLOCK": 16})
    assert "tiles_assert_line" not in k.asm["ptx"]


@pytest.mark.gpu
def test_device_print_on_the_gpu(monkeypatch, capfd):
    import torch

    monkeypatch.setenv("TILES_INTERPRET", "0")
    x = torch.tensor([1.5, -2.0, 3.25, 4.0], device="cuda")
    print_kernel[(1,)](x, BLOCK=4)
    torch.cuda.synchronize()
    out = capfd.readouterr().out
    assert "pid (0, 0, 0) idx (2) x: 3.250000" in out and "pid (0, 0, 0) pid: 0" in out


@pytest.mark.gpu
def test_device_assert_on_the_gpu_raises_after_the_launch(monkeypatch):
    import torch

    monkeypatch.setenv("TILES_INTERPRET", "0")
    monkeypatch.setenv("TILES_DEBUG", "1")
    x = torch.arange(40, dtype=torch.int32, device="cuda")
    assert_kernel[(3,)](x, 40, BLOCK=16)
    x[33] = -5
    with pytest.raises(AssertionError, match="x must be non-negative") as e:
        assert_kernel[(3,)](x, 40, BLOCK=16)
    assert "test_debug.py" in str(e.value)
    x[33] = 0
    assert_kernel[(3,)](x, 40, BLOCK=16)  # the context is still usable
    torch.cuda.synchronize()
    assert int(x[33]) == 1


@tiles.jit
def bare_prefix_kernel(x_ptr, BLOCK: tl.constexpr):
    tl.device_print("x", tl.load(x_ptr + tl.arange(0, BLOCK)))


def test_device_print_prefix_gets_a_colon_as_in_triton(monkeypatch, capsys):
    monkeypatch.setenv("TILES_INTERPRET", "1")
    bare_prefix_kernel[(1,)](np.array([0.5, 2.0], np.float32), BLOCK=2)
    assert "pid (0, 0, 0) idx (1) x: 2.0" in capsys.readouterr().out.splitlines()
