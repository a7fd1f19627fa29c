"""Fused row softmax: one row per program; max, exp and sum on a tile held in registers."""

import numpy as np
from _host import Host

import tiles as triton
import tiles.language as tl


@triton.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                   BLOCK_SIZE: tl.constexpr):
    row_idx = tl.program_id(0)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    row = tl.load(input_ptr + row_idx * input_row_stride + col_offsets, mask=mask, other=-float("inf"))
    row_minus_max = row - tl.max(row, axis=0)
    numerator = tl.exp(row_minus_max)
    denominator = tl.sum(numerator, axis=0)
    tl.store(output_ptr + row_idx * output_row_stride + col_offsets, numerator / denominator, mask=mask)


def softmax(host, x, n_rows, n_cols):
    y = host.empty((n_rows, n_cols), np.float16)
    block = triton.next_power_of_2(n_cols)
    num_warps = 8 if block >= 2048 else 4
    softmax_kernel[(n_rows,)](y, x, n_cols, n_cols, n_rows, n_cols, BLOCK_SIZE=block, num_warps=num_warps)
    return y


def main():
    host = Host(softmax_kernel)
    rng = np.random.default_rng()
    n_rows, n_cols = 1823, 781
    xs = rng.standard_normal((n_rows, n_cols)).astype(np.float16)
    y = host.get(softmax(host, host.put(xs), n_rows, n_cols)).astype(np.float64)
    xf = xs.astype(np.float64)
    ref = np.exp(xf - xf.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    err = np.abs(y - ref).max()
    print(f"softmax {n_rows}x{n_cols} fp16 on the {host.where}: max |error| = {err:.2e}")
    assert err < 2e-3


if __name__ == "__main__":
    main()
