//! Software pipelining of loops that feed `dot` (Triton's `num_stages`).
//!
//! A load whose every use is a conversion to a `#dot_op` layout (or a transpose to one), of a
//! tensor-core dot or a CUDA-core one, becomes an `async_copy` (`cp.async`) into a ring of
//! shared-memory slots, issued `S - 1` iterations ahead of its use; each `dot` reads the slot
//! through a `local_view` (attention's backward reads `q` and `do` both ways round). Where a
//! `wgmma` reads a slot in place the ring has `R = S` slots; where every read takes the slot into
//! registers (`ldmatrix`, `ld.shared`) it has `R = S - 1`, and a barrier before the refill
//! keeps the copies off the slot until every thread has read it. For `S = 3`:
//!
//! ```text
//! prologue:  copy(it 0) -> slot 0; commit; copy(it 1) -> slot 1; commit
//! iteration i:  wait until group i landed; barrier       (slot i%R is full)
//!               dot(view(slot i%R)) ...
//!               [R = S - 1: barrier]                     (slot (i+2)%R is free)
//!               copy(it i+2) -> slot (i+2)%R; commit
//! after:     wait for everything
//! ```
//!
//! What a future iteration's copy needs (pointers, masks; the *stage-0 ops*) is recomputed
//! from the induction variable `S - 1` steps ahead and from loop-carried values kept that many
//! iterations ahead: a carried value used only by stage-0 ops is simply advanced (its init
//! runs the prologue's updates); one the rest of the body also reads gets an extra carried
//! copy. Copies past the end of the loop are masked off (`cp.async` then writes zeros and
//! reads nothing).
//!
//! A load that reaches a dot's `a` or `b` through other ops (int8 weights cast and scaled
//! before the dot, a bias that a softmax turns into `p`) goes through a ring the same way, and
//! `local_load` reads its slot back into registers where the load was: in the layout its users
//! all convert it to when they agree on one (an `mma.sync` operand), else in its own, with a
//! non-zero `other` selected in where the mask is off (`cp.async` writes zeros there). Only
//! in loops that write nothing; such a load is left out, and the loop kept, when its address
//! cannot be computed ahead. A vector loaded only to be used as a row or a column
//! (`tl.load(scales + offs_n)[None, :]`) is made a 2-D load first (`expand_loads`), so that
//! it can take a ring too.
//!
//! In a loop that writes nothing, stage 0 may itself load: a paged attention's block index,
//! which K's and V's addresses need. Such a load moves ahead whole (only stage 0 and the
//! pipelined loads read it), masked off for iterations past the loop's end.
//!
//! Loops are left alone when a copy could not be expressed: stage-0 ops with side effects or
//! regions, loads dots read directly with a non-zero `other`, accesses narrower than 4 bytes
//! per thread.
//!
//! In a loop it pipelines, the other small loads (no dot reads them; at most 16 registers per
//! thread) are issued one iteration ahead, into registers the loop carries, unless the loop
//! stores or has other side effects (`prefetch_loads`).

use std::collections::{HashMap, HashSet};
use tile_ir::{
    AsyncCopyAttrs, BinaryOp, Block, CmpPred, Const, DType, Elem, Function, Layout, Loc, Op,
    OpKind, Type, Value, ValueDef,
};

/// Pipelines every eligible loop; returns how many were pipelined.
pub fn pipeline_loops(func: &mut Function) -> usize {
    let parent = func.op_blocks();
    let loops = func.for_loops();
    let mut next_buf = 0u32;
    let mut done = 0;
    for op in loops {
        let OpKind::For { stages } = func.ops[op].kind else {
            continue;
        };
        let s = if stages > 0 {
            stages as u32
        } else {
            func.num_stages
        };
        if s < 2 {
            continue;
        }
        let body = func.region_block(op, 0);
        expand_loads(func, body);
        let Some(first) = plan(func, op, s) else {
            continue;
        };
        if next_buf + first.loads.len() as u32 > u8::MAX as u32 {
            break;
        }
        // The loop's other small loads go one iteration ahead in registers; then the plan
        // is made again for the body that has them.
        // (Loads the copies' addresses need move ahead with them.)
        let planned: HashSet<Op> = first
            .loads
            .iter()
            .map(|l| l.load)
            .chain(first.stage0.iter().copied())
            .collect();
        let plan = if prefetch_loads(func, op, parent[&op], &planned) > 0 {
            match plan(func, op, s) {
                Some(p) => p,
                None => continue,
            }
        } else {
            first
        };
        apply(func, op, parent[&op], s, plan, &mut next_buf);
        done += 1;
    }
    done
}

