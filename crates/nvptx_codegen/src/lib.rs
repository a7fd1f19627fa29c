//! `nvptx_codegen`: lowers `tile_ir` kernels (layouts assigned) to LLVM IR for NVPTX and
//! emits PTX.
//!
//! Each tile value becomes a list of LLVM values, one per element the current thread holds,
//! in the register order its layout defines (`Layout::register_offsets`); scalars are one
//! value that every thread computes alike. Loads and stores move `vector` elements per
//! instruction (predicated inline PTX when masked), layout conversions go through shared
//! memory, and structured control flow becomes basic blocks with phis. `dot` runs on
//! `mma.sync` with operands read by `ldmatrix` from swizzled shared memory (staged there by
//! the `dot` itself, or by `cp.async` ring buffers the pipelining pass creates).
//!
//! Architecture invariant: this is the only crate that uses inkwell (LLVM). It reads
//! `tile_ir` and never changes it; every failure is a [`CodegenError`], never a panic.
//!
//! # Example: build a kernel, compile it, read the PTX and its metadata
//!
//! ```
//! use nvptx_codegen::{compile, Target};
//! use tile_ir::{BinaryOp, Builder, CmpPred, Const, DType, Elem, Type};
//!
//! // out[i] = x[i] * 2 for i < n, 1024 elements per program.
//! let mut b = Builder::new("double", 4);
//! let x = b.param("x", Elem::Ptr(DType::F32), 16);
//! let out = b.param("out", Elem::Ptr(DType::F32), 16);
//! let n = b.param("n", Elem::Num(DType::I32), 16);
//! let pid = b.program_id(0)?;
//! let block = b.constant(Const::Int(1024), Type::num(DType::I32))?;
//! let start = b.binary(BinaryOp::Mul, pid, block)?;
//! let r = b.arange(0, 1024)?;
//! let shape = b.func.ty(r).shape;
//! let start = b.splat(start, shape)?;
//! let offs = b.binary(BinaryOp::Add, start, r)?;
//! let ns = b.splat(n, shape)?;
//! let mask = b.compare(CmpPred::Lt, offs, ns)?;
//! let xs = b.splat(x, shape)?;
//! let xp = b.addptr(xs, offs)?;
//! let v = b.load(xp, Some(mask), None, false)?;
//! let two = b.constant(Const::Float(2.0), Type::tile(Elem::Num(DType::F32), shape))?;
//! let y = b.binary(BinaryOp::Mul, v, two)?;
//! let os = b.splat(out, shape)?;
//! let op = b.addptr(os, offs)?;
//! b.store(op, y, Some(mask))?;
//! let mut kernel = b.finish();
//! // Options live on the kernel: warps per program (given to `Builder::new`) and the
//! // pipeline depth of loops that feed `dot` (Triton's `num_stages`; 1 turns it off).
//! kernel.num_stages = 3;
//!
//! // Or parse the same kernel from text: `let mut kernel = tile_ir::parse(&text)?;`
//! let target = Target::parse("sm_90a")?;
//! let ptx = compile(&mut kernel, &target, &Default::default(), |_pass, _ir| {})?;
//! assert_eq!(ptx.kernel_name, "double");
//! assert!(ptx.ptx.contains("ld.global.v4.b32"));
//! assert_eq!(ptx.params[0], ("x".to_string(), "*fp32".to_string()));
//! assert_eq!((ptx.num_threads, ptx.shared_bytes), (128, 0));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! `compile` is safe to call from many threads at once: each call has its own LLVM context.
#![deny(missing_docs)]

mod debug;
mod demand;
mod dot;
mod inline_asm;
mod lower;
mod math;
mod math_f32;
mod math_f64;
mod memory;
mod operand;
mod reduce;
mod schedule;
mod shuffle;
pub mod tools;

