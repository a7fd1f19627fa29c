//! fp8 `dot`s on Hopper's warpgroup MMA.
//!
//! The language layer multiplies fp8 operands as fp16 (`dot(cast(a), cast(b))`; the cast is
//! exact), which every target runs. On `sm_90a`, `wgmma` multiplies fp8 itself (`.e4m3` and
//! `.e5m2`, 32 K per instruction, twice the fp16 rate) from shared memory, but only with both
//! operands K-major: fp8 has no transposed operand layouts. Run before layout assignment:
//!
//! 1. find `dot`s with an f32 accumulator whose operands are both casts from fp8 to fp16
//!    (or bf16);
//! 2. keep those whose shape fits a warpgroup layout (the layout pass then gives them one,
//!    see [`MmaLayout::warpgroup`]) and whose K is a multiple of 32;
//! 3. keep those whose loaded operands are read K-major from memory (a pipelined load's ring
//!    slot keeps the memory order): `a` loaded with its pointers contiguous along K
//!    (dimension 1); `b` loaded contiguous along K (dimension 0), or the transpose of a tile
//!    loaded contiguous along its dimension 1 (`k.T`). Operands computed in registers (fp8
//!    probabilities in attention) are accepted: codegen stages them K-major;
//! 4. rewrite the dot to take the fp8 values (the casts die when nothing else reads them).

use crate::axis_info::{self, AxisInfoMap};
use tile_ir::{DType, Function, MmaLayout, OpKind, Value};

/// Elements a K-major operand must be contiguous over (16 bytes of fp8: one `cp.async`).
const MIN_RUN: u64 = 16;

/// The fp8 value `v` was cast from, if `v` is such a cast to a 16-bit float (exact; an fp32
/// dot keeps its own precision rules, which fp8 accumulation would not meet).
fn fp8_source(func: &Function, v: Value) -> Option<Value> {
    let op = func.def_op(v)?;
    let d = &func.ops[op];
    let to_16_bit = matches!(func.ty(v).dtype(), Some(DType::F16 | DType::BF16));
    if d.kind != OpKind::Cast || !to_16_bit {
        return None;
    }
    let src = d.operands[0];
    // fp8e4b15 has no MMA: it stays converted to fp16 (as in Triton).
    func.ty(src).dtype().filter(|t| t.is_ocp_fp8()).map(|_| src)
}

/// The pointers `v` was loaded through, if `v` is a load.
fn loaded_from(func: &Function, v: Value) -> Option<Value> {
    let op = func.def_op(v)?;
    let d = &func.ops[op];
    matches!(d.kind, OpKind::Load(_)).then(|| d.operands[0])
}

/// The transposed tile, if `v` is a 2-D transpose.
fn transposed(func: &Function, v: Value) -> Option<Value> {
    let op = func.def_op(v)?;
    match &func.ops[op].kind {
        OpKind::Permute { perm } if func.ty(v).shape.rank() == 2 && perm[..2] == [1, 0] => {
            Some(func.ops[op].operands[0])
        }
        _ => None,
    }
}

/// Whether operand `v` (K is its dimension `k_dim`) can be K-major: loaded contiguous along K,
/// computed in registers (codegen stages it K-major), or the transpose of a tile loaded
/// contiguous along its own K where `transposed_loads` allows that (`b`: `k.T`).
pub(crate) fn k_major(
    func: &Function,
    info: &AxisInfoMap,
    v: Value,
    k_dim: usize,
    transposed_loads: bool,
) -> bool {
    let contiguous = |ptrs: Value, dim: usize| info.get(ptrs).contiguity[dim] >= MIN_RUN;
    if let Some(ptrs) = loaded_from(func, v) {
        return contiguous(ptrs, k_dim);
    }
    match transposed(func, v).and_then(|t| loaded_from(func, t)) {
        Some(ptrs) => transposed_loads && contiguous(ptrs, 1 - k_dim),
        None => true,
    }
}

/// Rewrites fp8 dots to run on fp8 warpgroup MMA; returns how many.
pub fn fp8_warpgroup_dots(func: &mut Function) -> usize {
    // Steps 1 and 2 first: most kernels have no fp8 dot and need no axis analysis.
    let mut candidates = Vec::new();
    for op in func.ops_in_order() {
        let d = &func.ops[op];
        if !matches!(d.kind, OpKind::Dot { .. }) {
            continue;
        }
        let (a, b, acc) = (d.operands[0], d.operands[1], d.operands[2]);
        if func.ty(acc).dtype() != Some(DType::F32) {
            continue;
        }
        let (Some(a8), Some(b8)) = (fp8_source(func, a), fp8_source(func, b)) else {
            continue;
        };
        let (sa, sc) = (func.ty(a).shape.dims(), func.ty(acc).shape.dims());
        let fits = sa.len() == 2
            && sa[1].is_multiple_of(32)
            && MmaLayout::warpgroup(sc[0], sc[1], func.num_warps).is_some();
        if fits {
            candidates.push((op, a8, b8));
        }
    }
    if candidates.is_empty() {
        return 0;
    }
    let info = axis_info::analyze(func);
    let mut rewritten = 0;
    for (op, a8, b8) in candidates {
        if k_major(func, &info, a8, 1, false) && k_major(func, &info, b8, 0, true) {
            func.ops[op].operands[0] = a8;
            func.ops[op].operands[1] = b8;
            rewritten += 1;
        }
    }
    rewritten
}
