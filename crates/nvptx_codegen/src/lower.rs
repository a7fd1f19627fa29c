//! The lowering driver: kernel signature, thread geometry, and one method per op kind.

use crate::CodegenError;
use inkwell::attributes::AttributeLoc;
use inkwell::basic_block::BasicBlock;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::types::{BasicType, BasicTypeEnum};
use inkwell::values::{BasicValueEnum, FunctionValue, GlobalValue, IntValue, PhiValue};
use inkwell::{AddressSpace, IntPredicate};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use tile_ir::{
    Block, Const, DType, Elem, Function, Layout, LayoutId, Op, OpKind, Shape, Type, Value,
};

/// LLVM's number for the `ptx_kernel` calling convention.
const PTX_KERNEL_CC: u32 = 71;
/// Address space of global memory.
pub(crate) fn global() -> AddressSpace {
    AddressSpace::from(1u16)
}
/// Address space of shared memory.
pub(crate) fn shared() -> AddressSpace {
    AddressSpace::from(3u16)
}

/// An integer type of 8, 16, 32 or 64 bits.
pub(crate) fn int_type(cx: &Context, bits: u32) -> inkwell::types::IntType<'_> {
    match bits {
        1 => cx.bool_type(),
        8 => cx.i8_type(),
        16 => cx.i16_type(),
        64 => cx.i64_type(),
        _ => cx.i32_type(),
    }
}

/// A vector of `n` elements of `t`.
pub(crate) fn vector_of(t: BasicTypeEnum<'_>, n: u32) -> inkwell::types::VectorType<'_> {
    match t {
        BasicTypeEnum::IntType(i) => i.vec_type(n),
        BasicTypeEnum::FloatType(f) => f.vec_type(n),
        BasicTypeEnum::PointerType(p) => p.vec_type(n),
        other => panic!("no vectors of {other:?}"),
    }
}

pub(crate) type R<T> = Result<T, CodegenError>;

/// The module and facts [`lower_kernel`] produced.
pub(crate) struct Lowered<'ctx> {
    pub module: Module<'ctx>,
    pub name: String,
    pub shared_bytes: u32,
}

/// Per (layout, shape): each register's compile-time coordinates, each dimension's thread
/// offset, and whether this thread owns (is the first copy of) its elements.
pub(crate) struct Geometry<'ctx> {
    pub regs: Rc<Vec<Vec<u32>>>,
    pub thread: Vec<IntValue<'ctx>>,
    /// An exclusive bound of each of `thread`'s offsets (the threads' footprint, at most the
    /// tile's size).
    pub thread_bound: Vec<u32>,
    /// A power of two that divides each of `thread`'s offsets in every thread (their
    /// alignment: the smallest step between lanes or warps along the dimension).
    pub thread_align: Vec<u32>,
    pub owner: Option<IntValue<'ctx>>,
}

pub(crate) struct Lowering<'ctx, 'f> {
    pub cx: &'ctx Context,
    pub module: Module<'ctx>,
    pub b: Builder<'ctx>,
    pub func: &'f Function,
    pub kernel: FunctionValue<'ctx>,
    pub vals: HashMap<Value, Vec<BasicValueEnum<'ctx>>>,
    prologue: BasicBlock<'ctx>,
    lane: IntValue<'ctx>,
    warp: IntValue<'ctx>,
    pub tid: IntValue<'ctx>,
    geometry: HashMap<(LayoutId, Shape), Rc<Geometry<'ctx>>>,
    thread_terms: HashMap<tile_ir::DimThreadMap, IntValue<'ctx>>,
    /// The registers of each tile that some op reads ([`crate::demand`]).
    demand: crate::demand::Demand,
    pub smem: Option<GlobalValue<'ctx>>,
    pub smem_bytes: u32,
    pub cur_line: u32,
    /// Whether a thread may still be reading the shared buffer (a barrier must precede writes).
    pub smem_busy: bool,
    /// The target's compute capability times ten.
    pub capability: u32,
    pub fp_fusion: bool,
    /// [`crate::CodegenOptions::keep_subnormals`].
    pub keep_subnormals: bool,
    /// Conversions to `dot` operand layouts deferred to their `dot`, which stages the source
    /// tile in shared memory (result -> source).
    pub staged: HashMap<Value, Value>,
    /// Those of `staged` that are transposes: the dot reads its source's tile transposed.
    pub staged_transposed: std::collections::HashSet<Value>,
    /// `local_view` results: tiles in a ring buffer slot.
    pub views: HashMap<Value, crate::operand::SmemTile<'ctx>>,
    /// Ring buffers of `async_copy`: byte offset and slot layout.
    pub rings: HashMap<u8, crate::operand::Ring>,
    /// Bytes the ring buffers take, at the start of shared memory.
    pub ring_bytes: u32,
    /// Where scratch shared memory starts (past the rings while they are live).
    pub scratch_base: u32,
    /// Loops entered around the op being lowered.
    pub loop_depth: u32,
    /// Results of such conversions (decided before lowering).
    deferrable: std::collections::HashSet<Value>,
    /// Whether some `dot` runs on warpgroups (`wgmma`): shared tiles are then 1024-byte
    /// aligned, and copies into them are fenced for the async proxy.
    pub warpgroup: bool,
    /// Warpgroup dots left in flight across loop iterations (see [`async_dots`]).
    pub async_dots: std::collections::HashSet<Op>,
    /// Warpgroup dots with register `a` left in flight (see [`deferred_dots`]).
    pub deferred: Deferred,
    /// Operands staged once into reserved shared memory (see [`persistent_operands`]): byte
    /// offsets from the start of shared memory, which they occupy before the rings.
    pub persistent: HashMap<Value, u32>,
    /// Bytes the persistent operands take.
    pub persistent_bytes: u32,
    /// Where scratch space may start after each top-level full `cp.async` wait: past the
    /// staged operands and past every ring still to be used (later loops' rings may share
    /// the memory of the finished ones).
    pub scratch_after_wait: HashMap<Op, u32>,
    /// Prologue copies into rings whose memory scratch space reuses after their loop, inside
    /// an enclosing loop (unless `TILES_NESTED_RING_REUSE=0`): each takes a barrier first where the
    /// shared buffer may still be read (the previous iteration's epilogue).
    pub prologue_copies: HashSet<Op>,
    /// The full waits inside loops after which scratch space reuses the rings (see
    /// `plan_nested_reuse`); a wait outside loops always frees the finished rings.
    pub nested_reuse_waits: HashSet<Op>,
}