use inkwell::context::Context;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{
    CodeModel, FileType, InitializationConfig, RelocMode, Target as LlvmTarget, TargetMachine,
    TargetTriple,
};
use inkwell::OptimizationLevel;
use std::sync::{Once, OnceLock};
use tile_ir::Function;

pub use debug::ASSERT_GLOBAL;

/// A GPU architecture to generate code for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// Compute capability times ten (80, 86, 89, 90, ...).
    pub capability: u32,
    /// Whether the architecture-specific variant (`sm_90a`) is targeted.
    pub arch_specific: bool,
}

impl Target {
    /// Parses `sm_80`, `sm_90`, `sm_90a`, ...
    pub fn parse(s: &str) -> Result<Target, CodegenError> {
        let bad = || CodegenError::BadTarget(s.to_string());
        let rest = s.strip_prefix("sm_").ok_or_else(bad)?;
        let (num, arch_specific) = match rest.strip_suffix('a') {
            Some(n) => (n, true),
            None => (rest, false),
        };
        let capability: u32 = num.parse().map_err(|_| bad())?;
        // The architectures LLVM's NVPTX back end knows whose PTX ISA 8.0 covers them (sm_90a
        // only as the `a` variant is meant for it; newer GPUs run the sm_90 PTX).
        if !matches!(capability, 70 | 72 | 75 | 80 | 86 | 87 | 89 | 90)
            || (arch_specific && capability != 90)
        {
            return Err(bad());
        }
        Ok(Target {
            capability,
            arch_specific,
        })
    }

    /// Whether fp64 `dot`s run on tensor cores (`mma.sync` f64): sm_80 and later.
    pub fn has_f64_mma(&self) -> bool {
        self.capability >= 80
    }

    /// Whether `dot`s run on warpgroups (`wgmma`): `sm_90a`, unless the environment sets
    /// `TILES_DISABLE_WGMMA` (to compare with the `mma.sync` path).
    pub fn has_warpgroup_mma(&self) -> bool {
        self.capability == 90
            && self.arch_specific
            && std::env::var_os("TILES_DISABLE_WGMMA").is_none_or(|v| v.is_empty() || v == "0")
    }

    /// The LLVM CPU name (`sm_90a`).
    pub fn cpu(&self) -> String {
        format!(
            "sm_{}{}",
            self.capability,
            if self.arch_specific { "a" } else { "" }
        )
    }

    /// The PTX ISA version to emit: 8.0 is the oldest with `sm_90a`.
    pub fn ptx_features(&self) -> &'static str {
        "+ptx80"
    }

    /// The PTX ISA version `func` needs: 8.0, or 8.1 where its inline assembly holds vector
    /// atomics (`atom.global.min.noftz.v2.f16`, a descriptor's fp16/bf16 min/max), so that
    /// kernels without them still load on drivers older than CUDA 12.1's.
    pub fn ptx_features_for(&self, func: &Function) -> &'static str {
        let vector_atomic = |s: &String| {
            s.contains("atom.global.")
                && [".noftz.v2.", ".noftz.v4.", ".noftz.v8."]
                    .iter()
                    .any(|v| s.contains(v))
        };
        if func.strings.iter().any(vector_atomic) {
            "+ptx81"
        } else {
            self.ptx_features()
        }
    }
}

/// Choices that change the generated code.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct CodegenOptions {
    /// Let float multiplies and adds fuse into fma (Triton's `enable_fp_fusion`). Off by
    /// default: Triton 3.10's announced default, and faster in our measurements.
    pub fp_fusion: bool,
    /// Cap on registers per thread (`.maxnreg`, Triton's `maxnreg`).
    pub maxnreg: Option<u32>,
    /// Keep subnormal results of the hardware approximations (`ex2`, `rsqrt`) instead of
    /// flushing them to zero: Triton's `enable_reflect_ftz=False`. Off by default, as there.
    pub keep_subnormals: bool,
    /// Also return the optimised LLVM IR as text ([`PtxOutput::llvm_ir`]). The code is the
    /// same either way; printing costs time on large kernels (9 ms of a 128×128 matmul's
    /// 125 ms: its accumulator structs print as hundreds of kilobytes).
    pub keep_llvm_ir: bool,
}

