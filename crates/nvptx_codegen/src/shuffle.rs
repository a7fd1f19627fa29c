//! Data movement through shared memory: permute, reshape, join, split, and scans.
//!
//! Shape ops: every operand element is written at `base + Σ coord·stride` and every result
//! element read the same way, with strides chosen per op (a permutation reads with permuted
//! strides, a reshape writes and reads row-major, join/split interleave along the last axis).
//!
//! Scans: the tile goes to shared memory row-major; each line (all elements along the axis
//! for one off-axis coordinate) is cut into per-thread segments that are scanned in order;
//! then each segment folds the totals of the segments before it (a runtime loop) into its
//! elements; the result is read back in the result's layout. `reverse` scans positions from
//! the end (flip, scan, flip).

use crate::lower::{memory_type, Lowering, R};
use inkwell::types::BasicTypeEnum;
use inkwell::values::{BasicValueEnum, IntValue, PointerValue};
use inkwell::IntPredicate;
use tile_ir::layout::row_major;
use tile_ir::{DType, Elem, Op, OpKind, Type, Value};

impl<'ctx> Lowering<'ctx, '_> {
    fn smem_elem(&self, e: Elem) -> (BasicTypeEnum<'ctx>, u32) {
        match e {
            Elem::Ptr(_) => (self.cx.ptr_type(crate::lower::global()).into(), 8),
            Elem::Num(d) => (memory_type(self.cx, d), d.bytes()),
        }
    }

    fn register_to_smem(&self, e: Elem, v: BasicValueEnum<'ctx>) -> R<BasicValueEnum<'ctx>> {
        Ok(match e {
            Elem::Num(DType::I1) => self
                .b
                .build_int_z_extend(v.into_int_value(), self.cx.i8_type(), "b")?
                .into(),
            _ => v,
        })
    }

    fn smem_to_register(&self, e: Elem, v: BasicValueEnum<'ctx>) -> R<BasicValueEnum<'ctx>> {
        Ok(match e {
            Elem::Num(DType::I1) => self
                .b
                .build_int_compare(
                    IntPredicate::NE,
                    v.into_int_value(),
                    self.cx.i8_type().const_zero(),
                    "b",
                )?
                .into(),
            _ => v,
        })
    }

    /// The address of element `idx` (in elements) of a region starting `base_bytes` into the
    /// shared buffer.
    fn smem_at(
        &self,
        smem: PointerValue<'ctx>,
        base_bytes: u32,
        et: BasicTypeEnum<'ctx>,
        idx: IntValue<'ctx>,
    ) -> R<PointerValue<'ctx>> {
        // SAFETY of the GEPs: callers size the buffer for every index they form.
        let region = unsafe {
            self.b.build_gep(
                self.cx.i8_type(),
                smem,
                &[self.i32(base_bytes as u64)],
                "rg",
            )?
        };
        Ok(unsafe { self.b.build_gep(et, region, &[idx], "sa")? })
    }

    /// The address of element `base + Σ (thread[d] + c[d]) · strides[d]` of a region starting
    /// `region_bytes` into `smem`, for each register of a tile: the thread's part once, then
    /// in-bounds constant offsets (LLVM's load-store vectorizer pairs such addresses without
    /// scalar evolution).
    fn linear_ptrs(
        &mut self,
        ty: &Type,
        strides: &[u32],
        base: u32,
        smem: PointerValue<'ctx>,
        region_bytes: u32,
        et: BasicTypeEnum<'ctx>,
    ) -> R<Vec<PointerValue<'ctx>>> {
        let g = self.geometry(ty)?;
        let mut tb = self.i32(base as u64);
        for (d, &t) in g.thread.iter().enumerate() {
            let x = self.b.build_int_mul(t, self.i32(strides[d] as u64), "ts")?;
            tb = self.b.build_int_add(tb, x, "ts")?;
        }
        let thread = self.smem_at(smem, region_bytes, et, tb)?;
        let mut out = Vec::with_capacity(g.regs.len());
        for c in g.regs.iter() {
            let off: u64 = c.iter().zip(strides).map(|(&x, &s)| (x * s) as u64).sum();
            out.push(if off == 0 {
                thread
            } else {
                // SAFETY of the GEP: callers size the buffer for every element of the tile.
                unsafe {
                    self.b
                        .build_in_bounds_gep(et, thread, &[self.i32(off)], "sa")?
                }
            });
        }
        Ok(out)
    }

    /// Writes `writes` (value, strides, base) to shared memory, then reads `reads`
    /// (type, strides, base) back.
    fn shared_shuffle(
        &mut self,
        elem: Elem,
        total: u32,
        writes: &[(Value, Vec<u32>, u32)],
        reads: &[(Type, Vec<u32>, u32)],
    ) -> R<Vec<Vec<BasicValueEnum<'ctx>>>> {
        let (et, eb) = self.smem_elem(elem);
        let smem = self.shared_scratch(total * eb)?;
        self.fence_before_shared_write()?;
        for (v, strides, base) in writes {
            let ty = *self.func.ty(*v);
            let regs = self.get(*v)?.clone();
            let ptrs = self.linear_ptrs(&ty, strides, *base, smem, 0, et)?;
            for (i, p) in ptrs.into_iter().enumerate() {
                let x = self.register_to_smem(elem, regs[i])?;
                self.b.build_store(p, x)?;
            }
        }
        self.barrier_sync()?;
        let mut out = Vec::with_capacity(reads.len());
        for (ty, strides, base) in reads {
            let ptrs = self.linear_ptrs(ty, strides, *base, smem, 0, et)?;
            let mut vals = Vec::with_capacity(ptrs.len());
            for p in ptrs {
                let x = self.b.build_load(et, p, "sl")?;
                vals.push(self.smem_to_register(elem, x)?);
            }
            out.push(vals);
        }
        self.smem_busy = true;
        Ok(out)
    }

    /// The results of a shape op assembled from its operands' registers, where every result
    /// element sits in the thread that holds it already ([`tile_ir::layout::shape_op_gather`]);
    /// `None` where data must move between threads, or with `TILES_SHAPE_OPS_IN_REGISTERS=0`.
    fn shape_op_in_registers(&mut self, op: Op) -> R<Option<Vec<Vec<BasicValueEnum<'ctx>>>>> {
        if !passes::shape_ops_in_registers() {
            return Ok(None);
        }
        let data = self.func.ops[op].clone();
        let layout = |v: Value| self.func.ty(v).layout.map(|l| &self.func.layouts[l]);
        let Some(srcs) = data
            .operands
            .iter()
            .map(|&v| layout(v))
            .collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        let sdims = self.func.ty(data.operands[0]).shape.dims().to_vec();
        let mut gathers = Vec::with_capacity(data.results.len());
        for (k, &r) in data.results.iter().enumerate() {
            let Some(dst) = layout(r) else {
                return Ok(None);
            };
            let ddims = self.func.ty(r).shape.dims().to_vec();
            let g = tile_ir::layout::shape_op_gather(
                &data.kind,
                &srcs,
                &sdims,
                dst,
                &ddims,
                k as u32,
                self.func.num_warps,
            );
            match g {
                Some(g) => gathers.push(g),
                None => return Ok(None),
            }
        }
        let regs: Vec<Vec<BasicValueEnum<'ctx>>> = data
            .operands
            .iter()
            .map(|&v| self.get(v).cloned())
            .collect::<R<_>>()?;
        Ok(Some(
            gathers
                .into_iter()
                .map(|g| g.into_iter().map(|(s, j)| regs[s][j]).collect())
                .collect(),
        ))
    }

    pub fn lower_shape_op(&mut self, op: Op) -> R<()> {
        let data = self.func.ops[op].clone();
        if let Some(out) = self.shape_op_in_registers(op)? {
            for (r, v) in data.results.iter().zip(out) {
                self.vals.insert(*r, v);
            }
            return Ok(());
        }
        let src = *self.func.ty(data.operands[0]);
        let dst = *self.func.ty(data.results[0]);
        let elem = src.elem;
        let sdims = src.shape.dims().to_vec();
        let ddims = dst.shape.dims().to_vec();
        let (ss, ds) = (row_major(&sdims), row_major(&ddims));
        let numel = src.shape.numel() as u32;
        let out = match data.kind {
            OpKind::Permute { perm } => {
                let rs: Vec<u32> = (0..ddims.len()).map(|i| ss[perm[i] as usize]).collect();
                self.shared_shuffle(
                    elem,
                    numel,
                    &[(data.operands[0], ss.clone(), 0)],
                    &[(dst, rs, 0)],
                )?
            }
            OpKind::Reshape => self.shared_shuffle(
                elem,
                numel,
                &[(data.operands[0], ss.clone(), 0)],
                &[(dst, ds, 0)],
            )?,
            OpKind::Join => {
                let ws: Vec<u32> = ds[..ds.len() - 1].to_vec();
                self.shared_shuffle(
                    elem,
                    2 * numel,
                    &[(data.operands[0], ws.clone(), 0), (data.operands[1], ws, 1)],
                    &[(dst, ds, 0)],
                )?
            }
            OpKind::Split => {
                let rs: Vec<u32> = ss[..ss.len() - 1].to_vec();
                self.shared_shuffle(
                    elem,
                    numel,
                    &[(data.operands[0], ss.clone(), 0)],
                    &[(dst, rs.clone(), 0), (dst, rs, 1)],
                )?
            }
            _ => return self.internal("not a shape op"),
        };
        for (r, v) in data.results.iter().zip(out) {
            self.vals.insert(*r, v);
        }
        Ok(())
    }

    /// Runs the combine region of `op` on scalars.
    fn scan_combine(
        &mut self,
        op: Op,
        acc: &[BasicValueEnum<'ctx>],
        new: &[BasicValueEnum<'ctx>],
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let body = self.func.region_block(op, 0);
        let args = self.func.blocks[body].args.clone();
        let n = acc.len();
        for i in 0..n {
            self.vals.insert(args[i], vec![acc[i]]);
            self.vals.insert(args[n + i], vec![new[i]]);
        }
        let ys = self.lower_block(body)?;
        ys.iter().map(|&y| self.get(y).map(|v| v[0])).collect()
    }

    /// Runs `body` only where `cond` holds.
    fn when(&mut self, cond: IntValue<'ctx>, body: impl FnOnce(&mut Self) -> R<()>) -> R<()> {
        let then_bb = self.cx.append_basic_block(self.kernel, "scan.do");
        let cont = self.cx.append_basic_block(self.kernel, "scan.cont");
        self.b.build_conditional_branch(cond, then_bb, cont)?;
        self.b.position_at_end(then_bb);
        body(self)?;
        self.b.build_unconditional_branch(cont)?;
        self.b.position_at_end(cont);
        Ok(())
    }

    pub fn lower_scan(&mut self, op: Op, axis: usize, reverse: bool) -> R<()> {
        let data = self.func.ops[op].clone();
        let nops = data.operands.len();
        let ty = *self.func.ty(data.operands[0]);
        let dims = ty.shape.dims().to_vec();
        let strides = row_major(&dims);
        let n = dims[axis];
        let numel = ty.shape.numel() as u32;
        let lines = numel / n;
        let threads = self.func.num_warps * 32;
        let (lines_per_thread, segs) = if lines >= threads {
            (lines / threads, 1)
        } else {
            (1, (threads / lines).min(n))
        };
        let seg_len = n / segs;
        let elems: Vec<Elem> = data
            .operands
            .iter()
            .map(|&v| self.func.ty(v).elem)
            .collect();
        let layout: Vec<(BasicTypeEnum<'ctx>, u32)> =
            elems.iter().map(|&e| self.smem_elem(e)).collect();
        // Regions: each operand's data (numel elements), then each operand's segment totals.
        let mut data_base = Vec::with_capacity(nops);
        let mut total_base = Vec::with_capacity(nops);
        let mut bytes = 0u32;
        for &(_, eb) in &layout {
            bytes = bytes.next_multiple_of(eb.max(8));
            data_base.push(bytes);
            bytes += numel * eb;
        }
        for &(_, eb) in &layout {
            bytes = bytes.next_multiple_of(eb.max(8));
            total_base.push(bytes);
            bytes += lines * segs * eb;
        }
        let smem = self.shared_scratch(bytes)?;
        // 1. The tile, row-major.
        self.fence_before_shared_write()?;
        for (k, &v) in data.operands.iter().enumerate() {
            let regs = self.get(v)?.clone();
            let ptrs = self.linear_ptrs(&ty, &strides, 0, smem, data_base[k], layout[k].0)?;
            for (i, p) in ptrs.into_iter().enumerate() {
                let x = self.register_to_smem(elems[k], regs[i])?;
                self.b.build_store(p, x)?;
            }
        }
        self.barrier_sync()?;
        // Which line(s) and segment this thread scans.
        let tid = self.tid;
        let (first_line, seg) = if segs == 1 {
            (
                self.b
                    .build_int_mul(tid, self.i32(lines_per_thread as u64), "l")?,
                self.i32(0),
            )
        } else {
            (
                self.b.build_right_shift(
                    tid,
                    self.i32(segs.trailing_zeros() as u64),
                    false,
                    "l",
                )?,
                self.b.build_and(tid, self.i32((segs - 1) as u64), "s")?,
            )
        };
        let active = self.b.build_int_compare(
            IntPredicate::ULT,
            tid,
            self.i32((lines * segs / lines_per_thread.max(1)).max(1) as u64),
            "act",
        )?;
        let off_axis: Vec<usize> = (0..dims.len()).filter(|&d| d != axis).collect();
        let line_base = |lw: &Self, line: IntValue<'ctx>| -> R<IntValue<'ctx>> {
            // Row-major decomposition of the line index over the off-axis dimensions.
            let mut acc = lw.i32(0);
            let mut shift = 0u32;
            for &d in off_axis.iter().rev() {
                let c =
                    lw.b.build_right_shift(line, lw.i32(shift as u64), false, "c")?;
                let c = lw.b.build_and(c, lw.i32((dims[d] - 1) as u64), "c")?;
                let c = lw.b.build_int_mul(c, lw.i32(strides[d] as u64), "c")?;
                acc = lw.b.build_int_add(acc, c, "c")?;
                shift += dims[d].trailing_zeros();
            }
            Ok(acc)
        };
        let pos_index = |lw: &Self, base: IntValue<'ctx>, p: IntValue<'ctx>| -> R<IntValue<'ctx>> {
            let phys = if reverse {
                lw.b.build_int_sub(lw.i32((n - 1) as u64), p, "r")?
            } else {
                p
            };
            let x =
                lw.b.build_int_mul(phys, lw.i32(strides[axis] as u64), "p")?;
            Ok(lw.b.build_int_add(base, x, "p")?)
        };
        let load_all = |lw: &Self, idx: IntValue<'ctx>| -> R<Vec<BasicValueEnum<'ctx>>> {
            (0..nops)
                .map(|k| {
                    let p = lw.smem_at(smem, data_base[k], layout[k].0, idx)?;
                    let x = lw.b.build_load(layout[k].0, p, "sv")?;
                    lw.smem_to_register(elems[k], x)
                })
                .collect()
        };
        let store_all = |lw: &Self,
                         idx: IntValue<'ctx>,
                         vals: &[BasicValueEnum<'ctx>],
                         bases: &[u32]|
         -> R<()> {
            for k in 0..nops {
                let p = lw.smem_at(smem, bases[k], layout[k].0, idx)?;
                let x = lw.register_to_smem(elems[k], vals[k])?;
                lw.b.build_store(p, x)?;
            }
            Ok(())
        };
        // 2. Each segment in order.
        let db = data_base.clone();
        let tb = total_base.clone();
        self.when(active, |lw| {
            for li in 0..lines_per_thread {
                let line = lw.b.build_int_add(first_line, lw.i32(li as u64), "ln")?;
                let base = line_base(lw, line)?;
                let start = lw.b.build_int_mul(seg, lw.i32(seg_len as u64), "st")?;
                let mut acc: Option<Vec<BasicValueEnum>> = None;
                for j in 0..seg_len {
                    let p = lw.b.build_int_add(start, lw.i32(j as u64), "pp")?;
                    let idx = pos_index(lw, base, p)?;
                    let x = load_all(lw, idx)?;
                    let v = match acc {
                        None => x,
                        Some(a) => lw.scan_combine(op, &a, &x)?,
                    };
                    if j > 0 {
                        store_all(lw, idx, &v, &db)?;
                    }
                    acc = Some(v);
                }
                if segs > 1 {
                    let t = lw.b.build_int_mul(line, lw.i32(segs as u64), "t")?;
                    let t = lw.b.build_int_add(t, seg, "t")?;
                    store_all(lw, t, &acc.expect("seg_len > 0"), &tb)?;
                }
            }
            Ok(())
        })?;
        // 3. Segments after the first fold the totals before them into their elements.
        if segs > 1 {
            self.barrier_sync()?;
            let later = self
                .b
                .build_int_compare(IntPredicate::NE, seg, self.i32(0), "later")?;
            let go = self.b.build_and(active, later, "go")?;
            self.when(go, |lw| {
                let line = first_line;
                let tbase = lw.b.build_int_mul(line, lw.i32(segs as u64), "tb")?;
                let load_total = |lw: &Self, k: IntValue<'ctx>| -> R<Vec<BasicValueEnum<'ctx>>> {
                    let idx = lw.b.build_int_add(tbase, k, "tk")?;
                    (0..nops)
                        .map(|o| {
                            let p = lw.smem_at(smem, tb[o], layout[o].0, idx)?;
                            let x = lw.b.build_load(layout[o].0, p, "tv")?;
                            lw.smem_to_register(elems[o], x)
                        })
                        .collect()
                };
                let init = load_total(lw, lw.i32(0))?;
                // prefix = t[0] ⊕ t[1] ⊕ … ⊕ t[seg−1], in a loop.
                let pre = lw.b.get_insert_block().expect("positioned");
                let head = lw.cx.append_basic_block(lw.kernel, "scan.fold");
                let body = lw.cx.append_basic_block(lw.kernel, "scan.fold.body");
                let done = lw.cx.append_basic_block(lw.kernel, "scan.fold.done");
                lw.b.build_unconditional_branch(head)?;
                lw.b.position_at_end(head);
                let k = lw.b.build_phi(lw.cx.i32_type(), "k")?;
                k.add_incoming(&[(&lw.i32(1), pre)]);
                let mut phis = Vec::new();
                for v in &init {
                    let p = lw.b.build_phi(v.get_type(), "pf")?;
                    p.add_incoming(&[(v, pre)]);
                    phis.push(p);
                }
                let kv = k.as_basic_value().into_int_value();
                let more = lw.b.build_int_compare(IntPredicate::ULT, kv, seg, "more")?;
                lw.b.build_conditional_branch(more, body, done)?;
                lw.b.position_at_end(body);
                let cur: Vec<BasicValueEnum> = phis.iter().map(|p| p.as_basic_value()).collect();
                let t = load_total(lw, kv)?;
                let next = lw.scan_combine(op, &cur, &t)?;
                let k1 = lw.b.build_int_add(kv, lw.i32(1), "k1")?;
                let latch = lw.b.get_insert_block().expect("positioned");
                k.add_incoming(&[(&k1, latch)]);
                for (p, v) in phis.iter().zip(&next) {
                    p.add_incoming(&[(v, latch)]);
                }
                lw.b.build_unconditional_branch(head)?;
                lw.b.position_at_end(done);
                let prefix: Vec<BasicValueEnum> = phis.iter().map(|p| p.as_basic_value()).collect();
                let base = line_base(lw, line)?;
                let start = lw.b.build_int_mul(seg, lw.i32(seg_len as u64), "st")?;
                for j in 0..seg_len {
                    let p = lw.b.build_int_add(start, lw.i32(j as u64), "pp")?;
                    let idx = pos_index(lw, base, p)?;
                    let x = load_all(lw, idx)?;
                    let v = lw.scan_combine(op, &prefix, &x)?;
                    store_all(lw, idx, &v, &db)?;
                }
                Ok(())
            })?;
        }
        self.barrier_sync()?;
        // 4. Back to the result's layout.
        for (k, &r) in data.results.iter().enumerate() {
            let rty = *self.func.ty(r);
            let ptrs = self.linear_ptrs(&rty, &strides, 0, smem, data_base[k], layout[k].0)?;
            let mut vals = Vec::with_capacity(ptrs.len());
            for p in ptrs {
                let x = self.b.build_load(layout[k].0, p, "sr")?;
                vals.push(self.smem_to_register(elems[k], x)?);
            }
            self.vals.insert(r, vals);
        }
        self.smem_busy = true;
        Ok(())
    }
}
