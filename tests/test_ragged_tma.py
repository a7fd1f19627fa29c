"""`tiles.tools.ragged_tma` (Triton's `triton.tools.ragged_tma`): slices of one tensor read,
written and atomically added through one descriptor, cut at each slice's end, in both modes
against numpy, with a ptxas twin."""

from __future__ import annotations

import numpy as np
import pytest

import tiles
import tiles.language as tl
from test_language import random
from tiles.tools.ragged_tma import atomic_add_ragged, create_ragged_descriptor, load_ragged, store_ragged


@tiles.jit
def ragged_copy_kernel(X, Y, x_off, y_off, x_size, y_size, ADD: tl.constexpr):
    data = load_ragged(X, x_off, x_size, [0, 0])
    if ADD:
        atomic_add_ragged(Y, y_off, y_size, [0, 0], data)
    else:
        store_ragged(Y, y_off, y_size, [0, 0], data)


@tiles.jit
def ragged_rows_kernel(X, Y, off, size, BLOCK: tl.constexpr):
    # Blocks of rows walk one slice; the last block is cut at the slice's end. Ragged along
    # dimension 1 of a 3-dimensional tensor.
    for r in range(0, size, BLOCK):
        data = load_ragged(X, off, size, [0, r, 0], ragged_dim=1)
        store_ragged(Y, off, size, [0, r, 0], data * 2, ragged_dim=1)


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "int32", "int64", "uint8"])
def test_ragged_load_store_and_atomic_add(dev, rng, name):
    lo = 0 if name == "uint8" else -50
    src1, src2, ref = (random(rng, (1024, 80), name, lo, 50) for _ in range(3))
    dst = dev.put(ref)
    descs = [create_ragged_descriptor(dev.put(a), [32, 128]) for a in (src1, src2)]
    y = create_ragged_descriptor(dst, [32, 128])
    x_off, y_off = (int(v) for v in rng.integers(0, 200, 2))
    x_size, y_size = 17, 24
    ragged_copy_kernel[(1,)](descs[0], y, x_off, y_off, x_size, y_size, ADD=False)
    add = name in ("float32", "float16", "int32")
    if add:
        ragged_copy_kernel[(1,)](descs[1], y, x_off, y_off, x_size, y_size, ADD=True)
    got = dev.get(dst)
    want = (src1.astype(np.float64) + src2.astype(np.float64)).astype(src1.dtype) if add else src1
    np.testing.assert_array_equal(got[:y_off], ref[:y_off])  # before the slice: untouched
    np.testing.assert_array_equal(got[y_off + y_size:], ref[y_off + y_size:])  # after it too
    np.testing.assert_array_equal(got[y_off:y_off + x_size], want[x_off:x_off + x_size])
    # Rows the read slice does not have arrive as zeros and are written inside the written one.
    np.testing.assert_array_equal(got[y_off + x_size:y_off + y_size].astype(np.float64), 0)


def test_ragged_along_a_middle_dimension(dev, rng):
    x = rng.standard_normal((2, 300, 16)).astype(np.float32)
    y0 = rng.standard_normal((2, 300, 16)).astype(np.float32)
    yd = dev.put(y0)
    off, size = 37, 90
    ragged_rows_kernel[(1,)](create_ragged_descriptor(dev.put(x), [2, 32, 16], ragged_dim=1),
                             create_ragged_descriptor(yd, [2, 32, 16], ragged_dim=1), off, size, BLOCK=32)
    want = y0.copy()
    want[:, off:off + size] = 2 * x[:, off:off + size]
    np.testing.assert_array_equal(dev.get(yd), want)


def test_ragged_descriptor_checks():
    a = np.zeros((16, 8), np.float32)
    with pytest.raises(ValueError, match="last cannot be ragged"):
        create_ragged_descriptor(a, [16, 8], ragged_dim=1)
    with pytest.raises(ValueError, match="one entry per dimension"):
        create_ragged_descriptor(a, [16])
    with pytest.raises(ValueError, match="at most 3 dimensions"):
        create_ragged_descriptor(np.zeros((2, 2, 2, 8), np.float32), [2, 2, 2, 8])
    d = create_ragged_descriptor(a, [4, 8])
    assert d.shape[2] == 1 << 30 and d.strides[:2] == [(1 << 34) - 8, 8] and d.block_shape == [1, 1, 4, 8]


def test_shapes_concatenate_with_lists_as_triton_s():
    # Triton's shapes are lists: `[1, 1] + x.shape` (as ragged_tma writes it) is a list.
    from tiles.core import shape_tuple

    s = shape_tuple((4, 8))
    assert [1, 1] + s == [1, 1, 4, 8] and isinstance([1] + s, list)
    assert s + [2] == [4, 8, 2] and s + (2,) == (4, 8, 2)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_ragged_kernels_assemble(ptxas, target):
    from test_compile import assemble

    for add in (False, True):
        k = tiles.compile(ragged_copy_kernel, signature={"X": "tensordesc<fp32[1, 1, 32, 128]>",
                                                         "Y": "tensordesc<fp32[1, 1, 32, 128]>", "x_off": "i32",
                                                         "y_off": "i32", "x_size": "i32", "y_size": "i32"},
                          constexprs={"ADD": add}, target=target)
        assert ("red.global" in k.asm["ptx"] or "atom.global" in k.asm["ptx"]) == add
        assemble(ptxas, k.asm["ptx"], target)



