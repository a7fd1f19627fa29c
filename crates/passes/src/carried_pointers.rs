//! Loop-carried pointer tiles stepped by a scalar become one carried scalar.
//!
//! A loop such as a matmul's carries its pointer tiles and steps each by a scalar:
//!
//! ```text
//! %p = for ... (%a) { ... load/copy %a ...; %n = addptr %a, splat(%d); yield %n }
//! ```
//!
//! Every thread then keeps one 64-bit pointer per vector in the loop and adds the step to each
//! in place, right after its last copy read it. ptxas keeps the old value for the copy still
//! reading it, and moves pointer halves into register pairs: 31-42 moves in a 128x128x64
//! matmul's loop of 150-160 instructions. Instead the loop carries one scalar per tile, and
//! the body rebuilds the tile just before its first reader:
//! - where the tile is built from a scalar pointer `%b` (`splat`, then `addptr` of offsets,
//!   `broadcast`, `expand_dims`: `ptr + rows[:, None] * s + cols[None, :]`, possibly stepped
//!   further by scalars before the loop), the loop carries the scalar pointer `%b`, stepped by
//!   `%d`, and the body builds the tile from it the same way: per thread one uniform pointer
//!   and loop-invariant offsets;
//! - otherwise it carries an i64 offset `%o` from the tile's start (stepped by `%d`, extended
//!   as `addptr` extends it), and the body reads `addptr(%init, splat(%o))`.
//!
//! Exact: pointer arithmetic is modular, and both forms add the same element offsets to the
//! same pointers, each extended as `addptr` extends it (signed, or unsigned for unsigned
//! offsets).

use crate::software_pipeline::Cursor;
use tile_ir::{BinaryOp, Block, Const, DType, Function, Op, OpKind, Type, Value, ValueDef};

/// Whether the pipeline runs this pass: on unless `TILES_REBASE_POINTERS=0` (to compare).
pub fn enabled() -> bool {
    std::env::var("TILES_REBASE_POINTERS").map_or(true, |v| v != "0")
}

/// `TILES_REBASE_POINTERS=offset`: carry i64 offsets only (experiment).
fn offsets_only() -> bool {
    std::env::var("TILES_REBASE_POINTERS").is_ok_and(|v| v == "offset")
}

/// Rewrites every loop-carried pointer tile stepped by a scalar; returns how many.
pub fn rebase_carried_pointers(func: &mut Function) -> usize {
    let parent = func.op_blocks();
    let loops = func.for_loops();
    loops
        .into_iter()
        .map(|l| rebase_loop(func, l, parent[&l]))
        .sum()
}

/// An element offset the same for every element of a tile.
#[derive(Clone, Copy)]
enum Uniform {
    /// `splat` of a scalar integer.
    Scalar(Value),
    /// A constant, extended to 64 bits as `addptr` extends it.
    Constant(i64),
}

/// `offsets` (an integer tile) as a [`Uniform`] offset, where it is one.
fn uniform(func: &Function, offsets: Value) -> Option<Uniform> {
    let op = func.def_op(offsets)?;
    match func.ops[op].kind {
        OpKind::Splat => {
            let s = func.ops[op].operands[0];
            let ty = func.ty(s);
            (ty.shape.rank() == 0 && ty.dtype().is_some_and(|t| t.is_int()))
                .then_some(Uniform::Scalar(s))
        }
        OpKind::Constant(Const::Int(c)) => Some(Uniform::Constant(crate::simplify::wrap(
            c.into(),
            func.ty(offsets).dtype()?,
        ))),
        _ => None,
    }
}

/// How a loop-carried pointer tile `arg` is stepped: the yield's operand `next` is
/// `addptr(arg, uniform)`, in the body itself.
fn step_of(func: &Function, body: Block, arg: Value, next: Value) -> Option<Uniform> {
    let step = func.def_op(next)?;
    let d = &func.ops[step];
    if d.kind != OpKind::AddPtr || d.operands[0] != arg {
        return None;
    }
    func.position(body, step)?;
    uniform(func, d.operands[1])
}

