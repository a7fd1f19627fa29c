//! Global loads and stores (vectorised, predicated) and layout conversion through shared
//! memory.
//!
//! A run of `vector` registers that are contiguous in memory moves in one instruction of up
//! to 128 bits. Unmasked accesses are plain LLVM vector loads/stores; masked ones are inline
//! PTX (`@p ld.global.v4.b32`), with masked-off lanes pre-set to `other`. Stores of replicated
//! tiles are predicated so that each element is written by one thread only.

use crate::lower::{int_type, memory_type, vector_of, Lowering, R};
use inkwell::types::BasicTypeEnum;
use inkwell::values::BasicValue;
use inkwell::values::{BasicValueEnum, InstructionOpcode, IntValue, PointerValue};
use inkwell::IntPredicate;
use tile_ir::{DType, Elem, Layout, MemAttrs, OpData, Type, Value};

/// A load that was issued but whose result is not yet split into registers.
enum Loaded<'ctx> {
    /// An LLVM load (scalar or vector of elements).
    Plain(BasicValueEnum<'ctx>),
    /// The words an inline-PTX load wrote.
    Words(Vec<BasicValueEnum<'ctx>>),
}

impl<'ctx> Lowering<'ctx, '_> {
    /// The vector width usable for a tile access: the op's `vector` if every run of that many
    /// registers is contiguous along the layout's fastest dimension, else 1.
    pub(crate) fn usable_vector(&mut self, ty: &Type, m: MemAttrs) -> R<usize> {
        let vec = (m.vector as usize).max(1);
        if ty.is_scalar() || vec == 1 {
            return Ok(1);
        }
        let g = self.geometry(ty)?;
        let layout: &Layout = &self.func.layouts[ty.layout.expect("geometry checked the layout")];
        let Some((fast, _)) = layout.contiguous_dim() else {
            return Ok(1);
        };
        if g.regs.len() % vec != 0 {
            return Ok(1);
        }
        for chunk in g.regs.chunks(vec) {
            for (i, c) in chunk.iter().enumerate() {
                let mut want = chunk[0].clone();
                want[fast] += i as u32;
                if *c != want || chunk[0][fast] % vec as u32 != 0 {
                    return Ok(1);
                }
            }
        }
        Ok(vec)
    }

    /// (word bits, word count, register width) for moving `vec` elements of `d`.
    fn words(d: DType, vec: usize) -> (u32, usize, u32) {
        let total = d.bytes() as usize * 8 * vec;
        if total >= 32 {
            (32, total / 32, 32)
        } else {
            (total as u32, 1, 16)
        }
    }

    fn word_type(&self, reg_bits: u32) -> BasicTypeEnum<'ctx> {
        int_type(self.cx, reg_bits).into()
    }

    /// Elements (register form) -> words (register width) for inline PTX.
    fn pack_words(&self, d: DType, vals: &[BasicValueEnum<'ctx>]) -> R<Vec<BasicValueEnum<'ctx>>> {
        let mt = memory_type(self.cx, d);
        let (wbits, nw, rbits) = Self::words(d, vals.len());
        if let Some(words) = self.pack_rounded_pairs(d, vals)? {
            let words = words.into_vector_value();
            return (0..nw)
                .map(|i| {
                    Ok(self
                        .b
                        .build_extract_element(words, self.i32(i as u64), "w")?)
                })
                .collect();
        }
        let whole = crate::operand::whole_vector(vals).filter(|_| d != DType::I1);
        let v = match whole {
            Some(v) => v,
            None => {
                let mut v = vector_of(mt, vals.len() as u32).get_undef();
                for (i, &x) in vals.iter().enumerate() {
                    let x = if d == DType::I1 {
                        self.b
                            .build_int_z_extend(x.into_int_value(), self.cx.i8_type(), "b2i")?
                            .into()
                    } else {
                        x
                    };
                    v = self
                        .b
                        .build_insert_element(v, x, self.i32(i as u64), "pk")?;
                }
                v
            }
        };
        let wt = int_type(self.cx, wbits);
        let words = self
            .b
            .build_bit_cast(v, wt.vec_type(nw as u32), "w")?
            .into_vector_value();
        let mut out = Vec::with_capacity(nw);
        for i in 0..nw {
            let w = self
                .b
                .build_extract_element(words, self.i32(i as u64), "w")?
                .into_int_value();
            let w = if rbits > wbits {
                self.b
                    .build_int_z_extend(w, int_type(self.cx, rbits), "w")?
            } else {
                w
            };
            out.push(w.into());
        }
        Ok(out)
    }

    /// Words (register width) -> elements (register form).
    fn unpack_words(
        &self,
        d: DType,
        vec: usize,
        words: &[BasicValueEnum<'ctx>],
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let mt = memory_type(self.cx, d);
        let (wbits, nw, rbits) = Self::words(d, vec);
        let wt = int_type(self.cx, wbits);
        let mut wv = wt.vec_type(nw as u32).get_undef();
        for (i, &w) in words.iter().enumerate() {
            let w = w.into_int_value();
            let w = if rbits > wbits {
                self.b.build_int_truncate(w, wt, "w")?
            } else {
                w
            };
            wv = self
                .b
                .build_insert_element(wv, w, self.i32(i as u64), "w")?;
        }
        let ev = self
            .b
            .build_bit_cast(wv, vector_of(mt, vec as u32), "e")?
            .into_vector_value();
        let mut out = Vec::with_capacity(vec);
        for i in 0..vec {
            let x = self.b.build_extract_element(ev, self.i32(i as u64), "e")?;
            out.push(self.memory_to_register(d, x)?);
        }
        Ok(out)
    }

    fn memory_to_register(&self, d: DType, x: BasicValueEnum<'ctx>) -> R<BasicValueEnum<'ctx>> {
        Ok(if d == DType::I1 {
            let x = x.into_int_value();
            self.b
                .build_int_compare(IntPredicate::NE, x, x.get_type().const_zero(), "i2b")?
                .into()
        } else {
            x
        })
    }

    fn register_to_memory(&self, d: DType, x: BasicValueEnum<'ctx>) -> R<BasicValueEnum<'ctx>> {
        Ok(if d == DType::I1 {
            self.b
                .build_int_z_extend(x.into_int_value(), self.cx.i8_type(), "b2i")?
                .into()
        } else {
            x
        })
    }

    pub fn load(&mut self, data: &OpData, m: MemAttrs, rty: &Type) -> R<Vec<BasicValueEnum<'ctx>>> {
        let Elem::Num(d) = rty.elem else {
            return self.unsupported("loading pointers");
        };
        let ptrs = self.get(data.operands[0])?.clone();
        let mask = if m.masked {
            Some(self.get(data.operands[1])?.clone())
        } else {
            None
        };
        let other = if m.has_other {
            Some(self.get(data.operands[2])?.clone())
        } else {
            None
        };
        let vec = self.usable_vector(rty, m)?;
        // Elements of one run (`runs`) read one address under one mask: each thread loads a
        // run once and reuses the value for its other elements there.
        let reps: Vec<usize> = match self.func.layout_of(data.results[0]) {
            Some(l) if m.has_runs() && vec == 1 => {
                let reps = l.run_representatives(rty.shape.dims(), &m.runs);
                if reps.len() == ptrs.len() {
                    reps
                } else {
                    (0..ptrs.len()).collect()
                }
            }
            _ => (0..ptrs.len().div_ceil(vec)).collect(),
        };
        let mut out = Vec::with_capacity(ptrs.len());
        let mut issued = Vec::with_capacity(ptrs.len().div_ceil(vec));
        for (k, _) in reps.iter().enumerate().filter(|&(k, &r)| r == k) {
            let at = k * vec;
            let addr = ptrs[at].into_pointer_value();
            let pred = mask
                .as_ref()
                .map(|mr| mr[at.min(mr.len() - 1)].into_int_value());
            let others = other.as_ref().map(|o| {
                (0..vec)
                    .map(|i| o[(at + i).min(o.len() - 1)])
                    .collect::<Vec<_>>()
            });
            issued.push(self.load_vector(d, vec, addr, pred, others, m)?);
        }
        // Every load of the tile is issued before any result is unpacked, so they are all in
        // flight together (ptxas keeps independent loads in this order).
        let mut loaded = Vec::with_capacity(issued.len());
        for i in issued {
            loaded.push(self.unpack_loaded(d, vec, i)?);
        }
        if loaded.len() == reps.len() {
            for l in loaded {
                out.extend(l);
            }
            if let (true, Some(mr)) = (m.prefix_mask && vec > 1, &mask) {
                // The vector was read when its first element is selected; the mask holds on a
                // prefix of it, so the rest are selected one by one.
                for (i, x) in out.iter_mut().enumerate().filter(|(i, _)| i % vec != 0) {
                    let keep = mr[i.min(mr.len() - 1)].into_int_value();
                    let alt = match &other {
                        Some(o) => o[i.min(o.len() - 1)],
                        None => x.get_type().const_zero(),
                    };
                    *x = self.b.build_select(keep, *x, alt, "pick")?;
                }
            }
        } else {
            // One element per load (`vec` is 1): element k is its run's first element's value.
            let mut next = loaded.into_iter();
            for (k, &r) in reps.iter().enumerate() {
                if r == k {
                    out.extend(next.next().expect("one load per run"));
                } else {
                    out.push(out[r]);
                }
            }
        }
        Ok(out)
    }

    /// Moves the address of an access next to it when nothing else uses it yet (predicated
    /// accesses are inline asm that marks the address `noundef`, which LLVM can see): LLVM's straight-line strength reduction asks, for every candidate basis, whether a
    /// poisoned value would be UB, scanning a few instructions forward for a memory use; with a
    /// tile's addresses computed in one run ahead of its accesses that scan finds nothing and
    /// falls back to a walk that dominated code generation (attention with unaligned pointers:
    /// `llc` 100 → 67 ms). The access itself is unchanged.
    fn address_next_to_use(&self, addr: PointerValue<'ctx>) {
        let Some(i) = addr.as_instruction() else {
            return;
        };
        if i.get_opcode() != InstructionOpcode::GetElementPtr
            || i.get_first_use().is_some()
            || i.get_parent() != self.b.get_insert_block()
        {
            return;
        }
        i.remove_from_basic_block();
        self.b.insert_instruction(&i, None);
    }

    fn load_vector(
        &mut self,
        d: DType,
        vec: usize,
        addr: PointerValue<'ctx>,
        pred: Option<IntValue<'ctx>>,
        others: Option<Vec<BasicValueEnum<'ctx>>>,
        m: MemAttrs,
    ) -> R<Loaded<'ctx>> {
        let volatile = m.volatile;
        // Volatile loads take no cache hints.
        let hint = if volatile {
            CacheHint::NONE
        } else {
            CacheHint::of(m)
        };
        let mt = memory_type(self.cx, d);
        let bytes = d.bytes() * vec as u32;
        if pred.is_none() && !volatile && hint.is_empty() {
            self.address_next_to_use(addr);
            let ty = if vec == 1 {
                mt
            } else {
                vector_of(mt, vec as u32).into()
            };
            let x = self.b.build_load(ty, addr, "ld")?;
            if let Some(i) = x.as_instruction_value() {
                i.set_alignment(bytes)
                    .map_err(|e| crate::CodegenError::Llvm(e.to_string()))?;
            }
            return Ok(Loaded::Plain(x));
        }
        let pred = pred.unwrap_or_else(|| self.cx.bool_type().const_all_ones());
        let (wbits, nw, rbits) = Self::words(d, vec);
        let init = match others {
            Some(o) => self.pack_words(d, &o)?,
            None => vec![self.word_type(rbits).const_zero(); nw],
        };
        let c = if rbits == 32 { "r" } else { "h" };
        let mut t = String::new();
        for i in 0..nw {
            t += &format!("mov.b{rbits} ${i}, ${};\n\t", nw + 2 + i);
        }
        let regs: Vec<String> = (0..nw).map(|i| format!("${i}")).collect();
        let dst = if nw > 1 {
            format!("{{ {} }}", regs.join(", "))
        } else {
            regs[0].clone()
        };
        let v = if nw > 1 {
            format!(".v{nw}")
        } else {
            String::new()
        };
        let vol = if volatile { ".volatile" } else { "" };
        t += &format!(
            "@${} ld{vol}.global{hint}{v}.b{wbits} {dst}, [ ${} + 0 ];",
            nw + 1,
            nw
        );
        let mut cons: Vec<String> = (0..nw).map(|_| format!("={c}")).collect();
        cons.push("l".into());
        cons.push("b".into());
        cons.extend((0..nw).map(|_| c.to_string()));
        let ret: BasicTypeEnum = if nw == 1 {
            self.word_type(rbits)
        } else {
            self.cx
                .struct_type(&vec![self.word_type(rbits); nw], false)
                .into()
        };
        let mut args: Vec<BasicValueEnum> = vec![addr.into(), pred.into()];
        args.extend(init);
        self.address_next_to_use(addr);
        let Some(r) = self.asm_noundef(ret, &t, &cons.join(","), &args, true, &[0])? else {
            return self.internal("load asm");
        };
        let words: Vec<BasicValueEnum> = if nw == 1 {
            vec![r]
        } else {
            (0..nw)
                .map(|i| {
                    self.b
                        .build_extract_value(r.into_struct_value(), i as u32, "w")
                })
                .collect::<Result<_, _>>()?
        };
        Ok(Loaded::Words(words))
    }

    /// Turns an issued load into register values.
    fn unpack_loaded(
        &mut self,
        d: DType,
        vec: usize,
        l: Loaded<'ctx>,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        match l {
            Loaded::Words(words) => self.unpack_words(d, vec, &words),
            Loaded::Plain(x) if vec == 1 => Ok(vec![self.memory_to_register(d, x)?]),
            Loaded::Plain(x) => {
                let mut out = Vec::with_capacity(vec);
                for i in 0..vec {
                    let e = self.b.build_extract_element(
                        x.into_vector_value(),
                        self.i32(i as u64),
                        "e",
                    )?;
                    out.push(self.memory_to_register(d, e)?);
                }
                Ok(out)
            }
        }
    }

    pub fn store(&mut self, data: &OpData, m: MemAttrs) -> R<()> {
        let pty = *self.func.ty(data.operands[0]);
        let Elem::Ptr(d) = pty.elem else {
            return self.internal("store through a non-pointer");
        };
        let ptrs = self.get(data.operands[0])?.clone();
        let vals = self.get(data.operands[1])?.clone();
        let mask = if m.masked {
            Some(self.get(data.operands[2])?.clone())
        } else {
            None
        };
        let owner = self.owner(&pty)?;
        let vec = self.usable_vector(&pty, m)?;
        let hint = CacheHint::of(m);
        for k in 0..ptrs.len().div_ceil(vec) {
            let at = k * vec;
            let addr = ptrs[at].into_pointer_value();
            let chunk: Vec<BasicValueEnum> = (0..vec)
                .map(|i| vals[(at + i).min(vals.len() - 1)])
                .collect();
            let mut pred = mask
                .as_ref()
                .map(|mr| mr[at.min(mr.len() - 1)].into_int_value());
            if let Some(o) = owner {
                pred = Some(match pred {
                    Some(p) => self.b.build_and(p, o, "p")?,
                    None => o,
                });
            }
            self.store_vector(d, addr, &chunk, pred, hint)?;
        }
        Ok(())
    }

    fn store_vector(
        &mut self,
        d: DType,
        addr: PointerValue<'ctx>,
        vals: &[BasicValueEnum<'ctx>],
        pred: Option<IntValue<'ctx>>,
        hint: CacheHint,
    ) -> R<()> {
        let vec = vals.len();
        let mt = memory_type(self.cx, d);
        let bytes = d.bytes() * vec as u32;
        // Cache hints need the instruction spelled out: an always-true predicate then.
        let pred = match pred {
            None if !hint.is_empty() => Some(self.cx.bool_type().const_all_ones()),
            p => p,
        };
        let Some(pred) = pred else {
            let st = if vec == 1 {
                let x = self.register_to_memory(d, vals[0])?;
                self.address_next_to_use(addr);
                self.b.build_store(addr, x)?
            } else if let Some(words) = self.pack_rounded_pairs(d, vals)? {
                self.address_next_to_use(addr);
                self.b.build_store(addr, words)?
            } else {
                let mut v = vector_of(mt, vec as u32).get_undef();
                for (i, &x) in vals.iter().enumerate() {
                    let x = self.register_to_memory(d, x)?;
                    v = self
                        .b
                        .build_insert_element(v, x, self.i32(i as u64), "pk")?;
                }
                self.address_next_to_use(addr);
                self.b.build_store(addr, v)?
            };
            st.set_alignment(bytes)
                .map_err(|e| crate::CodegenError::Llvm(e.to_string()))?;
            return Ok(());
        };
        let (wbits, nw, rbits) = Self::words(d, vec);
        let words = self.pack_words(d, vals)?;
        let c = if rbits == 32 { "r" } else { "h" };
        let regs: Vec<String> = (0..nw).map(|i| format!("${}", i + 2)).collect();
        let src = if nw > 1 {
            format!("{{ {} }}", regs.join(", "))
        } else {
            regs[0].clone()
        };
        let v = if nw > 1 {
            format!(".v{nw}")
        } else {
            String::new()
        };
        let t = format!("@$0 st.global{hint}{v}.b{wbits} [ $1 + 0 ], {src};");
        let mut cons = vec!["b".to_string(), "l".to_string()];
        cons.extend((0..nw).map(|_| c.to_string()));
        cons.push("~{memory}".into());
        let mut args: Vec<BasicValueEnum> = vec![pred.into(), addr.into()];
        args.extend(words);
        self.address_next_to_use(addr);
        self.asm_void_noundef(&t, &cons.join(","), &args, &[1])
    }

    pub fn barrier_sync(&mut self) -> R<()> {
        self.smem_busy = false;
        self.asm_void("bar.sync 0;", "~{memory}", &[])
    }

    /// Before writing the shared buffer: a barrier, unless no thread can still be reading it
    /// (nothing read it since the last barrier on every path here).
    pub fn fence_before_shared_write(&mut self) -> R<()> {
        if self.smem_busy {
            self.barrier_sync()?;
        }
        Ok(())
    }

    /// Writes tile `src` to the shared scratch buffer at each element's row-major index, with
    /// dimension `fast` (the last by default) moved innermost: rows of 128 bytes or more
    /// padded by 16 bytes, so column-wise accesses spread over the banks; runs of registers
    /// contiguous along `fast` as one vector of up to 16 bytes. After a barrier where a
    /// previous user may still read the buffer. Returns the buffer, its element type and each
    /// dimension's stride in elements; readers need a barrier first.
    fn write_row_major(&mut self, src: Value, fast: Option<usize>) -> R<Staged<'ctx>> {
        let sty = *self.func.ty(src);
        let regs = self.get(src)?.clone();
        let (et, ebytes): (BasicTypeEnum, u32) = match sty.elem {
            Elem::Ptr(_) => (self.cx.ptr_type(crate::lower::global()).into(), 8),
            Elem::Num(d) => (memory_type(self.cx, d), d.bytes()),
        };
        let dtype = sty.elem.dtype();
        let shape = sty.shape.dims().to_vec();
        let rank = shape.len();
        let fast = fast.unwrap_or(rank.saturating_sub(1));
        // Dimensions from the outermost in: row-major order with `fast` moved last.
        let order: Vec<usize> = (0..rank)
            .filter(|&d| d != fast)
            .chain((rank > 0).then_some(fast))
            .collect();
        let pad = match rank {
            0 | 1 => 0,
            _ if shape[fast] * ebytes >= 128 => 16 / ebytes,
            _ => 0,
        };
        let mut strides = vec![1u32; rank];
        let mut total = 1u32;
        for (k, &d) in order.iter().enumerate().rev() {
            strides[d] = total;
            total *= if k + 1 == rank {
                shape[d] + pad
            } else {
                shape[d]
            };
        }
        let aligned = self.scratch_base.is_multiple_of(16);
        let smem = self.shared_scratch(total * ebytes)?;
        let sg = self.geometry(&sty)?;
        let vs = widest_run(&sg.regs, fast, dtype.is_some(), ebytes);
        self.fence_before_shared_write()?;
        // Tensor-core fragments of 16-bit elements move as whole 8x8 matrices (`stmatrix`,
        // sm_90): one instruction per four register pairs instead of one store per pair.
        let matrices = match (dtype, sty.layout) {
            (Some(d), Some(lid))
                if self.capability >= 90
                    && stmatrix_enabled()
                    && d.bits() == 16
                    && aligned
                    && rank == 2
                    && fast == 1
                    && (strides[0] * ebytes).is_multiple_of(16) =>
            {
                let (kept, sliced) = self.func.layouts[lid].thread_maps();
                stmatrix_groups(&kept, &sliced, &shape, &sg.regs).map(|g| (d, kept, g))
            }
            _ => None,
        };
        if let Some((d, kept, groups)) = matrices {
            self.store_matrices(smem, et, d, &regs, &kept, strides[0], &groups)?;
        } else {
            let sb = self.row_major_base(&sg.thread, &strides, None)?;
            for (k, chunk) in sg.regs.chunks(vs).enumerate() {
                let idx = self.b.build_int_add(
                    sb,
                    self.i32(row_major_offset(&chunk[0], &strides, None)),
                    "i",
                )?;
                // SAFETY of the GEP: indices stay inside the buffer sized for this tile.
                let p = unsafe { self.b.build_gep(et, smem, &[idx], "sp")? };
                let vals = &regs[k * vs..(k + 1) * vs];
                match dtype {
                    Some(d) if vs > 1 => {
                        let packed = self.pack_bits(d, vals)?;
                        let st = self.b.build_store(p, packed)?;
                        st.set_alignment(vs as u32 * ebytes)
                            .map_err(|e| crate::CodegenError::Internal(e.to_string()))?;
                    }
                    Some(d) => {
                        let x = self.register_to_memory(d, vals[0])?;
                        self.b.build_store(p, x)?;
                    }
                    None => {
                        self.b.build_store(p, vals[0])?;
                    }
                }
            }
        }
        Ok(Staged {
            smem,
            et,
            ebytes,
            strides,
        })
    }

    /// Writes 16-bit tensor-core fragments (registers `regs` of a tile with thread maps
    /// `kept`) to the row-major scratch `smem` (row pitch `pitch` elements) with `stmatrix`,
    /// one instruction per group of [`stmatrix_groups`]. Lane `l` gives the address of row
    /// `l % 8` of matrix `l / 8`; matrices 0-3 of a group sit at rows +0, +8, +0, +8 and
    /// columns +0, +0, +8, +8 of the group's origin, so a lane's row is `l & 15` and its
    /// column `8 * ((l >> 4) & 1)` past the origin in every group.
    #[allow(clippy::too_many_arguments)]
    fn store_matrices(
        &mut self,
        smem: PointerValue<'ctx>,
        et: BasicTypeEnum<'ctx>,
        d: DType,
        regs: &[BasicValueEnum<'ctx>],
        kept: &[tile_ir::DimThreadMap],
        pitch: u32,
        groups: &[MatrixGroup],
    ) -> R<()> {
        let warp_only = |m: &tile_ir::DimThreadMap| tile_ir::DimThreadMap {
            lane_shift: 0,
            lane_mask: 0,
            lane_mul: 0,
            ..*m
        };
        let lane_map = |shift: u32, mask: u32, mul: u32| tile_ir::DimThreadMap {
            lane_shift: shift,
            lane_mask: mask,
            lane_mul: mul,
            warp_shift: 0,
            warp_mask: 0,
            warp_mul: 0,
        };
        let (wr, wc, lr, lc) = self.in_prologue(|lw| {
            Ok((
                lw.thread_term(&warp_only(&kept[0]))?,
                lw.thread_term(&warp_only(&kept[1]))?,
                lw.thread_term(&lane_map(0, 15, 1))?,
                lw.thread_term(&lane_map(4, 1, 8))?,
            ))
        })?;
        let row = self.b.build_int_add(wr, lr, "sm")?;
        let col = self.b.build_int_add(wc, lc, "sm")?;
        let row = self.b.build_int_mul(row, self.i32(pitch as u64), "sm")?;
        let base = self.b.build_int_add(row, col, "sm")?;
        let i32t = self.cx.i32_type();
        for g in groups {
            let at = self.i32((g.row * pitch + g.col) as u64);
            let idx = self.b.build_int_add(base, at, "sm")?;
            // SAFETY of the GEP: every matrix lies inside the tile's buffer.
            let p = unsafe { self.b.build_gep(et, smem, &[idx], "sm")? };
            let mut args: Vec<BasicValueEnum> =
                vec![self.b.build_ptr_to_int(p, i32t, "sa")?.into()];
            for &k in &g.pairs {
                let w = self.pack_bits(d, &regs[k..k + 2])?;
                args.push(self.b.build_bit_cast(w, i32t, "sw")?);
            }
            let n = g.pairs.len();
            let words: Vec<String> = (1..=n).map(|i| format!("${i}")).collect();
            let t = format!(
                "stmatrix.sync.aligned.m8n8.x{n}.shared.b16 [$0], {{{}}};",
                words.join(", ")
            );
            let mut cons = vec!["r"; n + 1].join(",");
            cons.push_str(",~{memory}");
            self.asm_void(&t, &cons, &args)?;
        }
        Ok(())
    }

    /// `sum(thread[d] * strides[d])` over the dimensions but `skip`.
    fn row_major_base(
        &self,
        thread: &[IntValue<'ctx>],
        strides: &[u32],
        skip: Option<usize>,
    ) -> R<IntValue<'ctx>> {
        let mut acc = self.i32(0);
        for (d, &t) in thread.iter().enumerate() {
            if Some(d) == skip {
                continue;
            }
            let s = self.b.build_int_mul(t, self.i32(strides[d] as u64), "s")?;
            acc = self.b.build_int_add(acc, s, "s")?;
        }
        Ok(acc)
    }

    /// Moves a tile to another layout through shared memory: every thread writes its elements
    /// at their row-major index with one dimension moved innermost ([`Self::write_row_major`]),
    /// then reads the elements the new layout gives it, in vectors of up to 16 bytes where its
    /// registers run along that dimension. Like every user of the shared buffer, it starts with
    /// a barrier (the previous user's reads are done) and needs none at the end.
    pub fn convert_layout(&mut self, src: Value, rty: &Type) -> R<Vec<BasicValueEnum<'ctx>>> {
        let sty = *self.func.ty(src);
        let dtype = sty.elem.dtype();
        let rank = sty.shape.rank();
        // Storage runs along the dimension where the two layouts' vectors are widest together
        // (the last unless another is wider: a K-contiguous fp8 tile on its way to an mma
        // operand moves in 16- and 2-byte vectors instead of bytes).
        let eb = sty.elem.bytes();
        let (sg, rg) = (self.geometry(&sty)?, self.geometry(rty)?);
        let width = |d: usize| {
            widest_run(&sg.regs, d, dtype.is_some(), eb)
                + widest_run(&rg.regs, d, dtype.is_some(), eb)
        };
        let last = rank.saturating_sub(1);
        let fast = (0..rank)
            .rev()
            .max_by_key(|&d| (width(d), d == last))
            .unwrap_or(last);
        let Staged {
            smem,
            et,
            ebytes,
            strides,
        } = self.write_row_major(src, Some(fast))?;
        self.barrier_sync()?;
        let vl = widest_run(&rg.regs, fast, dtype.is_some(), ebytes);
        let rb = self.row_major_base(&rg.thread, &strides, None)?;
        let mut out = Vec::with_capacity(rg.regs.len());
        for chunk in rg.regs.chunks(vl) {
            let idx = self.b.build_int_add(
                rb,
                self.i32(row_major_offset(&chunk[0], &strides, None)),
                "i",
            )?;
            // SAFETY of the GEP: as above.
            let p = unsafe { self.b.build_gep(et, smem, &[idx], "sp")? };
            match dtype {
                Some(d) if vl > 1 => {
                    let bits = d.bits().max(8) * vl as u32;
                    let wt: BasicTypeEnum = if bits >= 32 {
                        vector_of(self.cx.i32_type().into(), bits / 32).into()
                    } else {
                        int_type(self.cx, bits).into()
                    };
                    let ld = self.b.build_load(wt, p, "sl")?;
                    if let Some(inst) = ld.as_instruction_value() {
                        inst.set_alignment(vl as u32 * ebytes)
                            .map_err(|e| crate::CodegenError::Internal(e.to_string()))?;
                    }
                    let v = self
                        .b
                        .build_bit_cast(ld, vector_of(memory_type(self.cx, d), vl as u32), "sv")?
                        .into_vector_value();
                    for k in 0..vl {
                        let x = self.b.build_extract_element(v, self.i32(k as u64), "se")?;
                        out.push(self.memory_to_register(d, x)?);
                    }
                }
                Some(d) => {
                    let x = self.b.build_load(et, p, "sl")?;
                    out.push(self.memory_to_register(d, x)?);
                }
                None => out.push(self.b.build_load(et, p, "sl")?),
            }
        }
        self.smem_busy = true;
        Ok(out)
    }

    /// Triton's `gather` along `axis`: `src` is written to shared memory
    /// ([`Self::write_row_major`]); each result element then reads the element at its own
    /// coordinates but along `axis`, where it reads at its index. The index tile has the
    /// result's layout, so register `k` of both is the same element.
    pub fn gather(
        &mut self,
        src: Value,
        index: Value,
        axis: usize,
        rty: &Type,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let Staged {
            smem, et, strides, ..
        } = self.write_row_major(src, None)?;
        let dtype = self.func.ty(src).elem.dtype();
        let idx_ty = *self.func.ty(index);
        let idx_regs = self.get(index)?.clone();
        self.barrier_sync()?;
        let rg = self.geometry(rty)?;
        let rb = self.row_major_base(&rg.thread, &strides, Some(axis))?;
        let i32t = self.cx.i32_type();
        let mut out = Vec::with_capacity(rg.regs.len());
        for (k, c) in rg.regs.iter().enumerate() {
            let at = self.i32(row_major_offset(c, &strides, Some(axis)));
            let mut i = idx_regs[k].into_int_value();
            let bits = i.get_type().get_bit_width();
            if bits > 32 {
                i = self.b.build_int_truncate(i, i32t, "gi")?;
            } else if bits < 32 {
                let signed = idx_ty.dtype().is_some_and(|d| d.is_signed());
                i = if signed {
                    self.b.build_int_s_extend(i, i32t, "gi")?
                } else {
                    self.b.build_int_z_extend(i, i32t, "gi")?
                };
            }
            let along = self
                .b
                .build_int_mul(i, self.i32(strides[axis] as u64), "ga")?;
            let idx = self
                .b
                .build_int_add(self.b.build_int_add(rb, at, "g")?, along, "g")?;
            // SAFETY of the GEP: in the buffer for in-range indices (Triton's contract; an index
            // outside `src` reads some other shared memory, never outside the CTA's).
            let p = unsafe { self.b.build_gep(et, smem, &[idx], "gp")? };
            let x = self.b.build_load(et, p, "gl")?;
            out.push(match dtype {
                Some(d) => self.memory_to_register(d, x)?,
                None => x,
            });
        }
        self.smem_busy = true;
        Ok(out)
    }
}

/// Whether 16-bit fragments may leave through `stmatrix`: unless `TILES_STMATRIX=0` (to
/// compare).
fn stmatrix_enabled() -> bool {
    std::env::var("TILES_STMATRIX").map_or(true, |v| v != "0")
}

/// One `stmatrix`: its matrices' origin (row, column) relative to the thread's warp, and the
/// first register of each matrix's pair, in the order rows +0, +8 then columns +8.
#[derive(Debug, PartialEq)]
struct MatrixGroup {
    row: u32,
    col: u32,
    pairs: Vec<usize>,
}

/// How a 2-d tile of 16-bit elements is written with `stmatrix`, if its layout is a
/// tensor-core fragment: lanes spread as an 8x8 matrix's fragment (row `l / 4`, columns
/// `2 * (l % 4)` and the next), registers in pairs along the row, each pair at a column
/// that is a multiple of 8, no thread holding copies (the layout covers at most the tile).
/// Pairs are grouped four to an instruction where their matrices form a 16x16 square, else
/// two (rows +0, +8), else alone; `None` where the layout is not such a fragment.
fn stmatrix_groups(
    kept: &[tile_ir::DimThreadMap],
    sliced: &[tile_ir::DimThreadMap],
    shape: &[u32],
    regs: &[Vec<u32>],
) -> Option<Vec<MatrixGroup>> {
    if kept.len() != 2 || shape.len() != 2 || regs.is_empty() || !regs.len().is_multiple_of(2) {
        return None;
    }
    let lanes = |m: &tile_ir::DimThreadMap| (m.lane_shift, m.lane_mask, m.lane_mul);
    if lanes(&kept[0]) != (2, 7, 1) || lanes(&kept[1]) != (0, 3, 2) {
        return None;
    }
    if sliced.iter().any(|m| m.lane_mask != 0) {
        return None;
    }
    let covered =
        |m: &tile_ir::DimThreadMap| (m.lane_mask + 1) * m.lane_mul + m.warp_mask * m.warp_mul;
    if covered(&kept[0]) > shape[0] || covered(&kept[1]) > shape[1] {
        return None;
    }
    if kept[1].warp_mask != 0 && !kept[1].warp_mul.is_multiple_of(8) {
        return None;
    }
    let mut at = std::collections::HashMap::new();
    for (i, pair) in regs.chunks(2).enumerate() {
        let (r, c) = (pair[0][0], pair[0][1]);
        if pair[1] != [r, c + 1] || !c.is_multiple_of(8) {
            return None;
        }
        if at.insert((r, c), 2 * i).is_some() {
            return None;
        }
    }
    let mut used = vec![false; regs.len() / 2];
    let mut groups = Vec::new();
    for (i, pair) in regs.chunks(2).enumerate() {
        if used[i] {
            continue;
        }
        let (r, c) = (pair[0][0], pair[0][1]);
        let free =
            |rr: u32, cc: u32, used: &[bool]| at.get(&(rr, cc)).copied().filter(|&k| !used[k / 2]);
        let square = [(r, c), (r + 8, c), (r, c + 8), (r + 8, c + 8)];
        let picked: Vec<usize> = if let Some(v) = square
            .iter()
            .map(|&(rr, cc)| free(rr, cc, &used))
            .collect::<Option<Vec<_>>>()
        {
            v
        } else if let Some(k) = free(r + 8, c, &used) {
            vec![2 * i, k]
        } else {
            vec![2 * i]
        };
        for &k in &picked {
            used[k / 2] = true;
        }
        groups.push(MatrixGroup {
            row: r,
            col: c,
            pairs: picked,
        });
    }
    Some(groups)
}

/// A tile written to shared memory in row-major order ([`Lowering::write_row_major`]).
struct Staged<'ctx> {
    smem: inkwell::values::PointerValue<'ctx>,
    et: BasicTypeEnum<'ctx>,
    ebytes: u32,
    strides: Vec<u32>,
}

