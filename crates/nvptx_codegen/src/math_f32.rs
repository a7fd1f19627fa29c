//! fp32 logarithms, sine, cosine and erf, written out in LLVM IR to libdevice's accuracy
//! (Triton lowers `tl.log`, `tl.log2`, `tl.sin`, `tl.cos` and `tl.math.erf` to libdevice, not
//! to the hardware approximations, whose error near `log(1)` or a zero of `sin` is large
//! relative to the result). Measured in an fp32 emulation of these exact operations (see
//! `tests/test_math_accuracy.py` for the check on the compiled code):
//!
//! - `log`: `x = m·2^e`, `m ∈ [√½, √2)`, `log m = f + f²·Q(f)` with `f = m − 1` and `Q` a
//!   degree-8 minimax fit; `e·ln2` in two parts. Every fp32 in [0.5, 2) and its scalings by
//!   2^±126: at most 0.94 ulp.
//! - `log2`: the same `f`, `f·log2 e` carried in two parts and added to `e` with its rounding
//!   error kept: at most 1.35 ulp.
//! - `sin`, `cos`: `q = rint(x·2/π)`, `r = x − q·π/2` with π/2 in three parts (fma); degree-3
//!   (in r²) minimax polynomials on `|r| ≤ π/4`; quadrant from `q`. At most 1.5 ulp for
//!   `|x| ≤ 105615`. Above, `x·2/π mod 4` is taken in fp64 from eight 24-bit pieces of 2/π
//!   (each product exact, each reduced mod 4 exactly), correct to about 2^-48 absolute, on a
//!   branch taken only by such inputs.
//! - `erf`: `x + x·R(x²)` below 1.25, `1 − 2^{Q(|x|)}` above (`Q ≈ log2 erfc`), 1 from 3.93:
//!   at most 1.9 ulp.
//!
//! The polynomials were fitted (weighted least squares on Chebyshev nodes, reweighted toward
//! minimax) against 40-digit references, then rounded to fp32.

use crate::lower::{Lowering, R};
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::module::Linkage;
use inkwell::values::{FloatValue, FunctionValue, IntValue};
use inkwell::{FloatPredicate, IntPredicate};

const LN2_HI: f64 = 0.693145751953125;
const LN2_LO: f64 = 1.428606765330187e-06;
const LOG2E_HI: f64 = 1.4426950216293335;
const LOG2E_LO: f64 = 1.925963033500011e-08;
/// `(log1p(f) − f) / f²` on `[√½ − 1, √2 − 1]`, highest degree first.
const LOG_Q: [f64; 9] = [
    -0.07777628302574158,
    0.1277713030576706,
    -0.13114094734191895,
    0.14196178317070007,
    -0.166270911693573,
    0.2000163495540619,
    -0.2500077784061432,
    0.33333325386047363,
    -0.4999999701976776,
];
/// `(sin r − r) / r³` and `(cos r − 1) / r²` as polynomials in `r²`, `|r| ≤ π/4`.
const SIN_S: [f64; 4] = [
    2.724937985476572e-06,
    -0.00019840081222355366,
    0.008333331905305386,
    -0.1666666716337204,
];
const COS_C: [f64; 4] = [
    2.4462768124067225e-05,
    -0.0013887579552829266,
    0.04166664928197861,
    -0.5,
];
const TWO_OVER_PI: f64 = 0.6366197466850281;
/// π/2 in three fp32 parts.
const PIO2: [f64; 3] = [
    1.5707963705062866,
    -4.371138828673793e-08,
    -1.7151245100058819e-15,
];
/// Above this the three-part reduction loses bits; the fp64 one takes over.
const TRIG_FAST_LIMIT: f64 = 105615.0;
/// 2/π in 24-bit pieces (each a 24-bit integer times a power of two).
const TWO_OVER_PI_PIECES: [f64; 8] = [
    0.6366197466850281,
    2.5682552973194106e-08,
    2.937095214933759e-16,
    3.2543794001732456e-23,
    1.2089613708828537e-29,
    5.667556795740071e-37,
    2.6204031112097215e-44,
    7.053957680880629e-52,
];
/// `erf(x)/x − 1` as a polynomial in `x²`, `|x| < 1.25`.
const ERF_R: [f64; 8] = [
    -7.641677257197443e-06,
    0.00010431778355268762,
    -0.000834779697470367,
    0.005209903698414564,
    -0.026860740035772324,
    0.11283688247203827,
    -0.37612631916999817,
    0.12837916612625122,
];
const ERF_SPLIT: f64 = 1.25;
/// `log2(erfc(u + 2.7))` for `x = u + 2.7 ∈ [1.25, 3.93]`.
const ERFC_CENTRE: f64 = 2.7;
const ERFC_Q: [f64; 10] = [
    -1.569460437167436e-07,
    2.1307182578311767e-06,
    -1.485640950704692e-05,
    8.80778388818726e-05,
    -0.00048807289567776024,
    0.002578644547611475,
    -0.013391788117587566,
    -1.370445966720581,
    -8.268771171569824,
    -12.86190128326416,
];
/// erfc is below half an ulp of 1 from here on.
const ERF_ONE: f64 = 3.93;

