"""Layer normalisation, forward and backward, after Triton's tutorial: the backward pass
accumulates partial dW/dB per group of rows under a spin lock (atomic_cas / atomic_xchg)."""

import numpy as np
from _host import Host

import tiles as triton
import tiles.language as tl


@triton.jit
def _layer_norm_fwd_fused(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        tl.store(Y + cols, y, mask=mask)


@triton.jit
def _layer_norm_bwd_dx_fused(DX, DY, DW, DB, X, W, Mean, Rstd, Lock, stride, N, GROUP_SIZE_M: tl.constexpr,
                             BLOCK_SIZE_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE_N)
    mask = cols < N
    X += row * stride
    DY += row * stride
    DX += row * stride
    lock_id = row % GROUP_SIZE_M
    Lock += lock_id
    Count = Lock + GROUP_SIZE_M
    DW = DW + lock_id * N + cols
    DB = DB + lock_id * N + cols
    x = tl.load(X + cols, mask=mask, other=0).to(tl.float32)
    dy = tl.load(DY + cols, mask=mask, other=0).to(tl.float32)
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = (x - mean) * rstd
    wdy = w * dy
    xhat = tl.where(mask, xhat, 0.)
    wdy = tl.where(mask, wdy, 0.)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    dx = (wdy - (xhat * c1 + c2)) * rstd
    tl.store(DX + cols, dx, mask=mask)
    partial_dw = (dy * xhat).to(w.dtype)
    partial_db = (dy).to(w.dtype)
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = tl.load(Count)
    if count == 0:
        tl.atomic_xchg(Count, 1)
    else:
        partial_dw += tl.load(DW, mask=mask)
        partial_db += tl.load(DB, mask=mask)
    tl.store(DW, partial_dw, mask=mask)
    tl.store(DB, partial_db, mask=mask)
    tl.debug_barrier()
    tl.atomic_xchg(Lock, 0)


@triton.jit
def _layer_norm_bwd_dwdb(DW, DB, FINAL_DW, FINAL_DB, M, N, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = pid * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    dw = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    db = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for i in range(0, M, BLOCK_SIZE_M):
        rows = i + tl.arange(0, BLOCK_SIZE_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        dw += tl.load(DW + offs, mask=mask, other=0.)
        db += tl.load(DB + offs, mask=mask, other=0.)
    sum_dw = tl.sum(dw, axis=0)
    sum_db = tl.sum(db, axis=0)
    tl.store(FINAL_DW + cols, sum_dw, mask=cols < N)
    tl.store(FINAL_DB + cols, sum_db, mask=cols < N)


def layer_norm_fwd(host, x, w, b, M, N, eps=1e-5):
    y = host.empty((M, N), np.float32)
    mean, rstd = host.empty((M,), np.float32), host.empty((M,), np.float32)
    block = min(65536 // 4, triton.next_power_of_2(N))
    num_warps = min(max(block // 256, 1), 8)
    _layer_norm_fwd_fused[(M,)](x, y, w, b, mean, rstd, N, N, eps, BLOCK_SIZE=block, num_warps=num_warps)
    return y, mean, rstd


def layer_norm_bwd(host, dy, x, w, mean, rstd, M, N):
    group = 64 if N <= 8192 else 32
    locks = host.empty((2 * group,), np.int32)
    dw_part, db_part = host.empty((group, N), np.float32), host.empty((group, N), np.float32)
    dw, db, dx = host.empty((N,), np.float32), host.empty((N,), np.float32), host.empty((M, N), np.float32)
    block = triton.next_power_of_2(N)
    num_warps = min(max(block // 256, 1), 8)
    _layer_norm_bwd_dx_fused[(M,)](dx, dy, dw_part, db_part, x, w, mean, rstd, locks, N, N, GROUP_SIZE_M=group,
                                   BLOCK_SIZE_N=block, num_warps=num_warps)
    _layer_norm_bwd_dwdb[(triton.cdiv(N, 128),)](dw_part, db_part, dw, db, min(group, M), N, BLOCK_SIZE_M=32,
                                                  BLOCK_SIZE_N=128)
    return dx, dw, db


def reference(x, w, b, dy, eps=1e-5):
    mu = x.mean(1, keepdims=True)
    var = ((x - mu) ** 2).mean(1, keepdims=True)
    rstd = 1 / np.sqrt(var + eps)
    xhat = (x - mu) * rstd
    y = xhat * w + b
    wdy = w * dy
    c1 = (xhat * wdy).mean(1, keepdims=True)
    c2 = wdy.mean(1, keepdims=True)
    dx = (wdy - (xhat * c1 + c2)) * rstd
    return y, dx, (dy * xhat).sum(0), dy.sum(0)


def main():
    host = Host(_layer_norm_fwd_fused)
    rng = np.random.default_rng()
    M, N = 151, 1151
    x = rng.standard_normal((M, N)).astype(np.float32)
    w = rng.uniform(0.5, 1.5, N).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    dy = rng.standard_normal((M, N)).astype(np.float32)
    xd, wd, bd = host.put(x), host.put(w), host.put(b)
    y, mean, rstd = layer_norm_fwd(host, xd, wd, bd, M, N)
    dx, dw, db = layer_norm_bwd(host, host.put(dy), xd, wd, mean, rstd, M, N)
    ry, rdx, rdw, rdb = reference(x.astype(np.float64), w, b, dy)
    errs = [np.abs(host.get(a) - r).max() / max(np.abs(r).max(), 1) for a, r in ((y, ry), (dx, rdx), (dw, rdw),
                                                                               (db, rdb))]
    print(f"layer norm {M}x{N} on the {host.where}: relative max error y {errs[0]:.1e}, dx {errs[1]:.1e}, "
          f"dw {errs[2]:.1e}, db {errs[3]:.1e}")
    assert max(errs) < 1e-4


if __name__ == "__main__":
    main()
