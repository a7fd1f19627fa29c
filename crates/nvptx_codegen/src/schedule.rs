//! Puts each block's pure instructions next to their first use, after LLVM's optimisation and
//! before instruction selection.
//!
//! tiles lowers a tile operation for all of a thread's elements at once, so a block reads
//! "16 converts, 16 subtracts, 16 multiplies, 16 adds", and LLVM's NVPTX selection keeps that
//! order. Triton's vectorised lowering leaves one element's chain together (convert, subtract,
//! multiply, fma), and so does this pass. ptxas starts from the order it is given:
//! - flash attention ran 0.5–3.5 % faster on an H200, each of its five benchmark shapes
//!   averaged over three rounds with and without (14 of the 15 pairs faster; 128x128 tiles:
//!   345–348 TFLOP/s against 341–344); matmul, softmax and layernorm stayed within their
//!   run-to-run spread;
//! - layernorm's last loop with fp fusion took 32 registers instead of 40 (its bandwidth did not
//!   change);
//! - of the 167 distinct kernels the tests compile, 12 took more registers and 5 fewer, none
//!   spilled.
//!
//! `TILES_LLVM_CHAINS=0` keeps LLVM's order, to compare.
//!
//! Only instructions without side effects whose users all sit later in the same block move,
//! each to just before its first user, and none past a memory read or a call (loads, inline
//! asm, barriers, atomics): before each such instruction, the pure instructions defined above
//! it and used below it are placed. Sinking past loads left an FMA-built dot product's loads
//! all ahead of its FMAs, and it spilled. Everything else keeps its order. It is a
//! data-dependence reordering, so results are bit-identical.

use inkwell::llvm_sys::core::{
    LLVMDisposeBuilder, LLVMGetBasicBlockTerminator, LLVMGetCalledValue, LLVMGetFirstBasicBlock,
    LLVMGetFirstFunction, LLVMGetFirstInstruction, LLVMGetFirstUse, LLVMGetInstructionOpcode,
    LLVMGetInstructionParent, LLVMGetNextBasicBlock, LLVMGetNextFunction, LLVMGetNextInstruction,
    LLVMGetNextUse, LLVMGetNumOperands, LLVMGetOperand, LLVMGetUser, LLVMGetValueName2,
    LLVMInsertIntoBuilderWithName, LLVMInstructionRemoveFromParent, LLVMIsAInstruction,
    LLVMPositionBuilderBefore, LLVMSetCurrentDebugLocation2,
};
use inkwell::llvm_sys::prelude::{LLVMBasicBlockRef, LLVMModuleRef, LLVMValueRef};
use inkwell::llvm_sys::LLVMOpcode;
use std::collections::HashMap;

/// Intrinsics without side effects that may move (by name prefix).
const PURE_INTRINSICS: [&str; 9] = [
    "llvm.fma.",
    "llvm.nvvm.ff2", // two f32s rounded into f16x2 / bf16x2 (`pack_rounded_pairs`)
    "llvm.fmuladd.",
    "llvm.fabs.",
    "llvm.minnum.",
    "llvm.maxnum.",
    "llvm.minimum.",
    "llvm.maximum.",
    "llvm.copysign.",
];

/// Whether `inst` may move within its block: it reads and writes no memory, cannot trap, and
/// is not a phi or terminator.
///
/// # Safety
/// `inst` is a live instruction.
unsafe fn is_pure(inst: LLVMValueRef) -> bool {
    use LLVMOpcode::*;
    match LLVMGetInstructionOpcode(inst) {
        LLVMAdd | LLVMFAdd | LLVMSub | LLVMFSub | LLVMMul | LLVMFMul | LLVMShl | LLVMLShr
        | LLVMAShr | LLVMAnd | LLVMOr | LLVMXor | LLVMTrunc | LLVMZExt | LLVMSExt | LLVMFPToUI
        | LLVMFPToSI | LLVMUIToFP | LLVMSIToFP | LLVMFPTrunc | LLVMFPExt | LLVMPtrToInt
        | LLVMIntToPtr | LLVMBitCast | LLVMAddrSpaceCast | LLVMICmp | LLVMFCmp | LLVMSelect
        | LLVMGetElementPtr | LLVMExtractElement | LLVMInsertElement | LLVMShuffleVector
        | LLVMExtractValue | LLVMInsertValue | LLVMFNeg | LLVMFreeze => true,
        LLVMCall => {
            let callee = LLVMGetCalledValue(inst);
            let mut len = 0usize;
            let name = LLVMGetValueName2(callee, &mut len);
            if name.is_null() {
                return false;
            }
            let name = std::slice::from_raw_parts(name as *const u8, len);
            PURE_INTRINSICS
                .iter()
                .any(|p| name.starts_with(p.as_bytes()))
        }
        _ => false,
    }
}

