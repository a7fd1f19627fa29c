"""Bad input gets a clear Python exception: compile errors show file, line and caret; launch
errors name the argument; the interpreter's bounds checks name kernel, line, program and offset."""

from __future__ import annotations

import numpy as np
import pytest

import tiles
import tiles.language as tl
from kernels import copy_kernel


def compile_error(fn, signature, constexprs=None) -> tiles.CompilationError:
    with pytest.raises(tiles.CompilationError) as e:
        tiles.compile(fn, signature=signature, constexprs=constexprs or {})
    return e.value


@tiles.jit
def undefined_name(x_ptr):
    tl.store(x_ptr, foo)  # noqa: F821


@tiles.jit
def unsupported_construct(x_ptr):
    with open("f"):
        pass


@tiles.jit
def shape_mismatch(x_ptr, BLOCK: tl.constexpr):
    a = tl.arange(0, BLOCK)
    b = tl.arange(0, 2 * BLOCK)
    tl.store(x_ptr + a, a + b)


@tiles.jit
def non_pow2_arange(x_ptr):
    tl.store(x_ptr + tl.arange(0, 100), 1.0)


@tiles.jit
def runtime_arange(x_ptr, n):
    tl.store(x_ptr + tl.arange(0, n), 1.0)


@tiles.jit
def if_on_tile(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if offs > 3:
        tl.store(x_ptr + offs, 1.0)


@tiles.jit
def carried_type_change(x_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for _ in range(n):
        acc = acc + 0.5
    tl.store(x_ptr + tl.arange(0, BLOCK), acc)


@tiles.jit
def calls_python(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, np.sin(offs))


def test_undefined_name_shows_file_line_and_caret():
    e = compile_error(undefined_name, {"x_ptr": "*fp32"})
    text = str(e)
    assert "test_errors.py" in e.file and e.line == undefined_name.fn.__code__.co_firstlineno + 2
    assert "name 'foo' is not defined" in text
    assert "tl.store(x_ptr, foo)" in text and "^" in text
    caret_line = text.splitlines()[2]
    assert caret_line.index("^") == text.splitlines()[1].index("foo")


def test_unsupported_construct_is_named():
    e = compile_error(unsupported_construct, {"x_ptr": "*fp32"})
    assert "unsupported Python construct" in str(e) and "With" in str(e)


def test_shape_mismatch():
    e = compile_error(shape_mismatch, {"x_ptr": "*i32"}, {"BLOCK": 64})
    assert "broadcast" in str(e) and "a + b" in str(e)


def test_arange_needs_a_power_of_two():
    assert "power of 2" in str(compile_error(non_pow2_arange, {"x_ptr": "*fp32"}))


def test_arange_needs_constexpr_bounds():
    assert "constexpr" in str(compile_error(runtime_arange, {"x_ptr": "*fp32", "n": "i32"}))


def test_if_on_a_tile_is_rejected():
    assert "scalar condition" in str(compile_error(if_on_tile, {"x_ptr": "*fp32"}, {"BLOCK": 16}))


def test_loop_carried_type_change_is_rejected():
    e = compile_error(carried_type_change, {"x_ptr": "*i32", "n": "i32"}, {"BLOCK": 16})
    assert "loop-carried `acc`" in str(e)


def test_python_functions_cannot_take_tensors():
    assert "not a @tiles.jit" in str(compile_error(calls_python, {"x_ptr": "*fp32"}, {"BLOCK": 16}))


def test_unknown_signature_type_and_missing_parameter():
    with pytest.raises(tiles.CompilationError, match="unknown type"):
        tiles.compile(copy_kernel, signature={"x_ptr": "*fp33", "out_ptr": "*fp32", "n": "i32"},
                      constexprs={"BLOCK": 64})
    with pytest.raises(TypeError, match="'n'"):
        tiles.compile(copy_kernel, signature={"x_ptr": "*fp32", "out_ptr": "*fp32"}, constexprs={"BLOCK": 64})


def test_amd_fp8_formats_are_refused_on_nvidia_gpus_and_run_in_the_interpreter(monkeypatch):
    # As Triton: tl.float8e4b8 / tl.float8e5b16 (AMD's FNUZ formats) do not compile for an
    # NVIDIA GPU, with Triton's words; its interpreter runs them, and so does tiles'.
    import ml_dtypes

    assert tl.float8e4b8.primitive_bitwidth == 8 and tl.float8e4b15.is_fp8e4b15()

    @tiles.jit
    def k(x_ptr, y_ptr, FP8: tl.constexpr):
        offs = tl.arange(0, 8)
        q = tl.load(x_ptr + offs).to(FP8)
        tl.store(y_ptr + offs, (q + q).to(tl.float32))

    with pytest.raises(tiles.CompilationError, match="type fp8e5b16 not supported in this architecture"):
        tiles.compile(k, signature={"x_ptr": "*fp32", "y_ptr": "*fp32"}, constexprs={"FP8": tl.float8e5b16})
    monkeypatch.setenv("TILES_INTERPRET", "1")
    x = np.array([1.0, -0.375, 3.3, 100.0, -1e6, np.nan, 2.0 ** -12, 0.0], np.float32)
    for fp8, np_fp8, top in ((tl.float8e4b8, ml_dtypes.float8_e4m3fnuz, 240.0),
                             (tl.float8e5b16, ml_dtypes.float8_e5m2fnuz, 57344.0)):
        y = np.zeros(8, np.float32)
        k[(1,)](x, y, FP8=fp8)
        q = np.clip(x, -top, top).astype(np_fp8).astype(np.float32)  # saturated, NaN stays
        with np.errstate(over="ignore"):  # fp16 overflows to inf, which saturates
            want = np.clip(q.astype(np.float16) * 2, -top, top).astype(np_fp8).astype(np.float32)
        np.testing.assert_array_equal(y, want)


def test_bad_target_is_a_clean_error():
    with pytest.raises(Exception, match="unknown target"):
        tiles.compile(copy_kernel, signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                      constexprs={"BLOCK": 64}, target="sm_9x")


class TestLaunchErrors:
    @pytest.fixture(autouse=True)
    def interpret(self, monkeypatch):
        monkeypatch.setenv("TILES_INTERPRET", "1")

    def test_missing_argument_is_named(self):
        x = np.zeros(4, np.float32)
        with pytest.raises(TypeError, match="missing argument 'n'"):
            copy_kernel[(1,)](x, x, BLOCK=4)

    def test_too_many_arguments(self):
        x = np.zeros(4, np.float32)
        with pytest.raises(TypeError, match="takes 4 arguments"):
            copy_kernel[(1,)](x, x, 4, 4, 4)

    def test_unknown_keyword(self):
        x = np.zeros(4, np.float32)
        with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
            copy_kernel[(1,)](x, x, 4, BLOCK=4, bogus=1)

    def test_unsupported_argument_type_is_named(self):
        x = np.zeros(4, np.float32)
        with pytest.raises(tiles.LaunchError, match="'n'"):
            copy_kernel[(1,)](x, x, "four", BLOCK=4)

    def test_out_of_bounds_store_names_everything_and_writes_nothing(self):
        x = np.arange(10, dtype=np.float32)
        out = np.full(6, -1.0, np.float32)
        with pytest.raises(tiles.OutOfBoundsError) as e:
            copy_kernel[(1,)](x, out, 10, BLOCK=16)
        msg = str(e.value)
        assert "copy_kernel" in msg and "kernels.py" in msg and "program id (0, 0, 0)" in msg
        assert "'out_ptr'" in msg and "element 6" in msg and "6 elements" in msg
        np.testing.assert_array_equal(out, -1.0)

    def test_out_of_bounds_load_is_caught(self):
        x = np.arange(10, dtype=np.float32)
        out = np.zeros(32, np.float32)
        with pytest.raises(tiles.OutOfBoundsError, match="load"):
            copy_kernel[(1,)](x, out, 32, BLOCK=32)


    def test_a_view_may_be_read_past_into_its_allocation(self, rng):
        # As on the GPU (and in Triton's interpreter, which copies the whole storage): a kernel
        # given a slice may reach the rest of the array that owns the memory, and no further.
        whole = rng.standard_normal(40).astype(np.float32)
        out = np.zeros(24, np.float32)
        copy_kernel[(1,)](whole[8:16], out, 24, BLOCK=32)
        np.testing.assert_array_equal(out, whole[8:32])
        with pytest.raises(tiles.OutOfBoundsError) as e:
            copy_kernel[(1,)](whole[8:16], np.zeros(40, np.float32), 40, BLOCK=64)
        msg = str(e.value)
        assert "'x_ptr'" in msg and "element 32" in msg and "8 elements" in msg and "allocation of 160 bytes" in msg

@pytest.mark.gpu
class TestGpuLaunchErrors:
    @pytest.fixture(autouse=True)
    def compiled(self, monkeypatch):
        monkeypatch.setenv("TILES_INTERPRET", "0")

    def test_host_array_is_rejected_by_name(self):
        x = np.zeros(4, np.float32)
        with pytest.raises(tiles.LaunchError, match="'x_ptr' is a host"):
            copy_kernel[(1,)](x, x, 4, BLOCK=4)

    def test_cpu_tensor_is_rejected_by_name(self):
        import torch

        x = torch.zeros(4)
        with pytest.raises(tiles.LaunchError, match="'x_ptr' is a CPU tensor"):
            copy_kernel[(1,)](x, x, 4, BLOCK=4)

    def test_cuda_array_interface_and_dlpack_producers(self):
        import torch

        x = torch.randn(1000, device="cuda")

        class CAI:
            def __init__(self, t):
                self.__cuda_array_interface__ = t.__cuda_array_interface__

        class DL:
            def __init__(self, t):
                self.t = t

            def __dlpack__(self, stream=None):
                return self.t.__dlpack__()

            def __dlpack_device__(self):
                return self.t.__dlpack_device__()

        for wrap in (CAI, DL):
            out = torch.zeros_like(x)
            copy_kernel[(8,)](wrap(x), wrap(out), 1000, BLOCK=128)
            torch.cuda.synchronize()
            assert torch.equal(out, x)


@pytest.mark.gpu
def test_gpu_tensors_given_to_the_interpreter_are_copied(monkeypatch):
    # As Triton's interpreter does: to the host for the run, and back.
    import torch

    monkeypatch.setenv("TILES_INTERPRET", "1")
    x = torch.arange(4, device="cuda", dtype=torch.float32)
    y = torch.zeros(4, device="cuda")
    copy_kernel[(1,)](x, y, 4, BLOCK=4)
    assert torch.equal(x, y)


def test_interpreter_errors_name_the_kernel_line(monkeypatch):
    monkeypatch.setenv("TILES_INTERPRET", "1")
    x = np.zeros(4, np.float32)
    with pytest.raises(tiles.InterpreterError, match=r"shape_mismatch at .*test_errors.py:\d+ \(program id"):
        shape_mismatch[(1,)](x, BLOCK=4)


def test_misusing_the_native_builder_raises_instead_of_panicking():
    from tiles import _tiles

    b = _tiles.IrBuilder("k", 4, "f.py")
    c = b.constant(1, "i1")
    h = b.begin_if(c)
    for call in (lambda: b.end_for(h, []), lambda: b.discard_for(h), lambda: b.end_for(99, []),
                 lambda: b.binary("add", 12345, c), lambda: b.binary("frobnicate", c, c),
                 lambda: b.enter_region(h, 5), lambda: b.arange(0, 3), lambda: b.cast(c, "fp99")):
        with pytest.raises(_tiles.IrError):
            call()


@tiles.must_use_result("Store it.")
@tiles.jit
def _cube(x):
    return x * x * x


def test_must_use_result_is_enforced():
    @tiles.jit
    def drops(out_ptr):
        x = tl.arange(0, 16).to(tl.float32)
        _cube(x)
        tl.store(out_ptr + tl.arange(0, 16), x)

    @tiles.jit
    def keeps(out_ptr):
        x = _cube(tl.arange(0, 16).to(tl.float32))
        tl.store(out_ptr + tl.arange(0, 16), x)

    tiles.compile(keeps, signature={"out_ptr": "*fp32"})
    with pytest.raises(tiles.CompilationError, match=r"The result of _cube is not being used\. Store it\."):
        tiles.compile(drops, signature={"out_ptr": "*fp32"})


def test_triton_compile_time_checks():
    @tiles.jit(do_not_specialize=["N"])
    def dns_constexpr(x_ptr, N: tl.constexpr):
        tl.store(x_ptr, N)

    with pytest.raises(tiles.CompilationError, match="N marked as constexpr and listed in do_not_specialize"):
        tiles.compile(dns_constexpr, signature={"x_ptr": "*i32"}, constexprs={"N": 5})

    @tiles.jit
    def imprecise(out_ptr):
        a = tl.full((64, 64), 1.0, tl.float16)
        tl.store(out_ptr + tl.arange(0, 64), tl.sum(tl.dot(a, a, max_num_imprecise_acc=128), 1))

    with pytest.raises(tiles.CompilationError, match=r"max_num_imprecise_acc \(128\) must be <= K \(64\)"):
        tiles.compile(imprecise, signature={"out_ptr": "*fp32"})

    @tiles.jit
    def int_where(out_ptr):
        c = tl.full((64,), 0, tl.uint32)
        tl.store(out_ptr + tl.arange(0, 64), tl.where(c, 1.0, 2.0))

    with pytest.warns(UserWarning, match="non-boolean condition"):
        tiles.compile(int_where, signature={"out_ptr": "*fp32"})


@pytest.mark.parametrize("dt", ["i8", "u16", "fp8e4nv"])
def test_atomics_on_unsupported_types_fail_alike_in_both_modes(monkeypatch, dt):
    @tiles.jit
    def add_one(p):
        tl.atomic_add(p, tl.load(p))

    with pytest.raises(tiles.CompilationError, match="atomic_add does not support"):
        tiles.compile(add_one, signature={"p": f"*{dt}"})
    monkeypatch.setenv("TILES_INTERPRET", "1")
    npdt = {"i8": np.int8, "u16": np.uint16, "fp8e4nv": np.uint8}[dt]
    arg = np.zeros(4, npdt) if dt != "fp8e4nv" else tiles.reinterpret(np.zeros(4, np.uint8), tl.float8e4nv)
    with pytest.raises(tiles.TilesError, match="atomic_add does not support"):
        add_one[(1,)](arg)


@tiles.jit
def _pick(a, b, choose_b):
    if choose_b:
        return b
    else:
        return a


@tiles.jit
def const_store(src: tl.const, out, choose, MODE: tl.constexpr):
    # Triton's `tl.const`: the kernel may read `src` but not write it, and a const pointer is
    # another type than a plain one where branches or returns meet.
    offs = tl.arange(0, 16)
    val = tl.load(src + offs)
    if MODE == "direct":
        dst = src
    elif MODE == "plain":
        dst = out
    elif MODE == "call":
        dst = _pick(out, src, choose)
    elif MODE == "ternary":
        dst = src if choose else out
    else:
        if choose:
            dst = src
        else:
            dst = out
    tl.store(dst + offs, val + 1)


@pytest.mark.parametrize("mode, error", [
    ("direct", "Cannot store to a constant pointer"),
    ("call", "Return type mismatch"),
    ("ternary", "Ternary expression with dynamic condition has inconsistent type"),
    ("if", "Mismatched type for dst between then block"),
])
def test_const_pointers_are_not_written(mode, error):
    sig = {"src": "*fp32", "out": "*fp32", "choose": "i32"}
    e = compile_error(const_store, sig, {"MODE": mode})
    assert error in e.error_message and error in str(e)


def test_const_pointers_are_read(dev, rng):
    x = rng.standard_normal(16).astype(np.float32)
    out = dev.put(np.zeros(16, np.float32))
    const_store[(1,)](dev.put(x), out, 0, MODE="plain")
    np.testing.assert_allclose(dev.get(out), x + 1)
    with pytest.raises(Exception, match="Cannot store to a constant pointer"):
        const_store[(1,)](dev.put(x), out, 0, MODE="direct")


def test_num_warps_must_be_a_power_of_two():
    # A ValueError, and an AssertionError as Triton's (its tests and users catch that).
    for exc in (ValueError, AssertionError):
        with pytest.raises(exc, match="must be a power of 2"):
            tiles.compile(copy_kernel, signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                          constexprs={"BLOCK": 128}, num_warps=3)


@tiles.jit
def bad_expand_dims(x_ptr, AXES: tl.constexpr):
    t = tl.expand_dims(tl.arange(0, 16), AXES)
    tl.store(x_ptr + tl.arange(0, 16), tl.reshape(t, (16,)))


@tiles.jit
def bad_program_id(x_ptr, AXIS: tl.constexpr):
    tl.store(x_ptr, tl.program_id(AXIS))


@pytest.mark.parametrize("kernel,constexprs,cause,text", [
    (bad_expand_dims, {"AXES": (0, -3)}, ValueError, r"duplicate axes, normalized axes = \[0, 0\]"),
    (bad_expand_dims, {"AXES": 2}, ValueError, "invalid axis 2"),
    (bad_expand_dims, {"AXES": -3}, ValueError, "invalid axis -3"),
    (bad_program_id, {"AXIS": 3 + int(np.random.default_rng().integers(0, 30))}, ValueError,
     r"program_id axis must be 0, 1, or 2 but got \d+"),
])
def test_compile_errors_keep_the_original_exception_as_their_cause(kernel, constexprs, cause, text):
    # Code written for Triton reads the original error from `__cause__`; tiles keeps it, without
    # tiles' own frames, while its message still shows the kernel's line and caret.
    e = compile_error(kernel, {"x_ptr": "*i32"}, constexprs)
    assert isinstance(e.__cause__, cause) and e.__cause__.__traceback__ is None
    import re

    assert re.search(text, str(e.__cause__)) and re.search(text, str(e))
    assert "test_errors.py" in str(e) and "^" in str(e)


@tiles.jit
def literal_against_a_tile(x_ptr, LEFT: tl.constexpr, VALUE: tl.constexpr):
    offs = tl.arange(0, 16)
    x = tl.load(x_ptr + offs)
    y = VALUE + x if LEFT else x * VALUE
    tl.store(x_ptr + offs, y)


@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize("ty, value, text", [("*i8", 300, "literal 300 is out of range for int8"),
                                              ("*u32", -1, "negative literal -1"),
                                              ("*i16", 1 << 40, "out of range for int16")])
def test_literals_out_of_a_tiles_range_are_refused(left, ty, value, text):
    # Either side of the operator, and a constexpr as the plain number: each is checked.
    e = compile_error(literal_against_a_tile, {"x_ptr": ty}, {"LEFT": left, "VALUE": value})
    assert text in str(e)


@tiles.jit
def lambda_combine_kernel(x_ptr):
    x = tl.load(x_ptr + tl.arange(0, 8))
    tl.store(x_ptr, tl.reduce(x, 0, lambda a, b: a + b))


def test_what_does_not_compile_does_not_run_in_the_interpreter_either(monkeypatch):
    # A lambda combine function (Triton's compiler refuses it too: combine functions are @jit
    # functions) is refused in both modes, with the kernel's line.
    with pytest.raises(tiles.CompilationError, match="unsupported Python construct in a kernel: Lambda"):
        tiles.compile(lambda_combine_kernel, signature={"x_ptr": "*fp32"})
    monkeypatch.setenv("TILES_INTERPRET", "1")
    with pytest.raises(tiles.CompilationError, match="unsupported Python construct in a kernel: Lambda") as e:
        lambda_combine_kernel[(1,)](np.zeros(8, np.float32))
    assert "tl.reduce(x, 0, lambda a, b: a + b)" in str(e.value)
    with pytest.raises(tiles.CompilationError, match="break is not supported in kernels"):
        break_kernel[(1,)](np.zeros(8, np.float32), 3)
    monkeypatch.setenv("TILES_INTERPRET", "0")
    with pytest.raises(tiles.CompilationError, match="break is not supported in kernels"):
        tiles.compile(break_kernel, signature={"x_ptr": "*fp32", "n": "i32"})


@tiles.jit
def break_kernel(x_ptr, n):
    for i in range(n):
        if i > 1:
            break
        tl.store(x_ptr + i, 1.0)


@tiles.jit
def loop_changes_type(x_ptr, o_ptr, n, B: tl.constexpr, WHILE: tl.constexpr):
    acc = tl.zeros([B], tl.float32)
    if WHILE:
        i = 0
        while i < n:
            acc = (acc + tl.load(x_ptr + i * B + tl.arange(0, B))).to(tl.float16)
            i += 1
    else:
        for i in range(n):
            acc = (acc + tl.load(x_ptr + i * B + tl.arange(0, B))).to(tl.float16)
    tl.store(o_ptr + tl.arange(0, B), acc)


@tiles.jit
def loop_takes_a_type(x_ptr, o_ptr, n, B: tl.constexpr):
    acc = 0  # a number as loop state takes the type the first pass gives it
    j = 0
    for i in range(n):
        acc += tl.load(x_ptr + i * B + tl.arange(0, B))
        j += 1
    while j > 0:
        acc = acc * 1.0
        j -= 1
    tl.store(o_ptr + tl.arange(0, B), acc)


@tiles.jit
def return_in_a_loop(x_ptr, n):
    for i in range(n):
        if i == 2:
            return
        tl.store(x_ptr + i, 1.0)


@pytest.mark.parametrize("use_while", [False, True])
def test_loop_state_changing_type_is_refused_in_both_modes(monkeypatch, use_while):
    # The compiler refuses a loop whose carried tile changes dtype; the interpreter, which would
    # simply run it, refuses it with the same message and line.
    text = r"loop-carried `acc` changes from fp32\[16\] to fp16\[16\] in the loop body"
    with pytest.raises(tiles.CompilationError, match=text) as compiled:
        tiles.compile(loop_changes_type, signature={"x_ptr": "*fp32", "o_ptr": "*fp32", "n": "i32"},
                      constexprs={"B": 16, "WHILE": use_while})
    monkeypatch.setenv("TILES_INTERPRET", "1")
    x = np.random.rand(3 * 16).astype(np.float32)
    with pytest.raises(tiles.CompilationError, match=text) as interpreted:
        loop_changes_type[(1,)](x, np.zeros(16, np.float32), 3, B=16, WHILE=use_while)
    assert compiled.value.line == interpreted.value.line and "^" in str(interpreted.value)


def test_loop_state_given_as_a_number_takes_the_bodys_type(monkeypatch):
    tiles.compile(loop_takes_a_type, signature={"x_ptr": "*fp32", "o_ptr": "*fp32", "n": "i32"},
                  constexprs={"B": 16})
    monkeypatch.setenv("TILES_INTERPRET", "1")
    x, o = np.random.rand(3 * 16).astype(np.float32), np.zeros(16, np.float32)
    loop_takes_a_type[(1,)](x, o, 3, B=16)
    np.testing.assert_allclose(o, x.reshape(3, 16).astype(np.float64).sum(0), rtol=1e-6)


def test_return_in_a_loop_is_refused_in_both_modes(monkeypatch):
    with pytest.raises(tiles.CompilationError, match="return inside a loop is not supported"):
        tiles.compile(return_in_a_loop, signature={"x_ptr": "*fp32", "n": "i32"})
    monkeypatch.setenv("TILES_INTERPRET", "1")
    with pytest.raises(tiles.CompilationError, match="return inside a loop is not supported"):
        return_in_a_loop[(1,)](np.zeros(8, np.float32), 4)


def test_a_bad_grid_or_element_type_is_named(monkeypatch):
    monkeypatch.setenv("TILES_INTERPRET", "1")
    x, y = np.zeros(64, np.float32), np.zeros(64, np.float32)
    for grid, msg in ((("x",), "grid must be 1 to 3 ints"), ((1, 1, 1, 1), "grid must have 1 to 3 dimensions"),
                      ((), "grid must have 1 to 3 dimensions")):
        with pytest.raises(tiles.LaunchError, match=msg):
            copy_kernel[grid](x, y, 64, BLOCK=64)
    with pytest.raises(tiles.LaunchError, match="argument 'x_ptr': numpy dtype complex64 is not supported"):
        copy_kernel[(1,)](x.astype(np.complex64), y, 64, BLOCK=64)
    copy_kernel[(1.0,)](x, y, 64, BLOCK=64)  # a float grid size is taken as its int, as before
