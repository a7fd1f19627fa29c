//! Building a kernel op by op, with result types computed and operands checked.

use crate::entities::{Block, Op, Value};
use crate::function::{Function, Loc};
use crate::ops::{
    AtomicAttrs, AtomicOp, BinaryOp, CmpPred, Const, DotPrecision, MemAttrs, OpKind, UnaryOp,
};
use crate::types::{DType, Elem, Shape, Type};

/// The access [`Builder::set_cache_hints`] annotates.
#[derive(Copy, Clone, Debug)]
pub enum CacheTarget {
    /// A load, named by its result.
    Load(Value),
    /// A store.
    Store(Op),
}

/// Why an op could not be built. Each names the op and what was wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BuildError {
    /// An operand's type does not fit the op.
    #[error("{op}: {message}")]
    OperandType {
        /// The op being built.
        op: &'static str,
        /// What was expected and found.
        message: String,
    },
    /// Operands' shapes differ where they must agree.
    #[error("{op}: shapes {lhs} and {rhs} differ")]
    ShapeMismatch {
        /// The op being built.
        op: &'static str,
        /// First shape (boxed: keeps every builder `Result` small).
        lhs: Box<Shape>,
        /// Second shape.
        rhs: Box<Shape>,
    },
    /// `arange` with an empty, negative or non-power-of-two range.
    #[error("arange({start}, {end}): the range's length must be a power of two and > 0")]
    BadRange {
        /// First value.
        start: i32,
        /// One past the last.
        end: i32,
    },
    /// A shape that tiles cannot have.
    #[error("{op}: bad shape or axis ({message})")]
    BadShape {
        /// The op being built.
        op: &'static str,
        /// What was wrong.
        message: String,
    },
    /// A structural mistake: ending a region that was never opened, an unknown value, ...
    #[error("builder misuse: {0}")]
    Misuse(&'static str),
}

type R<T> = Result<T, BuildError>;

/// Builds a [`Function`], appending ops at an insertion point that moves into and out of
/// the regions of `for` and `if` ops.
pub struct Builder {
    /// The function being built.
    pub func: Function,
    stack: Vec<Block>,
    /// Location given to the next ops.
    pub loc: Loc,
}

/// A `for` op under construction: its induction variable and iteration arguments.
#[derive(Debug, Clone)]
pub struct ForHandle {
    /// The `for` op.
    pub op: Op,
    /// The induction variable.
    pub iv: Value,
    /// The iteration arguments, one per init.
    pub iter_args: Vec<Value>,
}

fn is_pow2(n: u32) -> bool {
    n != 0 && n & (n - 1) == 0
}

impl Builder {
    /// A builder for an empty kernel named `name`.
    pub fn new(name: &str, num_warps: u32) -> Builder {
        let func = Function::new(name, num_warps);
        let entry = func.entry;
        Builder {
            func,
            stack: vec![entry],
            loc: Loc::default(),
        }
    }

    /// Finishes the kernel (appending `return`) and hands it over.
    pub fn finish(mut self) -> Function {
        let entry = self.func.entry;
        let ret = self.func.create_op(OpKind::Return, vec![], &[], self.loc);
        self.func.blocks[entry].ops.push(ret);
        self.func
    }

    fn block(&self) -> Block {
        *self.stack.last().expect("the entry block is never popped")
    }

    fn check(&self, v: Value) -> R<Type> {
        if self.func.values.is_valid(v) {
            Ok(*self.func.ty(v))
        } else {
            Err(BuildError::Misuse("unknown value"))
        }
    }

    /// Appends an op with results of the given types at the insertion point.
    pub fn push(&mut self, kind: OpKind, operands: Vec<Value>, result_types: &[Type]) -> Op {
        let op = self.func.create_op(kind, operands, result_types, self.loc);
        let b = self.block();
        self.func.blocks[b].ops.push(op);
        op
    }

    fn push1(&mut self, kind: OpKind, operands: Vec<Value>, ty: Type) -> Value {
        let op = self.push(kind, operands, &[ty]);
        self.func.result(op, 0)
    }

    /// Adds a kernel parameter.
    pub fn param(&mut self, name: &str, elem: Elem, divisibility: u32) -> Value {
        self.func.add_param(name, Type::scalar(elem), divisibility)
    }

    /// A constant of `ty` (a scalar, or a tile filled with it).
    pub fn constant(&mut self, c: Const, ty: Type) -> R<Value> {
        let Elem::Num(d) = ty.elem else {
            return Err(BuildError::OperandType {
                op: "constant",
                message: "pointer constants are not allowed".into(),
            });
        };
        let c = match (c, d.is_float()) {
            (Const::Int(i), true) => Const::Float(i as f64),
            (Const::Float(f), false) => Const::Int(f as i64),
            (c, _) => c,
        };
        Ok(self.push1(OpKind::Constant(c), vec![], ty))
    }

    /// `program_id(axis)`.
    pub fn program_id(&mut self, axis: u8) -> R<Value> {
        if axis > 2 {
            return Err(BuildError::BadShape {
                op: "program_id",
                message: format!("axis {axis} is not 0, 1 or 2"),
            });
        }
        Ok(self.push1(OpKind::ProgramId(axis), vec![], Type::num(DType::I32)))
    }