/// Reorders every block of every function in `module` (see the module's documentation).
///
/// # Safety
/// `module` is a live, verified module that no other thread uses.
pub(crate) unsafe fn chain_pure_instructions(module: LLVMModuleRef) {
    let cx = inkwell::llvm_sys::core::LLVMGetModuleContext(module);
    let builder = inkwell::llvm_sys::core::LLVMCreateBuilderInContext(cx);
    let mut f = LLVMGetFirstFunction(module);
    while !f.is_null() {
        let mut bb = LLVMGetFirstBasicBlock(f);
        while !bb.is_null() {
            reorder_block(bb, builder);
            bb = LLVMGetNextBasicBlock(bb);
        }
        f = LLVMGetNextFunction(f);
    }
    LLVMDisposeBuilder(builder);
}

/// # Safety
/// `bb` is a live block with a terminator; `builder` a live builder of its context.
unsafe fn reorder_block(
    bb: LLVMBasicBlockRef,
    builder: inkwell::llvm_sys::prelude::LLVMBuilderRef,
) {
    let term = LLVMGetBasicBlockTerminator(bb);
    if term.is_null() {
        return;
    }
    let mut insts = Vec::new();
    let mut i = LLVMGetFirstInstruction(bb);
    while !i.is_null() && i != term {
        if LLVMGetInstructionOpcode(i) != LLVMOpcode::LLVMPHI {
            insts.push(i);
        }
        i = LLVMGetNextInstruction(i);
    }
    if insts.len() < 3 {
        return;
    }
    let index: HashMap<LLVMValueRef, usize> =
        insts.iter().enumerate().map(|(k, &v)| (v, k)).collect();
    // Movable: pure, with users, all of them later in this block (phis excluded: a phi user
    // reads the value on an edge, after the terminator). `last_use`: its last user's index.
    let pure: Vec<bool> = insts.iter().map(|&v| is_pure(v)).collect();
    let mut last_use = vec![0usize; insts.len()];
    let movable: Vec<bool> = insts
        .iter()
        .enumerate()
        .map(|(k, &v)| {
            if !pure[k] {
                return false;
            }
            let mut u = LLVMGetFirstUse(v);
            if u.is_null() {
                return false;
            }
            while !u.is_null() {
                match index.get(&LLVMGetUser(u)) {
                    Some(&j) if j > k => last_use[k] = last_use[k].max(j),
                    _ => return false,
                }
                u = LLVMGetNextUse(u);
            }
            true
        })
        .collect();
    if !movable.iter().any(|&m| m) {
        return;
    }
    // The other instructions stay in their order. Before each, the movable instructions it
    // needs that are not placed yet, operands first. Nothing moves past a memory read or a
    // call (a barrier): before one, the movable instructions defined above it and used below
    // it are placed, each chain from its last instruction. Sinking past loads would leave the
    // loads' values waiting (an FMA-built dot product's loads all ahead of its FMAs spilled).
    let n = insts.len();
    let mut b = Placement {
        insts: &insts,
        index: &index,
        movable: &movable,
        bb,
        placed: vec![false; n],
        order: Vec::with_capacity(n),
        stack: Vec::new(),
    };
    let mut pending: Vec<usize> = Vec::new();
    for a in 0..n {
        if movable[a] {
            pending.push(a);
            continue;
        }
        // A barrier: a memory read or a call other than a pure intrinsic (stores are not).
        if !pure[a] && LLVMGetInstructionOpcode(insts[a]) != LLVMOpcode::LLVMStore {
            for &j in &pending {
                if last_use[j] >= a {
                    b.place(j);
                }
            }
            pending.retain(|&j| !b.placed[j]);
        }
        b.place(a);
    }
    let order = b.order;
    debug_assert_eq!(order.len(), insts.len());
    if order.len() != insts.len() || order.iter().zip(&insts).all(|(a, b)| a == b) {
        return;
    }
    LLVMPositionBuilderBefore(builder, term);
    // Positioning takes the terminator's debug location; the moved instructions keep theirs.
    LLVMSetCurrentDebugLocation2(builder, std::ptr::null_mut());
    for &v in &order {
        let mut len = 0usize;
        let name = LLVMGetValueName2(v, &mut len);
        let name = if len == 0 { c"".as_ptr() } else { name };
        LLVMInstructionRemoveFromParent(v);
        LLVMInsertIntoBuilderWithName(builder, v, name);
    }
}

