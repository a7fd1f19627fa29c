//! Checks a kernel's invariants and reports every violation found, each located.
//!
//! Checked: operands are defined before use in an enclosing scope; operand counts and types
//! fit each op; regions end in `yield` with values matching the parent; once layouts are
//! assigned, elementwise ops agree on them and `expand_dims` reads a slice of its result's.

use crate::entities::{Block, Op, Value};
use crate::function::{Function, Loc};
use crate::layout::Layout;
use crate::ops::{MemAttrs, OpKind};
use crate::types::{DType, Elem};
use std::collections::HashSet;
use std::fmt;

/// One violation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyError {
    /// The offending op, if one.
    pub op: Option<Op>,
    /// Its source location.
    pub loc: Loc,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.op {
            Some(op) => write!(f, "line {}: {op}: {}", self.loc.line, self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// All violations found in one run of the verifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct VerifyErrors(pub Vec<VerifyError>);

impl fmt::Display for VerifyErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "the IR is invalid ({} errors):", self.0.len())?;
        for e in &self.0 {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

struct Verifier<'a> {
    func: &'a Function,
    errors: Vec<VerifyError>,
    layouts_assigned: bool,
}

/// Verifies `func`; `Ok` or every violation found.
pub fn verify(func: &Function) -> Result<(), VerifyErrors> {
    let layouts_assigned = !func.layouts.is_empty();
    let mut v = Verifier {
        func,
        errors: Vec::new(),
        layouts_assigned,
    };
    let mut scope: HashSet<Value> = func.blocks[func.entry].args.iter().copied().collect();
    v.block(func.entry, &mut scope, true);
    if v.errors.is_empty() {
        v.check_buffers();
    }
    if v.errors.is_empty() {
        Ok(())
    } else {
        Err(VerifyErrors(v.errors))
    }
}

impl Verifier<'_> {
    /// Every `async_copy` and `local_view` of one ring buffer agrees on its tile shape,
    /// element type and number of slots; views only read buffers something writes.
    fn check_buffers(&mut self) {
        let f = self.func;
        let mut seen: std::collections::HashMap<u8, (crate::Shape, Option<DType>, u8)> =
            std::collections::HashMap::new();
        let mut views = Vec::new();
        for op in f.ops_in_order() {
            let d = &f.ops[op];
            let (buf, desc) = match d.kind {
                OpKind::AsyncCopy(a) => {
                    let t = f.ty(d.operands[0]);
                    let Elem::Ptr(e) = t.elem else { continue };
                    (a.buf, (t.shape, Some(e), a.stages))
                }
                OpKind::LocalView { buf, stages, trans } => {
                    let t = f.ty(d.results[0]);
                    views.push((op, buf));
                    let shape = if trans {
                        let dims = t.shape.dims();
                        match dims {
                            [a, b] => crate::Shape::new(&[*b, *a]).unwrap_or(t.shape),
                            _ => t.shape,
                        }
                    } else {
                        t.shape
                    };
                    (buf, (shape, t.dtype(), stages))
                }
                OpKind::LocalLoad { buf, stages } => {
                    let t = f.ty(d.results[0]);
                    views.push((op, buf));
                    (buf, (t.shape, t.dtype(), stages))
                }
                _ => continue,
            };
            match seen.get(&buf) {
                Some(&prev) if prev != desc => {
                    self.err(
                        op,
                        format!("ring buffer {buf} is used with another shape, type or depth"),
                    );
                    return;
                }
                Some(_) => {}
                None => {
                    seen.insert(buf, desc);
                }
            }
        }
        let written: HashSet<u8> = f
            .ops_in_order()
            .into_iter()
            .filter_map(|o| match f.ops[o].kind {
                OpKind::AsyncCopy(a) => Some(a.buf),
                _ => None,
            })
            .collect();
        for (op, buf) in views {
            if !written.contains(&buf) {
                self.err(
                    op,
                    format!(
                        "{} reads ring buffer {buf}, which nothing writes",
                        f.ops[op].kind.name()
                    ),
                );
            }
        }
    }

    fn err(&mut self, op: Op, message: String) {
        self.errors.push(VerifyError {
            op: Some(op),
            loc: self.func.ops[op].loc,
            message,
        });
    }

    fn block(&mut self, b: Block, scope: &mut HashSet<Value>, is_entry: bool) {
        let ops = &self.func.blocks[b].ops;
        let mut added: Vec<Value> = Vec::new();
        for (i, &op) in ops.iter().enumerate() {
            let data = &self.func.ops[op];
            for &o in &data.operands {
                if !scope.contains(&o) {
                    self.err(op, format!("operand {o} is not defined before this op"));
                }
            }
            let is_last = i + 1 == ops.len();
            let term = matches!(data.kind, OpKind::Yield | OpKind::Return);
            if term && !is_last {
                self.err(op, "terminator in the middle of a block".into());
            }
            if is_last && !is_entry && !matches!(data.kind, OpKind::Yield) {
                self.err(op, "a region must end with yield".into());
            }
            if is_last && is_entry && !matches!(data.kind, OpKind::Return) {
                self.err(op, "the kernel must end with return".into());
            }
            self.op(op);
            for &r in &data.regions {
                let rb = self.func.regions[r].block;
                let args = self.func.blocks[rb].args.clone();
                for &a in &args {
                    scope.insert(a);
                }
                self.block(rb, scope, false);
                for a in args {
                    scope.remove(&a);
                }
            }
            for &r in &data.results {
                scope.insert(r);
                added.push(r);
            }
        }
        for v in added {
            scope.remove(&v);
        }
    }

    fn layout(&self, v: Value) -> Option<&Layout> {
        self.func.layout_of(v)
    }

    fn op(&mut self, op: Op) {
        let f = self.func;
        let data = &f.ops[op];
        let ty = |v: Value| *f.ty(v);
        let n = data.operands.len();
        let expect = |want: usize| n == want;
        let count_ok = match data.kind {
            OpKind::Constant(_)
            | OpKind::ProgramId(_)
            | OpKind::NumPrograms(_)
            | OpKind::Arange { .. } => expect(0),
            OpKind::Splat
            | OpKind::ExpandDims(_)
            | OpKind::Broadcast
            | OpKind::Unary(_)
            | OpKind::Cast
            | OpKind::Bitcast
            | OpKind::Hint { .. } => expect(1),
            OpKind::ConvertLayout => expect(1),
            OpKind::Binary(_) | OpKind::Compare(..) | OpKind::AddPtr | OpKind::Gather(_) => {
                expect(2)
            }
            OpKind::Fma | OpKind::Select | OpKind::Dot { .. } => expect(3),
            OpKind::AsyncCopy(a) => expect(2 + a.masked as usize),
            OpKind::AsyncCommit | OpKind::AsyncWait { .. } => expect(0),
            OpKind::LocalView { .. } | OpKind::LocalLoad { .. } => expect(1),
            OpKind::Load(m) => expect(1 + m.masked as usize + m.has_other as usize),
            OpKind::Store(m) => expect(2 + m.masked as usize),
            OpKind::For { .. } => n >= 3,
            OpKind::If => expect(1),
            OpKind::Yield => true,
            OpKind::Return => expect(0),
            OpKind::Reduce { .. } | OpKind::Scan { .. } => n >= 1 && data.results.len() == n,
            OpKind::Permute { .. } | OpKind::Reshape => expect(1),
            OpKind::Join => expect(2),
            OpKind::Split => expect(1) && data.results.len() == 2,
            OpKind::While => data.results.len() == n && data.regions.len() == 2,
            OpKind::Atomic(a) => expect(if a.op == crate::ops::AtomicOp::Cas {
                3
            } else {
                2 + a.masked as usize
            }),
            OpKind::Barrier => expect(0),
            OpKind::Print { prefix, .. } => (prefix as usize) < f.strings.len(),
            OpKind::InlineAsm {
                asm,
                constraints,
                pack,
                ..
            } => {
                (asm as usize) < f.strings.len()
                    && (constraints as usize) < f.strings.len()
                    && pack >= 1
                    && !data.results.is_empty()
            }
            OpKind::Assert { msg } => expect(1) && (msg as usize) < f.strings.len(),
        };
        if !count_ok {
            self.err(
                op,
                format!(
                    "{} takes a different number of operands than {n}",
                    data.kind.name()
                ),
            );
            return;
        }
        let regions = match data.kind {
            OpKind::For { .. } | OpKind::Reduce { .. } | OpKind::Scan { .. } => 1,
            OpKind::If | OpKind::While => 2,
            _ => 0,
        };
        if data.regions.len() != regions {
            self.err(
                op,
                format!(
                    "{} has {} regions, not {regions}",
                    data.kind.name(),
                    data.regions.len()
                ),
            );
            return;
        }
        let results = data.results.clone();
        let operands = data.operands.clone();
        if !matches!(data.kind, OpKind::Yield) {
            if let Some(msg) = type_rule(f, op) {
                self.err(op, msg);
                return;
            }
        }
        match data.kind {
            OpKind::Binary(_) | OpKind::Compare(..)
                if !ty(operands[0]).same_but_layout(&ty(operands[1])) =>
            {
                self.err(op, "operands differ in type or shape".into());
            }
            OpKind::AddPtr => {
                let (p, o) = (ty(operands[0]), ty(operands[1]));
                if !p.elem.is_ptr() || !o.dtype().is_some_and(|d| d.is_int()) || p.shape != o.shape
                {
                    self.err(
                        op,
                        "addptr needs a pointer and an integer offset of one shape".into(),
                    );
                }
            }
            OpKind::Select if ty(operands[0]).elem != Elem::Num(DType::I1) => {
                self.err(op, "select's condition must be i1".into());
            }
            OpKind::Load(m) if m.masked && ty(operands[1]).elem != Elem::Num(DType::I1) => {
                self.err(op, "a mask must be i1".into());
            }
            OpKind::Load(m) if (m.prefix_mask || m.whole_granules) && !m.masked => {
                self.err(
                    op,
                    "whole_granules and prefix_mask describe a mask: the load has none".into(),
                );
            }
            OpKind::Load(m) if m.prefix_mask && !m.whole_granules => {
                // A vector under a prefix mask is read whole: only rows of whole granules allow it.
                self.err(op, "prefix_mask needs whole_granules".into());
            }
            OpKind::Load(m) if !MemAttrs::cache_hints_fit(true, m.cache, m.evict) => {
                self.err(op, "a load's cache operator is ca, cg, cs, lu or cv".into());
            }
            OpKind::Store(m) if !MemAttrs::cache_hints_fit(false, m.cache, m.evict) => {
                self.err(op, "a store's cache operator is wb, cg, cs or wt".into());
            }
            OpKind::AsyncCopy(a) if a.prefix_mask && !a.masked => {
                self.err(op, "prefix_mask describes a mask: the copy has none".into());
            }
            OpKind::For { .. } => {
                let body = f.region_block(op, 0);
                let args = &f.blocks[body].args;
                if args.len() != n - 2 || results.len() != n - 3 {
                    self.err(
                        op,
                        "for: iteration arguments, inits and results disagree in number".into(),
                    );
                } else {
                    self.check_yield(op, body, &results);
                }
            }
            OpKind::If => {
                for i in 0..2 {
                    let b = f.region_block(op, i);
                    self.check_yield(op, b, &results);
                }
            }
            OpKind::Reduce { axis } => {
                let body = f.region_block(op, 0);
                let t0 = ty(operands[0]);
                if f.blocks[body].args.len() != 2 * n {
                    self.err(
                        op,
                        "reduce: the combine region needs two scalars per operand".into(),
                    );
                }
                for (&o, &r) in operands.iter().zip(&results) {
                    let (to, tr) = (ty(o), ty(r));
                    if to.shape != t0.shape
                        || (axis as usize) >= to.shape.rank()
                        || tr.shape != to.shape.remove(axis as usize)
                    {
                        self.err(
                            op,
                            "reduce: operand and result shapes do not fit the axis".into(),
                        );
                    }
                }
                if let Some(&last) = f.blocks[body].ops.last() {
                    if f.ops[last].operands.len() != n {
                        self.err(
                            op,
                            "reduce: the combine region must yield one value per operand".into(),
                        );
                    }
                }
            }
            OpKind::Scan { .. } => {
                for (&o, &r) in operands.iter().zip(&results) {
                    if !ty(o).same_but_layout(&ty(r)) {
                        self.err(op, "scan: results must have the operands' types".into());
                    }
                }
            }
            OpKind::While => {
                let before = f.region_block(op, 0);
                if let Some(&last) = f.blocks[before].ops.last() {
                    let ys = &f.ops[last].operands;
                    if ys.len() != n + 1 || f.ty(ys[0]).elem != Elem::Num(DType::I1) {
                        self.err(
                            op,
                            "while: the condition region must yield an i1 and the loop state"
                                .into(),
                        );
                    } else if let Some(&y) = ys[1..]
                        .iter()
                        .zip(&results)
                        .find_map(|(y, &r)| (f.ty(*y) != f.ty(r)).then_some(y))
                    {
                        self.err(
                            op,
                            format!(
                                "while: the condition yields {y}, not of the loop state's type"
                            ),
                        );
                    }
                }
                let after = f.region_block(op, 1);
                self.check_yield(op, after, &results);
            }
            _ => {}
        }
        if self.layouts_assigned {
            self.check_layouts(op, &operands, &results);
        }
    }

    fn check_yield(&mut self, op: Op, b: Block, results: &[Value]) {
        let f = self.func;
        let Some(&last) = f.blocks[b].ops.last() else {
            self.err(op, "empty region".into());
            return;
        };
        let ys = &f.ops[last].operands;
        if ys.len() != results.len() {
            self.err(
                op,
                format!(
                    "region yields {} values for {} results",
                    ys.len(),
                    results.len()
                ),
            );
            return;
        }
        for (&y, &r) in ys.iter().zip(results) {
            if f.ty(y) != f.ty(r) {
                self.err(
                    op,
                    format!("yielded {y} does not match result {r} in type or layout"),
                );
            }
        }
    }

    fn check_layouts(&mut self, op: Op, operands: &[Value], results: &[Value]) {
        let f = self.func;
        let kind = f.ops[op].kind;
        for &v in operands.iter().chain(results) {
            let t = f.ty(v);
            if !t.is_scalar() && t.layout.is_none() {
                self.err(op, format!("tile {v} has no layout"));
                return;
            }
            if let Some(l) = t.layout {
                if !f.layouts.is_valid(l) {
                    self.err(op, format!("{v} refers to an unknown layout"));
                    return;
                }
                let layout = &f.layouts[l];
                if layout.rank() != t.shape.rank() || layout.num_warps() != f.num_warps {
                    self.err(
                        op,
                        format!("{v}'s layout does not fit its rank or the kernel's warps"),
                    );
                    return;
                }
            }
        }
        if kind.is_elementwise()
            || matches!(
                kind,
                OpKind::Load(_)
                    | OpKind::Store(_)
                    | OpKind::Broadcast
                    | OpKind::Atomic(_)
                    | OpKind::Scan { .. }
            )
        {
            let first = results.first().or(operands.first()).copied();
            if let Some(first) = first {
                let want = f.ty(first).layout;
                for &v in operands.iter().chain(results) {
                    let t = f.ty(v);
                    if !t.is_scalar() && t.layout != want {
                        self.err(op, format!("{v} has another layout than {first}"));
                    }
                }
            }
        }
        if let OpKind::Reduce { axis } = kind {
            for (&o, &r) in operands.iter().zip(results) {
                if f.ty(r).is_scalar() {
                    continue;
                }
                let (src, dst) = (self.layout(o), self.layout(r));
                let ok = matches!(dst, Some(Layout::Slice { dim, parent }) if *dim == axis as u32 && Some(parent.as_ref()) == src);
                if !ok {
                    self.err(
                        op,
                        "reduce: the result's layout must be a slice of the operand's".into(),
                    );
                }
            }
        }
        if let OpKind::LocalView { .. } = kind {
            if !matches!(self.layout(results[0]), Some(Layout::DotOperand { .. })) {
                self.err(op, "local_view gives a #dot_op tile".into());
            }
        }
        if let OpKind::LocalLoad { .. } = kind {
            if self.layout(results[0]).is_none_or(Layout::is_warpgroup_b) {
                self.err(op, "local_load gives a register tile with a layout".into());
            }
        }
        if let OpKind::AsyncCopy(a) = kind {
            if a.masked && self.layout(operands[0]) != self.layout(operands[2]) {
                self.err(
                    op,
                    "async_copy: the mask has another layout than the pointers".into(),
                );
            }
        }
        if let OpKind::Dot { .. } = kind {
            let (la, lb, lc, lr) = (
                self.layout(operands[0]),
                self.layout(operands[1]),
                self.layout(operands[2]),
                self.layout(results[0]),
            );
            let fits = |l: Option<&Layout>, idx: u32| {
                matches!(l, Some(Layout::DotOperand { op_idx, parent, .. })
                    if *op_idx == idx && Some(parent.as_ref()) == lc)
            };
            let parent_ok = matches!(lc, Some(Layout::Mma(_) | Layout::Blocked(_)));
            if lc != lr || !parent_ok || !fits(la, 0) || !fits(lb, 1) {
                self.err(
                    op,
                    "dot: operands need #dot_op layouts of the accumulator's #mma or #blocked layout"
                        .into(),
                );
            }
        }
        if let OpKind::ExpandDims(axis) = kind {
            let (src, dst) = (self.layout(operands[0]), self.layout(results[0]));
            let ok = matches!(src, Some(Layout::Slice { dim, parent }) if *dim == axis as u32 && Some(parent.as_ref()) == dst);
            if !ok {
                self.err(
                    op,
                    "expand_dims must read a slice of its result's layout".into(),
                );
            }
        }
    }
}