    /// `num_programs(axis)`.
    pub fn num_programs(&mut self, axis: u8) -> R<Value> {
        if axis > 2 {
            return Err(BuildError::BadShape {
                op: "num_programs",
                message: format!("axis {axis} is not 0, 1 or 2"),
            });
        }
        Ok(self.push1(OpKind::NumPrograms(axis), vec![], Type::num(DType::I32)))
    }

    /// `arange(start, end)`.
    pub fn arange(&mut self, start: i32, end: i32) -> R<Value> {
        let n = end
            .checked_sub(start)
            .filter(|&n| n > 0 && is_pow2(n as u32));
        let Some(n) = n else {
            return Err(BuildError::BadRange { start, end });
        };
        let shape = Shape::new(&[n as u32]).expect("rank 1");
        Ok(self.push1(
            OpKind::Arange { start, end },
            vec![],
            Type::tile(Elem::Num(DType::I32), shape),
        ))
    }

    /// A scalar copied into a tile of `shape`.
    pub fn splat(&mut self, v: Value, shape: Shape) -> R<Value> {
        let t = self.check(v)?;
        if !t.is_scalar() {
            return Err(BuildError::OperandType {
                op: "splat",
                message: "operand must be a scalar".into(),
            });
        }
        if shape.dims().iter().any(|&d| !is_pow2(d)) {
            return Err(BuildError::BadShape {
                op: "splat",
                message: format!("{shape} has a dimension that is not a power of two"),
            });
        }
        Ok(self.push1(OpKind::Splat, vec![v], Type::tile(t.elem, shape)))
    }

    /// Inserts a size-1 dimension at `axis`.
    pub fn expand_dims(&mut self, v: Value, axis: u8) -> R<Value> {
        let t = self.check(v)?;
        let shape = t
            .shape
            .insert(axis as usize, 1)
            .ok_or_else(|| BuildError::BadShape {
                op: "expand_dims",
                message: format!("axis {axis} for shape [{}]", t.shape),
            })?;
        Ok(self.push1(OpKind::ExpandDims(axis), vec![v], t.with_shape(shape)))
    }

    /// `src` gathered along `axis` at `index` (Triton's `gather`): the result has the shape of
    /// `index`, whose other dimensions must equal `src`'s.
    pub fn gather(&mut self, src: Value, index: Value, axis: u8) -> R<Value> {
        let ts = self.check(src)?;
        let ti = self.check(index)?;
        let fits = ts.shape.gathers_with(&ti.shape, axis) && ti.dtype().is_some_and(|d| d.is_int());
        if !fits {
            return Err(BuildError::BadShape {
                op: "gather",
                message: format!(
                    "src [{}] and integer index [{}] along axis {axis}: the index needs src's rank and \
                     its other dimensions",
                    ts.shape, ti.shape
                ),
            });
        }
        Ok(self.push1(
            OpKind::Gather(axis),
            vec![src, index],
            ts.with_shape(ti.shape),
        ))
    }

    /// Repeats size-1 dimensions up to `shape`.
    pub fn broadcast(&mut self, v: Value, shape: Shape) -> R<Value> {
        let t = self.check(v)?;
        if t.shape == shape {
            return Ok(v);
        }
        if t.shape.is_scalar() {
            return self.splat(v, shape);
        }
        let ok = t.shape.rank() == shape.rank()
            && t.shape
                .dims()
                .iter()
                .zip(shape.dims())
                .all(|(&a, &b)| a == b || a == 1);
        if !ok {
            return Err(BuildError::ShapeMismatch {
                op: "broadcast",
                lhs: Box::new(t.shape),
                rhs: Box::new(shape),
            });
        }
        Ok(self.push1(OpKind::Broadcast, vec![v], t.with_shape(shape)))
    }

    fn same_type(&self, op: &'static str, a: Value, b: Value) -> R<Type> {
        let (ta, tb) = (self.check(a)?, self.check(b)?);
        if ta.shape != tb.shape {
            return Err(BuildError::ShapeMismatch {
                op,
                lhs: Box::new(ta.shape),
                rhs: Box::new(tb.shape),
            });
        }
        if ta.elem != tb.elem {
            return Err(BuildError::OperandType {
                op,
                message: format!("operand types {} and {} differ", ta.elem, tb.elem),
            });
        }
        Ok(ta)
    }

    /// An elementwise binary op on operands of one type.
    pub fn binary(&mut self, op: BinaryOp, a: Value, b: Value) -> R<Value> {
        let t = self.same_type(op.name(), a, b)?;
        let Some(d) = t.dtype() else {
            return Err(BuildError::OperandType {
                op: op.name(),
                message: "pointer operands".into(),
            });
        };
        if op.int_only() && d.is_float() {
            return Err(BuildError::OperandType {
                op: op.name(),
                message: format!("needs integers, got {d}"),
            });
        }
        Ok(self.push1(OpKind::Binary(op), vec![a, b], t))
    }

    /// An elementwise comparison giving `i1`.
    pub fn compare(&mut self, pred: CmpPred, a: Value, b: Value) -> R<Value> {
        let t = self.same_type("cmp", a, b)?;
        Ok(self.push1(
            OpKind::Compare(pred, 0),
            vec![a, b],
            t.with_elem(Elem::Num(DType::I1)),
        ))
    }