/// Conversions to a dot operand layout used only by dots inside loops below it (a
/// loop-invariant `q`): staged once, where converted, into shared memory that stays reserved,
/// and read there by the dots. A warpgroup dot's `a` (read through descriptors) always; an
/// `mma.sync` operand of 16-bit elements (read one K step at a time with `ldmatrix`) where it
/// would hold more than [`MMA_OPERAND_REGISTERS`] registers a thread for the whole loop and
/// takes at most [`MMA_OPERAND_BYTES`].
/// `TILES_PERSISTENT_MMA_OPERANDS=0` keeps the latter in registers.
pub(crate) fn persistent_operands(func: &Function) -> Vec<Value> {
    let mut block_of: HashMap<Op, tile_ir::Block> = HashMap::new();
    let mut users: HashMap<Value, Vec<(Op, usize)>> = HashMap::new();
    for (b, data) in func.blocks.iter() {
        for &op in &data.ops {
            block_of.insert(op, b);
            for (i, &v) in func.ops[op].operands.iter().enumerate() {
                users.entry(v).or_default().push((op, i));
            }
        }
    }
    let mma_operands = std::env::var("TILES_PERSISTENT_MMA_OPERANDS").map_or(true, |v| v != "0");
    let mut out = Vec::new();
    for op in func.ops_in_order() {
        let d = &func.ops[op];
        if d.kind != OpKind::ConvertLayout {
            continue;
        }
        let r = d.results[0];
        let ty = func.ty(r);
        if ty.shape.rank() != 2 {
            continue;
        }
        let Some(layout @ tile_ir::Layout::DotOperand { op_idx, parent, .. }) = func.layout_of(r)
        else {
            continue;
        };
        let tile_ir::Layout::Mma(m) = parent.as_ref() else {
            continue;
        };
        let sixteen_bit = matches!(
            ty.elem.dtype(),
            Some(tile_ir::DType::F16 | tile_ir::DType::BF16)
        );
        let eligible = match m.version {
            3 => {
                *op_idx == 0
                    && (sixteen_bit
                        || matches!(
                            ty.elem.dtype(),
                            Some(tile_ir::DType::F8E4M3 | tile_ir::DType::F8E5M2)
                        ))
            }
            2 => {
                mma_operands
                    && sixteen_bit
                    && ty.shape.numel() * 2 <= MMA_OPERAND_BYTES
                    && layout.register_offsets(ty.shape.dims()).len() / 2 > MMA_OPERAND_REGISTERS
            }
            _ => false,
        };
        let ok = eligible
            && users.get(&r).is_some_and(|us| {
                us.iter().all(|&(u, i)| {
                    matches!(func.ops[u].kind, OpKind::Dot { .. })
                        && i == *op_idx as usize
                        && block_of.get(&u) != block_of.get(&op)
                })
            });
        if ok {
            out.push(r);
        }
    }
    out
}

/// The registers a thread may give a loop-invariant `mma.sync` operand for a whole loop before
/// it goes to shared memory instead ([`persistent_operands`]): a 32x512 `q` of a multi-head
/// latent attention, held by 2 of 8 warps along M, takes 128, and its kernel spilled; a
/// 64x128 `q` on 4 warps takes 32 and stays.
pub(crate) const MMA_OPERAND_REGISTERS: usize = 64;

/// The largest `mma.sync` operand staged for a whole loop nest ([`persistent_operands`]): the
/// rings and scratch space need the rest of shared memory (an A100 has 163 KiB a block).
pub(crate) const MMA_OPERAND_BYTES: u64 = 64 * 1024;

/// Conversions to a `#dot_op` layout whose every user is a `dot` in the same block: the `dot`
/// reads those operands from shared memory itself.
fn deferrable_conversions(func: &Function) -> std::collections::HashSet<Value> {
    let mut users: HashMap<Value, Vec<(Op, usize)>> = HashMap::new();
    let mut block_of: HashMap<Op, tile_ir::Block> = HashMap::new();
    for (b, data) in func.blocks.iter() {
        for &op in &data.ops {
            block_of.insert(op, b);
            for (i, &v) in func.ops[op].operands.iter().enumerate() {
                users.entry(v).or_default().push((op, i));
            }
        }
    }
    let mut out = std::collections::HashSet::new();
    for (b, data) in func.blocks.iter() {
        for &op in &data.ops {
            let d = &func.ops[op];
            // A transpose into a tensor-core operand layout (`tl.trans(k)`, `dY.T`) too: the
            // dot reads the tile staged as it was, through a transposed view
            // ([`SmemTile::transposed`]): `ldmatrix` for `mma.sync`, an MN-major descriptor
            // for `wgmma` (16-bit types; fp8, int8 and tf32 must be K-major there).
            let transpose_to_mma = matches!(d.kind, OpKind::Permute { perm } if perm[..2] == [1, 0])
                && match func.layout_of(d.results[0]) {
                    Some(tile_ir::Layout::DotOperand { parent, .. }) => match parent.as_ref() {
                        tile_ir::Layout::Mma(m) if m.version == 2 => true,
                        tile_ir::Layout::Mma(m) if m.version == 3 => !func
                            .ty(d.results[0])
                            .elem
                            .dtype()
                            .is_some_and(crate::dot::wgmma_k_major_dtype),
                        _ => false,
                    },
                    _ => false,
                };
            if d.kind != OpKind::ConvertLayout && !transpose_to_mma {
                continue;
            }
            let r = d.results[0];
            let is_operand = func
                .layout_of(r)
                .is_some_and(|l| matches!(l, tile_ir::Layout::DotOperand { .. }));
            let numeric_2d = func.ty(r).shape.rank() == 2 && !func.ty(r).elem.is_ptr();
            let ok = users.get(&r).is_some_and(|us| {
                us.iter().all(|&(u, i)| {
                    matches!(func.ops[u].kind, OpKind::Dot { .. }) && i < 2 && block_of[&u] == b
                })
            });
            // A warpgroup dot reads `a` from registers when they already hold it: the result
            // of another warpgroup dot (attention's probabilities) is not staged. Except fp8,
            // whose conversion the dot does itself, from the accumulator's registers: into
            // wgmma's register fragments by a byte exchange within each quad of lanes
            // (`frag_a_fp8`), or, where that does not apply, into a K-major shared tile; int8
            // and tf32 `a` are always staged K-major.
            let k_major_only = func
                .ty(r)
                .elem
                .dtype()
                .is_some_and(crate::dot::wgmma_k_major_dtype);
            let from_warpgroup_result = !k_major_only
                && matches!(func.layout_of(r),
                Some(tile_ir::Layout::DotOperand { op_idx: 0, parent, .. })
                    if matches!(parent.as_ref(), tile_ir::Layout::Mma(m) if m.version == 3))
                && matches!(func.layout_of(d.operands[0]),
                    Some(tile_ir::Layout::Mma(m)) if m.version == 3);
            if is_operand && numeric_2d && ok && !from_warpgroup_result {
                out.insert(r);
            }
        }
    }
    out
}

/// Warpgroup `dot`s that may stay in flight across a loop iteration: the accumulator of a
/// `for` loop (the carried value feeds only the dot, the dot's result only the `yield`) with
/// both operands in pipelined ring slots. Each waits until just one group is pending (its
/// predecessor's), then a barrier lets every warpgroup's finished slot be refilled; the loop's
/// exit waits for the last group.
fn async_dots(func: &Function) -> std::collections::HashSet<Op> {
    let mut uses: HashMap<Value, usize> = HashMap::new();
    for (_, d) in func.ops.iter() {
        for &v in &d.operands {
            *uses.entry(v).or_default() += 1;
        }
    }
    let mut out = std::collections::HashSet::new();
    for (_, d) in func.ops.iter() {
        if !matches!(d.kind, OpKind::For { .. }) {
            continue;
        }
        let Some(&body) = d.regions.first() else {
            continue;
        };
        let body = func.regions[body].block;
        let Some(&yield_op) = func.blocks[body].ops.last() else {
            continue;
        };
        let args = &func.blocks[body].args;
        for (k, &y) in func.ops[yield_op].operands.iter().enumerate() {
            let tile_ir::ValueDef::Result(dot, _) = func.values[y].def else {
                continue;
            };
            let dd = &func.ops[dot];
            if !matches!(dd.kind, OpKind::Dot { .. }) {
                continue;
            }
            let warpgroup = func
                .layout_of(y)
                .is_some_and(|l| matches!(l, tile_ir::Layout::Mma(m) if m.version == 3));
            let from_rings = dd.operands[..2].iter().all(|&v| {
                matches!(func.values[v].def, tile_ir::ValueDef::Result(o, _)
                    if matches!(func.ops[o].kind, OpKind::LocalView { .. }))
            });
            let carried = args.get(k + 1).copied();
            let ok = warpgroup
                && from_rings
                && func.blocks[body].ops.contains(&dot)
                && carried == Some(dd.operands[2])
                && uses.get(&y) == Some(&1)
                && carried.and_then(|c| uses.get(&c)) == Some(&1);
            if ok {
                out.insert(dot);
            }
        }
    }
    out
}

