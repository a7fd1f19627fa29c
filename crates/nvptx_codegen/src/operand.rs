//! `dot` operands in shared memory: a tile is written once in a swizzled row-major layout and
//! read back fragment by fragment (`ldmatrix` where the shapes allow), one K step at a time,
//! so registers hold only the fragments of the current step.
//!
//! Storage: the tile's memory-contiguous dimension is the row. Rows longer than 128 bytes are
//! cut into 128-byte column blocks stored one after the other (block `b` holds columns
//! `b·W .. (b+1)·W` of every row). A row (of a block) is cut into 16-byte chunks; chunk `c` of
//! row `r` is stored at chunk `c ^ ((r / per_phase) mod max_phase)`. The eight rows one
//! `ldmatrix` phase reads then fall in eight different bank groups, and the tile is exactly
//! the canonical 128/64/32-byte swizzled layout `wgmma` reads through matrix descriptors
//! (its start 1024-byte aligned). Ring slots that only CUDA-core dots read as a K-contiguous
//! `b` XOR the row's group of `per_phase * max_phase` rows into the phase as well
//! ([`Swizzle::mix`]): their warps read rows 8 apart at once.

use crate::lower::{int_type, Geometry, Lowering, R};
use inkwell::types::BasicTypeEnum;
use inkwell::values::{BasicValue, BasicValueEnum, InstructionOpcode, IntValue, PointerValue};
use std::collections::{HashMap, HashSet};
use tile_ir::{DType, Elem, Op, OpKind, Value};

/// The XOR swizzle of 16-byte chunks.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Swizzle {
    /// Elements per 16-byte chunk.
    pub vec: u32,
    /// Consecutive rows sharing one phase.
    pub per_phase: u32,
    /// Number of distinct phases.
    pub max_phase: u32,
    /// The phase also takes the row's group of `per_phase * max_phase` (XORed in): rows one
    /// period apart then differ in phase too. For ring slots only CUDA-core dots read as a
    /// K-contiguous `b`, whose warps read rows 8 apart in one instruction (`plan_rings`);
    /// wgmma and ldmatrix need the plain pattern.
    pub mix: bool,
}

impl Swizzle {
    /// The swizzle for rows of `cols` elements of `eb` bytes.
    pub fn for_rows(cols: u32, eb: u32) -> Swizzle {
        let row_bytes = cols * eb;
        let vec = (16 / eb).max(1);
        let per_phase = (128 / row_bytes.max(1)).max(1);
        let max_phase = (row_bytes / 16).clamp(1, 8);
        Swizzle {
            vec,
            per_phase,
            max_phase,
            mix: false,
        }
    }
}

/// A 2-D tile in shared memory.
#[derive(Copy, Clone)]
pub(crate) struct SmemTile<'ctx> {
    /// Start of the tile (shared address space).
    pub base: PointerValue<'ctx>,
    /// The tile's shape.
    pub dims: [u32; 2],
    /// The tile dimension that is contiguous in storage (the row).
    pub contig: usize,
    /// The element type.
    pub elem: DType,
    /// The swizzle of the rows.
    pub swz: Swizzle,
}

impl<'ctx> SmemTile<'ctx> {
    /// (rows, columns) of the storage.
    pub fn storage(&self) -> (u32, u32) {
        let c = self.dims[self.contig];
        let r = self.dims[1 - self.contig];
        (r, c)
    }

    /// The same storage read as the transposed tile: element `(j, i)` of the view is element
    /// `(i, j)` of this tile.
    pub fn transposed(self) -> SmemTile<'ctx> {
        SmemTile {
            dims: [self.dims[1], self.dims[0]],
            contig: 1 - self.contig,
            ..self
        }
    }

    /// Columns per 128-byte storage block (all of them for shorter rows).
    pub fn block_cols(&self) -> u32 {
        let (_, cols) = self.storage();
        cols.min((128 / self.elem.bytes()).max(1))
    }

    /// The swizzle of tile rows of `cols` elements of `eb` bytes (its 128-byte blocks).
    pub fn swizzle_for(cols: u32, eb: u32) -> Swizzle {
        Swizzle::for_rows(cols.min((128 / eb).max(1)), eb)
    }

    /// The most elements one vector load may read along the contiguous dimension: a swizzle
    /// chunk (16 bytes), at most the row; one for `i1` tiles (stored as bytes, read one by one).
    pub fn run_limit(&self) -> u32 {
        if self.elem == DType::I1 {
            1
        } else {
            self.swz.vec.min(self.dims[self.contig]).max(1)
        }
    }

    /// Bytes the tile takes.
    pub fn bytes(dims: [u32; 2], elem: DType) -> u32 {
        dims[0] * dims[1] * elem.bytes()
    }

    /// For a thread's register at coordinates `c` (threads' offsets below `thread_bound`): the
    /// coordinates `rep` of its class and the constant element offset `off` with
    /// `index(thread + c) = index(thread + rep) + off` for every thread. The swizzle repeats
    /// every `per_phase * max_phase` storage rows (`max_phase` times that when the phase mixes
    /// in the row's group), and the index moves by a whole block per
    /// 128-byte column block. `None` where a thread's coordinates could pass the tile's end
    /// (the index wraps there).
    pub fn period_class(&self, c: &[u32], thread_bound: &[u32]) -> Option<([u32; 2], u32)> {
        let s = self.swz;
        let fits = (0..2).all(|d| thread_bound[d] - 1 + c[d] < self.dims[d]);
        if !fits || !s.per_phase.is_power_of_two() || !s.max_phase.is_power_of_two() {
            return None;
        }
        let (rows, cols) = self.storage();
        let bc = self.block_cols();
        let row_period = s.per_phase * s.max_phase * if s.mix { s.max_phase } else { 1 };
        let (r, col) = if self.contig == 1 {
            (c[0], c[1])
        } else {
            (c[1], c[0])
        };
        let (qr, sr) = (r / row_period, r % row_period);
        let (qc, sc) = if bc < cols {
            (col / bc, col % bc)
        } else {
            (0, col)
        };
        let rep = if self.contig == 1 { [sr, sc] } else { [sc, sr] };
        Some((rep, qr * row_period * bc + qc * rows * bc))
    }
}

