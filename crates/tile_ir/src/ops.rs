//! Operation kinds and their attributes.

use std::fmt;

/// A binary elementwise operation; the meaning follows the operands' dtype.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum BinaryOp {
    /// `a + b` (integers wrap).
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// Floats: IEEE division. Integers: quotient truncated toward zero (C, not Python).
    Div,
    /// Floats: `fmod`. Integers: remainder with the dividend's sign (C, not Python).
    Rem,
    /// Bitwise and.
    And,
    /// Bitwise or.
    Or,
    /// Bitwise xor.
    Xor,
    /// Shift left.
    Shl,
    /// Shift right: arithmetic for signed, logical for unsigned.
    Shr,
    /// Maximum (floats: the non-NaN operand if one is NaN).
    Max,
    /// Minimum (floats: the non-NaN operand if one is NaN).
    Min,
}

impl BinaryOp {
    /// Every binary op.
    pub const ALL: [BinaryOp; 12] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Rem,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
        BinaryOp::Shl,
        BinaryOp::Shr,
        BinaryOp::Max,
        BinaryOp::Min,
    ];
    /// The op's name in the text form.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Rem => "rem",
            BinaryOp::And => "and",
            BinaryOp::Or => "or",
            BinaryOp::Xor => "xor",
            BinaryOp::Shl => "shl",
            BinaryOp::Shr => "shr",
            BinaryOp::Max => "max",
            BinaryOp::Min => "min",
        }
    }
    /// Parses [`BinaryOp::name`].
    pub fn from_name(s: &str) -> Option<BinaryOp> {
        BinaryOp::ALL.into_iter().find(|o| o.name() == s)
    }
    /// Whether the op is defined on integers only.
    pub fn int_only(self) -> bool {
        matches!(
            self,
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor | BinaryOp::Shl | BinaryOp::Shr
        )
    }
    /// Whether `op(a, b) == op(b, a)`.
    pub fn is_commutative(self) -> bool {
        matches!(
            self,
            BinaryOp::Add
                | BinaryOp::Mul
                | BinaryOp::And
                | BinaryOp::Or
                | BinaryOp::Xor
                | BinaryOp::Max
                | BinaryOp::Min
        )
    }
}

/// A comparison; signedness or float ordering follows the operands' dtype.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
#[allow(missing_docs)]
pub enum CmpPred {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpPred {
    /// Every predicate.
    pub const ALL: [CmpPred; 6] = [
        CmpPred::Eq,
        CmpPred::Ne,
        CmpPred::Lt,
        CmpPred::Le,
        CmpPred::Gt,
        CmpPred::Ge,
    ];
    /// The predicate's name in the text form.
    pub fn name(self) -> &'static str {
        match self {
            CmpPred::Eq => "eq",
            CmpPred::Ne => "ne",
            CmpPred::Lt => "lt",
            CmpPred::Le => "le",
            CmpPred::Gt => "gt",
            CmpPred::Ge => "ge",
        }
    }
    /// Parses [`CmpPred::name`].
    pub fn from_name(s: &str) -> Option<CmpPred> {
        CmpPred::ALL.into_iter().find(|o| o.name() == s)
    }
}

/// A unary elementwise operation.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
#[allow(missing_docs)]
pub enum UnaryOp {
    Neg,
    /// Bitwise not (logical not on `i1`).
    Not,
    Exp,
    Exp2,
    Log,
    Log2,
    Sqrt,
    Rsqrt,
    Abs,
    Sin,
    Cos,
    Floor,
    Ceil,
    Erf,
}

impl UnaryOp {
    /// Every unary op.
    pub const ALL: [UnaryOp; 14] = [
        UnaryOp::Neg,
        UnaryOp::Not,
        UnaryOp::Exp,
        UnaryOp::Exp2,
        UnaryOp::Log,
        UnaryOp::Log2,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Abs,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Erf,
    ];
    /// The op's name in the text form.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Not => "not",
            UnaryOp::Exp => "exp",
            UnaryOp::Exp2 => "exp2",
            UnaryOp::Log => "log",
            UnaryOp::Log2 => "log2",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Abs => "abs",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Erf => "erf",
        }
    }
    /// Parses [`UnaryOp::name`].
    pub fn from_name(s: &str) -> Option<UnaryOp> {
        UnaryOp::ALL.into_iter().find(|o| o.name() == s)
    }
    /// Whether the op needs a floating-point operand.
    pub fn float_only(self) -> bool {
        !matches!(self, UnaryOp::Neg | UnaryOp::Not | UnaryOp::Abs)
    }
}

