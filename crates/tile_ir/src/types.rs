//! Element types, shapes and tile types.
//!
//! dtype names follow Triton's spelling (`i32`, `u8`, `fp16`, `bf16`, `*fp32` for a pointer),
//! so signatures and dumps read alike.

use crate::entities::LayoutId;
use std::fmt;

/// A numeric element type.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
#[allow(missing_docs)]
pub enum DType {
    I1,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F16,
    BF16,
    F32,
    F64,
    /// OCP fp8 E5M2 (Triton's `fp8e5`): 5 exponent bits, 2 mantissa bits, infinities.
    F8E5M2,
    /// OCP fp8 E4M3FN (Triton's `fp8e4nv`): 4 exponent bits, 3 mantissa bits, no infinities.
    F8E4M3,
    /// Triton's `fp8e4b15`: E4M3 with fp16's exponent bias (15), no infinities or NaN, largest
    /// value 1.875 (conversions into it clamp to 1.75). Made for conversion to fp16 by bit
    /// moves; converted in software on every GPU.
    F8E4B15,
}

impl DType {
    /// Every dtype, for tables and tests.
    pub const ALL: [DType; 16] = [
        DType::I1,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::F8E5M2,
        DType::F8E4M3,
        DType::F8E4B15,
    ];

    /// Triton's name for the dtype (`fp32`, `i64`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::I1 => "i1",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::F16 => "fp16",
            DType::BF16 => "bf16",
            DType::F32 => "fp32",
            DType::F64 => "fp64",
            DType::F8E5M2 => "fp8e5",
            DType::F8E4M3 => "fp8e4nv",
            DType::F8E4B15 => "fp8e4b15",
        }
    }

    /// Parses Triton's spelling; also accepts `int32`, `float32`, `bool` style names.
    pub fn from_name(s: &str) -> Option<DType> {
        Some(match s {
            "i1" | "int1" | "bool" => DType::I1,
            "i8" | "int8" => DType::I8,
            "i16" | "int16" => DType::I16,
            "i32" | "int32" => DType::I32,
            "i64" | "int64" => DType::I64,
            "u8" | "uint8" => DType::U8,
            "u16" | "uint16" => DType::U16,
            "u32" | "uint32" => DType::U32,
            "u64" | "uint64" => DType::U64,
            "fp16" | "f16" | "float16" => DType::F16,
            "bf16" | "bfloat16" => DType::BF16,
            "fp32" | "f32" | "float32" => DType::F32,
            "fp64" | "f64" | "float64" => DType::F64,
            "fp8e5" | "float8e5" | "float8_e5m2" => DType::F8E5M2,
            "fp8e4nv" | "float8e4nv" | "float8_e4m3fn" => DType::F8E4M3,
            "fp8e4b15" | "float8e4b15" => DType::F8E4B15,
            _ => return None,
        })
    }

    /// Width in bits (1 for `i1`).
    pub fn bits(self) -> u32 {
        match self {
            DType::I1 => 1,
            DType::I8 | DType::U8 | DType::F8E5M2 | DType::F8E4M3 | DType::F8E4B15 => 8,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 16,
            DType::I32 | DType::U32 | DType::F32 => 32,
            DType::I64 | DType::U64 | DType::F64 => 64,
        }
    }

    /// Bytes one element takes in memory (`i1` is stored as a byte).
    pub fn bytes(self) -> u32 {
        self.bits().div_ceil(8)
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F16
                | DType::BF16
                | DType::F32
                | DType::F64
                | DType::F8E5M2
                | DType::F8E4M3
                | DType::F8E4B15
        )
    }

    /// Whether this is an 8-bit float (stored as bytes; arithmetic goes through fp16).
    pub fn is_fp8(self) -> bool {
        matches!(self, DType::F8E5M2 | DType::F8E4M3 | DType::F8E4B15)
    }

    /// Whether this is an OCP fp8 format (E5M2, E4M3FN), which the GPU converts (`cvt`, sm_90+)
    /// and multiplies (fp8 `wgmma`) itself; fp8e4b15 has neither, and goes through fp16.
    pub fn is_ocp_fp8(self) -> bool {
        matches!(self, DType::F8E5M2 | DType::F8E4M3)
    }

    /// Whether this is an integer type (`i1` included).
    pub fn is_int(self) -> bool {
        !self.is_float()
    }

    /// Whether this is a signed integer type. `i1` counts as unsigned (it zero-extends).
    pub fn is_signed(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    /// Whether this is an unsigned integer type (`i1` included).
    pub fn is_unsigned(self) -> bool {
        matches!(
            self,
            DType::I1 | DType::U8 | DType::U16 | DType::U32 | DType::U64
        )
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What one element of a value is: a number, or a pointer to global memory holding numbers.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Elem {
    /// A number.
    Num(DType),
    /// A pointer into global memory whose pointee has this dtype.
    Ptr(DType),
}

impl Elem {
    /// The numeric dtype, or `None` for pointers.
    pub fn dtype(self) -> Option<DType> {
        match self {
            Elem::Num(d) => Some(d),
            Elem::Ptr(_) => None,
        }
    }
    /// Whether this is a pointer.
    pub fn is_ptr(self) -> bool {
        matches!(self, Elem::Ptr(_))
    }
    /// Bytes one element takes in registers/memory (pointers are 8).
    pub fn bytes(self) -> u32 {
        match self {
            Elem::Num(d) => d.bytes(),
            Elem::Ptr(_) => 8,
        }
    }
    /// Parses `fp32` or `*fp32`.
    pub fn from_name(s: &str) -> Option<Elem> {
        match s.strip_prefix('*') {
            Some(rest) => DType::from_name(rest).map(Elem::Ptr),
            None => DType::from_name(s).map(Elem::Num),
        }
    }
}

impl fmt::Display for Elem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Elem::Num(d) => write!(f, "{d}"),
            Elem::Ptr(d) => write!(f, "*{d}"),
        }
    }
}

