//! Which registers of each tile some op reads, so that elementwise ops compute only those.
//!
//! A vector access reads its pointers and mask at the first element of each vector: the
//! pointer tiles of a 128x32 fp16 block loaded 8 at a time hold 32 registers a thread, of
//! which the copies read 4. Lowering every register and leaving the rest to LLVM's dead-code
//! removal made the passes wade through them (a third of a matmul's LLVM IR).
//!
//! The analysis walks the kernel backwards. An elementwise op passes its result's demand to
//! its operands register by register; vector loads, stores and copies demand their pointers'
//! and masks' first registers; a `for` passes what its carried tiles' uses read to their inits
//! and yields (to a fixed point); every other use demands the whole tile. A value no op reads
//! is demanded nowhere. Lowering builds the registers nobody reads as zeros, which no op uses.

use crate::lower::{Lowering, R};
use std::collections::HashMap;
use tile_ir::{Block, DType, Elem, Op, OpKind, Value};

/// Per tile, the registers read (absent: none).
pub(crate) type Demand = HashMap<Value, Vec<bool>>;

impl<'ctx> Lowering<'ctx, '_> {
    /// The demand of every tile of the kernel.
    pub(crate) fn analyze_demand(&mut self) -> R<Demand> {
        let mut d = Demand::new();
        self.demand_block(self.func.entry, &mut d)?;
        Ok(d)
    }

    fn demand_block(&mut self, b: Block, d: &mut Demand) -> R<()> {
        let ops = self.func.blocks[b].ops.clone();
        for &op in ops.iter().rev() {
            if matches!(self.func.ops[op].kind, OpKind::For { .. }) {
                self.demand_loop(op, d)?;
                continue;
            }
            for i in (0..self.func.ops[op].regions.len()).rev() {
                let rb = self.func.region_block(op, i);
                // What other regions yield is read whole.
                if let Some(&y) = self.func.blocks[rb].ops.last() {
                    if matches!(self.func.ops[y].kind, OpKind::Yield) {
                        for o in self.func.ops[y].operands.clone() {
                            self.demand(d, o, None)?;
                        }
                    }
                }
                self.demand_block(rb, d)?;
            }
            self.demand_op(op, d)?;
        }
        Ok(())
    }

    /// A `for`: a carried tile's registers are read where its result or the next iteration
    /// reads them (its init and each yield then provide just those), to a fixed point.
    fn demand_loop(&mut self, op: Op, d: &mut Demand) -> R<()> {
        let data = self.func.ops[op].clone();
        let body = self.func.region_block(op, 0);
        let args = self.func.blocks[body].args.clone();
        let Some(&y) = self.func.blocks[body].ops.last() else {
            return self.internal("a loop body without a yield");
        };
        let yields = self.func.ops[y].operands.clone();
        let mut carried: Vec<Option<Vec<bool>>> =
            data.results.iter().map(|r| d.get(r).cloned()).collect();
        loop {
            for (k, w) in carried.iter().enumerate() {
                if let (Some(w), Some(&v)) = (w, yields.get(k)) {
                    self.demand(d, v, Some(&|i| w.get(i).copied().unwrap_or(true)))?;
                }
            }
            self.demand_block(body, d)?;
            let mut changed = false;
            for (k, w) in carried.iter_mut().enumerate() {
                let Some(a) = args.get(k + 1).and_then(|a| d.get(a)) else {
                    continue;
                };
                let merged: Vec<bool> = match w {
                    Some(w) => w.iter().zip(a).map(|(x, y)| *x || *y).collect(),
                    None => a.clone(),
                };
                if w.as_ref() != Some(&merged) {
                    *w = Some(merged);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        // The bounds and step are read whole; each init provides what its iterations read.
        let (bounds, inits) = data.operands.split_at(3.min(data.operands.len()));
        for &o in bounds {
            self.demand(d, o, None)?;
        }
        for (&o, w) in inits.iter().zip(&carried) {
            let read = |i: usize| {
                w.as_ref()
                    .is_some_and(|w| w.get(i).copied().unwrap_or(true))
            };
            self.demand(d, o, Some(&read))?;
        }
        Ok(())
    }

    /// Registers of `v` read, all of them (`None`) or these.
    fn demand(&mut self, d: &mut Demand, v: Value, which: Option<&dyn Fn(usize) -> bool>) -> R<()> {
        let ty = *self.func.ty(v);
        let n = self.nregs(&ty)?;
        let e = d.entry(v).or_insert_with(|| vec![false; n]);
        for (i, x) in e.iter_mut().enumerate() {
            *x |= which.is_none_or(|f| f(i));
        }
        Ok(())
    }

    fn demand_op(&mut self, op: Op, d: &mut Demand) -> R<()> {
        let data = self.func.ops[op].clone();
        if matches!(data.kind, OpKind::Yield) {
            // Read for the region's parent (`demand_block`, `demand_loop`).
            return Ok(());
        }
        let lane_wise = (data.kind.is_elementwise() || matches!(data.kind, OpKind::Fma))
            && !matches!(data.kind, OpKind::Compare(_, run) if run > 1)
            && !(matches!(data.kind, OpKind::Cast) && self.touches_fp8(&data));
        if lane_wise {
            // Register i of the result reads register i of each operand (or a scalar's one).
            let r = data.results[0];
            let want = match d.get(&r) {
                Some(w) => w.clone(),
                None => vec![false; self.nregs(&self.func.ty(r).clone())?],
            };
            for &o in &data.operands {
                let n = self.nregs(&self.func.ty(o).clone())?;
                if n == 1 {
                    let any = want.iter().any(|&w| w);
                    self.demand(d, o, Some(&|_| any))?;
                } else {
                    self.demand(d, o, Some(&|i| want.get(i).copied().unwrap_or(true)))?;
                }
            }
            return Ok(());
        }
        // A vector access reads its pointers and (unless the mask is a prefix, read element
        // by element) its mask at each vector's first register: (operand, vector width).
        let Some(&first) = data.operands.first() else {
            return Ok(());
        };
        let tile = !self.func.ty(first).is_scalar();
        let mut heads: Vec<(usize, usize)> = Vec::new();
        match data.kind {
            OpKind::Load(m) if tile => {
                let vec = self.usable_vector(&self.func.ty(data.results[0]).clone(), m)?;
                if !(m.has_runs() && vec == 1) {
                    heads.push((0, vec));
                    if m.masked && !m.prefix_mask {
                        heads.push((1, vec));
                    }
                }
            }
            OpKind::Store(m) if tile => {
                let vec = self.usable_vector(&self.func.ty(data.operands[0]).clone(), m)?;
                heads.push((0, vec));
                if m.masked {
                    heads.push((2, vec));
                }
            }
            OpKind::AsyncCopy(a) => {
                let vec = a.vector.max(1) as usize;
                heads.push((0, vec));
                if a.masked && !a.prefix_mask {
                    heads.push((2, vec));
                }
            }
            _ => {}
        }
        for (k, &o) in data.operands.iter().enumerate() {
            match heads.iter().find(|h| h.0 == k) {
                Some(&(_, vec)) if vec > 1 => self.demand(d, o, Some(&|i| i % vec == 0))?,
                _ => self.demand(d, o, None)?,
            }
        }
        Ok(())
    }

    /// Whether a cast converts to or from fp8 (lowered two registers at a time).
    fn touches_fp8(&self, data: &tile_ir::OpData) -> bool {
        let fp8 = |v: Value| {
            matches!(
                self.func.ty(v).elem,
                Elem::Num(DType::F8E5M2 | DType::F8E4M3)
            )
        };
        fp8(data.operands[0]) || fp8(data.results[0])
    }
}