/// `sum(c[d] * strides[d])` over the dimensions but `skip`.
fn row_major_offset(c: &[u32], strides: &[u32], skip: Option<usize>) -> u64 {
    c.iter()
        .zip(strides)
        .enumerate()
        .filter(|(d, _)| Some(*d) != skip)
        .map(|(_, (&x, &s))| (x * s) as u64)
        .sum()
}

/// The widest vector (at most 16 bytes) of registers contiguous and aligned along dimension
/// `fast`, in which a tile with these register coordinates can move.
fn widest_run(regs: &[Vec<u32>], fast: usize, numeric: bool, ebytes: u32) -> usize {
    if regs.first().is_none_or(|c| c.len() <= fast) || !numeric {
        return 1;
    }
    contiguous_run(regs, fast, (16 / ebytes).max(1) as usize)
}

/// The longest run, `max` halved until it fits, such that the registers split into runs of
/// that many consecutive elements along dimension `dim`, each starting at a multiple of it.
pub(crate) fn contiguous_run(regs: &[Vec<u32>], dim: usize, max: usize) -> usize {
    let mut v = max.max(1);
    while v > 1 {
        let ok = regs.len().is_multiple_of(v)
            && regs.chunks(v).all(|ch| {
                ch[0][dim] % v as u32 == 0
                    && ch.iter().enumerate().all(|(k, c)| {
                        let mut want = ch[0].clone();
                        want[dim] += k as u32;
                        *c == want
                    })
            });
        if ok {
            break;
        }
        v /= 2;
    }
    v
}