/// The typing rule of each op: operand and result types must fit together exactly as the
/// builder makes them (codegen relies on it). Returns a message for the first violation.
pub(crate) fn type_rule(f: &Function, op: Op) -> Option<String> {
    use crate::ops::{AtomicOp, OpKind as K};
    use crate::types::{DType as D, Elem as E, Type};
    let data = &f.ops[op];
    let ops: Vec<Type> = data.operands.iter().map(|&v| *f.ty(v)).collect();
    let res: Vec<Type> = data.results.iter().map(|&v| *f.ty(v)).collect();
    let same = |a: &Type, b: &Type| a.same_but_layout(b);
    let num = |t: &Type| t.dtype();
    let i1 = E::Num(D::I1);
    let tile_of = |t: &Type, elem: E| Type::tile(elem, t.shape);
    let bad = |m: &str| Some(m.to_string());
    let n_res = match data.kind {
        K::Store(_)
        | K::Yield
        | K::Return
        | K::If
        | K::Barrier
        | K::Print { .. }
        | K::Assert { .. } => None,
        K::AsyncCopy(_) | K::AsyncCommit | K::AsyncWait { .. } => Some(0),
        K::For { .. } | K::While | K::Reduce { .. } | K::Scan { .. } | K::InlineAsm { .. } => None,
        K::Split => Some(2),
        _ => Some(1),
    };
    if let Some(n) = n_res {
        if res.len() != n {
            return bad("wrong number of results");
        }
    }
    for t in ops.iter().chain(&res) {
        if t.shape
            .dims()
            .iter()
            .any(|&d| d == 0 || !d.is_power_of_two() || d > 1 << 20)
        {
            return bad("tile dimensions must be powers of two");
        }
    }
    match data.kind {
        K::Constant(_) => (!res[0].elem.is_ptr())
            .then_some(())
            .map_or(bad("pointer constant"), |_| None),
        K::ProgramId(a) | K::NumPrograms(a) => (a > 2 || res[0] != Type::num(D::I32))
            .then(|| "program_id/num_programs give an i32 for axis 0..2".into()),
        K::Arange { start, end } => {
            let n = end
                .checked_sub(start)
                .filter(|&n| n > 0 && (n as u32).is_power_of_two());
            match n {
                Some(n)
                    if same(
                        &res[0],
                        &Type::tile(E::Num(D::I32), crate::Shape::new(&[n as u32])?),
                    ) =>
                {
                    None
                }
                _ => bad("arange gives <end-start x i32> with a power-of-two length"),
            }
        }
        K::Splat => (!ops[0].is_scalar() || res[0].is_scalar() || res[0].elem != ops[0].elem)
            .then(|| "splat turns a scalar into a tile of its type".into()),
        K::Gather(axis) => {
            let ok = res[0].elem == ops[0].elem
                && res[0].shape == ops[1].shape
                && ops[1].dtype().is_some_and(|d| d.is_int())
                && ops[0].shape.gathers_with(&ops[1].shape, axis);
            (!ok).then(|| {
                "gather takes a tile and integer indices of its rank, alike but along the axis, \
                 and gives the indices' shape"
                    .into()
            })
        }
        K::ExpandDims(axis) => match ops[0].shape.insert(axis as usize, 1) {
            Some(s) if res[0].shape == s && res[0].elem == ops[0].elem => None,
            _ => bad("expand_dims inserts a size-1 dimension"),
        },
        K::Broadcast => {
            let ok = ops[0].elem == res[0].elem
                && ops[0].shape.rank() == res[0].shape.rank()
                && ops[0]
                    .shape
                    .dims()
                    .iter()
                    .zip(res[0].shape.dims())
                    .all(|(&a, &b)| a == b || a == 1);
            (!ok).then(|| "broadcast repeats size-1 dimensions of one element type".into())
        }
        _ if matches!(data.kind, K::Binary(_) | K::Unary(_) | K::Fma | K::Compare(..) | K::Atomic(_))
            && ops.iter().any(|t| t.dtype().is_some_and(|d| d.is_fp8())
                || matches!(t.elem, E::Ptr(d) if d.is_fp8() && matches!(data.kind, K::Atomic(_)))) =>
        {
            bad("fp8 values are only loaded, stored, converted and selected: cast them to fp16 first")
        }
        K::Binary(b) => {
            let ok = same(&ops[0], &ops[1])
                && same(&ops[0], &res[0])
                && num(&ops[0]).is_some_and(|d| !(b.int_only() && d.is_float()));
            (!ok).then(|| "binary ops take and give one numeric type".into())
        }
        K::Hint { .. } => (!same(&ops[0], &res[0])).then(|| "hint gives its operand's type".into()),
        K::InlineAsm { .. } => {
            let shape = res[0].shape;
            let ok = ops.iter().chain(&res).all(|t| t.shape == shape && t.dtype().is_some());
            (!ok).then(|| "inline_asm: numeric operands and results of one shape".into())
        }
        K::Compare(..) => (!(same(&ops[0], &ops[1]) && same(&res[0], &tile_of(&ops[0], i1))))
            .then(|| "cmp compares one type and gives i1".into()),
        K::Unary(u) => {
            let ok = same(&ops[0], &res[0])
                && num(&ops[0]).is_some_and(|d| !(u.float_only() && d.is_int()));
            (!ok).then(|| "unary ops keep their numeric type".into())
        }
        K::Fma => {
            let ok = same(&ops[0], &ops[1])
                && same(&ops[0], &ops[2])
                && same(&ops[0], &res[0])
                && num(&ops[0]).is_some_and(|d| d.is_float());
            (!ok).then(|| "fma takes and gives one float type".into())
        }
        K::Select => {
            let c = ops[0];
            let ok = c.elem == i1
                && (c.is_scalar() || c.shape == ops[1].shape)
                && same(&ops[1], &ops[2])
                && same(&ops[1], &res[0]);
            (!ok).then(|| "select takes an i1 condition and two values of the result's type".into())
        }
        K::Cast => {
            let ok = ops[0].shape == res[0].shape && ops[0].elem.is_ptr() == res[0].elem.is_ptr();
            (!ok).then(|| "cast keeps the shape; pointers cast to pointers only".into())
        }
        K::Bitcast => {
            let ok = ops[0].shape == res[0].shape
                && match (ops[0].elem, res[0].elem) {
                    (E::Num(a), E::Num(b)) => a.bits() == b.bits(),
                    (E::Ptr(_), E::Ptr(_)) => true,
                    (E::Ptr(_), E::Num(d)) | (E::Num(d), E::Ptr(_)) => {
                        d.bits() == 64 && d.is_int()
                    }
                };
            (!ok).then(|| "bitcast keeps the shape and the width (pointers: 64-bit integers)".into())
        }
        K::AddPtr => {
            let ok = ops[0].elem.is_ptr()
                && num(&ops[1]).is_some_and(|d| d.is_int())
                && ops[0].shape == ops[1].shape
                && same(&ops[0], &res[0]);
            (!ok).then(|| "addptr adds an integer offset to a pointer of one shape".into())
        }
        K::Load(m) => {
            let E::Ptr(d) = ops[0].elem else {
                return bad("load needs a pointer");
            };
            let value = tile_of(&ops[0], E::Num(d));
            let ok = same(&res[0], &value)
                && (!m.masked || same(&ops[1], &tile_of(&ops[0], i1)))
                && (!m.has_other || (m.masked && same(&ops[2], &value)));
            let dims = ops[0].shape.dims();
            let runs_ok = m.runs.iter().enumerate().all(|(d, &r)| {
                r <= 1 || (r.is_power_of_two() && dims.get(d).is_some_and(|&n| n.is_multiple_of(u32::from(r))))
            });
            if !runs_ok {
                return bad("load runs must be powers of two dividing the pointer's dimensions");
            }
            (!ok).then(|| {
                "load: mask i1 and other of the loaded type, in the pointer's shape".into()
            })
        }
        K::Store(m) => {
            let E::Ptr(d) = ops[0].elem else {
                return bad("store needs a pointer");
            };
            let ok = same(&ops[1], &tile_of(&ops[0], E::Num(d)))
                && (!m.masked || same(&ops[2], &tile_of(&ops[0], i1)));
            (!ok).then(|| {
                "store: a value of the pointee type and an i1 mask, in the pointer's shape".into()
            })
        }
        K::Atomic(a) => {
            let E::Ptr(d) = ops[0].elem else {
                return bad("atomic needs a pointer");
            };
            let value = tile_of(&ops[0], E::Num(d));
            let vals = if a.op == AtomicOp::Cas {
                &ops[1..3]
            } else {
                &ops[1..2]
            };
            let ok = vals.iter().all(|t| same(t, &value))
                && same(&res[0], &value)
                && (!a.masked || same(ops.last()?, &tile_of(&ops[0], i1)));
            (!ok).then(|| "atomic: values of the pointee type in the pointer's shape".into())
        }
        K::For { .. } => {
            let body = f.region_block(op, 0);
            let args: Vec<Type> = f.blocks[body].args.iter().map(|&v| *f.ty(v)).collect();
            let ok = ops[0].is_scalar()
                && num(&ops[0]).is_some_and(|d| d.is_int() && d != D::I1)
                && ops[1] == ops[0]
                && ops[2] == ops[0]
                && args.first() == Some(&ops[0])
                && args.len() == ops.len() - 2
                && ops[3..]
                    .iter()
                    .zip(&args[1..])
                    .zip(&res)
                    .all(|((i, a), r)| i == a && a == r);
            (!ok).then(|| "for: integer bounds, and inits, iteration arguments and results of one type each".into())
        }
        K::If => (ops[0] != Type::num(D::I1)).then(|| "if needs a scalar i1".into()),
        K::While => {
            let b0: Vec<Type> = f.blocks[f.region_block(op, 0)]
                .args
                .iter()
                .map(|&v| *f.ty(v))
                .collect();
            let b1: Vec<Type> = f.blocks[f.region_block(op, 1)]
                .args
                .iter()
                .map(|&v| *f.ty(v))
                .collect();
            let ok = b0 == ops && b1 == ops && res == ops;
            (!ok).then(|| "while: inits, region arguments and results of one type each".into())
        }
        K::Reduce { axis } | K::Scan { axis, .. }
            if ops.iter().any(|t| axis as usize >= t.shape.rank()) =>
        {
            bad("reduce/scan: the axis is out of range")
        }
        K::Scan { .. } if res.iter().zip(&ops).any(|(r, o)| r.shape != o.shape) => {
            bad("scan: results have the operands' shapes")
        }
        K::Reduce { .. } | K::Scan { .. } => {
            let body = f.region_block(op, 0);
            let args: Vec<Type> = f.blocks[body].args.iter().map(|&v| *f.ty(v)).collect();
            let n = ops.len();
            let ok = args.len() == 2 * n
                && (0..n).all(|i| {
                    args[i] == Type::scalar(ops[i].elem) && args[n + i] == Type::scalar(ops[i].elem)
                })
                && f.blocks[body]
                    .ops
                    .last()
                    .map(|&y| {
                        f.ops[y]
                            .operands
                            .iter()
                            .zip(&args[..n])
                            .all(|(&v, t)| f.ty(v) == t)
                    })
                    .unwrap_or(false)
                && res.iter().zip(&ops).all(|(r, o)| r.elem == o.elem);
            (!ok).then(|| "reduce/scan: the combine region takes and yields scalars of the operands' types".into())
        }
        K::Permute { perm } => {
            let rank = ops[0].shape.rank();
            let mut seen = [false; crate::types::MAX_RANK];
            let valid = perm[..rank]
                .iter()
                .all(|&p| (p as usize) < rank && !std::mem::replace(&mut seen[p as usize], true));
            let ok = valid
                && res[0].elem == ops[0].elem
                && res[0].shape.rank() == rank
                && (0..rank)
                    .all(|i| res[0].shape.dims()[i] == ops[0].shape.dims()[perm[i] as usize]);
            (!ok).then(|| "permute: a permutation of the operand's dimensions".into())
        }
        K::Reshape => {
            let ok = res[0].elem == ops[0].elem
                && res[0].shape.numel() == ops[0].shape.numel()
                && !ops[0].is_scalar()
                && !res[0].is_scalar();
            (!ok).then(|| "reshape keeps the element type and count".into())
        }
        K::Join => {
            let ok = same(&ops[0], &ops[1])
                && ops[0]
                    .shape
                    .insert(ops[0].shape.rank(), 2)
                    .is_some_and(|s| s == res[0].shape)
                && res[0].elem == ops[0].elem;
            (!ok).then(|| "join stacks two tiles of one type along a new last dimension".into())
        }
        K::Split => {
            let r = ops[0].shape.rank();
            let ok = r >= 1
                && ops[0].shape.dims()[r - 1] == 2
                && res
                    .iter()
                    .all(|t| t.elem == ops[0].elem && t.shape == ops[0].shape.remove(r - 1));
            (!ok).then(|| "split halves a last dimension of size 2".into())
        }
        K::ConvertLayout => {
            (!same(&ops[0], &res[0])).then(|| "convert_layout keeps the type".into())
        }
        K::Assert { .. } => (ops[0].elem != i1).then(|| "assert needs an i1".into()),
        K::Dot { precision } => dot_rule(&ops[0], &ops[1], &ops[2], &res[0], precision),
        K::AsyncCopy(a) => {
            let p = ops[0];
            let ok = p.elem.is_ptr()
                && p.shape.rank() == 2
                && ops[1] == Type::num(D::I32)
                && (!a.masked || ops[2] == tile_of(&p, i1) || same(&ops[2], &tile_of(&p, i1)))
                && a.stages >= 1
                && a.vector >= 1
                && a.vector.is_power_of_two();
            (!ok).then(|| {
                "async_copy takes a 2-D pointer tile, an i32 slot and an optional i1 mask".into()
            })
        }
        K::AsyncCommit | K::AsyncWait { .. } => None,
        K::LocalView { stages, .. } | K::LocalLoad { stages, .. } => {
            let ok = ops[0] == Type::num(D::I32)
                && res[0].shape.rank() == 2
                && !res[0].elem.is_ptr()
                && stages >= 1;
            (!ok).then(|| {
                format!(
                    "{} takes an i32 slot and gives a 2-D numeric tile",
                    data.kind.name()
                )
            })
        }
        K::Yield | K::Return | K::Barrier | K::Print { .. } => None,
    }
}