/// A constant's value; its type is the result type of the op.
#[derive(Copy, Clone, PartialEq, Debug)]
pub enum Const {
    /// An integer (also `i1`: 0 or 1), stored sign-extended.
    Int(i64),
    /// A float, stored as f64.
    Float(f64),
}

impl Eq for Const {}
impl std::hash::Hash for Const {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        match self {
            Const::Int(i) => (0u8, *i).hash(h),
            Const::Float(f) => (1u8, f.to_bits()).hash(h),
        }
    }
}

impl fmt::Display for Const {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Const::Int(i) => write!(f, "{i}"),
            Const::Float(x) => {
                if x.is_finite() && x.fract() == 0.0 && x.abs() < 1e15 {
                    write!(f, "{x:.1}")
                } else {
                    write!(f, "{x:e}")
                }
            }
        }
    }
}

/// A read-modify-write on global memory.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
#[allow(missing_docs)]
pub enum AtomicOp {
    Add,
    Max,
    Min,
    And,
    Or,
    Xor,
    Xchg,
    /// Compare-and-swap: operands `ptr cmp val`.
    Cas,
}

impl AtomicOp {
    /// Every atomic op.
    pub const ALL: [AtomicOp; 8] = [
        AtomicOp::Add,
        AtomicOp::Max,
        AtomicOp::Min,
        AtomicOp::And,
        AtomicOp::Or,
        AtomicOp::Xor,
        AtomicOp::Xchg,
        AtomicOp::Cas,
    ];
    /// The op's name in the text form.
    pub fn name(self) -> &'static str {
        match self {
            AtomicOp::Add => "add",
            AtomicOp::Max => "max",
            AtomicOp::Min => "min",
            AtomicOp::And => "and",
            AtomicOp::Or => "or",
            AtomicOp::Xor => "xor",
            AtomicOp::Xchg => "xchg",
            AtomicOp::Cas => "cas",
        }
    }
    /// Parses [`AtomicOp::name`].
    pub fn from_name(s: &str) -> Option<AtomicOp> {
        AtomicOp::ALL.into_iter().find(|o| o.name() == s)
    }
}

/// Memory ordering of an atomic (PTX `.relaxed`, `.acquire`, `.release`, `.acq_rel`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
#[allow(missing_docs)]
pub enum MemSem {
    Relaxed,
    Acquire,
    Release,
    AcqRel,
}

/// Which threads an atomic is ordered with (PTX `.cta`, `.gpu`, `.sys`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
#[allow(missing_docs)]
pub enum MemScope {
    Cta,
    Gpu,
    Sys,
}

/// Attributes of an atomic.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct AtomicAttrs {
    /// What it does.
    pub op: AtomicOp,
    /// Whether a mask operand follows (never for `cas`).
    pub masked: bool,
    /// Memory ordering.
    pub sem: MemSem,
    /// Scope.
    pub scope: MemScope,
}

/// How a `dot` of `f32` operands rounds its inputs (Triton's `input_precision`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum DotPrecision {
    /// Inputs rounded to TF32 (tensor cores); the default for `f32`.
    Tf32,
    /// Three TF32 products that recover about fp32 accuracy.
    Tf32x3,
    /// Exact fp32 products (CUDA cores).
    Ieee,
}

impl DotPrecision {
    /// Every precision.
    pub const ALL: [DotPrecision; 3] =
        [DotPrecision::Tf32, DotPrecision::Tf32x3, DotPrecision::Ieee];
    /// The name Triton uses (and the text form).
    pub fn name(self) -> &'static str {
        match self {
            DotPrecision::Tf32 => "tf32",
            DotPrecision::Tf32x3 => "tf32x3",
            DotPrecision::Ieee => "ieee",
        }
    }
    /// Parses [`DotPrecision::name`].
    pub fn from_name(s: &str) -> Option<DotPrecision> {
        DotPrecision::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// Attributes of an `async_copy`.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct AsyncCopyAttrs {
    /// The shared ring buffer written.
    pub buf: u8,
    /// Slots in the ring.
    pub stages: u8,
    /// Whether a mask operand follows the slot (masked-off elements become zeros).
    pub masked: bool,
    /// Elements per copy instruction (4, 8 or 16 bytes).
    pub vector: u8,
    /// The mask is true on a prefix of each copy's elements, not on all or none: the copy
    /// reads that many and zero-fills the rest (from the load's [`MemAttrs::prefix_mask`]).
    pub prefix_mask: bool,
}