impl<'ctx> Lowering<'ctx, '_> {
    /// Atomics, one element per instruction, executed only by the thread owning each element;
    /// the old values are then shared with the copies through shared memory.
    pub fn lower_atomic(
        &mut self,
        data: &OpData,
        a: tile_ir::AtomicAttrs,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        use tile_ir::{AtomicOp, MemScope, MemSem};
        let pty = *self.func.ty(data.operands[0]);
        let Elem::Ptr(d) = pty.elem else {
            return self.internal("atomic through a non-pointer");
        };
        let ptrs = self.get(data.operands[0])?.clone();
        let is_cas = a.op == AtomicOp::Cas;
        let cmp = if is_cas {
            Some(self.get(data.operands[1])?.clone())
        } else {
            None
        };
        let vals = self.get(data.operands[if is_cas { 2 } else { 1 }])?.clone();
        let mask = if a.masked {
            Some(self.get(*data.operands.last().expect("mask"))?.clone())
        } else {
            None
        };
        let owner = self.owner(&pty)?;
        let bits = d.bits().max(8);
        let ty = match (a.op, d) {
            (AtomicOp::Add, DType::F32) => "f32",
            (AtomicOp::Add, DType::F64) => "f64",
            (AtomicOp::Add, DType::F16) => "noftz.f16",
            (AtomicOp::Add, DType::BF16) => "noftz.bf16",
            (AtomicOp::Add, _) if d.is_int() && bits == 32 => "u32",
            (AtomicOp::Add, _) if d.is_int() && bits == 64 => "u64",
            (AtomicOp::Max | AtomicOp::Min, DType::I32) => "s32",
            (AtomicOp::Max | AtomicOp::Min, DType::U32) => "u32",
            (AtomicOp::Max | AtomicOp::Min, DType::I64) => "s64",
            (AtomicOp::Max | AtomicOp::Min, DType::U64) => "u64",
            (AtomicOp::And | AtomicOp::Or | AtomicOp::Xor | AtomicOp::Xchg | AtomicOp::Cas, _)
                if matches!(bits, 32 | 64) || (is_cas && bits == 16) =>
            {
                if bits == 64 {
                    "b64"
                } else if bits == 32 {
                    "b32"
                } else {
                    "b16"
                }
            }
            _ => return self.unsupported(format!("atomic_{} on {d}", a.op.name())),
        };
        let opname = match a.op {
            AtomicOp::Xchg => "exch",
            other => other.name(),
        };
        let sem = match a.sem {
            MemSem::Relaxed => "relaxed",
            MemSem::Acquire => "acquire",
            MemSem::Release => "release",
            MemSem::AcqRel => "acq_rel",
        };
        let scope = match a.scope {
            MemScope::Cta => "cta",
            MemScope::Gpu => "gpu",
            MemScope::Sys => "sys",
        };
        let (c, wbits) = match bits {
            64 => ("l", 64),
            16 => ("h", 16),
            _ => ("r", 32),
        };
        let wt = int_type(self.cx, wbits);
        // Qualifiers in the order Triton's PTX has them (ptxas takes any order; tools and
        // Triton's tests look for these spellings).
        let template = if is_cas {
            format!("mov.b{wbits} $0, 0;\n\t@$1 atom.global.{sem}.{scope}.{opname}.{ty} $0, [ $2 + 0 ], $3, $4;")
        } else {
            format!("mov.b{wbits} $0, 0;\n\t@$1 atom.global.{scope}.{sem}.{opname}.{ty} $0, [ $2 + 0 ], $3;")
        };
        let cons = if is_cas {
            format!("={c},b,l,{c},{c},~{{memory}}")
        } else {
            format!("={c},b,l,{c},~{{memory}}")
        };
        let to_word = |lw: &Self, v: BasicValueEnum<'ctx>| -> R<BasicValueEnum<'ctx>> {
            Ok(if v.is_float_value() {
                lw.b.build_bit_cast(v, wt, "w")?
            } else {
                v
            })
        };
        let et = crate::lower::dtype_type(self.cx, d);
        let mut out = Vec::with_capacity(ptrs.len());
        for i in 0..ptrs.len() {
            let mut pred = mask
                .as_ref()
                .map(|m| m[i.min(m.len() - 1)].into_int_value());
            if let Some(o) = owner {
                pred = Some(match pred {
                    Some(p) => self.b.build_and(p, o, "p")?,
                    None => o,
                });
            }
            let pred = pred.unwrap_or_else(|| self.cx.bool_type().const_all_ones());
            let mut args: Vec<BasicValueEnum> = vec![pred.into(), ptrs[i]];
            if let Some(cm) = &cmp {
                args.push(to_word(self, cm[i.min(cm.len() - 1)])?);
            }
            args.push(to_word(self, vals[i.min(vals.len() - 1)])?);
            let Some(old) = self.asm(wt.into(), &template, &cons, &args, true)? else {
                return self.internal("atomic asm");
            };
            out.push(if et.is_float_type() {
                self.b.build_bit_cast(old, et, "old")?
            } else {
                old
            });
        }
        let used = !data.results.is_empty();
        if used && owner.is_some() {
            out = self.broadcast_from_owners(&pty, d, out)?;
        }
        Ok(out)
    }

    /// Copies values computed by the owning thread of each element to every copy.
    fn broadcast_from_owners(
        &mut self,
        pty: &Type,
        d: DType,
        vals: Vec<BasicValueEnum<'ctx>>,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let et = memory_type(self.cx, d);
        let numel = pty.shape.numel().max(1) as u32;
        let smem = self.shared_scratch(numel * d.bytes())?;
        let owner = self.owner(pty)?.expect("called with replication");
        let idx: Vec<inkwell::values::IntValue<'ctx>> = if pty.is_scalar() {
            vec![self.i32(0)]
        } else {
            let g = self.geometry(pty)?;
            let shape = pty.shape.dims().to_vec();
            let mut strides = vec![1u32; shape.len()];
            for k in (0..shape.len().saturating_sub(1)).rev() {
                strides[k] = strides[k + 1] * shape[k + 1];
            }
            let mut v = Vec::with_capacity(g.regs.len());
            for c in g.regs.iter() {
                let mut acc = self.i32(0);
                for (k, &t) in g.thread.iter().enumerate() {
                    let x = self.b.build_int_add(t, self.i32(c[k] as u64), "c")?;
                    let x = self.b.build_int_mul(x, self.i32(strides[k] as u64), "c")?;
                    acc = self.b.build_int_add(acc, x, "c")?;
                }
                v.push(acc);
            }
            v
        };
        self.fence_before_shared_write()?;
        for (i, &x) in vals.iter().enumerate() {
            // SAFETY of the GEP: the index is an element of this tile.
            let p = unsafe { self.b.build_gep(et, smem, &[idx[i]], "bp")? };
            let x = self.register_to_memory(d, x)?;
            let then_bb = self.cx.append_basic_block(self.kernel, "bcast.w");
            let cont = self.cx.append_basic_block(self.kernel, "bcast.c");
            self.b.build_conditional_branch(owner, then_bb, cont)?;
            self.b.position_at_end(then_bb);
            self.b.build_store(p, x)?;
            self.b.build_unconditional_branch(cont)?;
            self.b.position_at_end(cont);
        }
        self.barrier_sync()?;
        let mut out = Vec::with_capacity(vals.len());
        for &ix in &idx {
            // SAFETY of the GEP: as above.
            let p = unsafe { self.b.build_gep(et, smem, &[ix], "bp")? };
            let x = self.b.build_load(et, p, "bl")?;
            out.push(self.memory_to_register(d, x)?);
        }
        self.smem_busy = true;
        Ok(out)
    }
}