/// `init` as built from a scalar pointer `base`: `splat(base)` then ops that each add to every
/// element or rearrange the elements (`addptr` of loop-invariant offsets, `broadcast`,
/// `expand_dims`), as `ptr + rows[:, None] * s + cols[None, :]` builds a tile. Returns the base,
/// the uniform steps among those ops (which move to the base), and the other ops in order
/// from the `splat` on: applied to any scalar pointer `p`, they build `init` moved by
/// `p - base` (pointer arithmetic is modular, and each op moves every element alike).
fn split_base(func: &Function, init: Value) -> Option<(Value, Vec<Uniform>, Vec<Op>)> {
    let mut steps = Vec::new();
    let mut chain = Vec::new();
    let mut cur = init;
    loop {
        let op = func.def_op(cur)?;
        let d = &func.ops[op];
        match d.kind {
            OpKind::Splat => {
                chain.push(op);
                chain.reverse();
                return Some((d.operands[0], steps, chain));
            }
            OpKind::AddPtr => match uniform(func, d.operands[1]) {
                Some(u) => steps.push(u),
                None => chain.push(op),
            },
            OpKind::Broadcast | OpKind::ExpandDims(_) => chain.push(op),
            _ => return None,
        }
        cur = d.operands[0];
    }
}

/// `p` advanced by `u` at `at`: `addptr` for a pointer, `add` (of `u` extended to i64) for an
/// i64 offset.
fn advance(func: &mut Function, at: &mut Cursor, p: Value, u: Uniform) -> Value {
    let ty = *func.ty(p);
    let i64t = Type::num(DType::I64);
    let by = match u {
        Uniform::Scalar(s) if ty.elem.is_ptr() || func.ty(s).dtype() == Some(DType::I64) => s,
        Uniform::Scalar(s) => at.push(func, OpKind::Cast, vec![s], Some(i64t)),
        Uniform::Constant(c) => at.push(func, OpKind::Constant(Const::Int(c)), vec![], Some(i64t)),
    };
    let kind = if ty.elem.is_ptr() {
        OpKind::AddPtr
    } else {
        OpKind::Binary(BinaryOp::Add)
    };
    at.push(func, kind, vec![p, by], Some(ty))
}

/// What the loop carries for a pointer tile of type `tile`, and how the tile is rebuilt.
enum Carried {
    /// The tile is the ops of [`split_base`] applied to the carried base pointer.
    Base(Vec<Op>),
    /// The tile is `addptr(init, splat(carried))`.
    Offset(Value),
}

impl Carried {
    /// Builds the tile (type `tile`) from the carried scalar `c` at `at`.
    fn tile(&self, func: &mut Function, at: &mut Cursor, c: Value, tile: Type) -> Value {
        match self {
            Carried::Base(chain) => chain.iter().fold(c, |prev, &op| {
                let d = func.ops[op].clone();
                let mut operands = d.operands.clone();
                operands[0] = prev;
                at.push(func, d.kind, operands, Some(*func.ty(d.results[0])))
            }),
            Carried::Offset(init) => {
                let splat_ty = Type {
                    elem: func.ty(c).elem,
                    ..tile
                };
                let s = at.push(func, OpKind::Splat, vec![c], Some(splat_ty));
                at.push(func, OpKind::AddPtr, vec![*init, s], Some(tile))
            }
        }
    }
}

/// 32-bit registers a thread holds for the numeric tiles loop `for_op` carries (its
/// accumulators).
fn carried_words(func: &Function, for_op: Op) -> u64 {
    let threads = u64::from(func.num_warps.max(1)) * 32;
    func.ops[for_op]
        .results
        .iter()
        .map(|&r| func.ty(r))
        .filter(|t| t.shape.rank() > 0)
        .filter_map(|t| Some(t.shape.numel() * u64::from(t.dtype()?.bits().max(32)) / 32))
        .sum::<u64>()
        / threads
}

/// Loops carrying fewer accumulator registers a thread keep their pointer tiles (H200, each
/// against `TILES_REBASE_POINTERS=0` in the same run): there ptxas has registers to spare,
/// and each copy waiting on its freshly computed address costs more than the moves it saves.
/// - 128 registers (128x128 fp32 on 4 warps, 128x256 and 256x128 on 8): 4096^3 matmuls
///   249.7 -> 233.5 us (128x128x64), 226.8 -> 219.7 (256x128x64); fp8 block-scaled 128x128 on
///   4 warps 341 -> 393 TFLOP/s.
/// - 64: mixed. int8 128x128x128 on 8 warps 999 -> 868 TOPS and 64x128x64 on 4 warps
///   300.0 -> 307.2 us lost; 64x64x32 on 2 warps 60.4 -> 57.7 us (2048^3) and 128x64x64 on 4
///   warps (1-2 %) gained.
/// - 32 and less lost: 64x64x64 on 4 warps 45.5 -> 47.6 us (2048^3), vLLM's int8 MoE at 16
///   tokens 144 -> 152 us.
const MIN_CARRIED_WORDS: u64 = 128;

