//! `dot`: tensor-core `mma.sync` on `#mma` / `#dot_op` layouts, or fused multiply-adds on
//! CUDA cores for blocked layouts (`f64`, and `f32` with `input_precision="ieee"`).
//!
//! Operand registers are found by their tile coordinates (the layouts make the thread parts
//! agree), so this file only decides which registers go into which instruction.

use crate::lower::{Lowering, R};
use crate::operand::SmemTile;
use inkwell::types::BasicTypeEnum;
use inkwell::values::{BasicValueEnum, IntValue};
use std::collections::{BTreeMap, HashMap};
use tile_ir::{BinaryOp, DType, DotPrecision, Elem, Layout, Op, OpKind, Value};

/// Where a `dot` operand's elements are: in registers (its `#dot_op` layout), or staged in
/// shared memory and read one K step at a time.
enum Src<'ctx> {
    Regs {
        regs: Vec<BasicValueEnum<'ctx>>,
        index: HashMap<Vec<u32>, usize>,
        shape: [u32; 2],
    },
    Smem(SmemTile<'ctx>),
}

/// Whether `src`, the value a warpgroup dot (accumulator layout `acc`) converts its fp8 `a`
/// from, goes to wgmma's register form: it sits in a warpgroup accumulator layout whose rows
/// are spread over the warps as the dot's and whose columns all stay in each warp (every quad
/// of lanes then holds whole rows of each 32-column K step, which [`Lowering::frag_a_fp8`]
/// rearranges into wgmma's `a` fragments), and each warp holds two or more 64-row blocks of it.
/// With one block per warp, staging it K-major in shared memory measured faster: fp8 attention
/// 128 x 64 with 8 warps 473–481 TFLOP/s staged against 462–472 in registers, 128 x 128 412–413
/// against 401–414; with 4 warps (two blocks) 457–466 staged against 470–482 (H100).
/// `TILES_WGMMA_FP8_SMEM_A`, for developers, stages it always.
fn fp8_register_a(func: &tile_ir::Function, src: Value, acc: &Layout) -> bool {
    if std::env::var_os("TILES_WGMMA_FP8_SMEM_A").is_some() {
        return false;
    }
    let (Some(Layout::Mma(s)), Layout::Mma(d)) = (func.layout_of(src), acc) else {
        return false;
    };
    let ty = func.ty(src);
    s.version == 3
        && d.version == 3
        && s.warps_per_cta == d.warps_per_cta
        && s.warps_per_cta.get(1) == Some(&1)
        && ty.elem.dtype().is_some_and(|t| t.is_fp8())
        && ty.shape.rank() == 2
        && ty.shape.dims()[1].is_multiple_of(32)
        && ty.shape.dims()[0] >= 2 * 16 * s.warps_per_cta[0]
}

/// Whether warpgroup dots read operands of this type K-major only: fp8, int8 and fp32 (as
/// tf32); `wgmma` transposes only 16-bit operands.
pub(crate) fn wgmma_k_major_dtype(d: DType) -> bool {
    d.is_fp8() || matches!(d, DType::I8 | DType::U8 | DType::F32)
}

/// A lane's part in [`Lowering::frag_a_fp8`]'s byte exchange within its quad.
struct Fp8Quad<'ctx> {
    /// The lanes read by the first and the second shuffle.
    from_a: IntValue<'ctx>,
    from_b: IntValue<'ctx>,
    /// Whether this lane offers its low words first.
    even: IntValue<'ctx>,
    /// `prmt` selectors of the row-g and row-(g + 8) registers.
    sel_row: IntValue<'ctx>,
    sel_row8: IntValue<'ctx>,
}

/// One `mma.sync` shape and type combination.
struct MmaKind {
    /// The instruction, without operands.
    instr: &'static str,
    /// Accumulator registers (4 scalars, or 2 packed `f16x2`).
    acc_regs: usize,
    /// Constraint letter of one accumulator register.
    acc_constraint: char,
    /// Constraint letter of one `a` or `b` register.
    ab_constraint: char,
    /// The 16x8x8 step is four `m8n8k4` instructions (fp64 before sm_90): rows g and
    /// g + 8 of `a` (its registers 0/1, then 2/3 for the second K half) against `b`'s
    /// register 0, then 1, each updating the accumulator pair of its rows.
    split_m8n8k4: bool,
}

/// fp64 on tensor cores: one m16n8k8 instruction (sm_90), or four m8n8k4 (sm_80). Its
/// fragments sit where tf32's do, one f64 register per element.
const F64_MMA_16X8: &str = "mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64";
const F64_MMA_8X8: &str = "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64";

fn mma_kind(input: DType, acc: DType, capability: u32) -> Option<MmaKind> {
    if (input, acc) == (DType::F64, DType::F64) {
        let split = capability < 90;
        return Some(MmaKind {
            instr: if split { F64_MMA_8X8 } else { F64_MMA_16X8 },
            acc_regs: 4,
            acc_constraint: 'd',
            ab_constraint: 'd',
            split_m8n8k4: split,
        });
    }
    let (instr, acc_regs, acc_constraint) = match (input, acc) {
        (DType::F16, DType::F32) => ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 4, 'f'),
        (DType::F16, DType::F16) => ("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", 2, 'r'),
        (DType::BF16, DType::F32) => (
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
            4,
            'f',
        ),
        (DType::F32, DType::F32) => ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", 4, 'f'),
        // Saturating on int32 overflow, as Triton's mma.sync int8 dot does.
        (DType::I8, DType::I32) => (
            "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32",
            4,
            'r',
        ),
        _ => return None,
    };
    Some(MmaKind {
        instr,
        acc_regs,
        acc_constraint,
        ab_constraint: 'r',
        split_m8n8k4: false,
    })
}