/// The PTX qualifier of an access's cache operator (`.cg`) or, without one, its L1 eviction
/// priority (`.L1::evict_last`): PTX takes one or the other. Printed where the instruction
/// names it; empty for neither.
#[derive(Copy, Clone)]
struct CacheHint(&'static str, &'static str);

impl CacheHint {
    const NONE: CacheHint = CacheHint("", "");

    fn of(m: MemAttrs) -> CacheHint {
        let name = |table: &[&'static str], i: u8| table.get(usize::from(i)).copied().unwrap_or("");
        match (
            name(&tile_ir::CACHE_MODIFIERS, m.cache),
            name(&tile_ir::EVICTION_POLICIES, m.evict),
        ) {
            ("", "") => CacheHint::NONE,
            ("", evict) => CacheHint(".L1::", evict),
            (cache, _) => CacheHint(".", cache),
        }
    }

    fn is_empty(self) -> bool {
        self.1.is_empty()
    }
}

impl std::fmt::Display for CacheHint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.0, self.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tile_ir::{BlockedLayout, DimThreadMap, MmaLayout};

    fn at(m: &DimThreadMap, lane: u32, warp: u32) -> u32 {
        ((lane >> m.lane_shift) & m.lane_mask) * m.lane_mul
            + ((warp >> m.warp_shift) & m.warp_mask) * m.warp_mul
    }

