"""The text form of the IR: print -> parse -> print is identical for every kernel the frontend
produces (conformance kernels and examples, before and after the passes), and a parsed kernel
compiles to the same PTX."""

from __future__ import annotations

import pytest
from test_compile import OTHER
from test_dot import SIG as DOT_SIG
from test_dot import matmul_kernel
from test_examples import KERNELS, load
from test_reductions import COMPILE_CASES
from test_shapes_scans import permute3d_kernel, scan_kernel, shapes_kernel

import tiles
import tiles.language as tl
from tiles import _tiles


def cases():
    out = [(fn, sig, cx, 4) for fn, sig, cx in OTHER]
    out += [(fn, sig, cx, 4) for fn, sig, cx, _ in COMPILE_CASES]
    out += [(getattr(load(m), f), sig, cx, w) for m, f, sig, cx, w in KERNELS]
    out += [(scan_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32"},
             {"OP": "cumsum", "AXIS": 1, "REVERSE": True, "M": 8, "N": 256}, 4),
            (shapes_kernel, {k: "*i32" for k in ("x_ptr", "t_ptr", "r_ptr", "j_ptr", "s_ptr", "i_ptr")},
             {"M": 16, "N": 32}, 4),
            (permute3d_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32"}, {"A": 4, "B": 8, "C": 16}, 4)]
    for dt, precision, acc in (("fp16", "tf32", tl.float32), ("fp32", "ieee", tl.float32), ("i8", "tf32", tl.int32)):
        out.append((matmul_kernel, dict(DOT_SIG, a_ptr="*" + dt, b_ptr="*" + dt, c_ptr="*fp32"),
                    {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 32, "ACC": acc, "PRECISION": precision,
                     "FORM": "plus", "STAGES": 2}, 4))
    return out


@pytest.mark.parametrize("case", range(len(cases())))
def test_print_parse_print_is_identical(case, monkeypatch):
    monkeypatch.setenv("TILES_CACHE", "0")
    fn, sig, cx, warps = cases()[case]
    k = tiles.compile(fn, signature=sig, constexprs=cx, num_warps=warps)
    for stage in ("tir", "tir_opt"):
        text = k.asm[stage]
        assert _tiles.parse_ir(text).text() == text, stage
    again = _tiles.parse_ir(k.asm["tir"]).compile("sm_90a")
    assert again["ptx"] == k.asm["ptx"]


def test_parse_errors_are_located():
    with pytest.raises(_tiles.IrError, match=r"parse error at 2:\d+: %7 is not defined"):
        _tiles.parse_ir("kernel @k() num_warps = 4 {\n  %0 = neg %7 : fp32\n  return\n}")