    /// An elementwise unary op.
    pub fn unary(&mut self, op: UnaryOp, a: Value) -> R<Value> {
        let t = self.check(a)?;
        match t.dtype() {
            None => {
                return Err(BuildError::OperandType {
                    op: op.name(),
                    message: "pointer operand".into(),
                })
            }
            Some(d) if op.float_only() && !d.is_float() => {
                return Err(BuildError::OperandType {
                    op: op.name(),
                    message: format!("needs a float, got {d}"),
                })
            }
            _ => {}
        }
        Ok(self.push1(OpKind::Unary(op), vec![a], t))
    }

    /// `a * b + c`.
    pub fn fma(&mut self, a: Value, b: Value, c: Value) -> R<Value> {
        let t = self.same_type("fma", a, b)?;
        self.same_type("fma", a, c)?;
        if !t.dtype().is_some_and(|d| d.is_float()) {
            return Err(BuildError::OperandType {
                op: "fma",
                message: "needs floats".into(),
            });
        }
        Ok(self.push1(OpKind::Fma, vec![a, b, c], t))
    }

    /// `a @ b + acc` (see [`OpKind::Dot`]); the result has `acc`'s type.
    pub fn dot(&mut self, a: Value, b: Value, acc: Value, precision: DotPrecision) -> R<Value> {
        let (ta, tb, tc) = (self.check(a)?, self.check(b)?, self.check(acc)?);
        if let Some(message) = crate::verifier::dot_rule(&ta, &tb, &tc, &tc, precision) {
            return Err(BuildError::OperandType { op: "dot", message });
        }
        Ok(self.push1(OpKind::Dot { precision }, vec![a, b, acc], tc))
    }

    /// `cond ? a : b` elementwise (or on scalars).
    pub fn select(&mut self, cond: Value, a: Value, b: Value) -> R<Value> {
        let t = self.same_type("select", a, b)?;
        let tc = self.check(cond)?;
        if tc.elem != Elem::Num(DType::I1) {
            return Err(BuildError::OperandType {
                op: "select",
                message: format!("condition must be i1, got {}", tc.elem),
            });
        }
        if tc.shape != t.shape && !tc.is_scalar() {
            return Err(BuildError::ShapeMismatch {
                op: "select",
                lhs: Box::new(tc.shape),
                rhs: Box::new(t.shape),
            });
        }
        Ok(self.push1(OpKind::Select, vec![cond, a, b], t))
    }

    /// Converts to `to` (value conversion); pointers convert only to pointers.
    pub fn cast(&mut self, v: Value, to: Elem) -> R<Value> {
        let t = self.check(v)?;
        if t.elem == to {
            return Ok(v);
        }
        if t.elem.is_ptr() != to.is_ptr() {
            return Err(BuildError::OperandType {
                op: "cast",
                message: format!("cannot convert {} to {to}", t.elem),
            });
        }
        Ok(self.push1(OpKind::Cast, vec![v], t.with_elem(to)))
    }

    /// Reinterprets bits as `to` (same width; a pointer and a 64-bit integer convert).
    pub fn bitcast(&mut self, v: Value, to: Elem) -> R<Value> {
        let t = self.check(v)?;
        if t.elem == to {
            return Ok(v);
        }
        let same = match (t.elem, to) {
            (Elem::Num(a), Elem::Num(b)) => a.bits() == b.bits(),
            (Elem::Ptr(_), Elem::Ptr(_)) => true,
            (Elem::Ptr(_), Elem::Num(d)) | (Elem::Num(d), Elem::Ptr(_)) => {
                d.bits() == 64 && d.is_int()
            }
        };
        if !same {
            return Err(BuildError::OperandType {
                op: "bitcast",
                message: format!("{} and {to} differ in width", t.elem),
            });
        }
        Ok(self.push1(OpKind::Bitcast, vec![v], t.with_elem(to)))
    }

    /// `ptr + offset` in elements; both of one shape.
    pub fn addptr(&mut self, ptr: Value, offset: Value) -> R<Value> {
        let (tp, to) = (self.check(ptr)?, self.check(offset)?);
        if !tp.elem.is_ptr() {
            return Err(BuildError::OperandType {
                op: "addptr",
                message: format!("first operand must be a pointer, got {}", tp.elem),
            });
        }
        if !to.dtype().is_some_and(|d| d.is_int()) {
            return Err(BuildError::OperandType {
                op: "addptr",
                message: format!("offset must be an integer, got {}", to.elem),
            });
        }
        if tp.shape != to.shape {
            return Err(BuildError::ShapeMismatch {
                op: "addptr",
                lhs: Box::new(tp.shape),
                rhs: Box::new(to.shape),
            });
        }
        Ok(self.push1(OpKind::AddPtr, vec![ptr, offset], tp))
    }

    fn check_mask(&self, op: &'static str, mask: Value, shape: Shape) -> R<()> {
        let tm = self.check(mask)?;
        if tm.elem != Elem::Num(DType::I1) {
            return Err(BuildError::OperandType {
                op,
                message: format!("mask must be i1, got {}", tm.elem),
            });
        }
        if tm.shape != shape {
            return Err(BuildError::ShapeMismatch {
                op,
                lhs: Box::new(tm.shape),
                rhs: Box::new(shape),
            });
        }
        Ok(())
    }

    /// Loads through `ptr`; masked-off lanes take `other` (or zero).
    pub fn load(
        &mut self,
        ptr: Value,
        mask: Option<Value>,
        other: Option<Value>,
        volatile: bool,
    ) -> R<Value> {
        self.load_with(ptr, mask, other, volatile, false)
    }

