//! `tiles._tiles`: the native module. Thin wrappers over `tile_ir::Builder` and
//! `nvptx_codegen::compile`; compile work runs with the GIL released.
//!
//! Architecture invariant: this is the only crate that uses pyo3, and it holds no compiler
//! logic: each method checks its arguments, calls one Rust function and converts the result.

mod cuda;
mod errors;
mod launch;

use errors::{BackendError, BoundaryError, IrError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use tile_ir::{
    BinaryOp, Block, Builder, CmpPred, Const, Elem, EntityRef, Function, Loc, Op, OpKind, Shape,
    UnaryOp, Value,
};

type R<T> = Result<T, BoundaryError>;

fn elem(name: &str) -> R<Elem> {
    Elem::from_name(name).ok_or_else(|| BoundaryError::UnknownName {
        kind: "dtype",
        name: name.to_string(),
    })
}

fn shape(dims: &[u32]) -> R<Shape> {
    Shape::new(dims).ok_or_else(|| BoundaryError::UnknownName {
        kind: "shape (rank > 16)",
        name: format!("{dims:?}"),
    })
}

/// Builds one kernel's IR from Python; handles are value numbers.
#[pyclass(module = "tiles._tiles")]
struct IrBuilder {
    inner: Option<Builder>,
    ops: Vec<Op>,
}

impl IrBuilder {
    fn b(&mut self) -> R<&mut Builder> {
        self.inner.as_mut().ok_or(BoundaryError::Finished)
    }
    fn v(&mut self, h: u32) -> R<Value> {
        let b = self.b()?;
        let v = Value(h);
        if b.func.values.is_valid(v) {
            Ok(v)
        } else {
            Err(BoundaryError::BadHandle(h))
        }
    }
    fn vs(&mut self, hs: &[u32]) -> R<Vec<Value>> {
        hs.iter().map(|&h| self.v(h)).collect()
    }
    fn op(&self, h: u32) -> R<Op> {
        self.ops
            .get(h as usize)
            .copied()
            .ok_or(BoundaryError::BadHandle(h))
    }
    fn while_handle(&mut self, handle: u32) -> R<tile_ir::WhileHandle> {
        let op = self.op(handle)?;
        let b = self.b()?;
        if b.func.ops[op].kind != tile_ir::OpKind::While {
            return Err(BoundaryError::BadHandle(handle));
        }
        let before = b.func.region_block(op, 0);
        Ok(tile_ir::WhileHandle {
            op,
            before_args: b.func.blocks[before].args.clone(),
        })
    }

    fn for_handle(&mut self, h: u32) -> R<tile_ir::ForHandle> {
        let op = self.op(h)?;
        let b = self.b()?;
        if !matches!(b.func.ops[op].kind, tile_ir::OpKind::For { .. }) {
            return Err(BoundaryError::BadHandle(h));
        }
        let body = b.func.region_block(op, 0);
        let args = b.func.blocks[body].args.clone();
        Ok(tile_ir::ForHandle {
            op,
            iv: args[0],
            iter_args: args[1..].to_vec(),
        })
    }
    fn keep_op(&mut self, op: Op) -> u32 {
        self.ops.push(op);
        (self.ops.len() - 1) as u32
    }
}

fn ids(vs: &[Value]) -> Vec<u32> {
    vs.iter().map(|v| v.0).collect()
}

#[pymethods]
impl IrBuilder {
    #[new]
    #[pyo3(signature = (name, num_warps, file, num_stages=3))]
    fn new(name: &str, num_warps: u32, file: &str, num_stages: u32) -> Self {
        let mut b = Builder::new(name, num_warps);
        b.func.file = file.to_string();
        b.func.num_stages = num_stages.clamp(1, 16);
        IrBuilder {
            inner: Some(b),
            ops: Vec::new(),
        }
    }

    fn set_loc(&mut self, line: u32, col: u32) -> PyResult<()> {
        self.b()?.loc = Loc { line, col };
        Ok(())
    }

    fn param(&mut self, name: &str, ty: &str, divisibility: u32) -> PyResult<u32> {
        let e = elem(ty)?;
        Ok(self.b()?.param(name, e, divisibility).0)
    }

    #[pyo3(signature = (value, ty, dims=vec![]))]
    fn constant(&mut self, value: &Bound<'_, PyAny>, ty: &str, dims: Vec<u32>) -> PyResult<u32> {
        let e = elem(ty)?;
        let c = if let Ok(i) = value.extract::<i64>() {
            Const::Int(i)
        } else if let Ok(u) = value.extract::<u64>() {
            Const::Int(u as i64)
        } else {
            Const::Float(value.extract::<f64>()?)
        };
        let s = shape(&dims)?;
        Ok(self
            .b()?
            .constant(c, tile_ir::Type::tile(e, s))
            .map_err(BoundaryError::from)?
            .0)
    }

    fn program_id(&mut self, axis: u8) -> PyResult<u32> {
        Ok(self.b()?.program_id(axis).map_err(BoundaryError::from)?.0)
    }

    fn num_programs(&mut self, axis: u8) -> PyResult<u32> {
        Ok(self.b()?.num_programs(axis).map_err(BoundaryError::from)?.0)
    }

    fn arange(&mut self, start: i32, end: i32) -> PyResult<u32> {
        Ok(self.b()?.arange(start, end).map_err(BoundaryError::from)?.0)
    }

    fn splat(&mut self, v: u32, dims: Vec<u32>) -> PyResult<u32> {
        let (v, s) = (self.v(v)?, shape(&dims)?);
        Ok(self.b()?.splat(v, s).map_err(BoundaryError::from)?.0)
    }

    fn gather(&mut self, src: u32, index: u32, axis: u8) -> PyResult<u32> {
        let (src, index) = (self.v(src)?, self.v(index)?);
        Ok(self
            .b()?
            .gather(src, index, axis)
            .map_err(BoundaryError::from)?
            .0)
    }

    fn expand_dims(&mut self, v: u32, axis: u8) -> PyResult<u32> {
        let v = self.v(v)?;
        Ok(self
            .b()?
            .expand_dims(v, axis)
            .map_err(BoundaryError::from)?
            .0)
    }

    fn broadcast(&mut self, v: u32, dims: Vec<u32>) -> PyResult<u32> {
        let (v, s) = (self.v(v)?, shape(&dims)?);
        Ok(self.b()?.broadcast(v, s).map_err(BoundaryError::from)?.0)
    }

    fn binary(&mut self, op: &str, a: u32, b: u32) -> PyResult<u32> {
        let o = BinaryOp::from_name(op).ok_or_else(|| BoundaryError::UnknownName {
            kind: "binary op",
            name: op.into(),
        })?;
        let (a, b) = (self.v(a)?, self.v(b)?);
        Ok(self.b()?.binary(o, a, b).map_err(BoundaryError::from)?.0)
    }

    fn compare(&mut self, pred: &str, a: u32, b: u32) -> PyResult<u32> {
        let p = CmpPred::from_name(pred).ok_or_else(|| BoundaryError::UnknownName {
            kind: "predicate",
            name: pred.into(),
        })?;
        let (a, b) = (self.v(a)?, self.v(b)?);
        Ok(self.b()?.compare(p, a, b).map_err(BoundaryError::from)?.0)
    }

    fn unary(&mut self, op: &str, a: u32) -> PyResult<u32> {
        let o = UnaryOp::from_name(op).ok_or_else(|| BoundaryError::UnknownName {
            kind: "unary op",
            name: op.into(),
        })?;
        let a = self.v(a)?;
        Ok(self.b()?.unary(o, a).map_err(BoundaryError::from)?.0)
    }

    fn fma(&mut self, a: u32, b: u32, c: u32) -> PyResult<u32> {
        let (a, b, c) = (self.v(a)?, self.v(b)?, self.v(c)?);
        Ok(self.b()?.fma(a, b, c).map_err(BoundaryError::from)?.0)
    }

    fn dot(&mut self, a: u32, b: u32, c: u32, precision: &str) -> PyResult<u32> {
        let (a, b, c) = (self.v(a)?, self.v(b)?, self.v(c)?);
        let p = tile_ir::DotPrecision::from_name(precision).ok_or_else(|| {
            pyo3::exceptions::PyValueError::new_err(format!(
                "input_precision must be 'tf32', 'tf32x3' or 'ieee', got {precision:?}"
            ))
        })?;
        Ok(self.b()?.dot(a, b, c, p).map_err(BoundaryError::from)?.0)
    }

    fn select(&mut self, c: u32, a: u32, b: u32) -> PyResult<u32> {
        let (c, a, b) = (self.v(c)?, self.v(a)?, self.v(b)?);
        Ok(self.b()?.select(c, a, b).map_err(BoundaryError::from)?.0)
    }

    fn cast(&mut self, v: u32, ty: &str) -> PyResult<u32> {
        let (v, e) = (self.v(v)?, elem(ty)?);
        Ok(self.b()?.cast(v, e).map_err(BoundaryError::from)?.0)
    }

    fn bitcast(&mut self, v: u32, ty: &str) -> PyResult<u32> {
        let (v, e) = (self.v(v)?, elem(ty)?);
        Ok(self.b()?.bitcast(v, e).map_err(BoundaryError::from)?.0)
    }

    fn addptr(&mut self, p: u32, o: u32) -> PyResult<u32> {
        let (p, o) = (self.v(p)?, self.v(o)?);
        Ok(self.b()?.addptr(p, o).map_err(BoundaryError::from)?.0)
    }

    /// `whole_granules`: a tensor descriptor's block (see `MemAttrs::whole_granules`);
    /// `cache`, `evict`: indices into `tile_ir::CACHE_MODIFIERS` / `EVICTION_POLICIES`.
    #[pyo3(signature = (ptr, mask=None, other=None, volatile=false, whole_granules=false, cache=0, evict=0))]
    #[allow(clippy::too_many_arguments)]
    fn load(
        &mut self,
        ptr: u32,
        mask: Option<u32>,
        other: Option<u32>,
        volatile: bool,
        whole_granules: bool,
        cache: u8,
        evict: u8,
    ) -> PyResult<u32> {
        let p = self.v(ptr)?;
        let m = mask.map(|m| self.v(m)).transpose()?;
        let o = other.map(|o| self.v(o)).transpose()?;
        let b = self.b()?;
        let v = match m {
            Some(m) if whole_granules && !volatile => b.load_whole_granules(p, m, o),
            _ => b.load(p, m, o, volatile),
        }
        .map_err(BoundaryError::from)?;
        if cache != 0 || evict != 0 {
            b.set_cache_hints(tile_ir::CacheTarget::Load(v), cache, evict)
                .map_err(BoundaryError::from)?;
        }
        Ok(v.0)
    }

    #[pyo3(signature = (ptr, value, mask=None, cache=0, evict=0))]
    fn store(
        &mut self,
        ptr: u32,
        value: u32,
        mask: Option<u32>,
        cache: u8,
        evict: u8,
    ) -> PyResult<()> {
        let (p, v) = (self.v(ptr)?, self.v(value)?);
        let m = mask.map(|m| self.v(m)).transpose()?;
        let b = self.b()?;
        let op = b.store(p, v, m).map_err(BoundaryError::from)?;
        if cache != 0 || evict != 0 {
            b.set_cache_hints(tile_ir::CacheTarget::Store(op), cache, evict)
                .map_err(BoundaryError::from)?;
        }
        Ok(())
    }

    /// Opens a reduction; returns (handle, accumulator args, new-element args).
    fn begin_reduce(
        &mut self,
        operands: Vec<u32>,
        axis: u8,
    ) -> PyResult<(u32, Vec<u32>, Vec<u32>)> {
        let vs = self.vs(&operands)?;
        let h = self
            .b()?
            .begin_reduce(&vs, axis)
            .map_err(BoundaryError::from)?;
        let id = self.keep_op(h.op);
        Ok((id, ids(&h.lhs), ids(&h.rhs)))
    }

    fn end_reduce(&mut self, handle: u32, yields: Vec<u32>) -> PyResult<Vec<u32>> {
        let op = self.op(handle)?;
        let ys = self.vs(&yields)?;
        let b = self.b()?;
        if !matches!(b.func.ops[op].kind, tile_ir::OpKind::Reduce { .. }) {
            return Err(BoundaryError::BadHandle(handle).into());
        }
        let body = b.func.region_block(op, 0);
        let args = b.func.blocks[body].args.clone();
        let n = args.len() / 2;
        let h = tile_ir::ReduceHandle {
            op,
            lhs: args[..n].to_vec(),
            rhs: args[n..].to_vec(),
        };
        Ok(ids(&b.end_reduce(&h, &ys).map_err(BoundaryError::from)?))
    }

    /// Opens a scan; returns (handle, accumulator args, new-element args).
    fn begin_scan(
        &mut self,
        operands: Vec<u32>,
        axis: u8,
        reverse: bool,
    ) -> PyResult<(u32, Vec<u32>, Vec<u32>)> {
        let vs = self.vs(&operands)?;
        let h = self
            .b()?
            .begin_scan(&vs, axis, reverse)
            .map_err(BoundaryError::from)?;
        let id = self.keep_op(h.op);
        Ok((id, ids(&h.lhs), ids(&h.rhs)))
    }

    fn end_scan(&mut self, handle: u32, yields: Vec<u32>) -> PyResult<Vec<u32>> {
        let op = self.op(handle)?;
        let ys = self.vs(&yields)?;
        let b = self.b()?;
        if !matches!(b.func.ops[op].kind, tile_ir::OpKind::Scan { .. }) {
            return Err(BoundaryError::BadHandle(handle).into());
        }
        let body = b.func.region_block(op, 0);
        let args = b.func.blocks[body].args.clone();
        let n = args.len() / 2;
        let h = tile_ir::ReduceHandle {
            op,
            lhs: args[..n].to_vec(),
            rhs: args[n..].to_vec(),
        };
        Ok(ids(&b.end_scan(&h, &ys).map_err(BoundaryError::from)?))
    }

    fn hint(&mut self, v: u32, kind: &str, values: Vec<u32>) -> PyResult<u32> {
        let v = self.v(v)?;
        let Some(k) = tile_ir::HintKind::ALL
            .into_iter()
            .find(|k| k.name() == kind)
        else {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "unknown hint `{kind}`"
            )));
        };
        Ok(self
            .b()?
            .hint(v, k, &values)
            .map_err(BoundaryError::from)?
            .0)
    }

    fn permute(&mut self, v: u32, perm: Vec<u8>) -> PyResult<u32> {
        let v = self.v(v)?;
        Ok(self.b()?.permute(v, &perm).map_err(BoundaryError::from)?.0)
    }

    fn reshape(&mut self, v: u32, dims: Vec<u32>) -> PyResult<u32> {
        let (v, s) = (self.v(v)?, shape(&dims)?);
        Ok(self.b()?.reshape(v, s).map_err(BoundaryError::from)?.0)
    }

    fn join(&mut self, a: u32, b: u32) -> PyResult<u32> {
        let (a, b) = (self.v(a)?, self.v(b)?);
        Ok(self.b()?.join(a, b).map_err(BoundaryError::from)?.0)
    }

    fn split(&mut self, v: u32) -> PyResult<(u32, u32)> {
        let v = self.v(v)?;
        let (a, b) = self.b()?.split(v).map_err(BoundaryError::from)?;
        Ok((a.0, b.0))
    }

    /// Opens a while loop; returns (handle, loop state in the condition region).
    fn begin_while(&mut self, inits: Vec<u32>) -> PyResult<(u32, Vec<u32>)> {
        let vs = self.vs(&inits)?;
        let h = self.b()?.begin_while(&vs).map_err(BoundaryError::from)?;
        let id = self.keep_op(h.op);
        Ok((id, ids(&h.before_args)))
    }

    fn begin_while_body(&mut self, handle: u32, cond: u32) -> PyResult<Vec<u32>> {
        let h = self.while_handle(handle)?;
        let c = self.v(cond)?;
        Ok(ids(&self
            .b()?
            .begin_while_body(&h, c)
            .map_err(BoundaryError::from)?))
    }

    fn discard_while(&mut self, handle: u32) -> PyResult<()> {
        let h = self.while_handle(handle)?;
        self.b()?.discard_while(&h).map_err(BoundaryError::from)?;
        Ok(())
    }

    fn end_while(&mut self, handle: u32, yields: Vec<u32>) -> PyResult<Vec<u32>> {
        let h = self.while_handle(handle)?;
        let ys = self.vs(&yields)?;
        Ok(ids(&self
            .b()?
            .end_while(&h, &ys)
            .map_err(BoundaryError::from)?))
    }

    #[pyo3(signature = (op, ptr, val, cmp=None, mask=None, sem="acq_rel", scope="gpu"))]
    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &mut self,
        op: &str,
        ptr: u32,
        val: u32,
        cmp: Option<u32>,
        mask: Option<u32>,
        sem: &str,
        scope: &str,
    ) -> PyResult<u32> {
        let aop = tile_ir::AtomicOp::from_name(op).ok_or_else(|| BoundaryError::UnknownName {
            kind: "atomic op",
            name: op.into(),
        })?;
        let sem = match sem {
            "relaxed" => tile_ir::MemSem::Relaxed,
            "acquire" => tile_ir::MemSem::Acquire,
            "release" => tile_ir::MemSem::Release,
            "acq_rel" => tile_ir::MemSem::AcqRel,
            other => {
                return Err(BoundaryError::UnknownName {
                    kind: "memory semantic",
                    name: other.into(),
                }
                .into())
            }
        };
        let scope = match scope {
            "cta" => tile_ir::MemScope::Cta,
            "gpu" => tile_ir::MemScope::Gpu,
            "sys" => tile_ir::MemScope::Sys,
            other => {
                return Err(BoundaryError::UnknownName {
                    kind: "memory scope",
                    name: other.into(),
                }
                .into())
            }
        };
        let (p, v) = (self.v(ptr)?, self.v(val)?);
        let c = cmp.map(|c| self.v(c)).transpose()?;
        let m = mask.map(|m| self.v(m)).transpose()?;
        let attrs = tile_ir::AtomicAttrs {
            op: aop,
            masked: false,
            sem,
            scope,
        };
        Ok(self
            .b()?
            .atomic(attrs, p, c, v, m)
            .map_err(BoundaryError::from)?
            .0)
    }

    fn barrier(&mut self) -> PyResult<()> {
        self.b()?.barrier();
        Ok(())
    }

    #[pyo3(signature = (asm, constraints, args, result_types, pack, pure))]
    fn inline_asm(
        &mut self,
        asm: &str,
        constraints: &str,
        args: Vec<u32>,
        result_types: Vec<String>,
        pack: u8,
        pure: bool,
    ) -> PyResult<Vec<u32>> {
        let vs = self.vs(&args)?;
        let elems: Vec<Elem> = result_types.iter().map(|t| elem(t)).collect::<R<_>>()?;
        let out = self
            .b()?
            .inline_asm(asm, constraints, &vs, &elems, pack, pure)
            .map_err(BoundaryError::from)?;
        Ok(out.into_iter().map(|v| v.0).collect())
    }

    #[pyo3(signature = (prefix, values, hex=false))]
    fn print(&mut self, prefix: &str, values: Vec<u32>, hex: bool) -> PyResult<()> {
        let vs = self.vs(&values)?;
        self.b()?
            .print(prefix, &vs, hex)
            .map_err(BoundaryError::from)?;
        Ok(())
    }

    fn assert_(&mut self, cond: u32, msg: &str) -> PyResult<()> {
        let c = self.v(cond)?;
        self.b()?.assert(c, msg).map_err(BoundaryError::from)?;
        Ok(())
    }

    /// Opens a loop; returns (loop handle, induction variable, iteration arguments).
    #[pyo3(signature = (lb, ub, step, inits, stages=0))]
    fn begin_for(
        &mut self,
        lb: u32,
        ub: u32,
        step: u32,
        inits: Vec<u32>,
        stages: u8,
    ) -> PyResult<(u32, u32, Vec<u32>)> {
        let (lb, ub, step) = (self.v(lb)?, self.v(ub)?, self.v(step)?);
        let inits = self.vs(&inits)?;
        let b = self.b()?;
        let h = b
            .begin_for(lb, ub, step, &inits)
            .map_err(BoundaryError::from)?;
        b.func.ops[h.op].kind = tile_ir::OpKind::For { stages };
        let id = self.keep_op(h.op);
        Ok((id, h.iv.0, ids(&h.iter_args)))
    }

    fn end_for(&mut self, handle: u32, yields: Vec<u32>) -> PyResult<Vec<u32>> {
        let h = self.for_handle(handle)?;
        let yields = self.vs(&yields)?;
        Ok(ids(&self
            .b()?
            .end_for(&h, &yields)
            .map_err(BoundaryError::from)?))
    }

    fn discard_for(&mut self, handle: u32) -> PyResult<()> {
        let h = self.for_handle(handle)?;
        self.b()?.discard_for(&h).map_err(BoundaryError::from)?;
        Ok(())
    }

    fn enter_region(&mut self, handle: u32, index: usize) -> PyResult<()> {
        let op = self.op(handle)?;
        self.b()?
            .enter_region(op, index)
            .map_err(BoundaryError::from)?;
        Ok(())
    }

    fn exit_region(&mut self) -> PyResult<()> {
        self.b()?.exit_region().map_err(BoundaryError::from)?;
        Ok(())
    }

    fn begin_if(&mut self, cond: u32) -> PyResult<u32> {
        let c = self.v(cond)?;
        let op = self.b()?.begin_if(c).map_err(BoundaryError::from)?;
        Ok(self.keep_op(op))
    }

    fn begin_else(&mut self, handle: u32) -> PyResult<()> {
        let op = self.op(handle)?;
        self.b()?.begin_else(op).map_err(BoundaryError::from)?;
        Ok(())
    }

    fn end_if(
        &mut self,
        handle: u32,
        then_yields: Vec<u32>,
        else_yields: Vec<u32>,
    ) -> PyResult<Vec<u32>> {
        let op = self.op(handle)?;
        let (t, e) = (self.vs(&then_yields)?, self.vs(&else_yields)?);
        Ok(ids(&self
            .b()?
            .end_if(op, &t, &e)
            .map_err(BoundaryError::from)?))
    }

    /// The IR so far, as text.
    fn text(&mut self) -> PyResult<String> {
        Ok(self.b()?.func.to_string())
    }

    /// Ends building; the builder cannot be used afterwards.
    fn finish(&mut self) -> PyResult<Kernel> {
        let b = self.inner.take().ok_or(BoundaryError::Finished)?;
        Ok(Kernel { func: b.finish() })
    }
}