/// `dot`: `a [M, K] @ b [K, N] + acc [M, N]` with every dimension at least 16, operands of
/// one type and an accumulator Triton allows for it.
pub(crate) fn dot_rule(
    a: &crate::Type,
    b: &crate::Type,
    acc: &crate::Type,
    res: &crate::Type,
    precision: crate::DotPrecision,
) -> Option<String> {
    use crate::types::DType as D;
    let (da, db, dc) = (a.dtype(), b.dtype(), acc.dtype());
    let (sa, sb, sc) = (a.shape.dims(), b.shape.dims(), acc.shape.dims());
    if sa.len() != 2 || sb.len() != 2 || sc.len() != 2 {
        return Some("dot takes 2-D tiles".into());
    }
    if sa[1] != sb[0] || sc != [sa[0], sb[1]] {
        return Some("dot needs a [M, K], b [K, N] and acc [M, N]".into());
    }
    if sa.iter().chain(sb).any(|&d| d < 16) {
        return Some("every dot dimension must be at least 16".into());
    }
    if !acc.same_but_layout(res) {
        return Some("dot gives its accumulator's type".into());
    }
    let (Some(da), Some(db), Some(dc)) = (da, db, dc) else {
        return Some("dot takes numeric tiles".into());
    };
    // fp8 operands may mix E4M3 and E5M2 (Hopper's warpgroup MMA takes each kind).
    if da != db && !(da.is_fp8() && db.is_fp8()) {
        return Some("dot operands must have one element type".into());
    }
    let ok = match da {
        D::F8E4M3 | D::F8E5M2 => dc == D::F32,
        D::F16 => matches!(dc, D::F32 | D::F16),
        D::BF16 => dc == D::F32,
        D::F32 => dc == D::F32,
        D::F64 => dc == D::F64,
        D::I8 => dc == D::I32,
        _ => false,
    };
    if !ok {
        return Some(format!("dot of {da} operands cannot accumulate in {dc}"));
    }
    if precision == crate::DotPrecision::Tf32x3 && da != D::F32 {
        return Some("tf32x3 applies to f32 operands only".into());
    }
    None
}