/// Warpgroup dots with register `a` left in flight (`wait_group 1`) past the end of their
/// statement, until a later synchronous warpgroup dot's `wait_group 0` completes them:
/// attention's `acc = dot(p, v, acc * alpha)` and the backward's `dv += dot(pT, do)`.
#[derive(Default)]
pub(crate) struct Deferred {
    /// The dots.
    pub dots: std::collections::HashSet<Op>,
    /// Carried accumulators used by other ops than their dot, by the earlier dot of the body
    /// after which they pass through a wait statement (which finds nothing pending).
    pub waits: HashMap<Op, Vec<Value>>,
    /// The last such dot of each loop body: a barrier follows it, before the ring refills.
    pub barrier_after: std::collections::HashSet<Op>,
}

/// Finds the [`Deferred`] dots. Safe when, in the body's top-level order (nested uses count at
/// their top-level op):
/// - the dot's result only feeds the `yield`, and `b` is a ring slot (`local_view`);
/// - its `a` is registers computed in the body from an earlier synchronous warpgroup dot's
///   result, so they are rewritten only after that dot's wait in the next iteration (fp8 `a`,
///   always staged in shared memory, is left out);
/// - the carried accumulator is either the dot's own accumulator and read by nothing else (a
///   chain of groups on the same registers, as a matmul's), or used only after that earlier
///   dot, which completes the group one iteration later;
/// - every `async_copy` of the body comes after the dot: the barrier after the body's last
///   such dot finds every warpgroup's previous groups complete before a ring slot is refilled.
pub(crate) fn deferred_dots(
    func: &Function,
    async_dots: &std::collections::HashSet<Op>,
) -> Deferred {
    let mut block_of: HashMap<Op, tile_ir::Block> = HashMap::new();
    let mut owner: HashMap<tile_ir::Block, Op> = HashMap::new();
    for (b, data) in func.blocks.iter() {
        for &op in &data.ops {
            block_of.insert(op, b);
            for &r in &func.ops[op].regions {
                owner.insert(func.regions[r].block, op);
            }
        }
    }
    // The op of `body` that is or contains `op`.
    let top_in = |body: tile_ir::Block, mut op: Op| -> Option<Op> {
        loop {
            let b = *block_of.get(&op)?;
            if b == body {
                return Some(op);
            }
            op = *owner.get(&b)?;
        }
    };
    let warpgroup_dot = |op: Op| {
        matches!(func.ops[op].kind, OpKind::Dot { .. })
            && matches!(func.layout_of(func.ops[op].results[0]),
                Some(tile_ir::Layout::Mma(m)) if m.version == 3)
    };
    let is_view = |v: Value| {
        matches!(func.values[v].def, tile_ir::ValueDef::Result(o, _)
            if matches!(func.ops[o].kind, OpKind::LocalView { .. }))
    };
    let mut users: HashMap<Value, Vec<Op>> = HashMap::new();
    for (op, d) in func.ops.iter() {
        if !block_of.contains_key(&op) {
            continue;
        }
        for &v in &d.operands {
            users.entry(v).or_default().push(op);
        }
    }
    let mut out = Deferred::default();
    for (_, d) in func.ops.iter() {
        if !matches!(d.kind, OpKind::For { .. }) {
            continue;
        }
        let Some(&region) = d.regions.first() else {
            continue;
        };
        let body = func.regions[region].block;
        let ops = &func.blocks[body].ops;
        let Some(&yield_op) = ops.last() else {
            continue;
        };
        let pos: HashMap<Op, usize> = ops.iter().enumerate().map(|(i, &o)| (o, i)).collect();
        // The body's first top-level position holding an `async_copy`: deferred dots come
        // before it.
        let first_copy = ops
            .iter()
            .position(|&o| {
                let mut found = false;
                func.walk_op(o, |x| {
                    found |= matches!(func.ops[x].kind, OpKind::AsyncCopy(_))
                });
                found
            })
            .unwrap_or(usize::MAX);
        let args = &func.blocks[body].args;
        let mut last: Option<Op> = None;
        for (k, &y) in func.ops[yield_op].operands.iter().enumerate() {
            let tile_ir::ValueDef::Result(dot, _) = func.values[y].def else {
                continue;
            };
            let Some(&at) = pos.get(&dot) else {
                continue;
            };
            let Some(&carried) = args.get(k + 1) else {
                continue;
            };
            let dd = &func.ops[dot];
            if !warpgroup_dot(dot)
                || async_dots.contains(&dot)
                || users.get(&y).map(Vec::len) != Some(1)
                || !is_view(dd.operands[1])
            {
                continue;
            }
            let a = dd.operands[0];
            if func
                .ty(a)
                .elem
                .dtype()
                .is_some_and(crate::dot::wgmma_k_major_dtype)
            {
                continue;
            }
            // The earliest warpgroup dot of the body before this one whose result `a` is
            // computed from (through ops of the body, and what their regions read).
            let mut slice = std::collections::HashSet::new();
            let mut stack = vec![a];
            while let Some(v) = stack.pop() {
                if let tile_ir::ValueDef::Result(o, _) = func.values[v].def {
                    if pos.contains_key(&o) && slice.insert(o) {
                        func.reads(o, &mut stack);
                    }
                }
            }
            let first = ops[..at]
                .iter()
                .copied()
                .find(|&o| slice.contains(&o) && warpgroup_dot(o) && !async_dots.contains(&o));
            let Some(first) = first else {
                continue;
            };
            let carried_users = users.get(&carried).cloned().unwrap_or_default();
            let chained = dd.operands[2] == carried && carried_users == [dot];
            let uses_after = carried_users
                .iter()
                .all(|&u| top_in(body, u).is_some_and(|t| pos[&t] > pos[&first]));
            if !(chained || uses_after) || first_copy <= at {
                continue;
            }
            out.dots.insert(dot);
            if !chained {
                out.waits.entry(first).or_default().push(carried);
            }
            if last.is_none_or(|l| pos[&l] < at) {
                last = Some(dot);
            }
        }
        out.barrier_after.extend(last);
    }
    out
}

