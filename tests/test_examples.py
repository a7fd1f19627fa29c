"""Every example runs unchanged (in the interpreter here, on the GPU where there is one), and
every example kernel's PTX is accepted by ptxas for sm_80 and sm_90a."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from test_compile import assemble

import tiles

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def load(name: str):
    sys.path.insert(0, EXAMPLES)
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", sorted(f[:-3] for f in os.listdir(EXAMPLES) if f[0].isdigit() and f.endswith(".py")))
def test_example_runs(name):
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, name + ".py")], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


P16 = {"x_ptr": "*fp32:16", "y_ptr": "*fp32:16", "output_ptr": "*fp32:16", "n_elements": "i32:16"}
KERNELS = [
    ("01_vector_add", "add_kernel", P16, {"BLOCK_SIZE": 1024}, 4),
    ("02_fused_softmax", "softmax_kernel", {"output_ptr": "*fp16:16", "input_ptr": "*fp16:16",
                                            "input_row_stride": "i32:16", "output_row_stride": "i32:16",
                                            "n_rows": "i32", "n_cols": "i32:16"}, {"BLOCK_SIZE": 4096}, 8),
    ("03_layer_norm", "_layer_norm_fwd_fused", {"X": "*fp16:16", "Y": "*fp16:16", "W": "*fp16:16", "B": "*fp16:16",
                                                "Mean": "*fp32", "Rstd": "*fp32", "stride": "i32:16", "N": "i32:16",
                                                "eps": "fp32"}, {"BLOCK_SIZE": 4096}, 8),
    ("03_layer_norm", "_layer_norm_bwd_dx_fused", {"DX": "*fp32", "DY": "*fp32", "DW": "*fp32", "DB": "*fp32",
                                                   "X": "*fp32", "W": "*fp32", "Mean": "*fp32", "Rstd": "*fp32",
                                                   "Lock": "*i32", "stride": "i32", "N": "i32"},
     {"GROUP_SIZE_M": 64, "BLOCK_SIZE_N": 2048}, 8),
    ("03_layer_norm", "_layer_norm_bwd_dwdb", {"DW": "*fp32", "DB": "*fp32", "FINAL_DW": "*fp32",
                                               "FINAL_DB": "*fp32", "M": "i32", "N": "i32"},
     {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 128}, 4),
    ("04_rms_norm", "rms_norm_kernel", {"X": "*fp16", "W": "*fp16", "Y": "*fp16", "stride": "i32", "N": "i32",
                                        "eps": "fp32"}, {"BLOCK_SIZE": 1024}, 4),
    ("05_online_softmax", "online_softmax_kernel", {"out_ptr": "*fp32", "in_ptr": "*fp32", "stride": "i32",
                                                    "n_cols": "i32"}, {"BLOCK": 1024}, 4),
    ("06_matmul", "matmul_kernel", {"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "c_ptr": "*fp16:16", "M": "i32:16",
                                    "N": "i32:16", "K": "i32:16", "stride_am": "i32:16", "stride_ak": "i32",
                                    "stride_bk": "i32:16", "stride_bn": "i32", "stride_cm": "i32:16",
                                    "stride_cn": "i32"},
     {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8, "ACTIVATION": "leaky_relu"},
     8),
    ("07_batched_matmul", "bmm_kernel", {"a_ptr": "*bf16:16", "b_ptr": "*bf16:16", "c_ptr": "*bf16:16", "M": "i32",
                                         "N": "i32", "K": "i32:16", "stride_ab": "i32:16", "stride_am": "i32:16",
                                         "stride_ak": "i32", "stride_bb": "i32:16", "stride_bk": "i32",
                                         "stride_bn": "i32:16", "stride_cb": "i32:16", "stride_cm": "i32:16",
                                         "stride_cn": "i32"}, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, 4),
    ("08_int8_matmul", "int8_matmul_kernel", {"a_ptr": "*i8:16", "b_ptr": "*i8:16", "c_ptr": "*i32:16",
                                              "y_ptr": "*fp16:16", "sa_ptr": "*fp32:16", "sb_ptr": "*fp32:16",
                                              "M": "i32", "N": "i32:16", "K": "i32:16"},
     {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}, 4),
]


@pytest.mark.parametrize("case", range(len(KERNELS)))
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_example_kernels_assemble(ptxas, case, target):
    mod, fn, sig, cx, warps = KERNELS[case]
    k = tiles.compile(getattr(load(mod), fn), signature=sig, constexprs=cx, target=target, num_warps=warps)
    assemble(ptxas, k.asm["ptx"], target)