/// What code generation produced.
#[derive(Clone, Debug)]
pub struct PtxOutput {
    /// The kernel's symbol in the PTX.
    pub kernel_name: String,
    /// The LLVM IR after optimisation, when [`CodegenOptions::keep_llvm_ir`] asked for it.
    pub llvm_ir: Option<String>,
    /// The PTX text (no trailing NUL).
    pub ptx: String,
    /// Static shared memory the kernel uses, in bytes.
    pub shared_bytes: u32,
    /// Threads per program.
    pub num_threads: u32,
    /// Seconds spent in each stage, in order (each pass, `lower`, `llvm_opt`, `ptx`).
    pub timings: Vec<(String, f64)>,
    /// The kernel's parameters in order: (name, type as Triton spells it, e.g. `*fp32`, `i32`).
    pub params: Vec<(String, String)>,
}

/// Why code generation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CodegenError {
    /// The target string is not one of the `sm_XY` LLVM and PTX ISA 8.0 know, or `sm_90a`.
    #[error("unknown target `{0}`: expected one of sm_70, sm_72, sm_75, sm_80, sm_86, sm_87, sm_89, sm_90, sm_90a")]
    BadTarget(String),
    /// The kernel uses something this backend cannot lower yet.
    #[error("line {line}: {what} is not supported by the NVPTX backend yet")]
    Unsupported {
        /// What is missing.
        what: String,
        /// Source line of the op.
        line: u32,
    },
    /// The kernel asks for something that cannot work (an inline-asm template and its
    /// constraints that disagree, ...): the user's error.
    #[error("line {line}: {what}")]
    Invalid {
        /// What is wrong.
        what: String,
        /// Source line of the op.
        line: u32,
    },
    /// The IR broke an invariant codegen relies on (layouts missing, ...): a compiler bug.
    #[error("internal error in codegen: {0}")]
    Internal(String),
    /// LLVM refused the module or failed to emit PTX.
    #[error("LLVM: {0}")]
    Llvm(String),
}

/// Why [`compile`] failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CompileError {
    /// The pass pipeline failed.
    #[error(transparent)]
    Passes(#[from] passes::PassError),
    /// Code generation failed.
    #[error(transparent)]
    Codegen(#[from] CodegenError),
}

impl From<inkwell::builder::BuilderError> for CodegenError {
    fn from(e: inkwell::builder::BuilderError) -> Self {
        CodegenError::Llvm(e.to_string())
    }
}

/// The context's diagnostic handler: keeps the text of each error (`ctx`: a `Vec<String>`);
/// warnings and remarks are dropped.
extern "C" fn keep_llvm_error(
    info: inkwell::llvm_sys::prelude::LLVMDiagnosticInfoRef,
    ctx: *mut std::ffi::c_void,
) {
    use inkwell::llvm_sys::core::{
        LLVMDisposeMessage, LLVMGetDiagInfoDescription, LLVMGetDiagInfoSeverity,
    };
    use inkwell::llvm_sys::LLVMDiagnosticSeverity;
    // SAFETY: LLVM passes a live diagnostic; `ctx` is the Vec that generate_ptx_with installed
    // with this handler and keeps alive while the context is in use.
    unsafe {
        if LLVMGetDiagInfoSeverity(info) != LLVMDiagnosticSeverity::LLVMDSError {
            return;
        }
        let text = LLVMGetDiagInfoDescription(info);
        if text.is_null() {
            return;
        }
        let msg = std::ffi::CStr::from_ptr(text)
            .to_string_lossy()
            .into_owned();
        LLVMDisposeMessage(text);
        (*ctx.cast::<Vec<String>>()).push(msg);
    }
}

/// Whether the optimised IR's pure instructions move next to their users (`schedule.rs`);
/// `TILES_LLVM_CHAINS=0` keeps LLVM's order, to compare.
fn chain_pure_instructions() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TILES_LLVM_CHAINS").map_or(true, |v| v != "0"))
}

