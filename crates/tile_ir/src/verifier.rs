//! Checks a kernel's invariants and reports every violation found, each located.
//!
//! Checked: operands are defined before use in an enclosing scope; operand counts and types
//! fit each op; regions end in `yield` with values matching the parent; once layouts are
//! assigned, elementwise ops agree on them and `expand_dims` reads a slice of its result's.

use crate::entities::{Block, Op, Value};
use crate::function::{Function, Loc};
use crate::layout::Layout;
use crate::ops::OpKind;
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
        Ok(())
    } else {
        Err(VerifyErrors(v.errors))
    }
}

impl Verifier<'_> {
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
            | OpKind::Bitcast => expect(1),
            OpKind::ConvertLayout => expect(1),
            OpKind::Binary(_) | OpKind::Compare(_) | OpKind::AddPtr => expect(2),
            OpKind::Fma | OpKind::Select => expect(3),
            OpKind::Load(m) => expect(1 + m.masked as usize + m.has_other as usize),
            OpKind::Store(m) => expect(2 + m.masked as usize),
            OpKind::For => n >= 3,
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
        let results = data.results.clone();
        let operands = data.operands.clone();
        match data.kind {
            OpKind::Binary(_) | OpKind::Compare(_)
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
            OpKind::For => {
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
            if !f.ty(v).is_scalar() && f.ty(v).layout.is_none() {
                self.err(op, format!("tile {v} has no layout"));
                return;
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