/// `expand_dims(load(p, mask, other))` in `body`, the load's only reader, becomes
/// `load(expand_dims(p), expand_dims(mask), expand_dims(other))`: a row of scales or zero
/// points loaded as a vector and used as `s[None, :]` is then a 2-D load, which rings take.
/// Exact: each element is loaded from the same address under the same mask; the layouts are
/// those the ops had (an expanded operand's layout is the slice of its result's).
fn expand_loads(func: &mut Function, body: Block) {
    // Analyse: the readers of each value among the body's ops (nested reads count for their
    // parent), and the values computed from a dot of this iteration: a row combined with one
    // (attention's `qk - m[None, :]`) waits on that dot anyway, and stays one iteration ahead
    // in registers.
    let users = body_users(func, body);
    let mut from_dot: HashSet<Value> = HashSet::new();
    let mut read = Vec::new();
    for &op in &func.blocks[body].ops {
        read.clear();
        func.reads(op, &mut read);
        if matches!(func.ops[op].kind, OpKind::Dot { .. })
            || read.iter().any(|v| from_dot.contains(v))
        {
            from_dot.extend(func.ops[op].results.iter().copied());
        }
    }
    let expansions: Vec<(Op, Op)> = func.blocks[body]
        .ops
        .iter()
        .filter_map(|&op| {
            let OpKind::Load(m) = func.ops[op].kind else {
                return None;
            };
            let r = func.ops[op].results[0];
            let [expand] = users.get(&r)?.as_slice() else {
                return None;
            };
            let OpKind::ExpandDims(axis) = func.ops[*expand].kind else {
                return None;
            };
            let e = func.ops[*expand].results[0];
            // The vector's layout is the slice of the row's (so its vector width and runs
            // hold along the same dimension of the row).
            let sliced = match (func.layout_of(r), func.ty(e).layout) {
                (Some(Layout::Slice { dim, parent }), Some(w)) => {
                    *dim == axis as u32 && **parent == func.layouts[w]
                }
                _ => false,
            };
            (!m.volatile
                && func.ty(r).shape.rank() == 1
                && sliced
                && dequantises_operand(func, &users, e, &from_dot))
            .then_some((op, *expand))
        })
        .collect();
    // Rewrite.
    for (op, expand) in expansions {
        let d = func.ops[op].clone();
        let OpKind::Load(mut m) = d.kind else {
            continue;
        };
        let OpKind::ExpandDims(axis) = func.ops[expand].kind else {
            continue;
        };
        let (r, e) = (d.results[0], func.ops[expand].results[0]);
        let wide = *func.ty(e);
        let mut at = Cursor::before(func, body, op, d.loc);
        let operands: Vec<Value> = d
            .operands
            .iter()
            .map(|&v| {
                let ty = Type {
                    elem: func.ty(v).elem,
                    ..wide
                };
                at.push(func, OpKind::ExpandDims(axis), vec![v], Some(ty))
            })
            .collect();
        // The runs of equal addresses, per dimension: the new one has none.
        let axis = axis as usize;
        let n = m.runs.len();
        m.runs.copy_within(axis..n - 1, axis + 1);
        m.runs[axis] = 1;
        func.ops[op].kind = OpKind::Load(m);
        func.ops[op].operands = operands;
        func.values[r].ty = wide;
        func.replace_uses(e, r);
        func.blocks[body].ops.retain(|&o| o != expand);
    }
}

/// The readers of each value among `body`'s ops (a read nested in an op's regions counts for
/// that op).
fn body_users(func: &Function, body: Block) -> HashMap<Value, Vec<Op>> {
    let mut users: HashMap<Value, Vec<Op>> = HashMap::new();
    let mut read = Vec::new();
    for &op in &func.blocks[body].ops {
        read.clear();
        func.reads(op, &mut read);
        for &v in &read {
            users.entry(v).or_default().push(op);
        }
    }
    users
}

/// Whether `v` reaches a dot's `a` or `b` through shape and elementwise ops (broadcasts,
/// interleaves, casts, arithmetic) none of which combines it with a value computed from a
/// dot: zero points or scales of a weight tile, not a softmax's row statistics. `users`: the
/// readers of each value among the body's ops.
fn dequantises_operand(
    func: &Function,
    users: &HashMap<Value, Vec<Op>>,
    v: Value,
    from_dot: &HashSet<Value>,
) -> bool {
    let mut frontier = vec![v];
    let mut seen = HashSet::new();
    let mut reaches = false;
    let mut read = Vec::new();
    while let Some(x) = frontier.pop() {
        if !seen.insert(x) {
            continue;
        }
        if seen.len() > 256 {
            return false;
        }
        for &op in users.get(&x).map_or(&[][..], Vec::as_slice) {
            let d = &func.ops[op];
            match d.kind {
                OpKind::Dot { .. }
                    if d.operands[..2].contains(&x) && !d.operands[2..].contains(&x) =>
                {
                    reaches = true
                }
                OpKind::Broadcast
                | OpKind::Join
                | OpKind::Reshape
                | OpKind::ConvertLayout
                | OpKind::ExpandDims(_) => frontier.extend(d.results.iter().copied()),
                k if k.is_elementwise() => {
                    read.clear();
                    func.reads(op, &mut read);
                    if read.iter().any(|r| from_dot.contains(r)) {
                        return false;
                    }
                    frontier.extend(d.results.iter().copied());
                }
                _ => return false,
            }
        }
    }
    reaches
}

/// How a pipelined load's slot is read.
#[derive(Clone, PartialEq)]
enum Read {
    /// Its users, conversions to dot operands, become views the dots read fragments from.
    Views(Vec<Op>),
    /// Registers in the layout of its users, conversions that all agree on one.
    Converted(Vec<Op>),
    /// Registers in the load's own layout; a non-zero `other` is selected where the mask is off.
    Registers,
}

/// A load pipelined through a ring.
struct RingLoad {
    load: Op,
    read: Read,
    /// Elements per copy.
    vector: u8,
}

/// What pipelining a loop does.
struct Plan {
    loads: Vec<RingLoad>,
    /// Stage-0 ops, in body order.
    stage0: Vec<Op>,
    /// Carried values (argument index, counting the induction variable as 0) stage 0 reads,
    /// and whether the rest of the body also reads them (then a copy is carried ahead).
    carried: Vec<(usize, bool)>,
}