    fn load_with(
        &mut self,
        ptr: Value,
        mask: Option<Value>,
        other: Option<Value>,
        volatile: bool,
        whole_granules: bool,
    ) -> R<Value> {
        let tp = self.check(ptr)?;
        let Elem::Ptr(d) = tp.elem else {
            return Err(BuildError::OperandType {
                op: "load",
                message: format!("needs a pointer, got {}", tp.elem),
            });
        };
        let result = Type::tile(Elem::Num(d), tp.shape);
        let mut operands = vec![ptr];
        if let Some(m) = mask {
            self.check_mask("load", m, tp.shape)?;
            operands.push(m);
            if let Some(o) = other {
                let to = self.check(o)?;
                if !to.same_but_layout(&result) {
                    return Err(BuildError::OperandType {
                        op: "load",
                        message: format!("other must be {d} of shape [{}]", tp.shape),
                    });
                }
                operands.push(o);
            }
        }
        let attrs = MemAttrs {
            masked: mask.is_some(),
            has_other: mask.is_some() && other.is_some(),
            vector: 0,
            volatile,
            runs: [0; crate::MAX_RANK],
            whole_granules,
            prefix_mask: false,
            cache: 0,
            evict: 0,
        };
        Ok(self.push1(OpKind::Load(attrs), operands, result))
    }

    /// A masked load whose selected elements lie in rows that any aligned 16-byte granule
    /// of may be read whole ([`MemAttrs::whole_granules`]: a tensor descriptor's block).
    pub fn load_whole_granules(
        &mut self,
        ptr: Value,
        mask: Value,
        other: Option<Value>,
    ) -> R<Value> {
        self.load_with(ptr, Some(mask), other, false, true)
    }