/// A block of `func` as `(argument ids, ops)`, recursively (see `Kernel.structure`).
fn block_structure<'py>(
    py: Python<'py>,
    func: &Function,
    block: Block,
) -> PyResult<Bound<'py, PyTuple>> {
    let ids = |vs: &[Value]| vs.iter().map(|v| v.index()).collect::<Vec<_>>();
    let data = &func.blocks[block];
    let mut ops = Vec::with_capacity(data.ops.len());
    for &op in &data.ops {
        let d = &func.ops[op];
        let facts = PyDict::new(py);
        match d.kind {
            OpKind::Atomic(a) => facts.set_item("op", a.op.name())?,
            OpKind::InlineAsm { pure, .. } => facts.set_item("pure", pure)?,
            _ => {}
        }
        let regions = d
            .regions
            .iter()
            .map(|&r| block_structure(py, func, func.regions[r].block))
            .collect::<PyResult<Vec<_>>>()?;
        ops.push(
            (
                d.kind.name(),
                facts,
                ids(&d.operands),
                ids(&d.results),
                regions,
            )
                .into_pyobject(py)?,
        );
    }
    (ids(&data.args), ops).into_pyobject(py)
}

/// A finished kernel, ready to compile (any number of times, for any target).
#[pyclass(module = "tiles._tiles", frozen)]
struct Kernel {
    func: Function,
}