fn is_zero_constant(func: &Function, v: Value) -> bool {
    let ValueDef::Result(op, _) = func.values[v].def else {
        return false;
    };
    match func.ops[op].kind {
        OpKind::Constant(Const::Int(0)) => true,
        OpKind::Constant(Const::Float(x)) => x == 0.0,
        OpKind::Splat => is_zero_constant(func, func.ops[op].operands[0]),
        _ => false,
    }
}

/// Elements per `cp.async` for a load: the load's vector width, if every run of that many
/// registers is contiguous and the run is 4, 8 or 16 bytes.
fn copy_width(func: &Function, load: Op) -> Option<u8> {
    let OpKind::Load(m) = func.ops[load].kind else {
        return None;
    };
    let ptr = func.ops[load].operands[0];
    let ty = func.ty(ptr);
    let Elem::Ptr(d) = ty.elem else { return None };
    let vec = m.vector.max(1) as u32;
    let bytes = vec * d.bytes();
    if !matches!(bytes, 4 | 8 | 16) {
        return None;
    }
    let layout = func.layout_of(ptr)?;
    let (fast, _) = layout.contiguous_dim()?;
    let regs = layout.register_offsets(ty.shape.dims());
    if regs.len() % vec as usize != 0 {
        return None;
    }
    for chunk in regs.chunks(vec as usize) {
        if chunk[0][fast] % vec != 0 {
            return None;
        }
        for (i, c) in chunk.iter().enumerate() {
            let mut want = chunk[0].clone();
            want[fast] += i as u32;
            if *c != want {
                return None;
            }
        }
    }
    Some(vec as u8)
}

/// Whether an op may be recomputed for a later iteration.
fn is_stage0_kind(kind: &OpKind) -> bool {
    kind.is_elementwise()
        || matches!(
            kind,
            OpKind::Constant(_)
                | OpKind::Splat
                | OpKind::Broadcast
                | OpKind::ConvertLayout
                | OpKind::ExpandDims(_)
                | OpKind::Arange { .. }
                | OpKind::ProgramId(_)
                | OpKind::NumPrograms(_)
        )
}

fn plan(func: &Function, for_op: Op, _stages: u32) -> Option<Plan> {
    let body = func.region_block(for_op, 0);
    let ops = func.blocks[body].ops.clone();
    let yield_op = *ops.last()?;
    let args = func.blocks[body].args.clone();
    let users = body_users(func, body);
    let users_of = |v: Value| users.get(&v).cloned().unwrap_or_default();
    let read_only = !has_effects(func, body);
    // Candidate loads.
    let mut loads = Vec::new();
    for &op in &ops {
        let d = &func.ops[op];
        let OpKind::Load(m) = d.kind else { continue };
        if m.volatile || func.ty(d.operands[0]).shape.rank() != 2 {
            continue;
        }
        let r = d.results[0];
        let mut us = users_of(r);
        us.dedup();
        // Each user gives the load a dot operand layout: a conversion, or a transpose (`k.T`:
        // the slot is then read transposed) whose results only `dot`s read, as operands.
        let to_operand = |cvt: Op| {
            let layout_change = match func.ops[cvt].kind {
                OpKind::ConvertLayout => true,
                OpKind::Permute { perm } => perm[0] == 1 && perm[1] == 0,
                _ => false,
            };
            // A user without a result (a store, a yield) reads the load in its own right.
            let Some(&cr) = func.ops[cvt].results.first() else {
                return false;
            };
            // Tensor-core operands, and CUDA-core ones (blocked parent: fp32 "ieee" dots).
            let to_dot_operand = matches!(func.layout_of(cr), Some(Layout::DotOperand { .. }));
            let dot_users = users_of(cr).iter().all(|&u| {
                matches!(func.ops[u].kind, OpKind::Dot { .. })
                    && func.ops[u].operands[..2].contains(&cr)
                    && !func.ops[u].operands[2..].contains(&cr)
            });
            layout_change && to_dot_operand && dot_users && !users_of(cr).is_empty()
        };
        let zero_other = !m.has_other || is_zero_constant(func, d.operands[2]);
        let read = if !us.is_empty() && us.iter().all(|&u| to_operand(u)) {
            Read::Views(us)
        } else if !read_only || !feeds_dot(func, &users, r) {
            // (Moving more loads ahead of a loop's own stores could read what an earlier
            // iteration had not yet written.)
            continue;
        } else if let Some(cvts) = one_conversion(func, &us).filter(|_| zero_other) {
            Read::Converted(cvts)
        } else {
            Read::Registers
        };
        if !zero_other && read != Read::Registers {
            continue;
        }
        let Some(vector) = copy_width(func, op) else {
            continue;
        };
        loads.push(RingLoad {
            load: op,
            read,
            vector,
        });
    }
    // The pointers and masks of loads.
    let roots_of = |loads: &[RingLoad]| -> Vec<Value> {
        let mut roots = Vec::new();
        for l in loads {
            let d = &func.ops[l.load];
            roots.push(d.operands[0]);
            if matches!(d.kind, OpKind::Load(m) if m.masked) {
                roots.push(d.operands[1]);
            }
        }
        roots
    };
    // A load read into registers joins only where its address and mask can be computed ahead
    // (with loads among them, `loads`); the loads dots read directly decide for the loop.
    let computable = |l: &RingLoad, loads: bool| {
        matches!(l.read, Read::Views(_))
            || recomputable(
                func,
                body,
                &roots_of(std::slice::from_ref(l)),
                Some(yield_op),
                loads,
            )
            .is_some()
    };
    loads.retain(|l| computable(l, read_only));
    if loads.is_empty() {
        return None;
    }
    // Stage 0: everything the loads' pointers and masks need, and the updates of the carried
    // values among it.
    // In a loop that writes nothing, stage 0 may load too (a paged attention's block index):
    // when only stage 0 and the pipelined loads read such a load, it moves ahead whole.
    let mut load_ops: HashSet<Op> = loads.iter().map(|l| l.load).collect();
    let mut found = recomputable(func, body, &roots_of(&loads), Some(yield_op), read_only);
    if let Some((ops0, _)) = &found {
        let set: HashSet<Op> = ops0.iter().copied().collect();
        let moves_whole = |o: &Op| {
            !matches!(func.ops[*o].kind, OpKind::Load(_))
                || users_of(func.ops[*o].results[0])
                    .iter()
                    .all(|u| set.contains(u) || load_ops.contains(u))
        };
        if !ops0.iter().all(moves_whole) {
            // Without loads in stage 0: the loads read into registers that needed one stay.
            loads.retain(|l| computable(l, false));
            if loads.is_empty() {
                return None;
            }
            load_ops = loads.iter().map(|l| l.load).collect();
            found = recomputable(func, body, &roots_of(&loads), Some(yield_op), false);
        }
    }
    let (stage0_ops, carried) = found?;
    let stage0: HashSet<Op> = stage0_ops.iter().copied().collect();
    // A carried value is advanced in place when only stage 0 (and its own update) reads it
    // and the loop's result for it is unused; otherwise a copy is carried ahead.
    let results = func.ops[for_op].results.clone();
    let outside_uses = func.use_counts();
    let mut carried_plan = Vec::new();
    let mut sorted: Vec<usize> = carried.iter().copied().collect();
    sorted.sort();
    for &k in &sorted {
        let mut shared = outside_uses[results[k - 1]] > 0;
        // Forward closure of the argument within the body.
        let mut seen: HashSet<Op> = HashSet::new();
        let mut vals = vec![args[k]];
        while let Some(v) = vals.pop() {
            for u in users_of(v) {
                if u == yield_op {
                    let positions = func.ops[yield_op]
                        .operands
                        .iter()
                        .enumerate()
                        .filter(|&(_, &y)| y == v)
                        .map(|(j, _)| j + 1);
                    for j in positions {
                        if !carried.contains(&j) {
                            shared = true;
                        }
                    }
                    continue;
                }
                if !seen.insert(u) || load_ops.contains(&u) {
                    // The pipelined loads themselves go away.
                    continue;
                }
                if !stage0.contains(&u) {
                    shared = true;
                }
                vals.extend_from_slice(&func.ops[u].results);
            }
        }
        carried_plan.push((k, shared));
    }
    Some(Plan {
        loads,
        stage0: stage0_ops,
        carried: carried_plan,
    })
}

