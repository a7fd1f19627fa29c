"""Kernels shared by the conformance, compile-only and error tests."""

import tiles
import tiles.language as tl


@tiles.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@tiles.jit
def binary_kernel(x_ptr, y_ptr, out_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1)
    y = tl.load(y_ptr + offs, mask=mask, other=1)
    if OP == "add":
        z = x + y
    elif OP == "sub":
        z = x - y
    elif OP == "mul":
        z = x * y
    elif OP == "truediv":
        z = x / y
    elif OP == "floordiv":
        z = x // y
    elif OP == "mod":
        z = x % y
    elif OP == "and":
        z = x & y
    elif OP == "or":
        z = x | y
    elif OP == "xor":
        z = x ^ y
    elif OP == "shl":
        z = x << (y & 7)
    elif OP == "shr":
        z = x >> (y & 7)
    elif OP == "maximum":
        z = tl.maximum(x, y)
    elif OP == "minimum":
        z = tl.minimum(x, y)
    elif OP == "lt":
        z = x < y
    elif OP == "le":
        z = x <= y
    elif OP == "eq":
        z = x == y
    elif OP == "ne":
        z = x != y
    else:
        tl.static_assert(False, "unknown op")
    tl.store(out_ptr + offs, z, mask=mask)


@tiles.jit
def unary_kernel(x_ptr, out_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    if FN == "exp":
        y = tl.exp(x)
    elif FN == "exp2":
        y = tl.exp2(x)
    elif FN == "log":
        y = tl.log(x)
    elif FN == "log2":
        y = tl.log2(x)
    elif FN == "sqrt":
        y = tl.sqrt(x)
    elif FN == "rsqrt":
        y = tl.rsqrt(x)
    elif FN == "abs":
        y = tl.abs(x)
    elif FN == "sin":
        y = tl.sin(x)
    elif FN == "cos":
        y = tl.cos(x)
    elif FN == "floor":
        y = tl.floor(x)
    elif FN == "ceil":
        y = tl.ceil(x)
    elif FN == "erf":
        y = tl.erf(x)
    elif FN == "sigmoid":
        y = tl.sigmoid(x)
    elif FN == "fma":
        y = tl.fma(x, x, x)
    elif FN == "neg":
        y = -x
    tl.store(out_ptr + offs, y, mask=mask)


@tiles.jit
def axpby_kernel(x_ptr, out_ptr, alpha, beta, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * alpha + beta, mask=mask)


@tiles.jit
def outer_kernel(x_ptr, y_ptr, out_ptr, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + rm, mask=rm < M, other=0.0)
    y = tl.load(y_ptr + rn, mask=rn < N, other=0.0)
    out = x[:, None] * 10.0 + y[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(out_ptr + rm[:, None] * stride_m + rn[None, :], out, mask=mask)


@tiles.jit
def column_sum_kernel(x_ptr, out_ptr, M, N, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, M):
        acc += tl.load(x_ptr + i * stride + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, acc, mask=mask)


@tiles.jit
def literal_carry_kernel(x_ptr, out_ptr, n, steps, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    acc = 0.0
    count = 0
    for _ in range(steps):
        acc = acc + x
        count += 1
    tl.store(out_ptr + offs, acc / count, mask=mask)


@tiles.jit
def branch_kernel(x_ptr, out_ptr, n, threshold, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if pid * BLOCK >= n:
        return
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if threshold > 100:
        y = x * 2.0
    else:
        y = x * 3.0
    tl.store(out_ptr + offs, y, mask=mask)


@tiles.jit
def _scale(x, factor: tl.constexpr):
    return x * factor


@tiles.jit
def _clamp_pair(a, b):
    return tl.maximum(a, 0.0), tl.minimum(b, 0.0)


@tiles.jit
def helpers_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, REPEAT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    acc = tl.zeros([BLOCK], dtype=x_ptr.dtype.element_ty)
    for i in tl.static_range(REPEAT):
        acc += _scale(x, i + 1)
    pos, neg = _clamp_pair(acc, acc)
    tl.store(out_ptr + offs, pos + 2 * neg, mask=mask)


@tiles.jit
def where_cast_kernel(x_ptr, i_ptr, h_ptr, b_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.where(x > 0, x, 0.0)
    tl.store(i_ptr + offs, (y * 100).to(tl.int32), mask=mask)
    tl.store(h_ptr + offs, x.to(tl.float16), mask=mask)
    tl.store(b_ptr + offs, x.to(tl.int32, bitcast=True), mask=mask)


@tiles.jit
def scalar_kernel(x_ptr, out_ptr, n):
    total = tl.load(x_ptr)
    for i in range(1, n):
        total += tl.load(x_ptr + i)
    tl.store(out_ptr, total)


@tiles.jit
def grid_kernel(out_ptr):
    x = tl.program_id(0)
    y = tl.program_id(1)
    z = tl.program_id(2)
    nx = tl.num_programs(0)
    ny = tl.num_programs(1)
    idx = (z * ny + y) * nx + x
    tl.store(out_ptr + idx, x + 10 * y + 100 * z)


@tiles.jit
def full_kernel(out_ptr, n, value, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.full([BLOCK], 7, tl.int32) + value
    tl.store(out_ptr + offs, v, mask=offs < n)