/// Rewrites the pointer tiles of loop `for_op`, an op of block `parent`.
fn rebase_loop(func: &mut Function, for_op: Op, parent: Block) -> usize {
    let Some((body, yield_op)) = func.loop_body(for_op) else {
        return 0;
    };
    if carried_words(func, for_op) < MIN_CARRIED_WORDS {
        return 0;
    }
    let loc = func.ops[for_op].loc;
    // Rewriting one carried value leaves the others' use counts as they are.
    let uses = func.use_counts();
    let mut done = 0;
    // From the last carried value down, so that removing one keeps the others' indices.
    for k in (0..func.ops[yield_op].operands.len()).rev() {
        let arg = func.blocks[body].args[k + 1];
        let tile = *func.ty(arg);
        if tile.shape.rank() == 0 || !tile.elem.is_ptr() {
            continue;
        }
        let next = func.ops[yield_op].operands[k];
        let Some(step) = step_of(func, body, arg, next) else {
            continue;
        };
        let init = func.ops[for_op].operands[3 + k];
        let result = func.ops[for_op].results[k];

        // Before the loop: the carried scalar's start.
        let mut pre = Cursor::before(func, parent, for_op, loc);
        let split = if offsets_only() {
            None
        } else {
            split_base(func, init)
        };
        let (carried, start) = match split {
            Some((base, steps, chain)) => {
                let start = steps
                    .into_iter()
                    .fold(base, |b, u| advance(func, &mut pre, b, u));
                (Carried::Base(chain), start)
            }
            None => {
                let i64t = Type::num(DType::I64);
                let zero = pre.push(func, OpKind::Constant(Const::Int(0)), vec![], Some(i64t));
                (Carried::Offset(init), zero)
            }
        };
        let sty = *func.ty(start);
        let (c, c_result) = func.add_carried(for_op, start, sty);

        // The body: stepped before the yield; the tile rebuilt just before its first reader,
        // not counting the step when only the yield reads it (at the top of the body, the
        // addresses of a pipelined loop's copies stayed live through its dots).
        let mut end = Cursor::before(func, body, yield_op, loc);
        let stepped = advance(func, &mut end, c, step);
        func.ops[yield_op].operands.push(stepped);
        let step_op = func.def_op(next).filter(|_| uses[next] == 1);
        let first = func.blocks[body]
            .ops
            .iter()
            .position(|&o| {
                let mut read = Vec::new();
                func.reads(o, &mut read);
                Some(o) != step_op && read.contains(&arg)
            })
            .or_else(|| step_op.and_then(|s| func.position(body, s)))
            .unwrap_or(0);
        let mut at = Cursor {
            block: body,
            pos: first,
            loc,
        };
        let rebuilt = carried.tile(func, &mut at, c, tile);
        func.replace_uses(arg, rebuilt);

        // After the loop, the final tile (where something reads it).
        if uses[result] > 0 {
            let mut after = Cursor::after(func, parent, for_op, loc);
            let r = carried.tile(func, &mut after, c_result, tile);
            func.replace_uses(result, r);
        }
        remove_carried(func, for_op, k);
        done += 1;
    }
    done
}

/// Drops carried value `k` of loop `for_op` (its init, body argument, yield operand and
/// result, none of which is read any more), renumbering the later arguments and results.
pub(crate) fn remove_carried(func: &mut Function, for_op: Op, k: usize) {
    let body = func.region_block(for_op, 0);
    let yield_op = *func.blocks[body].ops.last().expect("a yield");
    func.ops[for_op].operands.remove(3 + k);
    func.ops[yield_op].operands.remove(k);
    func.blocks[body].args.remove(k + 1);
    func.ops[for_op].results.remove(k);
    for (i, &a) in func.blocks[body].args.clone().iter().enumerate() {
        func.values[a].def = ValueDef::Arg(body, i as u32);
    }
    for (i, &r) in func.ops[for_op].results.clone().iter().enumerate() {
        func.values[r].def = ValueDef::Result(for_op, i as u32);
    }
}