#[pymethods]
impl Kernel {
    /// The IR as text.
    fn text(&self) -> String {
        self.func.to_string()
    }

    /// The IR's structure, for tools that walk it (`tiles._ttir_view`): `(name, entry block)`,
    /// a block being `(argument ids, ops)` (the entry block's arguments are the parameters) and
    /// an op `(name, facts, operand ids, result ids, region blocks)`. Value ids are those of the
    /// text form (`%N`); `facts` holds what tools ask of an op beyond its name: an atomic's
    /// `op`, inline asm's `pure`.
    fn structure<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        (
            self.func.name.as_str(),
            block_structure(py, &self.func, self.func.entry)?,
        )
            .into_pyobject(py)
    }

    /// Runs the passes and codegen for `target` with the GIL released. Returns a dict with
    /// `name`, `ptx`, `llir` (when `llir`; else None), `tir` (input IR), `tir_opt` (after
    /// passes), `shared`, `num_threads`, and, when `all_stages`, `passes`: a list of
    /// (pass, IR text).
    #[pyo3(signature = (target, all_stages=false, fp_fusion=false, maxnreg=None, llir=true, ftz=true))]
    // Python's keyword options, one argument each.
    #[allow(clippy::too_many_arguments)]
    fn compile<'py>(
        &self,
        py: Python<'py>,
        target: &str,
        all_stages: bool,
        fp_fusion: bool,
        maxnreg: Option<u32>,
        llir: bool,
        ftz: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut func = self.func.clone();
        let mut asserts: Vec<(u32, String)> = Vec::new();
        func.walk(|op| {
            if let tile_ir::OpKind::Assert { msg } = func.ops[op].kind {
                asserts.push((func.ops[op].loc.line, func.strings[msg as usize].clone()));
            }
        });
        let target = nvptx_codegen::Target::parse(target).map_err(BoundaryError::from)?;
        let (result, input, stages) = py.detach(|| {
            let input = func.to_string();
            let mut stages: Vec<(String, String)> = Vec::new();
            let codegen = nvptx_codegen::CodegenOptions {
                fp_fusion,
                maxnreg,
                keep_llvm_ir: llir,
                keep_subnormals: !ftz,
            };
            let r = nvptx_codegen::compile_with(
                &mut func,
                &target,
                &Default::default(),
                &codegen,
                |pass, f| {
                    if all_stages {
                        stages.push((pass.to_string(), f.to_string()));
                    }
                },
            );
            (r.map(|o| (o, func.to_string())), input, stages)
        });
        let (out, after) = result.map_err(BoundaryError::from)?;
        let d = PyDict::new(py);
        d.set_item("name", out.kernel_name)?;
        d.set_item("ptx", out.ptx)?;
        d.set_item("llir", out.llvm_ir)?;
        d.set_item("tir", input)?;
        d.set_item("tir_opt", after)?;
        d.set_item("shared", out.shared_bytes)?;
        d.set_item("num_threads", out.num_threads)?;
        d.set_item("asserts", asserts)?;
        d.set_item("timings", out.timings)?;
        if all_stages {
            d.set_item("passes", stages)?;
        }
        Ok(d)
    }
}

/// Parses a kernel from its text form (as `Kernel.text()` and `asm["tir"]` print it).
#[pyfunction]
fn parse_ir(text: &str) -> PyResult<Kernel> {
    let func = tile_ir::parse(text).map_err(BoundaryError::from)?;
    Ok(Kernel { func })
}

/// The native module.
#[pymodule]
fn _tiles(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<IrBuilder>()?;
    m.add_class::<Kernel>()?;
    m.add_function(wrap_pyfunction!(parse_ir, m)?)?;
    m.add_class::<launch::Dispatcher>()?;
    m.add_class::<launch::BoundLauncher>()?;
    m.add_class::<launch::KernelLauncher>()?;
    m.add_class::<launch::RunLauncher>()?;
    m.add_function(wrap_pyfunction!(launch::set_launch_hooked, m)?)?;
    m.add_function(wrap_pyfunction!(launch::forget_learned_launches, m)?)?;
    cuda::py::register(m)?;
    m.add("IrError", m.py().get_type::<IrError>())?;
    m.add("BackendError", m.py().get_type::<BackendError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("ASSERT_GLOBAL", nvptx_codegen::ASSERT_GLOBAL)?;
    m.add("BUILD_ID", env!("TILES_BUILD_ID"))?;
    Ok(())
}