impl<'ctx> Lowering<'ctx, '_> {
    /// The element index in `t` of this thread's register at coordinates `c` of `geo`.
    fn smem_index_of_reg(
        &self,
        t: &SmemTile<'ctx>,
        geo: &Geometry<'ctx>,
        c: &[u32],
    ) -> R<IntValue<'ctx>> {
        let i = self
            .b
            .build_int_add(geo.thread[0], self.i32(c[0] as u64), "ti")?;
        let j = self
            .b
            .build_int_add(geo.thread[1], self.i32(c[1] as u64), "tj")?;
        self.smem_index(t, i, j)
    }

    /// The element index (not bytes) of tile element `(i, j)`; coordinates wrap at the tile's
    /// size (copies of small tiles).
    pub fn smem_index(
        &self,
        t: &SmemTile<'ctx>,
        i: IntValue<'ctx>,
        j: IntValue<'ctx>,
    ) -> R<IntValue<'ctx>> {
        let b = &self.b;
        let i = b.build_and(i, self.i32((t.dims[0] - 1) as u64), "wi")?;
        let j = b.build_and(j, self.i32((t.dims[1] - 1) as u64), "wj")?;
        let (r, c) = if t.contig == 1 { (i, j) } else { (j, i) };
        let (rows, cols) = t.storage();
        let bc = t.block_cols();
        // Column block of `c` (rows longer than 128 bytes), and the column inside it.
        let block_base = if bc < cols {
            let blk = b.build_right_shift(c, self.i32(bc.trailing_zeros() as u64), false, "cb")?;
            Some(b.build_int_mul(blk, self.i32((rows * bc) as u64), "cb")?)
        } else {
            None
        };
        let c = if bc < cols {
            b.build_and(c, self.i32((bc - 1) as u64), "cc")?
        } else {
            c
        };
        let s = t.swz;
        let chunk = b.build_right_shift(c, self.i32(s.vec.trailing_zeros() as u64), false, "ch")?;
        let within = b.build_and(c, self.i32((s.vec - 1) as u64), "in")?;
        let phase = b.build_right_shift(
            r,
            self.i32(s.per_phase.trailing_zeros() as u64),
            false,
            "ph",
        )?;
        let phase = if s.mix {
            let group = b.build_right_shift(
                r,
                self.i32((s.per_phase * s.max_phase).trailing_zeros() as u64),
                false,
                "pg",
            )?;
            b.build_xor(phase, group, "ph")?
        } else {
            phase
        };
        let phase = b.build_and(phase, self.i32((s.max_phase - 1) as u64), "ph")?;
        let chunk = b.build_xor(chunk, phase, "sw")?;
        let col = b.build_int_add(
            b.build_left_shift(chunk, self.i32(s.vec.trailing_zeros() as u64), "sc")?,
            within,
            "sc",
        )?;
        let row = b.build_left_shift(r, self.i32(bc.trailing_zeros() as u64), "sr")?;
        let idx = b.build_int_add(row, col, "si")?;
        Ok(match block_base {
            Some(base) => b.build_int_add(base, idx, "si")?,
            None => idx,
        })
    }

    /// Pointers into `t` to this thread's registers at coordinates `coords` of `geo`, in order.
    ///
    /// The swizzled index repeats its pattern every `per_phase * max_phase` rows and every
    /// 128-byte column block, so coordinates that differ by whole periods are a constant
    /// number of elements apart. One index is computed per class of coordinates and the others
    /// are constant offsets from it: fewer address instructions, and LLVM's load-store
    /// vectorizer sees one base with constant offsets instead of comparing every pair of
    /// addresses through scalar evolution (a sixth of an unaligned attention's LLVM time).
    /// Coordinates whose thread could reach past the tile (where the index wraps) get their
    /// own index.
    pub fn smem_ptrs_of_regs<'c>(
        &self,
        t: &SmemTile<'ctx>,
        geo: &Geometry<'ctx>,
        coords: impl IntoIterator<Item = &'c [u32]>,
    ) -> R<Vec<PointerValue<'ctx>>> {
        let et = crate::lower::memory_type(self.cx, t.elem);
        let mut classes: HashMap<[u32; 2], PointerValue<'ctx>> = HashMap::new();
        let mut out = Vec::new();
        for c in coords {
            let Some((rep, offset)) = t.period_class(c, &geo.thread_bound) else {
                let idx = self.smem_index_of_reg(t, geo, c)?;
                out.push(self.smem_ptr(t, idx)?);
                continue;
            };
            let base = match classes.get(&rep) {
                Some(&p) => p,
                None => {
                    let idx = self.smem_index_of_reg(t, geo, &rep)?;
                    let p = self.smem_ptr(t, idx)?;
                    classes.insert(rep, p);
                    p
                }
            };
            out.push(if offset == 0 {
                base
            } else {
                // SAFETY of the GEP: the element lies inside the tile, as `base` does.
                unsafe {
                    self.b
                        .build_in_bounds_gep(et, base, &[self.i32(offset as u64)], "sp")?
                }
            });
        }
        Ok(out)
    }

    /// A pointer to element index `idx` of the tile.
    pub fn smem_ptr(&self, t: &SmemTile<'ctx>, idx: IntValue<'ctx>) -> R<PointerValue<'ctx>> {
        let et = crate::lower::memory_type(self.cx, t.elem);
        // SAFETY of the GEP: indices stay inside the tile, which lies inside the buffer.
        Ok(unsafe { self.b.build_gep(et, t.base, &[idx], "sp")? })
    }

    /// The shared address (32 bits) of element index `idx`, for inline PTX.
    pub fn smem_addr32(&self, t: &SmemTile<'ctx>, idx: IntValue<'ctx>) -> R<IntValue<'ctx>> {
        let p = self.smem_ptr(t, idx)?;
        Ok(self.b.build_ptr_to_int(p, self.cx.i32_type(), "sa")?)
    }

    /// Writes tile `v` (in its register layout) into shared memory at byte `offset` of the
    /// shared buffer, rows along its layout's contiguous dimension; 16-byte stores where the
    /// layout gives a thread whole chunks. No barrier here: the caller orders the accesses.
    ///
    /// The tile is contiguous along the registers' contiguous dimension, or along `contig` when
    /// given (fp8 `wgmma` operands must be K-major, whatever the registers' layout).
    pub fn stage_tile(
        &mut self,
        v: Value,
        offset: u32,
        contig: Option<usize>,
    ) -> R<SmemTile<'ctx>> {
        let ty = *self.func.ty(v);
        let Elem::Num(d) = ty.elem else {
            return self.internal("staging a pointer tile");
        };
        let dims = ty.shape.dims();
        if dims.len() != 2 {
            return self.internal("staging a tile that is not 2-D");
        }
        let dims = [dims[0], dims[1]];
        let layout = self.func.layouts[ty.layout.expect("tiles have layouts")].clone();
        let natural = layout.contiguous_dim().unwrap_or((1, 1));
        let (contig, run) = match contig {
            Some(c) if c != natural.0 => (c, 1),
            _ => natural,
        };
        let swz = SmemTile::swizzle_for(dims[contig], d.bytes());
        let total = offset + SmemTile::bytes(dims, d);
        let g = self.shared_scratch(total)?;
        // SAFETY of the GEP: the buffer was sized to hold the tile at `offset`.
        let base = unsafe {
            self.b
                .build_gep(self.cx.i8_type(), g, &[self.i32(offset as u64)], "tile")?
        };
        let tile = SmemTile {
            base,
            dims,
            contig,
            elem: d,
            swz,
        };
        let geo = self.geometry(&ty)?;
        let regs = self.get(v)?.clone();
        // The widest run of registers that is contiguous, aligned and inside one chunk.
        let vec = crate::memory::contiguous_run(&geo.regs, contig, run.min(swz.vec) as usize);
        let word_bits = d.bits() * vec as u32;
        let ptrs =
            self.smem_ptrs_of_regs(&tile, &geo, geo.regs.chunks(vec).map(|ch| ch[0].as_slice()))?;
        for (ci, &p) in ptrs.iter().enumerate() {
            let vals = &regs[ci * vec..(ci + 1) * vec];
            if vec == 1 {
                let x = self.to_memory_form(d, vals[0])?;
                self.b.build_store(p, x)?;
            } else {
                let packed = self.pack_bits(d, vals)?;
                let st = self.b.build_store(p, packed)?;
                st.set_alignment((word_bits / 8).min(16))
                    .map_err(|e| crate::CodegenError::Llvm(e.to_string()))?;
            }
        }
        Ok(tile)
    }

    /// Tile `t` read into registers of type `ty` (its layout's registers, in order): runs of a
    /// thread's registers that are consecutive along the tile's contiguous dimension, aligned
    /// in every thread and inside one swizzle chunk, are read with one vector load each.
    pub fn load_tile(
        &mut self,
        t: &SmemTile<'ctx>,
        ty: &tile_ir::Type,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let geo = self.geometry(ty)?;
        let c = t.contig;
        let vec = crate::memory::contiguous_run(
            &geo.regs,
            c,
            t.run_limit().min(geo.thread_align[c]) as usize,
        );
        let ptrs =
            self.smem_ptrs_of_regs(t, &geo, geo.regs.chunks(vec).map(|ch| ch[0].as_slice()))?;
        let mut out = Vec::with_capacity(geo.regs.len());
        for p in ptrs {
            out.extend(self.smem_read(p, t.elem, vec as u32)?);
        }
        Ok(out)
    }

    fn to_memory_form(&self, d: DType, x: BasicValueEnum<'ctx>) -> R<BasicValueEnum<'ctx>> {
        Ok(if d == DType::I1 {
            self.b
                .build_int_z_extend(x.into_int_value(), self.cx.i8_type(), "b2i")?
                .into()
        } else {
            x
        })
    }

    /// Elements packed into one vector of 32-bit words (or one narrower integer).
    pub fn pack_bits(&self, d: DType, vals: &[BasicValueEnum<'ctx>]) -> R<BasicValueEnum<'ctx>> {
        if let Some(words) = self.pack_rounded_pairs(d, vals)? {
            return Ok(words);
        }
        let v = match whole_vector(vals).filter(|_| d != DType::I1) {
            Some(v) => v,
            None => {
                let mt = crate::lower::memory_type(self.cx, d);
                let mut v = crate::lower::vector_of(mt, vals.len() as u32).get_undef();
                for (k, &x) in vals.iter().enumerate() {
                    let x = self.to_memory_form(d, x)?;
                    v = self
                        .b
                        .build_insert_element(v, x, self.i32(k as u64), "pk")?;
                }
                v
            }
        };
        let bits = d.bits().max(8) * vals.len() as u32;
        let t: BasicTypeEnum = if bits >= 32 {
            crate::lower::vector_of(self.cx.i32_type().into(), bits / 32).into()
        } else {
            int_type(self.cx, bits).into()
        };
        Ok(self.b.build_bit_cast(v, t, "pk")?)
    }

    /// 16-bit floats that are each an f32 rounded (`fptrunc`), as a matmul's epilogue has its
    /// accumulators, packed into 32-bit words (a vector of them) with one `cvt.rn.f16x2.f32`
    /// (`bf16x2`) per word, built from the f32s; None where a value is not such a rounding.
    /// The roundings left without users are left to LLVM, which deletes them.
    pub(crate) fn pack_rounded_pairs(
        &self,
        d: DType,
        vals: &[BasicValueEnum<'ctx>],
    ) -> R<Option<BasicValueEnum<'ctx>>> {
        let name = match d {
            DType::F16 => "llvm.nvvm.ff2f16x2.rn",
            DType::BF16 => "llvm.nvvm.ff2bf16x2.rn",
            _ => return Ok(None),
        };
        if !self.x2_cvt() || !vals.len().is_multiple_of(2) {
            return Ok(None);
        }
        let f32t = self.cx.f32_type();
        let source = |v: &BasicValueEnum<'ctx>| {
            let i = v.as_instruction_value()?;
            let from = i.get_operand(0)?.value()?;
            (i.get_opcode() == InstructionOpcode::FPTrunc && from.get_type() == f32t.into())
                .then_some(from)
        };
        let Some(srcs) = vals.iter().map(source).collect::<Option<Vec<_>>>() else {
            return Ok(None);
        };
        let i32t = self.cx.i32_type();
        let n = vals.len() as u32 / 2;
        let mut words = i32t.vec_type(n).get_undef();
        for k in 0..n as usize {
            // The instruction's first operand fills the upper half: element 2k+1.
            let x2 = self.call_intrinsic(name, &[], &[srcs[2 * k + 1], srcs[2 * k]])?;
            let w = self.b.build_bit_cast(x2, i32t, "x2")?;
            words = self
                .b
                .build_insert_element(words, w, self.i32(k as u64), "x2")?;
        }
        Ok(Some(words.into()))
    }

    /// `w` elements of type `elem` from shared address `p`, in register form: one load, a
    /// vector aligned to its size when `w > 1` (`i1` is stored as bytes, read one by one).
    fn smem_read(
        &self,
        p: PointerValue<'ctx>,
        elem: DType,
        w: u32,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let mt = crate::lower::memory_type(self.cx, elem);
        if w == 1 {
            let x = self.b.build_load(mt, p, "ls")?;
            return Ok(vec![if elem == DType::I1 {
                let x = x.into_int_value();
                self.b
                    .build_int_compare(
                        inkwell::IntPredicate::NE,
                        x,
                        x.get_type().const_zero(),
                        "i2b",
                    )?
                    .into()
            } else {
                x
            }]);
        }
        let x = self.b.build_load(crate::lower::vector_of(mt, w), p, "lv")?;
        if let Some(ins) = x.as_instruction_value() {
            ins.set_alignment(w * elem.bytes())
                .map_err(|e| crate::CodegenError::Llvm(e.to_string()))?;
        }
        let x = x.into_vector_value();
        (0..w)
            .map(|e| Ok(self.b.build_extract_element(x, self.i32(e as u64), "le")?))
            .collect()
    }

    /// One element of a shared tile, in register form.
    pub fn smem_load_elem(
        &self,
        t: &SmemTile<'ctx>,
        i: IntValue<'ctx>,
        j: IntValue<'ctx>,
    ) -> R<BasicValueEnum<'ctx>> {
        let idx = self.smem_index(t, i, j)?;
        let p = self.smem_ptr(t, idx)?;
        Ok(self.smem_read(p, t.elem, 1)?[0])
    }

    /// `w` consecutive elements of a shared tile along its contiguous dimension, from element
    /// `(i, j)`, in one vector load. The caller guarantees the run's start is a multiple of `w`
    /// (a power of two within [`SmemTile::run_limit`]): it then lies in one swizzle chunk,
    /// where storage is contiguous, and wraps (small tiles) as a whole.
    pub fn smem_load_run(
        &self,
        t: &SmemTile<'ctx>,
        i: IntValue<'ctx>,
        j: IntValue<'ctx>,
        w: u32,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let idx = self.smem_index(t, i, j)?;
        let p = self.smem_ptr(t, idx)?;
        self.smem_read(p, t.elem, w)
    }

    /// `ldmatrix` of `n` 8×8 b16 matrices; lane `l` gives the row address `addr` of matrix
    /// `l / 8`. Returns one 32-bit register per matrix.
    pub fn ldmatrix(
        &self,
        addr: IntValue<'ctx>,
        n: u32,
        trans: bool,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let regs: Vec<String> = (0..n).map(|i| format!("${i}")).collect();
        let t = format!(
            "ldmatrix.sync.aligned.m8n8.x{n}{}.shared.b16 {{{}}}, [${n}];",
            if trans { ".trans" } else { "" },
            regs.join(", ")
        );
        let mut cons: Vec<String> = (0..n).map(|_| "=r".to_string()).collect();
        cons.push("r".into());
        let i32t: BasicTypeEnum = self.cx.i32_type().into();
        let ret: BasicTypeEnum = if n == 1 {
            i32t
        } else {
            self.cx.struct_type(&vec![i32t; n as usize], false).into()
        };
        let r = self.asm(ret, &t, &cons.join(","), &[addr.into()], true)?;
        let Some(r) = r else {
            return self.internal("ldmatrix returned nothing");
        };
        if n == 1 {
            return Ok(vec![r]);
        }
        let sv = r.into_struct_value();
        (0..n)
            .map(|i| Ok(self.b.build_extract_value(sv, i, "lm")?))
            .collect()
    }
}

