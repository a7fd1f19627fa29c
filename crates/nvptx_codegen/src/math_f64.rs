//! fp64 math functions, written out in LLVM IR (there is no libdevice without the CUDA
//! toolkit). Each follows a textbook scheme accurate to a few ulp on its whole domain:
//!
//! - `exp`: `n = rint(x·log2 e)`, `r = x − n·ln2` (two-part Cody-Waite with fma), Taylor
//!   series of `e^r` to degree 13 on `|r| ≤ ln2/2`, then `2^n` applied in two halves;
//! - `exp2`: `n = rint(x)`, `r = (x − n)·ln2`, as above;
//! - `log`, `log2`: `x = m·2^e` with `m ∈ [√½, √2)`, `f = m − 1` (exact), and
//!   `log m = f − (f²/2 − s(f²/2 + R(s²)))` with `s = f/(2+f)` and `R` the odd series of
//!   `2·atanh(s) − 2s` over `s` to degree 20 (fdlibm's arrangement); subnormals are scaled
//!   first;
//! - `sin`, `cos`: `k = rint(x·2/π)`, `r = x − k·π/2` (two-part, fma), Taylor series on
//!   `|r| ≤ π/4` to degree 17/18, quadrant from `k mod 4`;
//! - `erf`: Kummer's series `erf x = 2x/√π · e^{−x²} · Σ (2x²)ⁿ / (2n+1)!!` (all terms
//!   positive, no cancellation), 100 terms in a loop, `±1` beyond `|x| ≥ 6`.
//!
//! NaN and infinities come out as IEEE says (NaN in, NaN out).

use crate::lower::{Lowering, R};
use inkwell::values::{FloatValue, IntValue};
use inkwell::{FloatPredicate, IntPredicate};
use std::f64::consts::{FRAC_2_PI, LN_2, LOG2_E};
use tile_ir::UnaryOp;

