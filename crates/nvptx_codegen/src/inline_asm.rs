//! `inline_asm` (Triton's `inline_asm_elementwise`): the user's PTX once per `pack` consecutive
//! elements of a thread. Each operand's (and result's) `pack` elements fill as many registers
//! as the constraint string lists for it; elements narrower than their register are packed
//! (lowest element in the lowest bits), wider registers take one element each.

use crate::lower::{int_type, Lowering, R};
use inkwell::types::BasicTypeEnum;
use inkwell::values::BasicValueEnum;
use std::collections::HashMap;
use tile_ir::{DType, Op};

/// Checks an inline-asm template as LLVM's printer reads it, for `operands` operands: `$$`,
/// `$(`, `$|` and `$)` are escapes; `${:uid}`, `${:comment}` and `${:private}` are LLVM's
/// specials (`tl.atomic_poll` labels its loop with `${:uid}`); `$N`, `${N}` and `${N:m}` (one
/// modifier character) name operand N, which must exist. LLVM ends the process
/// (`report_fatal_error`) on any other `$` form and on an operand number out of range, so
/// these must never reach it.
fn check_template(template: &str, operands: usize) -> Result<(), String> {
    let b = template.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'$' {
            i += 1;
            continue;
        }
        i += 1;
        if matches!(b.get(i), Some(b'$' | b'(' | b'|' | b')')) {
            i += 1;
            continue;
        }
        let braced = b.get(i) == Some(&b'{');
        if braced {
            i += 1;
            if b.get(i) == Some(&b':') {
                // `${:uid}` and the like: LLVM's specials, of which it knows three.
                let name = &template[i + 1..];
                match name
                    .find('}')
                    .filter(|&c| matches!(&name[..c], "uid" | "comment" | "private"))
                {
                    Some(c) => {
                        i += 1 + c + 1;
                        continue;
                    }
                    None => {
                        return Err(format!(
                            "`${{:` at byte {} is not one of LLVM's `${{:uid}}`, `${{:comment}}`, \
                             `${{:private}}`",
                            i - 2
                        ))
                    }
                }
            }
        }
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let n: usize = template[start..i].parse().map_err(|_| {
            format!(
                "`$` at byte {} is not an operand: write `$N`, `${{N}}` or `$$` for a dollar sign",
                start - 1
            )
        })?;
        if braced {
            if b.get(i) == Some(&b':') {
                i += 2; // one modifier character, as LLVM reads it
            }
            if b.get(i) != Some(&b'}') {
                return Err(format!(
                    "`${{{n}...` at byte {} is not closed by `}}`",
                    start - 2
                ));
            }
            i += 1;
        }
        if n >= operands {
            return Err(format!(
                "it names operand ${n}, but its constraints give {operands} operands ($0 to ${})",
                operands.saturating_sub(1)
            ));
        }
    }
    Ok(())
}

/// The register type of one constraint (`=r`, `h`, `f`, ...).
fn constraint_bits(c: &str) -> Option<(u32, bool)> {
    match c.trim_start_matches('=').trim() {
        "c" => Some((8, false)),
        "h" => Some((16, false)),
        "r" => Some((32, false)),
        "l" => Some((64, false)),
        "f" => Some((32, true)),
        "d" => Some((64, true)),
        _ => None,
    }
}