/// The vector `vals` were extracted from, element by element in order, when they are all of
/// it (a tile read from memory in one vector and written back whole): packing them again is
/// that vector.
pub(crate) fn whole_vector<'ctx>(
    vals: &[BasicValueEnum<'ctx>],
) -> Option<inkwell::values::VectorValue<'ctx>> {
    let mut whole = None;
    for (k, v) in vals.iter().enumerate() {
        let i = v.as_instruction_value()?;
        if i.get_opcode() != InstructionOpcode::ExtractElement {
            return None;
        }
        let from = i.get_operand(0)?.value()?.into_vector_value();
        let at = i
            .get_operand(1)?
            .value()?
            .into_int_value()
            .get_zero_extended_constant()?;
        if at != k as u64 || whole.is_some_and(|w| w != from) {
            return None;
        }
        whole = Some(from);
    }
    whole.filter(|w| w.get_type().get_size() as usize == vals.len())
}

/// Scratch space reuses a nested loop's rings after it (see [`Lowering::plan_nested_reuse`]),
/// unless `TILES_NESTED_RING_REUSE=0`.
fn nested_ring_reuse() -> bool {
    std::env::var("TILES_NESTED_RING_REUSE").map_or(true, |v| v != "0")
}

/// A ring of `stages` tile slots written by `async_copy`.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Ring {
    /// Byte offset in the shared buffer.
    pub offset: u32,
    /// Tile shape.
    pub dims: [u32; 2],
    /// The storage row's tile dimension.
    pub contig: usize,
    /// Element type.
    pub elem: DType,
    /// Bytes per slot.
    pub slot_bytes: u32,
    /// The slots' swizzle mixes in the row group ([`Swizzle::mix`]).
    pub mix: bool,
}