impl<'ctx> Lowering<'ctx, '_> {
    fn d(&self, v: f64) -> FloatValue<'ctx> {
        self.cx.f64_type().const_float(v)
    }

    /// `a·b + c` rounded once (`llvm.fma`), in the operands' float type.
    pub(crate) fn fma(
        &self,
        a: FloatValue<'ctx>,
        b: FloatValue<'ctx>,
        c: FloatValue<'ctx>,
    ) -> R<FloatValue<'ctx>> {
        let t = a.get_type().into();
        Ok(self
            .call_intrinsic("llvm.fma", &[t], &[a.into(), b.into(), c.into()])?
            .into_float_value())
    }

    /// A float intrinsic (`llvm.rint`, `llvm.fabs`, ...) at the first argument's type.
    pub(crate) fn float_intr(&self, name: &str, args: &[FloatValue<'ctx>]) -> R<FloatValue<'ctx>> {
        let t = args[0].get_type().into();
        let a: Vec<_> = args.iter().map(|&x| x.into()).collect();
        Ok(self.call_intrinsic(name, &[t], &a)?.into_float_value())
    }

    /// Σ c[k]·r^k by Horner with fma, highest degree first in `c`, in `r`'s float type.
    pub(crate) fn horner(&self, r: FloatValue<'ctx>, c: &[f64]) -> R<FloatValue<'ctx>> {
        let ty = r.get_type();
        let mut acc = ty.const_float(c[0]);
        for &k in &c[1..] {
            acc = self.fma(acc, r, ty.const_float(k))?;
        }
        Ok(acc)
    }

    /// `2^n` for an integer-valued `n` in [−1022, 1023], built from its bits.
    fn pow2i(&self, n: IntValue<'ctx>) -> R<FloatValue<'ctx>> {
        let i64t = self.cx.i64_type();
        let e = self.b.build_int_add(n, i64t.const_int(1023, false), "e")?;
        let bits = self
            .b
            .build_left_shift(e, i64t.const_int(52, false), "bits")?;
        Ok(self
            .b
            .build_bit_cast(bits, self.cx.f64_type(), "p2")?
            .into_float_value())
    }

    /// `p · 2^n` for integer-valued `n` (clamped), in two steps so every factor is normal.
    fn scale(&self, p: FloatValue<'ctx>, n: FloatValue<'ctx>) -> R<FloatValue<'ctx>> {
        let n = self.float_intr("llvm.maxnum", &[n, self.d(-2044.0)])?;
        let n = self.float_intr("llvm.minnum", &[n, self.d(2046.0)])?;
        let i64t = self.cx.i64_type();
        let ni = self.b.build_float_to_signed_int(n, i64t, "n")?;
        let h = self
            .b
            .build_right_shift(ni, i64t.const_int(1, false), true, "h")?;
        let l = self.b.build_int_sub(ni, h, "l")?;
        let a = self.b.build_float_mul(p, self.pow2i(h)?, "s")?;
        Ok(self.b.build_float_mul(a, self.pow2i(l)?, "s")?)
    }

    fn nan_passthrough(&self, x: FloatValue<'ctx>, y: FloatValue<'ctx>) -> R<FloatValue<'ctx>> {
        let isnan = self
            .b
            .build_float_compare(FloatPredicate::UNO, x, x, "isnan")?;
        Ok(self.b.build_select(isnan, x, y, "r")?.into_float_value())
    }

    fn exp_poly(&self, r: FloatValue<'ctx>) -> R<FloatValue<'ctx>> {
        let mut c = [0.0f64; 14];
        let mut f = 1.0f64;
        for (k, slot) in c.iter_mut().rev().enumerate() {
            if k > 0 {
                f *= k as f64;
            }
            *slot = 1.0 / f;
        }
        self.horner(r, &c)
    }

    pub(crate) fn math_f64(&mut self, op: UnaryOp, x: FloatValue<'ctx>) -> R<FloatValue<'ctx>> {
        const LN2_HI: f64 = 0.6931471803691238;
        const LN2_LO: f64 = 1.9082149292705877e-10;
        const PIO2_HI: f64 = std::f64::consts::FRAC_PI_2;
        const PIO2_LO: f64 = 6.123_233_995_736_766e-17;
        match op {
            UnaryOp::Exp | UnaryOp::Exp2 => {
                let (lo, hi) = if op == UnaryOp::Exp {
                    (-750.0, 710.0)
                } else {
                    (-1080.0, 1025.0)
                };
                let xc = self.float_intr("llvm.maxnum", &[x, self.d(lo)])?;
                let xc = self.float_intr("llvm.minnum", &[xc, self.d(hi)])?;
                let (n, r) = if op == UnaryOp::Exp {
                    let t = self.b.build_float_mul(xc, self.d(LOG2_E), "t")?;
                    let n = self.float_intr("llvm.rint", &[t])?;
                    let nn = self.b.build_float_neg(n, "nn")?;
                    let r = self.fma(nn, self.d(LN2_HI), xc)?;
                    (n, self.fma(nn, self.d(LN2_LO), r)?)
                } else {
                    let n = self.float_intr("llvm.rint", &[xc])?;
                    let f = self.b.build_float_sub(xc, n, "f")?;
                    (n, self.b.build_float_mul(f, self.d(LN_2), "r")?)
                };
                let p = self.exp_poly(r)?;
                let y = self.scale(p, n)?;
                self.nan_passthrough(x, y)
            }
            UnaryOp::Log | UnaryOp::Log2 => {
                let i64t = self.cx.i64_type();
                let tiny = self.b.build_float_compare(
                    FloatPredicate::OLT,
                    x,
                    self.d(f64::MIN_POSITIVE),
                    "tiny",
                )?;
                let scaled = self.b.build_float_mul(x, self.d(2f64.powi(54)), "xs")?;
                let xs = self
                    .b
                    .build_select(tiny, scaled, x, "xs")?
                    .into_float_value();
                let adj = self
                    .b
                    .build_select(tiny, self.d(-54.0), self.d(0.0), "adj")?
                    .into_float_value();
                let bits = self.b.build_bit_cast(xs, i64t, "bits")?.into_int_value();
                let ebits =
                    self.b
                        .build_right_shift(bits, i64t.const_int(52, false), false, "eb")?;
                let ebits = self
                    .b
                    .build_and(ebits, i64t.const_int(0x7ff, false), "eb")?;
                let e = self
                    .b
                    .build_int_sub(ebits, i64t.const_int(1023, false), "e")?;
                let mbits =
                    self.b
                        .build_and(bits, i64t.const_int((1u64 << 52) - 1, false), "mb")?;
                let mbits = self
                    .b
                    .build_or(mbits, i64t.const_int(1023u64 << 52, false), "mb")?;
                let m = self
                    .b
                    .build_bit_cast(mbits, self.cx.f64_type(), "m")?
                    .into_float_value();
                let big = self.b.build_float_compare(
                    FloatPredicate::OGT,
                    m,
                    self.d(std::f64::consts::SQRT_2),
                    "big",
                )?;
                let half = self.b.build_float_mul(m, self.d(0.5), "mh")?;
                let m = self.b.build_select(big, half, m, "m")?.into_float_value();
                let ef = self
                    .b
                    .build_signed_int_to_float(e, self.cx.f64_type(), "ef")?;
                let ef = self.b.build_float_add(ef, adj, "ef")?;
                let one_more = self.b.build_float_add(ef, self.d(1.0), "ef1")?;
                let ef = self
                    .b
                    .build_select(big, one_more, ef, "ef")?
                    .into_float_value();
                // log m = log1p(f), f = m − 1 exact; with s = f/(2+f), z = s², and
                // R = 2z/3 + 2z²/5 + … (so that log1p(f) = 2s + sR), 2s = f − sf gives
                // log1p(f) = f − (f²/2 − s(f²/2 + R)): f exact and a correction below f/2,
                // whose rounding counts for a fraction of an ulp (not s's own rounding in full).
                let f = self.b.build_float_sub(m, self.d(1.0), "f")?;
                let s = self.b.build_float_div(
                    f,
                    self.b.build_float_add(f, self.d(2.0), "f2")?,
                    "s",
                )?;
                let z = self.b.build_float_mul(s, s, "z")?;
                let c: Vec<f64> = (1..=10).rev().map(|k| 2.0 / (2 * k + 1) as f64).collect();
                let r = self.b.build_float_mul(z, self.horner(z, &c)?, "r")?;
                let hfsq = self.b.build_float_mul(
                    self.b.build_float_mul(f, f, "ff")?,
                    self.d(0.5),
                    "hfsq",
                )?;
                let shr =
                    self.b
                        .build_float_mul(s, self.b.build_float_add(hfsq, r, "hr")?, "shr")?;
                let y = if op == UnaryOp::Log {
                    // e·ln2_hi is exact; e·ln2_lo joins the small terms.
                    let small = self.fma(ef, self.d(LN2_LO), shr)?;
                    let corr = self.b.build_float_sub(hfsq, small, "corr")?;
                    let logm = self.b.build_float_sub(corr, f, "nl")?;
                    self.b.build_float_sub(
                        self.b.build_float_mul(ef, self.d(LN2_HI), "eh")?,
                        logm,
                        "log",
                    )?
                } else {
                    let corr = self.b.build_float_sub(hfsq, shr, "corr")?;
                    let logm = self.b.build_float_sub(f, corr, "logm")?;
                    self.fma(logm, self.d(LOG2_E), ef)?
                };
                // Special values: log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN stays.
                let zero = self
                    .b
                    .build_float_compare(FloatPredicate::OEQ, x, self.d(0.0), "z")?;
                let neg = self
                    .b
                    .build_float_compare(FloatPredicate::OLT, x, self.d(0.0), "n")?;
                let inf = self.b.build_float_compare(
                    FloatPredicate::OEQ,
                    x,
                    self.d(f64::INFINITY),
                    "i",
                )?;
                let y = self
                    .b
                    .build_select(inf, self.d(f64::INFINITY), y, "y")?
                    .into_float_value();
                let y = self
                    .b
                    .build_select(neg, self.d(f64::NAN), y, "y")?
                    .into_float_value();
                let y = self
                    .b
                    .build_select(zero, self.d(f64::NEG_INFINITY), y, "y")?
                    .into_float_value();
                self.nan_passthrough(x, y)
            }
            UnaryOp::Sin | UnaryOp::Cos => {
                let i64t = self.cx.i64_type();
                let t = self.b.build_float_mul(x, self.d(FRAC_2_PI), "t")?;
                let k = self.float_intr("llvm.rint", &[t])?;
                let nk = self.b.build_float_neg(k, "nk")?;
                let r = self.fma(nk, self.d(PIO2_HI), x)?;
                let r = self.fma(nk, self.d(PIO2_LO), r)?;
                let kc = self.float_intr("llvm.maxnum", &[k, self.d(-1e15)])?;
                let kc = self.float_intr("llvm.minnum", &[kc, self.d(1e15)])?;
                let ki = self.b.build_float_to_signed_int(kc, i64t, "ki")?;
                let q = self.b.build_and(ki, i64t.const_int(3, false), "q")?;
                let q = if op == UnaryOp::Cos {
                    self.b.build_int_add(q, i64t.const_int(1, false), "q")?
                } else {
                    q
                };
                let r2 = self.b.build_float_mul(r, r, "r2")?;
                // sin r = r · Σ (−r²)^k / (2k+1)!,  cos r = Σ (−r²)^k / (2k)!
                let mut sc = Vec::new();
                let mut cc = Vec::new();
                let mut fact = 1.0f64;
                for n in 0..=19u32 {
                    if n > 0 {
                        fact *= n as f64;
                    }
                    let sign = if (n / 2) % 2 == 0 { 1.0 } else { -1.0 };
                    if n % 2 == 1 {
                        sc.push(sign / fact);
                    } else {
                        cc.push(sign / fact);
                    }
                }
                sc.reverse();
                cc.reverse();
                let sin_r = self.b.build_float_mul(r, self.horner(r2, &sc)?, "sinr")?;
                let cos_r = self.horner(r2, &cc)?;
                let q = self.b.build_and(q, i64t.const_int(3, false), "q")?;
                let odd = self.b.build_int_compare(
                    IntPredicate::NE,
                    self.b.build_and(q, i64t.const_int(1, false), "o")?,
                    i64t.const_zero(),
                    "odd",
                )?;
                let negate = self.b.build_int_compare(
                    IntPredicate::NE,
                    self.b.build_and(q, i64t.const_int(2, false), "g")?,
                    i64t.const_zero(),
                    "neg",
                )?;
                let v = self
                    .b
                    .build_select(odd, cos_r, sin_r, "v")?
                    .into_float_value();
                let nv = self.b.build_float_neg(v, "nv")?;
                Ok(self.b.build_select(negate, nv, v, "y")?.into_float_value())
            }
            UnaryOp::Erf => self.erf_f64(x),
            other => self.unsupported(format!("fp64 {}", other.name())),
        }
    }

    fn erf_f64(&mut self, x: FloatValue<'ctx>) -> R<FloatValue<'ctx>> {
        let f64t = self.cx.f64_type();
        let ax = self.float_intr("llvm.fabs", &[x])?;
        let axc = self.float_intr("llvm.minnum", &[ax, self.d(6.0)])?;
        let x2 = self.b.build_float_mul(axc, axc, "x2")?;
        let two_x2 = self.b.build_float_mul(x2, self.d(2.0), "2x2")?;
        // Σ_{n<100} t_n with t_0 = 1, t_n = t_{n−1} · 2x² / (2n+1), in a loop.
        let pre = self.b.get_insert_block().expect("positioned");
        let head = self.cx.append_basic_block(self.kernel, "erf.loop");
        let done = self.cx.append_basic_block(self.kernel, "erf.done");
        self.b.build_unconditional_branch(head)?;
        self.b.position_at_end(head);
        let i32t = self.cx.i32_type();
        let n = self.b.build_phi(i32t, "n")?;
        let t = self.b.build_phi(f64t, "t")?;
        let s = self.b.build_phi(f64t, "s")?;
        n.add_incoming(&[(&i32t.const_int(1, false), pre)]);
        t.add_incoming(&[(&self.d(1.0), pre)]);
        s.add_incoming(&[(&self.d(1.0), pre)]);
        let nv = n.as_basic_value().into_int_value();
        let nf = self.b.build_signed_int_to_float(nv, f64t, "nf")?;
        let den = self.fma(nf, self.d(2.0), self.d(1.0))?;
        let tn = self.b.build_float_div(
            self.b
                .build_float_mul(t.as_basic_value().into_float_value(), two_x2, "tm")?,
            den,
            "tn",
        )?;
        let sn = self
            .b
            .build_float_add(s.as_basic_value().into_float_value(), tn, "sn")?;
        let n1 = self.b.build_int_add(nv, i32t.const_int(1, false), "n1")?;
        n.add_incoming(&[(&n1, head)]);
        t.add_incoming(&[(&tn, head)]);
        s.add_incoming(&[(&sn, head)]);
        let more =
            self.b
                .build_int_compare(IntPredicate::SLT, n1, i32t.const_int(100, false), "more")?;
        self.b.build_conditional_branch(more, head, done)?;
        self.b.position_at_end(done);
        let e = self.math_f64(UnaryOp::Exp, self.b.build_float_neg(x2, "nx2")?)?;
        let k = 2.0 / std::f64::consts::PI.sqrt();
        let y = self
            .b
            .build_float_mul(self.b.build_float_mul(axc, self.d(k), "a")?, e, "b")?;
        let y = self.b.build_float_mul(y, sn, "y")?;
        let y = self.float_intr("llvm.minnum", &[y, self.d(1.0)])?;
        let y = self.float_intr("llvm.copysign", &[y, x])?;
        self.nan_passthrough(x, y)
    }
}