impl<'ctx> Lowering<'ctx, '_> {
    fn sel32(
        &self,
        c: IntValue<'ctx>,
        a: FloatValue<'ctx>,
        b: FloatValue<'ctx>,
    ) -> R<FloatValue<'ctx>> {
        Ok(self.b.build_select(c, a, b, "sel")?.into_float_value())
    }

    /// `log x` (`two`: `log2 x`) for fp32.
    pub(crate) fn log_f32(&self, x: FloatValue<'ctx>, two: bool) -> R<FloatValue<'ctx>> {
        let b = &self.b;
        let i32t = self.cx.i32_type();
        let f32t = self.cx.f32_type();
        // Subnormals are scaled into the normal range first.
        let tiny =
            b.build_float_compare(FloatPredicate::OLT, x, self.f32c(1.175_494_35e-38), "tiny")?;
        let scaled = b.build_float_mul(x, self.f32c(8_388_608.0), "xs")?;
        let xs = self.sel32(tiny, scaled, x)?;
        let adj = self.sel32(tiny, self.f32c(-23.0), self.f32c(0.0))?;
        let bits = b.build_bit_cast(xs, i32t, "bits")?.into_int_value();
        // e = the exponent that puts m = x / 2^e in [√½, √2): 0x3f3504f3 is √½'s bits.
        let t = b.build_int_sub(bits, i32t.const_int(0x3f35_04f3, false), "t")?;
        let e = b.build_right_shift(t, i32t.const_int(23, false), true, "e")?;
        let mbits = b.build_int_sub(
            bits,
            b.build_left_shift(e, i32t.const_int(23, false), "es")?,
            "mb",
        )?;
        let m = b.build_bit_cast(mbits, f32t, "m")?.into_float_value();
        let f = b.build_float_sub(m, self.f32c(1.0), "f")?;
        let ef = b.build_signed_int_to_float(e, f32t, "ef")?;
        let ef = b.build_float_add(ef, adj, "ef")?;
        let q = self.horner(f, &LOG_Q)?;
        let f2 = b.build_float_mul(f, f, "f2")?;
        let y = if two {
            // log2 m = f·log2e + f²·Q·log2e; the first term in two parts, added to e with
            // the sum's rounding error kept (|e| ≥ 1 > |f·log2e| whenever e ≠ 0).
            let qb = b.build_float_mul(q, self.f32c(LOG2E_HI), "qb")?;
            let tail = b.build_float_mul(f2, qb, "tail")?;
            let ah = b.build_float_mul(f, self.f32c(LOG2E_HI), "ah")?;
            let al = self.fma(f, self.f32c(LOG2E_HI), b.build_float_neg(ah, "nah")?)?;
            let al = self.fma(f, self.f32c(LOG2E_LO), al)?;
            let s = b.build_float_add(ef, ah, "s")?;
            let err = b.build_float_add(b.build_float_sub(ef, s, "d")?, ah, "err")?;
            let low = b.build_float_add(b.build_float_add(err, al, "lo")?, tail, "lo")?;
            b.build_float_add(s, low, "log2")?
        } else {
            let p = self.fma(f2, q, f)?;
            let lo = self.fma(ef, self.f32c(LN2_LO), p)?;
            self.fma(ef, self.f32c(LN2_HI), lo)?
        };
        // log(+inf) = +inf, log(NaN) = NaN, log(x < 0) = NaN, log(±0) = −inf.
        let inf = b.build_float_compare(FloatPredicate::OEQ, x, self.f32c(f64::INFINITY), "inf")?;
        let y = self.sel32(inf, x, y)?;
        let bad = b.build_float_compare(FloatPredicate::ULT, x, self.f32c(0.0), "bad")?;
        let y = self.sel32(bad, self.f32c(f64::NAN), y)?;
        let zero = b.build_float_compare(FloatPredicate::OEQ, x, self.f32c(0.0), "zero")?;
        self.sel32(zero, self.f32c(f64::NEG_INFINITY), y)
    }

    /// `x·2/π` reduced mod 4 in fp64, for `|x| > TRIG_FAST_LIMIT`: the quadrant count (its
    /// low two bits are what matter) and the remainder `r ∈ [−π/4, π/4]` as fp32.
    fn trig_reduce_wide(&self, x: FloatValue<'ctx>) -> R<(FloatValue<'ctx>, FloatValue<'ctx>)> {
        let b = &self.b;
        let f64t = self.cx.f64_type();
        let d = |v: f64| f64t.const_float(v);
        let xd = b.build_float_ext(x, f64t, "xd")?;
        let mut sum = d(0.0);
        for piece in TWO_OVER_PI_PIECES {
            // x·piece is exact (24 × 24 bits), and so is its remainder mod 4.
            let t = b.build_float_mul(xd, d(piece), "t")?;
            let k = self.float_intr("llvm.floor", &[b.build_float_mul(t, d(0.25), "t4")?])?;
            let m = self.fma(k, d(-4.0), t)?;
            sum = b.build_float_add(sum, m, "sum")?;
        }
        let q = self.float_intr("llvm.rint", &[sum])?;
        let frac = b.build_float_sub(sum, q, "frac")?;
        let r = b.build_float_mul(frac, d(std::f64::consts::FRAC_PI_2), "r")?;
        let r = b.build_float_trunc(r, self.cx.f32_type(), "r32")?;
        let q = b.build_float_trunc(q, self.cx.f32_type(), "q32")?;
        Ok((q, r))
    }

    /// [`Self::trig_reduce_wide`] as one function of the module, `(q, r)` from `x`, called
    /// from each element's cold branch: written out at every element it made a 64-element
    /// tile's sin·cos 9800 PTX lines.
    fn trig_wide_fn(&self) -> R<FunctionValue<'ctx>> {
        const NAME: &str = "tiles.trig_reduce_wide";
        if let Some(f) = self.module.get_function(NAME) {
            return Ok(f);
        }
        let f32t = self.cx.f32_type();
        let ret = self.cx.struct_type(&[f32t.into(), f32t.into()], false);
        let f = self.module.add_function(
            NAME,
            ret.fn_type(&[f32t.into()], false),
            Some(Linkage::Internal),
        );
        let noinline = Attribute::get_named_enum_kind_id("noinline");
        f.add_attribute(
            AttributeLoc::Function,
            self.cx.create_enum_attribute(noinline, 0),
        );
        let here = self.b.get_insert_block();
        self.b
            .position_at_end(self.cx.append_basic_block(f, "entry"));
        let Some(x) = f.get_nth_param(0) else {
            return self.internal("the wide reduction has no parameter");
        };
        let (q, r) = self.trig_reduce_wide(x.into_float_value())?;
        let pair = self.b.build_insert_value(ret.get_undef(), q, 0, "p")?;
        let pair = self.b.build_insert_value(pair, r, 1, "p")?;
        self.b.build_return(Some(&pair))?;
        if let Some(bb) = here {
            self.b.position_at_end(bb);
        }
        Ok(f)
    }

    /// `sin x` or `cos x` for fp32.
    pub(crate) fn sincos_f32(&self, x: FloatValue<'ctx>, cos: bool) -> R<FloatValue<'ctx>> {
        let i32t = self.cx.i32_type();
        let f32t = self.cx.f32_type();
        let t = self.b.build_float_mul(x, self.f32c(TWO_OVER_PI), "t")?;
        let q = self.float_intr("llvm.rint", &[t])?;
        let nq = self.b.build_float_neg(q, "nq")?;
        let mut r = x;
        for part in PIO2 {
            r = self.fma(nq, self.f32c(part), r)?;
        }
        // Large inputs (and ±inf, whose result is NaN either way) take the fp64 reduction.
        let ax = self.float_intr("llvm.fabs", &[x])?;
        let wide = self.b.build_float_compare(
            FloatPredicate::OGT,
            ax,
            self.f32c(TRIG_FAST_LIMIT),
            "wide",
        )?;
        let here = self.b.get_insert_block().expect("positioned");
        let slow = self.cx.append_basic_block(self.kernel, "trig.wide");
        let join = self.cx.append_basic_block(self.kernel, "trig.join");
        self.b.build_conditional_branch(wide, slow, join)?;
        self.b.position_at_end(slow);
        let call = self
            .b
            .build_call(self.trig_wide_fn()?, &[x.into()], "wide")?;
        let Some(pair) = call.try_as_basic_value().basic() else {
            return self.internal("the wide reduction returned nothing");
        };
        let pair = pair.into_struct_value();
        let qw = self
            .b
            .build_extract_value(pair, 0, "qw")?
            .into_float_value();
        let rw = self
            .b
            .build_extract_value(pair, 1, "rw")?
            .into_float_value();
        self.b.build_unconditional_branch(join)?;
        self.b.position_at_end(join);
        let qp = self.b.build_phi(f32t, "q")?;
        qp.add_incoming(&[(&q, here), (&qw, slow)]);
        let rp = self.b.build_phi(f32t, "r")?;
        rp.add_incoming(&[(&r, here), (&rw, slow)]);
        let (q, r) = (
            qp.as_basic_value().into_float_value(),
            rp.as_basic_value().into_float_value(),
        );
        let b = &self.b;
        let z = b.build_float_mul(r, r, "z")?;
        let s = self.fma(b.build_float_mul(z, r, "z3")?, self.horner(z, &SIN_S)?, r)?;
        let c = self.fma(z, self.horner(z, &COS_C)?, self.f32c(1.0))?;
        // The quadrant's low bits: q is an integer below 2^24 in magnitude here, or NaN/inf
        // (cleared to 0 first: fptosi of those would be poison).
        let finite = b.build_float_compare(
            FloatPredicate::OLT,
            self.float_intr("llvm.fabs", &[q])?,
            self.f32c(16_777_216.0),
            "fin",
        )?;
        let qs = self.sel32(finite, q, self.f32c(0.0))?;
        let qi = b.build_float_to_signed_int(qs, i32t, "qi")?;
        let qi = if cos {
            b.build_int_add(qi, i32t.const_int(1, false), "qi")?
        } else {
            qi
        };
        let odd = b.build_int_compare(
            IntPredicate::NE,
            b.build_and(qi, i32t.const_int(1, false), "q1")?,
            i32t.const_zero(),
            "odd",
        )?;
        let neg = b.build_int_compare(
            IntPredicate::NE,
            b.build_and(qi, i32t.const_int(2, false), "q2")?,
            i32t.const_zero(),
            "neg",
        )?;
        let y = self.sel32(odd, c, s)?;
        let y = self.sel32(neg, b.build_float_neg(y, "ny")?, y)?;
        if cos {
            Ok(y)
        } else {
            // sin(±0) = ±0.
            let zero = b.build_float_compare(FloatPredicate::OEQ, x, self.f32c(0.0), "z0")?;
            self.sel32(zero, x, y)
        }
    }

    /// `erf x` for fp32.
    pub(crate) fn erf_f32(&self, x: FloatValue<'ctx>) -> R<FloatValue<'ctx>> {
        let b = &self.b;
        let ax = self.float_intr("llvm.fabs", &[x])?;
        let z = b.build_float_mul(x, x, "z")?;
        let small = self.fma(x, self.horner(z, &ERF_R)?, x)?;
        let u = b.build_float_sub(ax, self.f32c(ERFC_CENTRE), "u")?;
        let l = self.horner(u, &ERFC_Q)?;
        let e = self.asm_f32(&self.ftz_name("ex2.approx"), l)?;
        let big = b.build_float_sub(self.f32c(1.0), e, "big")?;
        let one = b.build_float_compare(FloatPredicate::OGE, ax, self.f32c(ERF_ONE), "one")?;
        let big = self.sel32(one, self.f32c(1.0), big)?;
        let big = self.float_intr("llvm.copysign", &[big, x])?;
        let is_small =
            b.build_float_compare(FloatPredicate::OLT, ax, self.f32c(ERF_SPLIT), "sm")?;
        let y = self.sel32(is_small, small, big)?;
        // NaN stays NaN (the comparisons above are false for it and pick `big`).
        let nan = b.build_float_compare(FloatPredicate::UNO, x, x, "nan")?;
        self.sel32(nan, x, y)
    }
}