/// Whether an op of `body` (nested ones included) has an effect beyond its results: a store,
/// an atomic, a barrier, a print (control flow and yields aside).
fn has_effects(func: &Function, body: Block) -> bool {
    func.blocks[body].ops.iter().any(|&op| {
        let mut effects = false;
        func.walk_op(op, |o| {
            let k = &func.ops[o].kind;
            effects |= k.has_side_effects()
                && !matches!(
                    k,
                    OpKind::Yield | OpKind::For { .. } | OpKind::If | OpKind::While
                );
        });
        effects
    })
}

/// Whether `v` reaches an operand `a` or `b` of a `dot` of the body through its users (a
/// dequantised weight, a bias that a softmax turns into attention's `p`).
fn feeds_dot(func: &Function, users: &HashMap<Value, Vec<Op>>, v: Value) -> bool {
    let mut seen: HashSet<Op> = HashSet::new();
    let mut work = vec![v];
    while let Some(v) = work.pop() {
        for &u in users.get(&v).into_iter().flatten() {
            let d = &func.ops[u];
            if matches!(d.kind, OpKind::Dot { .. }) && d.operands[..2].contains(&v) {
                return true;
            }
            if seen.len() < 512 && seen.insert(u) && !matches!(d.kind, OpKind::Yield) {
                work.extend_from_slice(&d.results);
            }
        }
    }
    false
}

/// The users of a load when every one converts it to the same register layout (a dot operand
/// of `mma.sync`, say): the slot is then read straight into that layout.
fn one_conversion(func: &Function, users: &[Op]) -> Option<Vec<Op>> {
    let first = *users.first()?;
    let layout = |u: Op| {
        let d = &func.ops[u];
        matches!(d.kind, OpKind::ConvertLayout)
            .then(|| d.results.first().and_then(|&r| func.ty(r).layout))
            .flatten()
    };
    let l = layout(first)?;
    (!func.layouts[l].is_warpgroup_b() && users.iter().all(|&u| layout(u) == Some(l)))
        .then(|| users.to_vec())
}

/// Inserts ops at a position of a block, keeping the insertion point after them.
pub(crate) struct Cursor {
    pub(crate) block: Block,
    pub(crate) pos: usize,
    pub(crate) loc: Loc,
}

impl Cursor {
    /// Inserting just before `op`, one of `block`'s ops.
    pub(crate) fn before(func: &Function, block: Block, op: Op, loc: Loc) -> Cursor {
        let pos = func.position(block, op).expect("the op is in the block");
        Cursor { block, pos, loc }
    }