/// Attributes of a load or a store.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct MemAttrs {
    /// Whether a mask operand follows the pointer (and, for stores, the value).
    pub masked: bool,
    /// Loads: whether an `other` operand follows the mask.
    pub has_other: bool,
    /// Elements moved by one instruction, set by coalescing (0 before it ran).
    pub vector: u8,
    /// `volatile=True`: never cached, never merged.
    pub volatile: bool,
    /// Loads: per dimension, the length of the aligned runs of elements that read one address
    /// under one mask (a power of two; 0 or 1: none known), set with the layouts. A thread
    /// holding several elements of a run loads it once.
    pub runs: [u8; 16],
    /// Loads: any aligned 16-byte granule holding an element the mask selects may be read
    /// whole (the rows of a tensor descriptor: 16-byte aligned, as Triton's TMA contract
    /// says). Lets a vector run whose mask is true on a prefix only be read at once.
    pub whole_granules: bool,
    /// Loads: the mask is true on a prefix of each vector's elements, not uniform over it
    /// (set with the layouts, for `whole_granules` loads): the vector is read when its first
    /// element is selected and the rest are selected one by one.
    pub prefix_mask: bool,
    /// Triton's `cache_modifier`: an index into [`CACHE_MODIFIERS`] (0: none).
    pub cache: u8,
    /// Triton's `eviction_policy`: an index into [`EVICTION_POLICIES`] (0: none).
    pub evict: u8,
}

/// Cache operators a load (`ca`, `cg`, `cs`, `lu`, `cv`) or a store (`wb`, `cg`, `cs`, `wt`)
/// may name, as PTX spells them; index 0 is none.
pub const CACHE_MODIFIERS: [&str; 8] = ["", "ca", "cg", "cs", "lu", "cv", "wb", "wt"];

/// L1 eviction priorities an access may name; index 0 is none.
pub const EVICTION_POLICIES: [&str; 3] = ["", "evict_first", "evict_last"];

// `runs` spells its length out: naming `MAX_RANK` there made rustc 1.95 ICE on closures that
// capture a `MemAttrs` in another crate.
const _: () = assert!(crate::types::MAX_RANK == 16);

impl MemAttrs {
    /// Whether some dimension has runs of more than one element.
    pub fn has_runs(&self) -> bool {
        self.runs.iter().any(|&r| r > 1)
    }

    /// Whether `cache` and `evict` (indices into [`CACHE_MODIFIERS`] and
    /// [`EVICTION_POLICIES`]) are a cache operator and an eviction priority that a load (or a
    /// store) may take.
    pub fn cache_hints_fit(load: bool, cache: u8, evict: u8) -> bool {
        let cache_ok = if load {
            matches!(cache, 0..=5)
        } else {
            matches!(cache, 0 | 2 | 3 | 6 | 7)
        };
        cache_ok && usize::from(evict) < EVICTION_POLICIES.len()
    }
}