/// A block's new order as it is built.
struct Placement<'a> {
    insts: &'a [LLVMValueRef],
    index: &'a HashMap<LLVMValueRef, usize>,
    movable: &'a [bool],
    bb: LLVMBasicBlockRef,
    placed: Vec<bool>,
    order: Vec<LLVMValueRef>,
    /// (instruction, whether its operands are placed): chains can be thousands long.
    stack: Vec<(usize, bool)>,
}

impl Placement<'_> {
    /// Appends `insts[k]`, if not placed yet, after the movable instructions it needs that are
    /// not placed yet (operands first).
    ///
    /// # Safety
    /// The instructions are live and belong to `bb`.
    unsafe fn place(&mut self, k: usize) {
        self.stack.push((k, false));
        while let Some((k, expanded)) = self.stack.pop() {
            if self.placed[k] {
                continue;
            }
            if expanded {
                self.placed[k] = true;
                self.order.push(self.insts[k]);
                continue;
            }
            self.stack.push((k, true));
            let v = self.insts[k];
            // Pushed last operand first, so that the first operand's chain comes out first.
            for o in (0..LLVMGetNumOperands(v).max(0) as u32).rev() {
                let op = LLVMGetOperand(v, o);
                if op.is_null()
                    || LLVMIsAInstruction(op).is_null()
                    || LLVMGetInstructionParent(op) != self.bb
                {
                    continue;
                }
                if let Some(&j) = self.index.get(&op) {
                    if self.movable[j] && !self.placed[j] {
                        self.stack.push((j, false));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use inkwell::context::Context;
    use inkwell::memory_buffer::MemoryBuffer;
    use inkwell::values::AnyValue;

    /// The instructions of `@f`'s blocks in order, as text, after the reordering.
    fn reordered(ir: &str) -> Vec<String> {
        let cx = Context::create();
        let buf = MemoryBuffer::create_from_memory_range_copy(ir.as_bytes(), "t");
        let module = cx.create_module_from_ir(buf).expect("test IR parses");
        // SAFETY: a verified module of this thread's context.
        unsafe { super::chain_pure_instructions(module.as_mut_ptr()) };
        module.verify().expect("still valid");
        let f = module.get_function("f").expect("@f");
        f.get_basic_block_iter()
            .flat_map(|bb| bb.get_instructions())
            .map(|i| i.print_to_string().to_string().trim().to_string())
            .collect()
    }

    fn pos(insts: &[String], prefix: &str) -> usize {
        insts
            .iter()
            .position(|i| i.starts_with(prefix))
            .unwrap_or_else(|| panic!("{prefix} in {insts:#?}"))
    }

    #[test]
    fn an_elements_chain_comes_together() {
        let insts = reordered(
            "define void @f(ptr %p, float %m, float %r) {
               %x = load <2 x float>, ptr %p
               %a = extractelement <2 x float> %x, i32 0
               %b = extractelement <2 x float> %x, i32 1
               %sa = fsub float %a, %m
               %sb = fsub float %b, %m
               %ma = fmul float %sa, %r
               %mb = fmul float %sb, %r
               %v0 = insertelement <2 x float> poison, float %ma, i32 0
               %v1 = insertelement <2 x float> %v0, float %mb, i32 1
               store <2 x float> %v1, ptr %p
               ret void
             }",
        );
        // Element 0's extract, subtract, multiply, then element 1's.
        let order: Vec<usize> = [
            "%a =", "%sa =", "%ma =", "%v0 =", "%b =", "%sb =", "%mb =", "%v1 =", "store",
        ]
        .iter()
        .map(|p| pos(&insts, p))
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{insts:#?}");
    }

    #[test]
    fn nothing_moves_past_a_load_or_a_call() {
        let insts = reordered(
            "declare void @g()
             define void @f(ptr %p, ptr %q, float %c) {
               %x = load float, ptr %p
               %y = fmul float %x, %c
               %z = load float, ptr %q
               call void @g()
               %w = fadd float %y, %z
               store float %w, ptr %p
               ret void
             }",
        );
        // %y would sink to %w; the load of %z (and the call) keep it above them.
        assert!(pos(&insts, "%y =") < pos(&insts, "%z ="), "{insts:#?}");
        assert!(
            pos(&insts, "%z =") < pos(&insts, "call void @g"),
            "{insts:#?}"
        );
    }

    #[test]
    fn values_used_in_other_blocks_or_by_phis_stay() {
        let insts = reordered(
            "define float @f(float %a, float %b, i1 %c) {
             entry:
               %s = fadd float %a, %b
               %t = fmul float %a, %a
               %u = fmul float %t, %b
               br i1 %c, label %next, label %exit
             next:
               br label %exit
             exit:
               %r = phi float [ %s, %entry ], [ %u, %next ]
               ret float %r
             }",
        );
        assert!(pos(&insts, "%s =") < pos(&insts, "%t ="), "{insts:#?}");
    }
}