    /// Gives a load (named by its value) or a store its cache operator and eviction priority:
    /// indices into [`crate::CACHE_MODIFIERS`] and [`crate::EVICTION_POLICIES`] (0: none).
    pub fn set_cache_hints(&mut self, access: CacheTarget, cache: u8, evict: u8) -> R<()> {
        let op = match access {
            CacheTarget::Load(v) => {
                self.check(v)?;
                match self.func.values[v].def {
                    crate::function::ValueDef::Result(op, _) => op,
                    _ => return Err(BuildError::Misuse("cache hints on a value no load made")),
                }
            }
            CacheTarget::Store(op) if self.func.ops.is_valid(op) => op,
            CacheTarget::Store(_) => return Err(BuildError::Misuse("unknown op")),
        };
        let (m, load) = match &mut self.func.ops[op].kind {
            OpKind::Load(m) => (m, true),
            OpKind::Store(m) => (m, false),
            _ => {
                return Err(BuildError::Misuse(
                    "cache hints on an op that is no load or store",
                ))
            }
        };
        if !MemAttrs::cache_hints_fit(load, cache, evict) {
            let name =
                |table: &[&'static str], i: u8| table.get(usize::from(i)).copied().unwrap_or("?");
            return Err(BuildError::OperandType {
                op: if load { "load" } else { "store" },
                message: format!(
                    "no cache operator {:?} with eviction policy {:?} here",
                    name(&crate::CACHE_MODIFIERS, cache),
                    name(&crate::EVICTION_POLICIES, evict),
                ),
            });
        }
        m.cache = cache;
        m.evict = evict;
        Ok(())
    }

    /// Stores `value` through `ptr` where `mask` holds.
    pub fn store(&mut self, ptr: Value, value: Value, mask: Option<Value>) -> R<Op> {
        let (tp, tv) = (self.check(ptr)?, self.check(value)?);
        let Elem::Ptr(d) = tp.elem else {
            return Err(BuildError::OperandType {
                op: "store",
                message: format!("needs a pointer, got {}", tp.elem),
            });
        };
        if tv.elem != Elem::Num(d) || tv.shape != tp.shape {
            return Err(BuildError::OperandType {
                op: "store",
                message: format!(
                    "value must be {d} of shape [{}], got {} of shape [{}]",
                    tp.shape, tv.elem, tv.shape
                ),
            });
        }
        let mut operands = vec![ptr, value];
        if let Some(m) = mask {
            self.check_mask("store", m, tp.shape)?;
            operands.push(m);
        }
        let attrs = MemAttrs {
            masked: mask.is_some(),
            ..MemAttrs::default()
        };
        Ok(self.push(OpKind::Store(attrs), operands, &[]))
    }

    /// Inline PTX applied elementwise: `args` of one shape give results of `result_elems`
    /// in that shape (see [`OpKind::InlineAsm`]).
    pub fn inline_asm(
        &mut self,
        asm: &str,
        constraints: &str,
        args: &[Value],
        result_elems: &[Elem],
        pack: u8,
        pure: bool,
    ) -> R<Vec<Value>> {
        let mut shape = None;
        for &v in args {
            let t = self.check(v)?;
            if t.elem.is_ptr() || shape.is_some_and(|s| s != t.shape) {
                return Err(BuildError::OperandType {
                    op: "inline_asm",
                    message: "arguments must be numeric tiles of one shape".into(),
                });
            }
            shape = Some(t.shape);
        }
        // Without arguments (a barrier, a clock read) the results are scalars, as in Triton.
        let shape = shape.unwrap_or(Shape::SCALAR);
        if result_elems.is_empty() || result_elems.iter().any(|e| e.is_ptr()) {
            return Err(BuildError::OperandType {
                op: "inline_asm",
                message: "results must be numeric".into(),
            });
        }
        let asm = self.func.intern_string(asm);
        let constraints = self.func.intern_string(constraints);
        let tys: Vec<Type> = result_elems.iter().map(|&e| Type::tile(e, shape)).collect();
        let op = self.push(
            OpKind::InlineAsm {
                asm,
                constraints,
                pack: pack.max(1),
                pure,
            },
            args.to_vec(),
            &tys,
        );
        Ok((0..tys.len()).map(|i| self.func.result(op, i)).collect())
    }

    /// Prints the values (tiles or scalars) of `values`, each element on a line.
    pub fn print(&mut self, prefix: &str, values: &[Value], hex: bool) -> R<Op> {
        for &v in values {
            self.check(v)?;
        }
        let prefix = self.func.intern_string(prefix);
        Ok(self.push(OpKind::Print { prefix, hex }, values.to_vec(), &[]))
    }

    /// Records a failure where `cond` (an `i1` tile or scalar) is false.
    pub fn assert(&mut self, cond: Value, msg: &str) -> R<Op> {
        let t = self.check(cond)?;
        if t.elem != Elem::Num(DType::I1) {
            return Err(BuildError::OperandType {
                op: "assert",
                message: format!("condition must be i1, got {}", t.elem),
            });
        }
        let msg = self.func.intern_string(msg);
        Ok(self.push(OpKind::Assert { msg }, vec![cond], &[]))
    }

    /// Opens a `for` loop over `[lb, ub)` by `step` carrying `inits`; the insertion point moves
    /// into its body. Close it with [`Builder::end_for`].
    pub fn begin_for(
        &mut self,
        lb: Value,
        ub: Value,
        step: Value,
        inits: &[Value],
    ) -> R<ForHandle> {
        let t = self.same_type("for", lb, ub)?;
        self.same_type("for", lb, step)?;
        if !t.is_scalar() || !t.dtype().is_some_and(|d| d.is_int() && d != DType::I1) {
            return Err(BuildError::OperandType {
                op: "for",
                message: format!("bounds must be integer scalars, got {}", t.elem),
            });
        }
        let mut types = Vec::new();
        for &v in inits {
            types.push(self.check(v)?);
        }
        let mut operands = vec![lb, ub, step];
        operands.extend_from_slice(inits);
        let op = self.push(OpKind::For { stages: 0 }, operands, &types);
        let body = self.func.add_region(op);
        let iv = self.func.add_block_arg(body, t);
        let iter_args = types
            .iter()
            .map(|&ty| self.func.add_block_arg(body, ty))
            .collect();
        self.stack.push(body);
        Ok(ForHandle { op, iv, iter_args })
    }

    /// Closes the innermost `for`, yielding the next iteration's values; returns its results.
    pub fn end_for(&mut self, h: &ForHandle, yields: &[Value]) -> R<Vec<Value>> {
        if self.stack.len() < 2 || self.block() != self.func.region_block(h.op, 0) {
            return Err(BuildError::Misuse("end_for without a matching begin_for"));
        }
        for (&y, &a) in yields.iter().zip(&h.iter_args) {
            let (ty, ta) = (self.check(y)?, self.check(a)?);
            if !ty.same_but_layout(&ta) {
                return Err(BuildError::OperandType {
                    op: "for",
                    message: format!(
                        "loop-carried value changes type from {} [{}] to {} [{}]",
                        ta.elem, ta.shape, ty.elem, ty.shape
                    ),
                });
            }
        }
        if yields.len() != h.iter_args.len() {
            return Err(BuildError::Misuse(
                "yield count differs from the loop's inits",
            ));
        }
        self.push(OpKind::Yield, yields.to_vec(), &[]);
        self.stack.pop();
        Ok(self.func.ops[h.op].results.clone())
    }

    /// Appends to the end of region `i` of `op` until [`Builder::exit_region`]: used to add
    /// values to an `if` branch after both branches were built.
    pub fn enter_region(&mut self, op: Op, i: usize) -> R<()> {
        if !self.func.ops.is_valid(op) || i >= self.func.ops[op].regions.len() {
            return Err(BuildError::Misuse(
                "enter_region on an op without that region",
            ));
        }
        let b = self.func.region_block(op, i);
        self.stack.push(b);
        Ok(())
    }

    /// Returns to where the insertion point was before [`Builder::enter_region`].
    pub fn exit_region(&mut self) -> R<()> {
        if self.stack.len() < 2 {
            return Err(BuildError::Misuse("exit_region without enter_region"));
        }
        self.stack.pop();
        Ok(())
    }

    /// Abandons the innermost open `for` (a dry run): it is removed with everything in it.
    pub fn discard_for(&mut self, h: &ForHandle) -> R<()> {
        if self.stack.len() < 2 || self.block() != self.func.region_block(h.op, 0) {
            return Err(BuildError::Misuse(
                "discard_for without a matching begin_for",
            ));
        }
        self.stack.pop();
        let b = self.block();
        self.func.blocks[b].ops.retain(|&o| o != h.op);
        Ok(())
    }

    /// Opens an `if` on a scalar `i1`; the insertion point moves into the then-region.
    pub fn begin_if(&mut self, cond: Value) -> R<Op> {
        let tc = self.check(cond)?;
        if tc.elem != Elem::Num(DType::I1) || !tc.is_scalar() {
            return Err(BuildError::OperandType {
                op: "if",
                message: "condition must be a scalar i1".into(),
            });
        }
        let op = self.push(OpKind::If, vec![cond], &[]);
        let then_block = self.func.add_region(op);
        self.func.add_region(op);
        self.stack.push(then_block);
        Ok(op)
    }

    /// Moves the insertion point from the then-region to the else-region.
    pub fn begin_else(&mut self, op: Op) -> R<()> {
        if self.block() != self.func.region_block(op, 0) {
            return Err(BuildError::Misuse("begin_else outside the then-region"));
        }
        self.stack.pop();
        let else_block = self.func.region_block(op, 1);
        self.stack.push(else_block);
        Ok(())
    }

    /// Closes the `if` with the values each branch yields; returns its results.
    pub fn end_if(
        &mut self,
        op: Op,
        then_yields: &[Value],
        else_yields: &[Value],
    ) -> R<Vec<Value>> {
        if self.block() != self.func.region_block(op, 1) {
            return Err(BuildError::Misuse("end_if outside the else-region"));
        }
        self.stack.pop();
        if then_yields.len() != else_yields.len() {
            return Err(BuildError::Misuse(
                "branches yield different numbers of values",
            ));
        }
        let mut types = Vec::new();
        for (&a, &b) in then_yields.iter().zip(else_yields) {
            let (ta, tb) = (self.check(a)?, self.check(b)?);
            if !ta.same_but_layout(&tb) {
                return Err(BuildError::OperandType {
                    op: "if",
                    message: format!(
                        "branches give {} [{}] and {} [{}]",
                        ta.elem, ta.shape, tb.elem, tb.shape
                    ),
                });
            }
            types.push(ta);
        }
        for (i, ys) in [then_yields, else_yields].into_iter().enumerate() {
            let b = self.func.region_block(op, i);
            let y = self
                .func
                .create_op(OpKind::Yield, ys.to_vec(), &[], self.loc);
            self.func.blocks[b].ops.push(y);
        }
        for ty in types {
            let n = self.func.ops[op].results.len() as u32;
            let v = self.func.values.push(crate::function::ValueData {
                ty,
                def: crate::function::ValueDef::Result(op, n),
            });
            self.func.ops[op].results.push(v);
        }
        Ok(self.func.ops[op].results.clone())
    }
}

/// A `reduce` under construction.
#[derive(Debug, Clone)]
pub struct ReduceHandle {
    /// The `reduce` op.
    pub op: Op,
    /// Accumulator arguments of the combine region, one per operand.
    pub lhs: Vec<Value>,
    /// New-element arguments of the combine region, one per operand.
    pub rhs: Vec<Value>,
}

/// A `while` under construction.
#[derive(Debug, Clone)]
pub struct WhileHandle {
    /// The `while` op.
    pub op: Op,
    /// The loop state as the condition region sees it.
    pub before_args: Vec<Value>,
}

impl Builder {
    /// Opens a reduction of `operands` (same shape) along `axis`; the insertion point moves into
    /// the combine region.
    pub fn begin_reduce(&mut self, operands: &[Value], axis: u8) -> R<ReduceHandle> {
        let Some(&first) = operands.first() else {
            return Err(BuildError::Misuse("reduce of nothing"));
        };
        let t0 = self.check(first)?;
        if (axis as usize) >= t0.shape.rank() {
            return Err(BuildError::BadShape {
                op: "reduce",
                message: format!("axis {axis} of a tile of shape [{}]", t0.shape),
            });
        }
        let mut types = Vec::new();
        for &v in operands {
            let t = self.check(v)?;
            if t.shape != t0.shape {
                return Err(BuildError::ShapeMismatch {
                    op: "reduce",
                    lhs: Box::new(t0.shape),
                    rhs: Box::new(t.shape),
                });
            }
            types.push(t);
        }
        let out_shape = t0.shape.remove(axis as usize);
        let results: Vec<Type> = types.iter().map(|t| t.with_shape(out_shape)).collect();
        let op = self.push(OpKind::Reduce { axis }, operands.to_vec(), &results);
        let body = self.func.add_region(op);
        let lhs = types
            .iter()
            .map(|t| self.func.add_block_arg(body, Type::scalar(t.elem)))
            .collect();
        let rhs = types
            .iter()
            .map(|t| self.func.add_block_arg(body, Type::scalar(t.elem)))
            .collect();
        self.stack.push(body);
        Ok(ReduceHandle { op, lhs, rhs })
    }

