"""RMSNorm: y = x / sqrt(mean(x²) + eps) * w, one row per program."""

import numpy as np
from _host import Host

import tiles as triton
import tiles.language as tl


@triton.jit
def rms_norm_kernel(X, W, Y, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * stride + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)


def main():
    host = Host(rms_norm_kernel)
    rng = np.random.default_rng()
    M, N = 97, 1000
    x = rng.standard_normal((M, N)).astype(np.float16)
    w = rng.uniform(0.5, 1.5, N).astype(np.float16)
    y = host.empty((M, N), np.float16)
    rms_norm_kernel[(M,)](host.put(x), host.put(w), y, N, N, 1e-6, BLOCK_SIZE=triton.next_power_of_2(N))
    xf = x.astype(np.float64)
    ref = xf / np.sqrt((xf * xf).mean(1, keepdims=True) + 1e-6) * w.astype(np.float64)
    err = np.abs(host.get(y).astype(np.float64) - ref).max()
    print(f"rms norm {M}x{N} fp16 on the {host.where}: max |error| = {err:.2e}")
    assert err < 1e-2


if __name__ == "__main__":
    main()