/// The LLVM IR pass pipeline (`TILES_LLVM_PIPELINE` overrides it, for experiments; e.g.
/// `default<O2>` for LLVM's own).
fn llvm_pipeline() -> String {
    std::env::var("TILES_LLVM_PIPELINE").unwrap_or_else(|_| default_pipeline().to_string())
}

/// LLVM's `default<O2>` less the passes that (nearly) never changed our output. O2 because ptxas
/// schedules its output as well as O3's (checked in SASS: the 128-bit loads of a loop stay in
/// flight together), where lighter pipelines (O1, or scalar cleanups alone) led ptxas to
/// serialise loads and cost layernorm 12 %. Spelled out (`o2_lean.pipeline`) so that passes can
/// be left out:
/// - `slp-vectorizer` (tiles emits its vectors itself) and the last four `instcombine` runs:
///   the PTX of the benchmark kernels (vector add, softmax, layernorm, matmul plain and as
///   launched) stayed byte-identical to `default<O2>`'s, attention's kept its instructions;
///   9 of the 400 distinct kernels the tests compile differ by an instruction or two (operand
///   order, a `prmt` for shifts). Matmul 68 → 57 ms to PTX on the 2-core machine.
/// - `dse` (tiles stores nothing dead): no kernel of the tests or benchmarks changed (401
///   compared); matmul 57 → 52 ms, unaligned attention 122 → 107 ms.
/// - the `instcombine` just before `aggressive-instcombine`: the PTX of the 669 distinct test
///   kernels kept its instructions (59 differ in register numbers and order only); matmul as
///   launched 28.5 → 27.8 ms to PTX (`tiles-opt --repeat`), attention 14.5 → 14.0 ms.
/// - GVN's memory-dependence analysis (`gvn<no-memdep>`; GVN still numbers values): it found
///   no load to remove in any test kernel (none's PTX changed), at up to 15 % of the compile
///   (unaligned attention 47 → 40.5 ms to PTX, matmul with unknown strides 57.5 → 56 ms).
/// - `sccp` and `bdce` after `gvn`: no test kernel's PTX changed (669 compared); matmul as
///   launched 25.5 → 24.5 ms to PTX (`tiles-opt --repeat=20`).
/// - passes for what a tiles module never holds: calls to inline or analyse (the CGSCC wrapper
///   runs its function pipeline directly), globals to optimise, coroutines, attributes to infer,
///   profiles, libcalls, tail calls, expect/assume intrinsics. The PTX of all 457 distinct
///   kernels the tests compile stayed byte-identical; LLVM time 3–6 % lower (matmul 100 → 97 ms,
///   vector add 4.3 → 4.1 ms).
/// - 26 more, each of which another run covers or that has nothing to work on: every `sroa` and
///   `mem2reg` (tiles' only alloca is `printf`'s buffer, which must stay in memory), both
///   `globalopt`s and `jump-threading`s, the first `correlated-propagation`, four of the eight
///   `simplifycfg`s, `speculative-execution`, `aggressive-instcombine`, `constraint-elimination`,
///   the first `vector-combine`, `mldst-motion`, `memcpyopt`, the first late `licm`,
///   `loop-distribute`, `loop-vectorize`, `loop-load-elim`, the first `infer-alignment` and
///   `instsimplify`. Chosen one at a time, keeping each only where the PTX of the 982 corpus
///   kernels (the tests' and benchmarks' kernels, sm_75 to sm_90a) stayed byte-identical; it
///   did. Matmul as launched 25.3 → 24.5 ms to PTX (`tiles-opt --repeat=20`), attention
///   15.8 → 15.4, layernorm 7.9 → 7.5. Left in because leaving each out changed kernels: the
///   last `vector-combine` and `infer-alignment`, the second `correlated-propagation`, `adce`,
///   the late `loop-rotate`, `licm` and `div-rem-pairs`, the `simplifycfg` after the first loop
///   passes and the one after the vectoriser's place.
fn default_pipeline() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        include_str!("o2_lean.pipeline")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(str::trim)
            .collect()
    })
}