    /// Closes the combine region with its combined values; returns the reduction's results.
    pub fn end_reduce(&mut self, h: &ReduceHandle, yields: &[Value]) -> R<Vec<Value>> {
        if self.stack.len() < 2 || self.block() != self.func.region_block(h.op, 0) {
            return Err(BuildError::Misuse(
                "end_reduce without a matching begin_reduce",
            ));
        }
        if yields.len() != h.lhs.len() {
            return Err(BuildError::Misuse(
                "the combine function must return one value per operand",
            ));
        }
        for (&y, &a) in yields.iter().zip(&h.lhs) {
            let (ty, ta) = (self.check(y)?, self.check(a)?);
            if ty != ta {
                return Err(BuildError::OperandType {
                    op: "reduce",
                    message: format!(
                        "the combine function returns {} [{}] for {} scalars",
                        ty.elem, ty.shape, ta.elem
                    ),
                });
            }
        }
        self.push(OpKind::Yield, yields.to_vec(), &[]);
        self.stack.pop();
        Ok(self.func.ops[h.op].results.clone())
    }

    /// Opens `while` over the loop state `inits`; the insertion point moves into the condition
    /// region. Continue with [`Builder::begin_while_body`].
    pub fn begin_while(&mut self, inits: &[Value]) -> R<WhileHandle> {
        let mut types = Vec::new();
        for &v in inits {
            types.push(self.check(v)?);
        }
        let op = self.push(OpKind::While, inits.to_vec(), &types);
        let before = self.func.add_region(op);
        let after = self.func.add_region(op);
        let before_args = types
            .iter()
            .map(|&t| self.func.add_block_arg(before, t))
            .collect();
        for &t in &types {
            self.func.add_block_arg(after, t);
        }
        self.stack.push(before);
        Ok(WhileHandle { op, before_args })
    }

