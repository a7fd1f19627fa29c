//! Constant folding, common-subexpression elimination, dead-code elimination, and folding
//! `acc + dot(a, b, 0)` into `dot(a, b, acc)`.
//!
//! Folding rules, integers only (float identities break on -0.0 and NaN):
//!
//! | rule              | algebra           |
//! |-------------------|-------------------|
//! | `c1 op c2 -> c3`  | evaluated at the dtype's width, wrapping |
//! | `x + 0 -> x`      | additive identity |
//! | `x - 0 -> x`      |                   |
//! | `x * 1 -> x`      | multiplicative identity |
//! | `x / 1 -> x`      |                   |
//! | `splat(c) -> c`   | a tile of one constant |
//! | `cast(c) -> c'`   | integer to integer (not to `i1`, which tests `!= 0`): sign- or zero-extended from the source, wrapped to the result |
//!
//! And, for every element type: `reshape(expand_dims(x))` and `reshape(reshape(x))` read `x`
//! directly (each is a row-major reinterpretation, so their composition is one), and a
//! reshape to its operand's own shape is its operand. A descriptor's `[1, BN, BK]` block,
//! loaded as `[BN, BK]` and expanded, is then the 2-d load a user's `reshape` asked for.

use std::collections::HashMap;
use tile_ir::{BinaryOp, Block, Const, DType, Function, Op, OpKind, Type, Value};

/// `v` wrapped to `d`'s width and extended back to 64 bits as `d` extends (sign or zero).
pub(crate) fn wrap(v: i128, d: DType) -> i64 {
    let bits = d.bits();
    if bits >= 64 {
        return v as i64;
    }
    let m = (1i128 << bits) - 1;
    let x = v & m;
    if d.is_signed() && x >> (bits - 1) == 1 {
        (x - (1i128 << bits)) as i64
    } else {
        x as i64
    }
}

fn fold_binary(op: BinaryOp, a: i64, b: i64, d: DType) -> Option<i64> {
    let (x, y) = (a as i128, b as i128);
    let r = match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div if y != 0 && d.is_signed() => x / y,
        BinaryOp::Rem if y != 0 && d.is_signed() => x % y,
        BinaryOp::And => x & y,
        BinaryOp::Or => x | y,
        BinaryOp::Xor => x ^ y,
        BinaryOp::Max if d.is_signed() => x.max(y),
        BinaryOp::Min if d.is_signed() => x.min(y),
        _ => return None,
    };
    Some(wrap(r, d))
}

fn int_const(func: &Function, v: Value) -> Option<i64> {
    let tile_ir::ValueDef::Result(op, _) = func.values[v].def else {
        return None;
    };
    match func.ops[op].kind {
        OpKind::Constant(Const::Int(c)) => Some(c),
        OpKind::Splat => int_const(func, func.ops[op].operands[0]),
        _ => None,
    }
}

/// Folds constants and integer identities; returns how many ops were rewritten.
pub fn fold_constants(func: &mut Function) -> usize {
    let mut changed = 0;
    for op in func.ops_in_order() {
        if func.ops[op].kind == OpKind::Reshape {
            changed += fold_reshape(func, op);
            continue;
        }
        let data = &func.ops[op];
        let Some(&res) = data.results.first() else {
            continue;
        };
        let ty: Type = *func.ty(res);
        let Some(d) = ty.dtype() else { continue };
        if d.is_float() {
            continue;
        }
        let replacement = match data.kind {
            OpKind::Splat => int_const(func, data.operands[0]).map(|c| (Some(c), None)),
            OpKind::Cast if d != DType::I1 => {
                let src = func.ty(data.operands[0]).dtype();
                match (src, int_const(func, data.operands[0])) {
                    (Some(s), Some(c)) if s.is_int() => {
                        let v = if s.is_signed() {
                            c as i128
                        } else {
                            (c as i128) & ((1i128 << s.bits()) - 1)
                        };
                        Some((Some(wrap(v, d)), None))
                    }
                    _ => None,
                }
            }
            OpKind::Binary(b) => {
                let (x, y) = (data.operands[0], data.operands[1]);
                match (int_const(func, x), int_const(func, y)) {
                    (Some(a), Some(c)) => fold_binary(b, a, c, d).map(|r| (Some(r), None)),
                    (_, Some(0)) if matches!(b, BinaryOp::Add | BinaryOp::Sub) => {
                        Some((None, Some(x)))
                    }
                    (Some(0), _) if b == BinaryOp::Add => Some((None, Some(y))),
                    (_, Some(1)) if matches!(b, BinaryOp::Mul | BinaryOp::Div) => {
                        Some((None, Some(x)))
                    }
                    (Some(1), _) if b == BinaryOp::Mul => Some((None, Some(y))),
                    _ => None,
                }
            }
            _ => None,
        };
        match replacement {
            Some((Some(c), _)) => {
                func.ops[op].kind = OpKind::Constant(Const::Int(c));
                func.ops[op].operands.clear();
                changed += 1;
            }
            Some((None, Some(v))) if func.ty(v) == &ty => {
                func.replace_uses(res, v);
                changed += 1;
            }
            _ => {}
        }
    }
    changed
}