impl<'ctx> Lowering<'ctx, '_> {
    pub fn lower_dot(&mut self, op: Op, precision: DotPrecision) -> R<()> {
        let data = self.func.ops[op].clone();
        let (a, b, c) = (data.operands[0], data.operands[1], data.operands[2]);
        let cty = *self.func.ty(c);
        let Some(lc) = cty.layout else {
            return self.internal("dot without a layout");
        };
        let warpgroup = matches!(&self.func.layouts[lc], Layout::Mma(m) if m.version == 3);
        // Operands whose conversion was deferred to here are staged in shared memory; so are
        // register operands of a warpgroup dot (wgmma reads both from shared memory here).
        // `a` may stay in registers (wgmma's register form); `b` is read from shared memory.
        let stage_of = |v: Value, is_b: bool| -> Option<Value> {
            match self.staged.get(&v) {
                Some(&src) => Some(src),
                None if warpgroup && is_b && !self.views.contains_key(&v) => Some(v),
                None => None,
            }
        };
        // TILES_WGMMA_SMEM_A (developers): stage `a` anyway (`outer`: only an `a` defined
        // outside the dot's block; `inner`: only one defined in it).
        // By default an `a` computed outside the dot's block (a loop-invariant `q`) is staged:
        // register-form wgmma reading such long-lived registers next to a second register-form
        // dot gave wrong causal-attention results on the H200 (root cause not found; staging
        // either operand fixes it, see the note).
        let dot_block = self.block_of_op(op);
        let a_block = match self.func.values[a].def {
            tile_ir::ValueDef::Result(o, _) => self.block_of_op(o),
            tile_ir::ValueDef::Arg(b, _) => Some(b),
        };
        let inner = dot_block.is_some() && dot_block == a_block;
        let stage_a = match std::env::var("TILES_WGMMA_SMEM_A").ok().as_deref() {
            None | Some("outer") => warpgroup && !inner,
            Some("inner") => warpgroup && inner,
            Some("none") => false,
            Some(_) => warpgroup,
        };
        // An fp8 `a` converted from a warpgroup accumulator's layout (attention's
        // probabilities) may go to wgmma's register form, its fragments exchanged within each
        // quad of lanes (`fp8_register_a` says when, `frag_a_fp8` how); any other fp8 `a` is
        // staged K-major.
        let fp8_acc_a = warpgroup
            && self.is_fp8(a)
            && self
                .staged
                .get(&a)
                .is_some_and(|&src| fp8_register_a(self.func, src, &self.func.layouts[lc]));
        let stage_a = stage_a || (warpgroup && self.wgmma_k_major_only(a) && !fp8_acc_a);
        let (sa, sb) = if fp8_acc_a {
            (None, stage_of(b, true))
        } else {
            (stage_of(a, stage_a), stage_of(b, true))
        };
        let mut srcs = Vec::with_capacity(2);
        if sa.is_some() || sb.is_some() {
            self.fence_before_shared_write()?;
        }
        let align = if warpgroup { 1024 } else { 128 };
        let mut offset = 0u32;
        for (k_dim, (v, staged)) in [(1, (a, sa)), (0, (b, sb))] {
            srcs.push(match staged {
                Some(src) => {
                    let k_major = (warpgroup && self.wgmma_k_major_only(v)).then_some(k_dim);
                    let t = self.stage_tile(src, offset, k_major)?;
                    offset += SmemTile::bytes(t.dims, t.elem).next_multiple_of(align);
                    Src::Smem(if self.staged_transposed.contains(&v) {
                        t.transposed()
                    } else {
                        t
                    })
                }
                None if fp8_acc_a && k_dim == 1 => self.reg_src(self.staged[&a])?,
                None => self.reg_src(v)?,
            });
        }
        if sa.is_some() || sb.is_some() {
            if warpgroup {
                // Written by ordinary stores, read by the tensor cores' async proxy.
                self.asm_void("fence.proxy.async.shared::cta;", "~{memory}", &[])?;
            }
            self.barrier_sync()?;
        }
        let src_b = srcs.pop().expect("two operands");
        let src_a = srcs.pop().expect("two operands");
        let out = match (&self.func.layouts[lc], &src_a, &src_b) {
            (Layout::Mma(m), _, Src::Smem(tb)) if m.version == 3 => {
                let tb = *tb;
                // The group stays in flight past an async or deferred dot (the group before
                // it, whose ring slots the copies after this dot refill, is done in every
                // warpgroup after the barrier); other dots wait for their own group.
                let chained = self.async_dots.contains(&op);
                let deferred = self.deferred.dots.contains(&op);
                let in_flight = u32::from(chained || deferred);
                let out = self.dot_wgmma(a, c, &src_a, &tb, in_flight, deferred)?;
                self.vals.insert(data.results[0], out);
                if chained || self.deferred.barrier_after.contains(&op) {
                    self.barrier_sync()?;
                }
                self.get(data.results[0])?.clone()
            }
            (Layout::Mma(m), _, _) if m.version == 3 => {
                return self.internal("warpgroup dot with an operand outside shared memory")
            }
            (Layout::Mma(_), _, _) => self.dot_mma(a, b, c, &src_a, &src_b, precision)?,
            _ => self.dot_fma(a, b, c, &src_a, &src_b)?,
        };
        if sa.is_some() || sb.is_some() {
            self.smem_busy = true;
        }
        self.vals.insert(data.results[0], out);
        // This dot waited for every group, the deferred dots of the previous iteration too:
        // their accumulators pass through a wait (which finds nothing pending) before use.
        if let Some(carried) = self.deferred.waits.get(&op).cloned() {
            self.wait_warpgroups(0, &carried)?;
        }
        Ok(())
    }

    /// Whether `v` is in a warpgroup dot's operand layout.
    pub(crate) fn is_warpgroup_operand(&self, v: Value) -> bool {
        self.func
            .layout_of(v)
            .is_some_and(Layout::is_warpgroup_operand)
    }

    /// Whether `v` is a tile whose warpgroup dots read it K-major from shared memory: fp8,
    /// int8 and fp32 (as tf32); wgmma transposes only 16-bit operands.
    pub(crate) fn wgmma_k_major_only(&self, v: Value) -> bool {
        self.func
            .ty(v)
            .elem
            .dtype()
            .is_some_and(wgmma_k_major_dtype)
    }

    /// Whether `v` is a tile of fp8 (whose warpgroup dots read it K-major from shared memory,
    /// or, as `a`, from an accumulator's registers: [`fp8_register_a`]).
    pub(crate) fn is_fp8(&self, v: Value) -> bool {
        self.func.ty(v).elem.dtype().is_some_and(|d| d.is_fp8())
    }

    /// The four `a` registers of an fp8 register-form wgmma (m64nNk32) for 64-row block `m0`
    /// and K step `kk`, from an fp8 tile in a warpgroup accumulator's layout.
    ///
    /// Lane q of a quad holds rows g and g + 8 at columns 8j + 2q and 8j + 2q + 1; its fragment
    /// wants columns 4q..4q+3 of each half step (`a0`: row g, `a1`: row g + 8; `a2`, `a3`: the
    /// second half). Per half step each lane packs its two rows' pairs of the first 8 columns
    /// (`low`) and of the next 8 (`high`). Lanes q < 2 take low words from lanes 2q and 2q + 1,
    /// lanes q >= 2 high words from lanes 2q - 3 and 2q - 4: in the first shuffle even lanes
    /// offer `low` and odd lanes `high`, in the second the other way round, so each lane reads
    /// exactly its four bytes from each (one `shfl.sync.idx`, a `selp` and a `prmt` per register).
    fn frag_a_fp8(
        &mut self,
        src: &Src<'ctx>,
        quad: &Fp8Quad<'ctx>,
        m0: u32,
        kk: u32,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let Src::Regs { regs, index, shape } = src else {
            return self.internal("fp8 register fragments from shared memory");
        };
        let i32t: BasicTypeEnum = self.cx.i32_type().into();
        let shfl = "shfl.sync.idx.b32 $0, $1, $2, 0x1f, -1;";
        let mut out = Vec::with_capacity(4);
        for half in [0, 16] {
            let c0 = 32 * kk + half;
            // Bytes packed by integer shifts and ors, which fold back into the 16-bit pairs the
            // conversion to fp8 made (`cast_pairs_to_fp8`): one `mov.b32 {lo, hi}` per word.
            let word = |lw: &Self, c: u32| -> R<BasicValueEnum<'ctx>> {
                let i32t = lw.cx.i32_type();
                let mut w = i32t.const_zero();
                for (k, at) in [[m0, c], [m0, c + 1], [m0 + 8, c], [m0 + 8, c + 1]]
                    .iter()
                    .enumerate()
                {
                    let e = lw.reg_at(regs, index, *at, shape)?;
                    let e =
                        lw.b.build_bit_cast(e, lw.cx.i8_type(), "f8")?
                            .into_int_value();
                    let e = lw.b.build_int_z_extend(e, i32t, "f8")?;
                    let e = lw.b.build_left_shift(e, lw.i32(8 * k as u64), "f8")?;
                    w = lw.b.build_or(w, e, "f8")?;
                }
                Ok(w.into())
            };
            let (low, high) = (word(self, c0)?, word(self, c0 + 8)?);
            let b = &self.b;
            let offer_a = b.build_select(quad.even, low, high, "offer")?;
            let offer_b = b.build_select(quad.even, high, low, "offer")?;
            let (Some(x), Some(y)) = (
                self.asm(i32t, shfl, "=r,r,r", &[offer_a, quad.from_a.into()], true)?,
                self.asm(i32t, shfl, "=r,r,r", &[offer_b, quad.from_b.into()], true)?,
            ) else {
                return self.internal("shfl returned nothing");
            };
            for sel in [quad.sel_row, quad.sel_row8] {
                let Some(w) = self.asm(
                    i32t,
                    "prmt.b32 $0, $1, $2, $3;",
                    "=r,r,r,r",
                    &[x, y, sel.into()],
                    false,
                )?
                else {
                    return self.internal("prmt returned nothing");
                };
                out.push(w);
            }
        }
        // [row g, row g + 8] of each half: wgmma's a0, a1, a2, a3.
        Ok(out)
    }

    /// For [`Self::frag_a_fp8`]: this lane's shuffle sources and byte selectors.
    fn fp8_quad_lanes(&self) -> R<Fp8Quad<'ctx>> {
        let b = &self.b;
        let lane = self.lane();
        let q = b.build_and(lane, self.i32(3), "q")?;
        let base = b.build_and(lane, self.i32(0xffff_fffc), "quad")?;
        let low = b.build_int_compare(inkwell::IntPredicate::ULT, q, self.i32(2), "low")?;
        let q2 = b.build_left_shift(q, self.i32(1), "q2")?;
        let q2_1 = b.build_int_add(q2, self.i32(1), "q2")?;
        let (lo, hi) = (
            b.build_and(q2, self.i32(3), "q2")?,
            b.build_and(q2_1, self.i32(3), "q2")?,
        );
        // Lanes q < 2 read lanes 2q, 2q + 1; lanes q >= 2 read (2q + 1) mod 4, 2q mod 4.
        let a = b.build_select(low, lo, hi, "from")?.into_int_value();
        let c = b.build_select(low, hi, lo, "from")?.into_int_value();
        let from_a = b.build_or(base, a, "from")?;
        let from_b = b.build_or(base, c, "from")?;
        let bit = b.build_and(q, self.i32(1), "odd")?;
        let even = b.build_int_compare(inkwell::IntPredicate::EQ, bit, self.i32(0), "even")?;
        let pick = |lo_sel: u64, hi_sel: u64| -> R<IntValue<'ctx>> {
            Ok(
                b.build_select(low, self.i32(lo_sel), self.i32(hi_sel), "sel")?
                    .into_int_value(),
            )
        };
        Ok(Fp8Quad {
            from_a,
            from_b,
            even,
            sel_row: pick(0x5410, 0x1054)?,
            sel_row8: pick(0x7632, 0x3276)?,
        })
    }

    fn block_of_op(&self, op: Op) -> Option<tile_ir::Block> {
        self.func
            .blocks
            .iter()
            .find(|(_, d)| d.ops.contains(&op))
            .map(|(b, _)| b)
    }

    /// Register index of each element coordinate of a tile of type `ty` in this thread.
    fn reg_index(&mut self, ty: &tile_ir::Type) -> R<HashMap<Vec<u32>, usize>> {
        let g = self.geometry(ty)?;
        Ok(g.regs
            .iter()
            .enumerate()
            .map(|(i, c)| (c.clone(), i))
            .collect())
    }

    fn reg_src(&mut self, v: Value) -> R<Src<'ctx>> {
        if let Some(t) = self.views.get(&v) {
            return Ok(Src::Smem(*t));
        }
        let ty = *self.func.ty(v);
        let index = self.reg_index(&ty)?;
        let d = ty.shape.dims();
        Ok(Src::Regs {
            regs: self.get(v)?.clone(),
            index,
            shape: [d[0], d[1]],
        })
    }

    fn reg_at(
        &self,
        regs: &[BasicValueEnum<'ctx>],
        index: &HashMap<Vec<u32>, usize>,
        c: [u32; 2],
        shape: &[u32],
    ) -> R<BasicValueEnum<'ctx>> {
        let key = vec![c[0] % shape[0], c[1] % shape[1]];
        match index.get(&key) {
            Some(&i) => Ok(regs[i]),
            None => self.internal(&format!("dot operand has no register at {key:?}")),
        }
    }

    /// CUDA cores, K outermost: each step reads one column of `a` and one row of `b` (the
    /// rows and columns this thread's results need) and updates every accumulator. Operands
    /// in shared memory are read a chunk of K at a time, in vector loads where the tile's
    /// storage allows ([`Self::fma_operand`]); the products are summed in the same order.
    fn dot_fma(
        &mut self,
        a: Value,
        b: Value,
        c: Value,
        src_a: &Src<'ctx>,
        src_b: &Src<'ctx>,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let (ta, tb, tc) = (*self.func.ty(a), *self.func.ty(b), *self.func.ty(c));
        let gc = self.geometry(&tc)?;
        let (ga, gb) = (self.geometry(&ta)?, self.geometry(&tb)?);
        let mut acc = self.get(c)?.clone();
        let k = ta.shape.dims()[1];
        let elem = tc.elem;
        let tys = [elem, elem, elem];
        let mut rows: Vec<u32> = gc.regs.iter().map(|co| co[0]).collect();
        rows.sort();
        rows.dedup();
        let mut cols: Vec<u32> = gc.regs.iter().map(|co| co[1]).collect();
        cols.sort();
        cols.dedup();
        // K steps read together: as many as one vector holds along K, for whichever operand
        // is stored K-contiguous (`a` with rows along K, `b` with columns along it).
        let along_k = |src: &Src<'ctx>, k_dim: usize| match src {
            Src::Smem(t) if t.contig == k_dim => t.run_limit(),
            _ => 1,
        };
        let kc = along_k(src_a, 1).max(along_k(src_b, 0)).min(k);
        let kc = if kc.is_power_of_two() && k % kc == 0 {
            kc
        } else {
            1
        };
        let float = elem.dtype().is_some_and(|d| d.is_float());
        for k0 in (0..k).step_by(kc as usize) {
            let av = self.fma_operand(src_a, &ga, 0, &rows, k0, kc, ta.elem, elem)?;
            let bv = self.fma_operand(src_b, &gb, 1, &cols, k0, kc, tb.elem, elem)?;
            for kk in k0..k0 + kc {
                for (i, co) in gc.regs.iter().enumerate() {
                    let (x, y) = (av[&(co[0], kk)], bv[&(co[1], kk)]);
                    acc[i] = if float {
                        self.elementwise(OpKind::Fma, &tys, elem, &[x, y, acc[i]])?
                    } else {
                        let p = self.elementwise(
                            OpKind::Binary(BinaryOp::Mul),
                            &tys[..2],
                            elem,
                            &[x, y],
                        )?;
                        self.elementwise(
                            OpKind::Binary(BinaryOp::Add),
                            &tys[..2],
                            elem,
                            &[p, acc[i]],
                        )?
                    };
                }
            }
        }
        Ok(acc)
    }

    /// One FMA dot operand's values for K steps `k0..k0 + kc`, keyed by (offset along
    /// `outer` — rows of `a` (0), columns of `b` (1) — relative to this thread's, K step), in
    /// register form and cast to `to`. From shared memory, runs along the tile's contiguous
    /// dimension are single vector loads: along K, `kc` divides into whole runs (their starts
    /// are constants); along `outer`, runs of this thread's offsets that start at a multiple
    /// of a width the thread's own offset is aligned to. One load per run instead of one per
    /// element also spares LLVM's load-store vectorizer most of its work (a third of such a
    /// dot's compile).
    #[allow(clippy::too_many_arguments)]
    fn fma_operand(
        &mut self,
        src: &Src<'ctx>,
        geo: &crate::lower::Geometry<'ctx>,
        outer: usize,
        offsets: &[u32],
        k0: u32,
        kc: u32,
        from: Elem,
        to: Elem,
    ) -> R<HashMap<(u32, u32), BasicValueEnum<'ctx>>> {
        let coord = |o: u32, kk: u32| if outer == 0 { [o, kk] } else { [kk, o] };
        let mut out = HashMap::new();
        match src {
            Src::Regs { regs, index, shape } => {
                for &o in offsets {
                    for kk in k0..k0 + kc {
                        let x = self.reg_at(regs, index, coord(o, kk), shape)?;
                        out.insert((o, kk), self.cast_elem(x, from, to)?);
                    }
                }
            }
            Src::Smem(t) => {
                // Runs (outer offset, K step, length) along the tile's contiguous dimension.
                let along_k = t.contig != outer;
                let runs: Vec<(u32, u32, u32)> = if along_k {
                    let w = t.run_limit().min(kc);
                    let starts = (k0..k0 + kc).step_by(w as usize);
                    offsets
                        .iter()
                        .flat_map(|&o| starts.clone().map(move |k| (o, k, w)))
                        .collect()
                } else {
                    // Both are powers of two: the runs' starts are aligned for every thread.
                    let w = t.run_limit().min(geo.thread_align[outer]);
                    let mut spans = Vec::new();
                    let mut i = 0;
                    while i < offsets.len() {
                        let o = offsets[i];
                        let whole = o.is_multiple_of(w)
                            && offsets[i..].iter().copied().take(w as usize).eq(o..o + w);
                        let n = if whole { w } else { 1 };
                        spans.push((o, n));
                        i += n as usize;
                    }
                    (k0..k0 + kc)
                        .flat_map(|k| spans.iter().map(move |&(o, n)| (o, k, n)))
                        .collect()
                };
                for (o, k, n) in runs {
                    let oi = self
                        .b
                        .build_int_add(geo.thread[outer], self.i32(o as u64), "o")?;
                    let ki = self.i32(k as u64);
                    let (i, j) = if outer == 0 { (oi, ki) } else { (ki, oi) };
                    for (e, x) in self.smem_load_run(t, i, j, n)?.into_iter().enumerate() {
                        let e = e as u32;
                        let key = if along_k { (o, k + e) } else { (o + e, k) };
                        out.insert(key, self.cast_elem(x, from, to)?);
                    }
                }
            }
        }
        Ok(out)
    }

    fn cast_elem(
        &mut self,
        x: BasicValueEnum<'ctx>,
        from: Elem,
        to: Elem,
    ) -> R<BasicValueEnum<'ctx>> {
        if from == to {
            return Ok(x);
        }
        self.elementwise(OpKind::Cast, &[from], to, &[x])
    }

    /// One `mma.sync` fragment register of an operand's consecutive K elements: a 32-bit
    /// word of them, or the element itself for fp64 (its fragments hold one f64 each).
    fn frag_reg(&self, elems: &[BasicValueEnum<'ctx>]) -> R<BasicValueEnum<'ctx>> {
        match elems {
            [x] if x.get_type() == self.cx.f64_type().into() => Ok(*x),
            _ => self.pack32(elems),
        }
    }

    /// Packs consecutive elements into one 32-bit register.
    fn pack32(&self, elems: &[BasicValueEnum<'ctx>]) -> R<BasicValueEnum<'ctx>> {
        let i32t = self.cx.i32_type();
        if elems.len() == 1 {
            return Ok(self.b.build_bit_cast(elems[0], i32t, "pk")?);
        }
        let et: BasicTypeEnum = elems[0].get_type();
        let vt = crate::lower::vector_of(et, elems.len() as u32);
        let mut v = vt.get_undef();
        for (i, &e) in elems.iter().enumerate() {
            v = self
                .b
                .build_insert_element(v, e, self.i32(i as u64), "pk")?;
        }
        Ok(self.b.build_bit_cast(v, i32t, "pk")?)
    }

    /// Splits a 32-bit register back into `n` elements of type `et`.
    fn unpack32(
        &self,
        x: BasicValueEnum<'ctx>,
        et: BasicTypeEnum<'ctx>,
        n: u32,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let v = self
            .b
            .build_bit_cast(x, crate::lower::vector_of(et, n), "up")?
            .into_vector_value();
        (0..n)
            .map(|i| Ok(self.b.build_extract_element(v, self.i32(i as u64), "up")?))
            .collect()
    }

    /// Rounds an `f32` register to TF32 (`cvt.rna.tf32.f32`), kept in an `f32` register.
    fn to_tf32(&self, x: BasicValueEnum<'ctx>) -> R<BasicValueEnum<'ctx>> {
        let i32t: BasicTypeEnum = self.cx.i32_type().into();
        let r = self.asm(i32t, "cvt.rna.tf32.f32 $0, $1;", "=r,f", &[x], false)?;
        match r {
            Some(r) => Ok(self.b.build_bit_cast(r, self.cx.f32_type(), "tf32")?),
            None => self.internal("asm"),
        }
    }

    /// The 3-pass TF32 product uses part 1 `tf32(x)` and part 2 `tf32(x - tf32(x))` of each
    /// 32-bit word; part 0 is the word itself.
    fn tf32_word(&self, w: BasicValueEnum<'ctx>, part: u8) -> R<BasicValueEnum<'ctx>> {
        if part == 0 {
            return Ok(w);
        }
        let x = self.b.build_bit_cast(w, self.cx.f32_type(), "f")?;
        let big = self.to_tf32(x)?;
        let r = if part == 1 {
            big
        } else {
            let small =
                self.b
                    .build_float_sub(x.into_float_value(), big.into_float_value(), "lo")?;
            self.to_tf32(small.into())?
        };
        Ok(self.b.build_bit_cast(r, self.cx.i32_type(), "w")?)
    }

    /// Tensor cores: one `mma.sync` per 16×8 result block and K step.
    fn dot_mma(
        &mut self,
        a: Value,
        b: Value,
        c: Value,
        src_a: &Src<'ctx>,
        src_b: &Src<'ctx>,
        precision: DotPrecision,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let (ta, tc) = (*self.func.ty(a), *self.func.ty(c));
        let _ = b;
        let (Some(din), Some(dacc)) = (ta.elem.dtype(), tc.elem.dtype()) else {
            return self.internal("dot of non-numbers");
        };
        let Some(kind) = mma_kind(din, dacc, self.capability) else {
            return self.unsupported(format!("a tensor-core dot of {din} into {dacc}"));
        };
        let Layout::Mma(m) = self.func.layouts[tc.layout.expect("checked")].clone() else {
            return self.internal("dot_mma on a non-mma layout");
        };
        let (wm, wn) = m.wm_wn();
        let sa = ta.shape.dims().to_vec();
        let sc = tc.shape.dims().to_vec();
        let kw = (32 / din.bits()).max(1);
        let kt = 8 * kw;
        let (tm, tn) = (16 * wm, 8 * wn);
        let reps_m = (sc[0] / tm).max(1);
        let reps_n = (sc[1] / tn).max(1);
        let reps_k = sa[1] / kt;
        let geo = Frag::new(self, wm, wn, kw, tm, tn)?;
        let ic = self.reg_index(&tc)?;
        let mut rc = self.get(c)?.clone();
        let split = din == DType::F32 && precision == DotPrecision::Tf32x3;
        // (part of a, part of b) products: big·big, or big·small + small·big + big·big.
        let passes: &[(u8, u8)] = if split {
            &[(1, 2), (2, 1), (1, 1)]
        } else {
            &[(0, 0)]
        };
        let acc_elem_t = crate::lower::dtype_type(self.cx, dacc);
        for rk in 0..reps_k {
            let fa: Vec<Vec<BasicValueEnum>> = (0..reps_m)
                .map(|rm| self.frag_a(&geo, src_a, din, rm, rk))
                .collect::<R<_>>()?;
            let mut fb: Vec<Vec<BasicValueEnum>> = Vec::with_capacity(reps_n as usize);
            let mut rn = 0;
            while rn < reps_n {
                let two = rn + 1 < reps_n;
                let words = self.frag_b(&geo, src_b, din, rn, rk, two)?;
                fb.push(words[..2].to_vec());
                if two {
                    fb.push(words[2..4].to_vec());
                }
                rn += if two { 2 } else { 1 };
            }
            for &(pa, pb) in passes {
                let fa_p: Vec<Vec<BasicValueEnum>> = fa
                    .iter()
                    .map(|w| w.iter().map(|&x| self.tf32_word(x, pa)).collect::<R<_>>())
                    .collect::<R<_>>()?;
                let fb_p: Vec<Vec<BasicValueEnum>> = fb
                    .iter()
                    .map(|w| w.iter().map(|&x| self.tf32_word(x, pb)).collect::<R<_>>())
                    .collect::<R<_>>()?;
                for rm in 0..reps_m {
                    for rn in 0..reps_n {
                        let (m0, n0) = (rm * tm, rn * tn);
                        let at = [[m0, n0], [m0, n0 + 1], [m0 + 8, n0], [m0 + 8, n0 + 1]];
                        let mut idx = Vec::with_capacity(4);
                        for p in at {
                            let key = vec![p[0] % sc[0], p[1] % sc[1]];
                            match ic.get(&key) {
                                Some(&i) => idx.push(i),
                                None => return self.internal("dot accumulator layout"),
                            }
                        }
                        let acc_in: Vec<BasicValueEnum> = if kind.acc_regs == 2 {
                            vec![
                                self.pack32(&[rc[idx[0]], rc[idx[1]]])?,
                                self.pack32(&[rc[idx[2]], rc[idx[3]]])?,
                            ]
                        } else {
                            idx.iter().map(|&i| rc[i]).collect()
                        };
                        let (fa_r, fb_r) = (&fa_p[rm as usize], &fb_p[rn as usize]);
                        let res = if kind.split_m8n8k4 {
                            let mut lo = acc_in[..2].to_vec();
                            let mut hi = acc_in[2..].to_vec();
                            for h in 0..2 {
                                let b = &fb_r[h..h + 1];
                                lo = self.mma(&kind, &fa_r[2 * h..2 * h + 1], b, &lo)?;
                                hi = self.mma(&kind, &fa_r[2 * h + 1..2 * h + 2], b, &hi)?;
                            }
                            lo.into_iter().chain(hi).collect()
                        } else {
                            self.mma(&kind, fa_r, fb_r, &acc_in)?
                        };
                        if kind.acc_regs == 2 {
                            let lo = self.unpack32(res[0], acc_elem_t, 2)?;
                            let hi = self.unpack32(res[1], acc_elem_t, 2)?;
                            for (slot, v) in idx.iter().zip([lo[0], lo[1], hi[0], hi[1]]) {
                                rc[*slot] = v;
                            }
                        } else {
                            for (slot, v) in idx.iter().zip(res) {
                                rc[*slot] = v;
                            }
                        }
                    }
                }
            }
        }
        Ok(rc)
    }

    /// The four 32-bit registers of `a`'s fragment for result rows block `rm`, K step `rk`.
    fn frag_a(
        &mut self,
        f: &Frag<'ctx>,
        src: &Src<'ctx>,
        din: DType,
        rm: u32,
        rk: u32,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let kw = f.kw;
        let (m0, k0) = (rm * f.tm, rk * 8 * kw);
        let parts = [(0, 0), (8, 0), (0, 4 * kw), (8, 4 * kw)];
        match src {
            Src::Regs { regs, index, shape } => parts
                .iter()
                .map(|&(i, j)| {
                    let el: Vec<BasicValueEnum> = (0..kw)
                        .map(|e| self.reg_at(regs, index, [m0 + i, k0 + j + e], shape))
                        .collect::<R<_>>()?;
                    self.frag_reg(&el)
                })
                .collect(),
            Src::Smem(t) => {
                let b = &self.b;
                let row0 = b.build_int_add(f.wrow, self.i32(m0 as u64), "r")?;
                // ldmatrix moves 16-bit pairs: it serves 32- and 16-bit elements, not fp64.
                if t.contig == 1 && din.bits() <= 32 {
                    // K contiguous: plain ldmatrix; matrix q covers rows +8·(q&1), K +4kw·(q>>1).
                    let i = b.build_int_add(row0, f.q1_x8_rr, "i")?;
                    let j =
                        b.build_int_add(self.i32(k0 as u64), self.scaled(f.q2, 4 * kw)?, "j")?;
                    let idx = self.smem_index(t, i, j)?;
                    let addr = self.smem_addr32(t, idx)?;
                    self.ldmatrix(addr, 4, false)
                } else if din.bits() == 16 {
                    // M contiguous: transposed ldmatrix; matrix q covers rows +8·(q&1), K +8·(q>>1).
                    let i = b.build_int_add(row0, f.q1_x8, "i")?;
                    let kq = self.scaled(f.q2, 8)?;
                    let j = self.b.build_int_add(self.i32(k0 as u64), kq, "j")?;
                    let j = self.b.build_int_add(j, f.rr, "j")?;
                    let idx = self.smem_index(t, i, j)?;
                    let addr = self.smem_addr32(t, idx)?;
                    self.ldmatrix(addr, 4, true)
                } else {
                    let mut words = Vec::with_capacity(4);
                    for (i, j) in parts {
                        let r = self.b.build_int_add(row0, f.g, "i")?;
                        let r = self.b.build_int_add(r, self.i32(i as u64), "i")?;
                        let mut el = Vec::with_capacity(kw as usize);
                        for e in 0..kw {
                            let c =
                                self.b
                                    .build_int_add(f.t_kw, self.i32((k0 + j + e) as u64), "j")?;
                            el.push(self.smem_load_elem(t, r, c)?);
                        }
                        words.push(self.frag_reg(&el)?);
                    }
                    Ok(words)
                }
            }
        }
    }

    /// `b`'s fragment registers for result column block `rn` (and `rn + 1` when `two`), K step
    /// `rk`: `[b0, b1]` per block.
    fn frag_b(
        &mut self,
        f: &Frag<'ctx>,
        src: &Src<'ctx>,
        din: DType,
        rn: u32,
        rk: u32,
        two: bool,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let kw = f.kw;
        let k0 = rk * 8 * kw;
        let blocks: Vec<u32> = if two { vec![rn, rn + 1] } else { vec![rn] };
        match src {
            Src::Regs { regs, index, shape } => {
                let mut words = Vec::new();
                for &r in &blocks {
                    for j in [0, 4 * kw] {
                        let el: Vec<BasicValueEnum> = (0..kw)
                            .map(|e| self.reg_at(regs, index, [k0 + j + e, r * f.tn], shape))
                            .collect::<R<_>>()?;
                        words.push(self.frag_reg(&el)?);
                    }
                }
                Ok(words)
            }
            Src::Smem(t) => {
                let n = if two { 4 } else { 2 };
                let col0 = self
                    .b
                    .build_int_add(f.wcol, self.i32((rn * f.tn) as u64), "c")?;
                // Matrix q: K half q&1, column block rn + (q>>1).
                let colq = self.b.build_int_add(col0, self.scaled(f.q2, f.tn)?, "c")?;
                if t.contig == 0 && din.bits() <= 32 {
                    // K contiguous (storage rows are columns of b): plain ldmatrix.
                    let i = self.b.build_int_add(
                        self.i32(k0 as u64),
                        self.scaled(f.q1, 4 * kw)?,
                        "i",
                    )?;
                    let j = self.b.build_int_add(colq, f.rr, "j")?;
                    let idx = self.smem_index(t, i, j)?;
                    let addr = self.smem_addr32(t, idx)?;
                    self.ldmatrix(addr, n, false)
                } else if din.bits() == 16 {
                    // N contiguous: transposed ldmatrix over rows of K.
                    let i =
                        self.b
                            .build_int_add(self.i32(k0 as u64), self.scaled(f.q1, 8)?, "i")?;
                    let i = self.b.build_int_add(i, f.rr, "i")?;
                    let idx = self.smem_index(t, i, colq)?;
                    let addr = self.smem_addr32(t, idx)?;
                    self.ldmatrix(addr, n, true)
                } else {
                    let mut words = Vec::new();
                    for &r in &blocks {
                        let c = self
                            .b
                            .build_int_add(f.wcol, self.i32((r * f.tn) as u64), "c")?;
                        let c = self.b.build_int_add(c, f.g, "c")?;
                        for j in [0, 4 * kw] {
                            let mut el = Vec::with_capacity(kw as usize);
                            for e in 0..kw {
                                let k = self.b.build_int_add(
                                    f.t_kw,
                                    self.i32((k0 + j + e) as u64),
                                    "k",
                                )?;
                                el.push(self.smem_load_elem(t, k, c)?);
                            }
                            words.push(self.frag_reg(&el)?);
                        }
                    }
                    Ok(words)
                }
            }
        }
    }

    fn scaled(&self, x: IntValue<'ctx>, by: u32) -> R<IntValue<'ctx>> {
        Ok(self.b.build_int_mul(x, self.i32(by as u64), "sc")?)
    }

    /// One `mma.sync`: returns the new accumulator registers.
    fn mma(
        &self,
        kind: &MmaKind,
        a: &[BasicValueEnum<'ctx>],
        b: &[BasicValueEnum<'ctx>],
        acc: &[BasicValueEnum<'ctx>],
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let n_acc = acc.len();
        let list = |from: usize, n: usize| -> String {
            let items: Vec<String> = (from..from + n).map(|i| format!("${i}")).collect();
            format!("{{{}}}", items.join(", "))
        };
        let template = format!(
            "{} {}, {}, {}, {};",
            kind.instr,
            list(0, n_acc),
            list(n_acc, a.len()),
            list(n_acc + a.len(), b.len()),
            list(n_acc + a.len() + b.len(), n_acc),
        );
        let mut cons: Vec<String> = (0..n_acc)
            .map(|_| format!("={}", kind.acc_constraint))
            .collect();
        cons.extend((0..a.len() + b.len()).map(|_| kind.ab_constraint.to_string()));
        cons.extend((0..n_acc).map(|i| i.to_string()));
        let acc_t = acc[0].get_type();
        let fields: Vec<BasicTypeEnum> = vec![acc_t; n_acc];
        let ret = self.cx.struct_type(&fields, false);
        let mut args: Vec<BasicValueEnum> = Vec::with_capacity(a.len() + b.len() + n_acc);
        args.extend_from_slice(a);
        args.extend_from_slice(b);
        args.extend_from_slice(acc);
        let r = self.asm(ret.into(), &template, &cons.join(","), &args, false)?;
        let Some(r) = r else {
            return self.internal("mma returned nothing");
        };
        let sv = r.into_struct_value();
        (0..n_acc as u32)
            .map(|i| Ok(self.b.build_extract_value(sv, i, "acc")?))
            .collect()
    }
}

/// How `wgmma` reads one operand tile from shared memory: the constant bits of its matrix
/// descriptors and the byte offset of a sub-block.
struct WgmmaOperand {
    /// K contiguous in storage (otherwise M or N is: the instruction's "transposed" form).
    k_major: bool,
    /// Bytes per element, columns per 128-byte block, rows, bytes per block row.
    eb: u32,
    block_cols: u32,
    rows: u32,
    row_bytes: u32,
}

impl WgmmaOperand {
    fn new(t: &SmemTile<'_>, k_dim: usize) -> Option<WgmmaOperand> {
        let (rows, _) = t.storage();
        let eb = t.elem.bytes();
        let block_cols = t.block_cols();
        let row_bytes = block_cols * eb;
        let ok = matches!(row_bytes, 32 | 64 | 128) && rows.is_multiple_of(8);
        ok.then_some(WgmmaOperand {
            k_major: t.contig == k_dim,
            eb,
            block_cols,
            rows,
            row_bytes,
        })
    }

    fn block_bytes(&self) -> u32 {
        self.rows * self.row_bytes
    }

    /// Descriptor bits other than the start address: the leading byte offset (between 64-column
    /// blocks along M/N; unused for K-major swizzled tiles), the stride byte offset (between
    /// groups of 8 rows) and the swizzle mode.
    fn desc_bits(&self) -> u64 {
        let lbo = if self.k_major {
            1
        } else {
            (self.block_bytes() >> 4) as u64
        };
        let sbo = ((8 * self.row_bytes) >> 4) as u64;
        let mode: u64 = match self.row_bytes {
            128 => 1,
            64 => 2,
            _ => 3,
        };
        (lbo << 16) | (sbo << 32) | (mode << 62)
    }

    /// Byte offset of the sub-tile starting at row `mn0` of M (or N) and column `k0` of K.
    fn offset(&self, mn0: u32, k0: u32) -> u32 {
        if self.k_major {
            (k0 / self.block_cols) * self.block_bytes()
                + mn0 * self.row_bytes
                + (k0 % self.block_cols) * self.eb
        } else {
            (mn0 / self.block_cols) * self.block_bytes() + k0 * self.row_bytes
        }
    }
}

impl<'ctx> Lowering<'ctx, '_> {
    /// Hopper's warpgroup MMA: each group of four warps multiplies its 64-row blocks of `a`
    /// (shared memory, read through matrix descriptors) by all of `b`, `instr_n` columns and
    /// 16 K per instruction, accumulating in registers; the dot waits for its group before
    /// the result is used.
    fn dot_wgmma(
        &mut self,
        a: Value,
        c: Value,
        src_a: &Src<'ctx>,
        tb_s: &SmemTile<'ctx>,
        pending: u32,
        deferred: bool,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let (ta, tc) = (*self.func.ty(a), *self.func.ty(c));
        let (Some(din), Some(dacc)) = (ta.elem.dtype(), tc.elem.dtype()) else {
            return self.internal("dot of non-numbers");
        };
        let Layout::Mma(m) = self.func.layouts[tc.layout.expect("checked")].clone() else {
            return self.internal("dot_wgmma on a non-mma layout");
        };
        let name = |d: DType| match d {
            DType::F16 => Some("f16"),
            DType::BF16 => Some("bf16"),
            DType::F8E4M3 => Some("e4m3"),
            DType::F8E5M2 => Some("e5m2"),
            DType::I8 => Some("s8"),
            DType::U8 => Some("u8"),
            // A warpgroup dot of fp32 is a tf32 one (the layout pass picks warpgroups for
            // `tf32` precision only); wgmma reads the fp32 words, ignoring the low mantissa bits.
            DType::F32 => Some("tf32"),
            _ => None,
        };
        let (Some(a_name), Some(b_name)) = (name(din), name(tb_s.elem)) else {
            return self.unsupported(format!("a warpgroup dot of {din}"));
        };
        let int8 = matches!(din, DType::I8 | DType::U8);
        let acc_name = match dacc {
            DType::F32 if !int8 => "f32",
            DType::I32 if int8 => "s32",
            DType::F16 if din == DType::F16 => "f16",
            _ => return self.unsupported(format!("a warpgroup dot of {din} into {dacc}")),
        };
        let Some(ob) = WgmmaOperand::new(tb_s, 0) else {
            return self.internal("dot operand tile unfit for wgmma");
        };
        // fp8 and int8: 32 K per instruction, both operands K-major in shared memory (no
        // transposes), or (fp8) `a` in registers (see `frag_a_fp8`).
        let fp8 = din.is_fp8();
        let tf32 = din == DType::F32;
        let k_major_only = wgmma_k_major_dtype(din);
        let k_step = if tf32 {
            8
        } else if fp8 || int8 {
            32
        } else {
            16
        };
        if k_major_only && (!ob.k_major || matches!(src_a, Src::Smem(t) if t.contig != 1)) {
            return self
                .internal("warpgroup dot operands that wgmma cannot transpose must be K-major");
        }
        if (int8 || tf32) && !matches!(src_a, Src::Smem(_)) {
            return self.internal("int8 or tf32 warpgroup dot with `a` outside shared memory");
        }
        let wm = m.warps_per_cta[0];
        let inst_n = m.instr_n;
        let sc = tc.shape.dims().to_vec();
        let k = ta.shape.dims()[1];
        let reps_m = sc[0] / (16 * wm);
        let n_instr = sc[1] / inst_n;
        let ic = self.reg_index(&tc)?;
        let mut rc = self.get(c)?.clone();
        let acc_elem_t = crate::lower::dtype_type(self.cx, dacc);
        let packed = dacc == DType::F16;
        let i64t = self.cx.i64_type();
        // Descriptor of each tile's start; the warpgroup's rows of `a` are a run-time offset.
        let desc_base = |lw: &Self, t: &SmemTile<'ctx>, o: &WgmmaOperand| -> R<IntValue<'ctx>> {
            let addr = lw.b.build_ptr_to_int(t.base, lw.cx.i32_type(), "sa")?;
            let enc = lw.b.build_right_shift(addr, lw.i32(4), false, "sa")?;
            let enc = lw.b.build_int_z_extend(enc, i64t, "sa")?;
            Ok(lw
                .b
                .build_or(enc, i64t.const_int(o.desc_bits(), false), "desc")?)
        };
        // `a` in shared memory: a descriptor per instruction. In registers: the fragments of
        // mma.sync's m16n8k16 `a`, which is what each warp of a warpgroup holds for its 16
        // rows in wgmma's register form.
        let a_desc = match src_a {
            Src::Smem(t) => {
                let Some(o) = WgmmaOperand::new(t, 1) else {
                    return self.internal("dot operand tile unfit for wgmma");
                };
                let da = desc_base(self, t, &o)?;
                let wg = self
                    .b
                    .build_right_shift(self.warp(), self.i32(2), false, "wg")?;
                let wg_step = o.offset(64, 0) >> 4;
                let wg_off = self.b.build_int_mul(wg, self.i32(wg_step as u64), "wgo")?;
                let wg_off = self.b.build_int_z_extend(wg_off, i64t, "wgo")?;
                Some((self.b.build_int_add(da, wg_off, "desc")?, o))
            }
            Src::Regs { .. } => None,
        };
        let reg_a = a_desc.is_none();
        let frag = match a_desc {
            None if !fp8 => Some(Frag::new(self, wm, 1, 2, 16 * wm, 8)?),
            _ => None,
        };
        let db = desc_base(self, tb_s, &ob)?;
        let one = self.i32(1);
        let instr = format!(
            "wgmma.mma_async.sync.aligned.m64n{inst_n}k{k_step}.{acc_name}.{a_name}.{b_name}"
        );
        let tb_imm = u32::from(!ob.k_major);
        // The register form has no transpose flag for `a`; fp8 has none at all, and the
        // integer forms no scale or transpose flags either.
        let flags = match &a_desc {
            _ if int8 => String::new(),
            _ if fp8 || tf32 => "1, 1".to_string(),
            Some((_, o)) => format!("1, 1, {}, {tb_imm}", u32::from(!o.k_major)),
            None => format!("1, 1, {tb_imm}"),
        };
        // One asm statement issues the whole dot: `wgmma.fence`, every instruction,
        // `wgmma.commit_group` and `wgmma.wait_group pending`. Every register the
        // instructions read (accumulators, `a` fragments, descriptors) is an operand, so LLVM
        // computes it before the statement, that is before the fence, and keeps it until the
        // wait (register `a` is read until its group completes: such dots wait for 0).
        // The accumulators are outputs tied to their inputs: nothing reads them before the
        // wait. One statement instead of a fence, an instruction per 64-row block and K step,
        // a commit and a wait: LLVM handles each accumulator register once per dot instead of
        // once per instruction (fewer extracted values, a smaller selection DAG); the PTX
        // instructions are the same, in the same order.
        let mut groups: Vec<(u32, u32, Vec<usize>)> = Vec::new();
        for rm in 0..reps_m {
            let m0 = rm * 16 * wm;
            for nc in 0..n_instr {
                let mut slots = Vec::with_capacity((inst_n / 2) as usize);
                for i in 0..inst_n / 8 {
                    let n0 = nc * inst_n + 8 * i;
                    for p in [[m0, n0], [m0, n0 + 1], [m0 + 8, n0], [m0 + 8, n0 + 1]] {
                        let key = vec![p[0] % sc[0], p[1] % sc[1]];
                        match ic.get(&key) {
                            Some(&i) => slots.push(i),
                            None => return self.internal("wgmma accumulator layout"),
                        }
                    }
                }
                groups.push((rm, nc, slots));
            }
        }
        // Outputs (tied to the same inputs): the accumulator words of every group.
        let mut acc: Vec<BasicValueEnum<'ctx>> = Vec::new();
        let mut acc_at: Vec<std::ops::Range<usize>> = Vec::new();
        for (_, _, slots) in &groups {
            let start = acc.len();
            if packed {
                for p in slots.chunks(2) {
                    acc.push(self.pack32(&[rc[p[0]], rc[p[1]]])?);
                }
            } else {
                acc.extend(slots.iter().map(|&i| rc[i]));
            }
            acc_at.push(start..acc.len());
        }
        let n_acc = acc.len();
        // Other inputs, numbered after the outputs; descriptors used twice are passed once.
        let mut ins: Vec<BasicValueEnum<'ctx>> = Vec::new();
        let mut in_cons: Vec<&str> = Vec::new();
        // A deferred dot's register `a` is computed from a dot whose wait completes this one
        // in the next iteration, so nothing rewrites those registers while it runs.
        if reg_a && pending > 0 && !deferred {
            return self.internal("a warpgroup dot with register `a` left in flight");
        }
        // Register `a`: the fragments of each (64-row block, K step), in this order.
        let mut a_at: BTreeMap<(u32, u32), std::ops::Range<usize>> = BTreeMap::new();
        let quad = if reg_a && fp8 {
            Some(self.fp8_quad_lanes()?)
        } else {
            None
        };
        if reg_a {
            for rm in 0..reps_m {
                for kk in 0..k / k_step {
                    let regs = match (&frag, &quad) {
                        (Some(f), _) => self.frag_a(f, src_a, din, rm, kk)?,
                        (None, Some(qd)) => self.frag_a_fp8(src_a, qd, rm * 16 * wm, kk)?,
                        _ => return self.internal("register `a` without fragments"),
                    };
                    let start = n_acc + ins.len();
                    in_cons.extend(std::iter::repeat_n("r", regs.len()));
                    ins.extend(regs);
                    a_at.insert((rm, kk), start..n_acc + ins.len());
                }
            }
        }
        let pred = n_acc + ins.len();
        ins.push(one.into());
        in_cons.push("r");
        // A zero accumulator (`tl.dot(a, b)`, or `tl.zeros` outside a loop) is not read: each
        // instruction group's first K step runs with scale-d false (D = A*B), and the outputs
        // are not tied to inputs. Zeros passed as tied inputs are copies of one register, which
        // ptxas was seen to move between wgmma instructions still in flight, reading their
        // accumulators early (wrong results in Liger-Kernel's mHC backward; stop 26).
        // TILES_WGMMA_TIED_ZERO (developers): pass zero accumulators as tied inputs anyway.
        let zero_c = pending == 0
            && !deferred
            && self.is_zero_constant(c)
            && std::env::var_os("TILES_WGMMA_TIED_ZERO").is_none();
        let mut descs: HashMap<(bool, u64), usize> = HashMap::new();
        let mut desc = |lw: &Self,
                        ins: &mut Vec<BasicValueEnum<'ctx>>,
                        in_cons: &mut Vec<&str>,
                        is_a: bool,
                        base: IntValue<'ctx>,
                        off: u64|
         -> R<usize> {
            if let Some(&i) = descs.get(&(is_a, off)) {
                return Ok(i);
            }
            let name = if is_a { "da" } else { "db" };
            let d = lw.b.build_int_add(base, i64t.const_int(off, false), name)?;
            let i = n_acc + ins.len();
            ins.push(d.into());
            in_cons.push("l");
            descs.insert((is_a, off), i);
            Ok(i)
        };
        let list = |r: std::ops::Range<usize>| -> String {
            r.map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
        };
        let first_scale = if zero_c {
            format!(".reg .pred pz;\nsetp.eq.b32 pz, ${pred}, 0;\n")
        } else {
            String::new()
        };
        let mut text = format!(
            "{{\n.reg .pred p;\nsetp.ne.b32 p, ${pred}, 0;\n{first_scale}wgmma.fence.sync.aligned;\n"
        );
        for (g, (rm, nc, _)) in groups.iter().enumerate() {
            let (rm, nc) = (*rm, *nc);
            let m0 = rm * 16 * wm;
            for kk in 0..k / k_step {
                let k0 = kk * k_step;
                let b_off = (ob.offset(nc * inst_n, k0) >> 4) as u64;
                let b = desc(self, &mut ins, &mut in_cons, false, db, b_off)?;
                let a_text = match &a_desc {
                    Some((da, o)) => {
                        let a_off = (o.offset(m0, k0) >> 4) as u64;
                        format!("${}", desc(self, &mut ins, &mut in_cons, true, *da, a_off)?)
                    }
                    None => match a_at.get(&(rm, kk)) {
                        Some(r) => format!("{{{}}}", list(r.clone())),
                        None => return self.internal("wgmma without an `a` operand"),
                    },
                };
                let sep = if flags.is_empty() { "" } else { ", " };
                let scale = if zero_c && kk == 0 { "pz" } else { "p" };
                text.push_str(&format!(
                    "{instr} {{{}}}, {a_text}, ${b}, {scale}{sep}{flags};\n",
                    list(acc_at[g].clone())
                ));
            }
        }
        text.push_str(&format!(
            "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned {pending};\n}}"
        ));
        let letter = if packed || int8 { "=r" } else { "=f" };
        let mut cons: Vec<String> = (0..n_acc).map(|_| letter.to_string()).collect();
        cons.extend(in_cons.iter().map(|c| c.to_string()));
        if !zero_c {
            cons.extend((0..n_acc).map(|i| i.to_string()));
        }
        cons.push("~{memory}".to_string());
        let mut args = ins;
        if !zero_c {
            args.extend_from_slice(&acc);
        }
        let out = self.asm_struct(acc[0].get_type(), n_acc, &text, &cons, &args)?;
        for (g, (_, _, slots)) in groups.iter().enumerate() {
            let part = out[acc_at[g].clone()].to_vec();
            self.scatter_acc(&mut rc, slots, part, packed, acc_elem_t)?;
        }
        Ok(rc)
    }

    /// Whether `v` is a constant tile of zeros (`tl.zeros`, a dot's default accumulator).
    fn is_zero_constant(&self, v: Value) -> bool {
        match self.func.values[v].def {
            tile_ir::ValueDef::Result(o, _) => match self.func.ops[o].kind {
                OpKind::Constant(tile_ir::Const::Int(i)) => i == 0,
                OpKind::Constant(tile_ir::Const::Float(f)) => f == 0.0,
                _ => false,
            },
            tile_ir::ValueDef::Arg(..) => false,
        }
    }

    /// `wgmma.wait_group pending`, passing the registers of `values` (warpgroup accumulators)
    /// through it, so that nothing reads them before they are final (a loop's exit waits so
    /// for the group its last async dot left in flight).
    pub fn wait_warpgroups(&mut self, pending: u32, values: &[Value]) -> R<()> {
        let mut regs: Vec<BasicValueEnum<'ctx>> = Vec::new();
        let mut spans = Vec::with_capacity(values.len());
        for &v in values {
            let r = self.get(v)?.clone();
            spans.push((v, regs.len(), r.len()));
            regs.extend(r);
        }
        // f16 accumulators travel in pairs, as the instructions hold them.
        let words: Vec<BasicValueEnum<'ctx>> = regs
            .iter()
            .map(|&r| {
                Ok(if r.get_type() == self.cx.f16_type().into() {
                    self.b.build_bit_cast(r, self.cx.i16_type(), "w")?
                } else {
                    r
                })
            })
            .collect::<R<_>>()?;
        let template = format!("wgmma.wait_group.sync.aligned {pending};");
        if words.is_empty() {
            return self.asm_void(&template, "~{memory}", &[]);
        }
        let fields: Vec<BasicTypeEnum<'ctx>> = words.iter().map(|w| w.get_type()).collect();
        let mut cons: Vec<String> = fields
            .iter()
            .map(|t| {
                if t.is_float_type() {
                    "=f"
                } else if *t == self.cx.i16_type().into() {
                    "=h"
                } else {
                    "=r"
                }
                .to_string()
            })
            .collect();
        cons.extend((0..words.len()).map(|i| i.to_string()));
        cons.push("~{memory}".to_string());
        let ret = self.cx.struct_type(&fields, false);
        let Some(r) = self.asm(ret.into(), &template, &cons.join(","), &words, true)? else {
            return self.internal("asm returned nothing");
        };
        let sv = r.into_struct_value();
        for (v, start, n) in spans {
            let mut out = Vec::with_capacity(n);
            for (i, r) in regs.iter().enumerate().skip(start).take(n) {
                let w = self.b.build_extract_value(sv, i as u32, "acc")?;
                out.push(if r.get_type() == self.cx.f16_type().into() {
                    self.b.build_bit_cast(w, self.cx.f16_type(), "acc")?
                } else {
                    w
                });
            }
            self.vals.insert(v, out);
        }
        Ok(())
    }

    /// An inline-asm statement (with side effects) returning `n` registers of type `t`.
    fn asm_struct(
        &self,
        t: BasicTypeEnum<'ctx>,
        n: usize,
        template: &str,
        cons: &[String],
        args: &[BasicValueEnum<'ctx>],
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let ret = self.cx.struct_type(&vec![t; n], false);
        let Some(r) = self.asm(ret.into(), template, &cons.join(","), args, true)? else {
            return self.internal("asm returned nothing");
        };
        let sv = r.into_struct_value();
        (0..n as u32)
            .map(|i| Ok(self.b.build_extract_value(sv, i, "acc")?))
            .collect()
    }

    /// Writes instruction results back to the accumulator registers `slots` (pairs of `f16`
    /// packed in one register when `packed`).
    fn scatter_acc(
        &self,
        rc: &mut [BasicValueEnum<'ctx>],
        slots: &[usize],
        out: Vec<BasicValueEnum<'ctx>>,
        packed: bool,
        elem_t: BasicTypeEnum<'ctx>,
    ) -> R<()> {
        if packed {
            for (pair, w) in slots.chunks(2).zip(out) {
                let v = self.unpack32(w, elem_t, 2)?;
                rc[pair[0]] = v[0];
                rc[pair[1]] = v[1];
            }
        } else {
            for (&slot, v) in slots.iter().zip(out) {
                rc[slot] = v;
            }
        }
        Ok(())
    }
}

/// Per-thread values the fragment reads share: the warp's first row and column, and the
/// lane's parts (`q = lane / 8` picks an `ldmatrix` matrix, `rr = lane % 8` its row;
/// `g = lane / 4`, `t = lane % 4` index `mma.sync` fragments).
struct Frag<'ctx> {
    kw: u32,
    tm: u32,
    tn: u32,
    wrow: IntValue<'ctx>,
    wcol: IntValue<'ctx>,
    q1: IntValue<'ctx>,
    q2: IntValue<'ctx>,
    rr: IntValue<'ctx>,
    q1_x8: IntValue<'ctx>,
    q1_x8_rr: IntValue<'ctx>,
    g: IntValue<'ctx>,
    t_kw: IntValue<'ctx>,
}

impl<'ctx> Frag<'ctx> {
    fn new(lw: &Lowering<'ctx, '_>, wm: u32, wn: u32, kw: u32, tm: u32, tn: u32) -> R<Frag<'ctx>> {
        let b = &lw.b;
        let (lane, warp) = (lw.lane(), lw.warp());
        let c = |v: u32| lw.i32(v as u64);
        let wrow = b.build_int_mul(b.build_and(warp, c(wm - 1), "w")?, c(16), "wr")?;
        let wc = b.build_right_shift(warp, c(wm.trailing_zeros()), false, "w")?;
        let wcol = b.build_int_mul(b.build_and(wc, c(wn - 1), "w")?, c(8), "wc")?;
        let q = b.build_right_shift(lane, c(3), false, "q")?;
        let q1 = b.build_and(q, c(1), "q1")?;
        let q2 = b.build_right_shift(q, c(1), false, "q2")?;
        let rr = b.build_and(lane, c(7), "rr")?;
        let q1_x8 = b.build_int_mul(q1, c(8), "q8")?;
        let q1_x8_rr = b.build_int_add(q1_x8, rr, "q8r")?;
        let g = b.build_right_shift(lane, c(2), false, "g")?;
        let t = b.build_and(lane, c(3), "t")?;
        let t_kw = b.build_int_mul(t, c(kw), "tk")?;
        Ok(Frag {
            kw,
            tm,
            tn,
            wrow,
            wcol,
            q1,
            q2,
            rr,
            q1_x8,
            q1_x8_rr,
            g,
            t_kw,
        })
    }
}