    /// Ends the condition region with `cond` (a scalar `i1`); returns the loop state as the
    /// body region sees it, and moves the insertion point into the body.
    pub fn begin_while_body(&mut self, h: &WhileHandle, cond: Value) -> R<Vec<Value>> {
        if self.block() != self.func.region_block(h.op, 0) {
            return Err(BuildError::Misuse(
                "begin_while_body outside the condition region",
            ));
        }
        let tc = self.check(cond)?;
        if tc.elem != Elem::Num(DType::I1) || !tc.is_scalar() {
            return Err(BuildError::OperandType {
                op: "while",
                message: "the condition must be a scalar i1".into(),
            });
        }
        let mut ys = vec![cond];
        ys.extend_from_slice(&h.before_args);
        self.push(OpKind::Yield, ys, &[]);
        self.stack.pop();
        let after = self.func.region_block(h.op, 1);
        self.stack.push(after);
        Ok(self.func.blocks[after].args.clone())
    }

    /// Ends the body with the next loop state; returns the loop's results.
    pub fn end_while(&mut self, h: &WhileHandle, yields: &[Value]) -> R<Vec<Value>> {
        if self.block() != self.func.region_block(h.op, 1) {
            return Err(BuildError::Misuse("end_while outside the loop body"));
        }
        if yields.len() != h.before_args.len() {
            return Err(BuildError::Misuse(
                "the loop body yields a different number of values",
            ));
        }
        for (&y, &a) in yields.iter().zip(&h.before_args) {
            let (ty, ta) = (self.check(y)?, self.check(a)?);
            if !ty.same_but_layout(&ta) {
                return Err(BuildError::OperandType {
                    op: "while",
                    message: format!(
                        "loop-carried value changes type from {} [{}] to {} [{}]",
                        ta.elem, ta.shape, ty.elem, ty.shape
                    ),
                });
            }
        }
        self.push(OpKind::Yield, yields.to_vec(), &[]);
        self.stack.pop();
        Ok(self.func.ops[h.op].results.clone())
    }

    /// Abandons an open `while` (a dry run), wherever its insertion point is.
    pub fn discard_while(&mut self, h: &WhileHandle) -> R<()> {
        let regions = [
            self.func.region_block(h.op, 0),
            self.func.region_block(h.op, 1),
        ];
        if self.stack.len() < 2 || !regions.contains(&self.block()) {
            return Err(BuildError::Misuse(
                "discard_while without a matching begin_while",
            ));
        }
        self.stack.pop();
        let b = self.block();
        self.func.blocks[b].ops.retain(|&o| o != h.op);
        Ok(())
    }

    /// An atomic on `ptr` with `val` (and `cmp` first for `cas`); returns the old values.
    pub fn atomic(
        &mut self,
        attrs: AtomicAttrs,
        ptr: Value,
        cmp: Option<Value>,
        val: Value,
        mask: Option<Value>,
    ) -> R<Value> {
        let (tp, tv) = (self.check(ptr)?, self.check(val)?);
        let Elem::Ptr(d) = tp.elem else {
            return Err(BuildError::OperandType {
                op: "atomic",
                message: format!("needs a pointer, got {}", tp.elem),
            });
        };
        if tv.elem != Elem::Num(d) || tv.shape != tp.shape {
            return Err(BuildError::OperandType {
                op: "atomic",
                message: format!("value must be {d} of shape [{}]", tp.shape),
            });
        }
        let mut operands = vec![ptr];
        match (attrs.op, cmp) {
            (AtomicOp::Cas, Some(c)) => {
                let tc = self.check(c)?;
                if tc != tv {
                    return Err(BuildError::OperandType {
                        op: "atomic_cas",
                        message: "cmp and val must have one type".into(),
                    });
                }
                operands.push(c);
            }
            (AtomicOp::Cas, None) => return Err(BuildError::Misuse("cas needs a cmp operand")),
            (_, Some(_)) => return Err(BuildError::Misuse("only cas takes a cmp operand")),
            _ => {}
        }
        operands.push(val);
        let masked = mask.is_some() && attrs.op != AtomicOp::Cas;
        if let Some(m) = mask.filter(|_| masked) {
            self.check_mask("atomic", m, tp.shape)?;
            operands.push(m);
        }
        let attrs = AtomicAttrs { masked, ..attrs };
        Ok(self.push1(OpKind::Atomic(attrs), operands, tv))
    }