    /// Inserting just after `op`, one of `block`'s ops.
    pub(crate) fn after(func: &Function, block: Block, op: Op, loc: Loc) -> Cursor {
        let mut at = Cursor::before(func, block, op, loc);
        at.pos += 1;
        at
    }

    pub(crate) fn push(
        &mut self,
        func: &mut Function,
        kind: OpKind,
        operands: Vec<Value>,
        ty: Option<Type>,
    ) -> Value {
        let tys: Vec<Type> = ty.into_iter().collect();
        let op = func.create_op(kind, operands, &tys, self.loc);
        func.blocks[self.block].ops.insert(self.pos, op);
        self.pos += 1;
        func.ops[op]
            .results
            .first()
            .copied()
            .unwrap_or(Value(u32::MAX))
    }

    /// `valid` (an i1 scalar) as a mask for the pointer tile `ptr`, and-ed with `mask` when
    /// given: the access of an iteration that may be past the loop's end.
    fn and_valid(
        &mut self,
        func: &mut Function,
        ptr: Value,
        mask: Option<Value>,
        valid: Value,
    ) -> Value {
        let pty = *func.ty(ptr);
        let mty = Type {
            elem: Elem::Num(DType::I1),
            ..pty
        };
        let v = if pty.shape.rank() == 0 {
            valid
        } else {
            self.push(func, OpKind::Splat, vec![valid], Some(mty))
        };
        match mask {
            Some(m) => self.push(func, OpKind::Binary(BinaryOp::And), vec![m, v], Some(mty)),
            None => v,
        }
    }

    fn int(&mut self, func: &mut Function, v: i64, d: DType) -> Value {
        self.push(
            func,
            OpKind::Constant(Const::Int(v)),
            vec![],
            Some(Type::num(d)),
        )
    }

    /// Clones the stage-0 ops with `env` mapping their inputs; returns the mapping extended by
    /// the clones' results.
    ///
    /// A load among them (`valid` given) reads only when `valid` holds: the iteration it
    /// serves may be past the loop's end.
    fn clone_ops(
        &mut self,
        func: &mut Function,
        ops: &[Op],
        env: &mut HashMap<Value, Value>,
        valid: Option<Value>,
    ) {
        for &o in ops {
            let d = func.ops[o].clone();
            let mut operands: Vec<Value> = d
                .operands
                .iter()
                .map(|v| *env.get(v).unwrap_or(v))
                .collect();
            let mut kind = d.kind;
            if let (OpKind::Load(mut m), Some(valid)) = (d.kind, valid) {
                let mask = m.masked.then(|| operands[1]);
                let mask = self.and_valid(func, operands[0], mask, valid);
                if m.masked {
                    operands[1] = mask;
                } else {
                    operands.insert(1, mask);
                }
                m.masked = true;
                kind = OpKind::Load(m);
            }
            let tys: Vec<Type> = d.results.iter().map(|&r| *func.ty(r)).collect();
            let new = func.create_op(kind, operands, &tys, d.loc);
            func.blocks[self.block].ops.insert(self.pos, new);
            self.pos += 1;
            for (i, &r) in d.results.iter().enumerate() {
                env.insert(r, func.ops[new].results[i]);
            }
        }
    }

    /// The copies of one iteration: `async_copy` of each load into `slot`, masked by the
    /// load's mask and `valid`, then a commit.
    #[allow(clippy::too_many_arguments)]
    fn copies(
        &mut self,
        func: &mut Function,
        loads: &[RingLoad],
        bufs: &[u8],
        stages: u32,
        env: &HashMap<Value, Value>,
        slot: Value,
        valid: Value,
    ) {
        for (k, rl) in loads.iter().enumerate() {
            let d = func.ops[rl.load].clone();
            let ptr = *env.get(&d.operands[0]).unwrap_or(&d.operands[0]);
            let (masked, prefix_mask) = match d.kind {
                OpKind::Load(m) => (m.masked, m.prefix_mask),
                _ => (false, false),
            };
            let mask = masked.then(|| *env.get(&d.operands[1]).unwrap_or(&d.operands[1]));
            let mask = self.and_valid(func, ptr, mask, valid);
            let attrs = AsyncCopyAttrs {
                buf: bufs[k],
                stages: stages as u8,
                masked: true,
                vector: rl.vector,
                prefix_mask,
            };
            self.push(func, OpKind::AsyncCopy(attrs), vec![ptr, slot, mask], None);
        }
        self.push(func, OpKind::AsyncCommit, vec![], None);
    }
}