/// Lowers `func` into a fresh module of `cx`.
pub(crate) fn lower_kernel<'ctx>(
    cx: &'ctx Context,
    func: &Function,
    target: &crate::Target,
    options: &crate::CodegenOptions,
) -> R<Lowered<'ctx>> {
    let name: String = func
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let module = cx.create_module(&name);
    let b = cx.create_builder();
    let entry_args = &func.blocks[func.entry].args;
    let mut param_types = Vec::new();
    for &a in entry_args {
        param_types.push(llvm_type(cx, func.ty(a).elem).into());
    }
    let fn_type = cx.void_type().fn_type(&param_types, false);
    let kernel = module.add_function(&name, fn_type, None);
    kernel.set_call_conventions(PTX_KERNEL_CC);
    let threads = func.num_warps * 32;
    // `.reqntid` (every launch has exactly this many threads, as tiles launches it) rather
    // than `.maxntid`: ptxas then allocates registers for that block size. Of the 316
    // distinct sm_90a test kernels, 58 changed: 21 spill less (one kernel 1572 -> 1412
    // bytes, others to none), one more (12 -> 16 bytes); the benchmarks ran the same on an
    // H100 (norms, matmul, fp16/fp8 attention, attention backward, fp8 block GEMM).
    kernel.add_attribute(
        AttributeLoc::Function,
        cx.create_string_attribute("nvvm.reqntid", &threads.to_string()),
    );
    if let Some(n) = options.maxnreg {
        kernel.add_attribute(
            AttributeLoc::Function,
            cx.create_string_attribute("nvvm.maxnreg", &n.to_string()),
        );
    }
    let prologue = cx.append_basic_block(kernel, "prologue");
    let body = cx.append_basic_block(kernel, "entry");
    b.position_at_end(prologue);
    let tid = sreg(cx, &module, &b, "tid.x")?;
    let lane = b.build_and(tid, cx.i32_type().const_int(31, false), "lane")?;
    let warp = b.build_right_shift(tid, cx.i32_type().const_int(5, false), false, "warp")?;
    b.build_unconditional_branch(body)?;
    b.position_at_end(body);
    let mut lw = Lowering {
        cx,
        module,
        b,
        func,
        kernel,
        vals: HashMap::new(),
        prologue,
        lane,
        warp,
        tid,
        geometry: HashMap::new(),
        thread_terms: HashMap::new(),
        demand: HashMap::new(),
        smem: None,
        smem_bytes: 0,
        cur_line: 0,
        smem_busy: false,
        fp_fusion: options.fp_fusion,
        keep_subnormals: options.keep_subnormals,
        capability: target.capability,
        staged: HashMap::new(),
        staged_transposed: std::collections::HashSet::new(),
        deferrable: deferrable_conversions(func),
        views: HashMap::new(),
        rings: HashMap::new(),
        ring_bytes: 0,
        scratch_base: 0,
        loop_depth: 0,
        warpgroup: func
            .layouts
            .iter()
            .any(|(_, l)| matches!(l, tile_ir::Layout::Mma(m) if m.version == 3)),
        persistent: HashMap::new(),
        persistent_bytes: 0,
        scratch_after_wait: HashMap::new(),
        prologue_copies: HashSet::new(),
        nested_reuse_waits: HashSet::new(),
        async_dots: Default::default(),
        deferred: Default::default(),
    };
    // TILES_WGMMA_SYNC (developers): every warpgroup dot waits for its own group.
    if std::env::var_os("TILES_WGMMA_SYNC").is_none() {
        lw.async_dots = async_dots(func);
        lw.deferred = deferred_dots(func, &lw.async_dots);
    }
    lw.plan_rings()?;
    lw.demand = lw.analyze_demand()?;
    for (i, &a) in entry_args.iter().enumerate() {
        let p = kernel
            .get_nth_param(i as u32)
            .ok_or_else(|| CodegenError::Internal("missing parameter".into()))?;
        p.set_name(&func.params[i].name);
        lw.vals.insert(a, vec![p]);
    }
    lw.lower_block(func.entry)?;
    let shared_bytes = lw.smem_bytes;
    Ok(Lowered {
        module: lw.module,
        name,
        shared_bytes,
    })
}

pub(crate) fn sreg<'ctx>(
    cx: &'ctx Context,
    m: &Module<'ctx>,
    b: &Builder<'ctx>,
    reg: &str,
) -> R<IntValue<'ctx>> {
    let name = format!("llvm.nvvm.read.ptx.sreg.{reg}");
    let f = m
        .get_function(&name)
        .unwrap_or_else(|| m.add_function(&name, cx.i32_type().fn_type(&[], false), None));
    let v = b.build_call(f, &[], reg)?;
    Ok(v.try_as_basic_value()
        .basic()
        .ok_or_else(|| CodegenError::Internal("sreg call".into()))?
        .into_int_value())
}

/// The LLVM type of one element in registers (`i1` for bools, `ptr addrspace(1)` for pointers).
pub(crate) fn llvm_type(cx: &Context, e: Elem) -> BasicTypeEnum<'_> {
    match e {
        Elem::Ptr(_) => cx.ptr_type(global()).as_basic_type_enum(),
        Elem::Num(d) => dtype_type(cx, d),
    }
}

pub(crate) fn dtype_type(cx: &Context, d: DType) -> BasicTypeEnum<'_> {
    match d {
        DType::I1 => cx.bool_type().into(),
        DType::I8 | DType::U8 | DType::F8E5M2 | DType::F8E4M3 | DType::F8E4B15 => {
            cx.i8_type().into()
        }
        DType::I16 | DType::U16 => cx.i16_type().into(),
        DType::I32 | DType::U32 => cx.i32_type().into(),
        DType::I64 | DType::U64 => cx.i64_type().into(),
        DType::F16 => cx.f16_type().into(),
        DType::BF16 => cx.bf16_type().into(),
        DType::F32 => cx.f32_type().into(),
        DType::F64 => cx.f64_type().into(),
    }
}

/// The LLVM type of one element in memory (`i1` is stored as a byte).
pub(crate) fn memory_type(cx: &Context, d: DType) -> BasicTypeEnum<'_> {
    if d == DType::I1 {
        cx.i8_type().into()
    } else {
        dtype_type(cx, d)
    }
}

