//! Elementwise ops on one register's worth of values: arithmetic, comparisons, casts and
//! math functions. fp16/bf16 math functions are computed in fp32 and rounded back, as
//! Triton does.

use crate::lower::{dtype_type, memory_type, Lowering, R};
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::intrinsics::Intrinsic;
use inkwell::types::{BasicMetadataTypeEnum, BasicType, BasicTypeEnum, VectorType};
use inkwell::values::{
    BasicMetadataValueEnum, BasicValue, BasicValueEnum, CallSiteValue, FastMathFlags, FloatValue,
    IntValue,
};
use inkwell::{FloatPredicate, IntPredicate};
use tile_ir::{BinaryOp, CmpPred, DType, Elem, OpKind, UnaryOp};

impl<'ctx> Lowering<'ctx, '_> {
    pub fn call_intrinsic(
        &self,
        name: &str,
        types: &[BasicTypeEnum<'ctx>],
        args: &[BasicValueEnum<'ctx>],
    ) -> R<BasicValueEnum<'ctx>> {
        let Some(intr) = Intrinsic::find(name) else {
            return self.internal(&format!("no intrinsic {name}"));
        };
        let Some(f) = intr.get_declaration(&self.module, types) else {
            return self.internal(&format!("cannot declare {name}"));
        };
        let args: Vec<BasicMetadataValueEnum> = args.iter().map(|&a| a.into()).collect();
        let call = self.b.build_call(f, &args, name)?;
        match call.try_as_basic_value().basic() {
            Some(v) => Ok(v),
            None => self.internal("intrinsic returned nothing"),
        }
    }

    /// Inline PTX returning one value.
    pub fn asm(
        &self,
        ret: BasicTypeEnum<'ctx>,
        template: &str,
        constraints: &str,
        args: &[BasicValueEnum<'ctx>],
        side_effects: bool,
    ) -> R<Option<BasicValueEnum<'ctx>>> {
        self.asm_noundef(ret, template, constraints, args, side_effects, &[])
    }

    /// [`Self::asm`] with the arguments at `noundef` marked `noundef`: they are never undef or
    /// poison (tiles' own arithmetic carries no poison-generating flags), and saying so lets
    /// LLVM treat the asm as a use that would make a poisoned value UB — its strength reduction
    /// asks that of every address (see `address_next_to_use`).
    pub fn asm_noundef(
        &self,
        ret: BasicTypeEnum<'ctx>,
        template: &str,
        constraints: &str,
        args: &[BasicValueEnum<'ctx>],
        side_effects: bool,
        noundef: &[u32],
    ) -> R<Option<BasicValueEnum<'ctx>>> {
        let call = self.call_asm(
            Some(ret),
            template,
            constraints,
            args,
            side_effects,
            noundef,
        )?;
        Ok(call.try_as_basic_value().basic())
    }

    /// Inline PTX returning nothing.
    pub fn asm_void(
        &self,
        template: &str,
        constraints: &str,
        args: &[BasicValueEnum<'ctx>],
    ) -> R<()> {
        self.asm_void_noundef(template, constraints, args, &[])
    }

    /// [`Self::asm_void`] with the arguments at `noundef` marked `noundef` (see [`Self::asm_noundef`]).
    pub fn asm_void_noundef(
        &self,
        template: &str,
        constraints: &str,
        args: &[BasicValueEnum<'ctx>],
        noundef: &[u32],
    ) -> R<()> {
        self.call_asm(None, template, constraints, args, true, noundef)?;
        Ok(())
    }

    /// Emits a call of an inline-asm statement returning `ret` (nothing for `None`).
    fn call_asm(
        &self,
        ret: Option<BasicTypeEnum<'ctx>>,
        template: &str,
        constraints: &str,
        args: &[BasicValueEnum<'ctx>],
        side_effects: bool,
        noundef: &[u32],
    ) -> R<CallSiteValue<'ctx>> {
        let arg_types: Vec<BasicMetadataTypeEnum> =
            args.iter().map(|a| a.get_type().into()).collect();
        let fn_type = match ret {
            Some(t) => t.fn_type(&arg_types, false),
            None => self.cx.void_type().fn_type(&arg_types, false),
        };
        let f = self.cx.create_inline_asm(
            fn_type,
            template.to_string(),
            constraints.to_string(),
            side_effects,
            false,
            None,
            false,
        );
        let margs: Vec<BasicMetadataValueEnum> = args.iter().map(|&a| a.into()).collect();
        let name = if ret.is_some() { "asm" } else { "" };
        let call = self.b.build_indirect_call(fn_type, f, &margs, name)?;
        if is_collective(template) {
            // Every thread of the warp (or CTA) must reach this very instruction: LLVM may not
            // duplicate it into, or sink it under, control flow that depends on the thread.
            let convergent = Attribute::get_named_enum_kind_id("convergent");
            call.add_attribute(
                AttributeLoc::Function,
                self.cx.create_enum_attribute(convergent, 0),
            );
        }
        // PTX cannot unwind. Without `nounwind` LLVM takes each asm call to maybe throw and
        // asks again at every query (`mayThrow`, `isGuaranteedToTransferExecutionToSuccessor`):
        // the PTX of the 988 distinct test kernels stayed byte-identical; the matmul as
        // launched compiled 3-5 % faster (`tiles-opt --repeat=30`, 2-core machine). Not
        // `willreturn`: a user's asm may be `trap` or `exit`.
        let nounwind = Attribute::get_named_enum_kind_id("nounwind");
        call.add_attribute(
            AttributeLoc::Function,
            self.cx.create_enum_attribute(nounwind, 0),
        );
        let kind = Attribute::get_named_enum_kind_id("noundef");
        for &i in noundef {
            call.add_attribute(
                AttributeLoc::Param(i),
                self.cx.create_enum_attribute(kind, 0),
            );
        }
        Ok(call)
    }

    pub(crate) fn f32c(&self, x: f64) -> FloatValue<'ctx> {
        self.cx.f32_type().const_float(x)
    }

    /// `{base}.ftz.f32`, or `{base}.f32` when subnormals are kept.
    pub(crate) fn ftz_name(&self, base: &str) -> String {
        let ftz = if self.keep_subnormals { "" } else { ".ftz" };
        format!("{base}{ftz}.f32")
    }

    pub(crate) fn asm_f32(&self, instr: &str, x: FloatValue<'ctx>) -> R<FloatValue<'ctx>> {
        let t = format!("{instr} $0, $1;");
        let v = self.asm(self.cx.f32_type().into(), &t, "=f,f", &[x.into()], false)?;
        match v {
            Some(v) => Ok(v.into_float_value()),
            None => self.internal("asm"),
        }
    }

    pub fn elementwise(
        &mut self,
        kind: OpKind,
        operand_elems: &[Elem],
        result: Elem,
        args: &[BasicValueEnum<'ctx>],
    ) -> R<BasicValueEnum<'ctx>> {
        match kind {
            OpKind::Binary(op) => self.binary(op, operand_elems[0], args[0], args[1]),
            OpKind::Compare(p, _) => self.compare(p, operand_elems[0], args[0], args[1]),
            OpKind::Unary(op) => self.unary(op, operand_elems[0], args[0]),
            OpKind::Fma => {
                let t = args[0].get_type();
                self.call_intrinsic("llvm.fma", &[t], args)
            }
            OpKind::Select => {
                Ok(self
                    .b
                    .build_select(args[0].into_int_value(), args[1], args[2], "sel")?)
            }
            OpKind::Cast => self.cast(operand_elems[0], result, args[0]),
            OpKind::Hint { .. } => Ok(args[0]),
            OpKind::Bitcast => match (operand_elems[0], result) {
                (Elem::Ptr(_), Elem::Ptr(_)) => Ok(args[0]),
                (Elem::Num(_), Elem::Ptr(_)) => Ok(self
                    .b
                    .build_int_to_ptr(
                        args[0].into_int_value(),
                        self.cx.ptr_type(crate::lower::global()),
                        "i2p",
                    )?
                    .into()),
                (Elem::Ptr(_), Elem::Num(_)) => Ok(self
                    .b
                    .build_ptr_to_int(args[0].into_pointer_value(), self.cx.i64_type(), "p2i")?
                    .into()),
                (_, Elem::Num(d)) => {
                    Ok(self
                        .b
                        .build_bit_cast(args[0], dtype_type(self.cx, d), "bc")?)
                }
            },
            OpKind::AddPtr => {
                let (Elem::Ptr(pointee), Elem::Num(od)) = (operand_elems[0], operand_elems[1])
                else {
                    return self.internal("addptr operands");
                };
                let mut off = args[1].into_int_value();
                if od.is_unsigned() {
                    off = self.b.build_int_z_extend(off, self.cx.i64_type(), "off")?;
                }
                let et = memory_type(self.cx, pointee);
                // SAFETY of the GEP: no inbounds claim is made, so any offset is well-defined.
                let p = unsafe {
                    self.b
                        .build_gep(et, args[0].into_pointer_value(), &[off], "gep")?
                };
                Ok(p.into())
            }
            other => self.unsupported(format!("elementwise op {}", other.name())),
        }
    }

    fn binary(
        &mut self,
        op: BinaryOp,
        e: Elem,
        a: BasicValueEnum<'ctx>,
        c: BasicValueEnum<'ctx>,
    ) -> R<BasicValueEnum<'ctx>> {
        let Elem::Num(d) = e else {
            return self.unsupported("arithmetic on pointers");
        };
        let b = &self.b;
        if d.is_float() {
            let (x, y) = (a.into_float_value(), c.into_float_value());
            // Multiplies and adds may fuse into fma (Triton's default, enable_fp_fusion=True).
            let fuse = self.fp_fusion;
            let contract = |v: FloatValue<'ctx>| -> BasicValueEnum<'ctx> {
                if let Some(i) = v.as_instruction_value().filter(|_| fuse) {
                    let _ = i.set_fast_math_flags(FastMathFlags::AllowContract);
                }
                v.into()
            };
            return Ok(match op {
                BinaryOp::Add => contract(b.build_float_add(x, y, "fadd")?),
                BinaryOp::Sub => contract(b.build_float_sub(x, y, "fsub")?),
                BinaryOp::Mul => contract(b.build_float_mul(x, y, "fmul")?),
                // fp32 division is div.full.f32 (within 2 ulp), as Triton lowers `/`; other
                // widths divide exactly.
                BinaryOp::Div if x.get_type() == self.cx.f32_type() => {
                    match self.asm(
                        self.cx.f32_type().into(),
                        "div.full.f32 $0, $1, $2;",
                        "=f,f,f",
                        &[a, c],
                        false,
                    )? {
                        Some(v) => v,
                        None => return self.internal("div asm"),
                    }
                }
                BinaryOp::Div => b.build_float_div(x, y, "fdiv")?.into(),
                BinaryOp::Rem => {
                    // C's fmod: x - trunc(x / y) * y, computed in f32 at least.
                    b.build_float_rem(x, y, "frem")?.into()
                }
                BinaryOp::Max => self.call_intrinsic("llvm.maxnum", &[a.get_type()], &[a, c])?,
                BinaryOp::Min => self.call_intrinsic("llvm.minnum", &[a.get_type()], &[a, c])?,
                _ => return self.unsupported(format!("{} on floats", op.name())),
            });
        }
        let (x, y) = (a.into_int_value(), c.into_int_value());
        let signed = d.is_signed();
        Ok(match op {
            BinaryOp::Add => b.build_int_add(x, y, "add")?.into(),
            BinaryOp::Sub => b.build_int_sub(x, y, "sub")?.into(),
            BinaryOp::Mul => b.build_int_mul(x, y, "mul")?.into(),
            BinaryOp::Div if signed => b.build_int_signed_div(x, y, "div")?.into(),
            BinaryOp::Div => b.build_int_unsigned_div(x, y, "div")?.into(),
            BinaryOp::Rem if signed => b.build_int_signed_rem(x, y, "rem")?.into(),
            BinaryOp::Rem => b.build_int_unsigned_rem(x, y, "rem")?.into(),
            BinaryOp::And => b.build_and(x, y, "and")?.into(),
            BinaryOp::Or => b.build_or(x, y, "or")?.into(),
            BinaryOp::Xor => b.build_xor(x, y, "xor")?.into(),
            BinaryOp::Shl => b.build_left_shift(x, y, "shl")?.into(),
            BinaryOp::Shr => b.build_right_shift(x, y, signed, "shr")?.into(),
            BinaryOp::Max => {
                let n = if signed { "llvm.smax" } else { "llvm.umax" };
                self.call_intrinsic(n, &[a.get_type()], &[a, c])?
            }
            BinaryOp::Min => {
                let n = if signed { "llvm.smin" } else { "llvm.umin" };
                self.call_intrinsic(n, &[a.get_type()], &[a, c])?
            }
        })
    }

    fn compare(
        &mut self,
        p: CmpPred,
        e: Elem,
        a: BasicValueEnum<'ctx>,
        c: BasicValueEnum<'ctx>,
    ) -> R<BasicValueEnum<'ctx>> {
        let b = &self.b;
        match e {
            Elem::Num(d) if d.is_float() => {
                let pred = match p {
                    CmpPred::Eq => FloatPredicate::OEQ,
                    CmpPred::Ne => FloatPredicate::UNE,
                    CmpPred::Lt => FloatPredicate::OLT,
                    CmpPred::Le => FloatPredicate::OLE,
                    CmpPred::Gt => FloatPredicate::OGT,
                    CmpPred::Ge => FloatPredicate::OGE,
                };
                Ok(
                    b.build_float_compare(
                        pred,
                        a.into_float_value(),
                        c.into_float_value(),
                        "fcmp",
                    )?
                    .into(),
                )
            }
            _ => {
                let signed = matches!(e, Elem::Num(d) if d.is_signed());
                let (x, y) = match e {
                    Elem::Ptr(_) => (
                        b.build_ptr_to_int(a.into_pointer_value(), self.cx.i64_type(), "p")?,
                        b.build_ptr_to_int(c.into_pointer_value(), self.cx.i64_type(), "p")?,
                    ),
                    _ => (a.into_int_value(), c.into_int_value()),
                };
                let pred = match (p, signed) {
                    (CmpPred::Eq, _) => IntPredicate::EQ,
                    (CmpPred::Ne, _) => IntPredicate::NE,
                    (CmpPred::Lt, true) => IntPredicate::SLT,
                    (CmpPred::Le, true) => IntPredicate::SLE,
                    (CmpPred::Gt, true) => IntPredicate::SGT,
                    (CmpPred::Ge, true) => IntPredicate::SGE,
                    (CmpPred::Lt, false) => IntPredicate::ULT,
                    (CmpPred::Le, false) => IntPredicate::ULE,
                    (CmpPred::Gt, false) => IntPredicate::UGT,
                    (CmpPred::Ge, false) => IntPredicate::UGE,
                };
                Ok(b.build_int_compare(pred, x, y, "icmp")?.into())
            }
        }
    }

    fn unary(&mut self, op: UnaryOp, e: Elem, a: BasicValueEnum<'ctx>) -> R<BasicValueEnum<'ctx>> {
        let Elem::Num(d) = e else {
            return self.unsupported("math on pointers");
        };
        if d.is_int() {
            let x = a.into_int_value();
            let zero = x.get_type().const_zero();
            return Ok(match op {
                UnaryOp::Neg => self.b.build_int_sub(zero, x, "neg")?.into(),
                UnaryOp::Not => self.b.build_not(x, "not")?.into(),
                UnaryOp::Abs if d.is_signed() => {
                    let f = self.cx.bool_type().const_zero();
                    self.call_intrinsic("llvm.abs", &[a.get_type()], &[a, f.into()])?
                }
                UnaryOp::Abs => a,
                _ => return self.unsupported(format!("{} on integers", op.name())),
            });
        }
        let x = a.into_float_value();
        match op {
            UnaryOp::Neg => return Ok(self.b.build_float_neg(x, "fneg")?.into()),
            UnaryOp::Abs => return self.call_intrinsic("llvm.fabs", &[a.get_type()], &[a]),
            UnaryOp::Floor => return self.call_intrinsic("llvm.floor", &[a.get_type()], &[a]),
            UnaryOp::Ceil => return self.call_intrinsic("llvm.ceil", &[a.get_type()], &[a]),
            UnaryOp::Sqrt => return self.call_intrinsic("llvm.sqrt", &[a.get_type()], &[a]),
            UnaryOp::Rsqrt if d == DType::F64 => {
                let s = self
                    .call_intrinsic("llvm.sqrt", &[a.get_type()], &[a])?
                    .into_float_value();
                let one = self.cx.f64_type().const_float(1.0);
                return Ok(self.b.build_float_div(one, s, "rsqrt")?.into());
            }
            _ => {}
        }
        if d == DType::F64 {
            return Ok(self.math_f64(op, x)?.into());
        }
        // fp16 and bf16 are computed in fp32, then rounded back.
        let f32t = self.cx.f32_type();
        let x32 = if d == DType::F32 {
            x
        } else {
            self.b.build_float_ext(x, f32t, "ext")?
        };
        let r = self.math_f32(op, x32)?;
        Ok(if d == DType::F32 {
            r.into()
        } else {
            self.b.build_float_trunc(r, x.get_type(), "trunc")?.into()
        })
    }

    fn math_f32(&mut self, op: UnaryOp, x: FloatValue<'ctx>) -> R<FloatValue<'ctx>> {
        let b = &self.b;
        Ok(match op {
            // As Triton: `exp2` flushes subnormal results to zero (one MUFU instruction; the
            // non-ftz form costs a compare and two multiplies around it), `exp` does not;
            // `enable_reflect_ftz=False` keeps them in both.
            UnaryOp::Exp2 => self.asm_f32(&self.ftz_name("ex2.approx"), x)?,
            UnaryOp::Exp => {
                let y = b.build_float_mul(x, self.f32c(std::f64::consts::LOG2_E), "exp")?;
                self.asm_f32("ex2.approx.f32", y)?
            }
            UnaryOp::Log2 => self.log_f32(x, true)?,
            UnaryOp::Log => self.log_f32(x, false)?,
            UnaryOp::Rsqrt => self.asm_f32(&self.ftz_name("rsqrt.approx"), x)?,
            UnaryOp::Sin => self.sincos_f32(x, false)?,
            UnaryOp::Cos => self.sincos_f32(x, true)?,
            UnaryOp::Erf => self.erf_f32(x)?,
            other => return self.unsupported(format!("fp32 {}", other.name())),
        })
    }

    /// Whether a cast from `s` to `t` converts to fp8 in hardware (sm_90+): one rounding from
    /// fp32, saturating to the largest finite value, as Triton converts on Hopper.
    fn hw_to_fp8(&self, s: DType, t: DType) -> bool {
        self.fp8_cvt() && t.is_ocp_fp8() && !s.is_fp8()
    }

    /// Whether fp8 `s` converts to fp16 in hardware (`cvt.rn.f16x2.{e4m3x2,e5m2x2}`, sm_90+);
    /// fp8e4b15 never does (its bits move in software).
    fn hw_from_fp8(&self, s: DType) -> bool {
        self.fp8_cvt() && s.is_ocp_fp8()
    }

    /// `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32` of two fp32 values: `hi` in the upper byte of the
    /// result, `lo` in the lower.
    fn cvt_fp8x2(
        &self,
        t: DType,
        hi: BasicValueEnum<'ctx>,
        lo: BasicValueEnum<'ctx>,
    ) -> R<IntValue<'ctx>> {
        let kind = if t == DType::F8E4M3 {
            "e4m3x2"
        } else {
            "e5m2x2"
        };
        match self.asm(
            self.cx.i16_type().into(),
            &format!("cvt.rn.satfinite.{kind}.f32 $0, $1, $2;"),
            "=h,f,f",
            &[hi, lo],
            false,
        )? {
            Some(d) => Ok(d.into_int_value()),
            None => self.internal("asm returned nothing"),
        }
    }

    /// `cvt.rn.f16x2.{e4m3x2,e5m2x2}` of two fp8 values packed in 16 bits (`hi` in the upper
    /// byte): the two fp16 values, exactly (sm_90+).
    fn cvt_f16x2_from_fp8(
        &self,
        s: DType,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
    ) -> R<[FloatValue<'ctx>; 2]> {
        let b = &self.b;
        let i16t = self.cx.i16_type();
        let lo = b.build_int_z_extend(lo, i16t, "f8")?;
        let hi = b.build_int_z_extend(hi, i16t, "f8")?;
        let hi = b.build_left_shift(hi, i16t.const_int(8, false), "f8")?;
        let packed = b.build_or(lo, hi, "f8")?;
        let kind = if s == DType::F8E4M3 {
            "e4m3x2"
        } else {
            "e5m2x2"
        };
        let Some(w) = self.asm(
            self.cx.i32_type().into(),
            &format!("cvt.rn.f16x2.{kind} $0, $1;"),
            "=r,h",
            &[packed.into()],
            false,
        )?
        else {
            return self.internal("asm returned nothing");
        };
        let w = w.into_int_value();
        let half = |x: IntValue<'ctx>| -> R<FloatValue<'ctx>> {
            let t = b.build_int_truncate(x, i16t, "h")?;
            Ok(b.build_bit_cast(t, self.cx.f16_type(), "h")?
                .into_float_value())
        };
        let up = b.build_right_shift(w, w.get_type().const_int(16, false), false, "h")?;
        Ok([half(w)?, half(up)?])
    }

    /// How `cast` (an op) converts its tile registers a group at a time, if it does: to fp8
    /// and from fp8 in hardware, two per instruction (sm_90+); from 8-bit integers, four at a
    /// time without a conversion instruction (sm_80+).
    pub fn grouped_cast(&mut self, cast: &tile_ir::OpData) -> R<Option<GroupedCast>> {
        let (from, to) = (
            self.func.ty(cast.operands[0]),
            self.func.ty(cast.results[0]),
        );
        let (Elem::Num(s), Elem::Num(t)) = (from.elem, to.elem) else {
            return Ok(None);
        };
        let kind = if self.hw_to_fp8(s, t) && s.is_float() {
            GroupedCast::ToFp8
        } else if self.hw_from_fp8(s) && !t.is_fp8() {
            GroupedCast::FromFp8
        } else if self.x2_cvt() && matches!(s, DType::I8 | DType::U8) && t.is_float() && !t.is_fp8()
        {
            GroupedCast::FromInt8
        } else {
            return Ok(None);
        };
        let ty = *to;
        let n = self.nregs(&ty)?;
        let whole = self.get(cast.operands[0])?.len() == n;
        Ok((whole && n >= kind.group()).then_some(kind))
    }

    /// The registers of a [`GroupedCast`]: each whole group of `kind.group()` registers at
    /// once, a last partial group one by one.
    pub fn cast_grouped(
        &mut self,
        kind: GroupedCast,
        from: Elem,
        to: Elem,
        regs: &[BasicValueEnum<'ctx>],
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let (Elem::Num(s), Elem::Num(t)) = (from, to) else {
            return self.internal("grouped cast of a non-number");
        };
        let mut out = Vec::with_capacity(regs.len());
        for group in regs.chunks(kind.group()) {
            if group.len() < kind.group() {
                for &x in group {
                    out.push(self.cast(from, to, x)?);
                }
                continue;
            }
            let converted = match kind {
                GroupedCast::ToFp8 => self.cast_pair_to_fp8(from, t, group)?,
                GroupedCast::FromFp8 => self.cast_pair_from_fp8(s, to, group)?,
                GroupedCast::FromInt8 => self.cast_quad_from_int8(from, to, group)?,
            };
            out.extend(converted);
        }
        Ok(out)
    }

    /// Four 8-bit integers to floats without a conversion instruction: the four bytes (offset
    /// by 128 if signed) become the low bytes of four fp16 values whose high byte is 0x64, i.e.
    /// 1024 + byte (one byte permute per pair), and one `sub.f16x2` per pair takes 1024 (+128)
    /// off, exactly. fp16 is exact for every 8-bit integer, so other float types follow from it.
    fn cast_quad_from_int8(
        &mut self,
        from: Elem,
        to: Elem,
        quad: &[BasicValueEnum<'ctx>],
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let signed = from == Elem::Num(DType::I8);
        let f16 = Elem::Num(DType::F16);
        let i8t = self.cx.i8_type();
        let f16t = self.cx.f16_type();
        let magic = VectorType::const_vector(&[i8t.const_int(0x64, false); 4]);
        let bias = if signed { 1152.0 } else { 1024.0 };
        let sub = VectorType::const_vector(&[f16t.const_float(bias); 2]);
        let mut w = i8t.vec_type(4).get_undef();
        for (k, &x) in quad.iter().enumerate() {
            w = self
                .b
                .build_insert_element(w, x.into_int_value(), self.i32(k as u64), "q")?;
        }
        if signed {
            let flip = VectorType::const_vector(&[i8t.const_int(0x80, false); 4]);
            w = self.b.build_xor(w, flip, "q")?;
        }
        let mut out = Vec::with_capacity(4);
        for pair in [[0u64, 4, 1, 4], [2, 4, 3, 4]] {
            let mask = VectorType::const_vector(&pair.map(|i| self.i32(i)));
            let bytes = self.b.build_shuffle_vector(w, magic, mask, "q")?;
            let h2 = self
                .b
                .build_bit_cast(bytes, f16t.vec_type(2), "q")?
                .into_vector_value();
            let h2 = self.b.build_float_sub(h2, sub, "q")?;
            for e in 0..2 {
                let h = self.b.build_extract_element(h2, self.i32(e), "q")?;
                out.push(self.cast(f16, to, h)?);
            }
        }
        Ok(out)
    }

    /// Two fp8 registers to fp16 in one instruction (`cvt.rn.f16x2.e4m3x2`), then to `to`.
    fn cast_pair_from_fp8(
        &mut self,
        s: DType,
        to: Elem,
        pair: &[BasicValueEnum<'ctx>],
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let f16 = Elem::Num(DType::F16);
        let (lo, hi) = (pair[0].into_int_value(), pair[1].into_int_value());
        self.cvt_f16x2_from_fp8(s, lo, hi)?
            .into_iter()
            .map(|h| self.cast(f16, to, h.into()))
            .collect()
    }

    /// Two registers to fp8 (`cvt.rn.satfinite.e4m3x2.f32 d, hi, lo`: one instruction and one
    /// rounding from fp32 per pair, where the per-element form converts a value against itself
    /// and keeps one byte). The pair's bytes come apart again as values; packing them next to
    /// each other (staging, stores) folds back into the pair.
    fn cast_pair_to_fp8(
        &mut self,
        from: Elem,
        t: DType,
        pair: &[BasicValueEnum<'ctx>],
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let f32e = Elem::Num(DType::F32);
        let i8t = self.cx.i8_type();
        let lo = self.cast(from, f32e, pair[0])?;
        let hi = self.cast(from, f32e, pair[1])?;
        let d = self.cvt_fp8x2(t, hi, lo)?;
        let first = self.b.build_int_truncate(d, i8t, "f8")?;
        let up = self
            .b
            .build_right_shift(d, d.get_type().const_int(8, false), false, "f8")?;
        Ok(vec![
            first.into(),
            self.b.build_int_truncate(up, i8t, "f8")?.into(),
        ])
    }

    pub fn cast(
        &mut self,
        from: Elem,
        to: Elem,
        v: BasicValueEnum<'ctx>,
    ) -> R<BasicValueEnum<'ctx>> {
        let (s, t) = match (from, to) {
            (Elem::Ptr(_), Elem::Ptr(_)) => return Ok(v),
            (Elem::Num(s), Elem::Num(t)) => (s, t),
            _ => return self.unsupported("casts between pointers and numbers"),
        };
        if s != t && self.hw_to_fp8(s, t) {
            // Other types go to fp32 first (fp16/bf16 exactly); the value converts against
            // itself and keeps the low byte.
            let f32 = Elem::Num(DType::F32);
            let x = if s == DType::F32 {
                v
            } else {
                self.cast(from, f32, v)?
            };
            let pair = self.cvt_fp8x2(t, x, x)?;
            let i8t = self.cx.i8_type();
            return Ok(self.b.build_int_truncate(pair, i8t, "f8")?.into());
        }
        if s != t && (s.is_fp8() || t.is_fp8()) {
            // fp8 converts through fp16 (exact from fp8; one rounding into it).
            let f16 = Elem::Num(DType::F16);
            if t == DType::F8E4B15 && !s.is_fp8() {
                // As Triton converts: to fp16 rounding toward zero, then clamp and round.
                let h = self.rz_f16_of(from, v)?;
                return Ok(self.f16_to_fp8(t, h)?.into());
            }
            if s.is_fp8() {
                let x = v.into_int_value();
                let h = if self.hw_from_fp8(s) {
                    self.cvt_f16x2_from_fp8(s, x, x)?[0]
                } else {
                    self.fp8_to_f16(s, x)?
                };
                return self.cast(f16, to, h.into());
            }
            let h = self.cast(from, f16, v)?;
            return Ok(self.f16_to_fp8(t, h.into_float_value())?.into());
        }
        let b = &self.b;
        let tt = dtype_type(self.cx, t);
        Ok(match (s.is_float(), t.is_float()) {
            (false, false) => {
                let x = v.into_int_value();
                let it = tt.into_int_type();
                if t == DType::I1 {
                    b.build_int_compare(IntPredicate::NE, x, x.get_type().const_zero(), "tobool")?
                        .into()
                } else if t.bits() > s.bits() {
                    if s.is_signed() {
                        b.build_int_s_extend(x, it, "sext")?.into()
                    } else {
                        b.build_int_z_extend(x, it, "zext")?.into()
                    }
                } else if t.bits() < s.bits() {
                    b.build_int_truncate(x, it, "trunc")?.into()
                } else {
                    v
                }
            }
            (false, true) => {
                let ft = tt.into_float_type();
                if s.is_signed() {
                    b.build_signed_int_to_float(v.into_int_value(), ft, "sitofp")?
                        .into()
                } else {
                    b.build_unsigned_int_to_float(v.into_int_value(), ft, "uitofp")?
                        .into()
                }
            }
            (true, false) => {
                let x = v.into_float_value();
                if t == DType::I1 {
                    b.build_float_compare(
                        FloatPredicate::UNE,
                        x,
                        x.get_type().const_zero(),
                        "tobool",
                    )?
                    .into()
                } else if t.is_signed() {
                    b.build_float_to_signed_int(x, tt.into_int_type(), "fptosi")?
                        .into()
                } else {
                    b.build_float_to_unsigned_int(x, tt.into_int_type(), "fptoui")?
                        .into()
                }
            }
            (true, true) => {
                let x = v.into_float_value();
                let ft = tt.into_float_type();
                let (sb, tb) = (s.bits(), t.bits());
                if s == t {
                    v
                } else if sb == tb {
                    // fp16 <-> bf16 goes through fp32.
                    let w = b.build_float_ext(x, self.cx.f32_type(), "ext")?;
                    b.build_float_trunc(w, ft, "trunc")?.into()
                } else if tb > sb {
                    b.build_float_ext(x, ft, "fpext")?.into()
                } else {
                    b.build_float_trunc(x, ft, "fptrunc")?.into()
                }
            }
        })
    }
}

impl<'ctx> Lowering<'ctx, '_> {
    /// A number as fp16 rounded toward zero (`cvt.rz.f16.f32` from fp32; other floats go
    /// through fp32, integers convert exactly or nearly so first).
    fn rz_f16_of(&mut self, from: Elem, v: BasicValueEnum<'ctx>) -> R<FloatValue<'ctx>> {
        if from == Elem::Num(DType::F16) {
            return Ok(v.into_float_value());
        }
        let f32v = if from == Elem::Num(DType::F32) {
            v
        } else {
            self.cast(from, Elem::Num(DType::F32), v)?
        };
        let Some(h) = self.asm(
            self.cx.i16_type().into(),
            "cvt.rz.f16.f32 $0, $1;",
            "=h,f",
            &[f32v],
            false,
        )?
        else {
            return self.internal("asm returned nothing");
        };
        Ok(self
            .b
            .build_bit_cast(h.into_int_value(), self.cx.f16_type(), "h")?
            .into_float_value())
    }

    /// fp8 bits -> fp16, exactly. E5M2 is the top byte of an fp16; E4M3FN rebiases its
    /// exponent (subnormals via an fp32 multiply; 0x7F/0xFF are NaN).
    fn fp8_to_f16(&self, d: DType, x: IntValue<'ctx>) -> R<FloatValue<'ctx>> {
        let b = &self.b;
        let i16t = self.cx.i16_type();
        let c16 = |v: u64| i16t.const_int(v, false);
        let w = b.build_int_z_extend(x, i16t, "f8")?;
        let bits = if d == DType::F8E5M2 {
            b.build_left_shift(w, c16(8), "h")?
        } else if d == DType::F8E4B15 {
            // fp16's exponent bias: the sign moves to bit 15, the rest up by 7.
            let sign = b.build_left_shift(b.build_and(w, c16(0x80), "s")?, c16(8), "s")?;
            let rest = b.build_left_shift(b.build_and(w, c16(0x7F), "r")?, c16(7), "r")?;
            b.build_or(sign, rest, "h")?
        } else {
            let sign = b.build_left_shift(b.build_and(w, c16(0x80), "s")?, c16(8), "s")?;
            let e = b.build_and(b.build_right_shift(w, c16(3), false, "e")?, c16(0xF), "e")?;
            let m = b.build_and(w, c16(7), "m")?;
            let normal = b.build_or(
                b.build_left_shift(b.build_int_add(e, c16(8), "e")?, c16(10), "e")?,
                b.build_left_shift(m, c16(7), "m")?,
                "n",
            )?;
            // e == 0: m * 2^-9, normal in fp16.
            let mf = b.build_unsigned_int_to_float(m, self.cx.f32_type(), "mf")?;
            let sub = b.build_float_mul(mf, self.cx.f32_type().const_float(1.0 / 512.0), "sub")?;
            let sub = b.build_float_trunc(sub, self.cx.f16_type(), "sub")?;
            let sub = b.build_bit_cast(sub, i16t, "sub")?.into_int_value();
            let is_sub = b.build_int_compare(IntPredicate::EQ, e, c16(0), "z")?;
            let mag = b.build_select(is_sub, sub, normal, "mag")?.into_int_value();
            let low7 = b.build_and(w, c16(0x7F), "l")?;
            let nan = b.build_int_compare(IntPredicate::EQ, low7, c16(0x7F), "nan")?;
            let mag = b
                .build_select(nan, c16(0x7E00), mag, "mag")?
                .into_int_value();
            b.build_or(sign, mag, "h")?
        };
        Ok(b.build_bit_cast(bits, self.cx.f16_type(), "h")?
            .into_float_value())
    }

    /// fp16 -> fp8 bits, rounded to nearest even, saturating to the largest finite value
    /// (E5M2 ±57344, E4M3FN ±448, as the hardware's `.satfinite` conversions); NaN stays NaN.
    fn f16_to_fp8(&self, d: DType, h: FloatValue<'ctx>) -> R<IntValue<'ctx>> {
        let b = &self.b;
        let i8t = self.cx.i8_type();
        if d == DType::F8E4B15 {
            // The magnitude clamps to 1.75 (0x3F00; NaN's bits are above it too), then the
            // byte above bit 7 of (magnitude << 1) rounds with ties away from zero.
            let i16t = self.cx.i16_type();
            let c16 = |v: u64| i16t.const_int(v, false);
            let w = b.build_bit_cast(h, i16t, "w")?.into_int_value();
            let mag = b.build_and(w, c16(0x7FFF), "a")?;
            let big = b.build_int_compare(IntPredicate::UGT, mag, c16(0x3F00), "big")?;
            let mag = b.build_select(big, c16(0x3F00), mag, "a")?.into_int_value();
            let r = b.build_int_add(b.build_left_shift(mag, c16(1), "r")?, c16(0x80), "r")?;
            let r = b.build_right_shift(r, c16(8), false, "r")?;
            let sign =
                b.build_right_shift(b.build_and(w, c16(0x8000), "s")?, c16(8), false, "s")?;
            let q = b.build_or(r, sign, "q")?;
            return Ok(b.build_int_truncate(q, i8t, "f8")?);
        }
        if d == DType::F8E5M2 {
            let i16t = self.cx.i16_type();
            let c16 = |v: u64| i16t.const_int(v, false);
            let w = b.build_bit_cast(h, i16t, "w")?.into_int_value();
            let odd = b.build_and(b.build_right_shift(w, c16(8), false, "o")?, c16(1), "o")?;
            let r = b.build_int_add(b.build_int_add(w, c16(0x7F), "r")?, odd, "r")?;
            let r = b.build_int_truncate(b.build_right_shift(r, c16(8), false, "r")?, i8t, "r")?;
            let mag = b.build_and(w, c16(0x7FFF), "a")?;
            let nan = b.build_int_compare(IntPredicate::UGT, mag, c16(0x7C00), "nan")?;
            let q = b.build_or(
                b.build_int_truncate(b.build_right_shift(w, c16(8), false, "q")?, i8t, "q")?,
                i8t.const_int(0x02, false),
                "q",
            )?;
            // Past the largest finite value (57344): saturate, keeping the sign.
            let over = b.build_int_compare(
                IntPredicate::EQ,
                b.build_and(r, i8t.const_int(0x7C, false), "e")?,
                i8t.const_int(0x7C, false),
                "over",
            )?;
            let sat = b.build_or(
                b.build_and(r, i8t.const_int(0x80, false), "s")?,
                i8t.const_int(0x7B, false),
                "sat",
            )?;
            let r = b.build_select(over, sat, r, "r")?.into_int_value();
            return Ok(b.build_select(nan, q, r, "f8")?.into_int_value());
        }
        // E4M3FN through fp32 bits.
        let i32t = self.cx.i32_type();
        let c32 = |v: u64| i32t.const_int(v, false);
        let x = b.build_float_ext(h, self.cx.f32_type(), "x")?;
        let w = b.build_bit_cast(x, i32t, "w")?.into_int_value();
        let sign = b.build_int_truncate(b.build_right_shift(w, c32(24), false, "s")?, i8t, "s")?;
        let sign = b.build_and(sign, i8t.const_int(0x80, false), "s")?;
        let mag = b.build_and(w, c32(0x7FFF_FFFF), "m")?;
        let magf = b
            .build_bit_cast(mag, self.cx.f32_type(), "mf")?
            .into_float_value();
        // Normal: round the 23-bit mantissa to 3 bits (ties to even), rebias 127 -> 7.
        let odd = b.build_and(b.build_right_shift(mag, c32(20), false, "o")?, c32(1), "o")?;
        let r = b.build_int_add(b.build_int_add(mag, c32(0x7FFFF), "r")?, odd, "r")?;
        let r = b.build_int_sub(r, c32(120 << 23), "r")?;
        let normal = b.build_right_shift(r, c32(20), false, "n")?;
        // Subnormal (|x| < 2^-6): round(|x| * 2^9), ties to even, 0..8 (8 is the smallest normal).
        let scaled = b.build_float_mul(magf, self.cx.f32_type().const_float(512.0), "sc")?;
        let rounded = self.call_intrinsic(
            "llvm.roundeven",
            &[self.cx.f32_type().into()],
            &[scaled.into()],
        )?;
        let sub = b.build_float_to_unsigned_int(rounded.into_float_value(), i32t, "sub")?;
        let is_sub = b.build_int_compare(IntPredicate::ULT, mag, c32(0x3C80_0000), "z")?;
        let v = b.build_select(is_sub, sub, normal, "v")?.into_int_value();
        let big = b.build_int_compare(IntPredicate::UGT, v, c32(0x7E), "big")?;
        let v = b.build_select(big, c32(0x7E), v, "v")?.into_int_value();
        let nan = b.build_int_compare(IntPredicate::UGT, mag, c32(0x7F80_0000), "nan")?;
        let v = b.build_select(nan, c32(0x7F), v, "v")?.into_int_value();
        let v = b.build_int_truncate(v, i8t, "v")?;
        Ok(b.build_or(sign, v, "f8")?)
    }
}

/// Whether an inline-PTX statement is collective: barriers and the `.sync` / `.aligned` warp
/// instructions (shuffles, votes, `mma`, `ldmatrix`, `wgmma`, ...), which every thread of the
/// warp or CTA must execute together. Their calls are marked `convergent`.
pub(crate) fn is_collective(template: &str) -> bool {
    [
        "bar.", "barrier.", ".sync", ".aligned", "shfl", "vote", "wgmma", "ldmatrix", "stmatrix",
        "redux",
    ]
    .iter()
    .any(|k| template.contains(k))
}

/// A cast lowered a group of registers at a time ([`Lowering::grouped_cast`]).
#[derive(Clone, Copy)]
pub enum GroupedCast {
    /// To fp8, two per `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32`.
    ToFp8,
    /// From fp8, two per `cvt.rn.f16x2.{e4m3x2,e5m2x2}`.
    FromFp8,
    /// From 8-bit integers, four per two byte permutes and two `sub.f16x2`.
    FromInt8,
}

impl GroupedCast {
    fn group(self) -> usize {
        match self {
            GroupedCast::FromInt8 => 4,
            _ => 2,
        }
    }
}