/// What an operation does.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum OpKind {
    /// A constant scalar, or a tile filled with it.
    Constant(Const),
    /// The program's index along a grid axis (`i32`).
    ProgramId(u8),
    /// The grid's size along an axis (`i32`).
    NumPrograms(u8),
    /// `[start, end)` as an `i32` tile.
    Arange {
        /// First value.
        start: i32,
        /// One past the last value.
        end: i32,
    },
    /// A scalar copied into every element of a tile.
    Splat,
    /// A size-1 dimension inserted at the axis.
    ExpandDims(u8),
    /// `out[.., i, ..] = src[.., index[.., i, ..], ..]` along the axis (Triton's `gather`):
    /// operands `src` and an integer `index` of the result's shape, every dimension but the
    /// axis as in `src`. Indices outside `src` give unspecified values.
    Gather(u8),
    /// Size-1 dimensions repeated to the result's shape.
    Broadcast,
    /// An elementwise binary op on two operands of one type.
    Binary(BinaryOp),
    /// An elementwise comparison giving `i1`; the `u8` is the run of consecutive elements
    /// along the layout's contiguous dimension known to compare alike (from axis analysis;
    /// 0 or 1: none), so codegen compares once per run.
    Compare(CmpPred, u8),
    /// An elementwise unary op.
    Unary(UnaryOp),
    /// `a * b + c` rounded once.
    Fma,
    /// `cond ? a : b` elementwise.
    Select,
    /// A value conversion to the result's dtype (round to nearest for floats, toward zero to ints).
    Cast,
    /// A reinterpretation of the bits as the result's dtype (same width).
    Bitcast,
    /// A pointer advanced by an integer number of elements.
    AddPtr,
    /// A load: `ptr [mask [other]]`.
    Load(MemAttrs),
    /// A store: `ptr value [mask]`.
    Store(MemAttrs),
    /// A counted loop: operands `lb ub step inits...`; one region with arguments
    /// `iv iters...`, ended by `yield`; results are the final iters.
    For {
        /// Pipeline depth asked for this loop (`tl.range(num_stages=)`); 0: the kernel's.
        stages: u8,
    },
    /// A branch on a scalar `i1`: two regions ended by `yield`; results from the taken one.
    If,
    /// Ends a region, passing values to the parent op.
    Yield,
    /// The same tile in another layout.
    ConvertLayout,
    /// Prints every element of its operands with the program id and element index;
    /// `prefix` indexes the function's string table.
    Print {
        /// String-table index of the text printed before each value.
        prefix: u32,
        /// Print integers in hexadecimal.
        hex: bool,
    },
    /// Records a failure (this op's source line) where its `i1` operand is false.
    Assert {
        /// String-table index of the message.
        msg: u32,
    },
    /// A reduction along `axis` of N same-shaped tiles; the region takes `2N` scalars
    /// (accumulators, then new elements) and yields N combined scalars.
    Reduce {
        /// The reduced dimension.
        axis: u8,
    },
    /// An inclusive scan along `axis` of N same-shaped tiles with the combine region (as for
    /// `Reduce`); `reverse` scans from the end (flip, scan, flip).
    Scan {
        /// The scanned dimension.
        axis: u8,
        /// Scan from the last element backwards.
        reverse: bool,
    },
    /// The operand itself, with a promise about its values for axis analysis (Triton's
    /// `multiple_of`, `max_contiguous`, `max_constancy`): `values[d]` for dimension `d`
    /// (first `rank` entries; 0 promises nothing).
    Hint {
        /// What is promised.
        kind: HintKind,
        /// The promise per dimension.
        values: [u32; crate::types::MAX_RANK],
    },
    /// Inline PTX applied elementwise (Triton's `inline_asm_elementwise`): operands are tiles
    /// of one shape (or all scalars) and so are the results; one statement handles `pack`
    /// consecutive elements of a thread, packed into registers as the constraints say
    /// (strings `asm` and `constraints` index the function's string table).
    InlineAsm {
        /// The PTX template.
        asm: u32,
        /// LLVM constraint string: outputs (`=r`, ...), then inputs.
        constraints: u32,
        /// Elements per statement.
        pack: u8,
        /// No side effects (may be removed when unused).
        pure: bool,
    },
    /// The operand's dimensions permuted: result dimension `i` is operand dimension `perm[i]`.
    Permute {
        /// The permutation (first `rank` entries used).
        perm: [u8; crate::types::MAX_RANK],
    },
    /// The same elements, row-major, in the result's shape.
    Reshape,
    /// Two same-typed tiles stacked along a new last dimension of size 2.
    Join,
    /// A tile whose last dimension has size 2, split into its two halves (two results).
    Split,
    /// A loop `while cond`: region 0 (the condition) takes the loop state and yields
    /// `cond, state...`; region 1 (the body) takes the state and yields the next state.
    While,
    /// An atomic read-modify-write; its result is the old value.
    Atomic(AtomicAttrs),
    /// A matrix product `a @ b + acc`: operands `a [M, K]`, `b [K, N]`, `acc [M, N]`; the
    /// result has `acc`'s type.
    Dot {
        /// How `f32` inputs are rounded (ignored for other types).
        precision: DotPrecision,
    },
    /// Starts copying a tile from global memory into slot `slot` of shared ring buffer `buf`
    /// (`cp.async`): operands `ptr slot [mask]`. The data may be read (by `local_view` or `local_load`) once
    /// an `async_wait` has retired its group and a barrier has been passed.
    AsyncCopy(AsyncCopyAttrs),
    /// Closes the group of `async_copy`s issued since the last commit.
    AsyncCommit,
    /// Waits until at most `pending` committed groups are still in flight.
    AsyncWait {
        /// Groups that may remain in flight.
        pending: u8,
    },
    /// Slot `slot` (operand) of shared ring buffer `buf`, seen as a `dot` operand tile; its
    /// only users are `dot`s, which read the fragments they need from shared memory.
    LocalView {
        /// The slot read transposed (a `[K, N]` view of a copied `[N, K]` tile).
        trans: bool,
        /// The ring buffer.
        buf: u8,
        /// Slots in the ring.
        stages: u8,
    },
    /// Slot `slot` (operand) of shared ring buffer `buf`, read into registers in the result's
    /// layout: a pipelined load that something other than a `dot` reads first (a dequantised
    /// operand's integers, a bias).
    LocalLoad {
        /// The ring buffer.
        buf: u8,
        /// Slots in the ring.
        stages: u8,
    },
    /// Every thread of the program waits here (`bar.sync`).
    Barrier,
    /// Ends the kernel.
    Return,
}

