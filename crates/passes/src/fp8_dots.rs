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
use tile_ir::{DType, Function, MmaLayout, Op, OpKind, Value, ValueDef};

/// Elements a K-major operand must be contiguous over (16 bytes of fp8: one `cp.async`).
const MIN_RUN: u64 = 16;

fn def_op(func: &Function, v: Value) -> Option<Op> {
    match func.values[v].def {
        ValueDef::Result(op, _) => Some(op),
        ValueDef::Arg(..) => None,
    }
}

/// The fp8 value `v` was cast from, if `v` is such a cast to a 16-bit float (exact; an fp32
/// dot keeps its own precision rules, which fp8 accumulation would not meet).
fn fp8_source(func: &Function, v: Value) -> Option<Value> {
    let op = def_op(func, v)?;
    let d = &func.ops[op];
    let to_16_bit = matches!(func.ty(v).dtype(), Some(DType::F16 | DType::BF16));
    if d.kind != OpKind::Cast || !to_16_bit {
        return None;
    }
    let src = d.operands[0];
    func.ty(src).dtype().filter(|t| t.is_fp8()).map(|_| src)
}

fn is_load(func: &Function, v: Value) -> bool {
    def_op(func, v).is_some_and(|op| matches!(func.ops[op].kind, OpKind::Load(_)))
}

/// Whether `v` is a load whose pointers run contiguously along `dim`.
fn loaded_contiguous(func: &Function, info: &AxisInfoMap, v: Value, dim: usize) -> bool {
    let Some(op) = def_op(func, v) else {
        return false;
    };
    let d = &func.ops[op];
    matches!(d.kind, OpKind::Load(_)) && info.get(d.operands[0]).contiguity[dim] >= MIN_RUN
}

/// The transposed tile, if `v` is a 2-D transpose.
fn transposed(func: &Function, v: Value) -> Option<Value> {
    let op = def_op(func, v)?;
    match &func.ops[op].kind {
        OpKind::Permute { perm } if func.ty(v).shape.rank() == 2 && perm[..2] == [1, 0] => {
            Some(func.ops[op].operands[0])
        }
        _ => None,
    }
}

/// Whether `a` (M x K) can be K-major: loaded contiguous along K, or computed.
fn a_is_k_major(func: &Function, info: &AxisInfoMap, a: Value) -> bool {
    if is_load(func, a) {
        return loaded_contiguous(func, info, a, 1);
    }
    transposed(func, a).is_none_or(|t| !is_load(func, t))
}

/// Whether `b` (K x N) can be K-major: loaded contiguous along K, the transpose of an N x K
/// tile loaded contiguous along its K (`k.T`), or computed.
fn b_is_k_major(func: &Function, info: &AxisInfoMap, b: Value) -> bool {
    if is_load(func, b) {
        return loaded_contiguous(func, info, b, 0);
    }
    match transposed(func, b) {
        Some(t) if is_load(func, t) => loaded_contiguous(func, info, t, 1),
        _ => true,
    }
}

/// Rewrites fp8 dots to run on fp8 warpgroup MMA; returns how many.
pub fn fp8_warpgroup_dots(func: &mut Function) -> usize {
    let info = axis_info::analyze(func);
    let mut rewritten = 0;
    for op in func.ops_in_order() {
        let d = &func.ops[op];
        if !matches!(d.kind, OpKind::Dot { .. }) {
            continue;
        }
        let (a, b, acc) = (d.operands[0], d.operands[1], d.operands[2]);
        if func.ty(acc).dtype() != Some(tile_ir::DType::F32) {
            continue;
        }
        let (Some(a8), Some(b8)) = (fp8_source(func, a), fp8_source(func, b)) else {
            continue;
        };
        let (sa, sc) = (func.ty(a).shape.dims(), func.ty(acc).shape.dims());
        let fits = sa.len() == 2
            && sa[1].is_multiple_of(32)
            && MmaLayout::warpgroup(sc[0], sc[1], func.num_warps).is_some();
        if fits && a_is_k_major(func, &info, a8) && b_is_k_major(func, &info, b8) {
            func.ops[op].operands[0] = a8;
            func.ops[op].operands[1] = b8;
            rewritten += 1;
        }
    }
    rewritten
}