/// The most dimensions a tile may have.
pub const MAX_RANK: usize = 16;

/// A tile's shape: up to [`MAX_RANK`] dimensions; rank 0 is a scalar.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Shape {
    dims: [u32; MAX_RANK],
    rank: u8,
}

impl Shape {
    /// The shape of a scalar.
    pub const SCALAR: Shape = Shape {
        dims: [0; MAX_RANK],
        rank: 0,
    };

    /// A shape from its dimensions; `None` if there are more than [`MAX_RANK`].
    pub fn new(dims: &[u32]) -> Option<Shape> {
        if dims.len() > MAX_RANK {
            return None;
        }
        let mut s = Shape {
            dims: [0; MAX_RANK],
            rank: dims.len() as u8,
        };
        s.dims[..dims.len()].copy_from_slice(dims);
        Some(s)
    }
    /// The dimensions.
    pub fn dims(&self) -> &[u32] {
        &self.dims[..self.rank as usize]
    }
    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.rank as usize
    }
    /// Whether this is a scalar (rank 0).
    pub fn is_scalar(&self) -> bool {
        self.rank == 0
    }
    /// Number of elements.
    pub fn numel(&self) -> u64 {
        self.dims().iter().map(|&d| d as u64).product()
    }
    /// The shape with a size-1 dimension inserted at `axis`.
    pub fn insert(&self, axis: usize, size: u32) -> Option<Shape> {
        if axis > self.rank() || self.rank() == MAX_RANK {
            return None;
        }
        let mut v = self.dims().to_vec();
        v.insert(axis, size);
        Shape::new(&v)
    }
    /// Whether `index` can gather from a tile of this shape along `axis`: the same rank, and
    /// every dimension but the axis the same.
    pub fn gathers_with(&self, index: &Shape, axis: u8) -> bool {
        let (s, i, a) = (self.dims(), index.dims(), axis as usize);
        !s.is_empty()
            && a < s.len()
            && s.len() == i.len()
            && s.iter()
                .zip(i)
                .enumerate()
                .all(|(d, (x, y))| d == a || x == y)
    }

    /// The shape with dimension `axis` removed.
    pub fn remove(&self, axis: usize) -> Shape {
        let mut v = self.dims().to_vec();
        v.remove(axis);
        Shape::new(&v).expect("removing a dimension keeps the rank in bounds")
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.dims().iter().enumerate() {
            if i > 0 {
                f.write_str("x")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// The type of a value: an element type, a shape, and (for tiles, once assigned) a layout.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct Type {
    /// Element type.
    pub elem: Elem,
    /// Shape (rank 0 for scalars).
    pub shape: Shape,
    /// How the tile's elements are spread over threads; `None` before layout assignment.
    pub layout: Option<LayoutId>,
}

impl Type {
    /// A scalar of `elem`.
    pub fn scalar(elem: Elem) -> Type {
        Type {
            elem,
            shape: Shape::SCALAR,
            layout: None,
        }
    }
    /// A tile of `elem` with `shape`, no layout yet.
    pub fn tile(elem: Elem, shape: Shape) -> Type {
        Type {
            elem,
            shape,
            layout: None,
        }
    }
    /// A scalar number.
    pub fn num(d: DType) -> Type {
        Type::scalar(Elem::Num(d))
    }
    /// Whether this is a scalar.
    pub fn is_scalar(&self) -> bool {
        self.shape.is_scalar()
    }
    /// The numeric dtype, `None` for pointers.
    pub fn dtype(&self) -> Option<DType> {
        self.elem.dtype()
    }
    /// The same type with another element type.
    pub fn with_elem(&self, elem: Elem) -> Type {
        Type { elem, ..*self }
    }
    /// The same type with another shape (layout dropped).
    pub fn with_shape(&self, shape: Shape) -> Type {
        Type {
            shape,
            layout: None,
            ..*self
        }
    }
    /// Whether two types agree but for their layouts.
    pub fn same_but_layout(&self, other: &Type) -> bool {
        self.elem == other.elem && self.shape == other.shape
    }
}

/// The fp8 bits of `x`, rounded to nearest even: E5M2 overflows to infinity, E4M3FN saturates
/// to ±448 (as `cvt.rn.satfinite` does); NaN stays NaN. For constants and tests.
pub fn f64_to_fp8(x: f64, d: DType) -> u8 {
    if d == DType::F8E4B15 {
        return f16_to_fp8e4b15(f64_to_f16_rz(x));
    }
    let (man, bias, max_exp) = match d {
        DType::F8E5M2 => (2u32, 15i32, 15i32),
        DType::F8E4M3 => (3, 7, 8),
        _ => return 0,
    };
    let sign: u8 = if x.is_sign_negative() { 0x80 } else { 0 };
    if x.is_nan() {
        return sign | if d == DType::F8E5M2 { 0x7E } else { 0x7F };
    }
    let a = x.abs();
    let max_finite = match d {
        DType::F8E5M2 => 57344.0,
        _ => 448.0,
    };
    let saturate = |s: u8| -> u8 {
        if d == DType::F8E5M2 {
            s | 0x7C
        } else {
            s | 0x7E
        }
    };
    if a.is_infinite() {
        return saturate(sign);
    }
    if a == 0.0 {
        return sign;
    }
    // Exponent of the leading bit, clamped to the smallest normal's (subnormals share it).
    let mut e = a.log2().floor() as i32;
    e = e.max(1 - bias);
    let scale = 2f64.powi(e - man as i32);
    let q = a / scale;
    let mut m = q.round_ties_even() as u64;
    if m >= 1u64 << (man + 1) {
        m >>= 1;
        e += 1;
    }
    if e > max_exp || (d == DType::F8E4M3 && a > max_finite) {
        return saturate(sign);
    }
    let normal = m >= 1u64 << man;
    let exp_field = if normal { (e + bias) as u64 } else { 0 };
    let bits = (exp_field << man) | (m & ((1u64 << man) - 1));
    let bits = bits as u8;
    if d == DType::F8E4M3 && bits == 0x7F {
        // 0x7F is NaN in E4M3FN; the largest finite is 0x7E.
        return sign | 0x7E;
    }
    sign | bits
}

/// The fp16 bits of `x` rounded toward zero (through fp32 rounded to nearest, as a GPU converts
/// an fp32 value): the first step of a conversion to fp8e4b15.
pub fn f64_to_f16_rz(x: f64) -> u16 {
    let f = x as f32;
    let sign: u16 = if f.is_sign_negative() { 0x8000 } else { 0 };
    if f.is_nan() {
        return sign | 0x7E00;
    }
    let a = f.abs() as f64;
    if a >= 65536.0 {
        return sign | if a.is_infinite() { 0x7C00 } else { 0x7BFF };
    }
    if a < 2f64.powi(-24) {
        return sign;
    }
    let mut e = a.log2().floor() as i32;
    if 2f64.powi(e) > a {
        e -= 1;
    }
    let e = e.max(-14);
    // 10 mantissa bits at exponent e; truncation is rounding toward zero.
    let m = (a / 2f64.powi(e - 10)).floor() as u32;
    let bits = if m >= 1 << 10 {
        (((e + 15) as u32) << 10) | (m & 0x3FF)
    } else {
        m // subnormal (e == -14)
    };
    sign | bits.min(0x7BFF) as u16
}

/// fp16 bits -> fp8e4b15, as Triton converts on NVIDIA GPUs: the magnitude clamps to 1.75 (NaN
/// and infinities too), then rounds to nearest with ties away from zero.
pub fn f16_to_fp8e4b15(h: u16) -> u8 {
    let a = h & 0x7FFF;
    let a = if a > 0x3F00 { 0x3F00 } else { a }; // NaN's bits are above too
    let sign = ((h >> 8) & 0x80) as u8;
    sign | (((u32::from(a) << 1) + 0x80) >> 8) as u8
}

/// fp8e4b15 bits -> fp16 bits, exactly (the same exponent bias: the bits move).
pub fn fp8e4b15_to_f16(b: u8) -> u16 {
    (u16::from(b & 0x80) << 8) | (u16::from(b & 0x7F) << 7)
}

#[cfg(test)]
mod fp8_tests {
    use super::*;

    #[test]
    fn fp8_encodings_match_the_ocp_tables() {
        let e5 = |x| f64_to_fp8(x, DType::F8E5M2);
        let e4 = |x| f64_to_fp8(x, DType::F8E4M3);
        assert_eq!(e5(1.0), 0x3C);
        assert_eq!(e5(-2.0), 0xC0);
        assert_eq!(e5(57344.0), 0x7B);
        assert_eq!(e5(1e9), 0x7C);
        assert_eq!(e5(2f64.powi(-16)), 0x01);
        assert_eq!(e4(1.0), 0x38);
        assert_eq!(e4(448.0), 0x7E);
        assert_eq!(e4(1e6), 0x7E);
        assert_eq!(e4(-0.5), 0xB0);
        assert_eq!(e4(2f64.powi(-9)), 0x01);
        assert_eq!(e4(0.0), 0x00);
    }

    #[test]
    fn fp8e4b15_encodings() {
        let b = |x| f64_to_fp8(x, DType::F8E4B15);
        assert_eq!(b(1.0), 0x78);
        assert_eq!(b(-1.0), 0xF8);
        assert_eq!(b(1.75), 0x7E);
        assert_eq!(b(100.0), 0x7E); // clamped
        assert_eq!(b(f64::NAN), 0x7E);
        assert_eq!(b(-f64::INFINITY), 0xFE);
        assert_eq!(b(0.5), 0x70);
        assert_eq!(b(2f64.powi(-17)), 0x01); // the smallest subnormal
        assert_eq!(b(1.0 + 1.0 / 16.0), 0x79); // a tie rounds away from zero
        assert_eq!(b(0.0), 0x00);
        assert_eq!(fp8e4b15_to_f16(0x7F), 0x3F80); // 1.875
        assert_eq!(fp8e4b15_to_f16(0x78), 0x3C00); // 1.0
        assert_eq!(fp8e4b15_to_f16(0x81), 0x8080); // -2^-17
        assert_eq!(f64_to_f16_rz(1.0 + 2f64.powi(-11)), 0x3C00);
        assert_eq!(f64_to_f16_rz(65504.0), 0x7BFF);
        assert_eq!(f64_to_f16_rz(-(2f64.powi(-24))), 0x8001);
    }
}