/// The promise of a [`OpKind::Hint`].
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum HintKind {
    /// Values (the first of each contiguous run) are multiples of the number.
    MultipleOf,
    /// Values come in runs of that many consecutive integers.
    MaxContiguous,
    /// Values come in runs of that many equal values.
    MaxConstancy,
}

impl HintKind {
    /// The attribute name in the text form (and Triton's function name).
    pub fn name(self) -> &'static str {
        match self {
            HintKind::MultipleOf => "multiple_of",
            HintKind::MaxContiguous => "max_contiguous",
            HintKind::MaxConstancy => "max_constancy",
        }
    }

    /// Every hint kind.
    pub const ALL: [HintKind; 3] = [
        HintKind::MultipleOf,
        HintKind::MaxContiguous,
        HintKind::MaxConstancy,
    ];
}

impl OpKind {
    /// The op's name in the text form.
    pub fn name(&self) -> &'static str {
        match self {
            OpKind::Constant(_) => "constant",
            OpKind::ProgramId(_) => "program_id",
            OpKind::NumPrograms(_) => "num_programs",
            OpKind::Arange { .. } => "arange",
            OpKind::Splat => "splat",
            OpKind::ExpandDims(_) => "expand_dims",
            OpKind::Gather(_) => "gather",
            OpKind::Broadcast => "broadcast",
            OpKind::Binary(b) => b.name(),
            OpKind::Compare(..) => "cmp",
            OpKind::Unary(u) => u.name(),
            OpKind::Fma => "fma",
            OpKind::Select => "select",
            OpKind::Cast => "cast",
            OpKind::Bitcast => "bitcast",
            OpKind::Hint { .. } => "hint",
            OpKind::InlineAsm { .. } => "inline_asm",
            OpKind::AddPtr => "addptr",
            OpKind::Load(_) => "load",
            OpKind::Store(_) => "store",
            OpKind::For { .. } => "for",
            OpKind::If => "if",
            OpKind::Yield => "yield",
            OpKind::ConvertLayout => "convert_layout",
            OpKind::Reduce { .. } => "reduce",
            OpKind::While => "while",
            OpKind::Scan { .. } => "scan",
            OpKind::Permute { .. } => "permute",
            OpKind::Reshape => "reshape",
            OpKind::Join => "join",
            OpKind::Split => "split",
            OpKind::Atomic(_) => "atomic",
            OpKind::Dot { .. } => "dot",
            OpKind::AsyncCopy(_) => "async_copy",
            OpKind::AsyncCommit => "async_commit",
            OpKind::AsyncWait { .. } => "async_wait",
            OpKind::LocalView { .. } => "local_view",
            OpKind::LocalLoad { .. } => "local_load",
            OpKind::Barrier => "barrier",
            OpKind::Print { .. } => "print",
            OpKind::Assert { .. } => "assert",
            OpKind::Return => "return",
        }
    }

    /// Whether the op has an effect beyond its results (and so is never removed or merged).
    pub fn has_side_effects(&self) -> bool {
        matches!(
            self,
            OpKind::Store(_)
                | OpKind::Yield
                | OpKind::Return
                | OpKind::For { .. }
                | OpKind::If
                | OpKind::While
                | OpKind::Atomic(_)
                | OpKind::AsyncCopy(_)
                | OpKind::AsyncCommit
                | OpKind::AsyncWait { .. }
                | OpKind::Barrier
                | OpKind::Print { .. }
                | OpKind::Assert { .. }
        ) || matches!(self, OpKind::Load(m) if m.volatile)
            || matches!(self, OpKind::InlineAsm { pure: false, .. })
    }

    /// Whether the op is pure and elementwise over same-shaped operands and result.
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            OpKind::Binary(_)
                | OpKind::Compare(..)
                | OpKind::Unary(_)
                | OpKind::Fma
                | OpKind::Select
                | OpKind::Cast
                | OpKind::Bitcast
                | OpKind::AddPtr
                | OpKind::Hint { .. }
        )
    }
}