impl<'ctx> Lowering<'ctx, '_> {
    /// Places the ring buffers and the operands staged once (see
    /// [`crate::lower::persistent_operands`]) in shared memory: each is live over a span of
    /// the kernel's top-level ops (its loop nest, from the copies or staging before it to its
    /// last reader), and tiles whose spans do not meet share addresses (the phases of a
    /// backward attention kernel, say). Scratch space starts past all of them until the rings
    /// are retired; the staged operands stay below `persistent_bytes`.
    pub fn plan_rings(&mut self) -> R<()> {
        let func = self.func;
        // The top-level position of every op (its outermost ancestor in the entry block).
        let mut top: HashMap<Op, usize> = HashMap::new();
        fn mark(func: &tile_ir::Function, op: Op, i: usize, top: &mut HashMap<Op, usize>) {
            top.insert(op, i);
            for &r in &func.ops[op].regions {
                for &o in &func.blocks[func.regions[r].block].ops {
                    mark(func, o, i, top);
                }
            }
        }
        for (i, &op) in func.blocks[func.entry].ops.iter().enumerate() {
            mark(func, op, i, &mut top);
        }
        let mut users: HashMap<Value, Vec<Op>> = HashMap::new();
        for op in func.ops_in_order() {
            for &v in &func.ops[op].operands {
                users.entry(v).or_default().push(op);
            }
        }
        let span_of = |ops: &mut dyn Iterator<Item = Op>| -> (usize, usize) {
            let idx: Vec<usize> = ops.filter_map(|o| top.get(&o).copied()).collect();
            (
                idx.iter().copied().min().unwrap_or(0),
                idx.iter().copied().max().unwrap_or(usize::MAX),
            )
        };
        // (span, bytes, alignment, what)
        enum Item {
            Staged(Value),
            Ring(u8),
        }
        let mut items: Vec<((usize, usize), u32, u32, Item)> = Vec::new();
        let no_wgmma_persistent = std::env::var_os("TILES_WGMMA_NO_PERSISTENT").is_some();
        for r in crate::lower::persistent_operands(func) {
            if no_wgmma_persistent && self.is_warpgroup_operand(r) {
                continue;
            }
            let ty = *func.ty(r);
            let (Some(d), [m, k]) = (ty.elem.dtype(), ty.shape.dims()) else {
                continue;
            };
            let tile_ir::ValueDef::Result(conv, _) = func.values[r].def else {
                continue;
            };
            let uses = users.get(&r).cloned().unwrap_or_default();
            let span = span_of(&mut std::iter::once(conv).chain(uses));
            let bytes = SmemTile::bytes([*m, *k], d).next_multiple_of(1024);
            items.push((span, bytes, 1024, Item::Staged(r)));
        }
        // wgmma's swizzle patterns repeat every 1024 bytes, from a 1024-byte boundary.
        let align = if self.warpgroup { 1024 } else { 128 };
        let mut ring_ops: Vec<(u8, Vec<Op>)> = Vec::new();
        for op in func.ops_in_order() {
            let d = &func.ops[op];
            let buf = match d.kind {
                OpKind::AsyncCopy(a) => a.buf,
                OpKind::LocalView { buf, .. } | OpKind::LocalLoad { buf, .. } => buf,
                _ => continue,
            };
            let mut ops = vec![op];
            if matches!(d.kind, OpKind::LocalView { .. }) {
                for &r in &d.results {
                    ops.extend(users.get(&r).into_iter().flatten().copied());
                }
            }
            match ring_ops.iter_mut().find(|(b, _)| *b == buf) {
                Some((_, v)) => v.extend(ops),
                None => ring_ops.push((buf, ops)),
            }
        }
        for op in func.ops_in_order() {
            let d = &func.ops[op];
            let OpKind::AsyncCopy(a) = d.kind else {
                continue;
            };
            if self.rings.contains_key(&a.buf) {
                continue;
            }
            let ty = *func.ty(d.operands[0]);
            let Elem::Ptr(e) = ty.elem else {
                return self.internal("async_copy through a non-pointer");
            };
            let dims = ty.shape.dims();
            let Some(layout) = ty.layout.map(|l| &func.layouts[l]) else {
                return self.internal("async_copy without a layout");
            };
            let contig = layout.contiguous_dim().map_or(1, |c| c.0);
            let dims = [dims[0], dims[1]];
            let slot_bytes = SmemTile::bytes(dims, e).next_multiple_of(align);
            let ops = ring_ops
                .iter()
                .find(|(b, _)| *b == a.buf)
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            // Mixed swizzle: every reader is a CUDA-core dot that takes the slot as `b` stored
            // K-contiguous (storage rows along N). A warp's column groups, 8 columns apart,
            // then read 8 rows of one phase at once under the plain swizzle: an 8-way bank
            // conflict (2048^3 fp32 "ieee", H200: 7.7 -> 37 TFLOP/s mixed). `a` stored so
            // (rows 4 apart, 2-way) is left plain: mixing its rows' addresses took 55 more
            // registers and 11 % of the 64x64 speed; slots read along a K row gain nothing.
            let reads_as_k_contig_b = |view: Value, view_contig: usize, u: Op| {
                let d = &func.ops[u];
                matches!(d.kind, OpKind::Dot { .. })
                    && matches!(
                        func.layout_of(d.results[0]),
                        Some(tile_ir::Layout::Blocked(_))
                    )
                    && d.operands[1] == view
                    && d.operands[0] != view
                    && view_contig == 0
            };
            let readers: Vec<bool> = ops
                .iter()
                .filter_map(|&o| match func.ops[o].kind {
                    OpKind::LocalView { trans, .. } => Some((
                        func.ops[o].results[0],
                        if trans { 1 - contig } else { contig },
                    )),
                    _ => None,
                })
                .flat_map(|(v, vc)| {
                    let us = users.get(&v).into_iter().flatten();
                    us.map(move |&u| reads_as_k_contig_b(v, vc, u))
                })
                .collect();
            let mix = !readers.is_empty() && readers.iter().all(|&r| r);
            self.rings.insert(
                a.buf,
                Ring {
                    offset: 0,
                    dims,
                    contig,
                    elem: e,
                    slot_bytes,
                    mix,
                },
            );
            let span = span_of(&mut ops.into_iter());
            items.push((
                span,
                slot_bytes * a.stages.max(1) as u32,
                align,
                Item::Ring(a.buf),
            ));
        }
        // First fit, in program order: the lowest aligned offset clear of every placed tile
        // whose span meets this one's.
        let mut placed: Vec<((usize, usize), u32, u32)> = Vec::new();
        let mut placed_rings: Vec<(u8, (usize, usize))> = Vec::new();
        let (mut total, mut staged_end) = (0u32, 0u32);
        for (span, bytes, al, item) in items {
            let mut clash: Vec<(u32, u32)> = placed
                .iter()
                .filter(|(s, _, _)| s.0 <= span.1 && span.0 <= s.1)
                .map(|&(_, o, n)| (o, o + n))
                .collect();
            clash.sort_unstable();
            let mut offset = 0u32;
            for (lo, hi) in clash {
                if offset + bytes <= lo {
                    break;
                }
                offset = offset.max(hi.next_multiple_of(al));
            }
            placed.push((span, offset, bytes));
            total = total.max(offset + bytes);
            match item {
                Item::Staged(r) => {
                    self.persistent.insert(r, offset);
                    staged_end = staged_end.max(offset + bytes);
                }
                Item::Ring(buf) => {
                    if let Some(ring) = self.rings.get_mut(&buf) {
                        ring.offset = offset;
                    }
                    placed_rings.push((buf, span));
                }
            }
        }
        self.persistent_bytes = staged_end;
        for op in func.ops_in_order() {
            if !matches!(func.ops[op].kind, OpKind::AsyncWait { pending: 0 }) {
                continue;
            }
            let Some(&at) = top.get(&op) else { continue };
            let live_after = placed
                .iter()
                .filter(|(s, _, _)| s.1 > at)
                .map(|&(_, o, n)| o + n)
                .max()
                .unwrap_or(0);
            self.scratch_after_wait
                .insert(op, staged_end.max(live_after));
        }
        if nested_ring_reuse() {
            self.plan_nested_reuse(&top, &placed_rings, staged_end);
        }
        self.ring_bytes = total;
        self.scratch_base = total;
        if total > 0 {
            self.shared_buffer(total);
        }
        Ok(())
    }

    /// A pipelined loop inside another loop (a persistent matmul's K loop, a grouped GEMM's):
    /// after its full wait, the rest of the outer body (the epilogue's layout conversions) may
    /// use its rings' memory as scratch, as Triton's allocator lets it, where no other ring is
    /// live there. The next outer iteration's prologue then refills the rings after a barrier
    /// (`prologue_copies`). `rings`: each ring's buffer and span of top-level positions.
    fn plan_nested_reuse(
        &mut self,
        top: &HashMap<Op, usize>,
        rings: &[(u8, (usize, usize))],
        staged_end: u32,
    ) {
        let func = self.func;
        let parent = func.op_blocks();
        let all = func.ops_in_order();
        let copies: Vec<(Op, u8)> = all
            .iter()
            .filter_map(|&o| match func.ops[o].kind {
                OpKind::AsyncCopy(a) => Some((o, a.buf)),
                _ => None,
            })
            .collect();
        for &op in &all {
            if !matches!(func.ops[op].kind, OpKind::AsyncWait { pending: 0 }) {
                continue;
            }
            let (Some(&at), Some(&block)) = (top.get(&op), parent.get(&op)) else {
                continue;
            };
            if block == func.entry {
                continue;
            }
            // The loop the wait retires: the op just before it.
            let ops = &func.blocks[block].ops;
            let Some(i) = ops.iter().position(|&o| o == op) else {
                continue;
            };
            let Some(&for_op) = i.checked_sub(1).and_then(|j| ops.get(j)) else {
                continue;
            };
            if !matches!(func.ops[for_op].kind, OpKind::For { .. }) {
                continue;
            }
            let mut own: HashSet<u8> = HashSet::new();
            let mut in_body: HashSet<Op> = HashSet::new();
            func.walk_op(for_op, |o| {
                in_body.insert(o);
                match func.ops[o].kind {
                    OpKind::AsyncCopy(a) => {
                        own.insert(a.buf);
                    }
                    OpKind::LocalView { buf, .. } | OpKind::LocalLoad { buf, .. } => {
                        own.insert(buf);
                    }
                    _ => {}
                }
            });
            // Every ring live at this top-level op or after it must be the loop's own (scratch
            // stays low until the kernel ends; a later loop's prologue takes no barrier).
            if own.is_empty() || rings.iter().any(|(b, s)| s.1 >= at && !own.contains(b)) {
                continue;
            }
            // Its prologue: the copies into its rings in the block that holds the loop; no copy
            // into them may be elsewhere.
            let prologue: Vec<Op> = ops[..i]
                .iter()
                .copied()
                .filter(
                    |&o| matches!(func.ops[o].kind, OpKind::AsyncCopy(a) if own.contains(&a.buf)),
                )
                .collect();
            let copies_elsewhere = copies.iter().any(|&(o, buf)| {
                own.contains(&buf) && !in_body.contains(&o) && !prologue.contains(&o)
            });
            if prologue.is_empty() || copies_elsewhere {
                continue;
            }
            self.prologue_copies.extend(prologue);
            self.scratch_after_wait.insert(op, staged_end);
            self.nested_reuse_waits.insert(op);
        }
    }

    /// Slot `slot` of ring `buf` as a shared tile.
    pub fn ring_slot(&mut self, buf: u8, slot: IntValue<'ctx>) -> R<SmemTile<'ctx>> {
        let Some(r) = self.rings.get(&buf).copied() else {
            return self.unsupported(format!(
                "a read of ring buffer {buf}, which no async_copy writes"
            ));
        };
        let g = self.shared_buffer(self.ring_bytes).as_pointer_value();
        let off = self
            .b
            .build_int_mul(slot, self.i32(r.slot_bytes as u64), "slot")?;
        let off = self
            .b
            .build_int_add(off, self.i32(r.offset as u64), "slot")?;
        // SAFETY of the GEP: slots are below `stages` by construction of the loop.
        let base = unsafe { self.b.build_gep(self.cx.i8_type(), g, &[off], "ring")? };
        Ok(SmemTile {
            base,
            dims: r.dims,
            contig: r.contig,
            elem: r.elem,
            swz: Swizzle {
                mix: r.mix,
                ..SmemTile::swizzle_for(r.dims[r.contig], r.elem.bytes())
            },
        })
    }

    /// The bytes a copy under a prefix mask reads: `eb` per selected element. Each element's
    /// mask is a conjunction; the terms every element shares (a row's bounds check, the
    /// iteration's validity) decide the copy as a whole and the rest (the column's bounds
    /// check) are counted: `shared ? count(rest) * eb : 0`. Copies of one thread along a
    /// column read the same `rest` values, so the count is computed once for them.
    fn prefix_source_size(
        &mut self,
        mask: &[BasicValueEnum<'ctx>],
        eb: IntValue<'ctx>,
    ) -> R<IntValue<'ctx>> {
        let terms: Vec<Vec<IntValue<'ctx>>> =
            mask.iter().map(|m| conjuncts(m.into_int_value())).collect();
        let Some(first) = terms.first() else {
            return self.internal("a copy of no elements");
        };
        let shared: Vec<IntValue<'ctx>> = first
            .iter()
            .copied()
            .filter(|t| terms[1..].iter().all(|ts| ts.contains(t)))
            .collect();
        let i32t = self.cx.i32_type();
        let mut n = i32t.const_zero();
        for ts in &terms {
            let mut on: Option<IntValue<'ctx>> = None;
            for t in ts.iter().filter(|t| !shared.contains(t)) {
                on = Some(match on {
                    Some(x) => self.b.build_and(x, *t, "on")?,
                    None => *t,
                });
            }
            let one = match on {
                Some(x) => self.b.build_int_z_extend(x, i32t, "one")?,
                None => i32t.const_int(1, false),
            };
            n = self.b.build_int_add(n, one, "n")?;
        }
        let bytes = self.b.build_int_mul(n, eb, "bytes")?;
        let mut all: Option<IntValue<'ctx>> = None;
        for t in shared {
            all = Some(match all {
                Some(x) => self.b.build_and(x, t, "all")?,
                None => t,
            });
        }
        Ok(match all {
            Some(c) => self
                .b
                .build_select(c, bytes, i32t.const_zero(), "src_size")?
                .into_int_value(),
            None => bytes,
        })
    }

    /// `cp.async` of each thread's chunks into the ring slot; masked-off chunks are zero-filled
    /// (source size 0, nothing read).
    pub fn lower_async_copy(
        &mut self,
        data: &tile_ir::OpData,
        a: tile_ir::AsyncCopyAttrs,
    ) -> R<()> {
        let ptr = data.operands[0];
        let ty = *self.func.ty(ptr);
        let slot = self.get(data.operands[1])?[0].into_int_value();
        let t = self.ring_slot(a.buf, slot)?;
        let ptrs = self.get(ptr)?.clone();
        let mask = if a.masked {
            Some(self.get(data.operands[2])?.clone())
        } else {
            None
        };
        let geo = self.geometry(&ty)?;
        let vec = a.vector.max(1) as usize;
        let bytes = vec as u32 * t.elem.bytes();
        let contiguous = geo.regs.len() % vec == 0
            && geo.regs.chunks(vec).all(|ch| {
                ch[0][t.contig] % vec as u32 == 0
                    && ch.iter().enumerate().all(|(k, c)| {
                        let mut want = ch[0].clone();
                        want[t.contig] += k as u32;
                        *c == want
                    })
            });
        if !contiguous || !matches!(bytes, 4 | 8 | 16) {
            return self.unsupported(format!(
                "async_copy of {vec} elements per thread ({bytes} bytes; cp.async moves 4, 8 or 16 contiguous bytes)"
            ));
        }
        // A masked-off copy writes zeros and reads nothing: `cp.async`'s `ignore-src` predicate
        // (PTX 7.5), which ptxas folds into the copy. A source size chosen by `select` per copy
        // became chains of `selp` on the conjunction's terms (4 per copy in a two-sided
        // bounds check) and a compare back to a predicate.
        // A mask true on a prefix of each copy's elements (`prefix_mask`) gives the copy a
        // source size in place of the predicate: it reads the selected elements and
        // zero-fills the rest.
        let kind = if bytes == 16 { "cg" } else { "ca" };
        let template = match mask {
            Some(_) => format!("cp.async.{kind}.shared.global [$0], [$1], {bytes}, $2;"),
            None => format!("cp.async.{kind}.shared.global [$0], [$1], {bytes};"),
        };
        let i32t = self.cx.i32_type();
        let eb = i32t.const_int(t.elem.bytes() as u64, false);
        let sptrs =
            self.smem_ptrs_of_regs(&t, &geo, geo.regs.chunks(vec).map(|ch| ch[0].as_slice()))?;
        for (ci, &sp) in sptrs.iter().enumerate() {
            let saddr = self.b.build_ptr_to_int(sp, self.cx.i32_type(), "sa")?;
            let g = ptrs[ci * vec];
            match &mask {
                Some(m) if a.prefix_mask => {
                    let Some(chunk) = m.get(ci * vec..(ci + 1) * vec) else {
                        return self
                            .internal("async_copy mask has fewer registers than its pointers");
                    };
                    let size = self.prefix_source_size(chunk, eb)?;
                    self.asm_void(
                        &template,
                        "r,l,r,~{memory}",
                        &[saddr.into(), g, size.into()],
                    )?;
                }
                Some(m) => {
                    let on = m[ci * vec].into_int_value();
                    let off = self.b.build_not(on, "ignore")?;
                    self.asm_void(&template, "r,l,b,~{memory}", &[saddr.into(), g, off.into()])?;
                }
                None => self.asm_void(&template, "r,l,~{memory}", &[saddr.into(), g])?,
            }
        }
        Ok(())
    }
}

