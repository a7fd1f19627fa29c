//! Axis info: per value and per dimension, what is known of its integer (or address) contents.
//!
//! 1. Seed facts: kernel parameters carry their specialised divisibility; constants, `arange`
//!    and `program_id` have exact facts.
//! 2. Walk ops in program order; each op's rule combines its operands' facts (below).
//! 3. Loop-carried values start from their inits; the body is re-analysed with the meet of
//!    the inits' and the yielded values' facts until nothing changes (a few rounds; facts only
//!    weaken). `for` results and `if` results are the meet of what can reach them. `while`
//!    state is taken as unknown (sound, if pessimistic).
//!
//! Facts, per dimension `d`:
//! - `contiguity[d]`: the values come in runs of this many consecutive integers (step +1);
//! - `divisibility[d]`: the first value of every such run is a multiple of this (bytes, for
//!   pointers);
//! - `constancy[d]`: the values come in runs of this many equal values;
//! - `prefix[d]` (masks): in runs of this many elements the mask is true on a prefix of the run,
//!   then false (at least `constancy[d]`: a uniform run is a prefix). `x < n` over a run of
//!   consecutive `x` and a uniform `n` is one; conjunctions and disjunctions keep it.
//!
//! As in Triton's analysis, the rules for `%`, `//`, `>>` and comparisons take integer index
//! values to be non-negative (offsets built from program ids, `arange` and sizes): C division
//! truncates toward zero, so a run of negative values can split differently.
//!
//! Coalescing reads these to prove that a vector access is contiguous, aligned and uniformly
//! masked.

use tile_ir::{
    BinaryOp, CmpPred, Const, Elem, Function, Op, OpKind, SecondaryMap, Value, MAX_RANK,
};

/// The largest divisibility tracked (a stand-in for "zero": divisible by everything).
pub const MAX_DIV: u64 = 1 << 30;

/// What is known about one value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AxisInfo {
    /// Runs of consecutive values, per dimension.
    pub contiguity: [u64; MAX_RANK],
    /// Divisibility of each run's first value, per dimension.
    pub divisibility: [u64; MAX_RANK],
    /// Runs of equal values, per dimension.
    pub constancy: [u64; MAX_RANK],
    /// Masks: runs true on a prefix, then false, per dimension (at least `constancy`).
    pub prefix: [u64; MAX_RANK],
    /// The value, when it is one known integer everywhere.
    pub constant: Option<i64>,
}