/// The NVPTX code generator's optimisation level (`TILES_LLVM_CODEGEN_OPT` = 0..3).
fn codegen_level() -> OptimizationLevel {
    match std::env::var("TILES_LLVM_CODEGEN_OPT")
        .ok()
        .and_then(|v| v.parse::<u8>().ok())
    {
        Some(0) => OptimizationLevel::None,
        Some(1) => OptimizationLevel::Less,
        Some(3) => OptimizationLevel::Aggressive,
        _ => OptimizationLevel::Default,
    }
}

fn init_llvm() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        LlvmTarget::initialize_nvptx(&InitializationConfig::default());
        set_llvm_options();
    });
}

extern "C" {
    fn LLVMParseCommandLineOptions(
        argc: std::ffi::c_int,
        argv: *const *const std::ffi::c_char,
        overview: *const std::ffi::c_char,
    );
}

/// LLVM options every compile runs with: passes that cost time and (nearly) never change our
/// PTX, judged on the PTX of the 669 distinct kernels the tests compile.
/// - `slsr`: NVPTX's code generator runs straight-line strength reduction, which rewrites
///   `(b + c) * s` in terms of an earlier `b * s`. It changed 50 kernels, mostly
///   straight-line code at unknown strides (a `mad` per scalar address instead of an `add`;
///   no slower on an H100, `bench_strided.py`), yet it was half of LLVM's time for a matmul
///   with unknown strides, whose PTX it left unchanged: its basis search re-proves `noundef`
///   for each candidate.
/// - `nary-reassociate` (after `slsr` is gone) and `constraint-elimination`: no kernel changed.
/// - `-disable-lsr` (loop strength reduction): 84 kernels changed, 1 % fewer PTX lines in them;
///   on an H100 the fp16 4096³ matmul ran at 706/709 TFLOP/s without it against 665/667 with
///   it (two rounds, one process each), attention, norms, vector add and the unknown-stride
///   kernels within noise; matmul as launched 29 → 26.5 ms to PTX.
/// - `-licm-mssa-max-acc-promotion=0`: LICM no longer tries to promote memory to registers
///   (tiles keeps its values in registers; its loads and stores are the kernel's own). The
///   attempt walked MemorySSA for every access of a loop, three times: 8 ms of an int8
///   matmul with unknown strides. The PTX of all 167 distinct test kernels stayed
///   byte-identical; their compiles took 2.03 → 1.96 s in all (2-core machine), the int8
///   matmul 39.6 → 22.8 ms, Triton's persistent matmul 37.7 → 24.1, its grouped matmul
///   57.3 → 43.4, a GELU (tanh) 17.4 → 11.4; the benchmark kernels within noise.
const DEFAULT_LLVM_ARGS: &[&str] = &[
    "-opt-disable=slsr,nary-reassociate,constraint-elimination",
    "-disable-lsr",
    "-licm-mssa-max-acc-promotion=0",
];