fn apply(
    func: &mut Function,
    for_op: Op,
    parent: Block,
    stages: u32,
    plan: Plan,
    next_buf: &mut u32,
) {
    let ahead = stages - 1;
    // The ring's slots: a slot read into registers (`ldmatrix`, `ld.shared`) is free once
    // every thread is past its reads, so `S - 1` slots do, with a barrier before the copies
    // that refill the slot this iteration read. A `wgmma` reads its operands from shared
    // memory until it is waited for, one iteration later: then the ring keeps `S` slots, and
    // the slot refilled is the one the previous iteration read. (Triton's rule too: the
    // same `num_stages` takes the same shared memory.)
    let ring = if read_by_warpgroup(func, &plan) || !fewer_slots() {
        stages
    } else {
        ahead
    };
    let body = func.region_block(for_op, 0);
    let args = func.blocks[body].args.clone();
    let yield_op = *func.blocks[body].ops.last().expect("yield");
    let (lb, ub, step) = {
        let o = &func.ops[for_op].operands;
        (o[0], o[1], o[2])
    };
    let ivt = *func.ty(lb);
    let ivd = ivt.dtype().expect("integer bounds");
    let loc = func.ops[for_op].loc;
    let bufs: Vec<u8> = plan
        .loads
        .iter()
        .map(|_| {
            let b = *next_buf as u8;
            *next_buf += 1;
            b
        })
        .collect();
    // Prologue: iterations 0 .. S-2, before the loop.
    let mut cur = Cursor::before(func, parent, for_op, loc);
    let mut values: HashMap<usize, Value> = plan
        .carried
        .iter()
        .map(|&(k, _)| (k, func.ops[for_op].operands[3 + k - 1]))
        .collect();
    for j in 0..ahead {
        let jc = cur.int(func, j as i64, ivd);
        let off = cur.push(
            func,
            OpKind::Binary(BinaryOp::Mul),
            vec![jc, step],
            Some(ivt),
        );
        let iv = cur.push(
            func,
            OpKind::Binary(BinaryOp::Add),
            vec![lb, off],
            Some(ivt),
        );
        let valid = cur.push(
            func,
            OpKind::Compare(CmpPred::Lt, 0),
            vec![iv, ub],
            Some(Type::num(DType::I1)),
        );
        let mut env: HashMap<Value, Value> = HashMap::new();
        env.insert(args[0], iv);
        for (&k, &v) in &values {
            env.insert(args[k], v);
        }
        cur.clone_ops(func, &plan.stage0, &mut env, Some(valid));
        let slot = cur.int(func, j as i64, DType::I32);
        cur.copies(func, &plan.loads, &bufs, ring, &env, slot, valid);
        for (&k, v) in values.iter_mut() {
            let y = func.ops[yield_op].operands[k - 1];
            *v = *env.get(&y).unwrap_or(&y);
        }
    }
    let zero = cur.int(func, 0, DType::I32);
    // The loop: advanced carried values take their prologue values as inits; shared ones get
    // an extra carried copy; one more carries the read slot, and with `S` slots another the
    // write slot.
    let mut ahead_arg: HashMap<usize, Value> = HashMap::new();
    for &(k, shared) in &plan.carried {
        if shared {
            let ty = *func.ty(args[k]);
            let (a, _) = func.add_carried(for_op, values[&k], ty);
            ahead_arg.insert(k, a);
        } else {
            func.ops[for_op].operands[3 + k - 1] = values[&k];
            ahead_arg.insert(k, args[k]);
        }
    }
    let i32t = Type::num(DType::I32);
    let (slot_read, _) = func.add_carried(for_op, zero, i32t);
    // (With `S - 1` slots an iteration refills the slot it read.)
    let slot_write = if ring == ahead {
        slot_read
    } else {
        let first_write = cur.int(func, ahead as i64, DType::I32);
        func.add_carried(for_op, first_write, i32t).0
    };
    // Top of the body: this iteration's group has landed and every thread is past the
    // previous iteration's reads.
    let mut top = Cursor {
        block: body,
        pos: 0,
        loc,
    };
    top.push(
        func,
        OpKind::AsyncWait {
            pending: (ahead - 1) as u8,
        },
        vec![],
        None,
    );
    top.push(func, OpKind::Barrier, vec![], None);
    // Each load's conversions become views of its slot, or the slot is read into registers,
    // where the load was.
    for (k, rl) in plan.loads.iter().enumerate() {
        let l = rl.load;
        let loc = func.ops[l].loc;
        let (buf, stages) = (bufs[k], ring as u8);
        let mut reads = Vec::new();
        let mut replaced: Vec<Op> = Vec::new();
        match &rl.read {
            Read::Views(cvts) | Read::Converted(cvts) => {
                for &cvt in cvts {
                    let cr = func.ops[cvt].results[0];
                    let ty = *func.ty(cr);
                    let kind = match rl.read {
                        Read::Views(_) => OpKind::LocalView {
                            buf,
                            stages,
                            trans: matches!(func.ops[cvt].kind, OpKind::Permute { .. }),
                        },
                        _ => OpKind::LocalLoad { buf, stages },
                    };
                    let read = func.create_op(kind, vec![slot_read], &[ty], loc);
                    let vr = func.ops[read].results[0];
                    func.replace_uses(cr, vr);
                    reads.push(read);
                }
                replaced.extend_from_slice(cvts);
            }
            Read::Registers => {
                let d = func.ops[l].clone();
                let r = d.results[0];
                let ty = *func.ty(r);
                let read = func.create_op(
                    OpKind::LocalLoad { buf, stages },
                    vec![slot_read],
                    &[ty],
                    loc,
                );
                let mut vr = func.ops[read].results[0];
                reads.push(read);
                // cp.async wrote zeros where the mask is off; the load gave `other` there.
                if let OpKind::Load(m) = d.kind {
                    if m.masked && m.has_other && !is_zero_constant(func, d.operands[2]) {
                        let sel = func.create_op(
                            OpKind::Select,
                            vec![d.operands[1], vr, d.operands[2]],
                            &[ty],
                            loc,
                        );
                        vr = func.ops[sel].results[0];
                        reads.push(sel);
                    }
                }
                func.replace_uses(r, vr);
            }
        }
        let b = &mut func.blocks[body].ops;
        let lp = b.iter().position(|&o| o == l).expect("load in body");
        b.splice(lp..=lp, reads);
        b.retain(|o| !replaced.contains(o));
    }
    // End of the body: the copies of iteration i + S - 1.
    let mut end = Cursor::before(func, body, yield_op, loc);
    let dc = end.int(func, ahead as i64, ivd);
    let off = end.push(
        func,
        OpKind::Binary(BinaryOp::Mul),
        vec![dc, step],
        Some(ivt),
    );
    let iv_ahead = end.push(
        func,
        OpKind::Binary(BinaryOp::Add),
        vec![args[0], off],
        Some(ivt),
    );
    let valid = end.push(
        func,
        OpKind::Compare(CmpPred::Lt, 0),
        vec![iv_ahead, ub],
        Some(Type::num(DType::I1)),
    );
    let mut env: HashMap<Value, Value> = HashMap::new();
    env.insert(args[0], iv_ahead);
    for (&k, &a) in &ahead_arg {
        env.insert(args[k], a);
    }
    end.clone_ops(func, &plan.stage0, &mut env, Some(valid));
    if ring == ahead {
        end.push(func, OpKind::Barrier, vec![], None);
    }
    end.copies(func, &plan.loads, &bufs, ring, &env, slot_write, valid);
    let one = end.int(func, 1, DType::I32);
    let s_c = end.int(func, ring as i64, DType::I32);
    let zero_in = end.int(func, 0, DType::I32);
    let next_slot = |end: &mut Cursor, func: &mut Function, s: Value| {
        let n = end.push(
            func,
            OpKind::Binary(BinaryOp::Add),
            vec![s, one],
            Some(i32t),
        );
        let wrap = end.push(
            func,
            OpKind::Compare(CmpPred::Eq, 0),
            vec![n, s_c],
            Some(Type::num(DType::I1)),
        );
        end.push(func, OpKind::Select, vec![wrap, zero_in, n], Some(i32t))
    };
    let read_next = next_slot(&mut end, func, slot_read);
    let write_next = (ring != ahead).then(|| next_slot(&mut end, func, slot_write));
    // The yield: advanced values continue ahead; extras follow the original values.
    let mut ys = func.ops[yield_op].operands.clone();
    let mut extra = Vec::new();
    for &(k, shared) in &plan.carried {
        let y = ys[k - 1];
        let next = *env.get(&y).unwrap_or(&y);
        if shared {
            extra.push(next);
        } else {
            ys[k - 1] = next;
        }
    }
    ys.extend(extra);
    ys.push(read_next);
    ys.extend(write_next);
    func.ops[yield_op].operands = ys;
    // After the loop: retire the copies past its end before the memory is reused.
    let mut after = Cursor::after(func, parent, for_op, loc);
    after.push(func, OpKind::AsyncWait { pending: 0 }, vec![], None);
}