/// The terms of a conjunction of i1 values (`and` instructions, flattened; `v` itself when it
/// is no conjunction), each once, in a fixed order.
fn conjuncts(v: IntValue<'_>) -> Vec<IntValue<'_>> {
    let mut out: Vec<IntValue> = Vec::new();
    let mut stack = vec![v];
    while let Some(x) = stack.pop() {
        let and = x.as_instruction().filter(|i| {
            i.get_opcode() == InstructionOpcode::And && x.get_type().get_bit_width() == 1
        });
        let ops = and.and_then(|i| {
            let a = i.get_operand(0)?.value()?;
            let b = i.get_operand(1)?.value()?;
            Some([a.into_int_value(), b.into_int_value()])
        });
        match ops {
            Some([a, b]) => {
                stack.push(b);
                stack.push(a);
            }
            None if !out.contains(&x) => out.push(x),
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use inkwell::context::Context;
    use inkwell::AddressSpace;

    /// `smem_index` on constants.
    fn index(t: &SmemTile, i: u32, j: u32) -> u32 {
        let (i, j) = (i & (t.dims[0] - 1), j & (t.dims[1] - 1));
        let (r, c) = if t.contig == 1 { (i, j) } else { (j, i) };
        let (rows, cols) = t.storage();
        let bc = t.block_cols();
        let (block, c) = if bc < cols {
            (c / bc * rows * bc, c % bc)
        } else {
            (0, c)
        };
        let s = t.swz;
        let group = if s.mix {
            r / (s.per_phase * s.max_phase)
        } else {
            0
        };
        let phase = ((r / s.per_phase) ^ group) % s.max_phase;
        block + r * bc + ((c / s.vec) ^ phase) * s.vec + c % s.vec
    }

    #[test]
    fn registers_of_one_class_are_a_constant_offset_apart_for_every_thread() {
        let cx = Context::create();
        let base = cx.ptr_type(AddressSpace::from(3)).const_null();
        let sizes = [1u32, 2, 8, 16, 32, 64, 128, 256];
        let mut checked = 0;
        for (elem, mix) in [DType::F8E4M3, DType::F16, DType::F32, DType::F64]
            .into_iter()
            .flat_map(|e| [(e, false), (e, true)])
        {
            for (d0, d1, contig) in sizes
                .iter()
                .flat_map(|&a| sizes.iter().map(move |&b| (a, b)))
                .flat_map(|(a, b)| [(a, b, 0), (a, b, 1)])
            {
                let dims = [d0, d1];
                let t = SmemTile {
                    base,
                    dims,
                    contig,
                    elem,
                    swz: Swizzle {
                        mix,
                        ..SmemTile::swizzle_for(dims[contig], elem.bytes())
                    },
                };
                for bound in [
                    [1, 1],
                    [d0.min(4), d1.min(8)],
                    [d0.min(16), d1.min(2)],
                    dims,
                ] {
                    for c0 in (0..d0).step_by(((d0 / 8).max(1)) as usize) {
                        for c1 in (0..d1).step_by(((d1 / 8).max(1)) as usize) {
                            let Some((rep, off)) = t.period_class(&[c0, c1], &bound) else {
                                assert!(bound[0] - 1 + c0 >= d0 || bound[1] - 1 + c1 >= d1);
                                continue;
                            };
                            for t0 in 0..bound[0] {
                                for t1 in 0..bound[1] {
                                    assert_eq!(
                                        index(&t, t0 + c0, t1 + c1),
                                        index(&t, t0 + rep[0], t1 + rep[1]) + off,
                                        "{dims:?} contig {contig} {elem:?} thread ({t0}, {t1}) \
                                         register ({c0}, {c1})"
                                    );
                                    checked += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 100_000, "{checked}");
    }
}