impl Default for AxisInfo {
    fn default() -> Self {
        AxisInfo {
            contiguity: [1; MAX_RANK],
            divisibility: [1; MAX_RANK],
            constancy: [1; MAX_RANK],
            prefix: [1; MAX_RANK],
            constant: None,
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The largest power of two dividing `v` (capped at [`MAX_DIV`]; 0 is divisible by all).
pub fn pow2_divisor(v: i64) -> u64 {
    if v == 0 {
        MAX_DIV
    } else {
        (1u64 << v.unsigned_abs().trailing_zeros()).min(MAX_DIV)
    }
}

impl AxisInfo {
    fn uniform(shape: &[u32], div: u64, constant: Option<i64>) -> AxisInfo {
        let mut a = AxisInfo {
            divisibility: [div; MAX_RANK],
            constant,
            ..AxisInfo::default()
        };
        for (d, &n) in shape.iter().enumerate() {
            a.constancy[d] = n as u64;
        }
        if shape.is_empty() {
            a.constancy[0] = 1;
        }
        a
    }

    /// Divisibility every single element is known to have (1 if some run has length > 1).
    fn element_divisibility(&self, rank: usize) -> u64 {
        if rank == 0 {
            return self.divisibility[0];
        }
        if self.contiguity[..rank].iter().any(|&c| c > 1) {
            1
        } else {
            self.divisibility[..rank].iter().copied().min().unwrap_or(1)
        }
    }
}

/// Facts for every value of a function.
pub struct AxisInfoMap {
    infos: SecondaryMap<Value, AxisInfo>,
}

impl AxisInfoMap {
    /// The facts for `v`.
    pub fn get(&self, v: Value) -> &AxisInfo {
        self.infos.get(v)
    }
}

/// Runs the analysis.
pub fn analyze(func: &Function) -> AxisInfoMap {
    let mut infos = SecondaryMap::with_default(AxisInfo::default());
    for (i, &arg) in func.blocks[func.entry].args.iter().enumerate() {
        let div = func.params[i].divisibility.max(1) as u64;
        infos.set(
            arg,
            AxisInfo {
                divisibility: [div; MAX_RANK],
                ..AxisInfo::default()
            },
        );
    }
    analyze_block(func, func.entry, &mut infos);
    AxisInfoMap { infos }
}

/// Facts true of both `a` and `b`.
fn meet(a: &AxisInfo, b: &AxisInfo) -> AxisInfo {
    let mut out = AxisInfo::default();
    for d in 0..MAX_RANK {
        out.contiguity[d] = gcd(a.contiguity[d], b.contiguity[d]).max(1);
        out.divisibility[d] = gcd(a.divisibility[d], b.divisibility[d]).max(1);
        out.constancy[d] = gcd(a.constancy[d], b.constancy[d]).max(1);
        out.prefix[d] = gcd(a.prefix[d], b.prefix[d]).max(1);
    }
    out.constant = if a.constant == b.constant {
        a.constant
    } else {
        None
    };
    out
}

/// Most rounds of re-analysing a loop body before its carried values are taken as unknown.
const LOOP_ROUNDS: usize = 6;

fn analyze_block(func: &Function, b: tile_ir::Block, infos: &mut SecondaryMap<Value, AxisInfo>) {
    for &op in &func.blocks[b].ops {
        visit(func, op, infos);
        let data = &func.ops[op];
        match data.kind {
            OpKind::For { .. } => {
                let body = func.region_block(op, 0);
                let args = &func.blocks[body].args;
                let y = *func.blocks[body].ops.last().expect("regions end in yield");
                let mut cur: Vec<AxisInfo> = data.operands[3..]
                    .iter()
                    .map(|&v| infos.get(v).clone())
                    .collect();
                for round in 0..=LOOP_ROUNDS {
                    for (k, c) in cur.iter().enumerate() {
                        infos.set(args[k + 1], c.clone());
                    }
                    analyze_block(func, body, infos);
                    if round == LOOP_ROUNDS {
                        break;
                    }
                    let next: Vec<AxisInfo> = cur
                        .iter()
                        .zip(&func.ops[y].operands)
                        .map(|(c, &v)| meet(c, infos.get(v)))
                        .collect();
                    if next == cur {
                        break;
                    }
                    cur = if round + 1 == LOOP_ROUNDS {
                        vec![AxisInfo::default(); cur.len()]
                    } else {
                        next
                    };
                }
                for (k, &r) in data.results.iter().enumerate() {
                    infos.set(r, cur[k].clone());
                }
            }
            OpKind::If => {
                let mut out: Option<Vec<AxisInfo>> = None;
                for i in 0..2 {
                    let rb = func.region_block(op, i);
                    analyze_block(func, rb, infos);
                    let y = *func.blocks[rb].ops.last().expect("regions end in yield");
                    let ys: Vec<AxisInfo> = func.ops[y]
                        .operands
                        .iter()
                        .map(|&v| infos.get(v).clone())
                        .collect();
                    out = Some(match out {
                        None => ys,
                        Some(prev) => prev.iter().zip(&ys).map(|(a, b)| meet(a, b)).collect(),
                    });
                }
                for (k, &r) in data.results.iter().enumerate() {
                    infos.set(
                        r,
                        out.as_ref()
                            .map_or_else(AxisInfo::default, |o| o[k].clone()),
                    );
                }
            }
            _ => {
                for &r in &data.regions {
                    let rb = func.regions[r].block;
                    for &a in &func.blocks[rb].args {
                        if !matches!(data.kind, OpKind::For { .. }) {
                            infos.set(a, AxisInfo::default());
                        }
                    }
                    analyze_block(func, rb, infos);
                }
                if !data.regions.is_empty() {
                    for &r in &data.results {
                        infos.set(r, AxisInfo::default());
                    }
                }
            }
        }
    }
}

fn visit(func: &Function, op: Op, infos: &mut SecondaryMap<Value, AxisInfo>) {
    let data = &func.ops[op];
    if let OpKind::For { .. } = data.kind {
        // The induction variable starts at lb and moves by step (whether or not the loop
        // carries values).
        let body = func.region_block(op, 0);
        let iv = func.blocks[body].args[0];
        let (lb, step) = (
            infos.get(data.operands[0]).clone(),
            infos.get(data.operands[2]).clone(),
        );
        let div = gcd(lb.divisibility[0], step.divisibility[0]);
        infos.set(
            iv,
            AxisInfo {
                divisibility: [div; MAX_RANK],
                ..AxisInfo::default()
            },
        );
    }
    let Some(&res) = data.results.first() else {
        return;
    };
    let rty = *func.ty(res);
    let shape = rty.shape.dims().to_vec();
    let rank = shape.len();
    let get = |i: usize| infos.get(data.operands[i]).clone();
    let info = match data.kind {
        OpKind::Constant(Const::Int(c)) => AxisInfo::uniform(&shape, pow2_divisor(c), Some(c)),
        OpKind::Constant(Const::Float(_)) => AxisInfo::uniform(&shape, 1, None),
        OpKind::ProgramId(_) | OpKind::NumPrograms(_) => AxisInfo::default(),
        OpKind::Arange { start, end } => {
            let mut a = AxisInfo::default();
            a.contiguity[0] = (end - start) as u64;
            a.divisibility[0] = pow2_divisor(start as i64);
            a
        }
        OpKind::Splat => {
            let s = get(0);
            AxisInfo::uniform(&shape, s.divisibility[0], s.constant)
        }
        OpKind::ExpandDims(axis) => {
            let a = get(0);
            let axis = axis as usize;
            let src_rank = rank - 1;
            let elem_div = a.element_divisibility(src_rank);
            let mut out = AxisInfo {
                constant: a.constant,
                ..AxisInfo::default()
            };
            let mut k = 0;
            for d in 0..rank {
                if d == axis {
                    out.divisibility[d] = elem_div;
                } else {
                    out.contiguity[d] = a.contiguity[k];
                    out.divisibility[d] = a.divisibility[k];
                    out.constancy[d] = a.constancy[k];
                    out.prefix[d] = a.prefix[k];
                    k += 1;
                }
            }
            out
        }
        OpKind::Broadcast => {
            let a = get(0);
            let src = func.ty(data.operands[0]).shape;
            let mut out = a.clone();
            for d in 0..rank {
                if src.dims()[d] == 1 && shape[d] != 1 {
                    out.contiguity[d] = 1;
                    out.constancy[d] = shape[d] as u64;
                    out.prefix[d] = shape[d] as u64;
                }
            }
            out
        }
        OpKind::Binary(b) => binary(b, &get(0), &get(1), rank),
        OpKind::AddPtr => {
            let (p, o) = (get(0), get(1));
            let eb = match rty.elem {
                Elem::Ptr(d) => d.bytes() as u64,
                Elem::Num(_) => 1,
            };
            let mut scaled = o.clone();
            for d in 0..MAX_RANK {
                scaled.divisibility[d] = (o.divisibility[d].saturating_mul(eb)).min(MAX_DIV);
            }
            let mut out = binary(BinaryOp::Add, &p, &scaled, rank);
            out.constant = None;
            out
        }
        OpKind::Compare(pred, _) => {
            let signed = matches!(func.ty(data.operands[0]).elem, Elem::Num(t) if t.is_signed());
            compare(pred, &get(0), &get(1), rank, signed)
        }
        OpKind::Hint { kind, values } => {
            // The user's promise replaces what the analysis found (as in Triton).
            let mut a = get(0);
            for d in 0..rank.max(1) {
                let v = values[d] as u64;
                if v == 0 {
                    continue;
                }
                match kind {
                    tile_ir::HintKind::MultipleOf => a.divisibility[d] = v.min(MAX_DIV),
                    tile_ir::HintKind::MaxContiguous => a.contiguity[d] = v,
                    tile_ir::HintKind::MaxConstancy => a.constancy[d] = v,
                }
            }
            a
        }
        OpKind::Cast => {
            let a = get(0);
            let widening_int = matches!((func.ty(data.operands[0]).elem, rty.elem), (Elem::Num(s), Elem::Num(t)) if s.is_int() && t.is_int() && t.bits() >= s.bits() && s.bits() > 1);
            if widening_int {
                a
            } else {
                AxisInfo {
                    constancy: a.constancy,
                    ..AxisInfo::default()
                }
            }
        }
        OpKind::Select => {
            let (c, a, b) = (get(0), get(1), get(2));
            let mut out = AxisInfo::default();
            for d in 0..rank.max(1) {
                out.constancy[d] = gcd(gcd(a.constancy[d], b.constancy[d]), c.constancy[d]);
                out.divisibility[d] = gcd(a.divisibility[d], b.divisibility[d]);
                if c.constancy[d] > 1 || rank == 0 {
                    // Whole runs take one side: contiguity survives where both sides have it.
                    out.contiguity[d] =
                        gcd(gcd(a.contiguity[d], b.contiguity[d]), c.constancy[d].max(1));
                }
            }
            out
        }
        _ if data.kind.is_elementwise() => {
            let mut out = AxisInfo::default();
            for d in 0..rank.max(1) {
                out.constancy[d] = data
                    .operands
                    .iter()
                    .map(|&v| infos.get(v).constancy[d])
                    .fold(0, gcd)
                    .max(1);
            }
            out
        }
        _ => AxisInfo::default(),
    };
    let mut info = info;
    for d in 0..MAX_RANK {
        info.prefix[d] = info.prefix[d].max(info.constancy[d]);
    }
    infos.set(res, info);
}

fn binary(op: BinaryOp, a: &AxisInfo, b: &AxisInfo, rank: usize) -> AxisInfo {
    let mut out = AxisInfo::default();
    let known = a.constant.zip(b.constant);
    for d in 0..rank.max(1) {
        out.constancy[d] = gcd(a.constancy[d], b.constancy[d]);
        if matches!(op, BinaryOp::And | BinaryOp::Or) {
            // Of two masks true on prefixes of a run, both and either are too.
            out.prefix[d] = gcd(a.prefix[d], b.prefix[d]);
        }
        match op {
            BinaryOp::Add | BinaryOp::Sub => {
                let from_a = gcd(a.contiguity[d], b.constancy[d]);
                let from_b = if op == BinaryOp::Add {
                    gcd(b.contiguity[d], a.constancy[d])
                } else {
                    1
                };
                out.contiguity[d] = from_a.max(from_b);
                out.divisibility[d] = gcd(a.divisibility[d], b.divisibility[d]);
            }
            BinaryOp::Mul => {
                out.contiguity[d] = match (a.constant, b.constant) {
                    (_, Some(1)) => a.contiguity[d],
                    (Some(1), _) => b.contiguity[d],
                    _ => 1,
                };
                // A run's first value is a product of multiples only where the other side is
                // uniform over that run.
                let da = if b.constancy[d] >= a.contiguity[d] {
                    a.divisibility[d]
                } else {
                    1
                };
                let db = if a.constancy[d] >= b.contiguity[d] {
                    b.divisibility[d]
                } else {
                    1
                };
                out.divisibility[d] = da.saturating_mul(db).min(MAX_DIV);
            }
            BinaryOp::Rem => {
                // `x % n` with n uniform over x's runs and a multiple of g: runs of x cut into
                // pieces of g that start at multiples of g never wrap inside a piece.
                if b.constancy[d] >= a.contiguity[d] {
                    let g = gcd(gcd(a.contiguity[d], b.divisibility[d]), a.divisibility[d]);
                    out.contiguity[d] = g.max(1);
                }
                out.divisibility[d] = gcd(a.divisibility[d], b.divisibility[d]);
            }
            BinaryOp::Shl => {
                if let Some(k) = b.constant.filter(|k| (0..30).contains(k)) {
                    out.divisibility[d] = (a.divisibility[d] << k).min(MAX_DIV);
                }
            }
            BinaryOp::Div | BinaryOp::Shr => {
                // `x // n` with x in aligned runs of consecutive values and n uniform over them:
                // pieces of g = gcd(run, the runs' first-value divisibility, n's divisibility)
                // hold no multiple of n past their first value, so the quotient is equal across
                // each (`b_s[offs_n // 128]`). `x >> k` is `x // 2^k`.
                let n_div = if op == BinaryOp::Div {
                    Some(b.divisibility[d])
                } else {
                    b.constant
                        .filter(|k| (0..30).contains(k))
                        .map(|k| 1u64 << k)
                };
                if let Some(n_div) = n_div {
                    if b.constancy[d] >= a.contiguity[d] {
                        let g = gcd(gcd(a.contiguity[d], a.divisibility[d]), n_div);
                        out.constancy[d] = out.constancy[d].max(g);
                    }
                }
            }
            _ => {}
        }
    }
    out.constant = known.and_then(|(x, y)| match op {
        BinaryOp::Add => x.checked_add(y),
        BinaryOp::Sub => x.checked_sub(y),
        BinaryOp::Mul => x.checked_mul(y),
        _ => None,
    });
    if let Some(c) = out.constant {
        out.divisibility = [pow2_divisor(c); MAX_RANK];
    }
    out
}

fn compare(pred: CmpPred, a: &AxisInfo, b: &AxisInfo, rank: usize, signed: bool) -> AxisInfo {
    let mut out = AxisInfo::default();
    for d in 0..rank.max(1) {
        // `x < n`, `x <= n`, `n > x`, `n >= x` with x consecutive over a run and n uniform
        // there hold on a prefix of the run: signed only (unsigned, a run through zero wraps).
        let (inc, bound) = match pred {
            CmpPred::Lt | CmpPred::Le => (a, b),
            CmpPred::Gt | CmpPred::Ge => (b, a),
            _ => (a, a),
        };
        if signed && !std::ptr::eq(inc, bound) {
            out.prefix[d] = gcd(inc.contiguity[d], bound.constancy[d]).max(1);
        }
        let mut k = gcd(a.constancy[d], b.constancy[d]);
        // `x < n` (or `x >= n`) with x in aligned runs of consecutive values and n a uniform
        // multiple of the run length is uniform over each such run; `n > x`, `n <= x` likewise.
        let (runs, bound) = match pred {
            CmpPred::Lt | CmpPred::Ge => (a, b),
            CmpPred::Gt | CmpPred::Le => (b, a),
            _ => (a, a),
        };
        if !std::ptr::eq(runs, bound) && bound.constancy[d] >= runs.contiguity[d] {
            let block = gcd(
                runs.contiguity[d],
                gcd(runs.divisibility[d], bound.divisibility[d]),
            );
            k = k.max(block);
        }
        out.constancy[d] = k;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tile_ir::{Builder, DType, Elem};

    #[test]
    fn loop_induction_variables_are_known_without_loop_state() {
        let mut b = Builder::new("k", 4);
        let n = b.param("n", Elem::Num(DType::I32), 16);
        let zero = b
            .constant(Const::Int(0), tile_ir::Type::num(DType::I32))
            .unwrap();
        let step = b
            .constant(Const::Int(256), tile_ir::Type::num(DType::I32))
            .unwrap();
        let h = b.begin_for(zero, n, step, &[]).unwrap();
        b.end_for(&h, &[]).unwrap();
        let f = b.finish();
        assert_eq!(analyze(&f).get(h.iv).divisibility[0], 256);
    }

    #[test]
    fn offsets_of_a_block_are_contiguous_and_aligned() {
        let mut b = Builder::new("k", 4);
        let n = b.param("n", Elem::Num(DType::I32), 16);
        let pid = b.program_id(0).unwrap();
        let blk = b
            .constant(Const::Int(1024), tile_ir::Type::num(DType::I32))
            .unwrap();
        let start = b.binary(BinaryOp::Mul, pid, blk).unwrap();
        let r = b.arange(0, 1024).unwrap();
        let shape = b.func.ty(r).shape;
        let s = b.splat(start, shape).unwrap();
        let offs = b.binary(BinaryOp::Add, s, r).unwrap();
        let ns = b.splat(n, shape).unwrap();
        let mask = b.compare(CmpPred::Lt, offs, ns).unwrap();
        let f = b.finish();
        let info = analyze(&f);
        assert_eq!(info.get(offs).contiguity[0], 1024);
        assert_eq!(info.get(offs).divisibility[0], 1024);
        assert_eq!(info.get(mask).constancy[0], 16);
    }

    #[test]
    fn bounds_checks_of_consecutive_offsets_hold_on_prefixes() {
        // offs = pid * 64 + arange(64) against n of unknown alignment: `offs < n` is true on a
        // prefix of the run (not uniform), as is its conjunction with `offs >= 0`; `offs > n`
        // holds on a suffix, and unsigned compares of a run can wrap: neither is a prefix.
        let mut b = Builder::new("k", 4);
        let n = b.param("n", Elem::Num(DType::I32), 1);
        let u = b.param("u", Elem::Num(DType::U32), 1);
        let i32t = tile_ir::Type::num(DType::I32);
        let pid = b.program_id(0).unwrap();
        let c64 = b.constant(Const::Int(64), i32t).unwrap();
        let zero = b.constant(Const::Int(0), i32t).unwrap();
        let start = b.binary(BinaryOp::Mul, pid, c64).unwrap();
        let r = b.arange(0, 64).unwrap();
        let shape = b.func.ty(r).shape;
        let s = b.splat(start, shape).unwrap();
        let offs = b.binary(BinaryOp::Add, s, r).unwrap();
        let ns = b.splat(n, shape).unwrap();
        let zs = b.splat(zero, shape).unwrap();
        let below = b.compare(CmpPred::Lt, offs, ns).unwrap();
        let above = b.compare(CmpPred::Ge, offs, zs).unwrap();
        let inside = b.binary(BinaryOp::And, below, above).unwrap();
        let past = b.compare(CmpPred::Gt, offs, ns).unwrap();
        let bound = b.compare(CmpPred::Gt, ns, offs).unwrap();
        let uoffs = b.cast(offs, Elem::Num(DType::U32)).unwrap();
        let us = b.splat(u, shape).unwrap();
        let unsigned = b.compare(CmpPred::Lt, uoffs, us).unwrap();
        let f = b.finish();
        let info = analyze(&f);
        assert_eq!(info.get(below).constancy[0], 1);
        assert_eq!(info.get(below).prefix[0], 64);
        assert_eq!(info.get(above).constancy[0], 64);
        assert_eq!(info.get(inside).prefix[0], 64);
        assert_eq!(info.get(bound).prefix[0], 64);
        assert_eq!(info.get(past).prefix[0], 1);
        assert_eq!(info.get(unsigned).prefix[0], 1);
    }

    #[test]
    fn quotients_of_aligned_runs_are_uniform_over_pieces() {
        // offs_n = (pid * 128 + arange(128)) % n with n a multiple of 16: runs of 16 that
        // never wrap; offs_n // 128 and offs_n >> 3 are equal over runs of 16 and 8.
        let mut b = Builder::new("k", 4);
        let n = b.param("n", Elem::Num(DType::I32), 16);
        let i32t = tile_ir::Type::num(DType::I32);
        let pid = b.program_id(0).unwrap();
        let c128 = b.constant(Const::Int(128), i32t).unwrap();
        let c3 = b.constant(Const::Int(3), i32t).unwrap();
        let start = b.binary(BinaryOp::Mul, pid, c128).unwrap();
        let r = b.arange(0, 128).unwrap();
        let shape = b.func.ty(r).shape;
        let s = b.splat(start, shape).unwrap();
        let offs = b.binary(BinaryOp::Add, s, r).unwrap();
        let ns = b.splat(n, shape).unwrap();
        let wrapped = b.binary(BinaryOp::Rem, offs, ns).unwrap();
        let d128 = b.splat(c128, shape).unwrap();
        let q = b.binary(BinaryOp::Div, wrapped, d128).unwrap();
        let k3 = b.splat(c3, shape).unwrap();
        let sh = b.binary(BinaryOp::Shr, wrapped, k3).unwrap();
        let whole = b.binary(BinaryOp::Div, offs, d128).unwrap();
        // An unaligned run start: (arange + 3) // 128 changes inside any piece.
        let off3 = b.binary(BinaryOp::Add, r, k3).unwrap();
        let q3 = b.binary(BinaryOp::Div, off3, d128).unwrap();
        // A divisor that varies across the run gives nothing.
        let qr = b.binary(BinaryOp::Div, d128, r).unwrap();
        let f = b.finish();
        let info = analyze(&f);
        assert_eq!(info.get(wrapped).contiguity[0], 16);
        assert_eq!(info.get(q).constancy[0], 16);
        assert_eq!(info.get(sh).constancy[0], 8);
        assert_eq!(info.get(whole).constancy[0], 128);
        assert_eq!(info.get(q3).constancy[0], 1);
        assert_eq!(info.get(qr).constancy[0], 1);
    }
}