/// Hands LLVM its process-wide options once: [`DEFAULT_LLVM_ARGS`], then
/// `TILES_LLVM_ARGS="-time-passes ..."`. For compiler developers' experiments,
/// `TILES_LLVM_DEFAULT_ARGS` replaces the defaults (empty: LLVM's own behaviour).
fn set_llvm_options() {
    let defaults =
        std::env::var("TILES_LLVM_DEFAULT_ARGS").unwrap_or_else(|_| DEFAULT_LLVM_ARGS.join(" "));
    let env = std::env::var("TILES_LLVM_ARGS").unwrap_or_default();
    let mut owned = vec![std::ffi::CString::new("tiles").expect("no NUL")];
    for a in defaults.split_whitespace().chain(env.split_whitespace()) {
        if let Ok(c) = std::ffi::CString::new(a) {
            owned.push(c);
        }
    }
    let ptrs: Vec<*const std::ffi::c_char> = owned.iter().map(|c| c.as_ptr()).collect();
    let overview = std::ffi::CString::new("tiles").expect("no NUL");
    // SAFETY: argv holds `ptrs.len()` valid C strings that outlive the call; LLVM copies what
    // it keeps. Called once, before any other LLVM use in this process.
    unsafe { LLVMParseCommandLineOptions(ptrs.len() as _, ptrs.as_ptr(), overview.as_ptr()) };
}

/// Runs the pass pipeline on `func`, then generates PTX. `dump(stage, text)` sees the IR
/// after each pass. Safe to call from many threads at once (one LLVM context per call).
pub fn compile(
    func: &mut Function,
    target: &Target,
    options: &passes::PipelineOptions,
    mut dump: impl FnMut(&str, &Function),
) -> Result<PtxOutput, CompileError> {
    compile_with(func, target, options, &CodegenOptions::default(), &mut dump)
}

/// [`compile`] with explicit code generation options.
pub fn compile_with(
    func: &mut Function,
    target: &Target,
    options: &passes::PipelineOptions,
    codegen: &CodegenOptions,
    mut dump: impl FnMut(&str, &Function),
) -> Result<PtxOutput, CompileError> {
    let mut timings = Vec::new();
    let mut last = std::time::Instant::now();
    let mut options = options.clone();
    options.warpgroup_mma |= target.has_warpgroup_mma();
    options.f64_mma |= target.has_f64_mma();
    passes::run_pipeline(func, &options, |pass, f| {
        timings.push((pass.to_string(), last.elapsed().as_secs_f64()));
        dump(pass, f);
        last = std::time::Instant::now();
    })?;
    let mut out = generate_ptx_with(func, target, codegen)?;
    timings.append(&mut out.timings);
    out.timings = timings;
    Ok(out)
}

