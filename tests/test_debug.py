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
    asserts = k.metadata.asserts
    assert "tiles_assert_line" in k.asm["ptx"]
    assert {"x must be non-negative", "x must be below 100"} <= set(asserts.values())
    assert all(m.startswith("int32 overflow") for m in set(asserts.values()) - {"x must be non-negative",
                                                                              "x must be below 100"})
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


# -- debug mode's integer overflow checks (Triton's `sanitize_overflow`) ---------------------------


@tiles.jit
def arith_kernel(x_ptr, y_ptr, z_ptr, OP: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, 8))
    y = tl.load(y_ptr + tl.arange(0, 8))
    if OP == "add":
        z = x + y
    elif OP == "sub":
        z = x - y
    else:
        z = x * y
    tl.store(z_ptr + tl.arange(0, 8), z)


@tiles.jit
def unchecked_kernel(x_ptr, y_ptr, z_ptr, r_ptr):
    offs = tl.arange(0, 8)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(z_ptr + offs, tl.add(tl.mul(x, y, sanitize_overflow=False), y, sanitize_overflow=False))
    tl.store(r_ptr + offs, tl.randint(12345, offs))  # Philox's wrapping arithmetic is not checked


_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply}


def _operands(rng, dt, op, overflow):
    """Random operands whose exact result overflows `dt` in one lane (or in none)."""
    info = np.iinfo(dt)
    cap = 3 if op == "mul" else min(100, info.max // 8)
    x = rng.integers(info.min // 4, info.max // 4, 8, endpoint=True)
    if info.min == 0 and op == "sub":
        x += cap
    x = x.astype(dt)
    y = rng.integers(1, cap, 8, endpoint=True).astype(dt)
    if overflow:
        lane = int(rng.integers(0, 8))
        big = info.max - int(rng.integers(0, 50))
        x[lane], y[lane] = {"add": (big, 100), "sub": (info.min + int(rng.integers(0, 50)), 100),
                            "mul": (big, 2 + int(rng.integers(0, 5)))}[op]
        if info.min == 0 and op == "sub":
            x[lane], y[lane] = int(rng.integers(0, 50)), 100
    return x, y


def _run_arith(kernel, x, y, op, **launch):
    z = np.empty_like(x)
    if kernel is arith_kernel:
        kernel[(1,)](x, y, z, OP=op, **launch)
    else:
        kernel[(1,)](x, y, z, np.empty(8, np.uint32), **launch)
    return z


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
@pytest.mark.parametrize("dt", [np.int8, np.int16, np.int32, np.uint16, np.uint32])
def test_debug_mode_checks_integer_overflow_in_the_interpreter(monkeypatch, op, dt):
    monkeypatch.setenv("TILES_INTERPRET", "1")
    monkeypatch.delenv("TILES_DEBUG", raising=False)
    monkeypatch.delenv("TRITON_DEBUG", raising=False)
    rng = np.random.default_rng()
    x, y = _operands(rng, dt, op, overflow=False)
    want = _OPS[op](x.astype(np.int64), y.astype(np.int64))
    np.testing.assert_array_equal(_run_arith(arith_kernel, x, y, op, debug=True), want.astype(dt))
    x, y = _operands(rng, dt, op, overflow=True)
    wrapped = _OPS[op](x.astype(np.int64), y.astype(np.int64)).astype(dt)  # two's complement wrap
    bits = np.dtype(dt).itemsize * 8
    # As in Triton: a RuntimeError saying "device-side assert", and an AssertionError.
    with pytest.raises(RuntimeError, match=f"device-side assert.*int{bits} overflow detected for operation {op}"):
        _run_arith(arith_kernel, x, y, op, debug=True)
    with pytest.raises(AssertionError):
        _run_arith(arith_kernel, x, y, op, debug=True)
    # Not checked: without debug, with the option off, or through tl.* with the call's flag off.
    np.testing.assert_array_equal(_run_arith(arith_kernel, x, y, op), wrapped)
    np.testing.assert_array_equal(_run_arith(arith_kernel, x, y, op, debug=True, sanitize_overflow=False), wrapped)
    if op == "mul":
        want = (x.astype(np.int64) * y + y).astype(dt)
        np.testing.assert_array_equal(_run_arith(unchecked_kernel, x, y, op, debug=True), want)


def test_overflow_checks_skip_64_bit_integers_and_follow_the_debug_environment(monkeypatch):
    monkeypatch.setenv("TILES_INTERPRET", "1")
    rng = np.random.default_rng()
    x = rng.integers(2**62, 2**63 - 1, 8, dtype=np.int64)
    y = rng.integers(2**62, 2**63 - 1, 8, dtype=np.int64)
    np.testing.assert_array_equal(_run_arith(arith_kernel, x, y, "add", debug=True), x + y)  # wraps, unchecked
    x32 = np.full(8, 2**31 - 1, np.int32) - rng.integers(0, 9, 8).astype(np.int32)
    y32 = rng.integers(10, 20, 8).astype(np.int32)
    # TILES_DEBUG / TRITON_DEBUG turn debugging on even where the launch or @jit says False.
    monkeypatch.setenv("TRITON_DEBUG", "1")
    with pytest.raises(RuntimeError, match="int32 overflow"):
        _run_arith(arith_kernel, x32, y32, "add", debug=False)


@tiles.jit
def masked_assert_kernel(COND: tl.constexpr, MASK: tl.constexpr):
    tl.device_assert(COND, "cond failed", mask=MASK)


def test_device_assert_takes_a_none_mask(monkeypatch):
    monkeypatch.setenv("TILES_INTERPRET", "1")
    masked_assert_kernel[(1,)](True, None)
    masked_assert_kernel[(1,)](False, False)
    with pytest.raises(RuntimeError, match="cond failed"):
        masked_assert_kernel[(1,)](False, None)
    with pytest.raises(RuntimeError, match="cond failed"):
        masked_assert_kernel[(1,)](False, True)


def test_overflow_checks_compile_only_in_debug_mode(ptxas):
    sig = {"x_ptr": "*i32", "y_ptr": "*i32", "z_ptr": "*i32"}
    k = tiles.compile(arith_kernel, signature=sig, constexprs={"OP": "mul"}, debug=True, target="sm_80")
    assert "tiles_assert_line" in k.asm["ptx"]
    assert list(k.metadata.asserts.values()) == ["int32 overflow detected for operation mul"]
    assemble(ptxas, k.asm["ptx"], "sm_80")
    for options in ({"debug": False}, {"debug": True, "sanitize_overflow": False}):
        k = tiles.compile(arith_kernel, signature=sig, constexprs={"OP": "mul"}, options=options)
        assert "tiles_assert_line" not in k.asm["ptx"]
    k = tiles.compile(unchecked_kernel, signature=dict(sig, r_ptr="*u32"), debug=True)
    assert "tiles_assert_line" not in k.asm["ptx"]  # tl.mul/tl.add with sanitize_overflow=False, and randint


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_debug_mode_checks_integer_overflow_on_the_gpu(monkeypatch, op):
    import torch

    monkeypatch.setenv("TILES_INTERPRET", "0")
    monkeypatch.delenv("TILES_DEBUG", raising=False)
    monkeypatch.delenv("TRITON_DEBUG", raising=False)
    rng = np.random.default_rng()
    for dt in (np.int16, np.int32, np.uint32):
        tdt = {np.int16: torch.int16, np.int32: torch.int32, np.uint32: torch.uint32}[dt]
        x, y = _operands(rng, dt, op, overflow=False)
        want = _OPS[op](x.astype(np.int64), y.astype(np.int64)).astype(dt)
        gx, gy = (torch.from_numpy(a.view(np.int32) if dt == np.uint32 else a).cuda().view(tdt) for a in (x, y))
        gz = torch.empty_like(gx)
        arith_kernel[(1,)](gx, gy, gz, OP=op, debug=True)
        got = gz.view(torch.int32 if dt == np.uint32 else tdt).cpu().numpy().view(dt)
        np.testing.assert_array_equal(got, want)
        x, y = _operands(rng, dt, op, overflow=True)
        gx, gy = (torch.from_numpy(a.view(np.int32) if dt == np.uint32 else a).cuda().view(tdt) for a in (x, y))
        with pytest.raises(RuntimeError, match="device-side assert.*overflow detected"):
            arith_kernel[(1,)](gx, gy, gz, OP=op, debug=True)
        arith_kernel[(1,)](gx, gy, gz, OP=op, debug=True, sanitize_overflow=False)  # the context still works
        got = gz.view(torch.int32 if dt == np.uint32 else tdt).cpu().numpy().view(dt)
        np.testing.assert_array_equal(got, _OPS[op](x.astype(np.int64), y.astype(np.int64)).astype(dt))


@pytest.mark.gpu
def test_turning_debug_on_reaches_kernels_already_launched(monkeypatch):
    # A kernel the native launcher learned runs in debug mode once knobs.runtime.debug is set
    # (the learned launches are dropped), and its assert then fires.
    import torch

    monkeypatch.setenv("TILES_INTERPRET", "0")
    monkeypatch.delenv("TILES_DEBUG", raising=False)
    monkeypatch.delenv("TRITON_DEBUG", raising=False)
    x = torch.arange(40, dtype=torch.int32, device="cuda")
    kernel = tiles.jit(assert_kernel.fn)
    for _ in range(3):  # the native launcher takes over after the first launch
        kernel[(3,)](x, 40, BLOCK=16)
    x[5] = -7
    kernel[(3,)](x, 40, BLOCK=16)  # no debug: the assert is compiled out
    try:
        tiles.knobs.runtime.debug = True
        x[5] = -7
        with pytest.raises(RuntimeError, match="x must be non-negative"):
            kernel[(3,)](x, 40, BLOCK=16)
    finally:
        tiles.knobs.runtime.debug = None


def test_setting_debug_or_the_target_forgets_learned_launches(monkeypatch):
    # CPU twin: the knobs that change compiled code tell the native launchers to forget.
    calls = []
    monkeypatch.setattr(tiles._tiles, "forget_learned_launches", lambda: calls.append(1))
    monkeypatch.delenv("TILES_DEBUG", raising=False)
    monkeypatch.delenv("TILES_OVERRIDE_ARCH", raising=False)
    tiles.knobs.runtime.debug = True
    tiles.knobs.runtime.debug = None
    tiles.knobs.runtime.override_arch = "sm80"
    tiles.knobs.runtime.override_arch = None
    tiles.knobs.refresh_knobs()
    assert len(calls) == 5