impl<'ctx> Lowering<'ctx, '_> {
    /// The target converts to fp8 in hardware (`cvt.rn.satfinite.e4m3x2/e5m2x2`; sm_89 has it
    /// too, but only from PTX 8.1, above what tiles emits for it).
    pub fn fp8_cvt(&self) -> bool {
        self.capability >= 90
    }

    /// The target rounds two f32s into an f16x2 or bf16x2 word in one instruction
    /// (`cvt.rn.f16x2.f32`, sm_80).
    pub fn x2_cvt(&self) -> bool {
        self.capability >= 80
    }

    pub fn internal<T>(&self, what: &str) -> R<T> {
        Err(CodegenError::Internal(format!(
            "line {}: {what}",
            self.cur_line
        )))
    }

    /// The user's error at the current op's line ([`CodegenError::Invalid`]).
    pub fn invalid<T>(&self, what: impl Into<String>) -> R<T> {
        Err(CodegenError::Invalid {
            what: what.into(),
            line: self.cur_line,
        })
    }

    pub fn unsupported<T>(&self, what: impl Into<String>) -> R<T> {
        Err(CodegenError::Unsupported {
            what: what.into(),
            line: self.cur_line,
        })
    }

    pub fn get(&self, v: Value) -> R<&Vec<BasicValueEnum<'ctx>>> {
        match self.vals.get(&v) {
            Some(x) => Ok(x),
            None => self.internal(&format!("{v} used before it was lowered")),
        }
    }

    /// The warp index of this thread.
    pub fn warp(&self) -> IntValue<'ctx> {
        self.warp
    }

    /// The lane index of this thread.
    pub fn lane(&self) -> IntValue<'ctx> {
        self.lane
    }

    pub fn i32(&self, v: u64) -> IntValue<'ctx> {
        self.cx.i32_type().const_int(v, false)
    }

    /// Register coordinates, thread offsets and the owner predicate for a tile type.
    pub fn geometry(&mut self, ty: &Type) -> R<Rc<Geometry<'ctx>>> {
        let Some(lid) = ty.layout else {
            return self.internal("tile without a layout");
        };
        let key = (lid, ty.shape);
        if let Some(g) = self.geometry.get(&key) {
            return Ok(g.clone());
        }
        let layout: &Layout = &self.func.layouts[lid];
        let shape = ty.shape.dims();
        if layout.rank() != shape.len() {
            return self.internal("layout rank differs from the tile's");
        }
        let regs = Rc::new(layout.register_offsets(shape));
        let (kept, sliced) = layout.thread_maps();
        // Thread offsets are computed once, in the prologue, so they dominate every use.
        let (thread, thread_bound, thread_align, owner) = self.in_prologue(|lw| {
            let mut thread = Vec::new();
            let mut thread_bound = Vec::new();
            let mut thread_align = Vec::new();
            let mut owner: Option<IntValue> = None;
            let mut and = |lw: &Self, c: IntValue<'ctx>| -> R<()> {
                owner = Some(match owner {
                    Some(o) => lw.b.build_and(o, c, "own")?,
                    None => c,
                });
                Ok(())
            };
            for (d, m) in kept.iter().enumerate() {
                let raw = lw.thread_term(m)?;
                let size = shape[d] as u64;
                let covered = (m.lane_mask as u64 + 1) * m.lane_mul as u64
                    + (m.warp_mask as u64) * m.warp_mul as u64;
                if covered > size {
                    let c =
                        lw.b.build_int_compare(IntPredicate::ULT, raw, lw.i32(size), "own")?;
                    and(lw, c)?;
                }
                // Offsets past the tile wrap (a thread then holds a copy); others are in range.
                thread.push(if covered > size {
                    lw.b.build_and(raw, lw.i32(size - 1), "toff")?
                } else {
                    raw
                });
                let most =
                    m.lane_mask as u64 * m.lane_mul as u64 + m.warp_mask as u64 * m.warp_mul as u64;
                thread_bound.push((most + 1).min(size) as u32);
                // Wrapping (a mask of a power-of-two size) keeps an alignment below the size.
                let step = |mask: u32, mul: u32| {
                    if mask == 0 || mul == 0 {
                        u32::MAX
                    } else {
                        1 << mul.trailing_zeros()
                    }
                };
                let align = step(m.lane_mask, m.lane_mul).min(step(m.warp_mask, m.warp_mul));
                thread_align.push(align.min(shape[d].next_power_of_two()).max(1));
            }
            for m in &sliced {
                if m.lane_mask != 0 || m.warp_mask != 0 {
                    let raw = lw.thread_term(m)?;
                    let c =
                        lw.b.build_int_compare(IntPredicate::EQ, raw, lw.i32(0), "own")?;
                    and(lw, c)?;
                }
            }
            Ok((thread, thread_bound, thread_align, owner))
        })?;
        let g = Rc::new(Geometry {
            regs,
            thread,
            thread_bound,
            thread_align,
            owner,
        });
        self.geometry.insert(key, g.clone());
        Ok(g)
    }

    /// Runs `f` with the builder at the end of the prologue (before its branch), so that what
    /// it builds dominates every block; the builder then returns to where it was.
    pub fn in_prologue<T>(&mut self, f: impl FnOnce(&mut Self) -> R<T>) -> R<T> {
        let here = self.b.get_insert_block();
        let term = self
            .prologue
            .get_terminator()
            .expect("the prologue ends in a branch");
        self.b.position_before(&term);
        let out = f(self);
        if let Some(bb) = here {
            self.b.position_at_end(bb);
        }
        out
    }

    /// A stack slot, allocated once in the prologue (so loops do not grow the stack).
    pub fn entry_alloca(
        &mut self,
        ty: BasicTypeEnum<'ctx>,
    ) -> R<inkwell::values::PointerValue<'ctx>> {
        self.in_prologue(|lw| Ok(lw.b.build_alloca(ty, "buf")?))
    }

    /// A dimension's thread offset (in the prologue, once per distinct map: layouts of one
    /// kernel share most of theirs; the trivial shifts, masks and products are not emitted).
    pub(crate) fn thread_term(&mut self, m: &tile_ir::DimThreadMap) -> R<IntValue<'ctx>> {
        if let Some(&t) = self.thread_terms.get(m) {
            return Ok(t);
        }
        let part =
            |id: IntValue<'ctx>, shift: u32, mask: u32, mul: u32| -> R<Option<IntValue<'ctx>>> {
                if mask == 0 {
                    return Ok(None);
                }
                let mut x = id;
                if shift > 0 {
                    x = self
                        .b
                        .build_right_shift(x, self.i32(shift as u64), false, "t")?;
                }
                x = self.b.build_and(x, self.i32(mask as u64), "t")?;
                if mul != 1 {
                    x = self.b.build_int_mul(x, self.i32(mul as u64), "t")?;
                }
                Ok(Some(x))
            };
        let l = part(self.lane, m.lane_shift, m.lane_mask, m.lane_mul)?;
        let w = part(self.warp, m.warp_shift, m.warp_mask, m.warp_mul)?;
        let t = match (l, w) {
            (Some(l), Some(w)) => self.b.build_int_add(l, w, "t")?,
            (Some(x), None) | (None, Some(x)) => x,
            (None, None) => self.i32(0),
        };
        self.thread_terms.insert(*m, t);
        Ok(t)
    }

    /// The predicate "this thread holds the first copy": `None` when every copy is unique.
    pub fn owner(&mut self, ty: &Type) -> R<Option<IntValue<'ctx>>> {
        if ty.is_scalar() {
            let c = self
                .b
                .build_int_compare(IntPredicate::EQ, self.tid, self.i32(0), "tid0")?;
            return Ok(Some(c));
        }
        Ok(self.geometry(ty)?.owner)
    }

    pub fn lower_block(&mut self, b: Block) -> R<Vec<Value>> {
        let ops = self.func.blocks[b].ops.clone();
        for op in ops {
            if let OpKind::Yield = self.func.ops[op].kind {
                return Ok(self.func.ops[op].operands.clone());
            }
            self.lower_op(op)?;
        }
        Ok(Vec::new())
    }

    fn set(&mut self, op: Op, v: Vec<BasicValueEnum<'ctx>>) {
        let r = self.func.result(op, 0);
        self.vals.insert(r, v);
    }

    pub fn nregs(&mut self, ty: &Type) -> R<usize> {
        Ok(if ty.is_scalar() {
            1
        } else {
            self.geometry(ty)?.regs.len()
        })
    }

    fn lower_op(&mut self, op: Op) -> R<()> {
        let data = self.func.ops[op].clone();
        self.cur_line = data.loc.line;
        let rty = data.results.first().map(|&r| *self.func.ty(r));
        // A cast lowered a group of registers at a time, if it is one.
        let grouped = match data.kind {
            OpKind::Cast => self.grouped_cast(&data)?,
            _ => None,
        };
        match data.kind {
            OpKind::Constant(c) => {
                let ty = rty.expect("constants have a result");
                let v = self.constant(c, ty.elem)?;
                let n = self.nregs(&ty)?;
                self.set(op, vec![v; n]);
            }
            OpKind::ProgramId(a) | OpKind::NumPrograms(a) => {
                let axis = ["x", "y", "z"][a as usize];
                let reg = if matches!(data.kind, OpKind::ProgramId(_)) {
                    "ctaid"
                } else {
                    "nctaid"
                };
                let v = sreg(self.cx, &self.module, &self.b, &format!("{reg}.{axis}"))?;
                self.set(op, vec![v.into()]);
            }
            OpKind::Arange { start, .. } => {
                let ty = rty.expect("arange has a result");
                let g = self.geometry(&ty)?;
                let add = |lw: &Self, x: IntValue<'ctx>, c: u64| -> R<IntValue<'ctx>> {
                    Ok(if c == 0 {
                        x
                    } else {
                        lw.b.build_int_add(x, lw.i32(c), "ar")?
                    })
                };
                let base = add(self, g.thread[0], start as i64 as u64)?;
                let mut out = Vec::with_capacity(g.regs.len());
                for r in g.regs.iter() {
                    out.push(add(self, base, r[0] as u64)?.into());
                }
                self.set(op, out);
            }
            OpKind::Splat => {
                let v = self.get(data.operands[0])?[0];
                let n = self.nregs(&rty.expect("splat has a result"))?;
                self.set(op, vec![v; n]);
            }
            OpKind::ExpandDims(axis) => {
                let out = self.remap(data.operands[0], &rty.expect("result"), |c| {
                    let mut c = c.to_vec();
                    c.remove(axis as usize);
                    c
                })?;
                self.set(op, out);
            }
            OpKind::Broadcast => {
                let src = self.func.ty(data.operands[0]).shape;
                let out = self.remap(data.operands[0], &rty.expect("result"), |c| {
                    c.iter()
                        .zip(src.dims())
                        .map(|(&x, &n)| if n == 1 { 0 } else { x })
                        .collect()
                })?;
                self.set(op, out);
            }
            OpKind::ConvertLayout => {
                let r = data.results[0];
                if let Some(&offset) = self.persistent.get(&r) {
                    // Staged once, here; the dots in the loops below read it in place.
                    self.fence_before_shared_write()?;
                    let keep = self.scratch_base;
                    self.scratch_base = 0;
                    // A warpgroup operand wgmma cannot transpose (fp8, int8, tf32) is staged
                    // K-major (`a`: along dimension 1).
                    let k_major = match self.func.layout_of(r) {
                        Some(tile_ir::Layout::DotOperand { op_idx, parent, .. })
                            if self.wgmma_k_major_only(r)
                                && matches!(parent.as_ref(), tile_ir::Layout::Mma(m) if m.version == 3) =>
                        {
                            Some(if *op_idx == 0 { 1 } else { 0 })
                        }
                        _ => None,
                    };
                    let t = self.stage_tile(data.operands[0], offset, k_major);
                    self.scratch_base = keep;
                    let t = t?;
                    if self.is_warpgroup_operand(r) {
                        // Written by ordinary stores, read by the tensor cores' async proxy.
                        self.asm_void("fence.proxy.async.shared::cta;", "~{memory}", &[])?;
                    }
                    self.barrier_sync()?;
                    self.views.insert(r, t);
                } else if self.deferrable.contains(&r) {
                    self.staged.insert(r, data.operands[0]);
                } else if self.same_distribution(data.operands[0], &rty.expect("result"))? {
                    // Every thread already holds the elements it needs: reorder registers.
                    let out =
                        self.remap(data.operands[0], &rty.expect("result"), |c| c.to_vec())?;
                    self.set(op, out);
                } else {
                    let out = self.convert_layout(data.operands[0], &rty.expect("result"))?;
                    self.set(op, out);
                }
            }
            OpKind::Gather(axis) => {
                let (src, index) = (data.operands[0], data.operands[1]);
                let out = self.gather(
                    src,
                    index,
                    axis as usize,
                    &rty.expect("gather has a result"),
                )?;
                self.set(op, out);
            }
            OpKind::Load(m) => {
                let out = self.load(&data, m, &rty.expect("load has a result"))?;
                self.set(op, out);
            }
            OpKind::Store(m) => self.store(&data, m)?,
            OpKind::For { .. } => self.lower_for(op)?,
            OpKind::If => self.lower_if(op)?,
            OpKind::Return => {
                self.b.build_return(None)?;
            }
            OpKind::Print { prefix, hex } => self.lower_print(&data, prefix, hex)?,
            OpKind::Reduce { axis } => self.lower_reduce(op, axis as usize)?,
            OpKind::Scan { axis, reverse } => self.lower_scan(op, axis as usize, reverse)?,
            OpKind::Permute { .. } if self.deferrable.contains(&data.results[0]) => {
                self.staged.insert(data.results[0], data.operands[0]);
                self.staged_transposed.insert(data.results[0]);
            }
            OpKind::Permute { .. } | OpKind::Reshape | OpKind::Join | OpKind::Split => {
                self.lower_shape_op(op)?
            }
            OpKind::While => self.lower_while(op)?,
            OpKind::Barrier => self.barrier_sync()?,
            OpKind::Dot { precision } => self.lower_dot(op, precision)?,
            OpKind::InlineAsm {
                asm,
                constraints,
                pack,
                ..
            } => self.lower_inline_asm(op, asm, constraints, pack)?,
            OpKind::AsyncCopy(a) => {
                if self.prologue_copies.contains(&op) {
                    self.fence_before_shared_write()?;
                }
                self.lower_async_copy(&data, a)?
            }
            OpKind::AsyncCommit => self.asm_void("cp.async.commit_group;", "~{memory}", &[])?,
            OpKind::AsyncWait { pending } => {
                self.asm_void(&format!("cp.async.wait_group {pending};"), "~{memory}", &[])?;
                // Tiles landed by cp.async are read by wgmma after the barrier with no proxy
                // fence in between (TILES_CP_ASYNC_PROXY_FENCE=1 puts one back), as in CUTLASS's
                // SM90 cp.async + GMMA mainloops and in Triton 3.6, whose proxy-fence pass
                // fences register-to-shared stores (which tiles fences too, where it stages an
                // operand) but not cp.async. The fence cost forward attention 2-4 %.
                if self.warpgroup && std::env::var_os("TILES_CP_ASYNC_PROXY_FENCE").is_some() {
                    self.asm_void("fence.proxy.async.shared::cta;", "~{memory}", &[])?;
                }
                if pending == 0 && (self.loop_depth == 0 || self.nested_reuse_waits.contains(&op)) {
                    // Every copy has landed: the finished rings' memory is free for scratch
                    // again (after a barrier, which the next writer takes since the rings
                    // were read); rings of later loops stay clear. (Inside a loop, only where
                    // `plan_rings` found the finished loop's rings the only ones live.)
                    self.scratch_base = self
                        .scratch_after_wait
                        .get(&op)
                        .copied()
                        .unwrap_or(self.ring_bytes);
                    self.smem_busy = true;
                }
            }
            OpKind::LocalView { buf, trans, .. } => {
                let slot = self.get(data.operands[0])?[0].into_int_value();
                let mut t = self.ring_slot(buf, slot)?;
                if trans {
                    // The same storage, indexed the other way round.
                    t.dims = [t.dims[1], t.dims[0]];
                    t.contig = 1 - t.contig;
                }
                self.views.insert(data.results[0], t);
            }
            OpKind::LocalLoad { buf, .. } => {
                let slot = self.get(data.operands[0])?[0].into_int_value();
                let t = self.ring_slot(buf, slot)?;
                let ty = rty.expect("local_load has a result");
                let out = self.load_tile(&t, &ty)?;
                self.set(op, out);
            }
            OpKind::Atomic(a) => {
                let out = self.lower_atomic(&data, a)?;
                self.set(op, out);
            }
            OpKind::Assert { .. } => self.lower_assert(&data)?,
            OpKind::Yield => return self.internal("yield outside a region"),
            OpKind::Cast if grouped.is_some() => {
                let kind = grouped.expect("checked by the guard");
                let from = self.func.ty(data.operands[0]).elem;
                let to = rty.expect("casts have a result").elem;
                let regs = self.get(data.operands[0])?.clone();
                let out = self.cast_grouped(kind, from, to, &regs)?;
                self.set(op, out);
            }
            _ if data.kind.is_elementwise() || matches!(data.kind, OpKind::Fma) => {
                let ty = rty.expect("elementwise ops have a result");
                let n = self.nregs(&ty)?;
                let leaders = self.uniform_run_leaders(data.kind, &ty)?;
                // Registers no op reads are zeros (comparisons over uniform runs, which copy
                // their runs' first registers, are built whole).
                let want = match (&leaders, self.demand.get(&data.results[0])) {
                    (None, Some(w)) if w.len() == n => Some(w.clone()),
                    (None, None) => Some(vec![false; n]),
                    _ => None,
                };
                let zero = llvm_type(self.cx, ty.elem).const_zero();
                let mut out: Vec<BasicValueEnum<'ctx>> = Vec::with_capacity(n);
                for i in 0..n {
                    if want.as_ref().is_some_and(|w| !w[i]) {
                        out.push(zero);
                        continue;
                    }
                    if let Some(&l) = leaders.as_ref().and_then(|ls| ls.get(i)) {
                        if l < i {
                            out.push(out[l]);
                            continue;
                        }
                    }
                    let mut args = Vec::with_capacity(data.operands.len());
                    for &o in &data.operands {
                        let regs = self.get(o)?;
                        args.push(if regs.len() == 1 { regs[0] } else { regs[i] });
                    }
                    let tys: Vec<Elem> = data
                        .operands
                        .iter()
                        .map(|&o| self.func.ty(o).elem)
                        .collect();
                    out.push(self.elementwise(data.kind, &tys, ty.elem, &args)?);
                }
                self.set(op, out);
            }
            other => return self.unsupported(format!("op {}", other.name())),
        }
        Ok(())
    }

    /// Whether lowering `block` may read or write shared memory (conservative: only ops known
    /// to stay in registers and global memory count as not).
    fn block_may_use_smem(&self, block: tile_ir::Block) -> bool {
        self.func.blocks[block].ops.iter().any(|&op| {
            let d = &self.func.ops[op];
            let plain = d.kind.is_elementwise()
                || matches!(
                    d.kind,
                    OpKind::Constant(_)
                        | OpKind::Arange { .. }
                        | OpKind::Splat
                        | OpKind::ExpandDims(_)
                        | OpKind::Broadcast
                        | OpKind::Fma
                        | OpKind::Load(_)
                        | OpKind::Store(_)
                        | OpKind::ProgramId(_)
                        | OpKind::Yield
                        | OpKind::For { .. }
                        | OpKind::If
                );
            !plain
                || (0..d.regions.len())
                    .any(|i| self.block_may_use_smem(self.func.region_block(op, i)))
        })
    }

    /// For a comparison marked uniform over runs of `r` elements along its layout's contiguous
    /// dimension: for each register, the register that starts its run (all in this thread:
    /// runs are cut to the layout's own aligned runs).
    fn uniform_run_leaders(&mut self, kind: OpKind, ty: &Type) -> R<Option<Vec<usize>>> {
        let OpKind::Compare(_, run) = kind else {
            return Ok(None);
        };
        let layout = ty.layout.map(|l| self.func.layouts[l].clone());
        let Some((dim, n)) = layout.and_then(|l| l.contiguous_dim()) else {
            return Ok(None);
        };
        let r = u32::from(run).min(n);
        if r < 2 || ty.is_scalar() {
            return Ok(None);
        }
        let r = 1u32 << (31 - r.leading_zeros());
        let g = self.geometry(ty)?;
        let mut first: HashMap<Vec<u32>, usize> = HashMap::new();
        let leaders = g
            .regs
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut key = c.clone();
                if let Some(x) = key.get_mut(dim) {
                    *x &= !(r - 1);
                }
                *first.entry(key).or_insert(i)
            })
            .collect();
        Ok(Some(leaders))
    }

    /// Whether `src` and a tile of type `rty` put every element in the same thread (equal
    /// thread maps, ignoring parts that contribute nothing, and one set of register
    /// coordinates): a conversion between them only reorders registers.
    fn same_distribution(&mut self, src: Value, rty: &Type) -> R<bool> {
        let sty = *self.func.ty(src);
        let (Some(ls), Some(lr)) = (sty.layout, rty.layout) else {
            return Ok(false);
        };
        if ls == lr || sty.shape != rty.shape || sty.is_scalar() {
            return Ok(ls == lr);
        }
        let norm = |m: tile_ir::DimThreadMap| -> (u32, u32, u32, u32, u32, u32) {
            let lane = if m.lane_mask == 0 || m.lane_mul == 0 {
                (0, 0, 0)
            } else {
                (m.lane_shift, m.lane_mask, m.lane_mul)
            };
            let warp = if m.warp_mask == 0 || m.warp_mul == 0 {
                (0, 0, 0)
            } else {
                (m.warp_shift, m.warp_mask, m.warp_mul)
            };
            (lane.0, lane.1, lane.2, warp.0, warp.1, warp.2)
        };
        let maps = |l: &tile_ir::Layout| {
            let (kept, sliced) = l.thread_maps();
            let kept: Vec<_> = kept.into_iter().map(norm).collect();
            let mut sliced: Vec<_> = sliced
                .into_iter()
                .map(norm)
                .filter(|m| *m != (0, 0, 0, 0, 0, 0))
                .collect();
            sliced.sort();
            (kept, sliced)
        };
        let (a, b) = (self.func.layouts[ls].clone(), self.func.layouts[lr].clone());
        if maps(&a) != maps(&b) {
            return Ok(false);
        }
        let sg = self.geometry(&sty)?;
        let rg = self.geometry(rty)?;
        let mut x: Vec<&Vec<u32>> = sg.regs.iter().collect();
        let mut y: Vec<&Vec<u32>> = rg.regs.iter().collect();
        x.sort();
        y.sort();
        Ok(x == y)
    }

    /// Builds the result's registers by looking up, for each, the operand register at the
    /// mapped coordinates (thread offsets agree by construction of the two layouts).
    fn remap(
        &mut self,
        src: Value,
        rty: &Type,
        map: impl Fn(&[u32]) -> Vec<u32>,
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let sty = *self.func.ty(src);
        let sg = self.geometry(&sty)?;
        let rg = self.geometry(rty)?;
        let index: HashMap<&[u32], usize> = sg
            .regs
            .iter()
            .enumerate()
            .map(|(i, c)| (c.as_slice(), i))
            .collect();
        let regs = self.get(src)?.clone();
        let mut out = Vec::with_capacity(rg.regs.len());
        for c in rg.regs.iter() {
            let key = map(c);
            match index.get(key.as_slice()) {
                Some(&i) => out.push(regs[i]),
                None => return self.internal("layouts of a reshaping op do not line up"),
            }
        }
        Ok(out)
    }

    pub fn constant(&self, c: Const, e: Elem) -> R<BasicValueEnum<'ctx>> {
        let Elem::Num(d) = e else {
            return self.internal("pointer constant");
        };
        let t = dtype_type(self.cx, d);
        if d.is_fp8() {
            let x = match c {
                Const::Int(i) => i as f64,
                Const::Float(f) => f,
            };
            return Ok(self
                .cx
                .i8_type()
                .const_int(tile_ir::f64_to_fp8(x, d) as u64, false)
                .into());
        }
        Ok(match (c, t) {
            (Const::Int(i), BasicTypeEnum::IntType(it)) => {
                it.const_int(i as u64, d.is_signed()).into()
            }
            (Const::Float(f), BasicTypeEnum::FloatType(ft)) => ft.const_float(f).into(),
            (Const::Int(i), BasicTypeEnum::FloatType(ft)) => ft.const_float(i as f64).into(),
            (Const::Float(f), BasicTypeEnum::IntType(it)) => {
                it.const_int(f as i64 as u64, true).into()
            }
            _ => return self.internal("constant type"),
        })
    }

    /// Scratch shared memory for one op (layout conversions, reductions, staging): it starts
    /// past the ring buffers while those are live, and is reused by the next op.
    pub fn shared_scratch(&mut self, bytes: u32) -> R<inkwell::values::PointerValue<'ctx>> {
        let base = self.scratch_base;
        let g = self.shared_buffer(base + bytes).as_pointer_value();
        if base == 0 {
            return Ok(g);
        }
        // SAFETY of the GEP: the buffer was sized to hold `base + bytes`.
        Ok(unsafe {
            self.b
                .build_gep(self.cx.i8_type(), g, &[self.i32(base as u64)], "scratch")?
        })
    }

    /// The shared buffer: one, sized for the largest use.
    pub fn shared_buffer(&mut self, bytes: u32) -> GlobalValue<'ctx> {
        self.smem_bytes = self.smem_bytes.max(bytes.next_multiple_of(16));
        match self.smem {
            Some(g) => g,
            None => {
                let g = self.module.add_global(
                    self.cx.i8_type().array_type(0),
                    Some(shared()),
                    "tiles_smem",
                );
                g.set_linkage(Linkage::External);
                g.set_alignment(if self.warpgroup { 1024 } else { 16 });
                self.smem = Some(g);
                g
            }
        }
    }

    fn lower_for(&mut self, op: Op) -> R<()> {
        let data = self.func.ops[op].clone();
        let lb = self.get(data.operands[0])?[0].into_int_value();
        let ub = self.get(data.operands[1])?[0].into_int_value();
        let step = self.get(data.operands[2])?[0].into_int_value();
        let signed = self
            .func
            .ty(data.operands[0])
            .dtype()
            .is_some_and(|d| d.is_signed());
        let inits: Vec<Vec<BasicValueEnum>> = data.operands[3..]
            .iter()
            .map(|&v| self.get(v).cloned())
            .collect::<R<_>>()?;
        let pre = self.b.get_insert_block().expect("positioned");
        let header = self.cx.append_basic_block(self.kernel, "for.header");
        let body = self.cx.append_basic_block(self.kernel, "for.body");
        let exit = self.cx.append_basic_block(self.kernel, "for.exit");
        self.b.build_unconditional_branch(header)?;
        self.b.position_at_end(header);
        let iv = self.b.build_phi(lb.get_type(), "iv")?;
        iv.add_incoming(&[(&lb, pre)]);
        let mut phis: Vec<Vec<PhiValue>> = Vec::new();
        for regs in &inits {
            let mut ps = Vec::new();
            for r in regs {
                let p = self.b.build_phi(r.get_type(), "iter")?;
                p.add_incoming(&[(r, pre)]);
                ps.push(p);
            }
            phis.push(ps);
        }
        let ivv = iv.as_basic_value().into_int_value();
        let pred = if signed {
            IntPredicate::SLT
        } else {
            IntPredicate::ULT
        };
        let cond = self.b.build_int_compare(pred, ivv, ub, "for.cond")?;
        self.b.build_conditional_branch(cond, body, exit)?;
        self.b.position_at_end(body);
        let rb = self.func.region_block(op, 0);
        // The previous iteration may have left readers of the shared buffer behind, unless
        // the body never touches shared memory.
        let busy_before = self.smem_busy;
        let body_uses_smem = self.block_may_use_smem(rb);
        self.smem_busy |= body_uses_smem;
        let args = self.func.blocks[rb].args.clone();
        self.vals.insert(args[0], vec![ivv.into()]);
        for (k, ps) in phis.iter().enumerate() {
            self.vals
                .insert(args[k + 1], ps.iter().map(|p| p.as_basic_value()).collect());
        }
        self.loop_depth += 1;
        let yields = self.lower_block(rb)?;
        self.loop_depth -= 1;
        let next = self.b.build_int_add(ivv, step, "iv.next")?;
        let latch = self.b.get_insert_block().expect("positioned");
        iv.add_incoming(&[(&next, latch)]);
        for (k, ps) in phis.iter().enumerate() {
            let regs = self.get(yields[k])?.clone();
            for (i, p) in ps.iter().enumerate() {
                let r = if regs.len() == 1 { regs[0] } else { regs[i] };
                p.add_incoming(&[(&r, latch)]);
            }
        }
        self.b.build_unconditional_branch(header)?;
        self.b.position_at_end(exit);
        self.smem_busy = body_uses_smem || busy_before;
        let yield_op = *self.func.blocks[rb]
            .ops
            .last()
            .expect("a body ends in yield");
        let mut in_flight = Vec::new();
        for (k, &res) in data.results.iter().enumerate() {
            self.vals
                .insert(res, phis[k].iter().map(|p| p.as_basic_value()).collect());
            let y = self.func.ops[yield_op].operands[k];
            if let tile_ir::ValueDef::Result(d, _) = self.func.values[y].def {
                if self.async_dots.contains(&d) || self.deferred.dots.contains(&d) {
                    in_flight.push(res);
                }
            }
        }
        if !in_flight.is_empty() {
            self.wait_warpgroups(0, &in_flight)?;
        }
        Ok(())
    }

    fn lower_while(&mut self, op: Op) -> R<()> {
        let data = self.func.ops[op].clone();
        let inits: Vec<Vec<BasicValueEnum>> = data
            .operands
            .iter()
            .map(|&v| self.get(v).cloned())
            .collect::<R<_>>()?;
        let pre = self.b.get_insert_block().expect("positioned");
        let header = self.cx.append_basic_block(self.kernel, "while.cond");
        let body = self.cx.append_basic_block(self.kernel, "while.body");
        let exit = self.cx.append_basic_block(self.kernel, "while.exit");
        self.b.build_unconditional_branch(header)?;
        self.b.position_at_end(header);
        let mut phis: Vec<Vec<PhiValue>> = Vec::new();
        for regs in &inits {
            let mut ps = Vec::new();
            for r in regs {
                let p = self.b.build_phi(r.get_type(), "state")?;
                p.add_incoming(&[(r, pre)]);
                ps.push(p);
            }
            phis.push(ps);
        }
        self.smem_busy = true;
        let before = self.func.region_block(op, 0);
        let bargs = self.func.blocks[before].args.clone();
        for (k, ps) in phis.iter().enumerate() {
            self.vals
                .insert(bargs[k], ps.iter().map(|p| p.as_basic_value()).collect());
        }
        self.loop_depth += 1;
        let ys = self.lower_block(before)?;
        let cond = self.get(ys[0])?[0].into_int_value();
        let passed: Vec<Vec<BasicValueEnum>> = ys[1..]
            .iter()
            .map(|&v| self.get(v).cloned())
            .collect::<R<_>>()?;
        self.b.build_conditional_branch(cond, body, exit)?;
        self.b.position_at_end(body);
        let after = self.func.region_block(op, 1);
        let aargs = self.func.blocks[after].args.clone();
        for (k, regs) in passed.iter().enumerate() {
            self.vals.insert(aargs[k], regs.clone());
        }
        let next = self.lower_block(after)?;
        self.loop_depth -= 1;
        let latch = self.b.get_insert_block().expect("positioned");
        for (k, ps) in phis.iter().enumerate() {
            let regs = self.get(next[k])?.clone();
            for (i, p) in ps.iter().enumerate() {
                let r = if regs.len() == 1 { regs[0] } else { regs[i] };
                p.add_incoming(&[(&r, latch)]);
            }
        }
        self.b.build_unconditional_branch(header)?;
        self.b.position_at_end(exit);
        for (k, &res) in data.results.iter().enumerate() {
            self.vals.insert(res, passed[k].clone());
        }
        Ok(())
    }

    fn lower_if(&mut self, op: Op) -> R<()> {
        let data = self.func.ops[op].clone();
        let cond = self.get(data.operands[0])?[0].into_int_value();
        let then_bb = self.cx.append_basic_block(self.kernel, "if.then");
        let else_bb = self.cx.append_basic_block(self.kernel, "if.else");
        let merge = self.cx.append_basic_block(self.kernel, "if.end");
        self.b.build_conditional_branch(cond, then_bb, else_bb)?;
        let mut arms = Vec::new();
        let busy_before = self.smem_busy;
        let mut busy_after = false;
        for (i, bb) in [then_bb, else_bb].into_iter().enumerate() {
            self.smem_busy = busy_before;
            self.b.position_at_end(bb);
            let rb = self.func.region_block(op, i);
            let ys = self.lower_block(rb)?;
            let regs: Vec<Vec<BasicValueEnum>> =
                ys.iter().map(|&y| self.get(y).cloned()).collect::<R<_>>()?;
            let end = self.b.get_insert_block().expect("positioned");
            self.b.build_unconditional_branch(merge)?;
            arms.push((regs, end));
            busy_after |= self.smem_busy;
        }
        self.smem_busy = busy_after;
        self.b.position_at_end(merge);
        for (k, &res) in data.results.iter().enumerate() {
            let ty = *self.func.ty(res);
            let n = self.nregs(&ty)?;
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                let pick = |regs: &Vec<BasicValueEnum<'ctx>>| {
                    if regs.len() == 1 {
                        regs[0]
                    } else {
                        regs[i]
                    }
                };
                let a = pick(&arms[0].0[k]);
                let p = self.b.build_phi(a.get_type(), "if.res")?;
                p.add_incoming(&[(&a, arms[0].1), (&pick(&arms[1].0[k]), arms[1].1)]);
                out.push(p.as_basic_value());
            }
            self.vals.insert(res, out);
        }
        Ok(())
    }
}
