"""Online (streaming) softmax: rows longer than one tile, in column blocks, keeping a running
maximum and a rescaled running denominator, then a second pass that writes the output."""

import numpy as np
from _host import Host

import tiles as triton
import tiles.language as tl


@triton.jit
def online_softmax_kernel(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = in_ptr + row * stride
    m = -float("inf")
    d = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(base + cols, mask=mask, other=-float("inf")).to(tl.float32)
        tl.store(out_ptr + row * stride + cols, tl.exp(x - m) / d, mask=mask)


def main():
    host = Host(online_softmax_kernel)
    rng = np.random.default_rng()
    rows, cols = 64, 10007
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    out = host.empty((rows, cols), np.float32)
    online_softmax_kernel[(rows,)](out, host.put(x), cols, cols, BLOCK=1024)
    xf = x.astype(np.float64)
    ref = np.exp(xf - xf.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    err = np.abs(host.get(out) - ref).max()
    print(f"online softmax {rows}x{cols} on the {host.where}: max |error| = {err:.2e}")
    assert err < 1e-6


if __name__ == "__main__":
    main()
