//! `tile_ir`: the intermediate representation of tiles kernels.
//!
//! A kernel is typed SSA over *tiles* (fixed-shape, power-of-two arrays held across the
//! threads of one program) and scalars, with structured control flow (`for`, `if` regions).
//! Data lives in arenas indexed by `u32` entities ([`Value`], [`Op`], [`Block`], [`Region`]);
//! analyses keep their facts in side tables. Layouts are attributes on tile types, interned
//! once per function.
//!
//! Kernels are built with [`Builder`] or parsed from their text form with [`parse`] (the
//! inverse of `Display`: print → parse → print gives the same text); [`verify`] checks them.
//!
//! Architecture invariant: this crate knows nothing of Python or LLVM; it depends on no
//! pyo3 and no inkwell, so Rust services can build, print and verify IR with it alone.
//!
//! ```
//! use tile_ir::{Builder, DType, Elem, BinaryOp, verify};
//! let mut b = Builder::new("add", 4);
//! let x = b.param("x_ptr", Elem::Ptr(DType::F32), 16);
//! let offs = b.arange(0, 1024).unwrap();
//! let xs = b.splat(x, *b.func.ty(offs).shape_ref()).unwrap();
//! let p = b.addptr(xs, offs).unwrap();
//! let v = b.load(p, None, None, false).unwrap();
//! let two = b.binary(BinaryOp::Add, v, v).unwrap();
//! b.store(p, two, None).unwrap();
//! let f = b.finish();
//! verify(&f).unwrap();
//! assert!(f.to_string().contains("arange"));
//! ```
#![deny(missing_docs)]

pub mod builder;
pub mod entities;
pub mod function;
pub mod layout;
pub mod ops;
pub mod parser;
pub mod printer;
pub mod types;
pub mod verifier;

pub use builder::{BuildError, Builder, CacheTarget, ForHandle, ReduceHandle, WhileHandle};
pub use entities::{Block, EntityRef, LayoutId, Op, PrimaryMap, Region, SecondaryMap, Value};
pub use function::{BlockData, Function, Loc, OpData, Param, RegionData, ValueData, ValueDef};
pub use layout::{BlockedLayout, DimThreadMap, Layout, MmaLayout};
pub use ops::{
    AsyncCopyAttrs, AtomicAttrs, AtomicOp, BinaryOp, CmpPred, Const, DotPrecision, HintKind,
    MemAttrs, MemScope, MemSem, OpKind, UnaryOp, CACHE_MODIFIERS, EVICTION_POLICIES,
};
pub use parser::{parse, ParseError};
pub use types::{
    f16_to_fp8e4b15, f64_to_f16_rz, f64_to_fp8, fp8e4b15_to_f16, DType, Elem, Shape, Type, MAX_RANK,
};
pub use verifier::{verify, VerifyError, VerifyErrors};

impl Type {
    /// The shape, by reference (handy in builder chains).
    pub fn shape_ref(&self) -> &Shape {
        &self.shape
    }
}
