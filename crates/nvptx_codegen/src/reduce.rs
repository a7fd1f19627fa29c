//! Reductions: within a thread, across the lanes of a warp with butterfly shuffles, across
//! warps through shared memory.
//!
//! 1. Each thread folds its registers that share every coordinate but the reduced one.
//! 2. Lanes that hold *distinct* data along the axis exchange partials with
//!    `shfl.sync.bfly` (lanes beyond them hold copies: the layout wraps a small tile).
//! 3. If several warps hold distinct data along the axis, each writes its partial to shared
//!    memory, a barrier, then every thread folds the partials of the outputs it holds.
//!
//! The combine function is the op's region, lowered afresh at each use on scalars.

use crate::lower::{int_type, Lowering, R};
use inkwell::values::BasicValueEnum;
use std::collections::HashMap;
use tile_ir::{Elem, Op, Type};

impl<'ctx> Lowering<'ctx, '_> {
    /// Runs the combine region on (accumulators, new values).
    fn combine(
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

    /// `shfl.sync.bfly` of any scalar: widened or split into 32-bit words.
    fn shuffle_xor(
        &mut self,
        v: BasicValueEnum<'ctx>,
        elem: Elem,
        offset: u32,
    ) -> R<BasicValueEnum<'ctx>> {
        let i32t = self.cx.i32_type();
        let shfl =
            |lw: &Self, w: inkwell::values::IntValue<'ctx>| -> R<inkwell::values::IntValue<'ctx>> {
                let r = lw.asm(
                    i32t.into(),
                    "shfl.sync.bfly.b32 $0, $1, $2, 0x1f, -1;",
                    "=r,r,r",
                    &[w.into(), lw.i32(offset as u64).into()],
                    true,
                )?;
                match r {
                    Some(r) => Ok(r.into_int_value()),
                    None => lw.internal("shuffle"),
                }
            };
        let bits = match elem {
            Elem::Ptr(_) => 64,
            Elem::Num(d) => d.bits(),
        };
        let it = int_type(self.cx, bits.max(1));
        let as_int = match elem {
            Elem::Ptr(_) => {
                self.b
                    .build_ptr_to_int(v.into_pointer_value(), self.cx.i64_type(), "p")?
            }
            _ if v.is_float_value() => self.b.build_bit_cast(v, it, "b")?.into_int_value(),
            _ => v.into_int_value(),
        };
        let out = if bits == 64 {
            let lo = self.b.build_int_truncate(as_int, i32t, "lo")?;
            let hi = self.b.build_right_shift(
                as_int,
                self.cx.i64_type().const_int(32, false),
                false,
                "hi",
            )?;
            let hi = self.b.build_int_truncate(hi, i32t, "hi")?;
            let (lo, hi) = (shfl(self, lo)?, shfl(self, hi)?);
            let lo = self.b.build_int_z_extend(lo, self.cx.i64_type(), "lo")?;
            let hi = self.b.build_int_z_extend(hi, self.cx.i64_type(), "hi")?;
            let hi = self
                .b
                .build_left_shift(hi, self.cx.i64_type().const_int(32, false), "hi")?;
            self.b.build_or(lo, hi, "w")?
        } else {
            let w = if bits < 32 {
                self.b.build_int_z_extend(as_int, i32t, "w")?
            } else {
                as_int
            };
            let s = shfl(self, w)?;
            if bits < 32 {
                self.b.build_int_truncate(s, it, "t")?
            } else {
                s
            }
        };
        Ok(match elem {
            Elem::Ptr(_) => self
                .b
                .build_int_to_ptr(out, self.cx.ptr_type(crate::lower::global()), "p")?
                .into(),
            _ if v.is_float_value() => self.b.build_bit_cast(out, v.get_type(), "f")?,
            _ => out.into(),
        })
    }

    pub fn lower_reduce(&mut self, op: Op, axis: usize) -> R<()> {
        let data = self.func.ops[op].clone();
        let n = data.operands.len();
        let in_ty: Type = *self.func.ty(data.operands[0]);
        let elems: Vec<Elem> = data
            .operands
            .iter()
            .map(|&v| self.func.ty(v).elem)
            .collect();
        let inputs: Vec<Vec<BasicValueEnum>> = data
            .operands
            .iter()
            .map(|&v| self.get(v).cloned())
            .collect::<R<_>>()?;
        let g = self.geometry(&in_ty)?;
        let shape = in_ty.shape.dims().to_vec();
        let layout = self.func.layouts[in_ty.layout.expect("geometry checked")].clone();
        // 1. Fold within the thread, grouping registers by their coordinates off the axis.
        // Each group folds as a balanced tree of neighbours, in order (the lanes and warps
        // below combine as a tree too): a float sum's rounding error then grows with the log
        // of a thread's element count instead of the count, and the folds of one level are
        // independent of each other.
        let mut keys: Vec<Vec<u32>> = Vec::new();
        let mut groups: Vec<Vec<Vec<BasicValueEnum>>> = Vec::new();
        let mut index: HashMap<Vec<u32>, usize> = HashMap::new();
        for (i, c) in g.regs.iter().enumerate() {
            let mut key = c.clone();
            key.remove(axis);
            let new: Vec<BasicValueEnum> = (0..n).map(|k| inputs[k][i]).collect();
            match index.get(&key) {
                Some(&gi) => groups[gi].push(new),
                None => {
                    index.insert(key.clone(), groups.len());
                    keys.push(key);
                    groups.push(vec![new]);
                }
            }
        }
        let mut acc: Vec<Vec<BasicValueEnum>> = Vec::with_capacity(groups.len());
        for mut level in groups {
            while level.len() > 1 {
                let mut next = Vec::with_capacity(level.len().div_ceil(2));
                let mut it = level.into_iter();
                while let Some(a) = it.next() {
                    next.push(match it.next() {
                        Some(b) => self.combine(op, &a, &b)?,
                        None => a,
                    });
                }
                level = next;
            }
            match level.pop() {
                Some(v) => acc.push(v),
                None => return self.internal("an empty reduction group"),
            }
        }
        // 2. Across lanes holding distinct data along the axis.
        let (maps, _) = layout.thread_maps();
        let m = maps[axis];
        let size = shape[axis] as u64;
        let spt = m.lane_mul.max(1) as u64;
        let lanes = (m.lane_mask as u64 + 1).min((size / spt).max(1));
        for bit in 0..lanes.trailing_zeros() {
            let offset = 1u32 << (m.lane_shift + bit);
            for a in acc.iter_mut() {
                let mut other = Vec::with_capacity(n);
                for k in 0..n {
                    other.push(self.shuffle_xor(a[k], elems[k], offset)?);
                }
                *a = self.combine(op, a, &other)?;
            }
        }
        // 3. Across warps holding distinct data along the axis.
        // Warps hold distinct data while their offset (warp_mul apart) stays inside the axis.
        let warps = (m.warp_mask as u64 + 1).min((size / (m.warp_mul as u64).max(1)).max(1));
        if warps > 1 {
            acc = self.reduce_across_warps(
                op,
                &in_ty,
                axis,
                &g,
                &keys,
                acc,
                &elems,
                warps as u32,
                m,
            )?;
        }
        // Results in the result layout's register order.
        for (k, &r) in data.results.iter().enumerate() {
            let rty = *self.func.ty(r);
            if rty.is_scalar() {
                self.vals.insert(r, vec![acc[0][k]]);
                continue;
            }
            let rg = self.geometry(&rty)?;
            let mut out = Vec::with_capacity(rg.regs.len());
            for c in rg.regs.iter() {
                match index.get(c) {
                    Some(&gi) => out.push(acc[gi][k]),
                    None => return self.internal("reduce result layout does not line up"),
                }
            }
            self.vals.insert(r, out);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn reduce_across_warps(
        &mut self,
        op: Op,
        in_ty: &Type,
        axis: usize,
        g: &crate::lower::Geometry<'ctx>,
        keys: &[Vec<u32>],
        acc: Vec<Vec<BasicValueEnum<'ctx>>>,
        elems: &[Elem],
        warps: u32,
        m: tile_ir::DimThreadMap,
    ) -> R<Vec<Vec<BasicValueEnum<'ctx>>>> {
        let n = elems.len();
        let mut out_shape = in_ty.shape.dims().to_vec();
        out_shape.remove(axis);
        let numel: u32 = out_shape.iter().product::<u32>().max(1);
        let mut strides = vec![1u32; out_shape.len()];
        for d in (0..out_shape.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * out_shape[d + 1];
        }
        let mut thread: Vec<_> = g.thread.clone();
        thread.remove(axis);
        // Operand k's partials live at byte offset base[k]: [numel][warps] elements.
        let mut base = Vec::with_capacity(n);
        let mut total = 0u32;
        let mut types = Vec::with_capacity(n);
        for &e in elems {
            let (t, bytes): (inkwell::types::BasicTypeEnum, u32) = match e {
                Elem::Ptr(_) => (self.cx.ptr_type(crate::lower::global()).into(), 8),
                Elem::Num(d) => (crate::lower::memory_type(self.cx, d), d.bytes()),
            };
            total = total.next_multiple_of(bytes);
            base.push(total);
            total += numel * warps * bytes;
            types.push((t, bytes));
        }
        let smem = self.shared_scratch(total)?;
        let i8t = self.cx.i8_type();
        let wid =
            self.b
                .build_right_shift(self.warp(), self.i32(m.warp_shift as u64), false, "w")?;
        let wid = self.b.build_and(wid, self.i32((warps - 1) as u64), "w")?;
        let tbase = {
            let mut acc_i = self.i32(0);
            for (d, &t) in thread.iter().enumerate() {
                let s = self.b.build_int_mul(t, self.i32(strides[d] as u64), "s")?;
                acc_i = self.b.build_int_add(acc_i, s, "s")?;
            }
            acc_i
        };
        let slot = |lw: &Self,
                    gi: usize,
                    k: usize,
                    w: inkwell::values::IntValue<'ctx>|
         -> R<inkwell::values::PointerValue<'ctx>> {
            let lin: u64 = keys[gi]
                .iter()
                .zip(&strides)
                .map(|(&c, &s)| (c * s) as u64)
                .sum();
            let idx = lw.b.build_int_add(tbase, lw.i32(lin), "o")?;
            let idx = lw.b.build_int_mul(idx, lw.i32(warps as u64), "o")?;
            let idx = lw.b.build_int_add(idx, w, "o")?;
            let bytes = lw.b.build_int_mul(idx, lw.i32(types[k].1 as u64), "b")?;
            let bytes = lw.b.build_int_add(bytes, lw.i32(base[k] as u64), "b")?;
            // SAFETY of the GEP: the index stays inside the buffer sized above.
            Ok(unsafe { lw.b.build_gep(i8t, smem, &[bytes], "sp")? })
        };
        self.fence_before_shared_write()?;
        for (gi, a) in acc.iter().enumerate() {
            for k in 0..n {
                let p = slot(self, gi, k, wid)?;
                let v = self.register_to_memory_form(elems[k], a[k])?;
                self.b.build_store(p, v)?;
            }
        }
        self.barrier_sync()?;
        let mut out = Vec::with_capacity(acc.len());
        for gi in 0..acc.len() {
            let mut cur: Option<Vec<BasicValueEnum>> = None;
            for w in 0..warps {
                let mut vals = Vec::with_capacity(n);
                for k in 0..n {
                    let p = slot(self, gi, k, self.i32(w as u64))?;
                    let x = self.b.build_load(types[k].0, p, "pw")?;
                    vals.push(self.memory_form_to_register(elems[k], x)?);
                }
                cur = Some(match cur {
                    Some(c) => self.combine(op, &c, &vals)?,
                    None => vals,
                });
            }
            out.push(cur.expect("warps > 1"));
        }
        // No trailing barrier: the next writer of the shared buffer fences first.
        self.smem_busy = true;
        Ok(out)
    }

    fn register_to_memory_form(&self, e: Elem, v: BasicValueEnum<'ctx>) -> R<BasicValueEnum<'ctx>> {
        Ok(match e {
            Elem::Num(tile_ir::DType::I1) => self
                .b
                .build_int_z_extend(v.into_int_value(), self.cx.i8_type(), "b")?
                .into(),
            _ => v,
        })
    }

    fn memory_form_to_register(&self, e: Elem, v: BasicValueEnum<'ctx>) -> R<BasicValueEnum<'ctx>> {
        Ok(match e {
            Elem::Num(tile_ir::DType::I1) => self
                .b
                .build_int_compare(
                    inkwell::IntPredicate::NE,
                    v.into_int_value(),
                    self.cx.i8_type().const_zero(),
                    "b",
                )?
                .into(),
            _ => v,
        })
    }
}
