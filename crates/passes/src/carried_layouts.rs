//! A loop-carried tile that the body reads only through layout conversions is carried once per
//! layout it is read in.
//!
//! `offs_k += BLOCK_K` with `offs_k` masking both operands of a dot (`offs_k[None, :]` for `a`,
//! `offs_k[:, None]` for `b`) leaves layout assignment one carried tile read in two slice
//! layouts: two conversions through shared memory, each with its barriers, every iteration.
//! When the tile's step is elementwise with a uniform operand (a splat or a constant), the
//! step is as cheap in any layout, so the loop carries one copy per layout read instead, each
//! converted once before the loop and stepped in its own layout:
//!
//! ```text
//! for ... (%o: #L) { %x = convert_layout %o : #X; %y = convert_layout %o : #Y; ...;
//!                    yield add(%o, splat(%d)) }
//! ```
//!
//! becomes a loop carrying `%ox: #X` and `%oy: #Y`, stepped by `add(%ox, splat(%d): #X)` and
//! `add(%oy, splat(%d): #Y)`. Exact: a conversion moves elements without changing them, and
//! the step computes the same value for every element in any layout.
//!
//! For each loop, each carried tile from the last down:
//! 1. the step: the yield's operand is a binary op of the body argument and uniform tiles;
//! 2. the readers: every other op reading the argument (in nested blocks too) converts it to a
//!    layout other than its own; the step has no other reader, the loop's result none;
//! 3. per target layout: the start converted before the loop, a new argument, the step cloned
//!    in that layout (uniform operands rebuilt in it) and yielded, the conversions' results
//!    replaced by the argument;
//! 4. the original argument, its step and the conversions dropped.

use crate::layouts::is_uniform;
use crate::software_pipeline::Cursor;
use std::collections::BTreeMap;
use tile_ir::{Block, Function, LayoutId, Op, OpKind, Type, Value};

/// Whether the pipeline runs this pass: on unless `TILES_CARRY_PER_LAYOUT=0` (to compare).
pub fn enabled() -> bool {
    std::env::var("TILES_CARRY_PER_LAYOUT").map_or(true, |v| v != "0")
}

/// Rewrites every such carried tile; returns how many.
pub fn carry_per_layout(func: &mut Function) -> usize {
    let parent = func.op_blocks();
    func.for_loops()
        .into_iter()
        .map(|l| split_loop(func, l, parent[&l]))
        .sum()
}

/// Every op in `block` and the blocks nested in it that has `v` among its own operands.
fn readers(func: &Function, block: Block, v: Value) -> Vec<Op> {
    let mut out = Vec::new();
    for &op in &func.blocks[block].ops {
        func.walk_op(op, |o| {
            if func.ops[o].operands.contains(&v) {
                out.push(o);
            }
        });
    }
    out
}

/// `uniform` (a splat or constant) rebuilt with layout `l`, at `at`.
fn uniform_in(func: &mut Function, at: &mut Cursor, uniform: Value, l: LayoutId) -> Value {
    let op = func
        .def_op(uniform)
        .expect("a uniform tile is an op's result");
    let d = func.ops[op].clone();
    let ty = Type {
        layout: Some(l),
        ..*func.ty(uniform)
    };
    at.push(func, d.kind, d.operands.clone(), Some(ty))
}

fn split_loop(func: &mut Function, for_op: Op, parent: Block) -> usize {
    let Some((body, yield_op)) = func.loop_body(for_op) else {
        return 0;
    };
    let loc = func.ops[for_op].loc;
    // Rewriting one carried value leaves the others' use counts as they are.
    let uses = func.use_counts();
    let mut done = 0;
    // From the last carried value down, so that removing one keeps the others' indices.
    for k in (0..func.ops[yield_op].operands.len()).rev() {
        let arg = func.blocks[body].args[k + 1];
        let ty = *func.ty(arg);
        let Some(own) = ty.layout else { continue };
        if ty.shape.rank() == 0 || ty.elem.is_ptr() {
            continue;
        }
        // The step: `arg <op> uniform` (either order), elementwise, in the body itself.
        let next = func.ops[yield_op].operands[k];
        let Some(step) = func.def_op(next) else {
            continue;
        };
        let sd = func.ops[step].clone();
        if !matches!(sd.kind, OpKind::Binary(_))
            || !func.blocks[body].ops.contains(&step)
            || !sd.operands.contains(&arg)
            || !sd.operands.iter().all(|&o| o == arg || is_uniform(func, o))
        {
            continue;
        }
        // Every other reader converts it, each to another layout; nothing else reads the step.
        let rd = readers(func, body, arg);
        let mut converts: BTreeMap<LayoutId, Vec<Op>> = BTreeMap::new();
        let mut ok = true;
        for &op in &rd {
            if op == step {
                continue;
            }
            let d = &func.ops[op];
            // (A store reads it without a result: not a conversion.)
            match d.results.first().and_then(|&r| func.ty(r).layout) {
                Some(l) if d.kind == OpKind::ConvertLayout && l != own => {
                    converts.entry(l).or_default().push(op)
                }
                _ => ok = false,
            }
        }
        if !ok || converts.is_empty() || uses[next] != 1 || uses[func.ops[for_op].results[k]] != 0 {
            continue;
        }
        let init = func.ops[for_op].operands[3 + k];
        for (&l, ops) in &converts {
            let lty = Type {
                layout: Some(l),
                ..ty
            };
            // Before the loop: the start, converted once.
            let mut pre = Cursor::before(func, parent, for_op, loc);
            let start = pre.push(func, OpKind::ConvertLayout, vec![init], Some(lty));
            let (a, _) = func.add_carried(for_op, start, lty);
            // Stepped in its own layout, before the yield.
            let mut end = Cursor::before(func, body, yield_op, loc);
            let operands: Vec<Value> = sd
                .operands
                .iter()
                .map(|&o| {
                    if o == arg {
                        a
                    } else {
                        uniform_in(func, &mut end, o, l)
                    }
                })
                .collect();
            let stepped = end.push(func, sd.kind, operands, Some(lty));
            func.ops[yield_op].operands.push(stepped);
            for &op in ops {
                let r = func.ops[op].results[0];
                func.replace_uses(r, a);
            }
        }
        // The original copy is read by its step alone now: dropped with the dead conversions.
        let dead: Vec<Op> = converts.values().flatten().copied().chain([step]).collect();
        for b in func.blocks.keys().collect::<Vec<_>>() {
            func.blocks[b].ops.retain(|o| !dead.contains(o));
        }
        crate::carried_pointers::remove_carried(func, for_op, k);
        done += 1;
    }
    done
}