    /// `debug_barrier()`: all threads of the program wait.
    pub fn barrier(&mut self) -> Op {
        self.push(OpKind::Barrier, vec![], &[])
    }
}

impl Builder {
    /// Opens a scan of `operands` along `axis` (like [`Builder::begin_reduce`]).
    pub fn begin_scan(&mut self, operands: &[Value], axis: u8, reverse: bool) -> R<ReduceHandle> {
        let Some(&first) = operands.first() else {
            return Err(BuildError::Misuse("scan of nothing"));
        };
        let t0 = self.check(first)?;
        if (axis as usize) >= t0.shape.rank() {
            return Err(BuildError::BadShape {
                op: "scan",
                message: format!("axis {axis} of a tile of shape [{}]", t0.shape),
            });
        }
        let mut types = Vec::new();
        for &v in operands {
            let t = self.check(v)?;
            if t.shape != t0.shape {
                return Err(BuildError::ShapeMismatch {
                    op: "scan",
                    lhs: Box::new(t0.shape),
                    rhs: Box::new(t.shape),
                });
            }
            types.push(t.with_shape(t.shape));
        }
        let op = self.push(OpKind::Scan { axis, reverse }, operands.to_vec(), &types);
        let body = self.func.add_region(op);
        let lhs = types
            .iter()
            .map(|t| self.func.add_block_arg(body, Type::scalar(t.elem)))
            .collect();
        let rhs = types
            .iter()
            .map(|t| self.func.add_block_arg(body, Type::scalar(t.elem)))
            .collect();
        self.stack.push(body);
        Ok(ReduceHandle { op, lhs, rhs })
    }

    /// Closes a scan's combine region; returns the scanned tiles.
    pub fn end_scan(&mut self, h: &ReduceHandle, yields: &[Value]) -> R<Vec<Value>> {
        self.end_reduce(h, yields)
    }

    /// The value itself with a promise for axis analysis (`values` per dimension; 0 for none).
    pub fn hint(&mut self, v: Value, kind: crate::ops::HintKind, values: &[u32]) -> R<Value> {
        let t = self.check(v)?;
        let rank = t.shape.rank().max(1);
        if values.len() != rank && values.len() != 1 {
            return Err(BuildError::BadShape {
                op: "hint",
                message: format!("{} values for {rank} dimensions", values.len()),
            });
        }
        let mut arr = [0u32; crate::types::MAX_RANK];
        for (d, slot) in arr.iter_mut().take(rank).enumerate() {
            *slot = if values.len() == 1 {
                values[0]
            } else {
                values[d]
            };
        }
        Ok(self.push1(OpKind::Hint { kind, values: arr }, vec![v], t))
    }

    /// Permutes dimensions: result dimension `i` is operand dimension `perm[i]`.
    pub fn permute(&mut self, v: Value, perm: &[u8]) -> R<Value> {
        let t = self.check(v)?;
        let rank = t.shape.rank();
        let mut seen = vec![false; rank];
        if perm.len() != rank
            || perm
                .iter()
                .any(|&p| (p as usize) >= rank || std::mem::replace(&mut seen[p as usize], true))
        {
            return Err(BuildError::BadShape {
                op: "permute",
                message: format!("{perm:?} is not a permutation of {rank} dimensions"),
            });
        }
        let dims: Vec<u32> = perm.iter().map(|&p| t.shape.dims()[p as usize]).collect();
        let mut arr = [0u8; crate::types::MAX_RANK];
        arr[..rank].copy_from_slice(perm);
        let shape = Shape::new(&dims).expect("same rank");
        Ok(self.push1(OpKind::Permute { perm: arr }, vec![v], t.with_shape(shape)))
    }

    /// The same elements in another shape (row-major order kept).
    pub fn reshape(&mut self, v: Value, shape: Shape) -> R<Value> {
        let t = self.check(v)?;
        if t.shape.numel() != shape.numel() || shape.dims().iter().any(|&d| !is_pow2(d)) {
            return Err(BuildError::BadShape {
                op: "reshape",
                message: format!("[{}] cannot become [{shape}]", t.shape),
            });
        }
        if t.shape == shape {
            return Ok(v);
        }
        Ok(self.push1(OpKind::Reshape, vec![v], t.with_shape(shape)))
    }

    /// Stacks two tiles of one type along a new last dimension of size 2.
    pub fn join(&mut self, a: Value, b: Value) -> R<Value> {
        let t = self.same_type("join", a, b)?;
        let shape = t
            .shape
            .insert(t.shape.rank(), 2)
            .ok_or_else(|| BuildError::BadShape {
                op: "join",
                message: "rank too high".into(),
            })?;
        Ok(self.push1(OpKind::Join, vec![a, b], t.with_shape(shape)))
    }

    /// Splits a tile whose last dimension is 2 into its two halves.
    pub fn split(&mut self, v: Value) -> R<(Value, Value)> {
        let t = self.check(v)?;
        let rank = t.shape.rank();
        if rank == 0 || t.shape.dims()[rank - 1] != 2 {
            return Err(BuildError::BadShape {
                op: "split",
                message: format!("the last dimension of [{}] must be 2", t.shape),
            });
        }
        let shape = t.shape.remove(rank - 1);
        let ty = t.with_shape(shape);
        let op = self.push(OpKind::Split, vec![v], &[ty, ty]);
        Ok((self.func.result(op, 0), self.func.result(op, 1)))
    }
}