    /// Plays `stmatrix` out for every warp and lane: row `i` of matrix `m` goes to the address
    /// lane `8m + i` gives (`store_matrices`' formula), its element `j` comes from lane
    /// `4i + j / 2`, register `j % 2` of the pair. Each element must land at its own row-major
    /// place, and every element of the tile must be written.
    fn check(layout: &Layout, shape: [u32; 2]) -> usize {
        let (kept, sliced) = layout.thread_maps();
        let regs = layout.register_offsets(&shape);
        let groups = stmatrix_groups(&kept, &sliced, &shape, &regs).expect("a fragment layout");
        let mut written = std::collections::HashSet::new();
        for warp in 0..layout.num_warps() {
            let base = |lane: u32| [at(&kept[0], lane, warp), at(&kept[1], lane, warp)];
            for g in &groups {
                for (m, &k) in g.pairs.iter().enumerate() {
                    for i in 0..8u32 {
                        let lane = 8 * m as u32 + i;
                        let row = at(&kept[0], 0, warp) + (lane & 15) + g.row;
                        let col = at(&kept[1], 0, warp) + 8 * ((lane >> 4) & 1) + g.col;
                        for j in 0..8u32 {
                            let src = base(4 * i + j / 2);
                            let reg = &regs[k + (j % 2) as usize];
                            let coord = (src[0] + reg[0], src[1] + reg[1]);
                            assert_eq!(coord, (row, col + j), "{layout:?} {shape:?} {g:?}");
                            written.insert(coord);
                        }
                    }
                }
            }
        }
        assert_eq!(
            written.len() as u32,
            shape[0] * shape[1],
            "{layout:?} {shape:?}"
        );
        groups.len()
    }