/// Whether a `wgmma` reads one of the ring's slots in place (as its `a` or `b`).
fn read_by_warpgroup(func: &Function, plan: &Plan) -> bool {
    plan.loads.iter().any(|l| match &l.read {
        Read::Views(cvts) => cvts.iter().any(|&c| {
            func.layout_of(func.ops[c].results[0])
                .is_some_and(Layout::is_warpgroup_operand)
        }),
        _ => false,
    })
}

/// `TILES_RING_SLOTS=stages`, for developers: rings read into registers keep `S` slots too.
fn fewer_slots() -> bool {
    std::env::var("TILES_RING_SLOTS").map_or(true, |v| v != "stages")
}

/// Registers per thread a prefetched load may hold, and all of a loop's together.
const PREFETCH_REGS: usize = 16;
const PREFETCH_REGS_PER_LOOP: usize = 32;

/// The body's top-level ops that compute `roots` from the loop's arguments and values defined
/// outside it (in body order), and the carried arguments (index >= 1) they read; None if one of
/// them may not be recomputed for another iteration (side effects, regions, dots; loads unless
/// `loads`). With `through` (the body's yield), a carried argument's update joins them too.
fn recomputable(
    func: &Function,
    body: Block,
    roots: &[Value],
    through: Option<Op>,
    loads: bool,
) -> Option<(Vec<Op>, HashSet<usize>)> {
    let in_body: HashSet<Op> = func.blocks[body].ops.iter().copied().collect();
    let mut found: HashSet<Op> = HashSet::new();
    let mut carried: HashSet<usize> = HashSet::new();
    let mut work: Vec<Value> = roots.to_vec();
    while let Some(v) = work.pop() {
        match func.values[v].def {
            ValueDef::Result(o, _) if in_body.contains(&o) => {
                if found.contains(&o) {
                    continue;
                }
                let d = &func.ops[o];
                let load = loads && matches!(d.kind, OpKind::Load(m) if !m.volatile);
                if !(is_stage0_kind(&d.kind) || load) || !d.regions.is_empty() {
                    return None;
                }
                found.insert(o);
                work.extend_from_slice(&d.operands);
            }
            ValueDef::Arg(b, i) if b == body && i > 0 && carried.insert(i as usize) => {
                if let Some(y) = through {
                    work.push(func.ops[y].operands[i as usize - 1]);
                }
            }
            _ => {}
        }
    }
    let ops = func.blocks[body]
        .ops
        .iter()
        .copied()
        .filter(|o| found.contains(o))
        .collect();
    Some((ops, carried))
}