/// A reshape of an `expand_dims` or of a reshape reads their operand instead; a reshape to its
/// operand's type is replaced by the operand. Returns how many rewrites were made.
fn fold_reshape(func: &mut Function, op: Op) -> usize {
    let mut changed = 0;
    let layouts_free = |f: &Function, v: Value| f.ty(v).layout.is_none();
    loop {
        let src = func.ops[op].operands[0];
        let Some(inner) = func.def_op(src) else { break };
        if !matches!(
            func.ops[inner].kind,
            OpKind::ExpandDims(_) | OpKind::Reshape
        ) {
            break;
        }
        let x = func.ops[inner].operands[0];
        if !layouts_free(func, x) || !layouts_free(func, src) || func.ty(x).shape.rank() == 0 {
            break;
        }
        func.ops[op].operands[0] = x;
        changed += 1;
    }
    let (src, res) = (func.ops[op].operands[0], func.ops[op].results[0]);
    if func.ty(src) == func.ty(res) {
        func.replace_uses(res, src);
        changed += 1;
    }
    changed
}

/// Merges pure ops that compute the same thing from the same operands, when the first
/// dominates the second (same block, or an enclosing one). Returns how many were merged.
pub fn eliminate_common_subexpressions(func: &mut Function) -> usize {
    type Key = (OpKind, Vec<Value>, Vec<Type>);
    fn go(func: &mut Function, b: Block, scopes: &mut Vec<HashMap<Key, Op>>, merged: &mut usize) {
        scopes.push(HashMap::new());
        let ops = func.blocks[b].ops.clone();
        for op in ops {
            let data = &func.ops[op];
            let pure = !data.kind.has_side_effects()
                && data.regions.is_empty()
                && !matches!(data.kind, OpKind::Load(_) | OpKind::Yield | OpKind::Return);
            if pure && !data.results.is_empty() {
                let key: Key = (
                    data.kind,
                    data.operands.clone(),
                    data.results.iter().map(|&r| *func.ty(r)).collect(),
                );
                let found = scopes.iter().rev().find_map(|s| s.get(&key).copied());
                match found {
                    Some(prev) => {
                        let pairs: Vec<(Value, Value)> = func.ops[op]
                            .results
                            .iter()
                            .copied()
                            .zip(func.ops[prev].results.iter().copied())
                            .collect();
                        for (from, to) in pairs {
                            func.replace_uses(from, to);
                        }
                        *merged += 1;
                    }
                    None => {
                        scopes.last_mut().expect("pushed above").insert(key, op);
                    }
                }
            }
            let regions = func.ops[op].regions.clone();
            for r in regions {
                let rb = func.regions[r].block;
                go(func, rb, scopes, merged);
            }
        }
        scopes.pop();
    }
    let mut merged = 0;
    let entry = func.entry;
    go(func, entry, &mut Vec::new(), &mut merged);
    merged
}

/// Removes pure ops whose results are unused, repeatedly; returns how many were removed.
pub fn eliminate_dead_code(func: &mut Function) -> usize {
    let mut removed = 0;
    loop {
        let uses = func.use_counts();
        let mut dead = std::collections::HashSet::new();
        func.walk(|op| {
            let d = &func.ops[op];
            if !d.kind.has_side_effects()
                && !d.results.is_empty()
                && d.results.iter().all(|&r| uses[r] == 0)
            {
                dead.insert(op);
            }
        });
        if dead.is_empty() {
            return removed;
        }
        removed += dead.len();
        let blocks: Vec<Block> = func.blocks.keys().collect();
        for b in blocks {
            func.blocks[b].ops.retain(|op| !dead.contains(op));
        }
    }
}

fn is_zero(func: &Function, v: Value) -> bool {
    let tile_ir::ValueDef::Result(op, _) = func.values[v].def else {
        return false;
    };
    match func.ops[op].kind {
        OpKind::Constant(Const::Int(0)) => true,
        OpKind::Constant(Const::Float(x)) => x == 0.0,
        OpKind::Splat | OpKind::Broadcast => is_zero(func, func.ops[op].operands[0]),
        _ => false,
    }
}

/// `x + dot(a, b, 0)` becomes `dot(a, b, x)` when the add is the dot's only user (Triton's
/// `acc += tl.dot(a, b)`), so the accumulator lives in the dot, as `tl.dot(a, b, acc)` writes
/// it. The add is rewritten in place (its operands dominate it); the old dot dies. Returns how
/// many were fused.
pub fn fuse_dot_accumulation(func: &mut Function) -> usize {
    let uses = func.use_counts();
    let mut fused = 0;
    for op in func.ops_in_order() {
        let d = &func.ops[op];
        if d.kind != OpKind::Binary(BinaryOp::Add) {
            continue;
        }
        let (l, r) = (d.operands[0], d.operands[1]);
        for (dv, x) in [(l, r), (r, l)] {
            let tile_ir::ValueDef::Result(dot, _) = func.values[dv].def else {
                continue;
            };
            let OpKind::Dot { precision } = func.ops[dot].kind else {
                continue;
            };
            let dd = &func.ops[dot];
            if uses[dv] != 1 || !is_zero(func, dd.operands[2]) || func.ty(x) != func.ty(dv) {
                continue;
            }
            let (a, b) = (dd.operands[0], dd.operands[1]);
            func.ops[op].kind = OpKind::Dot { precision };
            func.ops[op].operands = vec![a, b, x];
            fused += 1;
            break;
        }
    }
    fused
}