    #[test]
    fn stmatrix_writes_each_fragment_element_at_its_place() {
        for warps in [1, 2, 4, 8] {
            for (m, n) in [
                (16, 8),
                (16, 16),
                (32, 32),
                (64, 64),
                (128, 128),
                (128, 256),
                (64, 8),
            ] {
                let l = MmaLayout::for_shape(m, n, warps);
                let (wm, wn) = l.wm_wn();
                if m < 16 * wm || n < 8 * wn {
                    continue;
                }
                check(&Layout::Mma(l), [m, n]);
            }
        }
        for (warps, instr_n, shape) in [
            ([4, 1], 128, [128, 128]),
            ([4, 1], 64, [64, 64]),
            ([8, 1], 256, [128, 256]),
            ([4, 2], 128, [128, 256]),
            ([4, 1], 8, [64, 8]),
        ] {
            let l = MmaLayout {
                warps_per_cta: warps.to_vec(),
                version: 3,
                instr_n,
            };
            check(&Layout::Mma(l), shape);
        }
        // Four pairs to an instruction where the warp's tile allows it.
        let wg = MmaLayout {
            warps_per_cta: vec![4, 1],
            version: 3,
            instr_n: 128,
        };
        assert_eq!(check(&Layout::Mma(wg), [128, 128]), 16);
    }

    #[test]
    fn blocked_layouts_are_not_fragments() {
        let b = BlockedLayout::default_for(&[64, 64], 4, &[1, 0], 8);
        let l = Layout::Blocked(b);
        let (kept, sliced) = l.thread_maps();
        let regs = l.register_offsets(&[64, 64]);
        assert_eq!(stmatrix_groups(&kept, &sliced, &[64, 64], &regs), None);
    }
}