/// Loads a pipelined loop's body makes that no dot reads (attention backward's row statistics
/// `m` and `D_i`) are issued one iteration ahead, at the end of the previous iteration (from
/// the values it yields), and carried in registers: their global-memory latency then overlaps
/// the loop's turn and the next iteration's first dot instead of stalling the math that follows
/// that dot. The first iteration's load goes before the loop; past the last iteration the load
/// is masked off.
///
/// Only loops without stores, atomics or other side effects (a prefetched load must not pass
/// a store to what it reads), and loads that hold at most `PREFETCH_REGS` registers per thread
/// (`PREFETCH_REGS_PER_LOOP` for the loop). Returns how many loads were moved.
fn prefetch_loads(func: &mut Function, for_op: Op, parent: Block, planned: &HashSet<Op>) -> usize {
    let body = func.region_block(for_op, 0);
    if has_effects(func, body) {
        return 0;
    }
    let mut budget = PREFETCH_REGS_PER_LOOP;
    let mut moved = 0;
    let candidates: Vec<Op> = func.blocks[body]
        .ops
        .iter()
        .copied()
        .filter(|&o| matches!(func.ops[o].kind, OpKind::Load(m) if !m.volatile))
        .filter(|o| !planned.contains(o))
        .collect();
    for load in candidates {
        let r = func.ops[load].results[0];
        let ty = *func.ty(r);
        let OpKind::Load(m) = func.ops[load].kind else {
            continue;
        };
        let regs = match func.layout_of(r) {
            Some(l) => {
                // A run of elements loaded once (`runs`) takes one register per thread.
                let reps = l.run_representatives(ty.shape.dims(), &m.runs);
                let n = reps.iter().enumerate().filter(|&(i, &r)| r == i).count();
                let bytes = n * ty.elem.bytes() as usize;
                bytes.div_ceil(4)
            }
            None if ty.shape.rank() == 0 => 1,
            None => continue,
        };
        if regs > PREFETCH_REGS || regs > budget {
            continue;
        }
        // A load that a dot reads is the ring's (pipeline_loops), not ours.
        let dot_reads = func.blocks[body].ops.iter().any(|&o| {
            matches!(
                func.ops[o].kind,
                OpKind::ConvertLayout | OpKind::Permute { .. }
            ) && func.ops[o].operands[0] == r
                && matches!(
                    func.layout_of(func.ops[o].results[0]),
                    Some(Layout::DotOperand { .. })
                )
        });
        if dot_reads {
            continue;
        }
        let operands = func.ops[load].operands.clone();
        let Some((addr_ops, carried)) = recomputable(func, body, &operands, None, false) else {
            continue;
        };
        let mut carried: Vec<usize> = carried.into_iter().collect();
        carried.sort();
        apply_prefetch(func, for_op, parent, load, &addr_ops, &carried);
        budget -= regs;
        moved += 1;
    }
    moved
}

fn apply_prefetch(
    func: &mut Function,
    for_op: Op,
    parent: Block,
    load: Op,
    addr_ops: &[Op],
    carried: &[usize],
) {
    let body = func.region_block(for_op, 0);
    let args = func.blocks[body].args.clone();
    let yield_op = *func.blocks[body].ops.last().expect("yield");
    let (lb, ub, step) = {
        let o = &func.ops[for_op].operands;
        (o[0], o[1], o[2])
    };
    let ivt = *func.ty(lb);
    let loc = func.ops[load].loc;
    let d = func.ops[load].clone();
    let rty = *func.ty(d.results[0]);
    // The load of the iteration `env` describes, masked off unless `valid`.
    let issue =
        |cur: &mut Cursor, func: &mut Function, env: &mut HashMap<Value, Value>, valid: Value| {
            cur.clone_ops(func, addr_ops, env, None);
            cur.clone_ops(func, &[load], env, Some(valid));
            env[&d.results[0]]
        };
    // Before the loop: the first iteration's load.
    let mut pre = Cursor::before(func, parent, for_op, loc);
    let valid0 = pre.push(
        func,
        OpKind::Compare(CmpPred::Lt, 0),
        vec![lb, ub],
        Some(Type::num(DType::I1)),
    );
    let mut env: HashMap<Value, Value> = HashMap::new();
    env.insert(args[0], lb);
    for k in 1..args.len() {
        env.insert(args[k], func.ops[for_op].operands[3 + k - 1]);
    }
    let first = issue(&mut pre, func, &mut env, valid0);
    // The loop carries it.
    let (carried_value, _) = func.add_carried(for_op, first, rty);
    func.replace_uses(d.results[0], carried_value);
    // End of the body, where the next iteration's carried values are the yield's: its load.
    // (Issued at the top of the body instead, with those values recomputed there, the rows
    // stayed live through the body's four dots: 64 bytes of spills in attention backward's
    // dK/dV loop, and 432-442 TFLOP/s against 447-450 from here.)
    let mut end = Cursor::before(func, body, yield_op, loc);
    let mut env: HashMap<Value, Value> = HashMap::new();
    for &k in carried {
        env.insert(args[k], func.ops[yield_op].operands[k - 1]);
    }
    let iv_next = end.push(
        func,
        OpKind::Binary(BinaryOp::Add),
        vec![args[0], step],
        Some(ivt),
    );
    let valid = end.push(
        func,
        OpKind::Compare(CmpPred::Lt, 0),
        vec![iv_next, ub],
        Some(Type::num(DType::I1)),
    );
    env.insert(args[0], iv_next);
    let ahead = issue(&mut end, func, &mut env, valid);
    func.ops[yield_op].operands.push(ahead);
    func.blocks[body].ops.retain(|&o| o != load);
}