impl<'ctx> Lowering<'ctx, '_> {
    pub fn lower_inline_asm(&mut self, op: Op, asm: u32, constraints: u32, pack: u8) -> R<()> {
        let data = self.func.ops[op].clone();
        let template = self.func.strings[asm as usize].clone();
        let cons_text = self.func.strings[constraints as usize].clone();
        let cons: Vec<String> = cons_text
            .split(',')
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .collect();
        let outs: Vec<&String> = cons.iter().filter(|c| c.starts_with('=')).collect();
        let ins: Vec<&String> = cons.iter().filter(|c| !c.starts_with('=')).collect();
        // An input tied to output n ("0", "1", ...) takes that output's register type; LLVM
        // gets the constraint as written.
        let in_kinds: Vec<&str> = ins
            .iter()
            .map(|c| match c.parse::<usize>() {
                Ok(n) => outs.get(n).map_or(c.as_str(), |o| o.as_str()),
                Err(_) => c.as_str(),
            })
            .collect();
        let p = pack as u32;
        let dtype_of = |lw: &Self, v: tile_ir::Value| -> R<DType> {
            match lw.func.ty(v).dtype() {
                Some(d) => Ok(d),
                None => lw.internal("inline_asm on a non-number"),
            }
        };
        // Registers each value needs for `pack` elements.
        let regs_for = |d: DType| -> u32 {
            let bits = d.bits().max(8);
            if bits >= 32 {
                p
            } else {
                (p * bits).div_ceil(32).max(1)
            }
        };
        let in_types: Vec<DType> = data
            .operands
            .iter()
            .map(|&v| dtype_of(self, v))
            .collect::<R<_>>()?;
        let out_types: Vec<DType> = data
            .results
            .iter()
            .map(|&v| dtype_of(self, v))
            .collect::<R<_>>()?;
        let want_out: u32 = out_types.iter().map(|&d| regs_for(d)).sum();
        let want_in: u32 = in_types.iter().map(|&d| regs_for(d)).sum();
        if outs.len() as u32 != want_out || ins.len() as u32 != want_in {
            return self.invalid(format!(
                "inline_asm_elementwise constraints `{cons_text}`: {} outputs and {} inputs given, \
                 {want_out} and {want_in} needed for pack={p} and these dtypes",
                outs.len(),
                ins.len()
            ));
        }
        if let Err(why) = check_template(&template, outs.len() + ins.len()) {
            return self.invalid(format!(
                "inline_asm_elementwise `{template}` with constraints `{cons_text}`: {why}"
            ));
        }
        let ty = *self.func.ty(data.results[0]);
        // Groups of `pack` registers, consecutive along the layout's contiguous dimension.
        let groups: Vec<Vec<usize>> = if ty.is_scalar() {
            if p != 1 {
                return self.unsupported("inline_asm_elementwise on scalars with pack > 1");
            }
            vec![vec![0]]
        } else {
            let g = self.geometry(&ty)?;
            let layout = self.func.layouts[ty.layout.expect("tiles have layouts")].clone();
            let (dim, run) = layout.contiguous_dim().unwrap_or((0, 1));
            if p > 1 && run % p != 0 && run < p {
                return self.unsupported(format!(
                    "inline_asm_elementwise with pack={p}: this layout gives each thread {run} \
                     consecutive elements"
                ));
            }
            let mut by_key: HashMap<Vec<u32>, Vec<(u32, usize)>> = HashMap::new();
            let mut order = Vec::new();
            for (i, c) in g.regs.iter().enumerate() {
                let mut key = c.clone();
                let within = key[dim] % p;
                key[dim] -= within;
                let e = by_key.entry(key.clone()).or_default();
                if e.is_empty() {
                    order.push(key);
                }
                e.push((within, i));
            }
            let mut groups = Vec::new();
            for key in order {
                let mut members = by_key.remove(&key).unwrap_or_default();
                members.sort();
                if members.len() != p as usize {
                    return self.unsupported(format!(
                        "inline_asm_elementwise with pack={p}: a thread does not hold {p} \
                         consecutive elements"
                    ));
                }
                groups.push(members.into_iter().map(|(_, i)| i).collect());
            }
            groups
        };
        let in_regs: Vec<Vec<BasicValueEnum<'ctx>>> = data
            .operands
            .iter()
            .map(|&v| self.get(v).cloned())
            .collect::<R<_>>()?;
        let n = self.nregs(&ty)?;
        let mut out_regs: Vec<Vec<Option<BasicValueEnum<'ctx>>>> =
            vec![vec![None; n]; out_types.len()];
        let ret_types: Vec<BasicTypeEnum<'ctx>> = outs
            .iter()
            .map(|c| self.constraint_type(c))
            .collect::<R<_>>()?;
        for group in &groups {
            // Inputs, packed per constraint.
            let mut args = Vec::new();
            let mut ci = 0;
            for (k, &d) in in_types.iter().enumerate() {
                let elems: Vec<BasicValueEnum> = group
                    .iter()
                    .map(|&i| {
                        let r = &in_regs[k];
                        if r.len() == 1 {
                            r[0]
                        } else {
                            r[i]
                        }
                    })
                    .collect();
                for chunk in self.chunk_elems(d, &elems)? {
                    let t = self.constraint_type(in_kinds[ci])?;
                    args.push(self.fit_register(chunk, t)?);
                    ci += 1;
                }
            }
            let fields = ret_types.clone();
            let ret: BasicTypeEnum = if fields.len() == 1 {
                fields[0]
            } else {
                self.cx.struct_type(&fields, false).into()
            };
            let pure = matches!(data.kind, tile_ir::OpKind::InlineAsm { pure: true, .. });
            let Some(r) = self.asm(ret, &template, &cons_text, &args, !pure)? else {
                return self.internal("inline_asm returned nothing");
            };
            let words: Vec<BasicValueEnum> = if fields.len() == 1 {
                vec![r]
            } else {
                let sv = r.into_struct_value();
                (0..fields.len() as u32)
                    .map(|i| Ok(self.b.build_extract_value(sv, i, "ia")?))
                    .collect::<R<_>>()?
            };
            // Outputs, unpacked into the group's elements.
            let mut wi = 0;
            for (k, &d) in out_types.iter().enumerate() {
                let nr = regs_for(d) as usize;
                let elems = self.unpack_asm_words(d, &words[wi..wi + nr], p)?;
                wi += nr;
                for (slot, e) in group.iter().zip(elems) {
                    out_regs[k][*slot] = Some(e);
                }
            }
        }
        for (k, &res) in data.results.iter().enumerate() {
            let regs: Option<Vec<BasicValueEnum>> = out_regs[k].iter().copied().collect();
            match regs {
                Some(r) => {
                    self.vals.insert(res, r);
                }
                None => return self.internal("inline_asm left a register unset"),
            }
        }
        Ok(())
    }

    fn constraint_type(&self, c: &str) -> R<BasicTypeEnum<'ctx>> {
        match constraint_bits(c) {
            Some((32, true)) => Ok(self.cx.f32_type().into()),
            Some((64, true)) => Ok(self.cx.f64_type().into()),
            Some((bits, _)) => Ok(int_type(self.cx, bits).into()),
            None => self.unsupported(format!(
                "inline_asm_elementwise constraint `{c}` (use c, h, r, l, f or d; an input may name an output's number)"
            )),
        }
    }

    /// Elements grouped into register-sized chunks, each packed into one integer (narrow
    /// types) or left as is (32 bits and wider).
    fn chunk_elems(
        &self,
        d: DType,
        elems: &[BasicValueEnum<'ctx>],
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let bits = d.bits().max(8);
        if bits >= 32 {
            return Ok(elems.to_vec());
        }
        let per = (32 / bits) as usize;
        elems
            .chunks(per)
            .map(|ch| {
                let packed = self.pack_bits(d, ch)?;
                Ok(packed)
            })
            .collect()
    }

    /// Reinterprets (or widens) a packed value as the constraint's register type.
    fn fit_register(
        &self,
        v: BasicValueEnum<'ctx>,
        t: BasicTypeEnum<'ctx>,
    ) -> R<BasicValueEnum<'ctx>> {
        let bits_of = |t: BasicTypeEnum| -> u32 {
            match t {
                BasicTypeEnum::IntType(i) => i.get_bit_width(),
                BasicTypeEnum::FloatType(f) => {
                    if f == self.cx.f64_type() {
                        64
                    } else if f == self.cx.f32_type() {
                        32
                    } else {
                        16
                    }
                }
                BasicTypeEnum::VectorType(v) => {
                    v.get_size() * v.get_element_type().into_int_type().get_bit_width()
                }
                _ => 0,
            }
        };
        let (have, want) = (bits_of(v.get_type()), bits_of(t));
        let as_int = self
            .b
            .build_bit_cast(v, int_type(self.cx, have), "ia")?
            .into_int_value();
        let sized = if have < want {
            self.b
                .build_int_z_extend(as_int, int_type(self.cx, want), "ia")?
        } else if have > want {
            self.b
                .build_int_truncate(as_int, int_type(self.cx, want), "ia")?
        } else {
            as_int
        };
        Ok(self.b.build_bit_cast(sized, t, "ia")?)
    }

    /// The `pack` elements of dtype `d` held in `words`.
    fn unpack_asm_words(
        &self,
        d: DType,
        words: &[BasicValueEnum<'ctx>],
        pack: u32,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let et = crate::lower::memory_type(self.cx, d);
        let bits = d.bits().max(8);
        let mut out = Vec::with_capacity(pack as usize);
        if bits >= 32 {
            for &w in words.iter().take(pack as usize) {
                let i = self.fit_register(w, int_type(self.cx, bits).into())?;
                out.push(self.b.build_bit_cast(i, et, "ia")?);
            }
        } else {
            let per = (32 / bits).min(pack);
            for &w in words {
                let i = self.fit_register(w, int_type(self.cx, per * bits).into())?;
                let v = self
                    .b
                    .build_bit_cast(i, crate::lower::vector_of(et, per), "ia")?
                    .into_vector_value();
                for k in 0..per {
                    if out.len() < pack as usize {
                        out.push(self.b.build_extract_element(v, self.i32(k as u64), "ia")?);
                    }
                }
            }
        }
        // Register form of each element (i1 tiles do not reach here: constraints need numbers).
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::check_template;

    #[test]
    fn templates_are_checked_as_llvm_reads_them() {
        assert!(check_template("mul.rn.f16x2 $0, $1, $2;", 3).is_ok());
        assert!(check_template("mov.b32 ${0}, ${1:x}; // $$ $( $| $)", 2).is_ok());
        let err = |t: &str, n| check_template(t, n).unwrap_err();
        assert!(err("mul.rn.f16x2 $0, $2, $1;", 2).contains("names operand $2"));
        assert!(err("ex2.approx.f32 $0, $*;", 2).contains("is not an operand"));
        assert!(err("mov.b32 $0, $", 2).contains("is not an operand"));
        assert!(err("mov.b32 ${0, $1;", 2).contains("not closed"));
        assert!(
            check_template("l_${:uid}: bra l_${:uid}; ${:comment} ${:private}x $0;", 1).is_ok()
        );
        assert!(err("mov.b32 ${:uuid}, $1;", 2).contains("is not one of LLVM's"));
        assert!(err("mov.b32 $0, ${:uid", 2).contains("is not one of LLVM's"));
        assert!(err("mov.b32 ${0:xy}, $1;", 2).contains("not closed"));
        assert!(err("mov.b32 $1, ${0:", 2).contains("not closed"));
        assert!(err("mov.b32 $99999999999999999999999;", 2).contains("is not an operand"));
    }
}