thread_local! {
    /// This thread's target machines, by CPU and optimisation level. A target machine holds
    /// no module state, so one serves every compile for its target; building one (subtarget,
    /// lowering tables) costs ~0.1 ms, 5 % of a small kernel's compile.
    static TARGET_MACHINES: std::cell::RefCell<Vec<(String, &'static str, OptimizationLevel, TargetMachine)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Drops this thread's target machines (before LLVM's shutdown, which must outlive them).
pub(crate) fn drop_target_machines() {
    TARGET_MACHINES.with(|cell| cell.borrow_mut().clear());
}

/// Runs `f` with this thread's target machine for `target` (made on first use).
fn with_target_machine<R>(
    target: &Target,
    features: &'static str,
    f: impl FnOnce(&TargetMachine, &TargetTriple) -> Result<R, CodegenError>,
) -> Result<R, CodegenError> {
    let triple = TargetTriple::create("nvptx64-nvidia-cuda");
    let cpu = target.cpu();
    let level = codegen_level();
    TARGET_MACHINES.with(|cell| {
        let mut machines = cell.borrow_mut();
        let i = match machines
            .iter()
            .position(|(c, p, l, _)| *c == cpu && *p == features && *l == level)
        {
            Some(i) => i,
            None => {
                let llvm_target = LlvmTarget::from_triple(&triple)
                    .map_err(|e| CodegenError::Llvm(e.to_string()))?;
                let tm = llvm_target
                    .create_target_machine(
                        &triple,
                        &cpu,
                        features,
                        level,
                        RelocMode::Default,
                        CodeModel::Default,
                    )
                    .ok_or_else(|| CodegenError::Llvm(format!("no target machine for {cpu}")))?;
                machines.push((cpu, features, level, tm));
                machines.len() - 1
            }
        };
        f(&machines[i].3, &triple)
    })
}

/// Generates PTX for a kernel whose layouts are assigned.
pub fn generate_ptx(func: &Function, target: &Target) -> Result<PtxOutput, CodegenError> {
    generate_ptx_with(func, target, &CodegenOptions::default())
}

/// [`generate_ptx`] with explicit options.
pub fn generate_ptx_with(
    func: &Function,
    target: &Target,
    options: &CodegenOptions,
) -> Result<PtxOutput, CodegenError> {
    init_llvm();
    let t0 = std::time::Instant::now();
    // LLVM reports some errors (an inline-asm operand modifier it does not know, say) through
    // the context's diagnostic handler, whose default exits the process; these are kept and
    // returned instead. Declared before the context, so that it outlives it.
    let mut llvm_errors: Box<Vec<String>> = Box::default();
    let cx = Context::create();
    if !options.keep_llvm_ir && std::env::var_os("TILES_LLVM_ARGS").is_none() {
        // Values keep their names only for someone reading the IR (`keep_llvm_ir`, or LLVM
        // printing it through `TILES_LLVM_ARGS`): naming them cost 3-4 % of a matmul's
        // compile (23.1 against 24.0 ms to PTX, same PTX).
        // SAFETY: `cx` is a live context that no other thread uses.
        unsafe { inkwell::llvm_sys::core::LLVMContextSetDiscardValueNames(cx.raw(), 1) };
    }
    // SAFETY: `llvm_errors` outlives every use of `cx`, which ends in this function, and only
    // this thread uses either.
    unsafe {
        inkwell::llvm_sys::core::LLVMContextSetDiagnosticHandler(
            cx.raw(),
            Some(keep_llvm_error),
            (&mut *llvm_errors as *mut Vec<String>).cast(),
        )
    };
    let lowered = lower::lower_kernel(&cx, func, target, options)?;
    let t_lower = t0.elapsed().as_secs_f64();
    let module = lowered.module;
    let features = target.ptx_features_for(func);
    let (t_opt, llvm_ir, buf) = with_target_machine(target, features, |tm, triple| {
        module.set_triple(triple);
        module.set_data_layout(&tm.get_target_data().get_data_layout());
        module
            .verify()
            .map_err(|e| CodegenError::Internal(format!("invalid LLVM module: {e}")))?;
        module
            .run_passes(&llvm_pipeline(), tm, PassBuilderOptions::create())
            .map_err(|e| CodegenError::Llvm(e.to_string()))?;
        if chain_pure_instructions() {
            // SAFETY: the module was verified above and this thread alone holds it.
            unsafe { schedule::chain_pure_instructions(module.as_mut_ptr()) };
        }
        let t_opt = t0.elapsed().as_secs_f64() - t_lower;
        let llvm_ir = options
            .keep_llvm_ir
            .then(|| module.print_to_string().to_string());
        let buf = tm
            .write_to_memory_buffer(&module, FileType::Assembly)
            .map_err(|e| CodegenError::Llvm(e.to_string()))?;
        Ok((t_opt, llvm_ir, buf))
    })?;
    if let Some(e) = llvm_errors.first() {
        return Err(CodegenError::Llvm(e.clone()));
    }
    let ptx = String::from_utf8_lossy(buf.as_slice())
        .trim_end_matches('\0')
        .to_string();
    let t_ptx = t0.elapsed().as_secs_f64() - t_lower - t_opt;
    let params = func
        .params
        .iter()
        .zip(&func.blocks[func.entry].args)
        .map(|(p, &v)| (p.name.clone(), func.ty(v).elem.to_string()))
        .collect();
    Ok(PtxOutput {
        params,
        timings: vec![
            ("lower".into(), t_lower),
            ("llvm_opt".into(), t_opt),
            ("ptx".into(), t_ptx),
        ],
        kernel_name: lowered.name,
        llvm_ir,
        ptx,
        shared_bytes: lowered.shared_bytes,
        num_threads: func.num_warps * 32,
    })
}
