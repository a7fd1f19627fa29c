//! Debug ops: `print` through the driver's `vprintf`, and `assert` through a flag in device
//! memory (`tiles_assert_line`) that the runtime reads after the launch — a failing assert
//! never traps, so the CUDA context stays usable and the error surfaces as a Python exception.

use crate::lower::{global, Lowering, R};
use inkwell::module::Linkage;
use inkwell::types::{BasicMetadataTypeEnum, BasicTypeEnum};
use inkwell::values::{BasicValueEnum, GlobalValue, IntValue, PointerValue};
use inkwell::{AddressSpace, AtomicOrdering, AtomicRMWBinOp, IntPredicate};
use tile_ir::{Elem, OpData};

/// Widens one register to what vprintf reads for its format.
type Widen<'ctx, 'f> =
    fn(&Lowering<'ctx, 'f>, BasicValueEnum<'ctx>, Elem) -> R<BasicValueEnum<'ctx>>;

/// Name of the device global holding the line of the first failed assert (0: none).
pub const ASSERT_GLOBAL: &str = "tiles_assert_line";

impl<'ctx> Lowering<'ctx, '_> {
    fn format_string(&mut self, text: &str) -> R<PointerValue<'ctx>> {
        let bytes = text.as_bytes();
        let arr = self.cx.const_string(bytes, true);
        let name = format!("tiles_fmt_{}", self.module.get_globals().count());
        let g = self
            .module
            .add_global(arr.get_type(), Some(global()), &name);
        g.set_initializer(&arr);
        g.set_constant(true);
        g.set_linkage(Linkage::Private);
        let generic = self.cx.ptr_type(AddressSpace::default());
        Ok(self
            .b
            .build_address_space_cast(g.as_pointer_value(), generic, "fmt")?)
    }

    fn vprintf(&mut self, fmt: PointerValue<'ctx>, args: &[BasicValueEnum<'ctx>]) -> R<()> {
        let generic = self.cx.ptr_type(AddressSpace::default());
        let f = match self.module.get_function("vprintf") {
            Some(f) => f,
            None => {
                let params: [BasicMetadataTypeEnum; 2] = [generic.into(), generic.into()];
                self.module.add_function(
                    "vprintf",
                    self.cx.i32_type().fn_type(&params, false),
                    None,
                )
            }
        };
        let types: Vec<BasicTypeEnum> = args.iter().map(|a| a.get_type()).collect();
        let st = self.cx.struct_type(&types, false);
        let buf = self.entry_alloca(st.into())?;
        for (i, &a) in args.iter().enumerate() {
            let p = self.b.build_struct_gep(st, buf, i as u32, "arg")?;
            self.b.build_store(p, a)?;
        }
        self.b.build_call(f, &[fmt.into(), buf.into()], "printf")?;
        Ok(())
    }

    /// Runs `body` only where `pred` holds (always when `None`).
    fn guarded(
        &mut self,
        pred: Option<IntValue<'ctx>>,
        body: impl FnOnce(&mut Self) -> R<()>,
    ) -> R<()> {
        let Some(pred) = pred else { return body(self) };
        let then_bb = self.cx.append_basic_block(self.kernel, "dbg.then");
        let cont = self.cx.append_basic_block(self.kernel, "dbg.cont");
        self.b.build_conditional_branch(pred, then_bb, cont)?;
        self.b.position_at_end(then_bb);
        body(self)?;
        self.b.build_unconditional_branch(cont)?;
        self.b.position_at_end(cont);
        Ok(())
    }

    pub fn lower_print(&mut self, data: &OpData, prefix: u32, hex: bool) -> R<()> {
        let prefix = self
            .func
            .strings
            .get(prefix as usize)
            .cloned()
            .unwrap_or_default()
            .replace('%', "%%");
        let pid: Vec<BasicValueEnum> = ["ctaid.x", "ctaid.y", "ctaid.z"]
            .iter()
            .map(|r| crate::lower::sreg(self.cx, &self.module, &self.b, r).map(|v| v.into()))
            .collect::<R<_>>()?;
        let many = data.operands.len() > 1;
        for (k, &v) in data.operands.iter().enumerate() {
            let mut ty = *self.func.ty(v);
            let mut regs = self.get(v)?.clone();
            if let Elem::Num(d) = ty.elem {
                if d.is_fp8() {
                    // Printed as the fp32 value it encodes.
                    let f32e = Elem::Num(tile_ir::DType::F32);
                    regs = regs
                        .into_iter()
                        .map(|x| self.cast(ty.elem, f32e, x))
                        .collect::<R<_>>()?;
                    ty.elem = f32e;
                }
            }
            let (value_fmt, widen): (&str, Widen<'ctx, '_>) = match ty.elem {
                Elem::Num(d) if d.is_float() => ("%f", |lw, x, _| {
                    Ok(lw
                        .b
                        .build_float_ext(x.into_float_value(), lw.cx.f64_type(), "w")?
                        .into())
                }),
                Elem::Ptr(_) => ("0x%llx", |lw, x, _| {
                    Ok(lw
                        .b
                        .build_ptr_to_int(x.into_pointer_value(), lw.cx.i64_type(), "w")?
                        .into())
                }),
                Elem::Num(d) => (
                    if hex {
                        "0x%llx"
                    } else if d.is_signed() {
                        "%lld"
                    } else {
                        "%llu"
                    },
                    |lw, x, e| {
                        let x = x.into_int_value();
                        let signed = matches!(e, Elem::Num(d) if d.is_signed());
                        Ok(if signed {
                            lw.b.build_int_s_extend_or_bit_cast(x, lw.cx.i64_type(), "w")?
                                .into()
                        } else {
                            lw.b.build_int_z_extend_or_bit_cast(x, lw.cx.i64_type(), "w")?
                                .into()
                        })
                    },
                ),
            };
            let suffix = if many {
                format!(" (operand {k})")
            } else {
                String::new()
            };
            if ty.is_scalar() {
                let fmt =
                    self.format_string(&format!("pid (%d, %d, %d) {prefix}{value_fmt}{suffix}\n"))?;
                let owner = self.owner(&ty)?;
                let val = widen(self, regs[0], ty.elem)?;
                let args = [pid[0], pid[1], pid[2], val];
                self.guarded(owner, |lw| lw.vprintf(fmt, &args))?;
                continue;
            }
            let g = self.geometry(&ty)?;
            let idx = vec!["%d"; g.thread.len()].join(", ");
            let fmt = self.format_string(&format!(
                "pid (%d, %d, %d) idx ({idx}) {prefix}{value_fmt}{suffix}\n"
            ))?;
            for (i, c) in g.regs.iter().enumerate() {
                let mut args = pid.clone();
                for (d, &t) in g.thread.iter().enumerate() {
                    args.push(
                        self.b
                            .build_int_add(t, self.i32(c[d] as u64), "idx")?
                            .into(),
                    );
                }
                args.push(widen(self, regs[i], ty.elem)?);
                self.guarded(g.owner, |lw| lw.vprintf(fmt, &args))?;
            }
        }
        Ok(())
    }

    fn assert_global(&mut self) -> GlobalValue<'ctx> {
        if let Some(g) = self.module.get_global(ASSERT_GLOBAL) {
            return g;
        }
        let g = self
            .module
            .add_global(self.cx.i32_type(), Some(global()), ASSERT_GLOBAL);
        g.set_initializer(&self.cx.i32_type().const_zero());
        g.set_linkage(Linkage::External);
        g.set_alignment(4);
        g
    }

    pub fn lower_assert(&mut self, data: &OpData) -> R<()> {
        let regs = self.get(data.operands[0])?.clone();
        let mut fail: Option<IntValue> = None;
        for r in regs {
            let bad = self.b.build_not(r.into_int_value(), "bad")?;
            fail = Some(match fail {
                Some(f) => self.b.build_or(f, bad, "bad")?,
                None => bad,
            });
        }
        let Some(fail) = fail else { return Ok(()) };
        let g = self.assert_global().as_pointer_value();
        let line = self.i32(data.loc.line.max(1) as u64);
        let fail = self.b.build_int_compare(
            IntPredicate::NE,
            fail,
            self.cx.bool_type().const_zero(),
            "fail",
        )?;
        self.guarded(Some(fail), |lw| {
            lw.b.build_atomicrmw(AtomicRMWBinOp::UMax, g, line, AtomicOrdering::Monotonic)?;
            Ok(())
        })
    }
}
